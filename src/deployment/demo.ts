/**
 * The assembly behind `abacus demo` and the contention benchmark (docs/design.md#deployment-and-cli,
 * docs/demo.md): the demo's models and query mix hosted on `ort`, each query shape measured
 * alone, and the interleaved rounds in which every policy variant serves the same Poisson
 * arrivals on one device.
 *
 * Inputs: model names, the thread count of the executors, the trained predictor and the policy
 * variants to compare. Outputs: the `Hosted` services, each service's solo latencies (`Solo`), and
 * per round the load average, the overlap ratio and each variant's `ExperimentResult`. Nothing
 * here prints: progress goes to the caller's hooks (the CLI's stderr and progress bars);
 * pooling, verdict, tables and report are the CLI's (`cli/demo*.ts`).
 */
import os from 'node:os';
import type { Device } from '../device/device.ts';
import { measureOverlap, type OverlapMeasurement } from '../device/overlap.ts';
import type { ModelArtifact } from '../model/artifact.ts';
import { resolveModelArtifact } from '../model/catalog.ts';
import { segmentGflops } from '../model/cost.ts';
import type { ModelRepository } from '../model/repository.ts';
import type { ModelSpec } from '../model/spec.ts';
import type { Predictor } from '../predict/predictor.ts';
import { parseServingConfig } from '../runtime/config.ts';
import { runExperiment, type ExperimentResult, type ExperimentService } from '../runtime/experiment.ts';
import { median } from '../stats.ts';
import type { ThreadRule } from '../threads.ts';
import type { DeploymentContext } from './context.ts';
import { sampleLoad } from './load-conditions.ts';
import { deviceServiceOf, openEnv, type Hosted } from './services.ts';

/** The demo's own variants (`model/catalog.ts` `DEMO_ZOO_OPTIONS`; every command accepts these names). */
export const DEMO_MODELS: Readonly<Record<string, { readonly about: string }>> = {
  'resnet50-demo': { about: 'ResNet-50 at 128 px, half width' },
  'bert-demo': { about: 'BERT, 8 layers, hidden 256, 4 heads' },
};

export const DEFAULT_MODELS = ['resnet50-demo', 'bert-demo'] as const;
export const SMALL_MODELS = ['resnet50-small', 'bert-small'] as const;
/** Query mix: batch sizes drawn uniformly per query; sequence lengths for sequence models. */
export const BATCH_SIZES = [1, 2] as const;
export const SEQ_LENS = [32, 64] as const;
/** Timed solo runs per (service, batch, seq) after one warm-up. */
export const SOLO_REPEAT = 5;

/** Solo latency of one service over its query mix. */
export interface Solo {
  readonly service: string;
  /** Median of every timed solo run over the mix, ms. */
  readonly p50Ms: number;
  /** Mean over the mix's (batch, seq) combinations of their median, ms: the mean service time under FCFS. */
  readonly meanMs: number;
  readonly byShape: readonly { batch: number; seqLen: number; medianMs: number }[];
}

/**
 * Resolve the models (demo variants first, then the catalog; built on first use) into the
 * `Hosted` the experiment helpers take: one service per model on `ort`, the demo's query mix.
 * A line per model (operators, GFLOP at batch 1, built or cached) goes to `ctx.err`.
 * @throws what `resolveModelArtifact` throws for an unknown model.
 */
