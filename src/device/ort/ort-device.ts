/**
 * OrtDevice: the `Device` contract on onnxruntime-node (docs/devices.md).
 *
 * ## Executors: one child process per service
 *
 * `session.run()` of onnxruntime-node runs synchronously on the JS thread (the binding is
 * only wrapped in `setImmediate`), so two sessions in one thread never overlap. Every service
 * therefore gets its own executor off the main thread; a group's segments are dispatched to
 * their executors at once and overlap on the device.
 *
 * worker_threads vs child_process.fork, measured here (onnxruntime-node 1.30, Node 20, 2-core
 * CPU box; two executors each holding one session of an 8-layer 3×3 conv stack at
 * [1, 256, 14, 14], intraOpNumThreads 1, spinning off; medians of 15–40 rounds, ranges over
 * four runs):
 *
 * |                                        | worker_threads      | fork (advanced serialization) |
 * |----------------------------------------|--------------------:|------------------------------:|
 * | one query alone                        | 16.6–17.3 ms        | 16.7–16.8 ms                  |
 * | two queries one after the other        | 34.1–35.9 ms        | 34.5–35.4 ms                  |
 * | the two as one group                   | 17.0–18.4 ms        | 17.2–17.6 ms                  |
 * | group / sequential                     | 0.50–0.52           | 0.50                          |
 * | empty message round trip, p50 / p90    | 0.08 / 0.10–0.12 ms | 0.16–0.20 / 0.64–0.85 ms      |
 * | [1, 3, 224, 224] float32 round trip    | 0.54–0.65 ms (0.09 if transferred) | 1.7–2.0 ms     |
 * | spawn + load + warm-up of both         | 130–160 ms          | 167–175 ms                    |
 *
 * Through this device (fork), two 4-operator services of three 128-channel 3×3 convs at 28×28
 * overlap the same way: one query's segment 5.7–5.9 ms (inside the executor), two groups one
 * after the other 13.0–13.2 ms, both in one group 6.7–6.9 ms (ratio 0.51–0.53; ≈ 0.7 ms of
 * each group is messaging and per-operator scheduling).
 *
 * Both overlap equally well. Fork costs ≈ 0.1 ms more per message and ≈ 1.3 ms more per
 * 600 KB input; an input crosses once per query, and none of it enters the per-segment
 * `latencyMs` (measured inside the executor). We choose **fork** for fault isolation: a
 * worker thread shares the process, so a native crash inside onnxruntime takes the whole
 * server down (checked: SIGABRT raised from a worker ends the whole process, exit 134; in a
 * forked child only the child dies and the parent restarts it). Native crashes with several
 * workers are reported against onnxruntime-node: microsoft/onnxruntime#24486 (1.21, "FATAL
 * ERROR: HandleScope::HandleScope Entering the V8 API without proper locking" with more than
 * one worker; closed — current sources keep the Tensor constructor per env,
 * `js/node/src/ort_instance_data.h`),
 * BYK/loreai#1444 (the same static Tensor-constructor reference, native abort on Node 24,
 * fixed by upgrading to 1.27), microsoft/onnxruntime#20084 (Electron workers crash at random
 * when importing onnxruntime-node), huggingface/transformers.js#651 ("Module did not
 * self-register" in workers, older napi-v3 builds). 1.30 passed a 5 × 6-worker stress here,
 * but the Device contract promises that an executor death fails only its queries, which only
 * a process boundary can guarantee. Each child also owns its ORT environment and thread pools.
 * Children load the TS sources through tsx's ESM loader passed as `--import` (they do not
 * inherit vitest's or `register()`'s loader); no JS bootstrap file is needed.
 *
 * ## Semantics
 *
 * - One ORT InferenceSession per operator and intra-op thread count, created once and reused
 *   (repeated create/release leaks memory in onnxruntime-node): the default count
 *   (`intraOpNumThreads`) and `preloadIntraOpThreads` at `load`, any other count a segment
 *   names (`Segment.intraOpThreads`) on its first use, outside the segment's
 *   `latencyMs` (details: `executor.ts`). A segment's count is an integer in
 *   [1, `maxIntraOpThreads`] (else BadRequestError), so each operator holds at most
 *   `maxIntraOpThreads` + 1 sessions, each with its own copy of the operator's weights.
 * - A segment runs its operators back to back inside its executor; intermediate tensors stay
 *   there. The query's state is kept under `queryId` until the segment reaching the last
 *   operator (outputs returned, state freed), `releaseQuery`, a failed segment, or the death
 *   of the executor. A query released while its segment is in flight (running, queued, or
 *   waiting for an executor restart, when nothing can be sent to the child) is freed in the
 *   executor when that segment's result arrives.
 * - Two segments of the same service in one group are queued in that service's executor and
 *   run **one after the other** (each `latencyMs` covers its own run only; `groupLatencyMs`
 *   covers both). Segments of different services run concurrently.
 * - `latencyMs`: performance.now() around the operator runs inside the executor (no
 *   messaging, no input decoding, no synthetic generation). `groupLatencyMs`: in the caller,
 *   from dispatch of the first segment to the last result (includes IPC: ≈ 0.2 ms plus
 *   ≈ 1.3 ms per MB of inputs and outputs crossing).
 * - Concurrency: `runGroup` may be called again before an earlier group finished. Segments of
 *   different services overlap; segments of one service, from one group or several, queue
 *   FIFO in its executor. A query may have one segment in flight at a time (else
 *   BadRequestError). `load` may run concurrently with `runGroup` and with other `load`s
 *   (service names are reserved when `load` is called, before anything is awaited).
 * - Failures: an ORT error fails that segment only (`DeviceFailureError` naming service,
 *   query and operator) and drops the query's state; the executor stays usable. A dead
 *   executor is restarted at once; every query it was running gets an error result, and every
 *   query whose state it kept gets one at its next `resume` (never silence, never a throw).
 *   A message the IPC channel cannot carry (structured clone refuses a value) fails its
 *   segment with a `DeviceFailureError`; nothing ran, the executor stays up.
 * - Deadlines: `loadTimeoutMs` bounds the CUDA probe and each executor start (spawn + load +
 *   warm-up; also restarts). `segmentTimeoutMs` (off by default) bounds each segment from when
 *   it reaches the front of its executor's queue; an overrun kills the executor (SIGKILL),
 *   fails that segment ("exceeded segmentTimeoutMs N ms") and the others queued there, and
 *   restarts it (details: `executor-handle.ts`).
 * - Restart backoff: a failed restart is tried again after a capped exponential backoff
 *   (`restartBackoff`), forever; meanwhile that service's segments fail at once with a
 *   `DeviceFailureError` saying when the next try is. `watchHealth` listeners hear each
 *   executor going down and coming back. Loading the service again under the same name
 *   (`load`) while it waits out a backoff replaces it with a fresh executor (0 restarts).
 * - Bounded bookkeeping: the device remembers at most `maxLostQueries` queries whose state was
 *   lost (so their next `resume` gets an error result; the oldest are forgotten first, after
 *   which a resume is a BadRequestError "no kept state"), and keeps the state of at most
 *   `maxKeptQueries` unfinished queries: beyond that the oldest kept state is freed in its
 *   executor and the query is treated as lost ("evicted"). Callers should `releaseQuery`
 *   what will not continue; the caps only bound leaks.
 * - Logging: pass `logger` (pino) to see executor exits and restarts (warn, with service, exit
 *   code or signal and output tail), segment-timeout kills (warn), an executor left down
 *   (error), load timings (info `loadMs`) and spawns (debug). Default: silent.
 */
