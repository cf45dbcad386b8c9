/**
 * Uncontrolled overlap on the simulated device, against the measured H200
 * (`reference/h200-measured/h200-random-overlap.csv`, written by `scripts/gpu/measure_h200.py`):
 * query B of another model starts at a random moment while query A runs — what several CUDA
 * streams, MPS or several processes give when nobody coordinates them — and A's latency moves
 * with where B lands. The measurement replays both whole models (CUDA graphs, separate
 * streams), B after a uniformly random offset in [0, solo latency of A), 120 times per ordered
 * pair at batch 4, and records each member's latency from its own start to its end.
 *
 * ## What is compared
 * For every measured ordered pair (A, B): A's p50 and p99 latency ÷ A's solo latency, measured
 * and simulated (each side divides by its own solo), and B's likewise. The simulation replaces
 * the random offsets by their stratified version — offset_i = (i + ½)/n × solo_A for
 * i = 0 … n−1 (n = the measured repetitions) — so it is deterministic and covers the uniform
 * distribution evenly; it runs without noise. Percentiles as the measurement script computes
 * them: p50 = the median (mean of the two middle values for even n, as Python's
 * `statistics.median`: `median` of `src/stats.ts`), p99 = the value at rank
 * round(0.99 n + 0.5) (1-based; round half to even, as Python's `round`).
 *
 * ## Tolerance
 * `RANDOM_OVERLAP_TOLERANCE`: a slowdown (p50 or p99 ÷ solo) is "within" when it differs from
 * the measured one by at most 0.15 — the pair-ratio goal of the calibration, on the same kind of
 * dimensionless latency ratio. Not a calibration goal: reported, not enforced.
 */
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import type { ModelSpec } from '../../model/spec.ts';
import { median } from '../../stats.ts';
import type { CalibrationTarget, GroupQuery, ReferenceData, SpecsByName } from './calibrate.ts';
import { fitConstants, fitObjective, GRAPH_FIT_START } from './fit.ts';
import { modelCosts, operatorClasses, type KernelClass, type SimConstants } from './cost-model.ts';
import { SimEngine } from './engine.ts';

/** The measured H200 random-overlap CSV bundled with the simulator. */
export const H200_RANDOM_OVERLAP_PATH = fileURLToPath(new URL('./reference/h200-measured/h200-random-overlap.csv', import.meta.url));

/** Largest |simulated − measured| slowdown (latency ÷ solo) counted as within. */
export const RANDOM_OVERLAP_TOLERANCE = 0.15;

/** One measured ordered pair: B started at a uniformly random offset during A. Times in ms. */
export interface RandomOverlapRow {
  readonly modelA: string;
  readonly modelB: string;
  readonly batch: number;
  readonly soloAMs: number;
  readonly soloBMs: number;
  /** Repetitions (random offsets) measured. */
  readonly n: number;
  readonly aP50Ms: number;
  readonly aP99Ms: number;
  readonly bP50Ms: number;
  readonly bP99Ms: number;
}

const HEADER = 'model_a,model_b,batch,solo_a_ms,solo_b_ms,n,a_p50_ms,a_p99_ms,a_max_ms,b_p50_ms,b_p99_ms,a_p99_over_solo,b_p99_over_solo';

/**
 * Parse a random-overlap CSV (header `model_a,model_b,batch,solo_a_ms,solo_b_ms,n,a_p50_ms,…`).
 * @throws RangeError naming the line and the field for a malformed header or row.
 */
