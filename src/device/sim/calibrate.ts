/**
 * Calibration of the simulated device against a group-latency reference (docs/devices.md):
 * `reference/a100-group-latency.csv` — latencies (ms) of whole models alone and of whole-model
 * pairs overlapped, batch 1…32, derived from the Abacus authors' published predictor (a learned
 * surface: treat it as ranges; it has artifacts) — or `reference/h200-measured/h200-group-latency.csv`,
 * the same measured on an H200 with PyTorch CUDA graphs (GPU only: no dispatch; for graph mode,
 * `GRAPH_FIT_PARAMETERS` and `fitGraphConstants` in `random-overlap.ts`).
 *
 * ## What is compared
 * - **Solo**: group latency of one query running the whole model alone (dispatch included, as
 *   in the reference), for each zoo model at the requested batch sizes.
 * - **Pairs**: overlap ratio = group latency of the two whole queries launched together ÷ the
 *   sum of their solo latencies, simulated and reference alike (each side divides by its own
 *   solos), at one batch size.
 * - **Goals**: every solo within ±25 % of the reference; at least 17 of the 21 pair ratios within
 *   ±0.15 of the reference's.
 *
 * ## Reference artifacts
 * Whatever the contention, a group of two queries can be neither faster than its slower member
 * alone nor slower than both run back to back (plus the group's dispatch). A reference pair
 * beyond either bound by more than `ARTIFACT_TOLERANCE` (5 %) is flagged as an artifact of the
 * learned surface: 5 % is the reference's own scatter (ResNet latencies, flat in batch size
 * where nothing should change, vary by up to ±3 % across batch 1–16) plus margin, below the
 * authors' ≈ 6 % predictor error (Abacus paper, SC'21: MLP MAPE ≈ 6 %).
 *
 * ## Fitting procedure (`fitConstants`)
 * The free constants of `SimConstants` (`cost-model.ts`) — eager launch cost per kernel class,
 * dispatch and barrier cost, compute efficiency, outputs per SM per class — are fitted by
 * minimizing, over the plausible range of each (bounds in `FIT_PARAMETERS`):
 *
 *   J = mean over solo points (batch 1–16) of ln(sim / ref)²
 *     + mean over non-artifact pairs (every batch) of (ratio_sim − ratio_ref)²
 *     + 100 · Σ hinge² of the goals with a margin (solo beyond ±22 %, pair ratio at the goal's
 *       batch beyond ±0.13),
 *
 * i.e. least squares in log latency and in overlap ratio, with the calibration goals
 * (`CALIBRATION_GOALS`, docs/devices.md) as soft constraints. The search is deterministic and works on the logarithms of the parameters,
 * each clamped to its range, from a physically motivated start (`FIT_START`): Nelder–Mead
 * (coefficients 1, 2, ½, ½; initial simplex ±0.3 in log; at most 400 evaluations per
 * parameter), restarted from its result (at most 8 runs) until a restart gains no more than
 * 0.1 % of the objective; then a polishing pattern search — each parameter in turn added
 * ± a log step (starting at ln 1.1), keeping any improvement, the step halved when a sweep
 * improves nothing, until the step is ≤ 1e-3 (a factor of about 1.001). `memoryEfficiency` (0.85: streaming kernels reach
 * 80–90 % of peak HBM bandwidth, e.g. BabelStream, Deakin et al., 2018) and the graph-mode
 * launch costs are not fitted — the reference has no graph-mode data and no memory-bound model.
 */
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { ModelSpec } from '../../model/spec.ts';
import { DEFAULT_SIM_CONSTANTS, GRAPH_LAUNCH_US, MEMORY_EFFICIENCY, modelCosts, operatorClasses, type KernelClass, type SimConstants } from './cost-model.ts';
import { SimEngine } from './engine.ts';
import type { GpuProfile, RuntimeMode } from './profiles.ts';

/** Path of the A100 reference bundled with the simulator, `src/device/sim/reference/a100-group-latency.csv` (docs/devices.md). */
export const BUNDLED_REFERENCE_PATH = fileURLToPath(new URL('./reference/a100-group-latency.csv', import.meta.url));