import fs from 'node:fs/promises';
import { DeviceFailureError, DeviceUnavailableError, InvalidModelError, describeError } from '../../errors.ts';
import type { Logger } from '../../log.ts';
import { GraphBuilder } from '../../model/onnx/builder.ts';
import { onnx } from '../../model/onnx/proto.ts';
import type { ModelSpec } from '../../model/spec.ts';
import type { Device, DeviceService, GroupResult, Segment, SegmentResult, ServiceHealthEvent } from '../device.ts';
import type { ExecutorFault } from './executor-handle.ts';
import { ExecutorHandle } from './executor-handle.ts';
import { probeExecutionProvider } from './executor-spawn.ts';
import { QueryBook } from '../query-book.ts';
import { validateGroup } from '../validate.ts';
import { resolveOptions, type OrtDeviceOptions, type ResolvedOptions } from './ort-options.ts';

export type { OrtDeviceOptions } from './ort-options.ts';
export { DEFAULT_WARMUP_SETTLE } from './ort-options.ts';

/** A one-node ONNX model (Identity on [1]) used to probe an execution provider. */
function probeModel(): Uint8Array {
  const g = new GraphBuilder({ name: 'ep_probe', seed: 0 });
  g.beginOperator('probe');
  const x = g.input('x', 'float32', [1]);
  const [y] = g.node('Identity', [x], [[1]]);
  g.output(y!);
  return onnx.ModelProto.encode(g.build().model).finish();
}

