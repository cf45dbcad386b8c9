/**
 * Fitting the simulator's constants to a group-latency reference (docs/devices.md#calibration-against-the-a100-reference):
 * the fitted parameters and their ranges (eager and graph mode), the starts of the search, the
 * objective, and the search itself. What is compared, the goals and the reference's artifacts
 * are `calibrate.ts`'s.
 *
 * Inputs: the zoo's specs by name, the reference (`loadReference`), the GPU profile and runtime
 * mode. Output: the fitted `SimConstants`, the objective there and the evaluations spent.
 * Deterministic: the same inputs give the same constants.
 *
 * ## Fitting procedure
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
import type { ModelSpec } from '../../model/spec.ts';
import { artifactReason, referenceSolo, simulateGroupMs, specOf, type CalibrationOptions, type CalibrationTarget, type ReferenceData, type SpecsByName } from './calibrate.ts';
import { DEFAULT_SIM_CONSTANTS, GRAPH_LAUNCH_US, MEMORY_EFFICIENCY, operatorClasses, type KernelClass, type SimConstants } from './cost-model.ts';
import type { RuntimeMode } from './profiles.ts';

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
