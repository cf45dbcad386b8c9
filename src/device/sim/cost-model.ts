/**
 * Cost model of the simulated device: what one operator of one query asks of the host and of
 * the GPU, from the ModelSpec's per-operator metadata (GFLOP, boundary bytes, parameters, ONNX
 * node count — `model/spec.ts`, `model/cost.ts`) and a GPU profile (`profiles.ts`).
 *
 * Per operator k of a query of `batch` samples of length `seqLen`:
 *
 * - **Kernel class.** `spatial` when the operator's largest output is a rank-4 `[batch, C, H, W]`
 *   activation (convolutions, pooling: cuDNN), `dense` otherwise (`[batch, seq, hidden]`,
 *   `[batch, classes]`: cuBLAS GEMMs and element-wise kernels). The class picks the arithmetic
 *   PyTorch uses by default on Ampere and later (https://pytorch.org/docs/stable/notes/cuda.html,
 *   "TensorFloat-32 (TF32) on Ampere (and later) devices": `torch.backends.cudnn.allow_tf32` is
 *   True, `torch.backends.cuda.matmul.allow_tf32` False since PyTorch 1.12): spatial kernels
 *   run on TF32 tensor cores (FP32 where the GPU has none), dense kernels on FP32 CUDA cores.
 * - **Compute demand (SM share).** A kernel can only occupy as many SMs as it has independent
 *   output tiles: share s = min(1, parallelism / (SMs · outputsPerSm)), parallelism = batch ×
 *   output elements of the operator (float32-equivalent: output bytes / 4).
 * - **Device time alone.** computeMs = FLOP / (s · peak · computeEfficiency); memoryMs = bytes /
 *   (bandwidth · memoryEfficiency) with bytes = weights + input + output activations (each read
 *   or written once); deviceMs = max(computeMs, memoryMs) (roofline).
 * - **Bandwidth demand** b = memoryMs / deviceMs: the fraction of the DRAM bandwidth it uses
 *   while running at full speed.
 * - **Host time.** hostMs = nodeCount × launch cost of one kernel (per runtime mode and class):
 *   the executor's thread issues the operator's kernels one after another.
 *
 * How these are combined under overlap is the engine's (`engine.ts`). The constants are fitted
 * to the A100 reference (`calibrate.ts`, `DEFAULT_SIM_CONSTANTS`).
 */
import { evalCost } from '../../model/cost.ts';
import { resolveShape } from '../../model/boundary.ts';
import type { ModelSpec, OperatorSpec } from '../../model/spec.ts';
import type { GpuProfile, RuntimeMode } from './profiles.ts';

/** `spatial`: rank-4 NCHW activations (cuDNN); `dense`: everything else (cuBLAS, element-wise). */
export type KernelClass = 'spatial' | 'dense';
export const KERNEL_CLASSES: readonly KernelClass[] = ['spatial', 'dense'];

/**
 * The cost model's constants. Each has a physical meaning and a plausible range (in brackets);
 * the defaults (`DEFAULT_SIM_CONSTANTS`) are fitted to `reference/a100-group-latency.csv` by the
 * procedure documented in `calibrate.ts`.
 */
export interface SimConstants {
  /**
   * Host time to launch one kernel (one ONNX node), µs, per runtime mode and kernel class.
   * Eager: the framework's per-op path from Python to `cudaLaunchKernel` [1, 60] (cuDNN
   * convolutions are at the expensive end); graph: a kernel replayed from a CUDA graph [0.5, 5].
   */
  readonly launchUs: Readonly<Record<RuntimeMode, Readonly<Record<KernelClass, number>>>>;
  /**
   * Per operator group, ms [0, 2]: the serving path around the GPU work — sending the group to
   * the executors through the artifact's Python pipes and the barrier that collects them. The
   * group's segments start this long after it was launched.
   */
  readonly dispatchMs: number;
  /**
   * Per segment beyond the first, ms [0, 1], after the last segment finished: the executors of a
   * group meet at a barrier whose parties are released one after the other
   * (`multiprocessing.Barrier` is a Condition over one shared lock: each party wakes, takes the
   * lock and leaves in turn), so each extra segment adds one hand-over.
   */
  readonly barrierMs: number;
  /**
   * Fraction of the class's peak FLOP/s a kernel reaches on the SMs it occupies [0.2, 0.9], per
   * class (cuDNN TF32 convolutions and cuBLAS FP32 GEMMs reach different fractions).
   */
  readonly computeEfficiency: Readonly<Record<KernelClass, number>>;
  /** Fraction of peak DRAM bandwidth reached by streaming kernels [0.6, 0.95]. */
  readonly memoryEfficiency: number;
  /**
   * Output elements one SM must be given for a kernel to fill it, per class [1e3, 3e5]: a
   * 128×128 implicit-GEMM tile is 16 384 outputs, and several resident tiles per SM are
   * needed to hide latency; cuBLAS splits small GEMMs further (split-K), so dense kernels fill
   * the GPU with fewer outputs.
   */
  readonly outputsPerSm: Readonly<Record<KernelClass, number>>;
}

