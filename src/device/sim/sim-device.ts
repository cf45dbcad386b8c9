/**
 * SimDevice: the `Device` contract on a simulated accelerator (docs/devices.md). Profiles in
 * `profiles.ts`, per-operator costs in `cost-model.ts`, the contention model in `engine.ts`,
 * calibration in `calibrate.ts`.
 *
 * ## Time
 * All time comes from the injected `Clock` (`clock/`): a group is dispatched at `clock.now()`;
 * the device keeps one clock timer pending, on the engine's next observable event — a segment
 * arriving after its dispatch or a segment finishing (`SimEngine.nextObservableMs`, an exact
 * lookahead) — and re-arms it whenever the running set changes; operator events in between
 * are simulated when that timer fires or when a `runGroup` catches the engine up to
 * `clock.now()`. `runGroup` resolves when the clock reaches the group's end (a barrier timer
 * when `barrierMs` applies). With a `VirtualClock` a run is a
 * discrete-event simulation (same seed → same results, bit for bit); with a `WallClock` the
 * device runs in real time (a late timer is caught up exactly: latencies are simulated times,
 * only the resolution is late). Latencies are in ms of simulated time:
 * - `latencyMs`: from when the segment's executor started it until its last operator finished
 *   on the device (no dispatch, no queueing behind earlier segments of the same service);
 * - `groupLatencyMs`: from `runGroup` until the group's end: `dispatchMs`, then the segments,
 *   then one barrier hand-over (`barrierMs`) per segment beyond the first
 *   (`SimConstants`, `cost-model.ts`).
 *
 * ## Semantics (as `device/ort`)
 * - One executor per service: its segments run one after the other, FIFO, whether they come
 *   from one group or from concurrent `runGroup` calls; executors of different services overlap
 *   on the device (uncontrolled overlap when groups are not coordinated).
 * - Query state: kept under `queryId` from a segment that stops before the last operator until
 *   the segment that reaches it, `releaseQuery`, or eviction (more than `maxKeptQueries`
 *   unfinished queries: the oldest is evicted and its next `resume` gets a DeviceFailureError
 *   result; at most `maxLostQueries` such queries are remembered). `resume` needs a prior
 *   segment; `synthetic` may start anywhere; `tensors` are validated like on a real device.
 * - Outputs: the simulator computes timing, not values. A segment that reaches the last
 *   operator returns **zero tensors** of the model's output names, types and shapes (their
 *   `data` is allocated on first access).
 * - Memory: each service reserves its weights plus an activation estimate (its largest
 *   operator boundary at `activationBatch`); `load` fails with an InvalidModelError naming the
 *   service and the bytes when the profile's memory would be exceeded.
 * - Noise: each operator execution draws a log-normal factor (mean 1, coefficient of variation
 *   `noiseCv`) for its device work and one for its host time, from a generator seeded with
 *   `seed`. Default cv 0.02, a proxy for run-to-run variation, not a measurement of it: the
 *   reference comes from a learned predictor and has no repeated runs, so the nearest thing
 *   is its scatter across batch sizes where nothing should change — its ResNet latencies,
 *   flat in batch size 1–16, have a CV of 2.0 % (ResNet-50), 2.1 % (ResNet-101), 1.3 %
 *   (ResNet-152), which is the predictor's scatter rather than the GPU's. 0 makes every run
 *   exactly reproducible regardless of the seed.
 * - Threads: the simulator has no thread model. `Segment.intraOpThreads` is validated (an
 *   integer in [1, `MAX_INTRA_OP_THREADS`], else a BadRequestError) and otherwise ignored: a
 *   segment takes the same time whatever thread count it names.
 * - Drift: an optional step change of speed (`SimDeviceOptions.drift`, or a `drift-<factor>x@<ms>ms`
 *   part of the id): every operator that starts on the device at or after `atMs`
 *   ms after `create` (on the device's clock) takes `factor` × as long — its device work and its
 *   launch time; operators already running at the step keep their speed; dispatch and barrier
 *   (`SimConstants.dispatchMs`, `barrierMs`: the serving path, not the device) are not scaled.
 *   A solo segment started after the step thus takes exactly `factor` × its latency before.
 *   The mechanism is `SimEngine`'s (engine.ts, "Drift"). Deterministic like the rest.
 */
