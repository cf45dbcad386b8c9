/**
 * The serving runtime (docs/design.md#runtime, docs/scheduling-runtime.md): one FIFO queue
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
 * ## Dynamic batching
 * A service with `batching` (`BatchingLimits`) lets the controller fuse several of its waiting
 * queries into one segment (`LaunchSegment.fused`). The runtime checks every query's input
 * tensors against the model when it is submitted (a bad one is answered `bad_request` and never
 * joins a batch), concatenates the members' inputs along dim 0 at the launch, keeps the fused
 * batch as ONE device query (one id, one kept state) until its last operator, and then splits
 * the outputs along dim 0 so that every member gets its own rows. Each member keeps its own
 * record and outcome. A fused segment the device refuses (`bad_request`: a value only the device
 * checks, such as a token id beyond the vocabulary) is split back into its members, each rerun
 * alone from operator 0, so that only a member whose own inputs are refused fails. A member
 * cancelled while its batch waits between two segments is answered
 * `cancelled` at once (its rows keep riding with the batch and are discarded); one whose batch
 * is running ends when that group finishes, as a query alone does.
 *
 * ## The loop
 * `pump()` runs on every arrival, cancellation, group completion, and at a decision's
 * `wakeAtMs`. For a one-group-at-a-time policy (`launchWhileBusy === false`: abacus, fcfs, sjf,
 * edf, fcfs-batch, edf-batch, clockwork) it launches one group, and while that group runs it
 * decides the next one ahead (`decideAhead`): on the queues as they will be when the group ends,
 * with `runningRemainingMs` = its predicted remainder. That decision's rejections are answered at
 * once — a query that cannot finish behind the running group learns it on arrival, not when the
 * group ends — and its group is launched the moment the device is free, with no decision
 * latency between the two groups, unless an arrival, a cancellation, a failed segment, a wake,
 * or the running group ending later than predicted changed the picture (then it decides again
 * at once). A query whose segment stopped before its last operator stays at the head of its
 * queue with its next start operator. A wake timer (`Decision.wakeAtMs` of the latest decision)
 * decides again at the instant a waiting query becomes hopeless, so it is rejected on time even
 * while the running group overruns its prediction. For overlap-all the loop launches every
 * waiting query at once, concurrently with groups still running (uncontrolled overlap); for
 * triton (`oneGroupPerService`) each batch as it is formed, hiding a service's queue while one
 * of its groups runs. A controller that throws, or returns a decision the
 * runtime cannot carry out (a query launched where it does not wait, launched twice or also
 * rejected, fused when it cannot be), has failed: the queries it was shown are answered
 * `device_failure` and the loop goes on. Decisions read `clock.now()`; nothing here reads wall
 * time directly, so the same code serves real traffic (WallClock + `ort`) and simulates
 * (VirtualClock + `sim`).
 *
 * ## Its parts
 * This file is the API and the loop: admission, cancellation, decisions (now and ahead), the
 * wake timer, and when a group launches and ends. The pending queries, their queues and how each
 * ends are the query book's (`query-book.ts`); fusing and unfusing batches are `fusion.ts`'s;
 * a group's segments, record and result are `groups.ts`'s; the data types and the checks of a
 * decision are `units.ts`'s.
 */
import type { Clock, TimerHandle } from '../clock/clock.ts';
import { nextInstantAfter } from '../clock/instant.ts';
import type { Device, GroupResult } from '../device/device.ts';
import { checkInputTensors } from '../device/validate.ts';
import { describeError } from '../errors.ts';
import type { Decision, LaunchSegment, QueryController, RunningSegment, WaitingQuery } from '../schedule/controller.ts';
import { failGroup, groupRecordOf, markLaunched, segmentsOf, settleGroup } from './groups.ts';
import { QueryBook } from './query-book.ts';
import type { GroupRecord, QueryRecord } from './records.ts';
import {
  checkBatching,
  checkDecisionOf,
  earliestDeadlineMs,
  fuseKeyOf,
  heldQueuesOf,
  runningSegmentsOf,
  visibleQueuesOf,
  type Pending,
  type QueryOutcome,
  type QueryRequest,
  type RuntimeCounters,
  type RuntimeOptions,
  type RuntimeService,
  type Unit,
} from './units.ts';

export type { QueryOutcome, QueryRequest, RuntimeCounters, RuntimeOptions, RuntimeService } from './units.ts';

