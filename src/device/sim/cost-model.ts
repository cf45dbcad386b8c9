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
 * - **Launch time.** nodeCount × launch cost of one kernel (per runtime mode and class). Eager:
 *   host time (`hostMs`) — the executor's thread issues the operator's kernels one after another,
 *   running ahead of the device. Graph: device-side gaps (`gapMs`) — the GPU replays the captured
 *   kernels itself, each one after the previous drained, so launch latency adds to the work.
 *
 * How these are combined under overlap is the engine's (`engine.ts`). The constants are fitted
 * to the A100 reference (`calibrate.ts`, `DEFAULT_SIM_CONSTANTS`).
 */
import { evalCost } from '../../model/cost.ts';
import { resolveShape } from '../../model/boundary.ts';
import type { ModelSpec, OperatorSpec } from '../../model/spec.ts';
import { parseSimDeviceId, type GpuProfile, type RuntimeMode } from './profiles.ts';

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
  /**
   * How an overloaded device divides its SMs between concurrent operators [0, 1] (engine.ts,
   * "Processor sharing with capacity"). 0: fairly — every operator slowed by the same overload
   * factor (processor sharing). 1: by kernel granularity — each operator's claim is its demand
   * × the mean duration of one of its kernels alone (`OpCost.holdWeight`), the round robin a GPU's
   * block scheduler gives two streams whose kernels each fill the device: a kernel, once its
   * blocks hold the SMs, keeps them until it drains, so the stream with the longer kernels
   * holds the device longer and a stream of short kernels waits behind it. Values between
   * interpolate (weight = duration^kernelGrain).
   */
  readonly kernelGrain: number;
  /**
   * Output-sized tensors each ONNX node of an operator streams through memory in kernels of its
   * own [0, 4] (0: none modelled). Inside an operator the frameworks run convolution,
   * normalization, activation and residual addition as separate kernels; each element-wise one
   * reads and writes an activation (about the operator's output per sample), memory-bound and in
   * series with the compute-bound ones. The operator's spec only knows its boundary tensors, so
   * this traffic is estimated as nodeCount × nodeTraffic × output bytes (`OpCost.streamMs`).
   */
  readonly nodeTraffic: number;
  /**
   * Least time one kernel (one ONNX node) holds its SMs however little work it has, µs, per
   * class [0, 20] (0: none modelled): block launch, ramp-up and drain of a short kernel, during
   * which its blocks occupy their SMs at low throughput. Device time at the operator's SM share
   * (`OpCost.floorMs`), in series with its work; it slows down like compute when the SMs are
   * shared. Unlike a launch cost it does not overlap with other executors for free.
   */
  readonly kernelFloorUs: Readonly<Record<KernelClass, number>>;
}

