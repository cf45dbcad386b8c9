/**
 * The inference backend (`InferenceBackend`, `inference.ts`) over one `ServingRuntime`: it
 * validates each request against the served model before anything is queued, submits it with
 * its QoS target, withdraws it when the client disconnects, and maps the runtime's single
 * outcome to an `InferResponse` or a `ServeError`.
 *
 * Lifecycle: `new RuntimeBackend(options)` (metadata available, every model LOADING, not ready)
 * → `start(engine)` (the runtime is created on the engine's clock, device and controller; then
 * one model at a time is loaded on the device, `BackendEngine.loadModel`, added to the runtime and
 * warmed up with one query per batch size: READY, or UNAVAILABLE with the reason when any step
 * fails — nothing of it is left on the device or in the runtime, the others go on; then ready)
 * → `shutdown(graceMs)` (not ready; queued requests run or are answered; the engine is closed).
 * Every method may be called at any time.
 *
 * ## Model state and model control
 * Each model is LOADING, READY, UNLOADING or UNAVAILABLE with a reason (`ModelState`, Triton's
 * repository index names): `repositoryIndex`, `modelReady` (READY only), `modelMetadata`
 * (`state`, `reason`), `modelList` (READY ones). A request to a model that is not READY is
 * `not_ready` (503 / UNAVAILABLE) with the state and reason, or `model_not_found` when a request
 * unloaded it. With `modelControl` given (`--model-control explicit`), `loadModel` /
 * `unloadModel` load and unload at runtime (one operation per model at a time; unload refuses
 * new requests at once and lets the model's waiting and running ones finish); without it they
 * answer `forbidden`. Names are checked against `MODEL_NAME_PATTERN` and load parameters by
 * `loadConfigParameter` before anything happens.
 *
 * ## Validation and versions
 * Every request is checked against its model before anything is queued (`validate.ts`). Each
 * served model is one version (`ServedModel.version`) of the model clients call
 * `ServedModel.modelName`: a request names a version or gets the highest READY one; metadata,
 * the repository index and statistics list every version (docs/serving.md "Model versions").
 *
 * ## Dynamic batching
 * A model served with `batching` (`ServedModel.batching`, from the config's `dynamicBatching`)
 * lets a fusing policy run several requests as one batch (`ServingRuntime`, "Dynamic
 * batching"). Nothing changes for the request: it is validated here before it is submitted (a
 * bad request never joins a batch), and its answer holds its own rows only.
 *
 * ## Outcomes
 * completed → `InferResponse` with `queue_ms` (arrival → first operator group launched, 0 if
 * none), `compute_ms` (sum of the measured latencies of the groups it ran in), `operator_groups`,
 * and `executed_batch_size` (samples of the batch it ran in: its own batch when it ran alone,
 * the fused batch's total when it was fused with other requests, `QueryRecord.runBatch`).
 * Runtime rejections → `ServeError`: `qos_violation`, `overloaded` (queue full), `device_failure`,
 * `bad_request` (the device refused the inputs; counted `device_refused` in the metrics);
 * a completion after the request's QoS target is a success counted late (`metQos`); `overloaded` from a closing runtime and any
 * request during start-up or shutdown → `not_ready`; a client that disconnected → its query is
 * withdrawn (`ServingRuntime.cancel`) and the call rejects `bad_request` ("cancelled"; nobody
 * reads it); anything unexpected → `internal` with a generic message, the detail in the log.
 */