/** The measured H200 group latencies bundled with the simulator (graph mode, GPU only: `reference/h200-measured/`). */
export const H200_REFERENCE_PATH = fileURLToPath(new URL('./reference/h200-measured/h200-group-latency.csv', import.meta.url));

/** Relative tolerance beyond which a reference pair outside the physical bounds is an artifact. */
export const ARTIFACT_TOLERANCE = 0.05;

/** The project's calibration goals for the simulator (docs/devices.md "Calibration against the A100 reference"). */
export const CALIBRATION_GOALS = {
  /** Every solo latency within ±25 % of the reference. */
  soloRelativeError: 0.25,
  /** Pair overlap ratios within ±0.15 of the reference's … */
  pairRatioError: 0.15,
  /** … for at least this many of the 21 pairs. */
  pairsWithin: 17,
} as const;

export interface ReferenceSolo {
  readonly model: string;
  readonly batch: number;
  /** Sequence length (0 for models without one). */
  readonly seqLen: number;
  readonly latencyMs: number;
}

export interface ReferencePair {
  readonly models: readonly [string, string];
  readonly batch: number;
  readonly seqLens: readonly [number, number];
  readonly latencyMs: number;
}

export interface ReferenceData {
  readonly solo: readonly ReferenceSolo[];
  readonly pairs: readonly ReferencePair[];
}

const HEADER = 'model_a,start_a,end_a,batch_a,seq_len_a,model_b,start_b,end_b,batch_b,seq_len_b,latency_ms';

/**
 * Parse the reference CSV (header `model_a,start_a,end_a,batch_a,seq_len_a,model_b,…,latency_ms`;
 * empty `model_b` for solo rows). Only whole-model rows (start 0) are expected; `end` is not
 * checked here (the calibration checks it against the spec).
 * @throws RangeError naming the line and the field for a malformed row or header.
 */
export function parseReferenceCsv(text: string): ReferenceData {
  const lines = text.split(/\r?\n/).filter((l) => l.trim() !== '');
  if (lines[0]?.trim() !== HEADER) throw new RangeError(`reference CSV: line 1 must be the header '${HEADER}'`);
  const solo: ReferenceSolo[] = [];
  const pairs: ReferencePair[] = [];
  lines.slice(1).forEach((line, i) => {
    const at = `reference CSV line ${i + 2}`;
    const f = line.split(',');
    if (f.length !== 11) throw new RangeError(`${at}: expected 11 fields, got ${f.length}`);
    const num = (j: number, name: string, min: number): number => {
      const v = Number(f[j]);
      if (f[j]!.trim() === '' || !Number.isFinite(v) || v < min) throw new RangeError(`${at}: ${name} '${f[j]}' must be a number ≥ ${min}`);
      return v;
    };
    const latencyMs = num(10, 'latency_ms', 0);
    const a = f[0]!.trim();
    if (a === '') throw new RangeError(`${at}: model_a is empty`);
    if (num(1, 'start_a', 0) !== 0) throw new RangeError(`${at}: start_a must be 0 (whole models only)`);
    const batch = num(3, 'batch_a', 1);
    const seqA = num(4, 'seq_len_a', 0);
    const b = f[5]!.trim();
    if (b === '') {
      solo.push({ model: a, batch, seqLen: seqA, latencyMs });
      return;
    }
    if (num(6, 'start_b', 0) !== 0) throw new RangeError(`${at}: start_b must be 0 (whole models only)`);
    if (num(8, 'batch_b', 1) !== batch) throw new RangeError(`${at}: batch_b must equal batch_a`);
    pairs.push({ models: [a, b], batch, seqLens: [seqA, num(9, 'seq_len_b', 0)], latencyMs });
  });
  return { solo, pairs };
}

/** Read and parse a reference CSV (default: the bundled copy). */
export async function loadReference(file: string = BUNDLED_REFERENCE_PATH): Promise<ReferenceData> {
  return parseReferenceCsv(await readFile(file, 'utf8'));
}