export class ServingRuntime {
  /** Every query record (when `keepRecords`), in arrival order. */
  readonly queries: QueryRecord[];
  /** Every group record (when `keepRecords`), in launch order. */
  readonly groups: GroupRecord[] = [];
  private readonly clock: Clock;
  private readonly device: Device;
  private readonly controller: QueryController;
  /** Services, pending queries, units, and how each query ends (`query-book.ts`). */
  private readonly book: QueryBook;
  private readonly keepRecords: boolean;
  private readonly aheadEnabled: boolean;
  private readonly onGroupEnd: ((r: GroupRecord) => void) | undefined;
  private inFlightGroups = 0;
  private pumping = false;
  private pumpAgain = false;
  private closed = false;
  private nextId = 0;
  private groupCount = 0;
  /** The timer of the latest decision's `wakeAtMs`. */
  private wake: { atMs: number; handle: TimerHandle } | undefined;
  /** One group at a time: the group in flight. */
  private running: GroupRecord | undefined;
  /** `launchWhileBusy`: every group in flight and its units, segment order (`ScheduleInput.running`). */
  private readonly inFlight = new Map<GroupRecord, readonly Unit[]>();
  /**
   * One group at a time: the next group, decided while `running` runs (`decideAhead`), the clock
   * time it was planned to start (the running group's predicted end), and the earliest deadline
   * among its queries; undefined when none is decided or the picture changed since.
   */
  private plan: { readonly decision: Decision; readonly startMs: number; readonly deadlineMs: number } | undefined;
  /** One group at a time: when the last group ended with queries waiting (the device idle with work to do), until the next launch. */
  private idleSinceMs: number | undefined;

  /** @throws RangeError for no services, a service listed twice, a bad QoS target / queue length, or bad batching limits. */
  constructor(options: RuntimeOptions) {
    this.clock = options.clock;
    this.device = options.device;
    this.controller = options.controller;
    this.keepRecords = options.keepRecords ?? true;
    this.aheadEnabled = options.decideAhead ?? true;
    this.onGroupEnd = options.onGroupEnd;
    this.book = new QueryBook({ clock: this.clock, device: this.device, keepRecords: this.keepRecords, onQueryEnd: options.onQueryEnd, onEmpty: () => this.setWake(undefined) });
    this.queries = this.book.queries;
    if (options.services.length === 0 && options.allowNoServices !== true) throw new RangeError('ServingRuntime: services must not be empty');
    for (const s of options.services) this.addService(s);
  }

  /**
   * Serve one more service from now on (a model loaded at runtime: `abacus serve --model-control
   * explicit`). The device must already have it loaded under `s.name`.
   * @throws RangeError for a name already served, a bad QoS target / queue length, or bad
   *   batching limits (nothing changes then).
   */
  addService(s: RuntimeService): void {
    if (this.book.services.has(s.name)) throw new RangeError(`ServingRuntime: service '${s.name}' is listed twice`);
    if (!(Number.isFinite(s.qosTargetMs) && s.qosTargetMs > 0)) throw new RangeError(`ServingRuntime: service '${s.name}' qosTargetMs must be > 0, got ${s.qosTargetMs}`);
    if (!Number.isInteger(s.maxQueueLength) || s.maxQueueLength < 1) throw new RangeError(`ServingRuntime: service '${s.name}' maxQueueLength must be an integer ≥ 1, got ${s.maxQueueLength}`);
    if (s.batching !== undefined) checkBatching(s, s.batching);
    const service = s.batching === undefined ? s : { ...s, batching: Object.freeze({ ...s.batching, preferredBatchSizes: Object.freeze([...s.batching.preferredBatchSizes]) }) };
    this.book.services.set(s.name, { service, queue: [], views: [], queries: 0, running: 0, runningQueries: 0 });
  }

  /**
   * Stop serving a service that has no query left (`queueLength(name) === 0`; wait with
   * `serviceDrained`): later `submit`s for it throw RangeError (unknown service). Does not touch
   * the device (the caller unloads it there). No-op for a name not served.
   * @throws RangeError when queries of the service are still waiting or running.
   */
  removeService(name: string): void {
    const state = this.book.services.get(name);
    if (state === undefined) return;
    if (state.queries > 0 || state.queue.length > 0) throw new RangeError(`ServingRuntime: service '${name}' still has ${state.queries} queries waiting or running`);
    this.book.services.delete(name);
    this.plan = undefined;
  }