import { performance } from 'node:perf_hooks';
import { BadRequestError, describeError } from '../errors.ts';
import type { Logger } from '../log.ts';
import { metQos, type GroupRecord } from '../runtime/records.ts';
import type { RecordFeed } from '../runtime/feed.ts';
import { ServingRuntime } from '../runtime/runtime.ts';
import type { RefinementStatus } from '../schedule/controller.ts';
import type { FallbackStatus } from '../schedule/fallback.ts';
import type { HostTensor, TensorMap } from '../tensor.ts';
import { ModelStates, type PrivatePath } from './model-states.ts';
import { configDataType, MODEL_VERSION, pickVersion, prepareServedModel, versionsOf, type Served, type ServedModel } from './served-model.ts';
import { validateRequest } from './validate.ts';
import { ModelLifecycle } from './model-control.ts';
import type { BackendEngine, ModelControl } from './engine.ts';
import { CancelledError, DeviceRefusedError, RejectedError, rejectionError } from './rejections.ts';
import { classify } from './classification.ts';
import { isAborted, within } from './waits.ts';
import { ServeError, type AdmissionTicket, type ModelState, type RepositoryIndexEntry, type InferenceBackend, type InferRequest, type InferResponse, type ModelConfig, type ModelMetadata, type ModelStatistics, type ServerMetadata, type V2Datatype } from './inference.ts';
import type { RequestOutcome, ServeMetrics } from './metrics.ts';
import { ModelStatsRecorder, type SuccessSample } from './stats.ts';
import { AdmissionGate } from './admission.ts';
import { admitOnArrival, feedShed, shedOnArrival, type ShedSinks } from './shed.ts';
import { v2Datatype } from './tensors.ts';

export { configDataType, MODEL_VERSION, type ServedModel };
export type { BackendEngine, ModelControl };

export interface RuntimeBackendOptions {
  readonly models: readonly ServedModel[];
  /** `ModelMetadata.platform`: `onnxruntime_onnx` (ort) or `abacus_sim` (simulated device). */
  readonly platform: string;
  readonly logger?: Logger;
  readonly metrics?: ServeMetrics;
  /** `ServerMetadata.name` / `.version` [abacus, 0.0.0]. */
  readonly serverName?: string;
  readonly serverVersion?: string;
  /**
   * Server folders that must not reach clients in a model's state reason (the model cache): each
   * `path` is shown as its `label` (`<model cache>`), any other absolute path by its last segment
   * (`redactPaths`); the log keeps the full error.
   */
  readonly privatePaths?: readonly PrivatePath[];
  /** Server readiness rule (`ModelStatesOptions.strictReadiness`, docs/health.md "Health and readiness") [true]. */
  readonly strictReadiness?: boolean;
  /**
   * Model control on (Triton's explicit mode, `abacus serve --model-control explicit`): the
   * repository extension's load and unload work. Absent: they answer `forbidden` (the index stays).
   */
  readonly modelControl?: ModelControl;
  /** Where every group and query record goes as it ends (the live dashboard observes it); absent: nowhere. */
  readonly feed?: RecordFeed;
  /**
   * Shed requests that cannot finish within their QoS target before they are decoded and again
   * before they are queued (`admission.ts`) [true]. False for policies that never drop a late
   * query (`drop: false`, overlap-all): only `maxQueueLength` bounds their queues.
   */
  readonly shedHopeless?: boolean;
  /**
   * Whether the policy fuses queries into dynamic batches (`FUSING_POLICIES`) [true]. False: a
   * model's `batching` is dropped when it is added, so its configuration reports no
   * `dynamic_batching` and a `max_batch_size` of its request batch sizes — what really runs.
   */
  readonly policyFuses?: boolean;
}

/** Per-query timing gathered from the runtime's group records. */
interface Timing {
  firstLaunchMs: number | undefined;
  computeMs: number;
  groups: number;
  /** Device id of the fused batch it last ran in; undefined while it ran alone. */
  fusedId?: string;
}

/** Members of one fused batch still to settle, and whether its execution was counted. */
interface FusedExecution {
  left: number;
  counted: boolean;
}

/**
 * Extensions this server implements, as named in `ServerMetadata.extensions` (Triton's names:
 * https://github.com/triton-inference-server/server/blob/main/docs/protocol/README.md).
 */
export const SERVER_EXTENSIONS: readonly string[] = ['binary_tensor_data', 'classification', 'model_configuration', 'model_repository', 'statistics'];