/** The models the calibration needs specs for. */
export function referenceModels(ref: ReferenceData): string[] {
  const names = new Set<string>();
  for (const s of ref.solo) names.add(s.model);
  for (const p of ref.pairs) for (const m of p.models) names.add(m);
  return [...names];
}

/** One whole-model query of a group to simulate. */
export interface GroupQuery {
  readonly spec: ModelSpec;
  readonly batch: number;
  /** Sequence length; 0 = the model's default. */
  readonly seqLen: number;
}

/** What the calibration simulates on. */
export interface CalibrationTarget {
  readonly profile: GpuProfile;
  readonly mode: RuntimeMode;
  readonly constants: SimConstants;
}

/**
 * Group latency (ms) of whole-model queries launched together on an idle simulated device,
 * without noise, exactly as `SimDevice.runGroup` reports `groupLatencyMs`: dispatch, the
 * overlapped GPU work, one barrier hand-over per segment beyond the first. Queries of the same
 * model share an executor (one after the other).
 */
export function simulateGroupMs(queries: readonly GroupQuery[], target: CalibrationTarget, classes: ReadonlyMap<ModelSpec, readonly KernelClass[]> = new Map()): number {
  if (queries.length === 0) return 0;
  const { profile, mode, constants } = target;
  const engine = new SimEngine();
  const executors = new Map<string, number>();
  let last = 0;
  for (const q of queries) {
    let ex = executors.get(q.spec.name);
    if (ex === undefined) {
      ex = engine.addExecutor();
      executors.set(q.spec.name, ex);
    }
    const seq = q.seqLen > 0 ? q.seqLen : q.spec.defaultSeqLen;
    const costs = modelCosts(q.spec, classes.get(q.spec) ?? operatorClasses(q.spec), q.batch, seq, profile, mode, constants);
    engine.submit({ executor: ex, costs, start: 0, end: costs.length, onDone: (_s, endMs) => (last = Math.max(last, endMs)) }, constants.dispatchMs);
  }
  engine.runToIdle();
  return last + constants.barrierMs * (queries.length - 1);
}

export interface CalibrationSoloRow {
  readonly model: string;
  readonly batch: number;
  readonly latencyMs: number;
  readonly referenceMs: number;
}

export interface CalibrationPairRow {
  readonly models: readonly [string, string];
  readonly batch: number;
  /** Simulated group latency ÷ sum of the simulated solo latencies. */
  readonly ratio: number;
  /** Reference group latency ÷ sum of the reference solo latencies. */
  readonly referenceRatio: number;
  readonly artifact: boolean;
  /** Why the reference pair is an artifact (absent when it is not). */
  readonly artifactReason?: string;
  readonly groupMs: number;
  readonly referenceGroupMs: number;
}

export interface CalibrationSummary {
  /** Largest |sim / ref − 1| over the solo rows. */
  readonly worstSoloError: number;
  readonly soloWithinGoal: number;
  readonly soloTotal: number;
  readonly pairsWithinGoal: number;
  readonly pairsTotal: number;
  readonly artifacts: number;
  /** Both goals met. */
  readonly met: boolean;
}

export interface CalibrationReport {
  readonly solo: readonly CalibrationSoloRow[];
  readonly pairs: readonly CalibrationPairRow[];
  readonly summary: CalibrationSummary;
}

export interface CalibrationOptions {
  /** Solo batch sizes [1, 4, 16]. */
  readonly soloBatches?: readonly number[];
  /** Batch size of the pairs [4]. */
  readonly pairBatch?: number;
}

/** Specs by model name; the calibration needs every model the reference names. */
export type SpecsByName = ReadonlyMap<string, ModelSpec>;

function specOf(specs: SpecsByName, name: string): ModelSpec {
  const spec = specs.get(name);
  if (!spec) throw new RangeError(`calibration: no ModelSpec for reference model '${name}' (have: ${[...specs.keys()].join(', ')})`);
  return spec;
}

