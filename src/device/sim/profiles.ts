/**
 * Accelerator profiles of the simulated device (docs/devices.md), from public
 * specifications, plus the runtime modes and the MIG instances of an A100.
 *
 * Only peak numbers live here. What fraction of a peak a model reaches, what a kernel launch
 * costs and what the serving path adds per group are fitted constants of the cost model
 * (`cost-model.ts`), chosen per profile and mode by `simConstantsFor`: the H200 (and the H100)
 * its own, fitted to the measured H200; every other profile the A100's.
 *
 * Dense peaks are used throughout (the datasheets of Ampere and Hopper also print "with
 * sparsity" figures, twice the dense ones; those are never used here).
 */

/** Arithmetic the simulator distinguishes, in TFLOPS (10¹² FLOP/s), dense. */
export interface PeakTflops {
  /** FP32 on CUDA cores (no tensor cores). */
  readonly fp32: number;
  /** TF32 tensor cores; absent on GPUs without them (V100), where TF32 math runs as FP32. */
  readonly tf32?: number;
  /** FP16 tensor cores. */
  readonly fp16: number;
}

/** One GPU (or one MIG instance of it): what the cost model needs from the hardware. */
export interface GpuProfile {
  /** Short key used in device ids: `a100`, `v100`, `h100`, `h200`. */
  readonly key: string;
  /** Marketing name and form factor, e.g. `A100-SXM4-40GB`. */
  readonly name: string;
  /** Streaming multiprocessors usable by one process. */
  readonly sms: number;
  readonly peakTflops: PeakTflops;
  /** Peak DRAM bandwidth, GB/s (10⁹ B/s). */
  readonly memoryBandwidthGBs: number;
  /**
   * Device memory, bytes: the capacity NVIDIA states in "GB", read as GiB (2³⁰ B) for every
   * profile — HBM capacities are binary (an A100-40GB carries five 8 GiB HBM2 stacks), so "40GB"
   * is 40 GiB. The whole capacity, not what is left to a
   * process after the CUDA context.
   */
  readonly memoryBytes: number;
  /** Where the numbers come from. */
  readonly source: string;
}

/** Memory unit of every profile (see `GpuProfile.memoryBytes`): 1 GiB. */
const GIB = 1024 ** 3;

/**
 * NVIDIA A100-SXM4-40GB: 108 SMs; 19.5 TFLOPS FP32, 156 TF32, 312 FP16 (dense); 1555 GB/s HBM2;
 * 40 GiB ("40GB"). Sources: NVIDIA A100 Tensor Core GPU datasheet
 * (https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf)
 * and the NVIDIA A100 Tensor Core GPU Architecture whitepaper, table 1 (108 SMs on A100).
 */
export const A100_SXM4_40GB: GpuProfile = {
  key: 'a100',
  name: 'A100-SXM4-40GB',
  sms: 108,
  peakTflops: { fp32: 19.5, tf32: 156, fp16: 312 },
  memoryBandwidthGBs: 1555,
  memoryBytes: 40 * GIB,
  source: 'NVIDIA A100 datasheet (SXM4 40GB) and A100 architecture whitepaper, table 1',
};

/**
 * NVIDIA V100-SXM2-32GB: 80 SMs; 15.7 TFLOPS FP32, 125 FP16 tensor (no TF32: PyTorch's TF32
 * setting has no effect and convolutions run FP32); 900 GB/s HBM2; 32 GiB ("32GB"). Source: NVIDIA Tesla
 * V100 datasheet (https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf)
 * and the Volta architecture whitepaper (80 SMs on V100).
 */
export const V100_SXM2_32GB: GpuProfile = {
  key: 'v100',
  name: 'V100-SXM2-32GB',
  sms: 80,
  peakTflops: { fp32: 15.7, fp16: 125 },
  memoryBandwidthGBs: 900,
  memoryBytes: 32 * GIB,
  source: 'NVIDIA Tesla V100 datasheet (SXM2) and Volta architecture whitepaper',
};

