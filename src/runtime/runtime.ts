/**
 * The serving runtime (DESIGN.md "Pieces and contracts": `runtime/`; issue 5): one FIFO queue
 * per service, a scheduling loop that asks the query controller (`schedule/`) for the next
 * operator group whenever the device can take one, dispatch to a `Device`, and a record of
 * everything each query experiences (`records.ts`).
 *
 * ## Every query ends exactly once
 * `submit` returns a promise that resolves (never rejects) with one outcome:
 * - `completed`, with the model's outputs;
 * - `rejected` with a reason: `overloaded` (its service's queue was full on arrival, or the
 *   runtime was closed), `qos_violation` (the controller dropped it as hopeless), `device_failure`
 *   (a segment failed or the device is gone), `bad_request` (inputs the device refused),
 *   `cancelled` (its caller withdrew it with `cancel`, e.g. the client disconnected).
 * A query rejected after it ran part of its operators has its state released on the device.
 *
 * ## The loop
 * `pump()` runs on every arrival and every group completion. For a one-group-at-a-time policy
 * (`launchWhileBusy === false`: abacus, fcfs, sjf, edf, clockwork) it decides only when no
 * group is in flight, launches the decided group, and waits for its completion; a query whose
 * segment stopped before its last operator stays at the head of its queue with its next start
 * operator. For overlap-all it launches every waiting query at once, concurrently with groups
 * still running (uncontrolled overlap). Decisions read `clock.now()`; nothing here reads wall
 * time directly, so the same code serves real traffic (WallClock + `ort`) and simulates
 * (VirtualClock + `sim`).
 */
import type { Clock } from '../clock/clock.ts';
import type { Device, GroupResult, Segment, SegmentInput } from '../device/device.ts';
import { BadRequestError, describeError } from '../errors.ts';
import type { ModelSpec } from '../model/spec.ts';
import type { Decision, ExecutedSegment, QueryController, WaitingQuery } from '../schedule/controller.ts';
import type { TensorMap } from '../tensor.ts';
import type { GroupRecord, QueryRecord, RejectionReason } from './records.ts';

/** One service the runtime serves. */
export interface RuntimeService {
  /** Served name (also the device's service name). */
  readonly name: string;
  /** Its partitioned model; `spec.name` is the model name the predictor knows. */
  readonly spec: ModelSpec;
  /** Default QoS target of its queries, ms. */
  readonly qosTargetMs: number;
  /** Most queries waiting in its queue (≥ 1); more are rejected `overloaded`. */
  readonly maxQueueLength: number;
}

export interface RuntimeOptions {
  readonly clock: Clock;
  /** A device with every service already loaded under its `name`. */
  readonly device: Device;
  readonly controller: QueryController;
  readonly services: readonly RuntimeService[];
  /**
   * Keep every query and group record in `queries` / `groups` [true]. Turn off for very long
   * simulations; `onRecord` still sees each finished query.
   */
  readonly keepRecords?: boolean;
  /** Called once per query when it ends (after its promise resolves). */
  readonly onQueryEnd?: (record: QueryRecord) => void;
  /** Called once per group when it ends. */
  readonly onGroupEnd?: (record: GroupRecord) => void;
}

/** One request. */
export interface QueryRequest {
  readonly service: string;
  /** Batch size (≥ 1). */
  readonly batch: number;
  /** Sequence length for sequence models (0 or absent: the model's default). */
  readonly seqLen?: number;
  /** Input tensors `[batch, …]`; absent: seeded synthetic inputs (benchmarks, simulations). */
  readonly inputs?: TensorMap;
  /** QoS target for this query, ms; absent: the service's. */
  readonly qosTargetMs?: number;
  /** Arrival time on the runtime's clock, ms; absent: `clock.now()`. An open-loop generator passes its intended send time. */
  readonly arrivalMs?: number;
  /** Query id (unique while pending); absent: generated. */
  readonly id?: string;
}

