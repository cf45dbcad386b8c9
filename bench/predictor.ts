/**
 * Predictor speed (docs/benchmarks.md "Targets and what was measured"):
 *
 * - **Call latency**: one `predict` call scoring 4 candidate groups with 4-way co-location
 *   (4 slots each, as one step of the controller's search over 4 services), median and p99
 *   in µs over many calls after a warm-up, for the MLP and the linear baseline. Goal: median
 *   ≤ 5 µs, p99 ≤ 20 µs. The groups cycle through a pool of random ones, so the encoder does
 *   not see the same input every call.
 * - **Training time**: training on 20k samples (`abacus train`'s defaults, no cross-validation;
 *   25k groups, 20% held out), with the held-out MAPE it reaches. Goal ≤ 60 s on 2 cores. The samples are simulated on
 *   `sim:a100` over the seven zoo models with the profiler's sampler (groups of 1..4), or read
 *   from `--data FILE` (a profile CSV, e.g. /tmp/sim-a100-pairs.csv).
 *
 * `simulateProfileRows` (also used by tests) measures sampled groups on a SimDevice driven by
 * a VirtualClock: the profiler's distribution without its CSV and resume machinery.
 */
import { VirtualClock } from '../src/clock/index.ts';
import { artifactAt } from '../src/model/artifact.ts';
import { ModelRepository } from '../src/model/repository.ts';
import { resolveModelSpec } from '../src/model/catalog.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import { ZOO_MODEL_NAMES } from '../src/model/zoo/index.ts';
import { SimDevice } from '../src/device/sim/index.ts';
import type { Segment } from '../src/device/device.ts';
import { ProfileSampler } from '../src/profile/sampler.ts';
import { readProfileCsv } from '../src/profile/csv.ts';
import type { ProfileRow } from '../src/profile/dataset.ts';
import { trainPredictor, type PredictorKind } from '../src/predict/train.ts';
import type { Group, Predictor } from '../src/predict/predictor.ts';
import { median } from '../src/stats.ts';

/** Options of `simulateProfileRows`; defaults in brackets. */
export interface SimulateRowsOptions {
  readonly models: readonly ModelSpec[];
  readonly samples: number;
  /** ['sim:a100'] */
  readonly deviceId?: string;
  /** Largest group [2]. */
  readonly maxGroupSize?: number;
  /** [1, 2, 4, 8, 16, 32] */
  readonly batchSizes?: readonly number[];
  /** For models with a sequence axis [8, 16, 32, 64, 128]. */
  readonly seqLens?: readonly number[];
  /** Timed runs per sample (median) [3]. */
  readonly repeat?: number;
  /** Device noise coefficient of variation [the device's default]. */
  readonly noiseCv?: number;
  readonly seed?: number;
}

/**
 * Measure `samples` groups drawn by the profiler's sampler on a simulated device. A model
 * that appears k times in a group is hosted as k services, so copies overlap as separate
 * services do. Rows like a profile CSV's (median, mean, std of `repeat` runs).
 */
export async function simulateProfileRows(opts: SimulateRowsOptions): Promise<ProfileRow[]> {
  const maxGroupSize = opts.maxGroupSize ?? 2;
  const repeat = opts.repeat ?? 3;
  const seed = opts.seed ?? 1;
  const sampler = new ProfileSampler({ models: opts.models, maxGroupSize, batchSizes: opts.batchSizes ?? [1, 2, 4, 8, 16, 32], seqLens: opts.seqLens ?? [8, 16, 32, 64, 128], seed });
  const clock = new VirtualClock();
  const device = await SimDevice.create({ clock, id: opts.deviceId ?? 'sim:a100', seed, ...(opts.noiseCv === undefined ? {} : { noiseCv: opts.noiseCv }), activationBatch: 1 });
  const services: { name: string; model: ReturnType<typeof artifactAt> }[] = [];
  for (const spec of opts.models) for (let c = 0; c < maxGroupSize; c++) services.push({ name: `${spec.name}#${c}`, model: artifactAt('/nonexistent', spec) });
  await device.load(services);
  const operators = new Map(opts.models.map((m) => [m.name, m.operators.length]));
  const rows: ProfileRow[] = [];
  let query = 0;
  try {
    for (const sample of sampler.samples(0, opts.samples)) {
      const copies = new Map<string, number>();
      const runs: number[] = [];
      for (let r = 0; r < repeat; r++) {
        copies.clear();
        const segments: Segment[] = sample.slots.map((s) => {
          const c = copies.get(s.model) ?? 0;
          copies.set(s.model, c + 1);
          return { service: `${s.model}#${c}`, queryId: `q${query++}`, start: s.start, end: s.end, batchSize: s.batch, seqLen: s.seqLen, input: { kind: 'synthetic', seed: query } };
        });
        const pending = device.runGroup(segments);
        await clock.run();
        const result = await pending;
        runs.push(result.groupLatencyMs);
        for (let k = 0; k < segments.length; k++) {
          const seg = segments[k]!;
          if (seg.end < operators.get(sample.slots[k]!.model)!) await device.releaseQuery(seg.service, seg.queryId);
        }
      }
      const mean = runs.reduce((a, b) => a + b, 0) / runs.length;
      const std = Math.sqrt(runs.reduce((a, b) => a + (b - mean) * (b - mean), 0) / Math.max(1, runs.length - 1));
      rows.push({ sample: sample.index, device: device.id, slots: sample.slots, medianMs: median(runs), meanMs: mean, stdMs: std, runs: repeat });
    }
  } finally {
    await device.close();
  }
  return rows;
}

