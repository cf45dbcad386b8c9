/**
 * Prometheus metrics of `abacus serve` (docs/serving.md "Metrics"), served as text at `GET /metrics`.
 * One prom-client `Registry` per `ServeMetrics` (no global registry: STYLE.md §8), so every
 * server and every test has its own. Names follow the Prometheus conventions: base units
 * (seconds) in the name, `_total` for counters.
 *
 * | metric | type | labels | what |
 * |---|---|---|---|
 * | `abacus_requests_total` | counter | model, outcome | inference requests answered, by outcome (`REQUEST_OUTCOMES`): `bad_request` for requests the front end refused, `device_refused` for valid-looking requests the device refused (answered 400 `bad_request` too, e.g. a token id beyond the vocabulary) |
 * | `abacus_late_completions_total` | counter | model | successful requests that completed after their QoS target (arrival → outputs on the runtime's clock > the request's target); QoS violations = this + `abacus_requests_total{outcome="qos_violation"}` (the dropped ones) |
 * | `abacus_request_duration_seconds` | histogram | model | end-to-end latency of successful requests (arrival at the front end → outputs ready; the time before admission counts) |
 * | `abacus_request_queue_seconds` | histogram | model | arrival → first operator group launched, for requests that ran |
 * | `abacus_admission_wait_seconds` | histogram | model | arrival (the request's first bytes on the HTTP or gRPC front end) → queued in the runtime: the time spent reading and decoding it, for requests that reached the queue; it counts in their latency and QoS |
 * | `abacus_queue_depth` | gauge | model | queries waiting or running in the service's queue, read at scrape time |
 * | `abacus_violation_ratio` | gauge | model | the autoscaling signal (docs/deploy.md "Autoscaling"): over the last `VIOLATION_WINDOW_S` seconds, (late completions + `qos_violation` + `overloaded`) ÷ (successes + `qos_violation` + `overloaded`); 0 with no such request in the window. Other outcomes (bad requests, not ready, cancelled, …) say nothing about capacity and are left out |
 * | `abacus_operator_group_size` | histogram | | segments (queries) per launched operator group |
 * | `abacus_executed_batch_size` | histogram | model | samples per launched segment of the model: a request alone counts its own batch, a dynamic batch the total of the requests fused into it (`_sum / _count` is the mean executed batch) |
 * | `abacus_predictor_absolute_error_seconds` | histogram | | \|predicted − measured\| group latency, groups with a prediction |
 * | `abacus_predictor_rolling_mape` | gauge | predictor | with online refinement on (`abacus` policy parameter `refine`): MAPE (a fraction) over the last 500 observed groups of the served (`refined`) and of the offline (`offline`) predictions, read at scrape time; no series otherwise |
 * | `abacus_predictor_guard_active` | gauge | guard | with online refinement on: 1 while the predictor is out of calibration and the guard acts, else 0; `guard="inflate_quantile"`: it inflates the predictions of overlapped groups by a quantile of the recent measured ÷ predicted ratios (`predict/refine.ts` "Guard"); no series otherwise |
 * | `abacus_fallback_active` | gauge | policy | with abacus's calibration fallback on (policy parameter `fallback`; on by default on `ort`): 1 while it serves one query at a time because measured groups overran their predictions (or, with `interference`, while other processes crowd the cores), else 0 (`schedule/fallback.ts`); no series otherwise |
 * | `abacus_fallback_entries_total` | counter | policy | with the fallback on: times it switched into the fallback since the start |
 * | `abacus_predictor_guard_factor` | gauge | guard | with online refinement on: the factor (≥ 1) the guard multiplies the prediction of an overlapped group by, 1 while calibrated; no series otherwise |
 * | `abacus_device_busy_seconds_total` | counter | | time the device had at least one group running |
 * | `abacus_ready` | gauge | | 1 while `/v2/health/ready` is 200 (the readiness rule of docs/health.md "Health and readiness") |
 * | `abacus_executor_restarts_total` | counter | model | automatic restarts of the model's executor after it died (crash, OOM kill, segment timeout); a failed restart tried again after its backoff is not counted again |
 * | `abacus_model_state` | gauge | model, state | 1 for the model's current state (`LOADING`, `READY`, `UNLOADING`, `UNAVAILABLE`), 0 for the others, read at scrape time |
 * | `abacus_executor_rss_bytes` | gauge | model | resident memory of the process executing the model (ort: its executor child, as it reported after its last segment), read at scrape time through the runtime's device (`Device.residentBytes`); no series for a device without such processes (sim) or while the executor restarts |
 * | `process_*`, `nodejs_*` | | | prom-client's default process metrics (RSS, event-loop lag, …) |
 *
 * `model` is a served model name; requests naming no served model count under `model="unknown"`
 * (so a client cannot grow the label set).
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { RefinementStatus } from '../schedule/controller.ts';
import type { FallbackStatus } from '../schedule/fallback.ts';

/** The `guard` label of the guard gauges: what the guard of `predict/refine.ts` does while out of calibration. */
export const GUARD_MODE = 'inflate_quantile';