function referenceSolo(ref: ReferenceData, model: string, batch: number): ReferenceSolo {
  const row = ref.solo.find((s) => s.model === model && s.batch === batch);
  if (!row) throw new RangeError(`calibration: the reference has no solo latency of ${model} at batch ${batch}`);
  return row;
}

/**
 * Why a reference pair is an artifact of the learned surface, or undefined when it is within
 * the physical bounds (± `ARTIFACT_TOLERANCE`): faster than its slower member alone, or slower
 * than both members back to back.
 */
export function artifactReason(pairMs: number, soloAMs: number, soloBMs: number, tolerance = ARTIFACT_TOLERANCE): string | undefined {
  const slower = Math.max(soloAMs, soloBMs);
  if (pairMs < slower * (1 - tolerance)) {
    return `the pair (${pairMs.toFixed(2)} ms) is ${((1 - pairMs / slower) * 100).toFixed(1)}% faster than its slower member alone (${slower.toFixed(2)} ms)`;
  }
  const serial = soloAMs + soloBMs;
  if (pairMs > serial * (1 + tolerance)) {
    return `the pair (${pairMs.toFixed(2)} ms) is ${((pairMs / serial - 1) * 100).toFixed(1)}% slower than both members run back to back (${serial.toFixed(2)} ms)`;
  }
  return undefined;
}

/**
 * Compare the simulator with the reference: solo latencies at `soloBatches`, pair overlap ratios
 * at `pairBatch`, and whether the goals are met.
 * @throws RangeError when a model has no spec or the reference lacks a needed solo row.
 */
export function calibrate(specs: SpecsByName, ref: ReferenceData, target: CalibrationTarget, options: CalibrationOptions = {}): CalibrationReport {
  const soloBatches = options.soloBatches ?? [1, 4, 16];
  const pairBatch = options.pairBatch ?? 4;
  const classes = new Map<ModelSpec, readonly KernelClass[]>();
  for (const spec of specs.values()) classes.set(spec, operatorClasses(spec));
  const soloCache = new Map<string, number>();
  const simSolo = (model: string, batch: number, seqLen: number): number => {
    const key = `${model}/${batch}/${seqLen}`;
    let ms = soloCache.get(key);
    if (ms === undefined) {
      ms = simulateGroupMs([{ spec: specOf(specs, model), batch, seqLen }], target, classes);
      soloCache.set(key, ms);
    }
    return ms;
  };
  const solo: CalibrationSoloRow[] = ref.solo
    .filter((s) => soloBatches.includes(s.batch))
    .map((s) => ({ model: s.model, batch: s.batch, latencyMs: simSolo(s.model, s.batch, s.seqLen), referenceMs: s.latencyMs }));
  const pairs: CalibrationPairRow[] = ref.pairs
    .filter((p) => p.batch === pairBatch)
    .map((p) => {
      const [a, b] = p.models;
      const [seqA, seqB] = p.seqLens;
      const groupMs = simulateGroupMs(
        [
          { spec: specOf(specs, a), batch: p.batch, seqLen: seqA },
          { spec: specOf(specs, b), batch: p.batch, seqLen: seqB },
        ],
        target,
        classes,
      );
      const refA = referenceSolo(ref, a, p.batch).latencyMs;
      const refB = referenceSolo(ref, b, p.batch).latencyMs;
      const reason = artifactReason(p.latencyMs, refA, refB);
      return {
        models: [a, b] as const,
        batch: p.batch,
        ratio: groupMs / (simSolo(a, p.batch, seqA) + simSolo(b, p.batch, seqB)),
        referenceRatio: p.latencyMs / (refA + refB),
        artifact: reason !== undefined,
        ...(reason === undefined ? {} : { artifactReason: reason }),
        groupMs,
        referenceGroupMs: p.latencyMs,
      };
    });
  return { solo, pairs, summary: summarize(solo, pairs) };
}