export class RuntimeBackend implements InferenceBackend {
  private readonly models = new Map<string, Served>();
  private readonly platform: string;
  private readonly logger: Logger | undefined;
  private readonly metrics: ServeMetrics | undefined;
  private readonly server: ServerMetadata;
  private runtime: ServingRuntime | undefined;
  private engine: BackendEngine | undefined;
  private ready = false;
  private closing = false;
  private closed = false;
  private shutdownDone: Promise<void> | undefined;
  private nextQuery = 0;
  private readonly timings = new Map<string, Timing>();
  private readonly fused = new Map<string, FusedExecution>();
  private readonly stats: ModelStatsRecorder;
  /** State and reason of every known model, executor health, readiness rule (`model-states.ts`). */
  private readonly states: ModelStates;
  /** Loads, warm-ups and unloads (`model-control.ts`). */
  private readonly lifecycle: ModelLifecycle;
  private readonly modelControl: ModelControl | undefined;
  private readonly feed: RecordFeed | undefined;
  /** The admission gate and where shed requests are counted (`shed.ts`); undefined with `shedHopeless: false`. */
  private readonly shedding: ShedSinks | undefined;
  private readonly policyFuses: boolean;

  /** @throws RangeError for no models, a name listed twice, or bad QoS / batch settings. */
  constructor(options: RuntimeBackendOptions) {
    if (options.models.length === 0) throw new RangeError('RuntimeBackend: models must not be empty');
    this.platform = options.platform;
    this.logger = options.logger;
    this.metrics = options.metrics;
    this.modelControl = options.modelControl;
    this.policyFuses = options.policyFuses ?? true;
    this.states = new ModelStates({ ...(options.logger === undefined ? {} : { logger: options.logger }), privatePaths: options.privatePaths ?? [], strictReadiness: options.strictReadiness ?? true, onRestart: (m) => this.metrics?.executorRestart(m) });
    this.feed = options.feed;
    this.server = { name: options.serverName ?? 'abacus', version: options.serverVersion ?? '0.0.0', extensions: SERVER_EXTENSIONS };
    for (const m of options.models) {
      if (this.models.has(m.name)) throw new RangeError(`RuntimeBackend: model '${m.name}' is listed twice`);
      this.models.set(m.name, this.prepare(m, true));
      this.states.set(m.name, 'LOADING', 'the server is starting');
    }
    this.stats = new ModelStatsRecorder(this.modelNames, MODEL_VERSION);
    this.shedding = options.shedHopeless === false ? undefined : { gate: new AdmissionGate({ pendingQueries: () => this.pendingQueries() }), metrics: this.metrics, stats: this.stats, feed: this.feed, logger: this.logger, nextId: () => String(this.nextQuery++) };
    this.lifecycle = new ModelLifecycle({
      models: this.models,
      states: this.states,
      stats: this.stats,
      logger: this.logger,
      metrics: this.metrics,
      modelControl: this.modelControl,
      prepare: (m, configured) => this.prepare(m, configured),
      engine: () => this.engine,
      runtime: () => this.runtime,
      ready: () => this.ready,
      closing: () => this.closing,
    });
    this.metrics?.bind({ queueDepth: (model) => this.runtime?.queueLength(model) ?? 0, ready: () => this.isReady(), modelStates: () => this.states.states(), refinement: () => this.engine?.controller.refinement, fallback: () => this.engine?.controller.fallback, residentBytes: () => this.engine?.device.residentBytes?.(), admissionBudget: (model) => this.shedding?.gate.budget(model) });
  }

  private prepare(m: ServedModel, configured: boolean): Served {
    if (!this.policyFuses && m.batching !== undefined) {
      const { batching: _unused, ...alone } = m;
      return prepareServedModel(alone, configured, this.platform);
    }
    return prepareServedModel(m, configured, this.platform);
  }

  /** Known model names (configured, then loaded at runtime), in that order, whatever their state. */
  get modelNames(): string[] {
    return [...this.models.keys()];
  }

  /** State of a known model (undefined for an unknown name). */
  modelState(name: string): { state: ModelState; reason: string } | undefined {
    const s = this.states.get(name);
    return s === undefined ? undefined : { state: s.state, reason: s.reason };
  }

  /** Queries waiting in `model`'s queue now (0 before `start` and for an unknown model). */
  queueLength(model: string): number {
    return this.models.has(model) ? (this.runtime?.queueLength(model) ?? 0) : 0;
  }

  /** Queries of every model waiting or running now. */
  private pendingQueries(): number {
    let n = 0;
    if (this.runtime !== undefined) for (const name of this.models.keys()) n += this.runtime.queueLength(name);
    return n;
  }