/** What one operator of one query costs alone on an idle device. All times in ms. */
export interface OpCost {
  /** Host time to issue the operator's kernels (nodeCount × launch cost). */
  readonly hostMs: number;
  /** Time of its arithmetic at its SM share (FLOP / (share · peak · efficiency)). */
  readonly computeMs: number;
  /** Time of its DRAM traffic at the achievable bandwidth. */
  readonly memoryMs: number;
  /** max(computeMs, memoryMs): device time alone, once its kernels are launched. */
  readonly deviceMs: number;
  /** Fraction of the SMs it occupies while running at full speed, (0, 1]. */
  readonly smShare: number;
  /** Fraction of the DRAM bandwidth it uses while running at full speed, [0, 1]. */
  readonly bwShare: number;
}

/**
 * Class of an operator: `spatial` when its largest output (elements at batch 1 and the model's
 * default sequence length) has rank 4, else `dense`.
 */
export function kernelClassOf(spec: ModelSpec, op: OperatorSpec): KernelClass {
  let best = -1;
  let rank = 0;
  for (const t of op.outputs) {
    let elements = 1;
    try {
      for (const d of resolveShape(spec, t, 1, spec.defaultSeqLen)) elements *= d;
    } catch {
      elements = 0;
    }
    if (elements > best) {
      best = elements;
      rank = t.shape.length;
    }
  }
  return rank === 4 ? 'spatial' : 'dense';
}

/** Peak TFLOPS of a class on a profile (TF32 for spatial, FP32 where a GPU has no TF32, FP32 for dense). */
export function classPeakTflops(profile: GpuProfile, cls: KernelClass): number {
  return cls === 'spatial' ? (profile.peakTflops.tf32 ?? profile.peakTflops.fp32) : profile.peakTflops.fp32;
}

/**
 * Cost of operator `op` (of class `cls`) for a query of `batch` samples of `seqLen` (the
 * effective sequence length: the model's default already substituted).
 */
export function operatorCost(op: OperatorSpec, cls: KernelClass, batch: number, seqLen: number, profile: GpuProfile, mode: RuntimeMode, k: SimConstants): OpCost {
  const flop = evalCost(op.gflops, batch, seqLen) * 1e9;
  const outBytes = evalCost(op.outputBytes, batch, seqLen);
  const bytes = op.paramBytes + evalCost(op.inputBytes, batch, seqLen) + outBytes;
  const parallelism = outBytes / 4;
  const smShare = Math.min(1, Math.max(parallelism, 1) / (profile.sms * k.outputsPerSm[cls]));
  const peakFlopPerMs = classPeakTflops(profile, cls) * 1e9 * k.computeEfficiency[cls];
  const computeMs = flop / (smShare * peakFlopPerMs);
  const memoryMs = bytes / (profile.memoryBandwidthGBs * 1e6 * k.memoryEfficiency);
  // A kernel takes some time however small: a floor of 1 ns keeps every rate finite.
  const deviceMs = Math.max(computeMs, memoryMs, 1e-6);
  const cost: OpCost = {
    hostMs: (op.nodeCount * k.launchUs[mode][cls]) / 1000,
    computeMs,
    memoryMs,
    deviceMs,
    smShare,
    bwShare: memoryMs / deviceMs,
  };
  const bad = badCostField(cost);
  if (bad !== undefined) {
    const [field, v] = bad;
    {
      throw new RangeError(
        `cost of operator ${op.index} (${op.name}) at batch ${batch}, seqLen ${seqLen} on ${profile.name} (${mode}): ${field} is ${v}, not a finite number ≥ 0 ` +
          `(FLOP ${flop}, bytes ${bytes}; check the batch size, the operator's metadata and the constants)`,
      );
    }
  }
  return cost;
}