function summarize(solo: readonly CalibrationSoloRow[], pairs: readonly CalibrationPairRow[]): CalibrationSummary {
  const g = CALIBRATION_GOALS;
  const soloErrors = solo.map((s) => Math.abs(s.latencyMs / s.referenceMs - 1));
  const soloWithinGoal = soloErrors.filter((e) => e <= g.soloRelativeError).length;
  const pairsWithinGoal = pairs.filter((p) => Math.abs(p.ratio - p.referenceRatio) <= g.pairRatioError).length;
  const needPairs = Math.min(g.pairsWithin, pairs.length);
  return {
    worstSoloError: soloErrors.reduce((m, e) => Math.max(m, e), 0),
    soloWithinGoal,
    soloTotal: solo.length,
    pairsWithinGoal,
    pairsTotal: pairs.length,
    artifacts: pairs.filter((p) => p.artifact).length,
    met: soloWithinGoal === solo.length && pairsWithinGoal >= needPairs,
  };
}

/** One fitted constant: how to read and set it, and its plausible range. */
export interface FitParameter {
  readonly name: string;
  readonly min: number;
  readonly max: number;
  get(k: SimConstants): number;
  set(k: SimConstants, value: number): SimConstants;
}

const withLaunch = (k: SimConstants, cls: KernelClass, us: number): SimConstants => ({ ...k, launchUs: { ...k.launchUs, eager: { ...k.launchUs.eager, [cls]: us } } });
const withEfficiency = (k: SimConstants, cls: KernelClass, e: number): SimConstants => ({ ...k, computeEfficiency: { ...k.computeEfficiency, [cls]: e } });
const withOutputs = (k: SimConstants, cls: KernelClass, n: number): SimConstants => ({ ...k, outputsPerSm: { ...k.outputsPerSm, [cls]: n } });

/** The fitted constants and their plausible ranges (see `SimConstants` for the meaning of each). */
export const FIT_PARAMETERS: readonly FitParameter[] = [
  { name: 'launchUs.eager.spatial', min: 3, max: 60, get: (k) => k.launchUs.eager.spatial, set: (k, v) => withLaunch(k, 'spatial', v) },
  { name: 'launchUs.eager.dense', min: 1, max: 60, get: (k) => k.launchUs.eager.dense, set: (k, v) => withLaunch(k, 'dense', v) },
  { name: 'dispatchMs', min: 0.01, max: 2, get: (k) => k.dispatchMs, set: (k, v) => ({ ...k, dispatchMs: v }) },
  { name: 'barrierMs', min: 0.01, max: 1, get: (k) => k.barrierMs, set: (k, v) => ({ ...k, barrierMs: v }) },
  { name: 'computeEfficiency.spatial', min: 0.2, max: 0.9, get: (k) => k.computeEfficiency.spatial, set: (k, v) => withEfficiency(k, 'spatial', v) },
  { name: 'computeEfficiency.dense', min: 0.2, max: 0.9, get: (k) => k.computeEfficiency.dense, set: (k, v) => withEfficiency(k, 'dense', v) },
  { name: 'outputsPerSm.spatial', min: 1e3, max: 3e5, get: (k) => k.outputsPerSm.spatial, set: (k, v) => withOutputs(k, 'spatial', v) },
  { name: 'outputsPerSm.dense', min: 1e2, max: 3e5, get: (k) => k.outputsPerSm.dense, set: (k, v) => withOutputs(k, 'dense', v) },
];

const withGraphLaunch = (k: SimConstants, cls: KernelClass, us: number): SimConstants => ({ ...k, launchUs: { ...k.launchUs, graph: { ...k.launchUs.graph, [cls]: us } } });
const withFloor = (k: SimConstants, cls: KernelClass, us: number): SimConstants => ({ ...k, kernelFloorUs: { ...k.kernelFloorUs, [cls]: us } });

/**
 * The constants fitted to a graph-mode (GPU-only) measurement and their plausible ranges: the
 * device-side launch gap and the kernel floor per class, compute efficiency and outputs per SM
 * per class, and the element-wise traffic per node. Dispatch and barrier are not fitted (0: the
 * measurement times the GPU alone, from a gate event to the members' end events); `kernelGrain`
 * is fitted apart, to the random-overlap measurement (`fitKernelGrain`), since launching a
 * group's members together hardly depends on it.
 */