import { DeviceFailureError, DeviceUnavailableError, InvalidModelError } from '../../errors.ts';
import type { Clock, TimerHandle } from '../../clock/clock.ts';
import { bindSymbols, effectiveSeqLen, resolveShape } from '../../model/boundary.ts';
import type { ModelSpec } from '../../model/spec.ts';
import type { TensorMap } from '../../tensor.ts';
import { lazyZeroTensor } from '../../tensor.ts';
import type { Device, DeviceService, GroupResult, Segment, SegmentResult } from '../device.ts';
import { QueryBook } from '../query-book.ts';
import { validateGroup } from '../validate.ts';
import { modelCosts, simConstantsFor, operatorClasses, serviceMemoryBytes, validateSimConstants, type KernelClass, type OpCost, type SimConstants } from './cost-model.ts';
import { SimEngine } from './engine.ts';
import { parseSimDeviceId, validateSimDrift, type GpuProfile, type RuntimeMode, type SimDrift } from './profiles.ts';
import { LogNormalNoise, Rng } from '../../rng.ts';

/** Options of `SimDevice.create`. Only `clock` is required; defaults in brackets. */
export interface SimDeviceOptions {
  /** Where time comes from (a `VirtualClock` for simulations, a `WallClock` for real time). */
  readonly clock: Clock;
  /** Device id ['sim:a100']: `sim:<a100|v100|h100|h200>[:mig-<1|2|3|4|7>g][:interference][:drift-<factor>x@<ms>ms][:eager|graph]` (`parseSimDeviceId`, `profiles.ts`). */
  readonly id?: string;
  /**
   * A step change of speed [none]: from `atMs` ms after `create` (device clock) on, operators
   * take `factor` × as long (module docs, "Drift"). The same as a drift part of `id`; giving both
   * is an error.
   */
  readonly drift?: SimDrift;
  /** Noise seed [0]. */
  readonly seed?: number;
  /** Coefficient of variation of the multiplicative noise, in [0, 1] [0.02]. */
  readonly noiseCv?: number;
  /** Cost-model constants [`simConstantsFor(profile, mode)`: fitted to the H200 measurement for h200/h100, to the A100 reference otherwise]. */
  readonly constants?: SimConstants;
  /** Batch size of the activation estimate reserved per service at `load` [32]. */
  readonly activationBatch?: number;
  /** Most unfinished queries whose state is kept [10000]; beyond that the oldest is evicted. */
  readonly maxKeptQueries?: number;
  /** Most evicted queries remembered (their next resume gets an error result) [10000]. */
  readonly maxLostQueries?: number;
}

const DEFAULT_NOISE_CV = 0.02;
const DEFAULT_ACTIVATION_BATCH = 32;
const DEFAULT_MAX_QUERIES = 10_000;
/** Cost tables kept per service (one per batch size × sequence length seen); cleared beyond. */
const MAX_COST_TABLES = 256;

interface Hosted {
  readonly name: string;
  readonly spec: ModelSpec;
  readonly classes: readonly KernelClass[];
  readonly executor: number;
  readonly reservedBytes: number;
  readonly costs: Map<number, OpCost[]>;
}

/** A group in flight. */
interface PendingGroup {
  readonly startMs: number;
  readonly results: (SegmentResult | undefined)[];
  readonly segments: readonly Segment[];
  /** Per segment: the query's other dynamic axes (`bindSymbols`), to size its outputs. */
  readonly symbols: (Readonly<Record<string, number>> | undefined)[];
  remaining: number;
  lastEndMs: number;
  barrierTimer: TimerHandle | undefined;
  readonly resolve: (r: GroupResult) => void;
}

function intOption(name: string, value: number | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new RangeError(`SimDeviceOptions.${name} ${String(value)} must be an integer in [${min}, ${max}]`);
  }
  return value;
}


