/**
 * The overlap profiler (`abacus profile`, docs/predictor.md): runs the sampled operator
 * groups (`sampler.ts`) through the `Device` contract and appends one CSV row per group
 * (`dataset.ts` schema, `csv.ts` format). Works for any Device: `device/sim` on a
 * `VirtualClock` (virtual time: the device calls are driven with `driveUntilSettled`) and
 * `device/ort` on real time.
 *
 * Per sample: load the services the group needs (untimed), `warmup` untimed runs, `repeat`
 * timed runs of the whole group; the measurement is `GroupResult.groupLatencyMs` (launch until
 * the last segment's result, as the runtime sees it). Statistics after dropping the fastest
 * and the slowest run when `repeat ≥ 3`: median, mean, sample standard deviation (n − 1;
 * 0 for one run).
 *
 * Services: one per (model, copy), named `MODEL#COPY` (`resnet50#0`, `resnet50#1`), so a
 * group holding one model twice runs on two services and overlaps (two segments of ONE
 * service run one after the other, `device.ts`). Slot j of model m uses copy = number of
 * earlier slots of m. Segments use `input: { kind: 'synthetic', seed: j }` (the same inputs
 * in every run, so a device's synthetic-input cache serves them), a fresh queryId per run, and
 * every query that did not reach its model's end is released after its run: nothing stays
 * kept on the device. With `threadRules`, each segment runs at its slot's intra-op threads
 * (`Segment.intraOpThreads`) and the CSV has `threads_i` columns.
 *
 * The CSV is valid at every moment: the header is written first, then each row in one write
 * as soon as it is measured. Resume: an existing `out` is read (an unterminated last line —
 * a write cut short by a kill — is dropped and the file rewritten without it), its header
 * must have the same slot count, its rows this device's id, `repeat` runs and exactly the
 * slots the sampler generates for their `sample` index; those samples are skipped.
 * Stop (`signal`): after the sample in progress; on real time (no VirtualClock) that sample is
 * dropped rather than written when the signal fired during it (measured again on resume).
 * Determinism: with `openDevice` (a fresh device per sample, seeded from (seed, sample)) on a
 * virtual clock, a sample's row does not depend on which samples ran before it, so an
 * interrupted and resumed run writes the same file as one uninterrupted run.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import type { Clock } from '../clock/clock.ts';
import { driveUntilSettled } from '../clock/drive.ts';
import { VirtualClock } from '../clock/virtual.ts';
import type { Device, DeviceService, Segment } from '../device/device.ts';
import { DeviceFailureError } from '../errors.ts';
import { ensureDir } from '../fs.ts';
import type { ModelArtifact } from '../model/artifact.ts';
import type { ModelSpec } from '../model/spec.ts';
import { median } from '../stats.ts';
import type { GroupSlot } from '../predict/predictor.ts';
import { formatProfileHeader, formatProfileRow, parseProfileCsv } from './csv.ts';
import type { ProfileRow } from './dataset.ts';
import { ProfileSampler, sameSlots, sampleSeed, type ModelShapes, type Sample } from './sampler.ts';
import type { ThreadRule } from '../threads.ts';

/** A device to profile and the clock it runs on. */
export interface ProfileTarget {
  readonly device: Device;
  /**
   * The device's clock. A `VirtualClock` is driven (`driveUntilSettled`) while the profiler
   * waits for the device; any other clock (or none) is left alone (real time).
   */
  readonly clock?: Clock;
}

/** Progress report: after loading an existing file, then after every measured sample. */
export interface ProfileProgress {
  /** Samples of `[0, total)` in the file (skipped + measured). */
  readonly done: number;
  readonly total: number;
  /** Samples found in the file at the start (not measured again). */
  readonly skipped: number;
  /** Samples measured by this call so far. */
  readonly measured: number;
}

interface ProfileCommonOptions {
  /** Models to co-locate (distinct names); on a simulated device only `spec` is used. */
  readonly models: readonly ModelArtifact[];
  /** Number of samples N: indices 0..N−1 of the sample sequence. */
  readonly samples: number;
  /** Largest group K, in [1, 8]. */
  readonly maxGroupSize: number;
  /** Batch sizes to draw from. */
  readonly batchSizes: readonly number[];
  /** Sequence lengths for models with a sequence axis [each model's default]. */
  readonly seqLens?: readonly number[];
  /** Per model name: its own batch sizes and sequence lengths (`SamplerOptions.shapes`) [none]. */
  readonly shapes?: ReadonlyMap<string, ModelShapes>;
  /** Seed of the sample sequence (and of per-sample devices) [0]. */
  readonly seed?: number;
  /**
   * Thread rules: each sample draws one and runs its segments at the rule's intra-op threads
   * (`sampler.ts` "Threads"); the CSV then has `threads_i` columns [none].
   */
  readonly threadRules?: readonly ThreadRule[];
  /** Timed runs per sample, ≥ 1 [5]. */
  readonly repeat?: number;
  /** Untimed runs per sample before the timed ones, ≥ 0 [1]. */
  readonly warmup?: number;
  /** CSV file; created (with missing parent directories) or resumed. */
  readonly out: string;
  /** Stop after the sample in progress (the CSV stays valid; rerun to resume). */
  readonly signal?: AbortSignal;
  readonly onProgress?: (progress: ProfileProgress) => void;
}