  admit(modelName: string, arrival?: AdmissionTicket, unread?: 'body' | 'message' | 'tensors'): AdmissionTicket | undefined {
    const nowMs = this.engine?.clock.now();
    const m = typeof modelName === 'string' ? this.pick(modelName) : undefined;
    if (nowMs === undefined || m === undefined) return undefined;
    if (this.shedding === undefined) return arrival ?? { receivedMs: nowMs, settle: () => undefined };
    // not ready: admitted, and `infer` answers it
    return admitOnArrival(this.shedding, m, nowMs, this.ready && !this.closing && this.states.get(m.name)?.state === 'READY', arrival, unread);
  }

  shedUnread(): AdmissionTicket | undefined {
    const nowMs = this.engine?.clock.now();
    if (nowMs === undefined || this.shedding === undefined || !this.ready || this.closing) return undefined;
    const why = this.shedding.gate.shedReasonForAll([...this.models.values()].filter((m) => this.states.get(m.name)?.state === 'READY'), nowMs);
    if (why !== undefined) throw shedOnArrival(this.shedding, undefined, nowMs, why, 'message');
    // its arrival, not yet work ahead (a call that sends no message holds no place): `admit` counts it once its first bytes name the model
    return { receivedMs: nowMs, settle: () => undefined };
  }

  /** The controller's online predictor refinement, while it refines (abacus with `refine`); else undefined. */
  get refinement(): RefinementStatus | undefined {
    return this.engine?.controller.refinement;
  }

  /** abacus's calibration fallback, when the controller has one (policy parameter `fallback`); else undefined. */
  get fallback(): FallbackStatus | undefined {
    return this.engine?.controller.fallback;
  }

  /** The runtime's clock now, ms (the time base of every record); undefined before `start`. */
  clockNowMs(): number | undefined {
    return this.engine?.clock.now();
  }

  /** Served models with their QoS targets, ms, in configuration order. */
  servedModels(): { readonly name: string; readonly qosTargetMs: number }[] {
    return [...this.models.values()].map((m) => ({ name: m.name, qosTargetMs: m.qosTargetMs }));
  }

  serverMetadata(): ServerMetadata {
    return this.server;
  }

  isLive(): boolean {
    return !this.closed;
  }

  /** Start-up finished, not shutting down, and the readiness rule of `ModelStates.isReady` holds. */
  isReady(): boolean {
    return this.ready && !this.closing && this.states.isReady();
  }

  /** True only while the model is READY (and the server is not shutting down). */
  modelReady(name: string, version?: string): boolean {
    const m = this.lookup(name, version);
    return this.ready && !this.closing && this.states.isModelReady(m.name);
  }

  /** The v2 metadata (`versions`: every version served under the name) plus the model's `state` and `reason`. */
  modelMetadata(name: string, version?: string): ModelMetadata {
    const m = this.lookup(name, version);
    const s = this.states.get(m.name)!;
    return { ...m.metadata, versions: this.versionsOf(m.modelName).map((v) => v.version), state: s.state, reason: s.reason };
  }

  /** The names clients use with a READY version, each once. */
  modelList(): string[] {
    return [...new Set([...this.models.values()].filter((m) => this.states.isModelReady(m.name)).map((m) => m.modelName))];
  }

  /** One entry per version of every model. */
  repositoryIndex(readyOnly = false): RepositoryIndexEntry[] {
    const out: RepositoryIndexEntry[] = [];
    for (const m of this.models.values()) {
      const s = this.states.get(m.name)!;
      if (readyOnly && s.state !== 'READY') continue;
      out.push({ name: m.modelName, version: m.version, state: s.state, reason: s.reason });
    }
    return out;
  }

  /** Every version of a model served in several acts on all of them (docs/serving.md "Model versions"). */
  async loadModel(name: string, parameters: Readonly<Record<string, unknown>> | undefined): Promise<void> {
    await this.lifecycle.load(name, parameters, this.keysOf(name));
  }