/** The first field of a cost that is not a finite number ≥ 0, if any. */
/** A finite number ≥ 0 (false for NaN). Module level: a closure per call costs here (engine hot path). */
function finiteNonNegative(v: number): boolean {
  return v >= 0 && v < Infinity;
}

export function badCostField(c: OpCost): [keyof OpCost, number] | undefined {
  const ok = finiteNonNegative;
  if (!ok(c.hostMs)) return ['hostMs', c.hostMs];
  if (!ok(c.computeMs)) return ['computeMs', c.computeMs];
  if (!ok(c.memoryMs)) return ['memoryMs', c.memoryMs];
  if (!ok(c.deviceMs)) return ['deviceMs', c.deviceMs];
  if (!ok(c.smShare)) return ['smShare', c.smShare];
  if (!ok(c.bwShare)) return ['bwShare', c.bwShare];
  return undefined;
}

/** Kernel class of every operator of a model (computed once per model). */
export function operatorClasses(spec: ModelSpec): KernelClass[] {
  return spec.operators.map((op) => kernelClassOf(spec, op));
}

/**
 * Costs of every operator of a model for one query (`seqLen`: effective, the default already
 * substituted), indexed by operator.
 */
export function modelCosts(spec: ModelSpec, classes: readonly KernelClass[], batch: number, seqLen: number, profile: GpuProfile, mode: RuntimeMode, k: SimConstants): OpCost[] {
  return spec.operators.map((op, i) => {
    try {
      return operatorCost(op, classes[i]!, batch, seqLen, profile, mode, k);
    } catch (err) {
      if (err instanceof RangeError) throw new RangeError(`model ${spec.name}: ${err.message}`);
      throw err;
    }
  });
}

/**
 * Check cost-model constants: every field present and finite, within what keeps every cost a
 * finite number ≥ 0 (launch costs, dispatch and barrier ≥ 0; efficiencies in (0, 1]; outputs
 * per SM > 0). The plausible ranges documented on `SimConstants` are narrower; these are hard
 * limits.
 * @throws RangeError naming the field (prefixed by `where`) and its valid range.
 */
export function validateSimConstants(k: SimConstants, where = 'constants'): void {
  const obj = (v: unknown, name: string): Record<string, unknown> => {
    if (typeof v !== 'object' || v === null) throw new RangeError(`${where}.${name} must be an object`);
    return v as Record<string, unknown>;
  };
  const num = (v: unknown, name: string, min: number, max: number, minOpen: boolean): void => {
    const ok = typeof v === 'number' && Number.isFinite(v) && (minOpen ? v > min : v >= min) && v <= max;
    if (!ok) throw new RangeError(`${where}.${name} ${String(v)} must be a finite number in ${minOpen ? '(' : '['}${min}, ${max === Infinity ? '∞)' : `${max}]`}`);
  };
  const root = obj(k, '');
  const launch = obj(root.launchUs, 'launchUs');
  for (const mode of ['eager', 'graph'] as const) {
    const m = obj(launch[mode], `launchUs.${mode}`);
    for (const cls of KERNEL_CLASSES) num(m[cls], `launchUs.${mode}.${cls}`, 0, Infinity, false);
  }
  num(root.dispatchMs, 'dispatchMs', 0, Infinity, false);
  num(root.barrierMs, 'barrierMs', 0, Infinity, false);
  const eff = obj(root.computeEfficiency, 'computeEfficiency');
  for (const cls of KERNEL_CLASSES) num(eff[cls], `computeEfficiency.${cls}`, 0, 1, true);
  num(root.memoryEfficiency, 'memoryEfficiency', 0, 1, true);
  const outs = obj(root.outputsPerSm, 'outputsPerSm');
  for (const cls of KERNEL_CLASSES) num(outs[cls], `outputsPerSm.${cls}`, 0, Infinity, true);
}

