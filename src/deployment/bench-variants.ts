/**
 * The runs `abacus bench` and `abacus simulate` compare, assembled (docs/design.md#deployment-and-cli,
 * docs/threads.md): one environment (device + predictor) for every policy, and on a real CPU a
 * second one for the strong form of the one-query-at-a-time policies, which gives the lone query
 * every core and predicts its drops with a solo-only predictor profiled with that many threads.
 *
 * Inputs: the hosted services, the policy entries to run, the predictor already chosen for them
 * and the thread settings. Outputs: the variants in run order (policy, environment, label, intra-op
 * threads), and `close` for the devices opened. Running them and printing are the CLI's
 * (`cli/experiment.ts`).
 */
import os from 'node:os';
import type { Predictor } from '../predict/predictor.ts';
import type { ExperimentEnv } from '../runtime/experiment.ts';
import { POLICY_VARIANTS } from '../schedule/index.ts';
import type { ThreadRule } from '../threads.ts';
import type { DeploymentContext } from './context.ts';
import type { LoadSample } from './load-conditions.ts';
import type { ModelRepository } from '../model/repository.ts';
import { AUTO_PROFILE, ensurePredictor, openEnv, type Hosted } from './services.ts';

/**
 * Policies that run one whole query at a time: on a real CPU the strong form of each gives the
 * lone query every core (docs/threads.md), so `bench` on ort runs them a second time with
 * intra-op threads = `os.availableParallelism()`.
 */
export const SOLO_POLICIES: readonly string[] = ['fcfs', 'sjf', 'edf'];

/** The all-cores runs' solo-only predictor profiles this share of the group predictor's samples (solo shapes are few). */
export const SOLO_PROFILE_SHARE = 0.25;

/** One run of the comparison. */
export interface BenchVariant {
  /** The policy entry (a policy, or a variant: `POLICY_VARIANTS`). */
  readonly policy: string;
  readonly env: ExperimentEnv;
  /** Its label in the results; undefined: the policy's name. */
  readonly label: string | undefined;
  /** Intra-op threads of its executors. */
  readonly threads: number;
}

export interface BenchVariantsOptions {
  /** Policy entries in run order. */
  readonly policies: readonly string[];
  /** The `threads` parameter a policy entry's controller is configured with (`'device'`: the device's own). */
  readonly threadParamOf: (policy: string) => unknown;
  /** The predictor of the main environment (undefined when no policy needs one). */
  readonly predictor: Predictor | undefined;
  /** Where that predictor came from (a file given: the all-cores runs use it too, with a note). */
  readonly predictorFile: string | undefined;
  /** The thread rules the main device opens sessions for. */
  readonly threadRules: readonly ThreadRule[];
  /** `--threads`: the executors' default intra-op threads (absent: 1). */
  readonly threads: number | undefined;
  /** Run the all-cores form of the solo policies on a real CPU (`--no-all-cores`: false). */
  readonly allCores: boolean;
  /** Profile samples of the group predictor (the solo-only one gets `SOLO_PROFILE_SHARE` of them). */
  readonly profileSamples: number | undefined;
  /** No progress lines (`--json`). */
  readonly quiet: boolean;
  /** The load reading taken before any profiling (`PredictorRequest.loadBefore`). */
  readonly loadBefore: LoadSample;
  readonly seed: number;
  /** Virtual clock (`simulate`), else wall clock. */
  readonly virtual: boolean;
}

/**
 * Open the environments and list the variants: each policy entry once on the main environment;
 * on a real CPU with fewer `threads` than cores, each solo policy that takes the device's thread
 * count once more on an all-cores environment (labels `fcfs (1 thread)`, `fcfs (N threads)`).
 * @throws what `ensurePredictor` and `openEnv` throw (nothing stays open then).
 */
export async function openBenchVariants(ctx: DeploymentContext, repo: ModelRepository, hosted: Hosted, o: BenchVariantsOptions): Promise<{ readonly variants: BenchVariant[]; readonly close: () => Promise<void> }> {
  const cores = os.availableParallelism();
  const threads = o.threads ?? 1;
  const wideThreads = cores;
  const widePolicies = !hosted.isSim && o.allCores && threads < cores ? o.policies.filter((p) => SOLO_POLICIES.includes(p) && o.threadParamOf(p) === 'device') : [];
  const wide =
    widePolicies.length > 0 && o.predictorFile === undefined
      ? await ensurePredictor(ctx, repo, hosted, { samples: Math.max(10, Math.round((o.profileSamples ?? AUTO_PROFILE.ortSamples) * SOLO_PROFILE_SHARE)), threads: wideThreads, maxGroupSize: 1, quiet: o.quiet, loadBefore: o.loadBefore })
      : undefined;
  if (widePolicies.length > 0 && o.predictorFile !== undefined && !o.quiet) ctx.err(`note: ${widePolicies.join(', ')} with ${wideThreads} threads use the given predictor (profiled with its own thread count) for their drop rule\n`);
  const env = await openEnv(hosted, o.predictor, { virtual: o.virtual, seed: o.seed, ...(o.threads === undefined ? {} : { threads: o.threads }), threadRules: o.threadRules });
  let wideEnv: (ExperimentEnv & { close(): Promise<void> }) | undefined;
  try {
    wideEnv = widePolicies.length > 0 ? await openEnv(hosted, wide?.predictor ?? o.predictor, { virtual: false, seed: o.seed, threads: wideThreads }) : undefined;
  } catch (err) {
    await env.close();
    throw err;
  }
  const label = (policy: string, n: number): string => `${policy} (${n} thread${n === 1 ? '' : 's'})`;
  const variants = o.policies.flatMap((policy): BenchVariant[] =>
    wideEnv !== undefined && widePolicies.includes(policy)
      ? [
          { policy, env, label: label(policy, threads), threads },
          { policy, env: wideEnv, label: label(policy, wideThreads), threads: wideThreads },
        ]
      : [{ policy, env, label: POLICY_VARIANTS[policy] === undefined ? undefined : policy, threads }],
  );
  return {
    variants,
    close: async () => {
      await env.close();
      await wideEnv?.close();
    },
  };
}