  async unloadModel(name: string, parameters: Readonly<Record<string, unknown>> | undefined): Promise<void> {
    await this.lifecycle.unload(name, parameters, this.keysOf(name));
  }

  private versionsOf(name: string): Served[] {
    return versionsOf(this.models.values(), name);
  }

  /** The runtime's service names of the versions of `name` (empty for an unknown name). */
  private keysOf(name: string): string[] {
    return typeof name === 'string' ? this.versionsOf(name).map((m) => m.name) : [];
  }

  private pick(name: string): Served | undefined {
    return pickVersion(this.versionsOf(name), (key) => this.states.isModelReady(key));
  }

  modelConfig(name: string, version?: string): ModelConfig {
    return this.lookup(name, version).config;
  }

  /** See `InferenceBackend.modelStatistics`; which fields are measured: `stats.ts`. */
  modelStatistics(name?: string, version?: string): ModelStatistics[] {
    const identify = (key: string): { name: string; version: string } => {
      const m = this.models.get(key);
      return { name: m?.modelName ?? key, version: m?.version ?? MODEL_VERSION };
    };
    const versioned = version !== undefined && version !== '';
    if (name === undefined || name === '') {
      const keys = [...this.models.values()].filter((m) => !versioned || m.version === version).map((m) => m.name);
      if (versioned && keys.length === 0) throw new ServeError('model_not_found', `no model has version '${version}'`);
      return this.stats.snapshot(keys, identify);
    }
    // a name without a version: every version of it (Triton's statistics)
    return this.stats.snapshot(versioned ? [this.lookup(name, version).name] : this.keysOf(this.lookup(name).modelName), identify);
  }

  /**
   * Create the runtime on `engine` and warm up: one query per model and batch size (at the
   * model's default sequence length) through the runtime, so the controller, predictor and
   * device have all run once. Then ready.
   * @throws Error when called twice, after shutdown began, or when a warm-up query fails
   *   (the message names the model and the reason; the backend stays not ready); RangeError
   *   (from `ServingRuntime`) for batching limits a model cannot take.
   */
  async start(engine: BackendEngine): Promise<void> {
    if (this.runtime !== undefined || this.closing) throw new Error('RuntimeBackend.start: already started or shut down');
    this.engine = engine;
    engine.device.watchHealth?.((event) => this.states.onHealth(event));
    for (const m of this.models.values()) {
      // checked before anything loads: settings the runtime refuses are a config error, not a model failure
      new ServingRuntime({ clock: engine.clock, device: engine.device, controller: engine.controller, services: [{ name: m.name, spec: m.spec, qosTargetMs: m.qosTargetMs, maxQueueLength: m.maxQueueLength, ...(m.batching === undefined ? {} : { batching: m.batching }) }] });
    }
    const runtime = new ServingRuntime({
      clock: engine.clock,
      device: engine.device,
      controller: engine.controller,
      services: [],
      allowNoServices: true,
      keepRecords: false,
      onGroupEnd: (record) => this.groupEnded(record),
      ...(this.feed === undefined ? {} : { onQueryEnd: this.feed.query.bind(this.feed) }),
    });
    this.runtime = runtime;
    const t0 = performance.now();
    const failed: string[] = [];
    for (const m of this.models.values()) {
      const reason = await this.lifecycle.bringUp(engine, m);
      if (this.closing) return; // shut down while warming up: not an error
      if (reason !== undefined) failed.push(`${m.name}: ${reason}`);
    }
    // with model control on, the server stays up (not ready) so that models can be loaded later
    if (failed.length === this.models.size && this.modelControl === undefined) throw new Error(`no model could be loaded: ${failed.join('; ')}`);
    this.ready = true;
    this.logger?.info({ models: this.modelList(), unavailable: failed, warmUpMs: Math.round(performance.now() - t0) }, 'backend ready');
  }

  /**
   * Stop serving within `graceMs`: not ready at once (new requests: `not_ready`); queued
   * requests keep running for up to half the grace period; then the ones still waiting are
   * answered (`not_ready`), running operator groups finish, and the engine is closed (a group
   * still running then fails its queries with `device_failure`). Every request gets its answer.
   * Idempotent: a second call returns the first one's promise.
   */
  shutdown(graceMs: number): Promise<void> {
    this.shutdownDone ??= this.doShutdown(graceMs);
    return this.shutdownDone;
  }