/**
 * Outcomes counted in `abacus_requests_total`: the `ServeErrorCode`s, plus `success`,
 * `cancelled` (the client went away; its query was withdrawn) and `device_refused` (answered
 * `bad_request`, but the device refused the inputs, not the front end's validation).
 */
export const REQUEST_OUTCOMES = ['success', 'bad_request', 'device_refused', 'model_not_found', 'qos_violation', 'overloaded', 'not_ready', 'device_failure', 'cancelled', 'internal'] as const;
export type RequestOutcome = (typeof REQUEST_OUTCOMES)[number];

/** The values of `abacus_model_state`'s `state` label (Triton's model states). */
const MODEL_STATE_NAMES = ['LOADING', 'READY', 'UNLOADING', 'UNAVAILABLE'] as const;

/** Label for requests naming no served model. */
export const UNKNOWN_MODEL = 'unknown';

const LATENCY_BUCKETS_S = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
/** Multiples of each QoS target added as latency bucket edges (`latencyBucketsS`). */
const QOS_BUCKET_FACTORS = [0.5, 0.8, 0.9, 1, 1.1, 1.25, 1.5, 2];

/**
 * Upper bounds (s) of the latency histograms: the fixed decades above, plus edges around every
 * served QoS target (× 0.5 … 2, the target itself included), sorted and without repeats. An
 * edge exactly at a target makes `le="<target>"` count the requests that met it, and the edges
 * around it show how far the rest missed: Prometheus' advice for a latency objective
 * ("Histograms and summaries", prometheus.io: configure a bucket with the target duration as
 * its upper bound). Edges are rounded to the microsecond.
 */
export function latencyBucketsS(qosTargetsMs: readonly number[]): number[] {
  const edges = new Set(LATENCY_BUCKETS_S);
  for (const q of qosTargetsMs) {
    if (!(Number.isFinite(q) && q > 0)) continue;
    for (const f of QOS_BUCKET_FACTORS) edges.add(Math.round(q * f * 1000) / 1e6);
  }
  return [...edges].sort((a, b) => a - b);
}
/** Window of `abacus_violation_ratio`, s: long enough to smooth bursts, short enough for an autoscaler (KEDA polls every 30 s by default). */
export const VIOLATION_WINDOW_S = 60;

/**
 * Counts in a sliding window of `windowS` one-second slots (per key): `add` at a time, `sums`
 * of the slots younger than `windowS` at a later time. Times in ms on any monotonic clock.
 */
export class SlidingCounts {
  private readonly slots = new Map<string, { second: number; hits: number; of: number }[]>();
  constructor(private readonly windowS: number) {
    if (!(Number.isInteger(windowS) && windowS >= 1)) throw new RangeError(`windowS must be an integer ≥ 1, got ${windowS}`);
  }

  /** Count one event of `key` at `nowMs`: `of` += 1, and `hits` += 1 when `hit`. */
  add(key: string, nowMs: number, hit: boolean): void {
    const second = Math.floor(nowMs / 1000);
    let ring = this.slots.get(key);
    if (ring === undefined) this.slots.set(key, (ring = []));
    let slot = ring.at(-1);
    if (slot === undefined || slot.second !== second) ring.push((slot = { second, hits: 0, of: 0 }));
    slot.of += 1;
    if (hit) slot.hits += 1;
    this.expire(ring, second);
  }