export function parseRandomOverlapCsv(text: string): RandomOverlapRow[] {
  const lines = text.split(/\r?\n/).filter((l) => l.trim() !== '');
  if (lines[0]?.trim() !== HEADER) throw new RangeError(`random-overlap CSV: line 1 must be the header '${HEADER}'`);
  return lines.slice(1).map((line, i) => {
    const at = `random-overlap CSV line ${i + 2}`;
    const f = line.split(',');
    if (f.length !== 13) throw new RangeError(`${at}: expected 13 fields, got ${f.length}`);
    const num = (j: number, name: string, min: number): number => {
      const v = Number(f[j]);
      if (f[j]!.trim() === '' || !Number.isFinite(v) || v < min) throw new RangeError(`${at}: ${name} '${f[j]}' must be a number ≥ ${min}`);
      return v;
    };
    const modelA = f[0]!.trim();
    const modelB = f[1]!.trim();
    if (modelA === '' || modelB === '') throw new RangeError(`${at}: model_a and model_b must not be empty`);
    const n = num(5, 'n', 1);
    if (!Number.isInteger(n)) throw new RangeError(`${at}: n '${f[5]}' must be an integer`);
    return {
      modelA,
      modelB,
      batch: num(2, 'batch', 1),
      soloAMs: num(3, 'solo_a_ms', 0),
      soloBMs: num(4, 'solo_b_ms', 0),
      n,
      aP50Ms: num(6, 'a_p50_ms', 0),
      aP99Ms: num(7, 'a_p99_ms', 0),
      bP50Ms: num(9, 'b_p50_ms', 0),
      bP99Ms: num(10, 'b_p99_ms', 0),
    };
  });
}

/** Read and parse a random-overlap CSV (default: the bundled H200 measurement). */
export async function loadRandomOverlap(file: string = H200_RANDOM_OVERLAP_PATH): Promise<RandomOverlapRow[]> {
  return parseRandomOverlapCsv(await readFile(file, 'utf8'));
}