  /** Resolves when no query of `service` is waiting or running (at once for an unknown service or an empty queue). */
  serviceDrained(service: string): Promise<void> {
    return this.book.serviceDrained(service);
  }

  /** Served service names, in configuration order. */
  get serviceNames(): string[] {
    return [...this.book.services.keys()];
  }

  /** Counters since creation. */
  get counters(): RuntimeCounters {
    const { submitted, completed, rejected, pending } = this.book.counts;
    return { submitted, completed, rejected, groups: this.groupCount, pending };
  }

  /**
   * Enqueue a query. The promise always resolves with its single outcome (see the file docs).
   * For a service with `batching`, input tensors that do not fit the model resolve it
   * `bad_request` at once (before it can join a batch).
   * @throws RangeError (synchronously) for an unknown service, a batch that is not an integer
   *   ≥ 1, a negative seqLen, a non-positive QoS target, or an id already pending — nothing is
   *   recorded then.
   */
  submit(request: QueryRequest): Promise<QueryOutcome> {
    const state = this.book.services.get(request.service);
    if (state === undefined) throw new RangeError(`unknown service '${request.service}' (served: ${this.serviceNames.join(', ')})`);
    if (!Number.isInteger(request.batch) || request.batch < 1) throw new RangeError(`batch must be an integer ≥ 1, got ${String(request.batch)}`);
    const { spec, batching } = state.service;
    // a model with other dynamic axes carries its size as seqLen (`querySize`)
    const seqLen = spec.dynamicAxes.seq === undefined && spec.dynamicAxes.symbols === undefined ? 0 : request.seqLen !== undefined && request.seqLen > 0 ? request.seqLen : spec.defaultSeqLen;
    if (!Number.isInteger(seqLen) || seqLen < 0) throw new RangeError(`seqLen must be an integer ≥ 0, got ${String(request.seqLen)}`);
    const qosTargetMs = request.qosTargetMs ?? state.service.qosTargetMs;
    if (!(Number.isFinite(qosTargetMs) && qosTargetMs > 0)) throw new RangeError(`qosTargetMs must be a finite number > 0, got ${String(qosTargetMs)}`);
    const id = request.id ?? `q${this.nextId}`;
    if (this.book.taken(id)) throw new RangeError(`query id '${id}' is already pending`);
    const seed = this.nextId++;
    const record: QueryRecord = { id, service: state.service.name, arrivalMs: request.arrivalMs ?? this.clock.now(), batch: request.batch, seqLen, qosTargetMs, groups: [], outcome: 'pending' };
    return new Promise<QueryOutcome>((resolve) => {
      const inputs = request.inputs;
      const view: WaitingQuery = {
        id,
        service: record.service,
        model: spec.name,
        operators: spec.operators.length,
        nextOperator: 0,
        batch: record.batch,
        seqLen,
        arrivalMs: record.arrivalMs,
        qosTargetMs,
        ...(batching === undefined ? {} : { batching, fuseKey: fuseKeyOf(spec, seqLen, inputs) }),
      };
      const unit: Unit = { id, state, members: [], samples: record.batch, seqLen, inputs, seed, fused: false, nextOperator: 0, inFlight: false, runEnd: 0, view };
      const p: Pending = { record, endAfterGroup: undefined, resolve, unit, offset: 0 };
      unit.members.push(p);
      this.book.open(p);
      if (this.closed) return this.book.finish(p, 'overloaded', 'the runtime is closed');
      // The limit counts waiting queries, not those whose segment runs now: one group
      // at a time bounds the running ones. A launchWhileBusy policy (overlap-all) bounds nothing
      // else, so there the running ones count too.
      const waiting = this.controller.launchWhileBusy ? state.queries : state.queries - state.runningQueries;
      if (waiting >= state.service.maxQueueLength) return this.book.finish(p, 'overloaded', `service '${record.service}' has ${waiting} queries waiting (maxQueueLength ${state.service.maxQueueLength})`);
      if (batching !== undefined && inputs !== undefined) {
        try {
          checkInputTensors(`query '${id}'`, spec, inputs, record.batch, seqLen);
        } catch (err) {
          return this.book.finish(p, 'bad_request', describeError(err));
        }
      }
      this.book.enqueue(unit);
      this.plan = undefined; // an arrival changes the picture a decision made ahead saw
      this.pump();
    });
  }