export class OrtDevice implements Device {
  /** `ort:cpu`, `ort:cuda` (device 0) or `ort:cuda:N`. */
  readonly id: string;
  private readonly options: ResolvedOptions;
  private readonly log: Logger;
  private readonly handles = new Map<string, ExecutorHandle>();
  private readonly specs = new Map<string, ModelSpec>();
  /** Kept (in an executor), lost and running queries; set up with the options' caps. */
  private readonly book: QueryBook;
  /** Service names of `load` calls in progress (reserved before the first await). */
  private readonly reserved = new Set<string>();
  /** Executors that a `load` in progress is starting (not yet in `handles`). */
  private readonly loading = new Set<ExecutorHandle>();
  private closing: Promise<void> | undefined;
  private readonly healthListeners = new Set<(event: ServiceHealthEvent) => void>();

  private constructor(options: ResolvedOptions) {
    this.options = options;
    this.book = new QueryBook(options.maxKeptQueries, options.maxLostQueries);
    const s = options.session;
    this.id = s.executionProvider === 'cpu' ? 'ort:cpu' : s.cudaDeviceId === 0 ? 'ort:cuda' : `ort:cuda:${s.cudaDeviceId}`;
    this.log = options.logger.child({ device: this.id });
  }

  /**
   * Create a device (no executor starts until `load`). For 'cuda' the provider is probed in
   * a throwaway child process within `loadTimeoutMs`: the build must list a CUDA backend and a
   * session must be creatable with it.
   * @throws RangeError / TypeError for a bad option (naming it and the valid values).
   * @throws DeviceUnavailableError when CUDA is requested but not usable here (or the probe
   *   did not answer in time); the message says so and names the alternative
   *   (`executionProvider: 'cpu'`).
   */
  static async create(options: OrtDeviceOptions = {}): Promise<OrtDevice> {
    const resolved = resolveOptions(options);
    if (resolved.session.executionProvider === 'cuda') {
      const t0 = performance.now();
      const probe = await probeExecutionProvider(resolved.session, probeModel(), resolved.loadTimeoutMs);
      resolved.logger.debug({ probeMs: performance.now() - t0, backends: probe.backends, error: probe.error }, 'CUDA provider probed');
      if (probe.error !== undefined) {
        throw new DeviceUnavailableError(`CUDA is not available here: ${probe.error.trim()}. Use executionProvider 'cpu' instead (backends in this build: ${probe.backends.join(', ') || 'unknown'})`);
      }
    }
    return new OrtDevice(resolved);
  }

  /** Names of the loaded services. */
  get services(): readonly string[] {
    return [...this.specs.keys()];
  }