/** Round half to even (Python's `round`), as the measurement script's percentile uses. */
function roundHalfEven(x: number): number {
  const r = Math.round(x);
  return Math.abs(x - Math.trunc(x)) === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/**
 * Percentile `q` (0–100) of `xs` as `measure_h200.py`'s `pct`: the sorted value at 1-based rank
 * round(q/100 · n + 0.5), clamped to [1, n].
 * @throws RangeError for an empty list.
 */
export function scriptPercentile(xs: readonly number[], q: number): number {
  if (xs.length === 0) throw new RangeError('scriptPercentile: no values');
  const s = [...xs].sort((a, b) => a - b);
  const rank = roundHalfEven((q / 100) * s.length + 0.5);
  return s[Math.min(s.length - 1, Math.max(0, rank - 1))]!;
}

/** Simulated uncontrolled overlap of one ordered pair. Times in ms. */
export interface SimulatedRandomOverlap {
  readonly soloAMs: number;
  readonly soloBMs: number;
  /** A's latency (its start to its end) for each offset, in offset order. */
  readonly aMs: readonly number[];
  /** B's latency (its start to its end) for each offset. */
  readonly bMs: readonly number[];
}

/**
 * Run whole query A alone and with whole query B starting at each stratified offset
 * (i + ½)/n × solo_A, on an idle simulated device without noise. A and B must be of different
 * models (each model has one executor).
 * @throws RangeError for n < 1 or A and B of the same model; as `modelCosts` for bad costs.
 */
export function simulateRandomOverlap(a: GroupQuery, b: GroupQuery, target: CalibrationTarget, n: number, classes: ReadonlyMap<ModelSpec, readonly KernelClass[]> = new Map()): SimulatedRandomOverlap {
  if (!(Number.isInteger(n) && n >= 1)) throw new RangeError(`simulateRandomOverlap: n ${n} must be an integer ≥ 1`);
  if (a.spec.name === b.spec.name) throw new RangeError(`simulateRandomOverlap: A and B are both ${a.spec.name}; they must be different models`);
  const { profile, mode, constants } = target;
  const costsOf = (q: GroupQuery): ReturnType<typeof modelCosts> =>
    modelCosts(q.spec, classes.get(q.spec) ?? operatorClasses(q.spec), q.batch, q.seqLen > 0 ? q.seqLen : q.spec.defaultSeqLen, profile, mode, constants);
  const costsA = costsOf(a);
  const costsB = costsOf(b);
  const run = (offsetMs: number): { a: number; b: number } => {
    const engine = new SimEngine();
    const ea = engine.addExecutor();
    const eb = engine.addExecutor();
    const lat = { a: NaN, b: NaN };
    engine.submit({ executor: ea, costs: costsA, start: 0, end: costsA.length, onDone: (s, e) => (lat.a = e - s) }, 0);
    engine.submit({ executor: eb, costs: costsB, start: 0, end: costsB.length, onDone: (s, e) => (lat.b = e - s) }, offsetMs);
    engine.runToIdle();
    return lat;
  };
  const soloA = soloMs(costsA);
  const soloB = soloMs(costsB);
  const aMs: number[] = [];
  const bMs: number[] = [];
  for (let i = 0; i < n; i++) {
    const r = run(((i + 0.5) / n) * soloA);
    aMs.push(r.a);
    bMs.push(r.b);
  }
  return { soloAMs: soloA, soloBMs: soloB, aMs, bMs };
}

/** Latency of one whole query alone on an idle engine (no dispatch), ms. */
function soloMs(costs: Parameters<SimEngine['submit']>[0]['costs']): number {
  const engine = new SimEngine();
  const ex = engine.addExecutor();
  let ms = NaN;
  engine.submit({ executor: ex, costs, start: 0, end: costs.length, onDone: (s, e) => (ms = e - s) }, 0);
  engine.runToIdle();
  return ms;
}

/**
 * Sequence length of each model in a group-latency reference (its solo rows; 0 = the model's
 * default), for `compareRandomOverlap`.
 */
export function referenceSeqLens(ref: ReferenceData): Map<string, number> {
  const out = new Map<string, number>();
  for (const s of ref.solo) if (s.seqLen > 0) out.set(s.model, s.seqLen);
  return out;
}

/** One ordered pair: measured and simulated slowdowns (latency ÷ own solo). */
export interface RandomOverlapComparisonRow {
  readonly modelA: string;
  readonly modelB: string;
  readonly batch: number;
  readonly measured: { readonly aP50: number; readonly aP99: number; readonly bP50: number; readonly bP99: number };
  readonly simulated: { readonly aP50: number; readonly aP99: number; readonly bP50: number; readonly bP99: number };
}

export interface RandomOverlapSummary {
  readonly pairs: number;
  /** Mean |simulated − measured| of A's p50 ÷ solo. */
  readonly meanAbsErrorAP50: number;
  /** Mean |simulated − measured| of A's p99 ÷ solo. */
  readonly meanAbsErrorAP99: number;
  /** Pairs whose A p50 ÷ solo is within `RANDOM_OVERLAP_TOLERANCE`. */
  readonly aP50Within: number;
  /** Pairs whose A p99 ÷ solo is within `RANDOM_OVERLAP_TOLERANCE`. */
  readonly aP99Within: number;
  /** Mean of A's p99 ÷ solo, measured and simulated. */
  readonly meanMeasuredAP99: number;
  readonly meanSimulatedAP99: number;
}

export interface RandomOverlapReport {
  readonly rows: readonly RandomOverlapComparisonRow[];
  readonly summary: RandomOverlapSummary;
}

/**
 * Simulate every measured ordered pair (module docs) and compare the slowdowns. The CSV has no
 * sequence lengths: `seqLens` gives them per model (the measurement's, e.g. BERT 32, as in the
 * group-latency reference: `referenceSeqLens`); a model not in it runs at its default.
 * @throws RangeError when a model has no spec.
 */
export function compareRandomOverlap(specs: SpecsByName, rows: readonly RandomOverlapRow[], target: CalibrationTarget, seqLens: ReadonlyMap<string, number> = new Map()): RandomOverlapReport {
  const classes = new Map<ModelSpec, readonly KernelClass[]>();
  for (const spec of specs.values()) classes.set(spec, operatorClasses(spec));
  const spec = (name: string): ModelSpec => {
    const s = specs.get(name);
    if (!s) throw new RangeError(`random overlap: no ModelSpec for '${name}' (have: ${[...specs.keys()].join(', ')})`);
    return s;
  };
  const out = rows.map((r): RandomOverlapComparisonRow => {
    const query = (name: string): GroupQuery => ({ spec: spec(name), batch: r.batch, seqLen: seqLens.get(name) ?? 0 });
    const sim = simulateRandomOverlap(query(r.modelA), query(r.modelB), target, r.n, classes);
    return {
      modelA: r.modelA,
      modelB: r.modelB,
      batch: r.batch,
      measured: { aP50: r.aP50Ms / r.soloAMs, aP99: r.aP99Ms / r.soloAMs, bP50: r.bP50Ms / r.soloBMs, bP99: r.bP99Ms / r.soloBMs },
      simulated: {
        aP50: median(sim.aMs) / sim.soloAMs,
        aP99: scriptPercentile(sim.aMs, 99) / sim.soloAMs,
        bP50: median(sim.bMs) / sim.soloBMs,
        bP99: scriptPercentile(sim.bMs, 99) / sim.soloBMs,
      },
    };
  });
  const mean = (f: (r: RandomOverlapComparisonRow) => number): number => (out.length === 0 ? 0 : out.reduce((s, r) => s + f(r), 0) / out.length);
  const tol = RANDOM_OVERLAP_TOLERANCE;
  return {
    rows: out,
    summary: {
      pairs: out.length,
      meanAbsErrorAP50: mean((r) => Math.abs(r.simulated.aP50 - r.measured.aP50)),
      meanAbsErrorAP99: mean((r) => Math.abs(r.simulated.aP99 - r.measured.aP99)),
      aP50Within: out.filter((r) => Math.abs(r.simulated.aP50 - r.measured.aP50) <= tol).length,
      aP99Within: out.filter((r) => Math.abs(r.simulated.aP99 - r.measured.aP99) <= tol).length,
      meanMeasuredAP99: mean((r) => r.measured.aP99),
      meanSimulatedAP99: mean((r) => r.simulated.aP99),
    },
  };
}

/**
 * `kernelGrain` that best reproduces the measured uncontrolled overlap: the value on a grid of
 * step 0.05 over [0, 1], refined to step 0.01 around the best, minimizing the mean |simulated −
 * measured| of A's p50 ÷ solo over `rows` (A's p99 is left as a check). Deterministic; ties go
 * to the smaller value.
 */
export function fitKernelGrain(specs: SpecsByName, rows: readonly RandomOverlapRow[], target: CalibrationTarget, seqLens: ReadonlyMap<string, number> = new Map()): { kernelGrain: number; meanAbsErrorAP50: number } {
  const err = (g: number): number => compareRandomOverlap(specs, rows, { ...target, constants: { ...target.constants, kernelGrain: g } }, seqLens).summary.meanAbsErrorAP50;
  let best = { kernelGrain: 0, meanAbsErrorAP50: Infinity };
  const consider = (g: number): void => {
    const v = Number(g.toFixed(2));
    const e = err(v);
    if (e < best.meanAbsErrorAP50) best = { kernelGrain: v, meanAbsErrorAP50: e };
  };
  for (let i = 0; i <= 20; i++) consider(i * 0.05);
  const coarse = best.kernelGrain;
  for (let d = -4; d <= 4; d++) {
    const g = coarse + d * 0.01;
    if (d !== 0 && g >= 0 && g <= 1) consider(g);
  }
  return best;
}

export interface GraphFitResult {
  readonly constants: SimConstants;
  /** `fitObjective` on the group-latency reference at the result. */
  readonly objective: number;
  /** Mean |simulated − measured| of A's p50 ÷ solo at the result. */
  readonly meanAbsErrorAP50: number;
  /** Rounds of (group fit, kernelGrain fit) made. */
  readonly rounds: number;
}

/**
 * Fit the constants of a graph-mode device to a GPU-only measurement, in rounds of two steps:
 * (1) `fitConstants` of `GRAPH_FIT_PARAMETERS` to the group-latency reference (solo and pair
 * latencies), `kernelGrain` held; (2) `fitKernelGrain` to the random-overlap measurement, the
 * others held. Starts at `start` (default `GRAPH_FIT_START`), stops when a round leaves
 * `kernelGrain` unchanged or after 3 rounds. Deterministic.
 */
export function fitGraphConstants(
  specs: SpecsByName,
  ref: ReferenceData,
  rows: readonly RandomOverlapRow[],
  target: Omit<CalibrationTarget, 'constants'>,
  start: SimConstants = GRAPH_FIT_START,
): GraphFitResult {
  const seqLens = referenceSeqLens(ref);
  let k = start;
  let rounds = 0;
  let mae = Infinity;
  while (rounds < 3) {
    rounds++;
    k = fitConstants(specs, ref, target, k).constants;
    const g = fitKernelGrain(specs, rows, { ...target, constants: k }, seqLens);
    mae = g.meanAbsErrorAP50;
    const changed = g.kernelGrain !== k.kernelGrain;
    k = { ...k, kernelGrain: g.kernelGrain };
    if (!changed) break;
  }
  return { constants: k, objective: fitObjective(specs, ref, target, k), meanAbsErrorAP50: mae, rounds };
}