/**
 * Device memory a service reserves, bytes: its weights plus an activation estimate — the
 * largest boundary (inputs + outputs of one operator, live together) at `batch` samples of the
 * model's default (or maximum, when smaller) sequence length.
 */
export function serviceMemoryBytes(spec: ModelSpec, batch: number): { weightsBytes: number; activationBytes: number } {
  let weightsBytes = 0;
  let activationBytes = 0;
  const seq = spec.maxSeqLen === undefined ? spec.defaultSeqLen : Math.min(spec.defaultSeqLen, spec.maxSeqLen);
  for (const op of spec.operators) {
    weightsBytes += op.paramBytes;
    activationBytes = Math.max(activationBytes, evalCost(op.inputBytes, batch, seq) + evalCost(op.outputBytes, batch, seq));
  }
  return { weightsBytes, activationBytes };
}

/** Graph-mode launch cost per kernel, µs (not fitted; see `DEFAULT_SIM_CONSTANTS`). */
export const GRAPH_LAUNCH_US = 1;
/** Achieved fraction of peak DRAM bandwidth (not fitted; see `DEFAULT_SIM_CONSTANTS`). */
export const MEMORY_EFFICIENCY = 0.85;

/**
 * The constants every sim device uses unless told otherwise: fitted to the A100 reference by
 * `fitConstants` (`calibrate.ts`; `abacus simulate calibrate --fit` reruns the fit) and rounded
 * to three significant digits. What the fit says:
 *
 * - eager launch 35.8 µs per kernel of a spatial operator: the reference's ResNets are flat in
 *   batch at ≈ 50 µs per ONNX node and its Inception-v3 at ≈ 33 µs; one constant for both
 *   leaves ResNets ≈ 12–21 % fast and Inception ≈ 16–22 % slow at batch 1–4 (the reference
 *   gives Inception's kernels a cheaper launch than ResNet's; nothing in a ModelSpec tells
 *   them apart, and a per-model constant would be a lookup table);
 * - eager launch 1.02 µs per ONNX node of a dense operator: the reference's BERT (419 nodes,
 *   2.28 ms at batch 1 including dispatch) cannot have paid eager launch costs of tens of µs
 *   per kernel; BERT's ONNX graph also counts views (Reshape, Transpose) that launch nothing;
 * - dispatch 1.45 ms per group and 1 ms per barrier party beyond the first (the top of its
 *   range: the reference's pairs ask for more contention than the GPU model alone gives);
 * - compute efficiency 0.858 of TF32 peak for spatial kernels at full SM share, 0.48 of FP32
 *   peak for dense ones;
 * - outputs per SM 109 000 for spatial kernels (≈ 7 resident 128×128 tiles per SM: ResNets
 *   stay below a full device until batch 16–32, so they stay launch-bound and flat), 131 for
 *   dense ones (near the bottom of its range: BERT's GEMMs fill the GPU at every batch here, so the
 *   value is not determined by the reference beyond "small").
 *
 * Not fitted: graph-mode launch costs (the reference is eager) — a captured CUDA graph replays
 * its kernel nodes without the host's per-kernel path, leaving about a microsecond of
 * device-side scheduling per kernel (NVIDIA Technical Blog, "Getting Started with CUDA Graphs",
 * 2019); `memoryEfficiency` — streaming kernels reach 80–90 % of peak HBM bandwidth
 * (BabelStream, Deakin et al., 2018).
 */
export const DEFAULT_SIM_CONSTANTS: SimConstants = {
  launchUs: { eager: { spatial: 35.8, dense: 1.02 }, graph: { spatial: GRAPH_LAUNCH_US, dense: GRAPH_LAUNCH_US } },
  dispatchMs: 1.45,
  barrierMs: 1,
  computeEfficiency: { spatial: 0.858, dense: 0.48 },
  memoryEfficiency: MEMORY_EFFICIENCY,
  outputsPerSm: { spatial: 109000, dense: 131 },
};
