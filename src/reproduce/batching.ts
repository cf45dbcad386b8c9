/**
 * The dynamic-batching experiment (`abacus reproduce batching`; beyond the paper,
 * docs/batching.md): real clients send one sample per request, so a
 * serving system that runs each request alone leaves most of a GPU's throughput unused.
 *
 * Setup: the paper's 21 pairs at their §7.2 QoS targets (`7.2_qos` rows of the workloads
 * file), single-sample Poisson requests (batch 1; BERT at sequence length 32, the A100
 * reference surface's and the H200 measurements' BERT rows), services sharing the load
 * equally, on BOTH `sim:a100` and `sim:h200:graph`. Per pair and device, the peak goodput at ≤
 * 1 % violations (`findPeakRate`) of every variant of `BATCHING_VARIANTS`: Abacus without
 * batching (services without `batching`: every query runs alone at batch 1), batch-aware Abacus
 * (services with `BATCHING_LIMITS`), and the batching baselines (Triton's dynamic batcher,
 * Clockwork, FCFS and EDF with batching), each with its own default parameters.
 *
 * Saturation throughput (`saturationThroughput`): what the device serves when it is 100 %
 * busy running every service at its largest batch, one batch at a time (no overlap). With
 * `L_i` the simulated latency (ms) of model i alone at batch B (its `maxBatchSize`, 16) on a
 * fresh device without noise, and `w_i` the share of the offered load of service i (equal:
 * 1/n), a load of λ queries/ms keeps the device busy λ · Σ_i w_i · L_i / B of each ms, so
 *
 *     saturationQps = 1000 · B / Σ_i (w_i · L_i)        (w_i = 1/n; queries/s)
 *
 * — for a pair, 2000 · B / (L_1 + L_2). Overlapping two batches can beat it; a policy that
 * runs one batch at a time cannot.
 *
 * Co-launch throughput (`saturationThroughput`): both services at batch B launched together as
 * one group, group after group: 1000 · n · B / L_group queries/s. Co-launch ÷ saturation =
 * Σ L_i / (n · L_group) is what overlapping the batches gains; it bounds a scheduler that
 * launches one whole group at a time at batch B (one that keeps both services busy without a
 * group barrier, as Triton's one instance per model does, or cuts segments to balance a group,
 * can do better).
 *
 * Run length: near the peak of a batching policy the rate is thousands of queries/s, so a
 * fixed number of queries spans only a few QoS targets, too short for an overloaded queue
 * to build up past the target; every run therefore lasts at least `minSpanQos` QoS targets
 * (its query count is raised to rate × that span), see `queriesFor`: 30 (`--quick` 10,
 * `BATCHING_MIN_SPAN_QOS`). Measured (simulated) on resnet50+resnet101 and vgg16+vgg19 under
 * abacus, triton and clockwork on both devices: the peaks with spans of 10 and 30 QoS targets
 * differ by −1.5 % to +3.0 %, except clockwork on vgg16+vgg19 on sim:a100 (−7.6 % with 30).
 */
import fs from 'node:fs/promises';
import { driveUntilSettled } from '../clock/drive.ts';
import { VirtualClock } from '../clock/virtual.ts';
import { SimDevice } from '../device/sim/index.ts';
import { artifactAt } from '../model/artifact.ts';
import type { ModelSpec } from '../model/spec.ts';
import type { Predictor } from '../predict/predictor.ts';
import { errorMetrics } from '../predict/train.ts';
import { readProfileCsv } from '../profile/csv.ts';
import { profileDevice } from '../profile/profiler.ts';
import { findPeakRate, runExperiment, type ExperimentEnv, type ExperimentResult, type ExperimentService, type PeakResult } from '../runtime/experiment.ts';
import type { BatchingLimits } from '../schedule/controller.ts';
import { isPolicyName, POLICY_VARIANTS } from '../schedule/index.ts';
import { simEnv, workloadServices } from './colocation.ts';
import { coRunLimit, type CoRunLimit } from './co-run.ts';
import type { PaperWorkload } from './workloads.ts';

/** The two devices of the experiment, whatever `--device` says. */
export const BATCHING_DEVICES: readonly string[] = ['sim:a100', 'sim:h200:graph'];

/** Largest fused batch: Clockwork's `max_batch` (OSDI'20), the `--dynamic-batching` default. */
export const BATCHING_MAX_BATCH_SIZE = 16;