/**
 * NVIDIA H100-SXM5-80GB: 132 SMs; 67 TFLOPS FP32, 494.7 TF32, 989.4 FP16 (dense; the datasheet's
 * 989 / 1979 are with sparsity); 3.35 TB/s HBM3; 80 GiB ("80GB"). Source: NVIDIA H100 Tensor Core GPU
 * datasheet (https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet)
 * and the H100 architecture whitepaper (132 SMs on H100 SXM5).
 */
export const H100_SXM5_80GB: GpuProfile = {
  key: 'h100',
  name: 'H100-SXM5-80GB',
  sms: 132,
  peakTflops: { fp32: 67, tf32: 494.7, fp16: 989.4 },
  memoryBandwidthGBs: 3350,
  memoryBytes: 80 * GIB,
  source: 'NVIDIA H100 datasheet (SXM5) and Hopper architecture whitepaper; dense = half the sparsity figures',
};

/**
 * NVIDIA H200-SXM-141GB: the H100 SXM compute (132 SMs; 67 TFLOPS FP32, 494.7 TF32, 989.4 FP16
 * dense) with 141 GiB ("141GB") of HBM3e at 4.8 TB/s. Source: NVIDIA H200 Tensor Core GPU datasheet
 * (https://www.nvidia.com/en-us/data-center/h200/).
 */
export const H200_SXM_141GB: GpuProfile = {
  key: 'h200',
  name: 'H200-SXM-141GB',
  sms: 132,
  peakTflops: { fp32: 67, tf32: 494.7, fp16: 989.4 },
  memoryBandwidthGBs: 4800,
  memoryBytes: 141 * GIB,
  source: 'NVIDIA H200 datasheet (SXM); compute as H100 SXM5',
};

/** Every whole-GPU profile, by key. */
export const GPU_PROFILES: readonly GpuProfile[] = [A100_SXM4_40GB, V100_SXM2_32GB, H100_SXM5_80GB, H200_SXM_141GB];

/**
 * A100-40GB MIG instance profiles (NVIDIA Multi-Instance GPU User Guide, "A100 MIG profiles"):
 * `1g.5gb` … `7g.40gb`. A compute slice is 1/7 of the GPU, 14 SMs (so even `7g` has 98 SMs,
 * not 108: MIG mode leaves some SMs unused); a memory slice is 1/8 of the memory and of its
 * bandwidth (5 GiB, NVIDIA's "5gb"). `3g` and `4g` both get 4 memory slices (20 GiB).
 */
export const A100_MIG_PROFILES: readonly { readonly slices: 1 | 2 | 3 | 4 | 7; readonly sms: number; readonly memorySlices: number }[] = [
  { slices: 1, sms: 14, memorySlices: 1 },
  { slices: 2, sms: 28, memorySlices: 2 },
  { slices: 3, sms: 42, memorySlices: 4 },
  { slices: 4, sms: 56, memorySlices: 4 },
  { slices: 7, sms: 98, memorySlices: 8 },
];

/**
 * One MIG instance of an A100-40GB as an independent device: SMs and compute peaks scale with
 * the SM count, bandwidth and memory with the memory slices (of 8).
 * @throws RangeError for a slice count other than 1, 2, 3, 4, 7.
 */
export function a100MigProfile(slices: number): GpuProfile {
  const mig = A100_MIG_PROFILES.find((p) => p.slices === slices);
  if (!mig) throw new RangeError(`MIG instance '${slices}g' of an A100 does not exist (instances: ${A100_MIG_PROFILES.map((p) => `${p.slices}g`).join(', ')})`);
  const base = A100_SXM4_40GB;
  const c = mig.sms / base.sms;
  const m = mig.memorySlices / 8;
  const p = base.peakTflops;
  return {
    key: `a100:mig-${slices}g`,
    name: `A100-SXM4-40GB MIG ${slices}g.${5 * mig.memorySlices}gb`,
    sms: mig.sms,
    peakTflops: { fp32: p.fp32 * c, ...(p.tf32 === undefined ? {} : { tf32: p.tf32 * c }), fp16: p.fp16 * c },
    memoryBandwidthGBs: base.memoryBandwidthGBs * m,
    memoryBytes: base.memoryBytes * m,
    source: `${base.source}; NVIDIA MIG User Guide, A100 profile ${slices}g.${5 * mig.memorySlices}gb (${mig.sms} SMs, ${mig.memorySlices}/8 memory)`,
  };
}

