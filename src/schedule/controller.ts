/**
 * The QueryController contract (docs/design.md#controller-and-schedule; the generalized Abacus
 * query controller in docs/design.md#the-abacus-controller and docs/scheduling-runtime.md): given the queries waiting in each service's FIFO queue, pick the next
 * operator group to launch and the queries to reject. Interfaces only; the policies live
 * beside this file (`abacus/`, `one-at-a-time/` = fcfs | sjf | edf | fcfs-batch | edf-batch,
 * `overlap-all/`, `clockwork/`, `triton/`), the factory with parameter validation in `index.ts`.
 *
 * Ownership: the runtime owns the queues, the clock, the device and every query's record; a
 * controller owns nothing but its parameters and, for feedback-driven policies (clockwork),
 * its measurement history. `decide` reads its input and never mutates it; it is synchronous,
 * reads no clock (time comes in as `nowMs`) and sets no timer (a policy that waits on purpose
 * returns `Decision.wakeAtMs`). Deliberately left out: admission on enqueue (`overloaded`),
 * device failures, concatenating and splitting the tensors of a fused batch — those are the
 * runtime's.
 *
 * ## Dynamic batching (docs/batching.md)
 * A service with `BatchingLimits` lets a policy fuse several of its waiting queries into ONE
 * segment along the batch axis (dim 0): `LaunchSegment.fused` lists the queries fused behind
 * `queryId`. Only queries that have run no operator yet (`nextOperator === 0`), carry
 * `batching`, and share the lead's `fuseKey` fuse; the fused samples (Σ `batch`) stay ≤
 * `maxBatchSize`. From its launch on a fused batch is one query to the controller: the runtime
 * shows it under a new id with `batch` = its samples, no `batching` (nothing joins it later),
 * and the deadline of its most urgent member (`arrivalMs` of its first member, `qosTargetMs`
 * shortened to match), until it completes; rejecting that id rejects every member. Policies
 * may look past a queue's head to pick the queries they fuse (in queue order).
 *
 * Driving loop (what the runtime does; `launchWhileBusy === false`, every policy but
 * overlap-all and triton):
 *
 *     when the device is idle:
 *       d = the decision made ahead (below) if it still holds, else
 *           controller.decide({ nowMs: clock.now(), queues, runningRemainingMs: 0 })
 *       for r of d.rejected: remove r.queryId from its queue, answer `qos_violation`,
 *                            device.releaseQuery(...) when it had started
 *       launch d.group (empty: every visible query was rejected, or none waited)
 *     while a group runs (on its launch, every arrival, cancellation, and at `wakeAtMs`):
 *       decide ahead: controller.decide({ nowMs, queues as they will be when the group ends,
 *                                         runningRemainingMs: its predicted remainder })
 *       answer the rejections now (a query of the running group: when the group ends);
 *       keep the group, and launch it the moment the device is free — unless an arrival, a
 *       cancellation, a failed segment, a wake, or the running group ending later than
 *       predicted changed the picture first (then decide again)
 *     on completion: set nextOperator = end, pop finished queries, controller.observe({...})
 *
 * Deciding ahead hides the decision latency behind execution (the paper's runtime does the
 * same) and answers a query that cannot finish behind the running group at once: the head
 * policies that drop (abacus, fcfs/sjf/edf and their -batch forms, clockwork) judge a head as
 * if it started after `runningRemainingMs`, and report in `wakeAtMs` the instant a kept head
 * becomes hopeless, so a waiting query is rejected on time even when no event comes.

 * `launchWhileBusy === true` (overlap-all: uncontrolled overlap, as MPS or Triton instance
 * groups; triton: Triton's dynamic batcher, one instance per model, `oneGroupPerService`; abacus
 * with `barrier: false`, `oneGroupPerService`, `abacus/stream.ts`): the runtime calls `decide` on
 * every arrival (and whenever it likes) and launches the returned group at once, concurrently
 * with groups still running, and shows the segments in flight in `ScheduleInput.running`; such a
 * policy only launches whole queries, so a launched query leaves the waiting queues for good.
 */