/** The batching limits of every batching service: at most 16 samples, no queue delay, no preferred sizes (Triton's defaults besides the size). */
export const BATCHING_LIMITS: BatchingLimits = Object.freeze({ maxBatchSize: BATCHING_MAX_BATCH_SIZE, maxQueueDelayMs: 0, preferredBatchSizes: Object.freeze([]) });

/**
 * The shortest run, in QoS targets of arrivals (`queriesFor`): 30, `--quick` 10. See the file
 * comment, "Run length".
 */
export const BATCHING_MIN_SPAN_QOS = { full: 30, quick: 10 } as const;

/**
 * The pairs the experiment runs: every §7.2 pair (`7.2_qos` rows, 21), or with `quick` the 7 of
 * them that close a cycle through the models in the order they first appear (resnet50+resnet101,
 * resnet101+resnet152, …, vgg19+bert, then resnet50+bert), so each model is in two pairs and every
 * kind of neighbour (light, heavy, BERT) is there; then the first `pairs` of those. The batching
 * and mixes runs cost most of `reproduce all --quick` (docs/reproduction.md), and the 7 keep a
 * quick run's headline a mean over every model.
 */
export function batchingPairs(workloads: readonly PaperWorkload[], o: { readonly quick: boolean; readonly pairs?: number }): PaperWorkload[] {
  const all = workloads.filter((w) => w.experiment === '7.2_qos');
  let chosen = all;
  if (o.quick) {
    const models = [...new Set(all.flatMap((w) => w.models))];
    const cycle = models.map((m, i) => [m, models[(i + 1) % models.length]!] as const);
    chosen = cycle.flatMap(([a, b]) => all.filter((w) => w.models.length === 2 && w.models.includes(a) && w.models.includes(b)).slice(0, 1));
  }
  return chosen.slice(0, o.pairs);
}

/** Samples per request. */
export const BATCHING_REQUEST_BATCH = 1;

/** BERT's sequence length: the A100 reference surface's and the H200 measurements' BERT rows. */
export const BATCHING_SEQ_LEN = 32;

/** Every size a fused batch may have, 1..16: the held-out check's batch sizes (`predictorErrorByBatch`). */
export const BATCHING_ALL_BATCH_SIZES: readonly number[] = Array.from({ length: BATCHING_MAX_BATCH_SIZE }, (_, i) => i + 1);

/**
 * Batch sizes the experiment's predictors are profiled at: 1/2/4/8/16, the other experiments'
 * `PAPER_BATCH_SIZES`; the MLP interpolates the sizes in between along its batch feature.
 * Profiling every size 1..16 with as many groups is hardly more accurate overall and trades
 * accuracy at batch 1–4 (where the unbatched reference and light loads live) for accuracy at
 * 9–16: on 2000 fresh groups (`--quick`, 4000-group profiles, simulated) the held-out MAPE over
 * batches 1..16 was 2.2 % vs 2.0 % on sim:a100 and 3.9 % vs 3.6 % on sim:h200:graph, on the
 * H200 9.6 % vs 13.6 % at batch 1 and 3.3 % vs 2.7 % at batch 16. Every run measures this
 * again (`predictorErrorByBatch`, both predictors, per batch size, in the report).
 */
export const BATCHING_TRAIN_BATCH_SIZES: readonly number[] = [1, 2, 4, 8, 16];

/**
 * How a variant is compared:
 * - `unbatched`: the reference (Abacus, every query alone);
 * - `abacus`: batch-aware Abacus;
 * - `serial`: a baseline that runs one batch at a time (Clockwork, FCFS, EDF with batching);
 * - `concurrent`: a baseline that runs one batch per service at once, overlapping (Triton's
 *   dynamic batcher with one instance per model, `launchWhileBusy`).
 */
export type BatchingRole = 'unbatched' | 'abacus' | 'serial' | 'concurrent';

/** One policy as the experiment runs it. */
export interface BatchingVariant {
  /** Name in the CSV, the tables and the plots. */
  readonly id: string;
  /** Controller name (`createController`). */
  readonly policy: string;
  /** Services carry `BATCHING_LIMITS`. */
  readonly batching: boolean;
  readonly role: BatchingRole;
  /** Policy parameters beside the workload's search ways and slack (abacus) or the defaults. */
  readonly params?: Readonly<Record<string, unknown>>;
}