export class SimDevice implements Device {
  /** Canonical id, e.g. `sim:a100`, `sim:a100:mig-2g`, `sim:h100:graph`. */
  readonly id: string;
  readonly profile: GpuProfile;
  readonly mode: RuntimeMode;
  readonly constants: SimConstants;
  /** The step change of speed (from the option or the id), `atMs` after creation; undefined when none. */
  readonly drift: SimDrift | undefined;
  private readonly clock: Clock;
  private readonly engine: SimEngine;
  private readonly activationBatch: number;
  private readonly hosted = new Map<string, Hosted>();
  private readonly specs = new Map<string, ModelSpec>();
  /** Kept, lost and running queries (capped by maxKeptQueries / maxLostQueries). */
  private readonly book: QueryBook;
  private readonly groups = new Set<PendingGroup>();
  private reservedBytes = 0;
  private armed: { readonly dueMs: number; readonly handle: TimerHandle } | undefined;
  private closed = false;

  private constructor(options: SimDeviceOptions) {
    const parsed = parseSimDeviceId(options.id ?? 'sim:a100');
    this.id = parsed.id;
    this.profile = parsed.profile;
    this.mode = parsed.mode;
    this.constants = options.constants ?? simConstantsFor(parsed.profile, parsed.mode, parsed.interference === true);
    this.clock = options.clock;
    const cv = options.noiseCv ?? DEFAULT_NOISE_CV;
    const noise = new LogNormalNoise(new Rng(options.seed ?? 0), cv);
    this.drift = options.drift ?? parsed.drift;
    const createdMs = this.clock.now();
    this.engine = new SimEngine(cv > 0 ? noise : undefined, this.drift === undefined ? undefined : { atMs: createdMs + this.drift.atMs, factor: this.drift.factor });
    this.activationBatch = intOption('activationBatch', options.activationBatch, DEFAULT_ACTIVATION_BATCH, 1, 1 << 20);
    this.book = new QueryBook(
      intOption('maxKeptQueries', options.maxKeptQueries, DEFAULT_MAX_QUERIES, 1, Number.MAX_SAFE_INTEGER),
      intOption('maxLostQueries', options.maxLostQueries, DEFAULT_MAX_QUERIES, 1, Number.MAX_SAFE_INTEGER),
    );
  }