/** The single outcome of a query. */
export type QueryOutcome =
  | { readonly ok: true; readonly record: QueryRecord; readonly outputs: TensorMap }
  | { readonly ok: false; readonly record: QueryRecord; readonly reason: RejectionReason; readonly message: string };

interface Pending {
  readonly record: QueryRecord;
  readonly spec: ModelSpec;
  readonly seqLen: number;
  readonly inputs: TensorMap | undefined;
  readonly seed: number;
  nextOperator: number;
  inFlight: boolean;
  /** Set by `cancel` while the query's group runs: it ends `cancelled` when that group finishes (unless the group completes it). */
  cancelMessage: string | undefined;
  readonly resolve: (outcome: QueryOutcome) => void;
  /** The controller's view (kept in step with `nextOperator`). */
  view: WaitingQuery;
}

interface ServiceState {
  readonly service: RuntimeService;
  readonly queue: Pending[];
  /** `queue[i].view` at index i, kept in step with `queue`: what `decide` sees, with no copy per decision. */
  readonly views: WaitingQuery[];
}

/** Counters of the runtime since creation. */
export interface RuntimeCounters {
  readonly submitted: number;
  readonly completed: number;
  readonly rejected: number;
  readonly groups: number;
  readonly pending: number;
}

export class ServingRuntime {
  /** Every query record (when `keepRecords`), in arrival order. */
  readonly queries: QueryRecord[] = [];
  /** Every group record (when `keepRecords`), in launch order. */
  readonly groups: GroupRecord[] = [];
  private readonly clock: Clock;
  private readonly device: Device;
  private readonly controller: QueryController;
  private readonly services = new Map<string, ServiceState>();
  private readonly byId = new Map<string, Pending>();
  private readonly keepRecords: boolean;
  private readonly onQueryEnd: ((r: QueryRecord) => void) | undefined;
  private readonly onGroupEnd: ((r: GroupRecord) => void) | undefined;
  private inFlightGroups = 0;
  private pumping = false;
  private pumpAgain = false;
  private closed = false;
  private nextId = 0;
  private groupCount = 0;
  private submitted = 0;
  private completed = 0;
  private rejected = 0;
  private idleWaiters: (() => void)[] = [];

  /** @throws RangeError for no services, a service listed twice, or a bad QoS target / queue length. */
  constructor(options: RuntimeOptions) {
    this.clock = options.clock;
    this.device = options.device;
    this.controller = options.controller;
    this.keepRecords = options.keepRecords ?? true;
    this.onQueryEnd = options.onQueryEnd;
    this.onGroupEnd = options.onGroupEnd;
    if (options.services.length === 0) throw new RangeError('ServingRuntime: services must not be empty');
    for (const s of options.services) {
      if (this.services.has(s.name)) throw new RangeError(`ServingRuntime: service '${s.name}' is listed twice`);
      if (!(Number.isFinite(s.qosTargetMs) && s.qosTargetMs > 0)) throw new RangeError(`ServingRuntime: service '${s.name}' qosTargetMs must be > 0, got ${s.qosTargetMs}`);
      if (!Number.isInteger(s.maxQueueLength) || s.maxQueueLength < 1) throw new RangeError(`ServingRuntime: service '${s.name}' maxQueueLength must be an integer ≥ 1, got ${s.maxQueueLength}`);
      this.services.set(s.name, { service: s, queue: [], views: [] });
    }
  }

  /** Served service names, in configuration order. */
  get serviceNames(): string[] {
    return [...this.services.keys()];
  }

  /** Counters since creation. */
  get counters(): RuntimeCounters {
    return { submitted: this.submitted, completed: this.completed, rejected: this.rejected, groups: this.groupCount, pending: this.byId.size };
  }