/**
 * The variants, in report order. A variant whose policy the controller factory does not know
 * (`isPolicyName`) is skipped and reported as such (`availableVariants`).
 */
export const BATCHING_VARIANTS: readonly BatchingVariant[] = [
  { id: 'abacus-no-batching', policy: 'abacus', batching: false, role: 'unbatched' },
  { id: 'abacus', policy: 'abacus', batching: true, role: 'abacus' },
  { id: 'abacus-no-barrier', policy: 'abacus', batching: true, role: 'abacus', params: POLICY_VARIANTS['abacus-no-barrier']!.params },
  { id: 'triton', policy: 'triton', batching: true, role: 'concurrent' },
  { id: 'clockwork', policy: 'clockwork', batching: true, role: 'serial' },
  { id: 'fcfs-batch', policy: 'fcfs-batch', batching: true, role: 'serial' },
  { id: 'edf-batch', policy: 'edf-batch', batching: true, role: 'serial' },
];

/** The variants the controller factory knows now, and the ids of the others. */
export function availableVariants(variants: readonly BatchingVariant[] = BATCHING_VARIANTS): { run: BatchingVariant[]; skipped: string[] } {
  return { run: variants.filter((v) => isPolicyName(v.policy)), skipped: variants.filter((v) => !isPolicyName(v.policy)).map((v) => v.id) };
}

/** One (pair, device, variant) at its peak. */
export interface BatchingRow {
  readonly pair: string;
  readonly device: string;
  /** Variant id (`BatchingVariant.id`). */
  readonly policy: string;
  readonly qosMs: number;
  /** Goodput at the peak rate, queries/s (0 when no rate met the bound). */
  readonly peakGoodputQps: number;
  /** Highest rate with ≤ 1 % violations, queries/s (0 when none). */
  readonly peakRateQps: number;
  /** At the peak rate (at the lowest rate tried when none met the bound). */
  readonly violationRatio: number;
  readonly p99Ms: number;
  /** Mean samples per launched segment (1: nothing fused). */
  readonly meanBatch: number;
  /** Mean segments per launched group (1: no overlap). */
  readonly meanGroupSize: number;
  /** MAPE of predicted vs measured group latency at the peak (fraction); NaN for a policy that does not predict. */
  readonly predictorMape: number;
  /** The pair's saturation throughput on this device, queries/s (`saturationThroughput`). */
  readonly saturationQps: number;
  /** Both services at batch 16 launched together, group after group, queries/s (`saturationThroughput`). */
  readonly coLaunchQps: number;
  /** The pair's continuous co-run limit on this device, queries/s, and the batch it runs at (`co-run.ts`). */
  readonly coRunLimitQps: number;
  readonly coRunBatch: number;
  /** False when the peak search found no bracket: the peak is a bound. */
  readonly bracketed: boolean;
}

/** A model at its largest batch, alone on a fresh device. */
export interface SoloBatch {
  readonly model: string;
  readonly batch: number;
  /** Simulated latency of the whole model, ms. */
  readonly latencyMs: number;
}

/**
 * Run `specs` (one service each, `batch` samples, the whole model) as ONE group on a fresh
 * noise-free device: the group's latency, ms.
 * @throws Error naming the models and the device when a segment fails.
 */
export async function groupLatencyMs(deviceId: string, specs: readonly ModelSpec[], batch: number, seqLen: number): Promise<number> {
  const clock = new VirtualClock();
  const device = await SimDevice.create({ clock, id: deviceId, noiseCv: 0 });
  try {
    const services = specs.map((spec, i) => ({ name: `${spec.name}#${i}`, model: artifactAt('/nonexistent', spec) }));
    await device.load(services);
    const r = await driveUntilSettled(
      clock,
      device.runGroup(specs.map((spec, i) => ({ service: services[i]!.name, queryId: `saturation-${i}`, start: 0, end: spec.operators.length, batchSize: batch, seqLen: spec.dynamicAxes.seq === undefined ? 0 : seqLen, input: { kind: 'synthetic', seed: 1 } }))),
    );
    const failed = r.segments.find((x) => !x.ok);
    if (failed !== undefined && !failed.ok) throw new Error(`saturationThroughput: ${specs.map((x) => x.name).join(' + ')} at batch ${batch} failed on ${deviceId}: ${failed.error.message}`);
    return r.groupLatencyMs;
  } finally {
    await device.close();
  }
}