import type { AbacusErrorCode } from '../errors.ts';

/** The policies `createController` knows. */
export type PolicyName = 'abacus' | 'fcfs' | 'sjf' | 'edf' | 'fcfs-batch' | 'edf-batch' | 'overlap-all' | 'clockwork' | 'triton';

/**
 * A service's dynamic-batching limits: Triton's `dynamic_batching` fields (model
 * configuration, `max_batch_size`, `max_queue_delay_microseconds` in ms, `preferred_batch_size`),
 * camelCase. One frozen object per service, shared by all its waiting queries.
 */
export interface BatchingLimits {
  /** Most samples one fused segment may carry, an integer ≥ 1 (default 16: Clockwork's `max_batch`). */
  readonly maxBatchSize: number;
  /**
   * How long a batcher may hold the oldest waiting query to let a larger batch form, ms ≥ 0
   * (Triton's `max_queue_delay_microseconds` / 1000, default 0: launch what is there). Only the
   * `triton` policy waits; the others are work-conserving and ignore it.
   */
  readonly maxQueueDelayMs: number;
  /** Batch sizes a batcher launches as soon as it can form one (Triton's `preferred_batch_size`), ascending, each ≤ maxBatchSize; empty: none. `triton` only. */
  readonly preferredBatchSizes: readonly number[];
}

/** A query waiting for its next segment, as the controller sees it. */
export interface WaitingQuery {
  /** Unique across the runtime (the device's `queryId`). */
  readonly id: string;
  readonly service: string;
  /** Model name as the predictor knows it (`GroupSlot.model`). */
  readonly model: string;
  /** Operators of the model (N), an integer ≥ 1. */
  readonly operators: number;
  /** First operator of the next segment: 0 before the query ran, then the previous segment's `end`; `0 ≤ nextOperator < operators`. */
  readonly nextOperator: number;
  /** Samples (batch size), an integer ≥ 1. */
  readonly batch: number;
  /** Sequence length for models with a sequence axis; 0 otherwise. */
  readonly seqLen: number;
  /** Arrival time on the runtime's clock, ms. */
  readonly arrivalMs: number;
  /** QoS target: end-to-end latency bound, ms. headroomMs = qosTargetMs − (nowMs − arrivalMs). */
  readonly qosTargetMs: number;
  /**
   * Present when this query may be fused with others of its service (its service batches
   * dynamically and the query has run no operator yet); absent: it runs alone at its `batch`.
   */
  readonly batching?: BatchingLimits;
  /**
   * Queries of one service fuse only when their `fuseKey`s are equal: the same non-batch dims
   * (sequence length, the dims of real input tensors) and the same kind of input (client
   * tensors vs synthetic). Set whenever `batching` is.
   */
  readonly fuseKey?: string;
}