  /**
   * Withdraw a pending query (its caller gave up, e.g. the client disconnected), so that it
   * uses no more device time. Its `submit` promise still resolves exactly once, `rejected` with
   * reason `cancelled` and `message`:
   * - a query waiting in its queue (never launched, or between two of its groups) ends now; a
   *   query that ran part of its operators has its kept device state released (a member of a
   *   fused batch: once no member of the batch is left);
   * - a query whose operator group is running ends when that group finishes — `completed` if
   *   that group ran its last operator (the work is done; its outputs are delivered), else
   *   `cancelled` then. Running operators are never interrupted.
   * @returns `withdrawn` (ended now), `after_group` (ends when its running group finishes), or
   *   `not_pending` (unknown id or already ended: nothing changes). Idempotent.
   */
  cancel(queryId: string, message = 'cancelled by its caller'): 'withdrawn' | 'after_group' | 'not_pending' {
    const p = this.book.byId.get(queryId);
    if (p === undefined) return 'not_pending';
    // The picture a decision made ahead saw has changed: decide again.
    this.plan = undefined;
    if (p.unit.inFlight) {
      p.endAfterGroup ??= { reason: 'cancelled', message };
      this.pump();
      return 'after_group';
    }
    this.book.reject(p, 'cancelled', message);
    if (this.inFlightGroups > 0) this.pump();
    return 'withdrawn';
  }

  /** Queries of `service` waiting or running now (0 for an unknown service). */
  queueLength(service: string): number {
    return this.book.services.get(service)?.queries ?? 0;
  }

  /** Resolves when no query is pending (every submitted query has its outcome). */
  drained(): Promise<void> {
    return this.book.drained();
  }