/**
 * The saturation throughput of `specs` served with equal shares on `deviceId` (see the file
 * comment for the formula): each model alone at `batch` samples (sequence models at `seqLen`)
 * on a fresh noise-free `SimDevice`. Also the co-launch throughput: all models at `batch` in one
 * group (launched together, done when the last is), group after group, n · batch queries per
 * group: `coLaunchQps = 1000 · n · B / L_group`. It is what a scheduler that launches one whole
 * group at a time serves at the largest batch; `coLaunchQps ÷ qps = Σ L_i / (n · L_group)` is
 * the gain of overlapping the services' batches ((L_1 + L_2) / L_12 for a pair).
 * @returns queries/s, co-launched queries/s, and the latencies they came from (ms).
 * @throws RangeError for no models or a batch that is not an integer ≥ 1; what the device throws.
 */
export async function saturationThroughput(
  deviceId: string,
  specs: readonly ModelSpec[],
  batch: number = BATCHING_MAX_BATCH_SIZE,
  seqLen: number = BATCHING_SEQ_LEN,
): Promise<{ qps: number; coLaunchQps: number; solo: SoloBatch[]; coLaunchMs: number }> {
  if (specs.length === 0) throw new RangeError('saturationThroughput needs at least one model');
  if (!Number.isInteger(batch) || batch < 1) throw new RangeError(`saturationThroughput: batch must be an integer ≥ 1, got ${batch}`);
  const solo: SoloBatch[] = [];
  for (const spec of specs) solo.push({ model: spec.name, batch, latencyMs: await groupLatencyMs(deviceId, [spec], batch, seqLen) });
  const coLaunchMs = await groupLatencyMs(deviceId, specs, batch, seqLen);
  const meanMs = solo.reduce((a, x) => a + x.latencyMs, 0) / solo.length;
  return { qps: (1000 * batch) / meanMs, coLaunchQps: (1000 * specs.length * batch) / coLaunchMs, solo, coLaunchMs };
}

/** The services of a pair: batch-1 requests, BERT at `BATCHING_SEQ_LEN`, `BATCHING_LIMITS` when `batching`. */
export function batchingServices(w: PaperWorkload, specs: ReadonlyMap<string, ModelSpec>, batching: boolean): ExperimentService[] {
  return workloadServices(w, specs, [BATCHING_REQUEST_BATCH]).map((s) => ({
    ...s,
    ...(s.seqLens === undefined ? {} : { seqLens: [BATCHING_SEQ_LEN] }),
    ...(batching ? { batching: BATCHING_LIMITS } : {}),
  }));
}

/** Options of a batching run (`runBatchingVariant`). */
export interface BatchingRunOptions {
  readonly variants: readonly BatchingVariant[];
  /** Queries per run, at least (see `minSpanQos`). */
  readonly queries: number;
  /** Every run lasts at least this many QoS targets of arrivals [`BATCHING_MIN_SPAN_QOS.full`]: its query count is max(queries, ⌈rate × span⌉). */
  readonly minSpanQos?: number;
  readonly seed: number;
  /** Bisection steps of the peak search [6]. */
  readonly bisections?: number;
  readonly onProgress?: (line: string) => void;
}

/**
 * Queries of a run at `rateQps` (queries/s) so that its arrivals span at least `spanQos` QoS
 * targets of `qosMs`: max(queries, ⌈rateQps · spanQos · qosMs / 1000⌉).
 */
export function queriesFor(rateQps: number, qosMs: number, queries: number, spanQos: number): number {
  return Math.max(queries, Math.ceil((rateQps * spanQos * qosMs) / 1000));
}

/**
 * The peak search (`findPeakRate`) and the run the peak's row describes: the run at the peak, or
 * at the lowest rate tried when no rate met the bound.
 */
export async function peakAndItsRun(env: ExperimentEnv, options: Parameters<typeof findPeakRate>[1] & { queriesFor: (rateQps: number) => number }): Promise<{ peak: PeakResult; at: ExperimentResult }> {
  const peak = await findPeakRate(env, options);
  if (peak.atPeak !== undefined) return { peak, at: peak.atPeak };
  const lowest = Math.min(...peak.tried.map((t) => t.rateQps));
  const { startQps: _startQps, maxViolationRatio: _bound, bisections: _bisections, maxSteps: _steps, queriesFor, ...run } = options;
  return { peak, at: await runExperiment(env, { ...run, queries: queriesFor(lowest), rateQps: lowest }) };
}