  /** `{ hits, of }` of `key` over the window ending at `nowMs` (zeros when none). */
  sums(key: string, nowMs: number): { hits: number; of: number } {
    const ring = this.slots.get(key);
    if (ring === undefined) return { hits: 0, of: 0 };
    this.expire(ring, Math.floor(nowMs / 1000));
    let hits = 0;
    let of = 0;
    for (const s of ring) {
      hits += s.hits;
      of += s.of;
    }
    return { hits, of };
  }

  private expire(ring: { second: number }[], second: number): void {
    let drop = 0;
    while (drop < ring.length && ring[drop]!.second <= second - this.windowS) drop++;
    if (drop > 0) ring.splice(0, drop);
  }
}

const ERROR_BUCKETS_S = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1];
const GROUP_SIZE_BUCKETS = [1, 2, 3, 4, 5, 6, 8];
/** Powers of two, 1 … 1024: Triton's and Clockwork's batch sizes are powers of two (the default maxBatchSize is 16). */
const BATCH_SIZE_BUCKETS = Array.from({ length: 11 }, (_, i) => 2 ** i);

export interface ServeMetricsOptions {
  /** Served model names (pre-creates their series at 0). */
  readonly models: readonly string[];
  /** Add prom-client's default process metrics [true]. */
  readonly processMetrics?: boolean;
  /** The services' QoS targets, ms: the latency histograms get bucket edges around each (`latencyBucketsS`). */
  readonly qosTargetsMs?: readonly number[];
  /** Monotonic clock of `abacus_violation_ratio`'s window, ms [performance.now]. */
  readonly nowMs?: () => number;
}

export class ServeMetrics {
  readonly registry: Registry;
  private readonly models: Set<string>;
  private readonly requests: Counter<'model' | 'outcome'>;
  private readonly late: Counter<'model'>;
  private readonly latency: Histogram<'model'>;
  private readonly queue: Histogram<'model'>;
  private readonly admission: Histogram<'model'>;
  private readonly groupSize: Histogram;
  private readonly batchSize: Histogram<'model'>;
  private readonly predictorError: Histogram;
  private readonly busy: Counter;
  private readonly waitingIdle: Counter;
  private readonly groupOverhead: Counter;
  private readonly restarts: Counter<'model'>;
  private readonly paced: Counter<'model'>;
  private modelStatesOf: () => ReadonlyMap<string, string> = () => new Map();
  private queueDepthOf: (model: string) => number = () => 0;
  private readyOf: () => boolean = () => false;
  private refinementOf: () => RefinementStatus | undefined = () => undefined;
  private fallbackOf: () => FallbackStatus | undefined = () => undefined;
  private residentOf: () => ReadonlyMap<string, number> | undefined = () => undefined;
  private budgetOf: (model: string) => number | undefined = () => undefined;
  /** End of the latest group interval counted as busy, ms on the backend's clock. */
  private busyUntilMs = Number.NEGATIVE_INFINITY;
  private readonly violations = new SlidingCounts(VIOLATION_WINDOW_S);
  private readonly nowMs: () => number;