/** Latency of one call, µs. */
export interface CallStats {
  readonly kind: string;
  readonly medianUs: number;
  readonly p99Us: number;
  readonly calls: number;
}

/** Median and p99 of one `predict` call over `groups` (4 groups of 4 slots), after a warm-up. */
export function benchCalls(predictor: Predictor, pool: readonly (readonly Group[])[], calls: number): CallStats {
  const out = new Float64Array(4);
  let sink = 0;
  for (let i = 0; i < Math.min(20_000, calls); i++) sink += predictor.predict(pool[i % pool.length]!, out)[0]!;
  const times = new Float64Array(calls);
  // time batches of 10 calls: performance.now() has ~µs granularity and costs about as much as a call
  const per = 10;
  for (let i = 0; i < calls; i++) {
    const t0 = performance.now();
    for (let k = 0; k < per; k++) sink += predictor.predict(pool[(i * per + k) % pool.length]!, out)[0]!;
    times[i] = ((performance.now() - t0) * 1000) / per;
  }
  if (!Number.isFinite(sink)) throw new Error('non-finite prediction');
  const sorted = Array.from(times).sort((a, b) => a - b);
  return { kind: predictor.kind, medianUs: sorted[Math.floor(sorted.length / 2)]!, p99Us: sorted[Math.floor(sorted.length * 0.99)]!, calls: calls * per };
}

export interface PredictorBenchResult {
  readonly device: string;
  readonly calls: readonly CallStats[];
  readonly training: readonly { kind: PredictorKind; samples: number; trainSeconds: number; holdoutMape: number | null; holdoutMaeMs: number | null }[];
  readonly data: string;
}

/** Random groups of 4 slots over `models`, in 4-group candidate sets. */
function candidatePool(specs: readonly ModelSpec[], sets: number, seed: number): Group[][] {
  const sampler = new ProfileSampler({ models: specs, maxGroupSize: 4, batchSizes: [1, 2, 4, 8, 16, 32], seqLens: [16, 32, 64, 128], seed });
  const pool: Group[][] = [];
  let i = 0;
  while (pool.length < sets) {
    const set: Group[] = [];
    while (set.length < 4) {
      const s = sampler.sampleAt(i++);
      if (s.slots.length === 4) set.push(s.slots);
    }
    pool.push(set);
  }
  return pool;
}

/**
 * Run the benchmark. `samples` training rows (20k), `calls` timed batches of 10 calls,
 * `data`: a profile CSV instead of simulating (its groups must have ≤ 4 slots).
 */
export async function benchPredictor(opts: { samples?: number; calls?: number; epochs?: number; data?: string; cacheDir?: string; models?: readonly string[]; log?: (s: string) => void } = {}): Promise<PredictorBenchResult> {
  const log = opts.log ?? ((): void => undefined);
  const repo = new ModelRepository(opts.cacheDir === undefined ? {} : { cacheDir: opts.cacheDir });
  const names = opts.models ?? ZOO_MODEL_NAMES;
  const specs: ModelSpec[] = [];
  for (const n of names) specs.push(await resolveModelSpec(repo, n));
  const specMap = new Map(specs.map((s) => [s.name, s]));
  const samples = opts.samples ?? 20_000;
  const holdout = 0.2;
  let rows: ProfileRow[];
  let data: string;
  if (opts.data !== undefined) {
    rows = await readProfileCsv([opts.data], { models: specMap });
    data = `${opts.data} (${rows.length} rows, ${holdout * 100}% of the groups held out)`;
  } else {
    // enough groups that the training split (1 − holdout) has `samples` of them
    const total = Math.round(samples / (1 - holdout));
    log(`simulating ${total} groups of 1..4 slots over ${names.join(', ')} on sim:a100 …\n`);
    rows = await simulateProfileRows({ models: specs, samples: total, maxGroupSize: 4, repeat: 1 });
    data = `${total.toLocaleString('en-US')} groups of 1..4 slots simulated on sim:a100, ${holdout * 100}% of them held out`;
  }
  const training: PredictorBenchResult['training'][number][] = [];
  const calls: CallStats[] = [];
  const pool = candidatePool(specs, 256, 7);
  for (const kind of ['mlp', 'linear'] as const) {
    log(`training ${kind} on ${rows.length} rows …\n`);
    const r = await trainPredictor(rows, { kind, specs: specMap, folds: 0, holdout, maxSlots: 4, ...(opts.epochs === undefined ? {} : { epochs: opts.epochs }) });
    training.push({ kind, samples: r.trainSamples, trainSeconds: r.trainSeconds, holdoutMape: r.holdout?.mape ?? null, holdoutMaeMs: r.holdout?.maeMs ?? null });
    log(`timing ${kind} predict calls …\n`);
    calls.push(benchCalls(r.predictor, pool, opts.calls ?? 100_000));
  }
  return { device: 'sim:a100', calls, training, data };
}