/** What every variant of one pair on one device is compared with: its saturation, co-launch and continuous co-run throughputs. */
export interface BatchingSetup {
  readonly qps: number;
  readonly coLaunchQps: number;
  readonly coRun: CoRunLimit;
  /** Each model at its largest batch alone (ms), what `qps` came from. */
  readonly solo: readonly SoloBatch[];
}

/**
 * The setup of one pair on one device (`saturationThroughput`, `coRunLimit`), before its variants run.
 * @throws what the device throws.
 */
export async function batchingSetup(deviceId: string, w: PaperWorkload, specs: ReadonlyMap<string, ModelSpec>): Promise<BatchingSetup> {
  const pairSpecs = batchingServices(w, specs, false).map((x) => x.spec);
  const sat = await saturationThroughput(deviceId, pairSpecs);
  const coRun = await coRunLimit(deviceId, pairSpecs, w.qosMs, BATCHING_MAX_BATCH_SIZE, BATCHING_SEQ_LEN);
  return { qps: sat.qps, coLaunchQps: sat.coLaunchQps, coRun, solo: sat.solo };
}

/**
 * One variant's peak on one pair and device: its row and the number of runs the peak search
 * took. Abacus (both variants) takes the workload's search ways and slack; the baselines their
 * defaults.
 */
export async function runBatchingVariant(
  deviceId: string,
  w: PaperWorkload,
  specs: ReadonlyMap<string, ModelSpec>,
  predictor: Predictor,
  setup: Pick<BatchingSetup, 'qps' | 'coLaunchQps' | 'coRun'>,
  v: BatchingVariant,
  o: Omit<BatchingRunOptions, 'variants' | 'onProgress'>,
): Promise<{ row: BatchingRow; runs: number }> {
  const span = o.minSpanQos ?? BATCHING_MIN_SPAN_QOS.full;
  const services = batchingServices(w, specs, v.batching);
  const env = simEnv(deviceId, services, predictor, o.seed);
  const policyParams = { ...(v.policy === 'abacus' ? { ways: w.searchWays, slackMs: w.slackMs } : {}), ...v.params };
  const base = { services, policy: v.policy, policyParams, queries: o.queries, seed: o.seed, queriesFor: (rateQps: number) => queriesFor(rateQps, w.qosMs, o.queries, span) };
  const { peak, at } = await peakAndItsRun(env, { ...base, startQps: w.offeredLoadQps / 2, ...(o.bisections === undefined ? {} : { bisections: o.bisections }) });
  const row: BatchingRow = {
    pair: w.models.join('+'),
    device: deviceId,
    policy: v.id,
    qosMs: w.qosMs,
    peakGoodputQps: peak.peakGoodputQps,
    peakRateQps: peak.peakRateQps,
    violationRatio: at.overall.violationRatio,
    p99Ms: at.overall.p99Ms,
    meanBatch: at.meanBatch,
    meanGroupSize: at.meanGroupSize,
    predictorMape: at.predictorMape,
    saturationQps: setup.qps,
    coLaunchQps: setup.coLaunchQps,
    coRunLimitQps: setup.coRun.qps,
    coRunBatch: setup.coRun.batch,
    bracketed: peak.bracketed,
  };
  return { row, runs: peak.tried.length };
}

/** How `runBatching` runs its units: in this thread or in a pool of threads (`reproduce/units.ts`); each unit is independent and deterministic. */
export interface BatchingUnits {
  setup(deviceId: string, w: PaperWorkload): Promise<BatchingSetup>;
  variant(deviceId: string, w: PaperWorkload, setup: BatchingSetup, v: BatchingVariant): Promise<{ row: BatchingRow; runs: number }>;
}

/**
 * The whole experiment: every pair on every device under every variant, the units started at
 * once (`units` decides how many run together); rows in device, pair, variant order whatever
 * order the units finish in.
 * @returns the rows, and per device every model's solo batch latency the saturation throughputs came from.
 */