export const GRAPH_FIT_PARAMETERS: readonly FitParameter[] = [
  { name: 'launchUs.graph.spatial', min: 0.1, max: 10, get: (k) => k.launchUs.graph.spatial, set: (k, v) => withGraphLaunch(k, 'spatial', v) },
  { name: 'launchUs.graph.dense', min: 0.1, max: 10, get: (k) => k.launchUs.graph.dense, set: (k, v) => withGraphLaunch(k, 'dense', v) },
  { name: 'kernelFloorUs.spatial', min: 0.1, max: 20, get: (k) => k.kernelFloorUs.spatial, set: (k, v) => withFloor(k, 'spatial', v) },
  { name: 'kernelFloorUs.dense', min: 0.1, max: 20, get: (k) => k.kernelFloorUs.dense, set: (k, v) => withFloor(k, 'dense', v) },
  { name: 'computeEfficiency.spatial', min: 0.05, max: 0.9, get: (k) => k.computeEfficiency.spatial, set: (k, v) => withEfficiency(k, 'spatial', v) },
  { name: 'computeEfficiency.dense', min: 0.05, max: 0.9, get: (k) => k.computeEfficiency.dense, set: (k, v) => withEfficiency(k, 'dense', v) },
  { name: 'outputsPerSm.spatial', min: 1e2, max: 3e5, get: (k) => k.outputsPerSm.spatial, set: (k, v) => withOutputs(k, 'spatial', v) },
  { name: 'outputsPerSm.dense', min: 1e2, max: 3e5, get: (k) => k.outputsPerSm.dense, set: (k, v) => withOutputs(k, 'dense', v) },
  { name: 'nodeTraffic', min: 0.05, max: 4, get: (k) => k.nodeTraffic, set: (k, v) => ({ ...k, nodeTraffic: v }) },
];

/** The parameters `fitConstants` fits by default for a runtime mode. */
export function fitParametersFor(mode: RuntimeMode): readonly FitParameter[] {
  return mode === 'graph' ? GRAPH_FIT_PARAMETERS : FIT_PARAMETERS;
}

/**
 * The start of the graph-mode search: textbook values — a kernel node of a replayed CUDA graph
 * launches in about a microsecond (NVIDIA Technical Blog, "Getting Started with CUDA Graphs",
 * 2019), a short kernel holds its SMs a few µs (3), a 128×128 tile per SM… (20 000 outputs) for
 * convolutions and split-K GEMMs that fill the GPU with little output (100), a third of TF32 peak
 * for convolutions and 60 % of FP32 peak for GEMMs, each element-wise node reading and writing
 * about 1.5 output-sized tensors (some in place or from L2), kernel-granular sharing half way
 * (0.5); no dispatch or barrier (a GPU-only measurement). Other fields are the A100 defaults.
 */
export const GRAPH_FIT_START: SimConstants = {
  ...DEFAULT_SIM_CONSTANTS,
  launchUs: { ...DEFAULT_SIM_CONSTANTS.launchUs, graph: { spatial: 1, dense: 1 } },
  dispatchMs: 0,
  barrierMs: 0,
  computeEfficiency: { spatial: 0.35, dense: 0.6 },
  outputsPerSm: { spatial: 20000, dense: 100 },
  kernelGrain: 0.5,
  nodeTraffic: 1.5,
  kernelFloorUs: { spatial: 3, dense: 3 },
};

/**
 * The start of the search: textbook values — eager launches of 20 µs, a 128×128 tile per SM,
 * half the peak, half a millisecond of dispatch and barrier.
 */
export const FIT_START: SimConstants = {
  launchUs: { eager: { spatial: 20, dense: 20 }, graph: { spatial: GRAPH_LAUNCH_US, dense: GRAPH_LAUNCH_US } },
  dispatchMs: 0.5,
  barrierMs: 0.5,
  computeEfficiency: { spatial: 0.5, dense: 0.5 },
  memoryEfficiency: MEMORY_EFFICIENCY,
  outputsPerSm: { spatial: 16384, dense: 16384 },
  kernelGrain: 0,
  nodeTraffic: 0,
  kernelFloorUs: { spatial: 0, dense: 0 },
};