export async function hostModels(ctx: DeploymentContext, repo: ModelRepository, models: readonly string[], threads: number): Promise<Hosted> {
  const specs = new Map<string, ModelSpec>();
  const artifacts = new Map<string, ModelArtifact>();
  for (const model of models) {
    if (specs.has(model)) continue;
    const t0 = performance.now();
    const { artifact, built } = await resolveModelArtifact(repo, model);
    const spec = artifact.spec;
    ctx.err(`      ${model}: ${spec.operators.length} operators, ${segmentGflops(spec, 0, spec.operators.length, 1, spec.dynamicAxes.seq === undefined ? 0 : seqLensOf(spec)[0]!).toFixed(2)} GFLOP at batch 1 — ${built ? `built in ${((performance.now() - t0) / 1000).toFixed(1)} s` : 'from the cache'}\n`);
    specs.set(model, spec);
    artifacts.set(model, artifact);
  }
  const names = models.map((m, i) => (models.indexOf(m) === i ? m : `${m}-${i}`));
  const config = parseServingConfig(
    {
      device: 'ort',
      services: models.map((model, i) => ({ name: names[i], model, qosTargetMs: 1_000, batchSizes: [...BATCH_SIZES], ...(specs.get(model)!.dynamicAxes.seq === undefined ? {} : { seqLens: seqLensOf(specs.get(model)!) }) })),
    },
    'demo',
  );
  const services: ExperimentService[] = config.services.map((s) => {
    const spec = specs.get(s.model)!;
    return { name: s.name, spec, qosTargetMs: s.qosTargetMs, maxQueueLength: s.maxQueueLength, batchSizes: s.batchSizes, ...(s.seqLens === undefined ? {} : { seqLens: s.seqLens }) };
  });
  if (threads > os.cpus().length) ctx.err(`      note: --threads ${threads} is more than the ${os.cpus().length} cores here\n`);
  return { config, services, specs, artifacts, isSim: false };
}

/** The demo's sequence lengths that a model accepts (its default when none does). */
export function seqLensOf(spec: ModelSpec): number[] {
  const max = spec.maxSeqLen ?? Infinity;
  const ok = SEQ_LENS.filter((s) => s <= max);
  return ok.length > 0 ? [...ok] : [spec.defaultSeqLen];
}

/**
 * Each service alone, each (batch, seq) of its mix: one warm-up, then `SOLO_REPEAT` timed runs
 * of the whole query (synthetic inputs).
 * @param threads the segments' intra-op threads (absent: the device's default).
 * @throws the device's error when a solo run fails.
 */
export async function measureSolo(device: Device, services: readonly ExperimentService[], threads?: number): Promise<Solo[]> {
  const out: Solo[] = [];
  let id = 0;
  for (const s of services) {
    const all: number[] = [];
    const byShape: { batch: number; seqLen: number; medianMs: number }[] = [];
    for (const batch of s.batchSizes) {
      for (const seqLen of s.seqLens ?? [0]) {
        const ms: number[] = [];
        for (let run = 0; run <= SOLO_REPEAT; run++) {
          const result = await device.runGroup([{ service: s.name, queryId: `demo-solo-${id++}`, start: 0, end: s.spec.operators.length, batchSize: batch, seqLen, input: { kind: 'synthetic', seed: 1 }, ...(threads === undefined ? {} : { intraOpThreads: threads }) }]);
          for (const seg of result.segments) if (!seg.ok) throw seg.error;
          if (run > 0) ms.push(result.groupLatencyMs);
        }
        all.push(...ms);
        byShape.push({ batch, seqLen, medianMs: median(ms) });
      }
    }
    out.push({ service: s.name, p50Ms: median(all), meanMs: byShape.reduce((a, b) => a + b.medianMs, 0) / byShape.length, byShape });
  }
  return out;
}

/** One policy variant of the comparison. */
export interface DemoVariant {
  readonly label: string;
  readonly policy: 'fcfs' | 'abacus';
  /** Intra-op threads per executor it runs a lone query with (the tables' "threads / executor"). */
  readonly threads: number;
  /** Its policy parameters (the thread rule, refinement, the fallback). */
  readonly params: Readonly<Record<string, unknown>>;
}

/** What the rounds run. */
export interface DemoPlan {
  readonly hosted: Hosted;
  readonly predictor: Predictor;
  /** The thread rules the device opens sessions for (the predictor was profiled with them). */
  readonly threadRules: readonly ThreadRule[];
  /** The executors' default intra-op threads (`--threads`). */
  readonly threads: number;
  readonly variants: readonly DemoVariant[];
  /** Seed of round 1 (round k: seed + k − 1). */
  readonly seed: number;
  readonly rounds: number;
  /** Queries per variant per round. */
  readonly queries: number;
  /** The QoS target of service `i` from its solo latencies, ms. */
  qosTargetMs(solo: Solo, i: number): number;
  /** The offered rate over all services from the FCFS capacity the solos imply (1 / mean solo latency), queries/s. */
  rateQps(capacityQps: number): number;
}