  constructor(options: ServeMetricsOptions) {
    this.registry = new Registry();
    this.models = new Set(options.models);
    this.nowMs = options.nowMs ?? (() => performance.now());
    const registers = [this.registry];
    this.requests = new Counter({ name: 'abacus_requests_total', help: 'Inference requests answered, by model and outcome', labelNames: ['model', 'outcome'], registers });
    this.late = new Counter({ name: 'abacus_late_completions_total', help: 'Successful inference requests that completed after their QoS target; QoS violations = this + abacus_requests_total{outcome="qos_violation"}', labelNames: ['model'], registers });
    const latencyBuckets = latencyBucketsS(options.qosTargetsMs ?? []);
    this.latency = new Histogram({ name: 'abacus_request_duration_seconds', help: 'End-to-end latency of successful inference requests, seconds (bucket edges around each QoS target)', labelNames: ['model'], buckets: latencyBuckets, registers });
    this.queue = new Histogram({ name: 'abacus_request_queue_seconds', help: 'Time from arrival to the first operator group launched, seconds', labelNames: ['model'], buckets: latencyBuckets, registers });
    this.admission = new Histogram({ name: 'abacus_admission_wait_seconds', help: 'Time from the request\'s arrival at the front end to its admission into the queue (reading and decoding), seconds', labelNames: ['model'], buckets: latencyBuckets, registers });
    const depthOf = (m: string): number => this.queueDepthOf(m);
    const modelNames = this.models;
    new Gauge({
      name: 'abacus_queue_depth',
      help: 'Queries waiting or running in the service queue',
      labelNames: ['model'],
      registers,
      collect() {
        for (const model of modelNames) this.set({ model }, depthOf(model));
      },
    });
    const violationRatioOf = (m: string): number => {
      const { hits, of } = this.violations.sums(m, this.nowMs());
      return of === 0 ? 0 : hits / of;
    };
    new Gauge({
      name: 'abacus_violation_ratio',
      help: `Autoscaling signal: (late + qos_violation + overloaded) / (success + qos_violation + overloaded) over the last ${VIOLATION_WINDOW_S} s; 0 when there were none`,
      labelNames: ['model'],
      registers,
      collect() {
        for (const model of modelNames) this.set({ model }, violationRatioOf(model));
      },
    });
    const readyOf = (): boolean => this.readyOf();
    new Gauge({
      name: 'abacus_ready',
      help: '1 while the server is ready (/v2/health/ready is 200; the rule of docs/health.md "Health and readiness")',
      registers,
      collect() {
        this.set(readyOf() ? 1 : 0);
      },
    });
    this.restarts = new Counter({ name: 'abacus_executor_restarts_total', help: "Automatic restarts of the model's executor after it died", labelNames: ['model'], registers });
    this.paced = new Counter({ name: 'abacus_shed_paced_total', help: 'Shed HTTP requests whose 503 was held because the client resent right after a shed on the same connection (docs/overload.md "Clients that resend at once")', labelNames: ['model'], registers });
    const statesOf = (): ReadonlyMap<string, string> => this.modelStatesOf();
    new Gauge({
      name: 'abacus_model_state',
      help: "1 for the model's current state (LOADING, READY, UNLOADING, UNAVAILABLE), 0 for the others",
      labelNames: ['model', 'state'],
      registers,
      collect() {
        this.reset();
        for (const [model, state] of statesOf()) for (const s of MODEL_STATE_NAMES) this.set({ model, state: s }, s === state ? 1 : 0);
      },
    });
    const residentOf = (): ReadonlyMap<string, number> | undefined => this.residentOf();
    const modelLabel = (m: string): string => this.modelLabel(m);
    new Gauge({
      name: 'abacus_executor_rss_bytes',
      help: 'Resident memory of the process executing the model (ort: its executor child, after its last segment), bytes; absent for devices without such processes',
      labelNames: ['model'],
      registers,
      collect() {
        this.reset();
        for (const [model, bytes] of residentOf() ?? []) this.set({ model: modelLabel(model) }, bytes);
      },
    });
    const budgetOf = (m: string): number | undefined => this.budgetOf(m);
    new Gauge({
      name: 'abacus_admission_budget',
      help: 'Share of its QoS target an HTTP request of the model may be expected to take and still be admitted before its body is read, learned from the outcomes of the admitted ones (docs/overload.md "A learned budget, over HTTP"); no series without admission',
      labelNames: ['model'],
      registers,
      collect() {
        this.reset();
        for (const model of modelNames) {
          const b = budgetOf(model);
          if (b !== undefined) this.set({ model }, b);
        }
      },
    });
    const refinementOf = (): RefinementStatus | undefined => this.refinementOf();
    new Gauge({
      name: 'abacus_predictor_rolling_mape',
      help: 'MAPE (fraction) of the refined and of the offline group latency predictions over the last observed groups; present with online refinement',
      labelNames: ['predictor'],
      registers,
      collect() {
        this.reset();
        const r = refinementOf();
        if (r === undefined) return;
        this.set({ predictor: 'refined' }, r.rollingMape);
        this.set({ predictor: 'offline' }, r.rollingBaseMape);
      },
    });
    new Gauge({
      name: 'abacus_predictor_guard_active',
      help: '1 while the online-refined predictor is out of calibration and the guard acts (label guard: what it does), else 0; present with online refinement',
      labelNames: ['guard'],
      registers,
      collect() {
        this.reset();
        const r = refinementOf();
        if (r !== undefined) this.set({ guard: GUARD_MODE }, r.guardActive ? 1 : 0);
      },
    });
    new Gauge({
      name: 'abacus_predictor_guard_factor',
      help: 'Factor (>= 1) the guard multiplies the prediction of an overlapped group by; 1 while calibrated; present with online refinement',
      labelNames: ['guard'],
      registers,
      collect() {
        this.reset();
        const r = refinementOf();
        if (r !== undefined) this.set({ guard: GUARD_MODE }, r.guardFactor);
      },
    });
    const fallbackOf = (): FallbackStatus | undefined => this.fallbackOf();
    new Gauge({
      name: 'abacus_fallback_active',
      help: '1 while abacus serves one query at a time because measured groups overran their predictions (policy parameter fallback) or, with interference, other processes crowd the cores, else 0; present with the fallback',
      labelNames: ['policy'],
      registers,
      collect() {
        this.reset();
        const f = fallbackOf();
        if (f !== undefined) this.set({ policy: 'abacus' }, f.active ? 1 : 0);
      },
    });
    new Counter({
      name: 'abacus_fallback_entries_total',
      help: 'Times abacus switched into its calibration fallback since the start; present with the fallback',
      labelNames: ['policy'],
      registers,
      collect() {
        // the controller counts; read at scrape time (reset + inc sets the counter to its count)
        this.reset();
        const f = fallbackOf();
        if (f !== undefined && f.entries > 0) this.inc({ policy: 'abacus' }, f.entries);
        else if (f !== undefined) this.inc({ policy: 'abacus' }, 0);
      },
    });
    this.groupSize = new Histogram({ name: 'abacus_operator_group_size', help: 'Segments (queries) per launched operator group', buckets: GROUP_SIZE_BUCKETS, registers });
    this.batchSize = new Histogram({ name: 'abacus_executed_batch_size', help: 'Samples per launched segment (the executed batch: a request alone, or the requests fused into one dynamic batch)', labelNames: ['model'], buckets: BATCH_SIZE_BUCKETS, registers });
    this.predictorError = new Histogram({ name: 'abacus_predictor_absolute_error_seconds', help: 'Absolute error of the predicted operator group latency, seconds', buckets: ERROR_BUCKETS_S, registers });
    this.busy = new Counter({ name: 'abacus_device_busy_seconds_total', help: 'Time the device had at least one operator group running, seconds', registers });
    this.waitingIdle = new Counter({ name: 'abacus_device_waiting_idle_seconds_total', help: 'Time the device sat idle between operator groups while queries waited (decisions and the server\'s own work between two groups), seconds; one-group-at-a-time policies', registers });
    this.groupOverhead = new Counter({ name: 'abacus_group_overhead_seconds_total', help: 'Time inside operator groups outside their longest segment\'s operators (dispatch, messages to and from the executors, input handling, a result waiting for the event loop), seconds', registers });
    for (const model of this.models) this.zeroSeries(model);
    if (options.processMetrics ?? true) collectDefaultMetrics({ register: this.registry });
  }