export interface FitResult {
  readonly constants: SimConstants;
  /** Objective J at the result (see the module docs). */
  readonly objective: number;
  /** Objective evaluations made. */
  readonly evaluations: number;
}

/** Goal margins used inside the fit's objective (tighter than the goals). */
const FIT_SOLO_MARGIN = 0.22;
const FIT_PAIR_MARGIN = 0.13;
const FIT_SOLO_BATCH_MAX = 16;

/**
 * The objective J of the module docs for constants `k` (lower is better).
 * @throws RangeError as `calibrate` does.
 */
export function fitObjective(specs: SpecsByName, ref: ReferenceData, target: Omit<CalibrationTarget, 'constants'>, k: SimConstants, options: CalibrationOptions = {}): number {
  const t: CalibrationTarget = { ...target, constants: k };
  const goalBatches = options.soloBatches ?? [1, 4, 16];
  const pairBatch = options.pairBatch ?? 4;
  const classes = new Map<ModelSpec, readonly KernelClass[]>();
  for (const spec of specs.values()) classes.set(spec, operatorClasses(spec));
  const solos = new Map<string, number>();
  const simSolo = (model: string, batch: number, seqLen: number): number => {
    const key = `${model}/${batch}/${seqLen}`;
    let ms = solos.get(key);
    if (ms === undefined) {
      ms = simulateGroupMs([{ spec: specOf(specs, model), batch, seqLen }], t, classes);
      solos.set(key, ms);
    }
    return ms;
  };
  let soloSq = 0;
  let soloN = 0;
  let penalty = 0;
  for (const s of ref.solo) {
    if (s.batch > FIT_SOLO_BATCH_MAX) continue;
    const ms = simSolo(s.model, s.batch, s.seqLen);
    soloSq += Math.log(ms / s.latencyMs) ** 2;
    soloN++;
    if (goalBatches.includes(s.batch)) penalty += Math.max(0, Math.abs(ms / s.latencyMs - 1) - FIT_SOLO_MARGIN) ** 2;
  }
  let pairSq = 0;
  let pairN = 0;
  for (const p of ref.pairs) {
    const [a, b] = p.models;
    const refA = referenceSolo(ref, a, p.batch).latencyMs;
    const refB = referenceSolo(ref, b, p.batch).latencyMs;
    if (artifactReason(p.latencyMs, refA, refB) !== undefined) continue;
    const groupMs = simulateGroupMs(
      [
        { spec: specOf(specs, a), batch: p.batch, seqLen: p.seqLens[0] },
        { spec: specOf(specs, b), batch: p.batch, seqLen: p.seqLens[1] },
      ],
      t,
      classes,
    );
    const d = groupMs / (simSolo(a, p.batch, p.seqLens[0]) + simSolo(b, p.batch, p.seqLens[1])) - p.latencyMs / (refA + refB);
    pairSq += d * d;
    pairN++;
    if (p.batch === pairBatch) penalty += Math.max(0, Math.abs(d) - FIT_PAIR_MARGIN) ** 2;
  }
  return soloSq / Math.max(1, soloN) + pairSq / Math.max(1, pairN) + 100 * penalty;
}

/**
 * Fit the free constants to the reference (procedure in the module docs). Deterministic.
 * @param start where the search begins (default `FIT_START`); its non-fitted fields are kept.
 */
