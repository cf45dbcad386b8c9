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
  return {
    hostMs: (op.nodeCount * k.launchUs[mode][cls]) / 1000,
    computeMs,
    memoryMs,
    deviceMs,
    smShare,
    bwShare: memoryMs / deviceMs,
  };
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
  return spec.operators.map((op, i) => operatorCost(op, classes[i]!, batch, seqLen, profile, mode, k));
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
 * - eager launch 36.8 µs per kernel of a spatial operator: the reference's ResNets are flat in
 *   batch at ≈ 50 µs per ONNX node and its Inception-v3 at ≈ 33 µs; one constant for both
 *   leaves ResNets ≈ 15–20 % fast and Inception ≈ 16–22 % slow at batch 1–4 (the reference
 *   gives Inception's kernels a cheaper launch than ResNet's; nothing in a ModelSpec tells
 *   them apart, and a per-model constant would be a lookup table);
 * - eager launch 2.74 µs per ONNX node of a dense operator: the reference's BERT (419 nodes,
 *   2.28 ms at batch 1 including dispatch) cannot have paid eager launch costs of tens of µs
 *   per kernel; BERT's ONNX graph also counts views (Reshape, Transpose) that launch nothing;
 * - dispatch 1.13 ms per group and 1 ms per barrier party beyond the first (the top of its
 *   range: the reference's pairs ask for more contention than the GPU model alone gives);
 * - compute efficiency 0.886 of TF32 peak for spatial kernels at full SM share, 0.447 of FP32
 *   peak for dense ones;
 * - outputs per SM 119 000 for spatial kernels (≈ 7 resident 128×128 tiles per SM: ResNets
 *   stay below a full device until batch 16–32, so they stay launch-bound and flat), 100 for
 *   dense ones (the bottom of its range: BERT's GEMMs fill the GPU at every batch here, so the
 *   value is not determined by the reference beyond "small").
 *
 * Not fitted: graph-mode launch costs (the reference is eager) — a captured CUDA graph replays
 * its kernel nodes without the host's per-kernel path, leaving about a microsecond of
 * device-side scheduling per kernel (NVIDIA Technical Blog, "Getting Started with CUDA Graphs",
 * 2019); `memoryEfficiency` — streaming kernels reach 80–90 % of peak HBM bandwidth
 * (BabelStream, Deakin et al., 2018).
 */
export const DEFAULT_SIM_CONSTANTS: SimConstants = {
  launchUs: { eager: { spatial: 36.8, dense: 2.74 }, graph: { spatial: GRAPH_LAUNCH_US, dense: GRAPH_LAUNCH_US } },
  dispatchMs: 1.13,
  barrierMs: 1,
  computeEfficiency: { spatial: 0.886, dense: 0.447 },
  memoryEfficiency: MEMORY_EFFICIENCY,
  outputsPerSm: { spatial: 119000, dense: 100 },
};