/**
 * How the framework launches kernels.
 * - `eager`: every kernel is launched from Python by the framework (PyTorch eager, what the
 *   Abacus artifact ran): tens of µs of host time per kernel.
 * - `graph`: the segment's kernels are replayed from a captured CUDA graph: a few µs each.
 */
export type RuntimeMode = 'eager' | 'graph';
export const RUNTIME_MODES: readonly RuntimeMode[] = ['eager', 'graph'];

/**
 * A step change of the simulated device's speed during a run (drift, docs/devices.md: so that
 * online predictor refinement can be tested deterministically in virtual time): from `atMs` on,
 * every operator execution takes `factor` × as long (`SimEngine`: its device work and its
 * launch time, for operators that start on the device at or after the step).
 */
export interface SimDrift {
  /** When the step happens, ms of simulated time after the device was created; finite, ≥ 0. */
  readonly atMs: number;
  /** Duration multiplier from then on: 1.5 = 50 % slower, 0.5 = twice as fast; finite, > 0. */
  readonly factor: number;
}

/** A parsed sim device id: `sim:<gpu>[:mig-<k>g][:drift-<factor>x@<ms>ms][:<mode>]`. */
export interface SimDeviceSpec {
  /**
   * Canonical id of the hardware and mode, e.g. `sim:a100`, `sim:a100:mig-2g:graph`: **without**
   * the drift part, so predictors and profiles keyed on it serve the drifted device too.
   */
  readonly id: string;
  readonly profile: GpuProfile;
  readonly mode: RuntimeMode;
  /**
   * The `interference` part: the H200 fit's interference term (`kernelGrain`, weighted SM
   * sharing) on a GPU whose own constants have none (`cost-model.ts` `simConstantsFor`); in the
   * canonical id, since it changes every latency of overlapped groups. Absent: the GPU's own.
   */
  readonly interference?: boolean;
  /** The drift part of the id; absent when the id has none. */
  readonly drift?: SimDrift;
}

/** The accepted forms of a sim device id, as error messages print them. */
export const SIM_DEVICE_ID_FORMS = `sim:<${GPU_PROFILES.map((p) => p.key).join('|')}>[:mig-<1|2|3|4|7>g (a100 only)][:interference][:drift-<factor>x@<ms>ms][:eager|graph] (mode last; e.g. sim:a100:drift-1.5x@60000ms)`;

/** Every device id the simulator accepts, eager (default) and graph (no drift parts: those take any numbers). */
export function simDeviceIds(): string[] {
  const bases = [...GPU_PROFILES.map((p) => p.key), ...A100_MIG_PROFILES.map((m) => `a100:mig-${m.slices}g`)];
  return bases.flatMap((b) => [`sim:${b}`, `sim:${b}:graph`]);
}

/** A decimal number as written in an id part (`1.5`, `60000`, `2e3`): no sign other than `-`, no `Infinity`, no hex. */
const DECIMAL = /^-?(?:\d+(?:\.\d*)?|\.\d+)(?:e[+-]?\d+)?$/i;

/**
 * Check a drift step (from an id part or `SimDeviceOptions.drift`).
 * @param where what to name in the message, e.g. `SimDeviceOptions.drift` or the id part.
 * @throws RangeError naming `where` when `factor` is not a finite number > 0 or `atMs` not a
 *   finite number ≥ 0.
 */
export function validateSimDrift(drift: SimDrift, where: string): void {
  const d: unknown = drift;
  if (typeof d !== 'object' || d === null) throw new RangeError(`${where} must be { atMs, factor } (drift-<factor>x@<ms>ms in a device id)`);
  const { atMs, factor } = drift;
  if (typeof factor !== 'number' || !Number.isFinite(factor) || !(factor > 0)) throw new RangeError(`${where}: factor ${String(factor)} must be a finite number > 0 (1.5 = 50 % slower)`);
  if (typeof atMs !== 'number' || !Number.isFinite(atMs) || !(atMs >= 0)) throw new RangeError(`${where}: time ${String(atMs)} ms must be a finite number ≥ 0 (ms of simulated time after the device was created)`);
}