export function fitConstants(
  specs: SpecsByName,
  ref: ReferenceData,
  target: Omit<CalibrationTarget, 'constants'>,
  start: SimConstants = target.mode === 'graph' ? GRAPH_FIT_START : FIT_START,
  options: CalibrationOptions = {},
  params: readonly FitParameter[] = fitParametersFor(target.mode),
): FitResult {
  let evaluations = 0;
  const clampLog = (x: readonly number[]): number[] => x.map((v, i) => Math.min(Math.log(params[i]!.max), Math.max(Math.log(params[i]!.min), v)));
  const toConstants = (x: readonly number[]): SimConstants => params.reduce((k, p, i) => p.set(k, Math.exp(x[i]!)), start);
  const f = (x: readonly number[]): number => {
    evaluations++;
    return fitObjective(specs, ref, target, toConstants(x), options);
  };
  let x = clampLog(params.map((p) => Math.log(p.get(start))));
  let fx = f(x);
  // Nelder–Mead on the log parameters (clamped to their ranges), restarted from its result
  // until a restart no longer improves by 0.1 %.
  for (let restart = 0; restart < 8; restart++) {
    const r = nelderMead(f, x, 0.3, clampLog, 400 * params.length);
    const gained = fx - r.fx;
    if (r.fx < fx) {
      x = r.x;
      fx = r.fx;
    }
    if (gained <= 1e-3 * Math.abs(fx)) break;
  }
  // Polish: pattern search, each parameter in turn ×/÷ a step, halving (in log) when stuck.
  let step = Math.log(1.1);
  while (step > 1e-3) {
    let improved = false;
    for (let i = 0; i < params.length; i++) {
      for (const d of [step, -step]) {
        const y = clampLog(x.map((v, j) => (j === i ? v + d : v)));
        if (y[i] === x[i]) continue;
        const fy = f(y);
        if (fy < fx) {
          x = y;
          fx = fy;
          improved = true;
        }
      }
    }
    if (!improved) step /= 2;
  }
  return { constants: toConstants(x), objective: fx, evaluations };
}

/** Nelder–Mead minimization (standard coefficients 1, 2, ½, ½) with a projection onto the bounds. */
function nelderMead(f: (x: readonly number[]) => number, x0: readonly number[], scale: number, project: (x: readonly number[]) => number[], maxEvaluations: number): { x: number[]; fx: number } {
  const n = x0.length;
  let simplex = [project(x0)];
  for (let i = 0; i < n; i++) {
    const v = [...x0];
    v[i] = v[i]! + scale;
    let p = project(v);
    if (p[i] === x0[i]) {
      v[i] = x0[i]! - scale;
      p = project(v);
    }
    simplex.push(p);
  }
  let values = simplex.map(f);
  let evals = n + 1;
  const combine = (a: readonly number[], b: readonly number[], t: number): number[] => project(a.map((ai, j) => ai + t * (b[j]! - ai)));
  while (evals < maxEvaluations) {
    const order = values.map((v, i) => [v, i] as const).sort((p, q) => p[0] - q[0]);
    simplex = order.map(([, i]) => simplex[i]!);
    values = order.map(([v]) => v);
    if (values[n]! - values[0]! <= 1e-9 * (Math.abs(values[0]!) + 1e-12)) break;
    const centroid = simplex.slice(0, n).reduce((c, v) => c.map((ci, j) => ci + v[j]! / n), new Array<number>(n).fill(0));
    const worst = simplex[n]!;
    const reflected = combine(centroid, worst, -1);
    const fr = f(reflected);
    evals++;
    if (fr < values[0]!) {
      const expanded = combine(centroid, worst, -2);
      const fe = f(expanded);
      evals++;
      if (fe < fr) {
        simplex[n] = expanded;
        values[n] = fe;
      } else {
        simplex[n] = reflected;
        values[n] = fr;
      }
    } else if (fr < values[n - 1]!) {
      simplex[n] = reflected;
      values[n] = fr;
    } else {
      const contracted = fr < values[n]! ? combine(centroid, reflected, 0.5) : combine(centroid, worst, 0.5);
      const fc = f(contracted);
      evals++;
      if (fc < Math.min(fr, values[n]!)) {
        simplex[n] = contracted;
        values[n] = fc;
      } else {
        const best = simplex[0]!;
        for (let i = 1; i <= n; i++) {
          simplex[i] = combine(best, simplex[i]!, 0.5);
          values[i] = f(simplex[i]!);
          evals++;
        }
      }
    }
  }
  let bi = 0;
  for (let i = 1; i <= n; i++) if (values[i]! < values[bi]!) bi = i;
  return { x: simplex[bi]!, fx: values[bi]! };
}