  /**
   * Enqueue a query. The promise always resolves with its single outcome (see the file docs).
   * @throws RangeError (synchronously) for an unknown service, a batch that is not an integer
   *   ≥ 1, a negative seqLen, a non-positive QoS target, or an id already pending — nothing is
   *   recorded then.
   */
  submit(request: QueryRequest): Promise<QueryOutcome> {
    const state = this.services.get(request.service);
    if (state === undefined) throw new RangeError(`unknown service '${request.service}' (served: ${this.serviceNames.join(', ')})`);
    if (!Number.isInteger(request.batch) || request.batch < 1) throw new RangeError(`batch must be an integer ≥ 1, got ${String(request.batch)}`);
    const spec = state.service.spec;
    const seqLen = spec.dynamicAxes.seq === undefined ? 0 : request.seqLen !== undefined && request.seqLen > 0 ? request.seqLen : spec.defaultSeqLen;
    if (!Number.isInteger(seqLen) || seqLen < 0) throw new RangeError(`seqLen must be an integer ≥ 0, got ${String(request.seqLen)}`);
    const qosTargetMs = request.qosTargetMs ?? state.service.qosTargetMs;
    if (!(Number.isFinite(qosTargetMs) && qosTargetMs > 0)) throw new RangeError(`qosTargetMs must be a finite number > 0, got ${String(qosTargetMs)}`);
    const id = request.id ?? `q${this.nextId}`;
    if (this.byId.has(id)) throw new RangeError(`query id '${id}' is already pending`);
    const seed = this.nextId++;
    const record: QueryRecord = { id, service: state.service.name, arrivalMs: request.arrivalMs ?? this.clock.now(), batch: request.batch, seqLen, qosTargetMs, groups: [], outcome: 'pending' };
    if (this.keepRecords) this.queries.push(record);
    this.submitted++;
    return new Promise<QueryOutcome>((resolve) => {
      const p: Pending = {
        record,
        spec,
        seqLen,
        inputs: request.inputs,
        seed,
        nextOperator: 0,
        inFlight: false,
        cancelMessage: undefined,
        resolve,
        view: { id, service: record.service, model: spec.name, operators: spec.operators.length, nextOperator: 0, batch: record.batch, seqLen, arrivalMs: record.arrivalMs, qosTargetMs },
      };
      this.byId.set(id, p);
      if (this.closed) return this.finish(p, 'overloaded', 'the runtime is closed');
      if (state.queue.length >= state.service.maxQueueLength) return this.finish(p, 'overloaded', `service '${record.service}' has ${state.queue.length} queries waiting (maxQueueLength ${state.service.maxQueueLength})`);
      state.queue.push(p);
      state.views.push(p.view);
      this.pump();
    });
  }

  /**
   * Withdraw a pending query (its caller gave up, e.g. the client disconnected), so that it
   * uses no more device time. Its `submit` promise still resolves exactly once, `rejected` with
   * reason `cancelled` and `message`:
   * - a query waiting in its queue (never launched, or between two of its groups) ends now; a
   *   query that ran part of its operators has its kept device state released;
   * - a query whose operator group is running ends when that group finishes — `completed` if
   *   that group ran its last operator (the work is done; its outputs are delivered), else
   *   `cancelled` then. Running operators are never interrupted.
   * @returns `withdrawn` (ended now), `after_group` (ends when its running group finishes), or
   *   `not_pending` (unknown id or already ended: nothing changes). Idempotent.
   */
  cancel(queryId: string, message = 'cancelled by its caller'): 'withdrawn' | 'after_group' | 'not_pending' {
    const p = this.byId.get(queryId);
    if (p === undefined) return 'not_pending';
    if (p.inFlight) {
      p.cancelMessage ??= message;
      return 'after_group';
    }
    this.reject(p, 'cancelled', message);
    return 'withdrawn';
  }

  /** Queries waiting or running in `service`'s queue now (0 for an unknown service). */
  queueLength(service: string): number {
    return this.services.get(service)?.queue.length ?? 0;
  }

