/**
 * The runtime's data (`runtime.ts`): the services, requests and outcomes of its API; the units it
 * runs (a query alone or a fused batch) and what the controller is shown of them; and the checks
 * of a decision against them. Pure functions over that data; the runtime owns and mutates it.
 */
import type { Clock } from '../clock/clock.ts';
import type { Device } from '../device/device.ts';
import { batchFusionBlocker } from '../model/boundary.ts';
import type { ModelSpec } from '../model/spec.ts';
import type { BatchingLimits, Decision, LaunchSegment, QueryController, RunningSegment, WaitingQuery } from '../schedule/controller.ts';
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
  /**
   * Most queries waiting in its queue (≥ 1); more are rejected `overloaded`. Queries whose segment
   * is running do not count (a query between two of its segments does), except under a
   * `launchWhileBusy` policy, whose running queries nothing else bounds.
   */
  readonly maxQueueLength: number;
  /**
   * Dynamic batching: the controller may fuse up to `maxBatchSize` samples of waiting queries
   * into one segment. Absent: every query runs alone at its own batch. Only for models whose
   * inputs and outputs all have the batch axis as dim 0 (`batchFusionBlocker`).
   */
  readonly batching?: BatchingLimits;
}

export interface RuntimeOptions {
  readonly clock: Clock;
  /** A device with every service already loaded under its `name`. */
  readonly device: Device;
  readonly controller: QueryController;
  readonly services: readonly RuntimeService[];
  /** Accept an empty `services` (services come later with `addService`) [false]. */
  readonly allowNoServices?: boolean;
  /**
   * Keep every query and group record in `queries` / `groups` [true]. Turn off for very long
   * simulations; `onRecord` still sees each finished query.
   */
  readonly keepRecords?: boolean;
  /**
   * One group at a time: decide the next group while one runs and launch it the moment the
   * device is free (see "The loop") [true]. False: decide only when the device is idle — the
   * baseline the idle-gap benchmark compares against; rejections then wait for the running
   * group to end.
   */
  readonly decideAhead?: boolean;
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

/** One query until its outcome. */
export interface Pending {
  readonly record: QueryRecord;
  /**
   * Set while the query's group runs, by `cancel` (`cancelled`) or by a decision made ahead that
   * rejected it (`qos_violation`): it ends so when that group finishes, unless the group
   * completes it (its outputs are then delivered).
   */
  endAfterGroup: { readonly reason: RejectionReason; readonly message: string } | undefined;
  readonly resolve: (outcome: QueryOutcome) => void;
  /** The device query it runs in (its own, or a fused batch). */
  unit: Unit;
  /** Its first row in `unit`'s batch. */
  offset: number;
}

/** One device query: a query alone, or a fused batch of several queries of one service. */
export interface Unit {
  /** The device's query id and the controller's `WaitingQuery.id`. */
  readonly id: string;
  readonly state: ServiceState;
  /** Members not ended yet, in batch order (a query alone: itself). */
  readonly members: Pending[];
  /** Samples of the whole unit (ended members' rows included). */
  readonly samples: number;
  readonly seqLen: number;
  /** Input tensors of the whole unit (`samples` rows); undefined: synthetic from `seed`. */
  readonly inputs: TensorMap | undefined;
  readonly seed: number;
  /** Whether it is a fused batch (outputs are split among its members). */
  readonly fused: boolean;
  nextOperator: number;
  inFlight: boolean;
  /** While `inFlight`: the end operator of its running segment (where it will wait next unless that is its last). */
  runEnd: number;
  /** The controller's view (kept in step with `nextOperator` and the members' deadlines). */
  view: WaitingQuery;
}

export interface ServiceState {
  readonly service: RuntimeService;
  readonly queue: Unit[];
  /** `queue[i].view` at index i, kept in step with `queue`: what `decide` sees, with no copy per decision. */
  readonly views: WaitingQuery[];
  /** Queries (not units) of this service not ended: waiting or running in `queue`, or running after a `launchWhileBusy` launch took them out of it. */
  queries: number;
  /** Groups in flight that hold a unit of this service. */
  running: number;
  /** Queries (of `queries`) in a unit whose segment is running now: `queries − runningQueries` wait. */
  runningQueries: number;
}

/** Counters of the runtime since creation. */
export interface RuntimeCounters {
  readonly submitted: number;
  readonly completed: number;
  readonly rejected: number;
  readonly groups: number;
  readonly pending: number;
}

/** @throws RangeError naming the service and the field of bad batching limits or a model that cannot fuse. */
export function checkBatching(s: RuntimeService, b: BatchingLimits): void {
  const at = `ServingRuntime: service '${s.name}' batching`;
  if (!Number.isInteger(b.maxBatchSize) || b.maxBatchSize < 1) throw new RangeError(`${at}.maxBatchSize must be an integer ≥ 1, got ${b.maxBatchSize}`);
  if (!(Number.isFinite(b.maxQueueDelayMs) && b.maxQueueDelayMs >= 0)) throw new RangeError(`${at}.maxQueueDelayMs must be a finite number ≥ 0, got ${b.maxQueueDelayMs}`);
  b.preferredBatchSizes.forEach((n, i) => {
    if (!Number.isInteger(n) || n < 1 || n > b.maxBatchSize || (i > 0 && n <= b.preferredBatchSizes[i - 1]!)) {
      throw new RangeError(`${at}.preferredBatchSizes must be ascending integers in [1, maxBatchSize ${b.maxBatchSize}], got [${b.preferredBatchSizes.join(', ')}]`);
    }
  });
  const blocker = batchFusionBlocker(s.spec);
  if (blocker !== undefined) throw new RangeError(`${at}: queries cannot be fused: ${blocker}`);
}

/**
 * The key queries must share to be fused: the sequence length, and for client tensors the
 * non-batch dims of every input (in the model's input order); synthetic inputs never fuse
 * with client tensors.
 */
export function fuseKeyOf(spec: ModelSpec, seqLen: number, inputs: TensorMap | undefined): string {
  if (inputs === undefined) return `synthetic seq=${seqLen}`;
  return `tensors seq=${seqLen} ${spec.inputs.map((t) => (inputs[t.name]?.dims ?? []).slice(1).join('x')).join(';')}`;
}

/** `launchWhileBusy`: the segments in flight (`ScheduleInput.running`); undefined when none. */
export function runningSegmentsOf(inFlight: ReadonlyMap<GroupRecord, readonly Unit[]>): RunningSegment[] | undefined {
  if (inFlight.size === 0) return undefined;
  const out: RunningSegment[] = [];
  for (const [record, units] of inFlight) {
    units.forEach((u, i) => {
      const seg = record.segments[i]!;
      let deadlineMs = Infinity;
      for (const p of u.members) deadlineMs = Math.min(deadlineMs, p.record.arrivalMs + p.record.qosTargetMs);
      const spec = u.state.service.spec;
      out.push({ queryId: u.id, service: seg.service, model: spec.name, operators: spec.operators.length, start: seg.start, end: seg.end, batch: u.samples, seqLen: u.seqLen, launchMs: record.launchMs, deadlineMs, ...(record.predictedMs === undefined ? {} : { predictedMs: record.predictedMs }) });
    });
  }
  return out;
}

/** `oneGroupPerService`: the waiting queries of services whose batch is in flight (`ScheduleInput.held`); undefined when none. */
export function heldQueuesOf(services: Iterable<ServiceState>, oneGroupPerService: boolean): WaitingQuery[][] | undefined {
  if (!oneGroupPerService) return undefined;
  const held: WaitingQuery[][] = [];
  for (const state of services) {
    if (state.running === 0 || state.queue.length === 0) continue;
    const views = state.queue.filter((u) => !u.inFlight).map((u) => u.view);
    if (views.length > 0) held.push(views);
  }
  return held.length === 0 ? undefined : held;
}

/** The earliest deadline (arrival + QoS target, clock ms) among the queries of a decided group's units. */
export function earliestDeadlineMs(members: readonly (readonly Unit[])[]): number {
  let deadlineMs = Infinity;
  for (const units of members) for (const u of units) for (const p of u.members) deadlineMs = Math.min(deadlineMs, p.record.arrivalMs + p.record.qosTargetMs);
  return deadlineMs;
}

/**
 * What `decide` is shown, or undefined when no query waits: every service's queue (a service
 * running a group hidden for `oneGroupPerService`). `ahead`: the queues as they will be when the
 * running group ends — a unit in flight whose segment ends its query is left out (the queries
 * behind it show), one whose segment stops earlier shows at its segment's end, and one whose
 * every member ends after the group (cancelled, rejected ahead) is left out, wherever it sits in
 * its queue. Without `ahead` a queue whose head is in flight is hidden (one group at a time
 * decides only when none runs).
 */
export function visibleQueuesOf(services: Iterable<ServiceState>, oneGroupPerService: boolean, ahead: boolean): WaitingQuery[][] | undefined {
  const queues: WaitingQuery[][] = [];
  for (const state of services) {
    if (state.queue.length === 0) continue;
    if (oneGroupPerService && state.running > 0) continue;
    // ahead, a unit in flight may sit anywhere in its queue (a policy may launch a later query first: adaptive LIFO)
    if (ahead ? state.running === 0 : !state.queue[0]!.inFlight) {
      queues.push(state.views);
      continue;
    }
    if (!ahead) continue;
    const views: WaitingQuery[] = [];
    for (const u of state.queue) {
      if (!u.inFlight) views.push(u.view);
      else if (u.runEnd < u.view.operators && u.members.some((p) => p.endAfterGroup === undefined)) {
        const { batching: _batching, fuseKey: _fuseKey, ...rest } = u.view;
        views.push({ ...rest, nextOperator: u.runEnd });
      }
    }
    if (views.length > 0) queues.push(views);
  }
  return queues.length === 0 ? undefined : queues;
}

/**
 * A decision the runtime can carry out: every launched query waits at its segment's start and
 * appears in one segment only, fused queries can be fused, no launched query is also rejected,
 * and a `launchWhileBusy` policy launches whole queries (its launched queries leave the queues,
 * so the rest of a cut one would never run).
 * @returns per segment of the group, the units it names, lead first (what `launch` runs).
 * @throws Error (internal) naming the controller and the query when it broke the contract —
 *   `pump` answers it like a `decide` that threw, so a controller bug fails queries instead of
 *   escaping from a timer or device callback and leaving every query unanswered.
 */
export function checkDecisionOf(units: ReadonlyMap<string, Unit>, controller: Pick<QueryController, 'policy' | 'launchWhileBusy'>, decision: Decision, ahead: boolean): Unit[][] {
  // no Sets for the common decision (one unit, nothing rejected): this runs for every decision
  const taken: Unit[] = [];
  const rejected = decision.rejected.length === 0 ? undefined : new Set(decision.rejected.map((r) => r.queryId));
  const all: Unit[][] = [];
  for (const s of decision.group) {
    const members = membersOf(units, controller, s, ahead);
    all.push(members);
    const operators = members[0]!.view.operators;
    if (controller.launchWhileBusy && s.end !== operators) {
      throw new Error(`controller ${controller.policy} launched query '${s.queryId}' up to operator ${s.end} of ${operators}: a launchWhileBusy policy launches whole queries only (internal error)`);
    }
    for (const u of members) {
      if (taken.includes(u) || rejected?.has(u.id) === true) throw new Error(`controller ${controller.policy} launched query '${u.id}' twice or also rejected it (internal error)`);
      taken.push(u);
    }
  }
  return all;
}

/**
 * The units a launch segment names, lead first (a unit named twice is `checkDecision`'s to catch).
 * `ahead` (a decision made while a group runs): a unit of that group may be named at its running
 * segment's end, where it will wait.
 * @throws Error (internal) when the controller broke the contract.
 */
function membersOf(units: ReadonlyMap<string, Unit>, controller: Pick<QueryController, 'policy'>, s: LaunchSegment, ahead: boolean): Unit[] {
  const lead = units.get(s.queryId);
  const waitsAt = lead === undefined ? -1 : !lead.inFlight ? lead.nextOperator : ahead && lead.runEnd < lead.view.operators ? lead.runEnd : -1;
  if (lead === undefined || s.start !== waitsAt) {
    throw new Error(`controller ${controller.policy} launched query '${s.queryId}' at operator ${s.start}, which is not waiting there (internal error)`);
  }
  const members: Unit[] = [lead];
  if (s.fused === undefined || s.fused.length === 0) return members;
  const limits = lead.view.batching;
  for (const id of s.fused) {
    const u = units.get(id);
    if (limits === undefined || u === undefined || u.inFlight || u.fused || u.nextOperator !== 0 || u.state !== lead.state || u.view.fuseKey !== lead.view.fuseKey || lead.inFlight || lead.nextOperator !== 0 || lead.fused) {
      throw new Error(`controller ${controller.policy} fused query '${id}' with '${s.queryId}', which cannot be fused (internal error)`);
    }
    members.push(u);
  }
  const samples = members.reduce((n, u) => n + u.samples, 0);
  if (samples > limits!.maxBatchSize) throw new Error(`controller ${controller.policy} fused ${samples} samples of service '${lead.state.service.name}' (maxBatchSize ${limits!.maxBatchSize}) (internal error)`);
  return members;
}

/** Rebuild a fused unit's view: its samples, next operator, and its most urgent live member's deadline. */
export function refreshView(u: Unit): void {
  const first = u.members[0];
  if (first === undefined) return;
  let deadline = Infinity;
  for (const p of u.members) deadline = Math.min(deadline, p.record.arrivalMs + p.record.qosTargetMs);
  const v = u.view;
  u.view = { id: u.id, service: v.service, model: v.model, operators: v.operators, nextOperator: u.nextOperator, batch: u.samples, seqLen: u.seqLen, arrivalMs: first.record.arrivalMs, qosTargetMs: deadline - first.record.arrivalMs };
  const i = u.state.queue.indexOf(u);
  if (i >= 0) u.state.views[i] = u.view;
}