/** Where the rounds report progress (the CLI prints; none is required to). */
export interface DemoHooks {
  /** The device is open; solo latencies are measured next. */
  soloStart?(): void;
  /** Solo latencies measured: the services with their QoS targets, the capacity and the rate. */
  solosMeasured?(services: readonly ExperimentService[], solos: readonly Solo[], capacityQps: number, rateQps: number): void;
  /** Round `round` (1-based) starts: its seed, the load average now, the overlap measured just before. */
  roundStart?(round: number, seed: number, loadAverage1m: number, overlap: OverlapMeasurement): void;
  /** A variant's run starts (expected to offer load for `expectedS` s); `stop` is called when it ends. */
  runStart?(label: string, expectedS: number): { stop(): void };
  /** A variant's run ended. */
  runEnd?(label: string, result: ExperimentResult): void;
}

/** One round: every variant under the same arrivals (one seed), one after the other. */
export interface DemoRoundResult {
  /** 1-based. */
  readonly round: number;
  readonly seed: number;
  /** 1-minute load average when the round started and ended. */
  readonly loadAverage1mStart: number;
  readonly loadAverage1mEnd: number;
  /** Group ÷ sequential of one batch-1 query per service, measured just before the round. */
  readonly overlapRatio: number;
  /** One result per variant, in variant order. */
  readonly results: readonly ExperimentResult[];
}

/** What the rounds measured. */
export interface DemoRun {
  /** The services with their QoS targets. */
  readonly services: readonly ExperimentService[];
  readonly solos: readonly Solo[];
  readonly rateQps: number;
  readonly rounds: readonly DemoRoundResult[];
}

/**
 * Open one `ort` device for the hosted services, measure their solo latencies (→ QoS targets and
 * rate, by the plan's rules), then run `plan.rounds` rounds: in each, the overlap opportunity
 * (one batch-1 query per service as one group vs one after the other, `SOLO_REPEAT` times), then
 * every variant in turn under Poisson arrivals seeded `seed + k`, A B C A B C …, records kept.
 * The device is closed at the end, also on failure.
 * @throws what opening the device, a solo run or a run throws.
 */
export async function runDemoRounds(plan: DemoPlan, hooks: DemoHooks = {}): Promise<DemoRun> {
  const { hosted } = plan;
  const env = await openEnv(hosted, plan.predictor, { virtual: false, seed: plan.seed, threads: plan.threads, threadRules: plan.threadRules });
  try {
    const opened = await env.open();
    const device = opened.device;
    // The overlap opportunity right now: one batch-1 query per service as one group vs one after the other.
    const pair = hosted.services.map((s) => ({ service: { name: s.name, model: deviceServiceOf(hosted, s).model }, batchSize: 1, seqLen: s.seqLens?.[s.seqLens.length - 1] ?? 0 }));
    try {
      hooks.soloStart?.();
      const solos = await measureSolo(device, hosted.services);
      const services = hosted.services.map((s, i) => ({ ...s, qosTargetMs: plan.qosTargetMs(solos[i]!, i) }));
      const meanServiceMs = solos.reduce((a, s) => a + s.meanMs, 0) / solos.length;
      const capacityQps = 1000 / meanServiceMs;
      const rateQps = plan.rateQps(capacityQps);
      hooks.solosMeasured?.(services, solos, capacityQps, rateQps);
      const rounds: DemoRoundResult[] = [];
      for (let k = 0; k < plan.rounds; k++) {
        const seed = plan.seed + k;
        const loadStart = sampleLoad().loadAverage1m;
        const overlap = await measureOverlap(device, pair, { repeat: SOLO_REPEAT, warmup: 1 });
        hooks.roundStart?.(k + 1, seed, loadStart, overlap);
        const results: ExperimentResult[] = [];
        for (const v of plan.variants) {
          const ticker = hooks.runStart?.(v.label, plan.queries / rateQps);
          try {
            results.push(await runExperiment(env, { services, policy: v.policy, policyParams: v.params, rateQps, queries: plan.queries, seed, keepRecords: true }));
          } finally {
            ticker?.stop();
          }
          hooks.runEnd?.(v.label, results.at(-1)!);
        }
        rounds.push({ round: k + 1, seed, loadAverage1mStart: loadStart, loadAverage1mEnd: sampleLoad().loadAverage1m, overlapRatio: overlap.ratio, results });
      }
      return { services, solos, rateQps, rounds };
    } finally {
      await opened.release();
    }
  } finally {
    await env.close();
  }
}