  private async doShutdown(graceMs: number): Promise<void> {
    this.closing = true;
    this.states.release();
    const t0 = performance.now();
    const left = (): number => graceMs - (performance.now() - t0);
    const runtime = this.runtime;
    if (runtime !== undefined) {
      const pending = runtime.counters.pending;
      const drainedInTime = await within(runtime.drained(), graceMs / 2);
      runtime.close();
      if (!drainedInTime) await within(runtime.drained(), left() - graceMs * 0.1);
      this.logger?.info({ pendingAtShutdown: pending, drainedInTime, stillPending: runtime.counters.pending }, 'backend drained');
    }
    try {
      if (this.engine !== undefined) await (this.engine.close !== undefined ? this.engine.close() : this.engine.device.close());
    } catch (err) {
      this.logger?.error({ err: describeError(err) }, 'closing the device failed');
    }
    if (runtime !== undefined) await within(runtime.drained(), Math.max(left(), 100));
    this.closed = true;
  }

  async infer(request: InferRequest): Promise<InferResponse> {
    const t0 = performance.now();
    // the time since arrival the front end spent before calling infer (reading, decoding) counts
    const receivedMs = request.admission?.receivedMs;
    const beforeMs = receivedMs === undefined ? 0 : Math.max(0, (this.engine?.clock.now() ?? receivedMs) - receivedMs);
    // metrics and statistics count the version the request goes to (the runtime's service name)
    const model = this.tryLookup(request.modelName, request.modelVersion);
    const name = model?.name ?? (typeof request.modelName === 'string' ? request.modelName : '');
    let queueMs: number | undefined;
    try {
      const { response, queueMs: q, sample, late } = await this.run(request, model);
      queueMs = q;
      const latencyMs = performance.now() - t0 + beforeMs;
      this.metrics?.request(name, 'success', { latencyMs, late, ...(queueMs === undefined ? {} : { queueMs }) });
      this.stats.success(name, { ...sample, latencyMs });
      return response;
    } catch (err) {
      const e = this.toServeError(err, request);
      const outcome: RequestOutcome = err instanceof CancelledError ? 'cancelled' : err instanceof DeviceRefusedError ? 'device_refused' : e.code === 'forbidden' ? 'bad_request' : e.code;
      const rejectedQueueMs = err instanceof RejectedError ? err.queueMs : undefined;
      this.metrics?.request(name, outcome, rejectedQueueMs !== undefined ? { queueMs: rejectedQueueMs } : {});
      if (e.code !== 'model_not_found') this.stats.fail(name, performance.now() - t0 + beforeMs, rejectedQueueMs);
      throw e;
    } finally {
      request.admission?.settle();
    }
  }

  private toServeError(err: unknown, request: InferRequest): ServeError {
    if (err instanceof ServeError) return err;
    if (err instanceof BadRequestError) return new ServeError('bad_request', `model '${request.modelName}': ${err.message}`, { cause: err });
    this.logger?.error({ reqId: request.requestId, err: err instanceof Error ? (err.stack ?? err.message) : String(err) }, 'internal error in infer');
    return new ServeError('internal', `internal error (request ${request.requestId}); the server log has the details`, { cause: err });
  }

  /**
   * The served version a request for model `name`, version `version` goes to: that version, or
   * without one the version `pick` chooses.
   * @throws ServeError model_not_found for an unknown model or version.
   */
  private lookup(name: string, version?: string): Served {
    const all = typeof name === 'string' ? this.versionsOf(name) : [];
    if (all.length === 0) throw new ServeError('model_not_found', `model '${String(name)}' is not served here (served: ${[...new Set([...this.models.values()].map((m) => m.modelName))].join(', ')})`);
    if (version === undefined || version === '') return this.pick(name)!;
    const m = all.find((v) => v.version === version);
    if (m === undefined) throw new ServeError('model_not_found', `model '${name}' has no version '${version}' (served: ${all.map((v) => v.version).join(', ')})`);
    return m;
  }

