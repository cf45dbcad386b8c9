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
 * ## Fitting
 * The simulator's free constants are fitted to the same reference by `fitConstants` (`fit.ts`,
 * whose docs give the objective and the search).
 */
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { ModelSpec } from '../../model/spec.ts';
import { modelCosts, operatorClasses, type KernelClass, type SimConstants } from './cost-model.ts';
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

/** @throws RangeError when `specs` has no model `name`. */
export function specOf(specs: SpecsByName, name: string): ModelSpec {
  const spec = specs.get(name);
  if (!spec) throw new RangeError(`calibration: no ModelSpec for reference model '${name}' (have: ${[...specs.keys()].join(', ')})`);
  return spec;
}

/** @throws RangeError when the reference has no solo latency of `model` at `batch`. */
export function referenceSolo(ref: ReferenceData, model: string, batch: number): ReferenceSolo {
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