/**
 * Options of `profileDevice`: the common ones plus either one `device` (its services are
 * added by the profiler; the caller closes it) or `openDevice`, called with a seed derived
 * from (`seed`, sample index) to get a fresh device for each sample (closed by the profiler),
 * and once more up front with `seed` to learn the device id.
 */
export type ProfileDeviceOptions = ProfileCommonOptions &
  ({ readonly device: Device; readonly clock?: Clock } | { readonly openDevice: (seed: number) => Promise<ProfileTarget> });

/** Outcome of `profileDevice`. */
export interface ProfileResult {
  readonly out: string;
  readonly device: string;
  /** N. */
  readonly samples: number;
  /** Samples measured by this call. */
  readonly measured: number;
  /** Samples already in the file. */
  readonly skipped: number;
  /** True when `signal` stopped the run before all N samples were in the file. */
  readonly interrupted: boolean;
  /** Real time of the call, ms. */
  readonly wallMs: number;
}

/** Seed offset of the per-sample devices (so device noise and sampling draw independently). */
const DEVICE_SEED_SALT = 0x6a09e667;

/** Timed-run statistics: drop min and max when ≥ 3 runs; median, mean, sample std (ms). */
export function runStats(latenciesMs: readonly number[]): { medianMs: number; meanMs: number; stdMs: number } {
  if (latenciesMs.length === 0) throw new RangeError('runStats: no runs');
  let kept = [...latenciesMs].sort((a, b) => a - b);
  if (kept.length >= 3) kept = kept.slice(1, -1);
  const meanMs = kept.reduce((s, x) => s + x, 0) / kept.length;
  const variance = kept.length > 1 ? kept.reduce((s, x) => s + (x - meanMs) ** 2, 0) / (kept.length - 1) : 0;
  return { medianMs: median(kept), meanMs, stdMs: Math.sqrt(variance) };
}

/** `resnet50[0,18) b4 + bert[3,7) b2 s32 t2`: a group for messages (`t`: intra-op threads). */
export function describeGroup(slots: readonly GroupSlot[]): string {
  return slots.map((s) => `${s.model}[${s.start},${s.end}) b${s.batch}${s.seqLen > 0 ? ` s${s.seqLen}` : ''}${s.intraOpThreads === undefined ? '' : ` t${s.intraOpThreads}`}`).join(' + ');
}

/** Service name of copy `copy` of `model`. */
export function serviceName(model: string, copy: number): string {
  return `${model}#${copy}`;
}

function intOption(name: string, value: number | undefined, fallback: number, min: number): number {
  const v = value ?? fallback;
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) throw new RangeError(`profile: ${name} ${String(v)} must be an integer ≥ ${min}`);
  return v;
}

/**
 * Profile the device: measure samples 0..N−1 not yet in `out` and append them (see the file
 * comment). Resolves when all N are in the file or `signal` stopped it.
 * @throws RangeError for bad options (from `ProfileSampler` too), or an existing `out` that
 *   cannot be resumed: malformed (`FILE:LINE:COLUMN:`), another slot count, another device,
 *   another `repeat`, or rows whose groups these options do not generate ("options differ");
 *   DeviceFailureError naming the sample and the slot when a segment fails; whatever the
 *   device's `load` / `runGroup` throw. Rows measured before an error stay in the file.
 */