  /** Resolves when no query is pending (every submitted query has its outcome). */
  drained(): Promise<void> {
    if (this.byId.size === 0) return Promise.resolve();
    return new Promise<void>((resolve) => this.idleWaiters.push(resolve));
  }

  /**
   * Stop accepting queries and answer every waiting (not running) query `overloaded`; running
   * groups finish normally. Does not close the device (the caller owns it).
   */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const state of this.services.values()) {
      for (const p of [...state.queue]) if (!p.inFlight) this.reject(p, 'overloaded', 'the runtime is closing');
    }
  }

  private pump(): void {
    if (this.pumping) {
      this.pumpAgain = true;
      return;
    }
    this.pumping = true;
    try {
      for (;;) {
        this.pumpAgain = false;
        if (!this.controller.launchWhileBusy && this.inFlightGroups > 0) break;
        const queues: WaitingQuery[][] = [];
        let waiting = 0;
        for (const state of this.services.values()) {
          // In flight only while its group runs: one-group-at-a-time policies decide when none
          // runs, and launchWhileBusy launches dequeue their queries at once.
          if (state.queue.length === 0 || state.queue[0]!.inFlight) continue;
          waiting += state.views.length;
          queues.push(state.views);
        }
        if (waiting === 0) break;
        let decision: Decision;
        try {
          decision = this.controller.decide({ nowMs: this.clock.now(), queues, runningRemainingMs: 0 });
        } catch (err) {
          // A controller or predictor error must not leave queries unanswered: fail the visible ones.
          for (const views of queues) for (const v of [...views]) {
            const p = this.byId.get(v.id);
            if (p !== undefined) this.reject(p, 'device_failure', `the ${this.controller.policy} controller failed: ${describeError(err)}`);
          }
          continue;
        }
        for (const r of decision.rejected) {
          const p = this.byId.get(r.queryId);
          if (p === undefined) continue;
          const why = r.predictedMs === undefined ? `headroom ${r.headroomMs.toFixed(2)} ms ≤ 0` : `predicted ${r.predictedMs.toFixed(2)} ms to finish exceeds headroom ${r.headroomMs.toFixed(2)} ms`;
          this.reject(p, 'qos_violation', `dropped by the ${this.controller.policy} controller: ${why}`);
        }
        if (decision.group.length > 0) this.launch(decision.group, decision.predictedMs);
        else if (decision.rejected.length === 0) break;
        if (!this.pumpAgain && !this.controller.launchWhileBusy && this.inFlightGroups > 0) break;
      }
    } finally {
      this.pumping = false;
    }
  }

  private launch(group: readonly { queryId: string; start: number; end: number }[], predictedMs: number | undefined): void {
    const members: Pending[] = [];
    const segments: Segment[] = [];
    for (const s of group) {
      const p = this.byId.get(s.queryId);
      if (p === undefined || p.inFlight || s.start !== p.nextOperator) {
        throw new Error(`controller ${this.controller.policy} launched query '${s.queryId}' at operator ${s.start}, which is not waiting there (internal error)`);
      }
      const input: SegmentInput = p.nextOperator > 0 ? { kind: 'resume' } : p.inputs !== undefined ? { kind: 'tensors', tensors: p.inputs } : { kind: 'synthetic', seed: p.seed };
      segments.push({ service: p.record.service, queryId: p.record.id, start: s.start, end: s.end, batchSize: p.record.batch, seqLen: p.seqLen, input });
      members.push(p);
    }
    const record: GroupRecord = {
      index: this.groupCount++,
      launchMs: this.clock.now(),
      predictedMs,
      measuredMs: Number.NaN,
      segments: segments.map((s) => ({ queryId: s.queryId, service: s.service, start: s.start, end: s.end, batch: s.batchSize, seqLen: s.seqLen })),
    };
    if (this.keepRecords) this.groups.push(record);
    for (const p of members) {
      p.inFlight = true;
      p.record.groups.push(record.index);
      if (this.controller.launchWhileBusy) this.dequeue(p);
    }
    this.inFlightGroups++;
    let running: Promise<GroupResult>;
    try {
      running = this.device.runGroup(segments);
    } catch (err) {
      running = Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
    running.then(
      (result) => this.groupDone(record, members, result),
      (err: unknown) => this.groupFailed(record, members, err),
    );
  }

  private groupDone(record: GroupRecord, members: Pending[], result: GroupResult): void {
    this.inFlightGroups--;
    record.measuredMs = result.groupLatencyMs;
    const executed: ExecutedSegment[] = [];
    result.segments.forEach((r, i) => {
      const p = members[i]!;
      const seg = record.segments[i]!;
      p.inFlight = false;
      if (!r.ok) {
        this.reject(p, r.error.code === 'bad_request' ? 'bad_request' : 'device_failure', r.error.message);
        return;
      }
      executed.push({ queryId: p.record.id, service: p.record.service, model: p.spec.name, start: seg.start, end: seg.end, operators: p.spec.operators.length, batch: p.record.batch, seqLen: p.seqLen, latencyMs: r.latencyMs });
      p.nextOperator = seg.end;
      if (seg.end === p.spec.operators.length) {
        this.complete(p, r.outputs ?? {});
      } else if (p.cancelMessage !== undefined) {
        this.reject(p, 'cancelled', p.cancelMessage);
      } else if (p.record.outcome === 'pending') {
        p.view = { ...p.view, nextOperator: seg.end };
        const state = this.services.get(p.record.service)!;
        const i = state.queue.indexOf(p);
        if (i >= 0) state.views[i] = p.view;
      }
    });
    if (executed.length > 0) this.controller.observe({ segments: executed, groupLatencyMs: result.groupLatencyMs, ...(record.predictedMs === undefined ? {} : { predictedMs: record.predictedMs }) });
    this.onGroupEnd?.(record);
    this.pump();
  }

  private groupFailed(record: GroupRecord, members: Pending[], err: unknown): void {
    this.inFlightGroups--;
    record.measuredMs = Number.NaN;
    const reason: RejectionReason = err instanceof BadRequestError || err instanceof RangeError || err instanceof TypeError ? 'bad_request' : 'device_failure';
    for (const p of members) {
      p.inFlight = false;
      this.reject(p, reason, `the device refused the group: ${describeError(err)}`);
    }
    this.onGroupEnd?.(record);
    this.pump();
  }

  private dequeue(p: Pending): void {
    const { queue, views } = this.services.get(p.record.service)!;
    const i = queue.indexOf(p);
    if (i === 0) {
      queue.shift();
      views.shift();
    } else if (i > 0) {
      queue.splice(i, 1);
      views.splice(i, 1);
    }
  }

  private complete(p: Pending, outputs: TensorMap): void {
    this.dequeue(p);
    p.record.outcome = 'completed';
    p.record.endMs = this.clock.now();
    this.completed++;
    this.settle(p);
    p.resolve({ ok: true, record: p.record, outputs });
  }

  private reject(p: Pending, reason: RejectionReason, message: string): void {
    if (p.record.outcome !== 'pending') return;
    this.dequeue(p);
    if (p.nextOperator > 0 && !p.inFlight) {
      this.device.releaseQuery(p.record.service, p.record.id).catch(() => undefined);
    }
    this.finish(p, reason, message);
  }

  private finish(p: Pending, reason: RejectionReason, message: string): void {
    p.record.outcome = 'rejected';
    p.record.reason = reason;
    p.record.detail = message;
    p.record.endMs = this.clock.now();
    this.rejected++;
    this.settle(p);
    p.resolve({ ok: false, record: p.record, reason, message });
  }

  private settle(p: Pending): void {
    this.byId.delete(p.record.id);
    this.onQueryEnd?.(p.record);
    if (this.byId.size === 0 && this.idleWaiters.length > 0) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const w of waiters) w();
    }
  }
}