export async function runBatching(
  pairs: readonly PaperWorkload[],
  units: BatchingUnits,
  o: { variants: readonly BatchingVariant[]; devices?: readonly string[]; onProgress?: (line: string) => void },
): Promise<{ rows: BatchingRow[]; solo: (SoloBatch & { device: string })[] }> {
  const devices = o.devices ?? BATCHING_DEVICES;
  const perPair = await Promise.all(
    devices.flatMap((device) =>
      pairs.map(async (w) => {
        const setup = await units.setup(device, w);
        const rows = await Promise.all(
          o.variants.map(async (v) => {
            const { row, runs } = await units.variant(device, w, setup, v);
            o.onProgress?.(`batching: ${device} ${row.pair} ${v.id}: peak ${row.peakGoodputQps.toFixed(1)} q/s (${runs} runs), mean batch ${row.meanBatch.toFixed(2)}\n`);
            return row;
          }),
        );
        return { device, setup, rows };
      }),
    ),
  );
  const solo: (SoloBatch & { device: string })[] = [];
  for (const { device, setup } of perPair) for (const s of setup.solo) if (!solo.some((x) => x.device === device && x.model === s.model)) solo.push({ device, ...s });
  return { rows: perPair.flatMap((p) => p.rows), solo };
}

/**
 * The experiment's targets (docs/batching.md), per device: batch-aware Abacus' mean peak ratios, and over
 * both devices its worst violation ratio at its reported peak and the saturation fraction aimed at.
 */
export const BATCHING_TARGETS = {
  byDevice: {
    'sim:a100': { peakRatioVsUnbatched: 10, peakRatioVsBestBatching: 1.0 },
    'sim:h200:graph': { peakRatioVsUnbatched: 4.5, peakRatioVsBestBatching: 1.1 },
  } as Readonly<Record<string, { readonly peakRatioVsUnbatched: number; readonly peakRatioVsBestBatching: number }>>,
  abacusMaxViolationRatio: 0.01,
  saturationFractionAim: 0.7,
} as const;

/** Headline numbers of one device (means over the pairs that have them). */
export interface BatchingDeviceHeadline {
  /** Batch-aware Abacus' peak ÷ Abacus without batching. */
  readonly peakRatioVsUnbatched: number | null;
  /**
   * Batch-aware Abacus' peak ÷ the best batching baseline of each pair: on sim:a100 the
   * one-batch-at-a-time ones (`serial`) only, elsewhere all of them (Triton included).
   */
  readonly peakRatioVsBestBatching: number | null;
  /** Batch-aware Abacus' peak ÷ Triton's (null when Triton did not run). */
  readonly peakRatioVsTriton: number | null;
  /** Worst violation ratio of batch-aware Abacus at its reported peak. */
  readonly abacusMaxViolationRatio: number;
  /** Batch-aware Abacus' peak ÷ the pair's saturation throughput. */
  readonly saturationFraction: number | null;
  /** Batch-aware Abacus' peak ÷ the pair's co-launch throughput (`saturationThroughput`). */
  readonly coLaunchFraction: number | null;
  /** Batch-aware Abacus' mean samples per segment and predictor MAPE at its peak (means). */
  readonly abacusMeanBatch: number | null;
  readonly abacusPredictorMape: number | null;
  /** The baselines `peakRatioVsBestBatching` compares against. */
  readonly bestOf: readonly string[];
  readonly pairs: number;
  /** Abacus without the group barrier (`abacus-no-barrier`); absent when it did not run. */
  readonly noBarrier?: NoBarrierHeadline;
}

/** Abacus without the group barrier on one device (means over the pairs that have them). */
export interface NoBarrierHeadline {
  /** Its peak ÷ Triton's, mean over the pairs. */
  readonly peakRatioVsTriton: number | null;
  /** The lowest pair's peak ÷ Triton's. */
  readonly minPairRatioVsTriton: number | null;
  /**
   * Its on-time rate at the peak (`onTimeRateQps`: the peak rate × (1 − violation ratio), queries
   * answered within QoS per second of arrivals) ÷ the pair's continuous co-run limit (`co-run.ts`),
   * mean. Not the peak goodput: goodput divides by the run's span, which includes the drain after
   * the last arrival, so at 10 QoS targets of arrivals it reads ~10 % low against a throughput.
   */
  readonly coRunLimitFraction: number | null;
  /** The same for Triton (how much room Triton leaves). */
  readonly tritonCoRunLimitFraction: number | null;
  /** Its peak ÷ barrier abacus' (`abacus`), mean. */
  readonly peakRatioVsBarrier: number | null;
  /** Worst violation ratio at its reported peak. */
  readonly maxViolationRatio: number;
  /** Mean predictor MAPE at its peak (its launch estimates vs measured). */
  readonly predictorMape: number | null;
}