export async function profileDevice(options: ProfileDeviceOptions): Promise<ProfileResult> {
  const t0 = performance.now();
  const samples = intOption('samples', options.samples, 0, 1);
  const repeat = intOption('repeat', options.repeat, 5, 1);
  const warmup = intOption('warmup', options.warmup, 1, 0);
  const seed = options.seed ?? 0;
  const specs = new Map<string, ModelSpec>();
  const artifacts = new Map<string, ModelArtifact>();
  for (const a of options.models) {
    specs.set(a.spec.name, a.spec);
    artifacts.set(a.spec.name, a);
  }
  const sampler = new ProfileSampler({
    models: options.models.map((a) => a.spec),
    maxGroupSize: options.maxGroupSize,
    batchSizes: options.batchSizes,
    ...(options.seqLens === undefined ? {} : { seqLens: options.seqLens }),
    ...(options.shapes === undefined ? {} : { shapes: options.shapes }),
    seed,
    ...(options.threadRules === undefined ? {} : { threadRules: options.threadRules }),
  });
  const threads = sampler.threadRules.length > 0;
  const maxSlots = sampler.maxGroupSize;
  const out = path.resolve(options.out);

  // The device id, for the file check.
  let deviceId: string;
  if ('device' in options) {
    deviceId = options.device.id;
  } else {
    const probe = await options.openDevice(seed);
    deviceId = probe.device.id;
    await probe.device.close();
  }

  const existing = await loadExisting(out, specs, { maxSlots, deviceId, repeat, sampler });
  const done = new Set<number>();
  for (const i of existing) if (i < samples) done.add(i);
  const skipped = done.size;
  let measured = 0;
  const report = (): void => options.onProgress?.({ done: skipped + measured, total: samples, skipped, measured });
  report();

  const shared: TargetState | undefined = 'device' in options ? { device: options.device, clock: options.clock, loaded: new Set() } : undefined;
  const open = 'openDevice' in options ? options.openDevice : undefined;
  const fh = await fs.open(out, 'a');
  let interrupted = false;
  try {
    for (let i = 0; i < samples; i++) {
      if (done.has(i)) continue;
      if (options.signal?.aborted) {
        interrupted = true;
        break;
      }
      const sample = sampler.sampleAt(i);
      let target = shared;
      if (target === undefined && open !== undefined) {
        const opened = await open(sampleSeed(seed ^ DEVICE_SEED_SALT, i));
        if (opened.device.id !== deviceId) throw new RangeError(`profile: openDevice gave ${opened.device.id} for sample ${i}, ${deviceId} before`);
        target = { device: opened.device, clock: opened.clock, loaded: new Set() };
      }
      if (target === undefined) throw new TypeError('profileDevice: give either device or openDevice');
      let latencies: number[];
      try {
        latencies = await drive(target, measureSample(target, sample, artifacts, warmup, repeat));
      } catch (err) {
        // A terminal's Ctrl-C also reaches a real device's worker processes (device/ort executors
        // share the process group): a sample that fails after the stop request is the stop.
        if (!options.signal?.aborted) throw err;
        interrupted = true;
        break;
      } finally {
        if (target !== shared) await target.device.close();
      }
      if (options.signal?.aborted && !(target.clock instanceof VirtualClock)) {
        // On real time the stop request may have disturbed this sample (a Ctrl-C kills and
        // restarts ort executors, and a run queued behind a restart is slow): measure it again
        // on resume rather than keep it.
        interrupted = true;
        break;
      }
      const row: ProfileRow = { sample: i, device: deviceId, slots: sample.slots, ...runStats(latencies), runs: repeat };
      await fh.write(formatProfileRow(row, maxSlots, threads));
      measured++;
      report();
    }
  } finally {
    await fh.close();
  }
  return { out, device: deviceId, samples, measured, skipped, interrupted, wallMs: performance.now() - t0 };
}

interface TargetState {
  readonly device: Device;
  readonly clock: Clock | undefined;
  /** Services loaded on `device` by the profiler. */
  readonly loaded: Set<string>;
}

/** Wait for device work, driving the target's clock when it is virtual. */
function drive<T>(target: TargetState, work: Promise<T>): Promise<T> {
  return target.clock instanceof VirtualClock ? driveUntilSettled(target.clock, work) : work;
}