/** Everything one decision depends on (besides a feedback-driven policy's history). */
export interface ScheduleInput {
  /** Current time on the runtime's clock, ms. */
  readonly nowMs: number;
  /**
   * One FIFO per service, head first: the queries that may be launched now. A query whose
   * segment is in flight is not waiting: while a service's head has a segment in flight the
   * runtime passes that service's queue empty (the rest of it waits behind the head). For a
   * `launchWhileBusy` policy: every query of the service not launched yet. Services with no
   * waiting query may be passed as empty arrays or left out; their order is irrelevant to
   * every policy (ties are broken by service name, not position).
   *
   * Head policies (all but overlap-all and triton) look past a queue's head only to replace a
   * head they reject in the same decision and to pick the queries they fuse behind it, so a
   * launched lead is the first of its queue once the decision's rejections are removed — but
   * for abacus's calibration fallback (`Decision.fallback`), which may pass over a kept head at
   * risk of finishing late for a safe query behind it (`fallback.ts`, "Choosing a safe query"):
   * the head stays in its queue and the decision's `wakeAtMs` is no later than the first
   * instant after its deadline, so it is still answered on time. The runtime launches any
   * waiting query a decision names.
   *
   * A decision made ahead (while a group runs, `runningRemainingMs` > 0 or not) sees the queues
   * as they will be when that group ends: a query of the running group whose segment completes
   * it is not shown (the queries behind it are), one whose segment stops earlier is shown
   * waiting at that segment's end (`nextOperator` = its `end`, without `batching`).
   */
  readonly queues: readonly (readonly WaitingQuery[])[];
  /**
   * Predicted time (ms) until the group still executing finishes, ≥ 0; 0 when the device is
   * idle. The new group starts after it, so policies subtract it from the time left (abacus
   * step 3, clockwork's estimated finish), and the dropping head policies judge a head as if it
   * started then (rejected when remaining solo + this > its headroom).
   */
  readonly runningRemainingMs: number;
  /**
   * `oneGroupPerService` policies only: the waiting queries of the services whose batch is in
   * flight (hidden from `queues`), one FIFO per service. They may not be launched now; a policy
   * with a queue timeout may reject them, and report its next timeout in `wakeAtMs`, so that a
   * query is timed out at its deadline rather than when its service's batch ends (Triton's queue
   * policy). Absent or empty: none.
   */
  readonly held?: readonly (readonly WaitingQuery[])[];
  /**
   * `launchWhileBusy` policies only: the segments running now, each launched as its own group
   * (the runtime passes them to every such policy; abacus without the group barrier predicts a
   * new launch against their remainders, `abacus/stream.ts`). Absent or empty: none runs.
   */
  readonly running?: readonly RunningSegment[];
}

/** A segment in flight, as a `launchWhileBusy` policy sees it (`ScheduleInput.running`). */
export interface RunningSegment {
  /** The running query (a fused batch's own id). */
  readonly queryId: string;
  readonly service: string;
  /** Model name as the predictor knows it. */
  readonly model: string;
  /** Operators of the model (N). */
  readonly operators: number;
  /** Operators `[start, end)` of the running segment. */
  readonly start: number;
  readonly end: number;
  /** Samples it carries (a fused batch: all its members'). */
  readonly batch: number;
  readonly seqLen: number;
  /** When its group was launched, clock ms. */
  readonly launchMs: number;
  /** The latency its group was decided with (`Decision.predictedMs`), ms; absent when the policy gave none. */
  readonly predictedMs?: number;
  /** The earliest deadline (`arrivalMs + qosTargetMs`, clock ms) among the queries it carries that have not ended. */
  readonly deadlineMs: number;
}

/** One segment of the decided group: operators `[start, end)` of a waiting query. */
export interface LaunchSegment {
  readonly queryId: string;
  readonly service: string;
  /** Always the query's `nextOperator`. */
  readonly start: number;
  /** Exclusive, `start < end ≤ operators`; `end === operators` completes the query. */
  readonly end: number;
  /**
   * Further queries of the same service fused behind `queryId` into this segment along the
   * batch axis, in that order (absent or empty: `queryId` alone). Each is waiting at operator 0,
   * carries `batching` and the lead's `fuseKey`, and is disjoint from every other segment and
   * rejection; the samples of the lead and all of them are ≤ `batching.maxBatchSize`.
   */
  readonly fused?: readonly string[];
  /**
   * Intra-op threads for the segment (cores as a decision, docs/threads.md), an integer ≥ 1,
   * passed by the runtime into the device's `Segment.intraOpThreads`; absent: the device's
   * default. Set by a policy with a thread rule (`threads` parameter, `schedule/threads.ts`).
   */
  readonly intraOpThreads?: number;
}

/** A query the controller gives up on; the runtime answers it with `reason` and removes it. */
export interface Rejection {
  readonly queryId: string;
  readonly service: string;
  readonly reason: Extract<AbacusErrorCode, 'qos_violation'>;
  /** Its headroom at `nowMs`, ms (≤ 0, or less than `predictedMs`). */
  readonly headroomMs: number;
  /**
   * The predicted time to finish it (ms) that exceeded `headroomMs`: `runningRemainingMs` +
   * its remaining solo latency (abacus, fcfs/sjf/edf and -batch: the predictor's; clockwork: its
   * measured estimate when it has one). Absent when the headroom alone decided (≤ 0, nothing
   * predicted).
   */
  readonly predictedMs?: number;
}