/** What one operator of one query costs alone on an idle device. All times in ms. */
export interface OpCost {
  /**
   * Host time to issue the operator's kernels (nodeCount × launch cost, eager mode): the host
   * thread runs ahead of the device, so it overlaps the device work of earlier kernels. 0 in
   * graph mode.
   */
  readonly hostMs: number;
  /**
   * Device-side launch gaps (nodeCount × launch cost, graph mode): a replayed CUDA graph is
   * launched by the GPU itself, which starts a kernel only after the previous one of its stream
   * drained, so each kernel adds its launch latency (and ramp/drain with few blocks resident) to
   * the stream's time, in series with the work; the SMs are free for other streams meanwhile.
   * 0 in eager mode.
   */
  readonly gapMs: number;
  /** Time of its arithmetic at its SM share (FLOP / (share · peak · efficiency)). */
  readonly computeMs: number;
  /** Time of its DRAM traffic at the achievable bandwidth. */
  readonly memoryMs: number;
  /**
   * Time of its element-wise kernels' traffic (nodeCount × nodeTraffic × output bytes at the
   * achievable bandwidth), memory-bound and in series with the rest; 0 when `nodeTraffic` is 0.
   */
  readonly streamMs: number;
  /** nodeCount × kernel floor: least device time of its kernels, at its SM share, in series with the rest. */
  readonly floorMs: number;
  /** max(computeMs, memoryMs) + streamMs + floorMs: device time alone, once its kernels are launched. */
  readonly deviceMs: number;
  /** Fraction of the SMs it occupies while running at full speed, (0, 1]. */
  readonly smShare: number;
  /** Fraction of the DRAM bandwidth it uses while running at full speed, [0, 1]. */
  readonly bwShare: number;
  /**
   * Relative claim of each unit of its SM demand on an overloaded device, > 0: the mean duration
   * of one of its kernels alone (deviceMs / nodeCount, ms) raised to `kernelGrain` — 1 for every
   * operator when `kernelGrain` is 0 (fair sharing). Only ratios between operators matter.
   */
  readonly holdWeight: number;
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
  const bytesPerMs = profile.memoryBandwidthGBs * 1e6 * k.memoryEfficiency;
  const memoryMs = bytes / bytesPerMs;
  const streamMs = k.nodeTraffic === 0 ? 0 : (op.nodeCount * k.nodeTraffic * outBytes) / bytesPerMs;
  // A kernel takes some time however small: a floor of 1 ns keeps every rate finite.
  const floorMs = (op.nodeCount * k.kernelFloorUs[cls]) / 1000;
  const deviceMs = Math.max(computeMs, memoryMs, 1e-6) + streamMs + floorMs;
  const launchMs = (op.nodeCount * k.launchUs[mode][cls]) / 1000;
  const cost: OpCost = {
    hostMs: mode === 'eager' ? launchMs : 0,
    gapMs: mode === 'graph' ? launchMs : 0,
    computeMs,
    memoryMs,
    deviceMs,
    smShare,
    streamMs,
    floorMs,
    bwShare: (memoryMs + streamMs) / deviceMs,
    holdWeight: k.kernelGrain === 0 ? 1 : (deviceMs / Math.max(1, op.nodeCount)) ** k.kernelGrain,
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
  if (!ok(c.gapMs)) return ['gapMs', c.gapMs];
  if (!ok(c.computeMs)) return ['computeMs', c.computeMs];
  if (!ok(c.memoryMs)) return ['memoryMs', c.memoryMs];
  if (!ok(c.streamMs)) return ['streamMs', c.streamMs];
  if (!ok(c.floorMs)) return ['floorMs', c.floorMs];
  if (!ok(c.deviceMs)) return ['deviceMs', c.deviceMs];
  if (!ok(c.smShare)) return ['smShare', c.smShare];
  if (!ok(c.bwShare)) return ['bwShare', c.bwShare];
  if (!(ok(c.holdWeight) && c.holdWeight > 0)) return ['holdWeight', c.holdWeight];
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
  num(root.kernelGrain, 'kernelGrain', 0, 1, false);
  num(root.nodeTraffic, 'nodeTraffic', 0, Infinity, false);
  const floor = obj(root.kernelFloorUs, 'kernelFloorUs');
  for (const cls of KERNEL_CLASSES) num(floor[cls], `kernelFloorUs.${cls}`, 0, Infinity, false);
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
  kernelGrain: 0,
  nodeTraffic: 0,
  kernelFloorUs: { spatial: 0, dense: 0 },
};

/**
 * Constants of the H200 (and the H100, which has the same SMs) in graph mode, fitted to the
 * GPU-only measurement of an H200-SXM-141GB (`reference/h200-measured/`, PyTorch 2.11 CUDA
 * graphs, FP32 with cuDNN TF32, `scripts/gpu/measure_h200.py`) by `fitGraphConstants`
 * (`random-overlap.ts`): `abacus simulate calibrate --device sim:h200:graph --fit` reruns it
 * (from `GRAPH_FIT_START`; 3 rounds) and rounded to three significant digits. What the fit says:
 *
 * - no dispatch and no barrier: the measurement times the GPU alone (a gate event to the
 *   members' end events); a serving path adds its own;
 * - device-side launch gap 0.484 µs per spatial kernel, 1.47 µs per dense one (BERT's ONNX graph
 *   counts views that launch nothing, so its per-node costs are per ~0.6 kernel);
 * - kernel floor 4.38 µs (spatial) and 3.61 µs (dense) per ONNX node, holding the kernel's SMs:
 *   what makes the small-batch latencies (ResNet-50 0.95 ms at batch 1 for 175 nodes) and why two
 *   models at batch 4 overlap only partly (measured overlap ratios 0.76–0.96);
 * - element-wise traffic 0.869 output-sized tensors per node (`nodeTraffic`): the per-sample slope
 *   of ResNet-50 (0.13 ms) is 60 % of VGG-16's (0.22 ms) for 27 % of its FLOPs — one compute
 *   efficiency cannot give both; ResNet's unfused normalization, activation and addition kernels
 *   streaming their activations can;
 * - compute efficiency 0.289 of TF32 peak (143 TFLOPS) for convolutions, 0.480 of FP32 peak
 *   (32 TFLOPS) for GEMMs (matmul precision "highest": no TF32);
 * - outputs per SM 2760 (spatial: a convolution fills the 132 SMs from 364 000 outputs — VGG's
 *   first layers at batch 1, ResNet's only from batch 2–4) and 170 (dense);
 * - kernelGrain 0.35, fitted to the random-overlap measurement (A's p50 slowdown with B started
 *   at a random moment): ResNet-50 under VGG-16 slows 1.89×, VGG-16 under ResNet-50 1.22× —
 *   long kernels keep their SMs, which fair sharing (0) cannot give;
 * - memoryEfficiency 0.85 as on the A100 (not fitted: no measured model is bound by DRAM
 *   bandwidth alone; changing it moves nothing but `nodeTraffic`).
 *
 * Eager launch costs are the A100's (`DEFAULT_SIM_CONSTANTS`): not measured on Hopper.
 */
export const H200_GRAPH_SIM_CONSTANTS: SimConstants = {
  launchUs: { eager: DEFAULT_SIM_CONSTANTS.launchUs.eager, graph: { spatial: 0.484, dense: 1.47 } },
  dispatchMs: 0,
  barrierMs: 0,
  computeEfficiency: { spatial: 0.289, dense: 0.48 },
  memoryEfficiency: MEMORY_EFFICIENCY,
  outputsPerSm: { spatial: 2760, dense: 170 },
  kernelGrain: 0.35,
  nodeTraffic: 0.869,
  kernelFloorUs: { spatial: 4.38, dense: 3.61 },
};

/**
 * The constants a sim device uses unless told otherwise, by GPU and runtime mode:
 * - `h200`, `h100` (Hopper: the H100 SXM5 has the H200's 132 SMs and compute; only its memory
 *   bandwidth, a profile field, differs), graph mode: `H200_GRAPH_SIM_CONSTANTS`, measured;
 * - the same in eager mode: the H200's device constants with the A100 reference's eager launch
 *   costs, dispatch and barrier (the Abacus artifact's serving path; not measured on Hopper);
 * - every other profile (A100 and its MIG instances, V100): `DEFAULT_SIM_CONSTANTS`, fitted to the
 *   A100 eager reference (V100 and graph mode: not measured);
 * - with `interference` (the id part `:interference`, not on Hopper): the same with the H200 fit's
 *   `kernelGrain` (0.35). It is an exponent on each operator's own mean kernel duration alone
 *   (deviceMs / nodes on THIS GPU), so it transfers as a law, scaled to the A100's per-kernel
 *   latencies by construction: an operator whose kernels run 3× longer than its co-runner's
 *   holds 3^0.35 = 1.47× the SM share per unit of demand, on either GPU. The A100 reference has
 *   no overlap measurement to fit it to; this says how sensitive a conclusion is to one.
 */
export function simConstantsFor(profile: Pick<GpuProfile, 'key'>, mode: RuntimeMode, interference = false): SimConstants {
  const hopper = profile.key === 'h200' || profile.key === 'h100';
  if (!hopper) return interference ? { ...DEFAULT_SIM_CONSTANTS, kernelGrain: H200_GRAPH_SIM_CONSTANTS.kernelGrain } : DEFAULT_SIM_CONSTANTS;
  if (mode === 'graph') return H200_GRAPH_SIM_CONSTANTS;
  const a = DEFAULT_SIM_CONSTANTS;
  return { ...H200_GRAPH_SIM_CONSTANTS, launchUs: { ...H200_GRAPH_SIM_CONSTANTS.launchUs, eager: a.launchUs.eager }, dispatchMs: a.dispatchMs, barrierMs: a.barrierMs };
}

/**
 * Revision of the simulator's model (cost model + engine arithmetic): bumped whenever the same
 * constants would give different latencies, so caches of what was measured on a sim device
 * (profiles, predictors) can key on it. 2: graph-mode launch gaps in series with the work,
 * kernel floors, element-wise traffic, weighted SM sharing.
 */
export const SIM_MODEL_REVISION = 2;

/**
 * What determines a sim device's latencies besides the workload and the noise seed: the model
 * revision and the constants it uses by default (`simConstantsFor`). For cache keys.
 * @throws RangeError for a malformed sim device id (as `parseSimDeviceId`).
 */
export function simModelFingerprint(deviceId: string): { readonly revision: number; readonly constants: SimConstants } {
  const { profile, mode, interference } = parseSimDeviceId(deviceId);
  return { revision: SIM_MODEL_REVISION, constants: simConstantsFor(profile, mode, interference === true) };
}