  /**
   * Start one executor per service, create its operator sessions and warm each operator up;
   * resolves once all are ready. May be called again, also concurrently, to add services.
   * A service whose executor waits out a restart backoff (its restarts failed) may be loaded again
   * under its name: on success the fresh executor replaces the down one.
   * @throws RangeError for a name listed twice, already loaded (and up), or being loaded by
   *   another `load` call in progress.
   * @throws InvalidModelError when an operator file is missing, does not load, does not match
   *   the spec or fails its warm-up; DeviceUnavailableError when the EP is missing or the
   *   device is closed (also when `close()` is called while loading); DeviceFailureError when
   *   an executor dies while loading or does not load within `loadTimeoutMs`. On any error no
   *   executor of this call is left running.
   */
  async load(services: readonly DeviceService[]): Promise<void> {
    if (this.closing) throw new DeviceUnavailableError(`${this.id} is closed`);
    const list: unknown = services;
    if (!Array.isArray(list)) throw new TypeError('load(services): services must be an array');
    const names = new Set<string>();
    services.forEach((s, i) => {
      if (typeof s.name !== 'string' || s.name.length === 0) throw new TypeError(`services[${i}].name must be a non-empty string`);
      const taken = names.has(s.name) || this.reserved.has(s.name) || (this.specs.has(s.name) && !this.handles.get(s.name)?.isDown);
      if (taken) throw new RangeError(`services[${i}].name '${s.name}' is already loaded or listed twice (or being loaded by a load() in progress); service names must be unique`);
      names.add(s.name);
      const n = s.model.spec.operators.length;
      if (n === 0) throw new InvalidModelError(`service ${s.name}: model ${s.model.spec.name} has no operators`);
      if (s.model.operatorPaths.length !== n) throw new InvalidModelError(`service ${s.name}: ${s.model.operatorPaths.length} operator files for ${n} operators`);
      (s.warmupShapes ?? []).forEach((w, j) => {
        if (!Number.isSafeInteger(w.batchSize) || w.batchSize < 1 || !Number.isSafeInteger(w.seqLen) || w.seqLen < 0) {
          throw new RangeError(`services[${i}].warmupShapes[${j}] must have an integer batchSize ≥ 1 and seqLen ≥ 0, got ${JSON.stringify(w)}`);
        }
      });
    });
    // Reserve the names before the first await, so a concurrent load of the same name fails above.
    for (const name of names) this.reserved.add(name);
    const started: { name: string; spec: ModelSpec; handle: ExecutorHandle }[] = [];
    try {
      await Promise.all(
        services.flatMap((s) =>
          s.model.operatorPaths.map(async (p: string, k: number): Promise<void> => {
            try {
              await fs.access(p);
            } catch {
              throw new InvalidModelError(`service ${s.name}: operator ${k} file ${p} does not exist or is not readable`);
            }
          }),
        ),
      );
      if (this.closing) throw new DeviceUnavailableError(`${this.id} was closed while loading`);
      for (const s of services) {
        const handle = new ExecutorHandle(
          {
            service: s.name,
            spec: s.model.spec,
            operatorPaths: s.model.operatorPaths,
            session: this.options.session,
            warmupRuns: this.options.warmupRuns,
            warmupShapes: this.options.warmupSettle === undefined ? [] : (s.warmupShapes ?? []),
            warmupSettle: this.options.warmupSettle ?? { window: 1, tolerance: 0, maxRuns: 1, budgetMs: 0 },
            syntheticCacheBytes: this.options.syntheticCacheBytes,
            gcEverySegments: this.options.gcEverySegments,
            preloadIntraOpThreads: this.options.preloadIntraOpThreads,
            loadTimeoutMs: this.options.loadTimeoutMs,
            segmentTimeoutMs: this.options.segmentTimeoutMs,
            deadlineTimer: this.options.segmentDeadlineTimer,
            memoryLimitBytes: Math.round(this.options.executorMemoryLimitMb * 1024 * 1024),
            restartBackoff: this.options.restartBackoff,
            logger: this.log,
          },
          (reason) => this.onStateLost(s.name, reason),
          (h) => {
            // only the handle serving the name speaks for it (not one a `load` is replacing)
            if (this.handles.get(s.name) === handle) for (const l of this.healthListeners) l({ service: s.name, ...h });
          },
        );
        started.push({ name: s.name, spec: s.model.spec, handle });
        this.loading.add(handle);
      }
      const t0 = performance.now();
      const results = await Promise.allSettled(started.map((s) => s.handle.start()));
      const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failed || this.closing) {
        await Promise.all(started.map((s) => s.handle.close()));
        if (this.closing || !failed) throw new DeviceUnavailableError(`${this.id} was closed while loading`);
        throw failed.reason instanceof Error ? failed.reason : new DeviceFailureError(describeError(failed.reason));
      }
      for (const s of started) {
        const old = this.handles.get(s.name);
        this.handles.set(s.name, s.handle);
        this.specs.set(s.name, s.spec);
        if (old) void old.close(); // a down executor being replaced: nothing runs there
      }
      this.log.info({ services: started.map((s) => s.name), loadMs: performance.now() - t0 }, 'services loaded');
    } finally {
      for (const name of names) this.reserved.delete(name);
      for (const s of started) this.loading.delete(s.handle);
    }
  }

  /**
   * Run one operator group: validate it, dispatch every segment to its service's executor at
   * once, wait for all. Results come back in the order given. May be called concurrently.
   * @throws TypeError / RangeError / BadRequestError for a malformed group or inputs that do
   *   not fit (see device/validate.ts), before anything runs; DeviceUnavailableError after close().
   */
  async runGroup(group: readonly Segment[]): Promise<GroupResult> {
    if (this.closing) throw new DeviceUnavailableError(`${this.id} is closed`);
    validateGroup(group, this.specs, this.book, this.id, this.options.maxIntraOpThreads);
    if (group.length === 0) return { groupLatencyMs: 0, segments: [] };

    const t0 = performance.now();
    const segments = await Promise.all(group.map((seg) => this.dispatch(seg)));
    return { groupLatencyMs: performance.now() - t0, segments };
  }

  /**
   * Drop the kept state of a query (in its executor, after any segment of it already sent; for
   * a segment in flight, once its result arrives — also when it is waiting for an executor
   * restart). Idempotent (a query the device does not know is a no-op); a no-op after close().
   * @throws RangeError for a service that is not loaded, or for a query that belongs to
   *   another service (kept, lost or running there); the message names the owning service,
   *   and nothing is released.
   */
  releaseQuery(service: string, queryId: string): Promise<void> {
    if (this.closing) return Promise.resolve();
    const handle = this.handles.get(service);
    if (!handle) return Promise.reject(new RangeError(`service '${service}' is not loaded on ${this.id} (loaded: ${this.services.join(', ') || 'none'})`));
    let action;
    try {
      action = this.book.release(service, queryId);
    } catch (err) {
      return Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
    // In flight: freed when its result arrives (dispatch). Sending now would not do: a segment
    // waiting for an executor restart is sent after it, and the child would keep its state.
    // Otherwise sent even for a query the book does not know (idempotent in the executor).
    if (action.kind !== 'defer') handle.release(queryId);
    return Promise.resolve();
  }

  /**
   * Inject a fault into a service's executor — for tests and chaos drills, not for serving.
   * 'exit-in-next-segment': the executor process exits after the first operator of the next
   * segment it starts; 'stall-in-next-segment': it hangs there instead (only
   * `segmentTimeoutMs` or `close()` ends it); 'kill': SIGKILL now. The device restarts it.
   * `{ holdMemoryBytes }`: the executor allocates and keeps that many bytes (a leak; for
   * `executorMemoryLimitMb` tests), once the messages sent before it are done.
   * @throws RangeError for an unknown service; DeviceFailureError when the executor is down.
   */
  async injectExecutorFault(service: string, fault: ExecutorFault): Promise<void> {
    const handle = this.handles.get(service);
    if (!handle) throw new RangeError(`service '${service}' is not loaded on ${this.id} (loaded: ${this.services.join(', ') || 'none'})`);
    await handle.injectFault(fault);
  }

  /**
   * Resident set size of each loaded service's executor process, bytes, as it last reported
   * (after its load and after each segment: it is not sampled between segments); a service whose
   * executor is down or (re)starting is absent. See `Device.residentBytes`.
   */
  residentBytes(): ReadonlyMap<string, number> {
    const out = new Map<string, number>();
    for (const [service, handle] of this.handles) {
      const rss = handle.rssBytes;
      if (rss !== undefined) out.set(service, rss);
    }
    return out;
  }

  /**
   * Executor restarts of a service caused by `executorMemoryLimitMb` since it was (last) loaded.
   * @throws RangeError for an unknown service.
   */
  executorMemoryRestarts(service: string): number {
    const handle = this.handles.get(service);
    if (!handle) throw new RangeError(`service '${service}' is not loaded on ${this.id}`);
    return handle.memoryRestarts;
  }

  /**
   * Automatic executor restarts of a service since it was (last) loaded (0 when none).
   * @throws RangeError for an unknown service.
   */
  executorRestarts(service: string): number {
    const handle = this.handles.get(service);
    if (!handle) throw new RangeError(`service '${service}' is not loaded on ${this.id}`);
    return handle.restarts;
  }

  /**
   * Ids of the queries whose state a service's executor keeps, sorted, as of every segment
   * and release sent to it before — for tests and leak checks, not for serving. Waits for a
   * restart in progress. Should mirror the device's book: every unfinished query neither
   * released, lost nor evicted.
   * @throws RangeError for an unknown service; DeviceFailureError when the executor is down
   *   or dies before answering; DeviceUnavailableError after close().
   */
  async executorKeptQueries(service: string): Promise<readonly string[]> {
    const handle = this.handles.get(service);
    if (!handle) throw new RangeError(`service '${service}' is not loaded on ${this.id} (loaded: ${this.services.join(', ') || 'none'})`);
    return handle.keptQueries();
  }

  /**
   * Per operator of a service (in order), the intra-op thread counts its executor has sessions
   * for, ascending, as of every segment sent to it before — for tests and leak checks (a count
   * appears once however often it is used: sessions are never recreated).
   * @throws as `executorKeptQueries`.
   */
  async executorSessionThreads(service: string): Promise<readonly (readonly number[])[]> {
    const handle = this.handles.get(service);
    if (!handle) throw new RangeError(`service '${service}' is not loaded on ${this.id} (loaded: ${this.services.join(', ') || 'none'})`);
    return handle.sessionThreads();
  }

  /** Largest `Segment.intraOpThreads` this device accepts (`OrtDeviceOptions.maxIntraOpThreads`). */
  get maxIntraOpThreads(): number {
    return this.options.maxIntraOpThreads;
  }

  /** See `Device.watchHealth`: executor down (crash, failed restart) and up (restarted) per service. */
  watchHealth(listener: (event: ServiceHealthEvent) => void): () => void {
    this.healthListeners.add(listener);
    return () => this.healthListeners.delete(listener);
  }

  /**
   * Unload one service (`Device.unload`): its executor process is ended (SIGTERM, then SIGKILL
   * after `CLOSE_GRACE_MS`), segments still running there get `device_unavailable` error
   * results, the states its queries kept are lost. The name may then be loaded again.
   * @throws RangeError for a service that is not loaded (or still loading); DeviceUnavailableError after close().
   */
  async unload(service: string): Promise<void> {
    if (this.closing) throw new DeviceUnavailableError(`${this.id} is closed`);
    const handle = this.handles.get(service);
    if (!handle) throw new RangeError(`service '${service}' is not loaded on ${this.id} (loaded: ${this.services.join(', ') || 'none'})`);
    this.handles.delete(service);
    this.specs.delete(service);
    this.book.loseKept(service, 'the service was unloaded');
    await handle.close();
    this.log.info({ service }, 'service unloaded');
  }

  /** The pids of the live executors (`Device.processIds`). */
  processIds(): readonly number[] {
    const out: number[] = [];
    for (const h of [...this.handles.values(), ...this.loading]) if (h.pid !== undefined) out.push(h.pid);
    return out;
  }

  /**
   * Terminate every executor, including those a `load` in progress is starting, and free all
   * state. Idempotent; later runGroup/load reject.
   */
  close(): Promise<void> {
    this.closing ??= (async () => {
      await Promise.all([...this.handles.values(), ...this.loading].map((h) => h.close()));
      this.book.clear();
    })();
    return this.closing;
  }

  /** Send one segment to its executor; settle the query book when its result arrives. */
  private dispatch(seg: Segment): Promise<SegmentResult> {
    const { queryId, service } = seg;
    const lost = this.book.beginSegment(queryId, service, seg.input.kind === 'resume');
    if (lost) {
      // Answered once with an error; afterwards the query is unknown to the device.
      const error = new DeviceFailureError(`service ${service}, query ${queryId}: cannot resume at operator ${seg.start}, its state was lost (${lost.reason})`);
      return Promise.resolve({ ok: false, queryId, service, error });
    }
    const handle = this.handles.get(service)!;
    const run = handle.run({
      queryId,
      start: seg.start,
      end: seg.end,
      batchSize: seg.batchSize,
      seqLen: seg.seqLen,
      input: seg.input,
      ...(seg.intraOpThreads === undefined ? {} : { intraOpThreads: seg.intraOpThreads }),
    });
    return run.then((outcome): SegmentResult => {
      if (!outcome.ok) {
        this.book.finishFailed(queryId, service, outcome.error.code === 'device_failure' ? outcome.error.message : undefined);
        return { ok: false, queryId, service, error: outcome.error };
      }
      const n = this.specs.get(service)!.operators.length;
      if (seg.end < n) {
        // The child kept the state: free it there if the caller released the query meanwhile.
        const { released, evicted } = this.book.finishKept(queryId, { service, next: seg.end, batchSize: seg.batchSize, seqLen: seg.seqLen });
        if (released) handle.release(queryId);
        for (const e of evicted) {
          // Beyond maxKeptQueries: the oldest kept state is freed in its executor (now lost).
          this.handles.get(e.service)?.release(e.queryId);
          this.log.warn({ service: e.service, queryId: e.queryId, maxKeptQueries: this.book.maxKept }, 'kept query state evicted');
        }
      } else {
        this.book.finishDone(queryId);
      }
      return outcome.outputs ? { ok: true, queryId, service, latencyMs: outcome.latencyMs, outputs: outcome.outputs } : { ok: true, queryId, service, latencyMs: outcome.latencyMs };
    });
  }

  private onStateLost(service: string, reason: string): void {
    this.book.loseKept(service, reason);
  }
}