/**
 * Cheap per-decision counters for the "scheduling decision latency" bench and the runtime's
 * records. All counts, no timings (the controller reads no clock).
 */
export interface DecisionStats {
  /** Calls to `Predictor.predict`. */
  readonly predictorCalls: number;
  /** Groups scored over those calls (candidates evaluated). */
  readonly groupsScored: number;
  /** Rounds of abacus' multi-way cut-point search (0 for the other policies). */
  readonly searchRounds: number;
  /**
   * Heads whose remaining solo latency came from the controller's memo of earlier predictions
   * instead of a predictor call (`heads.ts` `SoloMemo`; not counted in `groupsScored`).
   */
  readonly soloMemoHits: number;
}

/** The outcome of one `decide`. */
export interface Decision {
  /**
   * Segments to launch together, at most one per query, in the policy's order (abacus: most
   * urgent first; overlap-all: queue order). Empty when nothing is to be launched:
   * for every policy here that happens only when no query waits or every visible query is in
   * `rejected`, so after removing the rejections the queues are empty — except a batcher that
   * holds queries on purpose (`triton` within `maxQueueDelayMs`), which then sets `wakeAtMs`.
   */
  readonly group: readonly LaunchSegment[];
  /** Predicted group latency, ms ≥ 0. Absent for an empty group and for policies that do not predict (overlap-all). */
  readonly predictedMs?: number;
  /** Queries to answer with `qos_violation` and remove, in the order they were rejected. Disjoint from `group`. */
  readonly rejected: readonly Rejection[];
  readonly stats: DecisionStats;
  /**
   * Clock time (ms) at which to call `decide` again even if nothing arrives or finishes before:
   * a policy that holds queries on purpose (`triton` waiting up to `maxQueueDelayMs` for a
   * larger batch, or until a held query's deadline), and the dropping head policies — the first
   * instant a head they kept becomes hopeless if it still waits then (`heads.ts`
   * `hopelessAtMs`). Absent: decide again on the next arrival or completion only. The runtime
   * keeps the latest decision's wake (it saw the newest picture).
   */
  readonly wakeAtMs?: number;
  /** True when abacus's calibration fallback decided it: one query at a time, dropping on measured latencies (`schedule/fallback.ts`). */
  readonly fallback?: boolean;
}

/** A successfully executed segment, as the runtime reports it back. */
export interface ExecutedSegment {
  readonly queryId: string;
  readonly service: string;
  readonly model: string;
  readonly start: number;
  readonly end: number;
  /** Operators of the model (so `start === 0 && end === operators` means the whole query). */
  readonly operators: number;
  readonly batch: number;
  readonly seqLen: number;
  /** Device-measured segment latency (`SegmentResult.latencyMs`), ms. */
  readonly latencyMs: number;
  /** The intra-op threads it ran with (`LaunchSegment.intraOpThreads`); absent: the device's default. */
  readonly intraOpThreads?: number;
}

/** Feedback after a group finished: what ran and how long it took. */
export interface GroupObservation {
  /** The segments that succeeded (failed ones are left out; a group with none is not observed). */
  readonly segments: readonly ExecutedSegment[];
  /** Launch to last result, as the runtime saw it (`GroupResult.groupLatencyMs`), ms. */
  readonly groupLatencyMs: number;
  /** The decision's `predictedMs`, when it had one. */
  readonly predictedMs?: number;
}

/** How well a policy's online-refined predictor does (`RefiningPredictor`), for metrics and logs. */
export interface RefinementStatus {
  /** Mean absolute percentage error (a fraction) of the refined predictions over the last observed groups (500 by default); 0 before the first. */
  readonly rollingMape: number;
  /** The same for the offline predictor's predictions of the same groups. */
  readonly rollingBaseMape: number;
  /** Groups observed so far. */
  readonly observedGroups: number;
  /** True while the predictor is out of calibration and its predictions of overlapped groups are inflated (the guard, `predict/refine.ts`). */
  readonly guardActive: boolean;
  /** The factor (≥ 1) the guard multiplies the prediction of an overlapped group by now; 1 while calibrated. */
  readonly guardFactor: number;
}