  /**
   * Count a model loaded at runtime (`abacus serve --model-control explicit`) under its own
   * label from now on; its series start at 0. No-op for a model already counted. Its latency
   * buckets are those made at start (around the configured services' QoS targets).
   */
  addModel(name: string): void {
    if (this.models.has(name)) return;
    this.models.add(name);
    this.zeroSeries(name);
  }

  private zeroSeries(model: string): void {
    for (const outcome of REQUEST_OUTCOMES) this.requests.inc({ model, outcome }, 0);
    this.late.inc({ model }, 0);
    this.restarts.inc({ model }, 0);
    this.paced.inc({ model }, 0);
    this.latency.zero({ model });
    this.queue.zero({ model });
    this.batchSize.zero({ model });
  }

  /** The label for a model name: itself when served, else `unknown`. */
  modelLabel(name: string): string {
    return this.models.has(name) ? name : UNKNOWN_MODEL;
  }

  /**
   * Read queue depths (per served model), readiness and, when given, the predictor's online
   * refinement, the executors' resident memory (bytes by served model name) and the admission
   * gate's budget per model at scrape time.
   */
  bind(sources: { queueDepth(model: string): number; ready(): boolean; modelStates?(): ReadonlyMap<string, string>; refinement?(): RefinementStatus | undefined; fallback?(): FallbackStatus | undefined; residentBytes?(): ReadonlyMap<string, number> | undefined; admissionBudget?(model: string): number | undefined }): void {
    this.queueDepthOf = (m) => sources.queueDepth(m);
    this.modelStatesOf = () => sources.modelStates?.() ?? new Map();
    this.readyOf = () => sources.ready();
    this.refinementOf = () => sources.refinement?.();
    this.fallbackOf = () => sources.fallback?.();
    this.residentOf = () => sources.residentBytes?.();
    this.budgetOf = (m) => sources.admissionBudget?.(m);
  }