/** Queries answered within QoS per second of arrivals at a row's peak: peakRateQps × (1 − violationRatio). */
export function onTimeRateQps(r: BatchingRow): number {
  return r.peakRateQps * (1 - num(r.violationRatio));
}

/** `noBarrier` of `batchingHeadline` for one device's pairs; undefined when the variant did not run. */
function noBarrierHeadline(pairs: ReadonlyMap<string, ReadonlyMap<string, BatchingRow>>): NoBarrierHeadline | undefined {
  const rows = [...pairs.values()].map((p) => ({ nb: p.get('abacus-no-barrier'), triton: p.get('triton'), barrier: p.get('abacus') })).filter((x) => x.nb !== undefined);
  if (rows.length === 0) return undefined;
  const ratio = (a: number | undefined, b: number | undefined): number => (a !== undefined && b !== undefined && b > 0 ? a / b : NaN);
  const vsTriton = rows.map((x) => ratio(x.nb!.peakGoodputQps, x.triton?.peakGoodputQps));
  const finite = vsTriton.filter((x) => Number.isFinite(x));
  return {
    peakRatioVsTriton: mean(vsTriton),
    minPairRatioVsTriton: finite.length === 0 ? null : Math.min(...finite),
    coRunLimitFraction: mean(rows.map((x) => ratio(onTimeRateQps(x.nb!), num(x.nb!.coRunLimitQps)))),
    tritonCoRunLimitFraction: mean(rows.map((x) => ratio(x.triton === undefined ? undefined : onTimeRateQps(x.triton), num(x.nb!.coRunLimitQps)))),
    peakRatioVsBarrier: mean(rows.map((x) => ratio(x.nb!.peakGoodputQps, x.barrier?.peakGoodputQps))),
    maxViolationRatio: Math.max(0, ...rows.map((x) => num(x.nb!.violationRatio)).filter((v) => Number.isFinite(v))),
    predictorMape: mean(rows.map((x) => num(x.nb!.predictorMape))),
  };
}

/** Variants `peakRatioVsBestBatching` compares against on `device` (see `BatchingDeviceHeadline`). */
export function bestBatchingBaselines(device: string, variants: readonly BatchingVariant[] = BATCHING_VARIANTS): string[] {
  const roles: readonly BatchingRole[] = device === 'sim:a100' ? ['serial'] : ['serial', 'concurrent'];
  return variants.filter((v) => roles.includes(v.role)).map((v) => v.id);
}

/** JSON stores NaN as null: read it back as NaN. */
function num(x: number | null | undefined): number {
  return typeof x === 'number' ? x : NaN;
}

function mean(xs: readonly number[]): number | null {
  const ok = xs.filter((x) => Number.isFinite(x));
  return ok.length === 0 ? null : ok.reduce((a, b) => a + b, 0) / ok.length;
}

/** Per pair: each variant's row, on one device. */
export function byPair(rows: readonly BatchingRow[], device: string): Map<string, Map<string, BatchingRow>> {
  const out = new Map<string, Map<string, BatchingRow>>();
  for (const r of rows) {
    if (r.device !== device) continue;
    if (!out.has(r.pair)) out.set(r.pair, new Map());
    out.get(r.pair)!.set(r.policy, r);
  }
  return out;
}

/** Per-pair ratios of batch-aware Abacus (NaN where a side is missing or zero). */
export function pairRatios(
  byPolicy: ReadonlyMap<string, BatchingRow>,
  device: string,
): { vsUnbatched: number; vsBest: number; best: string | undefined; vsTriton: number; saturation: number; coLaunch: number; bestVsSaturation: number } {
  const a = byPolicy.get('abacus')?.peakGoodputQps ?? NaN;
  const ratio = (b: number | undefined): number => (b !== undefined && b > 0 ? a / b : NaN);
  let best: BatchingRow | undefined;
  for (const id of bestBatchingBaselines(device)) {
    const r = byPolicy.get(id);
    if (r !== undefined && (best === undefined || r.peakGoodputQps > best.peakGoodputQps)) best = r;
  }
  const sat = byPolicy.get('abacus')?.saturationQps;
  return {
    vsUnbatched: ratio(byPolicy.get('abacus-no-batching')?.peakGoodputQps),
    vsBest: ratio(best?.peakGoodputQps),
    best: best?.policy,
    vsTriton: ratio(byPolicy.get('triton')?.peakGoodputQps),
    saturation: ratio(sat),
    coLaunch: ratio(num(byPolicy.get('abacus')?.coLaunchQps)),
    bestVsSaturation: best !== undefined && sat !== undefined && sat > 0 ? best.peakGoodputQps / sat : NaN,
  };
}