/** abacus's calibration fallback (`schedule/fallback.ts`), as `/metrics`, the dashboard and the benchmarks read it. */
export interface FallbackStatus {
  /** True while serving one query at a time. */
  readonly active: boolean;
  /** Switches into the fallback so far. */
  readonly entries: number;
  /** Groups observed, and of them decided in the fallback. */
  readonly observedGroups: number;
  readonly fallbackGroups: number;
  /** Share of the window's groups that overran the latency they were decided with (fraction). */
  readonly overrunShare: number;
  /** Groups the current (or next) fallback lasts at least. */
  readonly dwellGroups: number;
  /** With the interference trigger (abacus `interference`): whether the neighbours hold it one query at a time now (`active` is then true too). */
  readonly crowded?: boolean;
  /** With the interference trigger: whether the neighbours contend for every core, holding it one query at a time at the fallback's count (`active` is then true too). */
  readonly contended?: boolean;
  /** With the interference trigger: the cores the other processes want, averaged (`device/neighbours.ts`); absent until known. */
  readonly neighbourCores?: number;
}

/** What the calibration fallback asks of the machine (`fallback.ts` "Interference"; on Linux `device/neighbours.ts` `ProcNeighbours`). */
export interface CpuNeighbours {
  /** The machine's cores. */
  readonly cores: number;
  /**
   * Runnable threads of other processes, averaged (cores wanted, ≥ 0), as of `nowMs` (ms on the
   * runtime's clock, wall time on a real device); undefined where unknown.
   */
  demandCores(nowMs: number): number | undefined;
}

/**
 * A query-control policy. Create through `createController` (`schedule/index.ts`); one
 * instance per runtime (clockwork keeps history).
 */
export interface QueryController {
  readonly policy: PolicyName;
  /** Present while the policy refines its predictor online (abacus with `refine`); absent or undefined otherwise. */
  readonly refinement?: RefinementStatus | undefined;
  /** Present for abacus with `fallback`: whether it serves one query at a time now, and why (`schedule/fallback.ts`). */
  readonly fallback?: FallbackStatus | undefined;
  /**
   * `false`: one group at a time — the runtime launches the next group only after the
   * previous one finished. `true`: the runtime launches each decided group immediately, even
   * while others run (overlap-all, triton). See the module docs for both loops.
   */
  readonly launchWhileBusy: boolean;
  /**
   * With `launchWhileBusy`: each service runs at most one group at a time (Triton's default of
   * one model instance): while a group holding one of its queries runs, the runtime passes that
   * service's queue empty. Absent or false: no such limit (overlap-all).
   */
  readonly oneGroupPerService?: boolean;
  /**
   * The next operator group and the queries to reject. Deterministic: the same input (and the
   * same observations and `rejected` calls before it) gives the same decision; `decide` changes
   * no state of the controller (a controller that learns from its own drops learns in
   * `rejected`).
   * @throws RangeError naming the query and field for a malformed waiting query (operators,
   *   nextOperator, batch out of range, non-finite times) or a non-finite `nowMs` /
   *   negative `runningRemainingMs`; the predictor's RangeError for a model it does not know.
   */
  decide(input: ScheduleInput): Decision;
  /** Feedback after each executed group; policies that do not learn ignore it. Never throws for a well-formed observation. */
  observe(observation: GroupObservation): void;
  /**
   * The rejections of a decision the runtime carried out, told once per decision that has any,
   * right after `decide` returned it (the runtime answers every one of them). Optional: only a
   * controller that learns from its own drops has it (abacus's calibration fallback,
   * `schedule/fallback.ts`); a wrapper forwards it. Never throws.
   */
  rejected?(rejections: readonly Rejection[]): void;
}