/**
 * Parse a sim device id: `sim:a100`, `sim:a100:graph`, `sim:a100:mig-2g`, `sim:h100:eager`,
 * `sim:a100:drift-1.5x@60000ms:graph`, … Parts after the GPU: at most one MIG part (a100
 * only), at most one drift part `drift-<factor>x@<ms>ms` (`SimDrift`: from `<ms>` ms of
 * simulated time on, operators take `<factor>` × as long), and the mode, last. The mode
 * defaults to `eager`, and is left out of the canonical id then; the drift is never in the
 * canonical id (`SimDeviceSpec.drift` carries it).
 * @throws RangeError naming the id, the bad part and the accepted forms (for a bad MIG part,
 *   every valid id; for a bad drift part, what its factor and time must be).
 */
export function parseSimDeviceId(id: string): SimDeviceSpec {
  const parts = typeof id === 'string' ? id.split(':') : [];
  const bad = (why: string): RangeError => new RangeError(`sim device id '${String(id)}' ${why} (accepted: ${SIM_DEVICE_ID_FORMS})`);
  if (parts[0] !== 'sim' || parts.length < 2 || parts.length > 6) throw bad('is not of the form sim:<gpu>[…]');
  const base = GPU_PROFILES.find((p) => p.key === parts[1]);
  if (!base) throw bad(`names no known GPU '${parts[1] ?? ''}'`);
  let profile = base;
  let mode: RuntimeMode = 'eager';
  let drift: SimDrift | undefined;
  let interference = false;
  for (const [i, part] of parts.slice(2).entries()) {
    if (part === 'interference') {
      if (interference) throw bad(`has a second interference part`);
      if (base.key === 'h200' || base.key === 'h100') throw bad(`has an interference part on a GPU whose constants have one already`);
      interference = true;
      continue;
    }
    const mig = /^mig-([12347])g$/.exec(part);
    if (mig) {
      if (base.key !== 'a100' || profile !== base) throw bad(`has a MIG part '${part}' where none is allowed`);
      if (drift !== undefined) throw bad(`has its MIG part '${part}' after the drift part (order: MIG, drift, mode)`);
      profile = a100MigProfile(Number(mig[1]));
    } else if ((RUNTIME_MODES as readonly string[]).includes(part)) {
      if (i + 2 !== parts.length - 1) throw bad('must end with the mode');
      mode = part as RuntimeMode;
    } else if (part.startsWith('mig-')) {
      throw bad(`has an unknown MIG instance '${part}' (instances: ${A100_MIG_PROFILES.map((m) => `mig-${m.slices}g`).join(', ')}; valid ids: ${simDeviceIds().join(', ')})`);
    } else if (part.startsWith('drift-')) {
      if (drift !== undefined) throw bad(`has a second drift part '${part}'`);
      const m = /^drift-(.*)x@(.*)ms$/.exec(part);
      if (!m) throw bad(`has a malformed drift part '${part}' (expected drift-<factor>x@<ms>ms, e.g. drift-1.5x@60000ms)`);
      const [factorText, atText] = [m[1]!, m[2]!];
      if (!DECIMAL.test(factorText)) throw bad(`has a drift part '${part}' whose factor '${factorText}' is not a number (expected drift-<factor>x@<ms>ms, e.g. drift-1.5x@60000ms)`);
      if (!DECIMAL.test(atText)) throw bad(`has a drift part '${part}' whose time '${atText}' is not a number of ms (expected drift-<factor>x@<ms>ms, e.g. drift-1.5x@60000ms)`);
      drift = { factor: Number(factorText), atMs: Number(atText) };
      try {
        validateSimDrift(drift, `drift part '${part}'`);
      } catch (err) {
        throw bad(`has a bad ${(err as Error).message}`);
      }
    } else {
      throw bad(`has an unknown part '${part}'`);
    }
  }
  const canonical = `sim:${profile.key}${interference ? ':interference' : ''}${mode === 'eager' ? '' : `:${mode}`}`;
  return { id: canonical, profile, mode, ...(interference ? { interference } : {}), ...(drift === undefined ? {} : { drift }) };
}