  /**
   * Stop accepting queries and answer every waiting (not running) query `overloaded`; running
   * groups finish normally. Does not close the device (the caller owns it).
   */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.plan = undefined;
    this.setWake(undefined);
    for (const state of this.book.services.values()) {
      for (const u of [...state.queue]) if (!u.inFlight) this.book.rejectUnit(u, 'overloaded', 'the runtime is closing');
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
        const again = this.controller.launchWhileBusy ? this.decideConcurrent() : this.inFlightGroups === 0 ? this.decideAndLaunch() : this.aheadEnabled && this.plan === undefined && this.decideAhead();
        if (!again && !this.pumpAgain) break;
      }
    } finally {
      this.pumping = false;
    }
  }

  /** `launchWhileBusy`: decide on the visible queries and launch at once. @returns whether to decide again. */
  private decideConcurrent(): boolean {
    const queues = visibleQueuesOf(this.book.services.values(), this.controller.oneGroupPerService === true, false);
    const held = heldQueuesOf(this.book.services.values(), this.controller.oneGroupPerService === true);
    return (queues !== undefined || held !== undefined) && this.decideNowAndLaunch(queues ?? [], held, runningSegmentsOf(this.inFlight));
  }

  /**
   * Decide on `queues` with nothing running ahead of the group (`runningRemainingMs` 0), answer
   * the rejections, arm the decision's wake, and launch its group. @returns whether to go on (a
   * group was launched, queries were rejected, or a controller failure answered them).
   */
  private decideNowAndLaunch(queues: WaitingQuery[][], held?: WaitingQuery[][], running?: RunningSegment[]): boolean {
    const d = this.decideOn(queues, 0, false, held, running);
    if (d === undefined) return true;
    this.setWake(d.decision.wakeAtMs);
    this.applyRejections(d.decision, 0);
    if (d.decision.group.length > 0) {
      this.launch(d.decision.group, d.members, d.decision.predictedMs, false, d.decision.fallback === true);
      return true;
    }
    return d.decision.rejected.length > 0;
  }

  /**
   * One group at a time, the device idle: launch the decision made ahead when it still holds
   * (`plan`), else decide now and launch. @returns whether to go on (a group was launched, or
   * queries were rejected).
   */
  private decideAndLaunch(): boolean {
    const plan = this.plan;
    this.plan = undefined;
    if (plan !== undefined && plan.decision.group.length > 0) {
      let members: Unit[][] | undefined;
      try {
        members = checkDecisionOf(this.book.units, this.controller, plan.decision, false);
      } catch {
        members = undefined; // cannot happen while the picture is the one it was made for; decide again
      }
      if (members !== undefined) {
        this.launch(plan.decision.group, members, plan.decision.predictedMs, true, plan.decision.fallback === true);
        return true;
      }
    }
    const queues = visibleQueuesOf(this.book.services.values(), this.controller.oneGroupPerService === true, false);
    if (queues === undefined) {
      this.idleSinceMs = undefined; // idle with nothing to do: not a gap
      return false;
    }
    return this.decideNowAndLaunch(queues);
  }

  /**
   * One group at a time, a group running and no decision made ahead: decide the next group now,
   * on the queues as they will be when the running group ends (`visibleQueues(true)`), with
   * `runningRemainingMs` = its predicted remainder. Rejections are answered at once (a query
   * of the running group: when it ends); the group is kept as `plan`, launched the moment the
   * device is free unless an arrival, a cancellation, a failure, a wake, or the running group
   * finishing later than predicted changes the picture first.
   * @returns whether to decide again (a controller failure answered the visible queries).
   */
  private decideAhead(): boolean {
    const running = this.running;
    if (running === undefined) return false;
    const queues = visibleQueuesOf(this.book.services.values(), this.controller.oneGroupPerService === true, true);
    if (queues === undefined) {
      this.setWake(undefined); // nothing waits for the running group to end
      return false;
    }
    const nowMs = this.clock.now();
    const runningRemainingMs = running.predictedMs === undefined ? 0 : Math.max(0, running.launchMs + running.predictedMs - nowMs);
    const d = this.decideOn(queues, runningRemainingMs, true);
    if (d === undefined) return true;
    // Set before the rejections: a query submitted from their callbacks invalidates it.
    this.plan = { decision: d.decision, startMs: nowMs + runningRemainingMs, deadlineMs: earliestDeadlineMs(d.members) };
    this.setWake(d.decision.wakeAtMs);
    this.applyRejections(d.decision, runningRemainingMs);
    return false;
  }

  /**
   * `controller.decide` and `checkDecision`. A controller that throws or breaks the contract has
   * failed: the queries it was shown are answered `device_failure` (one of the running group:
   * when the group ends). @returns undefined then.
   */
  private decideOn(queues: WaitingQuery[][], runningRemainingMs: number, ahead: boolean, held?: WaitingQuery[][], running?: RunningSegment[]): { decision: Decision; members: Unit[][] } | undefined {
    try {
      const decision = this.controller.decide({ nowMs: this.clock.now(), queues, runningRemainingMs, ...(held === undefined ? {} : { held }), ...(running === undefined ? {} : { running }) });
      return { decision, members: checkDecisionOf(this.book.units, this.controller, decision, ahead) };
    } catch (err) {
      const message = `the ${this.controller.policy} controller failed: ${describeError(err)}`;
      for (const views of queues) {
        for (const v of [...views]) {
          const u = this.book.units.get(v.id);
          if (u === undefined) continue;
          if (u.inFlight) for (const p of u.members) p.endAfterGroup ??= { reason: 'device_failure', message };
          else this.book.rejectUnit(u, 'device_failure', message);
        }
      }
      return undefined;
    }
  }

  /** Answer a decision's rejections `qos_violation` (a query of the running group: when the group ends), and tell the controller (`QueryController.rejected`). */
  private applyRejections(decision: Decision, runningRemainingMs: number): void {
    if (decision.rejected.length > 0) this.controller.rejected?.(decision.rejected);
    for (const r of decision.rejected) {
      const u = this.book.units.get(r.queryId);
      if (u === undefined) continue;
      const running = runningRemainingMs > 0 ? `, ${runningRemainingMs.toFixed(2)} ms of it until the running group ends` : '';
      const why = r.predictedMs === undefined ? `headroom ${r.headroomMs.toFixed(2)} ms ≤ 0` : `predicted ${r.predictedMs.toFixed(2)} ms to finish${running} exceeds headroom ${r.headroomMs.toFixed(2)} ms`;
      const message = `dropped by the ${this.controller.policy} controller: ${why}`;
      if (u.inFlight) for (const p of u.members) p.endAfterGroup ??= { reason: 'qos_violation', message };
      else this.book.rejectUnit(u, 'qos_violation', message);
    }
  }

  /**
   * Arm the wake timer for `atMs` (a decision's `wakeAtMs`; the latest decision's replaces the
   * one before, which saw an older picture), or disarm it (undefined). When it fires, the
   * decision made ahead is dropped and the runtime decides again. A timer that fires a float
   * rounding short of `atMs` is re-armed for the rest, so a decision at the wake sees
   * `nowMs ≥ atMs` (a rejection on time is exact on a virtual clock).
   */
  private setWake(atMs: number | undefined): void {
    if (this.wake !== undefined) {
      if (this.wake.atMs === atMs) return;
      this.clock.clearTimer(this.wake.handle);
      this.wake = undefined;
    }
    if (atMs === undefined || this.closed || !Number.isFinite(atMs)) return;
    const fire = (): void => {
      const nowMs = this.clock.now();
      if (nowMs < atMs) {
        this.wake = { atMs, handle: this.clock.setTimer(Math.max(atMs - nowMs, nextInstantAfter(nowMs) - nowMs), fire) };
        return;
      }
      this.wake = undefined;
      this.plan = undefined;
      this.pump();
    };
    this.wake = { atMs, handle: this.clock.setTimer(Math.max(0, atMs - this.clock.now()), fire) };
  }

  private launch(group: readonly LaunchSegment[], members: readonly (readonly Unit[])[], predictedMs: number | undefined, decidedAhead: boolean, fallback: boolean): void {
    const { units, segments } = segmentsOf(this.book, group, members, this.groupCount);
    if (units.length === 0) return;
    const launchMs = this.clock.now();
    const idleBeforeMs = this.idleSinceMs === undefined ? undefined : launchMs - this.idleSinceMs;
    const record = groupRecordOf({ index: this.groupCount++, launchMs, predictedMs, decidedAhead, fallback, idleBeforeMs }, segments, units);
    if (this.keepRecords) this.groups.push(record);
    markLaunched(this.book, record, units, this.controller.launchWhileBusy);
    this.inFlightGroups++;
    this.idleSinceMs = undefined;
    if (!this.controller.launchWhileBusy) this.running = record;
    else this.inFlight.set(record, units);
    let running: Promise<GroupResult>;
    try {
      running = this.device.runGroup(segments);
    } catch (err) {
      running = Promise.reject(err instanceof Error ? err : new Error(String(err)));
    }
    running.then(
      (result) => this.groupDone(record, units, result),
      (err: unknown) => this.groupFailed(record, units, err),
    );
  }

  private groupDone(record: GroupRecord, units: Unit[], result: GroupResult): void {
    const endMs = this.clock.now();
    this.inFlightGroups--;
    this.inFlight.delete(record);
    if (this.running === record) this.running = undefined;
    record.measuredMs = result.groupLatencyMs;
    // The decision made ahead holds if the group ended as that decision assumed — every segment
    // ran — and its group still fits: it starts no later than planned, or, started now, it is
    // predicted to end by the earliest deadline of its queries (the budget every head policy
    // holds a group to). A later start that breaks that budget may call for another group.
    const plan = this.plan;
    if (plan !== undefined && (result.segments.some((r) => !r.ok) || (endMs > plan.startMs && endMs + (plan.decision.predictedMs ?? Infinity) > plan.deadlineMs))) this.plan = undefined;
    let longestSegmentMs = 0;
    for (const r of result.segments) if (r.ok) longestSegmentMs = Math.max(longestSegmentMs, r.latencyMs);
    record.longestSegmentMs = longestSegmentMs;
    const executed = settleGroup(this.book, record, units, result);
    if (executed.length > 0) this.controller.observe({ segments: executed, groupLatencyMs: result.groupLatencyMs, ...(record.predictedMs === undefined ? {} : { predictedMs: record.predictedMs }) });
    this.onGroupEnd?.(record);
    this.markIdle(endMs);
    this.pump();
  }

  private groupFailed(record: GroupRecord, units: Unit[], err: unknown): void {
    const endMs = this.clock.now();
    this.inFlightGroups--;
    this.inFlight.delete(record);
    if (this.running === record) this.running = undefined;
    this.plan = undefined;
    record.measuredMs = Number.NaN;
    failGroup(this.book, units, err);
    this.onGroupEnd?.(record);
    this.markIdle(endMs);
    this.pump();
  }

  /**
   * One group at a time: the device has been idle since `sinceMs` (its group's end, as the
   * runtime saw it): note it when queries wait, for the next launch's `idleBeforeMs`.
   */
  private markIdle(sinceMs: number): void {
    if (this.controller.launchWhileBusy || this.inFlightGroups > 0) return;
    for (const state of this.book.services.values()) {
      if (state.queue.length > 0) {
        this.idleSinceMs = sinceMs;
        return;
      }
    }
  }
}
