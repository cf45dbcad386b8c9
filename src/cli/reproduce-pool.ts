/**
 * The threads of `abacus reproduce --workers N` (docs/reproduction.md "Time today"): a pool
 * (`reproduce/pool.ts`) that runs the simulated experiments' units (`reproduce/units.ts`) and
 * builds their predictors (profile and train, `deployment/predictor-cache.ts`), each predictor
 * once: a second request for the same predictor waits for the first build, so no two threads
 * profile the same thing or write the same cache entry. With one worker, every unit and
 * predictor runs in this thread in the order asked (the serial path).
 */
import { availableParallelism } from 'node:os';
import { cachedPredictor } from '../deployment/predictor-cache.ts';
import type { DeploymentContext } from '../deployment/context.ts';
import { artifactAt } from '../model/artifact.ts';
import { ModelRepository } from '../model/repository.ts';
import type { ModelSpec } from '../model/spec.ts';
import type { Predictor } from '../predict/predictor.ts';
import { UnitPool } from '../reproduce/pool.ts';
import { runSimUnit, unitEnv, type PredictorRef, type SimUnit, type UnitEnv, type UnitRunner } from '../reproduce/units.ts';

/** One predictor to profile and train (the cache key's inputs besides the sample count). */
export interface PredictorPlan {
  readonly deviceId: string;
  readonly models: readonly string[];
  readonly maxGroupSize: number;
  readonly batchSizes: readonly number[];
  readonly seqLens: readonly number[];
}

/** Build (or find cached) one predictor; returns its file. */
export interface PredictorUnit {
  readonly kind: 'predictor';
  readonly plan: PredictorPlan;
  readonly samples: number;
  /** MLP training epochs [60]. */
  readonly epochs?: number;
  readonly quiet: boolean;
}

/** Everything a reproduce thread runs. */
export type ReproduceUnit = SimUnit | PredictorUnit;

/** What every reproduce thread is given (`reproduce-worker.ts`). */
export interface ReproduceWorkerData {
  readonly specs: ReadonlyMap<string, ModelSpec>;
  readonly cacheDir: string;
}

/** Default `--workers`: one thread per core the process may use (`os.availableParallelism()`). */
export function defaultReproduceWorkers(): number {
  return availableParallelism();
}

/**
 * Run one unit where this process or thread is: a predictor through the cache (`cachedPredictor`,
 * its progress on `ctx.err`), anything else as `runSimUnit`.
 */
export async function runReproduceUnit(unit: ReproduceUnit, ctx: DeploymentContext, repo: ModelRepository, env: UnitEnv): Promise<unknown> {
  if (unit.kind !== 'predictor') return runSimUnit(unit, env);
  const { plan } = unit;
  const models = plan.models.map((m) => {
    const spec = env.specs.get(m);
    if (spec === undefined) throw new RangeError(`no spec for model '${m}'`);
    return artifactAt('/nonexistent', spec);
  });
  const r = await cachedPredictor(ctx, repo, { deviceId: plan.deviceId, models, batchSizes: plan.batchSizes, seqLens: plan.seqLens, maxGroupSize: plan.maxGroupSize, samples: unit.samples, ...(unit.epochs === undefined ? {} : { epochs: unit.epochs }), quiet: unit.quiet });
  return r.source;
}

/** The key of a plan: equal for plans that name the same predictor. */
function planKey(p: PredictorPlan): string {
  const sorted = <T extends string | number>(xs: readonly T[]): T[] => [...new Set(xs)].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  return JSON.stringify([p.deviceId, sorted(p.models), p.maxGroupSize, sorted(p.batchSizes), sorted(p.seqLens)]);
}

/** The pool of one `abacus reproduce` run (see the file docs). */
export class ReproducePool implements UnitRunner {
  readonly workers: number;
  private readonly pool: UnitPool<ReproduceUnit>;
  private readonly env: UnitEnv;
  private readonly builds = new Map<string, Promise<PredictorRef>>();

  /**
   * @param o.samples operator groups profiled per predictor; `epochs`: MLP training epochs [60]; `quiet`: no progress lines from profiling.
   * @throws RangeError for a `workers` that is not an integer ≥ 1.
   */
  constructor(
    ctx: DeploymentContext,
    repo: ModelRepository,
    specs: ReadonlyMap<string, ModelSpec>,
    private readonly o: { workers: number; samples: number; epochs?: number; quiet: boolean; say: (text: string) => void },
  ) {
    this.workers = o.workers;
    this.env = unitEnv(specs, new Map<string, Promise<Predictor>>());
    const data: ReproduceWorkerData = { specs, cacheDir: repo.cacheDir };
    this.pool = new UnitPool<ReproduceUnit>({
      workers: o.workers,
      entry: new URL('./reproduce-worker.ts', import.meta.url),
      workerData: data,
      runHere: (unit) => runReproduceUnit(unit, ctx, repo, this.env),
      onLog: o.say,
    });
  }

  run(unit: ReproduceUnit, label: string): Promise<unknown> {
    return this.pool.run(unit, label);
  }

  /** The predictor of `plan`: built once (in a thread when there are several), found in the cache after. */
  predictorRef(plan: PredictorPlan): Promise<PredictorRef> {
    const key = planKey(plan);
    let build = this.builds.get(key);
    if (build === undefined) {
      const label = `predictor of ${plan.models.join(', ')} on ${plan.deviceId}`;
      build = this.pool.run({ kind: 'predictor', plan, samples: this.o.samples, ...(this.o.epochs === undefined ? {} : { epochs: this.o.epochs }), quiet: this.o.quiet }, label).then((file) => ({ file: file as string, deviceId: plan.deviceId, models: plan.models }));
      // a build started ahead (`prefetch`) that fails fails whoever asks for it, not the process
      build.catch(() => undefined);
      this.builds.set(key, build);
    }
    return build;
  }

  /** The predictor of `plan`, loaded here, and its file. */
  async predictor(plan: PredictorPlan): Promise<{ predictor: Predictor; source: string }> {
    const ref = await this.predictorRef(plan);
    return { predictor: await this.env.predictor(ref), source: ref.file };
  }

  /** Start building `plans` now when there are threads to spare (with one worker: nothing, each is built when first asked). */
  prefetch(plans: readonly PredictorPlan[]): void {
    if (this.workers > 1) for (const p of plans) void this.predictorRef(p);
  }

  /** Resolves once every predictor asked for so far is built or failed (before a wall-time measurement). */
  async predictorsSettled(): Promise<void> {
    await Promise.allSettled([...this.builds.values()]);
  }

  /** End the threads (`UnitPool.close`). */
  close(): Promise<void> {
    return this.pool.close();
  }
}