/** The headline of every device in `rows` (`--json` `batching`). */
export function batchingHeadline(rows: readonly BatchingRow[]): Record<string, BatchingDeviceHeadline> {
  const out: Record<string, BatchingDeviceHeadline> = {};
  for (const device of [...new Set(rows.map((r) => r.device))]) {
    const pairs = byPair(rows, device);
    const ratios = [...pairs.values()].map((p) => pairRatios(p, device));
    const abacus = rows.filter((r) => r.device === device && r.policy === 'abacus');
    const ran = new Set(rows.filter((r) => r.device === device).map((r) => r.policy));
    out[device] = {
      peakRatioVsUnbatched: mean(ratios.map((r) => r.vsUnbatched)),
      peakRatioVsBestBatching: mean(ratios.map((r) => r.vsBest)),
      peakRatioVsTriton: mean(ratios.map((r) => r.vsTriton)),
      abacusMaxViolationRatio: Math.max(0, ...abacus.map((r) => num(r.violationRatio)).filter((x) => Number.isFinite(x))),
      saturationFraction: mean(ratios.map((r) => r.saturation)),
      coLaunchFraction: mean(ratios.map((r) => r.coLaunch)),
      abacusMeanBatch: mean(abacus.map((r) => num(r.meanBatch))),
      abacusPredictorMape: mean(abacus.map((r) => num(r.predictorMape))),
      bestOf: bestBatchingBaselines(device).filter((id) => ran.has(id)),
      pairs: pairs.size,
    };
    const nb = noBarrierHeadline(pairs);
    if (nb !== undefined) out[device] = { ...out[device], noBarrier: nb };
  }
  return out;
}

/** Held-out error of the predictors at one largest batch size. */
export interface HoldoutRow {
  readonly device: string;
  /** Largest batch among the group's segments. */
  readonly batch: number;
  /** Profiled groups with that largest batch. */
  readonly groups: number;
  /** Per predictor label: MAPE (fraction) of predicted vs measured (median) group latency. */
  readonly mape: Readonly<Record<string, number>>;
}

/**
 * Held-out error per batch size: profile `samples` fresh operator groups of `specs` (1–2
 * segments, batches uniform over 1..16, sequence `BATCHING_SEQ_LEN`, seed `seed`, which the
 * predictors' training profiles (seed 1) do not use) on `deviceId` into `csv`, and score every
 * predictor on them, grouped by the group's largest batch.
 * @throws what profiling throws; RangeError from a predictor that does not know a model.
 */
export async function predictorErrorByBatch(deviceId: string, specs: readonly ModelSpec[], predictors: Readonly<Record<string, Predictor>>, o: { samples: number; seed: number; csv: string }): Promise<HoldoutRow[]> {
  await fs.rm(o.csv, { force: true });
  await profileDevice({
    models: specs.map((s) => artifactAt('/nonexistent', s)),
    samples: o.samples,
    maxGroupSize: 2,
    batchSizes: BATCHING_ALL_BATCH_SIZES,
    seqLens: [BATCHING_SEQ_LEN],
    seed: o.seed,
    out: o.csv,
    openDevice: async (seed: number) => {
      const clock = new VirtualClock();
      return { device: await SimDevice.create({ clock, id: deviceId, seed }), clock };
    },
  });
  const rows = await readProfileCsv([o.csv], { models: new Map(specs.map((s) => [s.name, s])) });
  const predicted = Object.fromEntries(Object.entries(predictors).map(([label, p]) => [label, p.predict(rows.map((r) => r.slots))]));
  const out: HoldoutRow[] = [];
  for (const batch of BATCHING_ALL_BATCH_SIZES) {
    const idx = rows.flatMap((r, i) => (Math.max(...r.slots.map((s) => s.batch)) === batch ? [i] : []));
    if (idx.length === 0) continue;
    const measured = idx.map((i) => rows[i]!.medianMs);
    const mape: Record<string, number> = {};
    for (const [label, p] of Object.entries(predicted)) mape[label] = errorMetrics(idx.map((i) => p[i]!), measured).mape;
    out.push({ device: deviceId, batch, groups: idx.length, mape });
  }
  return out;
}