  private tryLookup(name: string, version?: string): Served | undefined {
    try {
      return this.lookup(name, version);
    } catch {
      return undefined;
    }
  }

  /** Validate, submit and wait; `late`: completed after its QoS target (`metQos`, runtime clock); `sample`: what the statistics extension counts. */
  private async run(request: InferRequest, resolved: Served | undefined): Promise<{ response: InferResponse; queueMs: number | undefined; sample: Omit<SuccessSample, 'latencyMs'>; late: boolean }> {
    // `resolved`: the version `infer` looked up; undefined: none (the lookup throws the model_not_found)
    const model = resolved ?? this.lookup(request.modelName, request.modelVersion);
    const runtime = this.runtime;
    if (runtime === undefined || !this.ready || this.closing) {
      throw new ServeError('not_ready', `not_ready: model '${model.name}': the server is ${this.closing ? 'shutting down' : 'warming up'}; retry ${this.closing ? 'on another replica' : 'shortly'}`);
    }
    const state = this.states.get(model.name)!;
    if (state.state !== 'READY') {
      if (state.unloaded) throw new ServeError('model_not_found', `model '${model.modelName}' is unloaded (load it through the repository extension: HTTP POST /v2/repository/models/${model.modelName}/load, gRPC RepositoryModelLoad)`);
      throw new ServeError('not_ready', `not_ready: model '${model.name}' is ${state.state}: ${state.reason}`);
    }
    const plan = validateRequest(model, request);
    if (request.signal?.aborted === true) throw new CancelledError(`model '${model.name}': the client disconnected before the request was queued`);
    const nowMs = this.clockNowMs() ?? 0;
    const receivedMs = request.admission?.receivedMs;
    const arrivalMs = receivedMs !== undefined && receivedMs <= nowMs ? receivedMs : nowMs;
    request.admission?.settle(); // queued (or shed) now: the runtime's queue counts it from here
    this.metrics?.admissionWait(model.name, nowMs - arrivalMs);
    const why = this.shedding?.gate.shedReason(model.name, plan.qosMs ?? model.qosTargetMs, nowMs - arrivalMs, nowMs);
    if (why !== undefined) {
      if (this.shedding !== undefined) feedShed(this.shedding, model, arrivalMs, nowMs, plan.qosMs ?? model.qosTargetMs, plan.batch, why);
      throw new RejectedError('overloaded', `overloaded: model '${model.name}': ${why}; shed before it was queued (retry later or on another replica)`, undefined);
    }
    let id = `r${this.nextQuery++}`;
    const timing: Timing = { firstLaunchMs: undefined, computeMs: 0, groups: 0 };
    this.timings.set(id, timing);
    const onAbort = (): void => {
      const what = runtime.cancel(id, 'the client disconnected');
      this.logger?.debug({ reqId: request.requestId, queryId: id, cancel: what }, 'client disconnected');
    };
    request.signal?.addEventListener('abort', onAbort, { once: true });
    const submit = (qosTargetMs: number | undefined, atMs: number | undefined): ReturnType<ServingRuntime['submit']> =>
      runtime.submit({ service: model.name, batch: plan.batch, seqLen: plan.seqLen, inputs: plan.inputs, id, ...(atMs === undefined ? {} : { arrivalMs: atMs }), ...(qosTargetMs === undefined ? {} : { qosTargetMs }) }).catch((err: unknown) => {
        throw err instanceof RangeError ? new ServeError('bad_request', `model '${model.name}': ${err.message}`, { cause: err }) : err;
      });
    try {
      const crashes = this.states.crashes(model.name);
      let outcome = await submit(plan.qosMs, arrivalMs);
      // caught by an executor crash: once more when it is back, with what is left of its QoS target (docs/health.md "Executor restarts")
      const leftMs = (): number => (plan.qosMs ?? model.qosTargetMs) - ((this.engine?.clock.now() ?? Infinity) - arrivalMs);
      const crashed = !outcome.ok && outcome.reason === 'device_failure' && this.states.crashes(model.name) !== crashes;
      if (crashed && (await this.states.whenUp(model.name, leftMs())) && leftMs() > 0 && !isAborted(request.signal) && !this.closing) {
        this.logger?.info({ model: model.name, queryId: id, leftMs: leftMs(), err: outcome.ok ? '' : outcome.message }, 'query failed by an executor crash: retrying it once');
        this.timings.delete(id);
        this.timings.set((id = `r${this.nextQuery++}`), timing);
        outcome = await submit(leftMs(), this.engine?.clock.now());
      }
      const queueMs = timing.firstLaunchMs === undefined ? undefined : timing.firstLaunchMs - arrivalMs;
      if (!outcome.ok && outcome.reason === 'qos_violation') this.shedding?.gate.outcome(model.name, true);
      if (!outcome.ok) throw rejectionError(model.name, outcome.reason, outcome.message, queueMs, plan.inputs, this.closing, (t) => this.states.redact(t));
      if (outcome.record.endMs !== undefined && timing.firstLaunchMs !== undefined) this.shedding?.gate.completed(model.name, outcome.record.endMs, outcome.record.endMs - timing.firstLaunchMs, !metQos(outcome.record));
      const outputs: TensorMap = {};
      const outputDatatypes: Record<string, V2Datatype> = {};
      for (const name of plan.outputs) {
        const t: HostTensor | undefined = outcome.outputs[name];
        if (t === undefined) throw new Error(`model '${model.name}': the device returned no output '${name}' (got ${Object.keys(outcome.outputs).join(', ')})`);
        const classes = plan.classification.get(name);
        const out = classes === undefined ? t : classify(t, classes, model.config.max_batch_size > 0, model.labels, `model '${model.name}': output '${name}'`);
        outputs[name] = out;
        outputDatatypes[name] = v2Datatype(out.dataType);
      }
      const runBatch = outcome.record.runBatch ?? plan.batch;
      const response: InferResponse = {
        modelName: model.modelName,
        modelVersion: model.version,
        ...(request.id === undefined ? {} : { id: request.id }),
        outputs,
        outputDatatypes,
        parameters: { queue_ms: round3(queueMs ?? 0), compute_ms: round3(timing.computeMs), operator_groups: timing.groups, executed_batch_size: runBatch },
      };
      // a fused batch is one execution: the first of its members to get here counts it
      const fused = timing.fusedId === undefined ? undefined : this.fused.get(timing.fusedId);
      const first = fused === undefined || !fused.counted;
      if (fused !== undefined) fused.counted = true;
      const sample = { batch: plan.batch, queueMs, computeMs: timing.computeMs, ...(first ? { execution: { batch: runBatch, computeMs: timing.computeMs } } : {}) };
      return { response, queueMs, sample, late: !metQos(outcome.record) };
    } finally {
      request.signal?.removeEventListener('abort', onAbort);
      this.timings.delete(id);
      this.settleFused(timing.fusedId);
    }
  }