/** Load what the sample needs, run warm-up and timed runs; the timed group latencies (ms). */
async function measureSample(target: TargetState, sample: Sample, artifacts: ReadonlyMap<string, ModelArtifact>, warmup: number, repeat: number): Promise<number[]> {
  const copies = new Map<string, number>();
  const services = sample.slots.map((s) => {
    const copy = copies.get(s.model) ?? 0;
    copies.set(s.model, copy + 1);
    return serviceName(s.model, copy);
  });
  const missing: DeviceService[] = [];
  services.forEach((name, j) => {
    if (!target.loaded.has(name) && !missing.some((m) => m.name === name)) missing.push({ name, model: artifacts.get(sample.slots[j]!.model)! });
  });
  if (missing.length > 0) {
    await target.device.load(missing);
    for (const m of missing) target.loaded.add(m.name);
  }
  const latencies: number[] = [];
  for (let run = 0; run < warmup + repeat; run++) {
    const group: Segment[] = sample.slots.map((s, j) => ({
      service: services[j]!,
      queryId: `profile-${sample.index}-${run}-${j}`,
      start: s.start,
      end: s.end,
      batchSize: s.batch,
      seqLen: s.seqLen,
      input: { kind: 'synthetic', seed: j },
      ...(s.intraOpThreads === undefined ? {} : { intraOpThreads: s.intraOpThreads }),
    }));
    const result = await target.device.runGroup(group);
    for (let j = 0; j < group.length; j++) {
      const seg = group[j]!;
      if (seg.end < artifacts.get(sample.slots[j]!.model)!.spec.operators.length) await target.device.releaseQuery(seg.service, seg.queryId);
    }
    result.segments.forEach((r, j) => {
      if (!r.ok) {
        throw new DeviceFailureError(`sample ${sample.index} (${describeGroup(sample.slots)}), slot ${j} (service ${r.service}), ${run < warmup ? 'warm-up' : 'timed'} run ${run}: ${r.error.message}`, {
          cause: r.error,
        });
      }
    });
    if (run >= warmup) latencies.push(result.groupLatencyMs);
  }
  return latencies;
}

/**
 * Read an existing `out` for resuming; the sample indices in it. Creates the file with its
 * header when missing or empty (also when only a cut-short header is there), and rewrites it
 * without an unterminated last line.
 */
async function loadExisting(
  out: string,
  specs: ReadonlyMap<string, ModelSpec>,
  expect: { maxSlots: number; deviceId: string; repeat: number; sampler: ProfileSampler },
): Promise<number[]> {
  let text: string;
  try {
    text = await fs.readFile(out, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
    text = '';
  }
  const differ = `the options differ from those the file was made with (rerun with those, or use a new --out)`;
  const kept = text.endsWith('\n') ? text : text.slice(0, text.lastIndexOf('\n') + 1);
  const threads = expect.sampler.threadRules.length > 0;
  if (kept.trim() === '') {
    await ensureDir(path.dirname(out));
    await replaceFile(out, formatProfileHeader(expect.maxSlots, threads));
    return [];
  }
  let parsed: ReturnType<typeof parseProfileCsv>;
  try {
    parsed = parseProfileCsv(text, out, specs, { dropTruncatedTail: true });
  } catch (err) {
    if (!(err instanceof RangeError)) throw err;
    throw new RangeError(`${err.message} — cannot resume ${out}; if it was made with other options (models), use a new --out`, { cause: err });
  }
  if (parsed.threads !== threads) {
    throw new RangeError(`${out}: the file was profiled ${parsed.threads ? 'with' : 'without'} thread rules (threads_i columns), this run ${threads ? 'draws' : 'draws no'} thread rules (--thread-rules): ${differ}`);
  }
  if (parsed.maxSlots !== expect.maxSlots) {
    throw new RangeError(`${out}: the file has slot columns for groups of up to ${parsed.maxSlots}, this run samples groups of up to ${expect.maxSlots} (--max-group-size): ${differ}`);
  }
  const indices: number[] = [];
  const seen = new Set<number>();
  for (const row of parsed.rows) {
    if (row.device !== expect.deviceId) throw new RangeError(`${out}: sample ${row.sample} was measured on ${row.device}, this run uses ${expect.deviceId}; use a new --out for another device`);
    if (row.runs !== expect.repeat) throw new RangeError(`${out}: sample ${row.sample} has ${row.runs} timed runs, this run makes ${expect.repeat} (--repeat): ${differ}`);
    if (seen.has(row.sample)) throw new RangeError(`${out}: sample ${row.sample} appears twice; the file was not written by one profile run`);
    const want = expect.sampler.sampleAt(row.sample).slots;
    if (!sameSlots(row.slots, want)) {
      throw new RangeError(`${out}: sample ${row.sample} is ${describeGroup(row.slots)} but these options generate ${describeGroup(want)}: ${differ}`);
    }
    seen.add(row.sample);
    indices.push(row.sample);
  }
  if (parsed.droppedTail !== '') await replaceFile(out, parsed.kept);
  return indices;
}

/** Write `text` to `file` atomically (temporary file in the same directory, then rename). */
async function replaceFile(file: string, text: string): Promise<void> {
  const tmp = `${file}.abacus-tmp-${process.pid}`;
  try {
    await fs.writeFile(tmp, text);
    await fs.rename(tmp, file);
  } finally {
    await fs.rm(tmp, { force: true });
  }
}