  /**
   * Create a simulated device (nothing is loaded).
   * @throws TypeError when `clock` is missing or not a Clock; RangeError for an unknown id or an
   *   option out of range (naming it and the valid range), e.g. a drift whose factor is not a
   *   finite number > 0 or whose `atMs` is negative, or a drift given both as option and in the id.
   */
  static create(options: SimDeviceOptions): Promise<SimDevice> {
    try {
      if (typeof options !== 'object' || options === null) throw new TypeError('SimDevice.create(options): options must be an object with a clock');
      const c: unknown = options.clock;
      if (typeof c !== 'object' || c === null || typeof (c as Clock).now !== 'function' || typeof (c as Clock).setTimer !== 'function') {
        throw new TypeError('SimDeviceOptions.clock must be a Clock (src/clock: WallClock or VirtualClock)');
      }
      if (options.seed !== undefined && (typeof options.seed !== 'number' || !Number.isFinite(options.seed))) {
        throw new RangeError(`SimDeviceOptions.seed ${String(options.seed)} must be a finite number`);
      }
      if (options.noiseCv !== undefined && (typeof options.noiseCv !== 'number' || !(options.noiseCv >= 0 && options.noiseCv <= 1))) {
        throw new RangeError(`SimDeviceOptions.noiseCv ${String(options.noiseCv)} must be a number in [0, 1]`);
      }
      if (options.constants !== undefined) validateSimConstants(options.constants, 'SimDeviceOptions.constants');
      if (options.drift !== undefined) {
        validateSimDrift(options.drift, 'SimDeviceOptions.drift');
        if (options.id !== undefined && parseSimDeviceId(options.id).drift !== undefined) {
          throw new RangeError(`SimDeviceOptions.drift and the drift part of id '${options.id}' are both given; give the drift once`);
        }
      }
      return Promise.resolve(new SimDevice(options));
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
  }

  /** Names of the loaded services. */
  get services(): readonly string[] {
    return [...this.hosted.keys()];
  }

  /** Device memory reserved by the loaded services, bytes (of `profile.memoryBytes`). */
  get memoryReservedBytes(): number {
    return this.reservedBytes;
  }

  /** Operator executions finished since creation (benchmarks). */
  get operatorsExecuted(): number {
    return this.engine.operatorsExecuted;
  }

  /**
   * Host the services: reserve their memory (weights + activation estimate) and give each an
   * executor. Nothing is read from disk: only `model.spec` is used.
   * @throws RangeError for a name listed twice or already loaded; TypeError for a malformed
   *   list; InvalidModelError for a model without operators, or when a service's weights and
   *   activations do not fit in the memory left (the message names the service, what it needs
   *   and what is free); DeviceUnavailableError after `close()`. Nothing is loaded on error.
   */
  load(services: readonly DeviceService[]): Promise<void> {
    try {
      this.loadNow(services);
      return Promise.resolve();
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
  }

  private loadNow(services: readonly DeviceService[]): void {
    if (this.closed) throw new DeviceUnavailableError(`${this.id} is closed`);
    const list: unknown = services;
    if (!Array.isArray(list)) throw new TypeError('load(services): services must be an array');
    const names = new Set<string>();
    let reserved = this.reservedBytes;
    const adding: { name: string; spec: ModelSpec; bytes: number }[] = [];
    services.forEach((s, i) => {
      if (typeof s?.name !== 'string' || s.name.length === 0) throw new TypeError(`services[${i}].name must be a non-empty string`);
      if (names.has(s.name) || this.hosted.has(s.name)) {
        throw new RangeError(`services[${i}].name '${s.name}' is already loaded or listed twice; service names must be unique`);
      }
      names.add(s.name);
      const spec = s.model?.spec;
      if (typeof spec !== 'object' || spec === null || !Array.isArray(spec.operators)) throw new TypeError(`services[${i}].model.spec must be a ModelSpec`);
      if (spec.operators.length === 0) throw new InvalidModelError(`service ${s.name}: model ${spec.name} has no operators`);
      const { weightsBytes, activationBytes } = serviceMemoryBytes(spec, this.activationBatch);
      const bytes = weightsBytes + activationBytes;
      const capacity = this.profile.memoryBytes;
      if (reserved + bytes > capacity) {
        const mb = (b: number): string => `${(b / 2 ** 20).toFixed(1)} MiB`; // GiB-based like the profiles
        throw new InvalidModelError(
          `service ${s.name} does not fit on ${this.id} (${this.profile.name}): it needs ${bytes} bytes (${mb(bytes)}: weights ${mb(weightsBytes)} + activations ${mb(activationBytes)} at batch ${this.activationBatch}) ` +
            `but only ${Math.max(0, capacity - reserved)} bytes (${mb(Math.max(0, capacity - reserved))}) of ${capacity} (${mb(capacity)}) are free` +
            (this.hosted.size + adding.length > 0 ? ` (loaded: ${[...this.hosted.keys(), ...adding.map((a) => a.name)].join(', ')})` : ''),
        );
      }
      reserved += bytes;
      adding.push({ name: s.name, spec, bytes });
    });
    for (const a of adding) {
      this.hosted.set(a.name, { name: a.name, spec: a.spec, classes: operatorClasses(a.spec), executor: this.engine.addExecutor(), reservedBytes: a.bytes, costs: new Map() });
      this.specs.set(a.name, a.spec);
    }
    this.reservedBytes = reserved;
  }

  /**
   * Run one operator group; see the module docs for timing and semantics. Resolves when the
   * clock reaches the group's end (drive a `VirtualClock` to get there).
   * @throws TypeError / RangeError / BadRequestError for a malformed group or inputs that do
   *   not fit (`device/validate.ts`), before anything runs; DeviceUnavailableError after close().
   */
  runGroup(group: readonly Segment[]): Promise<GroupResult> {
    if (this.closed) return Promise.reject(new DeviceUnavailableError(`${this.id} is closed`));
    // Settle what finished by now first (a late WallClock timer), so validation sees it.
    const startMs = this.catchUp();
    let costs: OpCost[][];
    try {
      validateGroup(group, this.specs, this.book, this.id);
      // Costs before anything runs: a cost that is not finite throws here (RangeError naming
      // the model, the operator and the batch), never a segment that would not finish.
      costs = group.map((seg) => this.costsOf(this.hosted.get(seg.service)!, seg));
    } catch (err) {
      this.arm();
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
    if (group.length === 0) return Promise.resolve({ groupLatencyMs: 0, segments: [] });
    return new Promise<GroupResult>((resolve) => {
      const pending: PendingGroup = { startMs, results: new Array<SegmentResult | undefined>(group.length), segments: group, symbols: [], remaining: group.length, lastEndMs: startMs, barrierTimer: undefined, resolve };
      this.groups.add(pending);
      const arriveMs = startMs + this.constants.dispatchMs;
      group.forEach((seg, i) => {
        const { queryId, service } = seg;
        const spec = this.hosted.get(service)!.spec;
        pending.symbols[i] = spec.dynamicAxes.symbols === undefined ? undefined : seg.input.kind === 'tensors' ? bindSymbols(spec, seg.input.tensors) : seg.input.kind === 'resume' ? this.book.kept.get(queryId)?.symbols : undefined;
        const lost = this.book.beginSegment(queryId, service, seg.input.kind === 'resume');
        if (lost) {
          const error = new DeviceFailureError(`service ${service}, query ${queryId}: cannot resume at operator ${seg.start}, its state was lost (${lost.reason})`);
          pending.results[i] = { ok: false, queryId, service, error };
          pending.remaining--;
          return;
        }
        const hosted = this.hosted.get(service)!;
        this.engine.submit({ executor: hosted.executor, costs: costs[i]!, start: seg.start, end: seg.end, onDone: (s, e) => this.segmentDone(pending, i, s, e) }, arriveMs);
      });
      if (pending.remaining === 0) this.finishGroup(pending, startMs);
      this.arm();
    });
  }

  /**
   * Drop the kept state of a query; for one whose segment is running, when it finishes.
   * Idempotent; a no-op for an unknown query and after close().
   * @throws RangeError for a service that is not loaded, or a query that belongs to another
   *   service (the message names the owner; nothing is released).
   */
  releaseQuery(service: string, queryId: string): Promise<void> {
    if (this.closed) return Promise.resolve();
    if (!this.hosted.has(service)) return Promise.reject(new RangeError(`service '${service}' is not loaded on ${this.id} (loaded: ${this.services.join(', ') || 'none'})`));
    try {
      this.book.release(service, queryId); // nothing to free: the simulation holds no state
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
    return Promise.resolve();
  }

  /**
   * Unload one service (`Device.unload`): its reserved memory is freed and its queries' kept
   * states are lost. The caller stops sending its segments first (a segment of it still
   * running finishes on the simulated executor, which stays in the engine, idle).
   * @throws RangeError for a service that is not loaded; DeviceUnavailableError after close().
   */
  unload(service: string): Promise<void> {
    if (this.closed) return Promise.reject(new DeviceUnavailableError(`${this.id} is closed`));
    const h = this.hosted.get(service);
    if (h === undefined) return Promise.reject(new RangeError(`service '${service}' is not loaded on ${this.id} (loaded: ${this.services.join(', ') || 'none'})`));
    this.hosted.delete(service);
    this.specs.delete(service);
    this.reservedBytes -= h.reservedBytes;
    this.book.loseKept(service, 'the service was unloaded');
    return Promise.resolve();
  }

  /**
   * Stop: segments still running get `device_unavailable` error results (their groups resolve
   * now), every state is dropped, no timer is left on the clock. Idempotent.
   */
  close(): Promise<void> {
    if (this.closed) return Promise.resolve();
    this.closed = true;
    if (this.armed) this.clock.clearTimer(this.armed.handle);
    this.armed = undefined;
    this.engine.clear();
    const now = this.clock.now();
    for (const g of [...this.groups]) {
      if (g.barrierTimer !== undefined) this.clock.clearTimer(g.barrierTimer);
      g.segments.forEach((seg, i) => {
        if (g.results[i] === undefined) {
          g.results[i] = { ok: false, queryId: seg.queryId, service: seg.service, error: new DeviceUnavailableError(`${this.id} was closed while segment [${seg.start}, ${seg.end}) of query ${seg.queryId} ran`) };
        }
      });
      this.groups.delete(g);
      g.resolve({ groupLatencyMs: Math.max(0, now - g.startMs), segments: g.results as SegmentResult[] });
    }
    this.book.clear();
    return Promise.resolve();
  }

  /** Per-operator costs of a service at the segment's batch and sequence length (cached). */
  private costsOf(h: Hosted, seg: Segment): OpCost[] {
    const seq = effectiveSeqLen(h.spec, seg.seqLen);
    const key = seg.batchSize * 1_000_003 + seq;
    let costs = h.costs.get(key);
    if (costs === undefined) {
      if (h.costs.size >= MAX_COST_TABLES) h.costs.clear();
      costs = modelCosts(h.spec, h.classes, seg.batchSize, seq, this.profile, this.mode, this.constants); // throws before caching
      h.costs.set(key, costs);
    }
    return costs;
  }

  /** Process every engine event due by now; returns the device's current time (ms). */
  private catchUp(): number {
    const now = this.clock.now();
    this.engine.runUntil(now);
    return Math.max(now, this.engine.now);
  }

  /**
   * Keep exactly one clock timer on the engine's next observable event — a segment finishing or
   * arriving (`SimEngine.nextObservableMs`) — none when idle or closed. Operator events in
   * between are simulated when the timer fires or when a `runGroup` catches the engine up.
   */
  private arm(): void {
    if (this.closed) return;
    const next = this.engine.nextObservableMs();
    if (this.armed !== undefined) {
      if (this.armed.dueMs === next) return;
      this.clock.clearTimer(this.armed.handle);
      this.armed = undefined;
    }
    if (next === Infinity) return;
    const dueMs = next;
    const handle = this.clock.setTimer(Math.max(0, dueMs - this.clock.now()), () => {
      this.armed = undefined;
      // The timer was set for dueMs: treat that time as reached even if the clock's sum
      // now() + delay rounded one ulp short of it.
      this.engine.runUntil(Math.max(dueMs, this.clock.now()));
      this.arm();
    });
    this.armed = { dueMs, handle };
  }

  private segmentDone(g: PendingGroup, i: number, startMs: number, endMs: number): void {
    const seg = g.segments[i]!;
    const { queryId, service } = seg;
    const hosted = this.hosted.get(service);
    if (hosted === undefined) {
      // unloaded while the segment ran
      this.book.finishFailed(queryId, service);
      g.results[i] = { ok: false, queryId, service, error: new DeviceUnavailableError(`service ${service} was unloaded while segment [${seg.start}, ${seg.end}) of query ${queryId} ran`) };
    } else {
      const n = hosted.spec.operators.length;
      const latencyMs = endMs - startMs;
      if (seg.end < n) {
        const symbols = g.symbols[i];
        this.book.finishKept(queryId, { service, next: seg.end, batchSize: seg.batchSize, seqLen: seg.seqLen, ...(symbols === undefined ? {} : { symbols }) });
        g.results[i] = { ok: true, queryId, service, latencyMs };
      } else {
        this.book.finishDone(queryId);
        const outputs: TensorMap = {};
        for (const o of hosted.spec.outputs) outputs[o.name] = lazyZeroTensor(o.dataType, resolveShape(hosted.spec, o, seg.batchSize, seg.seqLen, g.symbols[i]));
        g.results[i] = { ok: true, queryId, service, latencyMs, outputs };
      }
    }
    if (endMs > g.lastEndMs) g.lastEndMs = endMs;
    if (--g.remaining > 0) return;
    const extra = this.constants.barrierMs * (g.segments.length - 1);
    if (extra <= 0) {
      this.finishGroup(g, g.lastEndMs);
      return;
    }
    const endOfGroup = g.lastEndMs + extra;
    g.barrierTimer = this.clock.setTimer(Math.max(0, endOfGroup - this.clock.now()), () => {
      g.barrierTimer = undefined;
      this.finishGroup(g, endOfGroup);
    });
  }

  private finishGroup(g: PendingGroup, endMs: number): void {
    if (!this.groups.delete(g)) return;
    g.resolve({ groupLatencyMs: endMs - g.startMs, segments: g.results as SegmentResult[] });
  }
}