  /** One shed request of `model` whose 503 was held (`http/shed-pacing.ts`). */
  shedPaced(model: string): void {
    this.paced.inc({ model: this.modelLabel(model) });
  }

  /** One automatic restart of `model`'s executor. */
  executorRestart(model: string): void {
    this.restarts.inc({ model: this.modelLabel(model) });
  }

  /**
   * One answered request. `latencyMs`: end-to-end (successes only); `queueMs`: arrival → first
   * group (requests that ran); `late`: a success that completed after its QoS target.
   */
  request(model: string, outcome: RequestOutcome, timing: { latencyMs?: number; queueMs?: number; late?: boolean } = {}): void {
    const label = this.modelLabel(model);
    this.requests.inc({ model: label, outcome });
    if (timing.late === true && outcome === 'success') this.late.inc({ model: label });
    if (outcome === 'success' || outcome === 'qos_violation' || outcome === 'overloaded') this.violations.add(label, this.nowMs(), outcome !== 'success' || timing.late === true);
    if (timing.latencyMs !== undefined && outcome === 'success') this.latency.observe({ model: label }, timing.latencyMs / 1000);
    if (timing.queueMs !== undefined) this.queue.observe({ model: label }, Math.max(0, timing.queueMs) / 1000);
  }

  /** A request reached the queue `waitMs` after it arrived at the front end (reading and decoding it). */
  admissionWait(model: string, waitMs: number): void {
    this.admission.observe({ model: this.modelLabel(model) }, Math.max(0, waitMs) / 1000);
  }

  /**
   * One finished operator group: its size, the samples of each segment (by its service, the
   * served model name), the predictor's absolute error (when it had a prediction and a
   * measurement), and busy time. Busy time counts the union of the group intervals
   * [launchMs, endMs] in the order groups end (exact when groups end in launch order, which
   * one-group-at-a-time policies guarantee). With `idleBeforeMs` the idle time before the group
   * while queries waited; with `longestSegmentMs` the group's time outside its operators
   * (`measuredMs` − `longestSegmentMs`, ≥ 0). Together with busy time they say whether a slow
   * server is slow in its device or around it.
   */
  group(record: { readonly segments: readonly { readonly service: string; readonly batch: number }[]; readonly predictedMs: number | undefined; readonly measuredMs: number; readonly launchMs: number; readonly idleBeforeMs?: number; readonly longestSegmentMs?: number }, endMs: number): void {
    if (record.idleBeforeMs !== undefined && record.idleBeforeMs > 0) this.waitingIdle.inc(record.idleBeforeMs / 1000);
    if (record.longestSegmentMs !== undefined && record.longestSegmentMs > 0 && record.measuredMs > record.longestSegmentMs) this.groupOverhead.inc((record.measuredMs - record.longestSegmentMs) / 1000);
    this.groupSize.observe(record.segments.length);
    for (const s of record.segments) this.batchSize.observe({ model: this.modelLabel(s.service) }, s.batch);
    if (record.predictedMs !== undefined && Number.isFinite(record.predictedMs) && Number.isFinite(record.measuredMs)) {
      this.predictorError.observe(Math.abs(record.predictedMs - record.measuredMs) / 1000);
    }
    const from = Math.max(record.launchMs, this.busyUntilMs);
    if (endMs > from) this.busy.inc((endMs - from) / 1000);
    this.busyUntilMs = Math.max(this.busyUntilMs, endMs);
  }

  /** The Prometheus text exposition. */
  text(): Promise<string> {
    return this.registry.metrics();
  }

  /** `Content-Type` of `text()`. */
  get contentType(): string {
    return this.registry.contentType;
  }
}