  private groupEnded(record: GroupRecord): void {
    const endMs = this.engine?.clock.now() ?? record.launchMs;
    this.metrics?.group(record, endMs);
    this.feed?.group(record, endMs);
    this.shedding?.gate.groupEnded(record.launchMs, endMs);
    for (const s of record.segments) {
      // a fused batch runs under its own id: its members are the requests
      for (const id of s.members ?? [s.queryId]) {
        const t = this.timings.get(id);
        if (t === undefined) continue;
        t.firstLaunchMs ??= record.launchMs;
        t.groups++;
        if (s.members !== undefined && t.fusedId !== s.queryId) {
          this.settleFused(t.fusedId);
          t.fusedId = s.queryId;
          const f = this.fused.get(s.queryId);
          if (f === undefined) this.fused.set(s.queryId, { left: 1, counted: false });
          else f.left++;
        }
        if (Number.isFinite(record.measuredMs)) t.computeMs += record.measuredMs;
      }
    }
  }

  /** One member of fused batch `fusedId` settled (or moved on): forget the batch after its last member. */
  private settleFused(fusedId: string | undefined): void {
    if (fusedId === undefined) return;
    const f = this.fused.get(fusedId);
    if (f === undefined) return;
    if (--f.left <= 0) this.fused.delete(fusedId);
  }
}

function round3(x: number): number {
  return Math.round(x * 1000) / 1000;
}
