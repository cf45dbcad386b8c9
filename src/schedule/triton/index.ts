/**
 * Triton Inference Server's dynamic batcher, as deployed with its defaults: one model instance
 * per model on the device (model_configuration.md "Instance Groups": by default one execution
 * instance per GPU), so each service runs at most one batch at a time while batches of
 * different services overlap on the device, uncontrolled (every instance has its own CUDA
 * stream). No latency prediction: Triton does not predict.
 *
 * Sources: Triton docs/user_guide/batcher.md ("Preferred Batch Sizes", "Delayed Batching",
 * "Queue Policy"), the batch formation of triton-inference-server/core
 * src/dynamic_batch_scheduler.cc (`GetDynamicBatch`), and core's model-config normalization
 * ("if preferred batch size is not specified set it to max-batch-size").
 */
import type { Decision, LaunchSegment, QueryController, Rejection, ScheduleInput, WaitingQuery } from '../controller.ts';
import { checkInput, checkQuery, compareStrings } from '../heads.ts';

export interface TritonParams {
  /**
   * Reject a query whose headroom is already ≤ 0 when a batch is formed from it: Triton's queue
   * policy `timeout_action: REJECT` with `default_timeout_microseconds` set to the QoS target.
   * Default on; off: every query is eventually launched, however late.
   */
  readonly drop: boolean;
}

const NO_STATS = Object.freeze({ predictorCalls: 0, groupsScored: 0, searchRounds: 0, soloMemoHits: 0 });

/** A batch one service's batcher sends now. */
interface Ready {
  readonly lead: WaitingQuery;
  readonly fused: readonly WaitingQuery[];
  /** The earliest deadline (arrivalMs + qosTargetMs) among the lead and `fused`, ms. */
  readonly deadlineMs: number;
}

/** What one service's batcher does at this decision: send a batch, or hold until `atMs`. */
type BatcherStep = { readonly ready: Ready } | { readonly holdUntilMs: number };

/** Earlier deadline first, then earlier lead arrival, service name, lead id. */
function before(a: Ready, b: Ready): boolean {
  const order =
    a.deadlineMs - b.deadlineMs ||
    a.lead.arrivalMs - b.lead.arrivalMs ||
    compareStrings(a.lead.service, b.lead.service) ||
    compareStrings(a.lead.id, b.lead.id);
  return order < 0;
}

/**
 * triton. `launchWhileBusy` and `oneGroupPerService`: the runtime shows only the queues of
 * services with no batch in flight, launches each decided group at once, and calls `decide`
 * again right after a launch, on every arrival and completion, and at `wakeAtMs`.
 *
 * Each decision forms, for every visible service, the batch its batcher would send now
 * (`GetDynamicBatch`), from the head of its queue in queue order:
 * 1. Queue policy (with `drop`): a query met while forming the batch whose headroom is ≤ 0 is
 *    rejected (`qos_violation`, no `predictedMs`) and skipped; the lead is the first query left.
 * 2. A lead without `batching` (its service does not batch) or already started is sent alone.
 * 3. Otherwise the following queries join in order while they carry `batching`, are at
 *    operator 0 and have the lead's `fuseKey`, and their samples keep the total ≤
 *    `maxBatchSize`; the first one of another shape (`fuseKey`) or that would not fit ends the
 *    batch, which then "cannot grow" (Triton sends a pending batch at once when the next
 *    request has another shape or would exceed the maximum batch size).
 * 4. Preferred sizes P = `preferredBatchSizes`, or [`maxBatchSize`] when empty (Triton's
 *    normalization). The preferred batch is the longest prefix whose samples are in P; when
 *    none is and the batch's samples would pass max(P), the prefix just below max(P).
 *    delayExceeded ⇔ maxQueueDelayMs > 0 and nowMs ≥ lead.arrivalMs + maxQueueDelayMs (the
 *    lead is the oldest query waiting).
 *    - a preferred batch exists and not delayExceeded: send it;
 *    - else, the batch cannot grow, or its samples ≥ max(P), or delayExceeded, or
 *      maxQueueDelayMs = 0: send the whole batch formed;
 *    - else hold the service until lead.arrivalMs + maxQueueDelayMs (with `drop`: or the
 *      earlier deadline of a member still in the future, so that it is rejected on time).
 * 5. Return ONE segment: the ready batch with the earliest deadline among its members (ties:
 *    lead arrival, service name, lead id), whole (`nextOperator` to the last operator), the
 *    followers in `fused`; `wakeAtMs` = the earliest hold of the other services (absent when
 *    none holds). No `predictedMs`; the group is empty only when every visible query was
 *    rejected or is held.
 * 6. Queue policy on the busy services (with `drop`): a query in `held` (its service's batch is in
 *    flight) whose deadline has passed is rejected (`qos_violation`) and `wakeAtMs` is at most
 *    the earliest deadline still ahead among them, so a hopeless query is answered at its
 *    deadline, as Triton's queue policy times a request out, not when its service's batch ends.
 *
 * With `maxQueueDelayMs` 0 and no preferred sizes this is greedy batching: as many samples as
 * wait, up to `maxBatchSize`, at once.
 */
export class TritonController implements QueryController {
  readonly policy = 'triton';
  readonly launchWhileBusy = true;
  readonly oneGroupPerService = true;
  readonly #params: TritonParams;

  /** `params` are taken as valid; construct through `createController` (`schedule/index.ts`) to validate them. */
  constructor(params: TritonParams) {
    this.#params = params;
  }

  get params(): TritonParams {
    return this.#params;
  }

  decide(input: ScheduleInput): Decision {
    checkInput(input);
    const rejected: Rejection[] = [];
    let chosen: Ready | undefined;
    let wakeAtMs = Infinity;
    for (const queue of input.queues) {
      const step = this.#formBatch(queue, input.nowMs, rejected);
      if (step === undefined) continue;
      if ('holdUntilMs' in step) wakeAtMs = Math.min(wakeAtMs, step.holdUntilMs);
      else if (chosen === undefined || before(step.ready, chosen)) chosen = step.ready;
    }
    // queue policy on the queues of busy services: time out at the deadline, wake at the next one
    if (this.#params.drop) {
      for (const queue of input.held ?? []) {
        for (const q of queue) {
          checkQuery(q);
          const deadlineMs = q.arrivalMs + q.qosTargetMs;
          if (deadlineMs <= input.nowMs) rejected.push({ queryId: q.id, service: q.service, reason: 'qos_violation', headroomMs: deadlineMs - input.nowMs });
          else wakeAtMs = Math.min(wakeAtMs, deadlineMs);
        }
      }
    }
    const wake = Number.isFinite(wakeAtMs) ? { wakeAtMs } : {};
    if (chosen === undefined) return { group: [], rejected, stats: NO_STATS, ...wake };
    const { lead, fused } = chosen;
    const segment: LaunchSegment = { queryId: lead.id, service: lead.service, start: lead.nextOperator, end: lead.operators };
    return { group: [fused.length === 0 ? segment : { ...segment, fused: fused.map((q) => q.id) }], rejected, stats: NO_STATS, ...wake };
  }

  observe(): void {
    // Triton neither predicts nor learns.
  }

  /** One service's batcher (steps 1–4 of the class docs); undefined when nothing is left to send. */
  #formBatch(queue: readonly WaitingQuery[], nowMs: number, rejected: Rejection[]): BatcherStep | undefined {
    const drop = this.#params.drop;
    /** Step 1: reject `q` when its headroom is ≤ 0 (with drop). */
    const timedOut = (q: WaitingQuery): boolean => {
      checkQuery(q);
      const headroomMs = q.qosTargetMs - (nowMs - q.arrivalMs);
      if (!drop || headroomMs > 0) return false;
      rejected.push({ queryId: q.id, service: q.service, reason: 'qos_violation', headroomMs });
      return true;
    };
    let i = 0;
    while (i < queue.length && timedOut(queue[i]!)) i++;
    const lead = queue[i++];
    if (lead === undefined) return undefined;
    const limits = lead.batching;
    let deadlineMs = lead.arrivalMs + lead.qosTargetMs;
    if (limits === undefined || lead.nextOperator !== 0) return { ready: { lead, fused: [], deadlineMs } };

    const preferred = limits.preferredBatchSizes.length > 0 ? limits.preferredBatchSizes : [limits.maxBatchSize];
    const maxPreferred = Math.max(...preferred);
    const members: WaitingQuery[] = [lead];
    /** deadlines[k]: the earliest deadline among members[0..k]. */
    const deadlines: number[] = [deadlineMs];
    let samples = lead.batch;
    /** Index of the last member of the preferred batch; -1: none. */
    let best = preferred.includes(samples) ? 0 : -1;
    let cannotGrow = samples >= limits.maxBatchSize;
    for (; i < queue.length && !cannotGrow; i++) {
      const q = queue[i]!;
      if (timedOut(q)) continue;
      if (q.batching === undefined || q.nextOperator !== 0 || q.fuseKey !== lead.fuseKey) {
        cannotGrow = true;
        break;
      }
      if (samples + q.batch > maxPreferred && best < 0) best = members.length - 1;
      if (samples + q.batch > limits.maxBatchSize) {
        cannotGrow = true;
        break;
      }
      samples += q.batch;
      deadlineMs = Math.min(deadlineMs, q.arrivalMs + q.qosTargetMs);
      members.push(q);
      deadlines.push(deadlineMs);
      if (preferred.includes(samples)) best = members.length - 1;
      if (samples >= limits.maxBatchSize) cannotGrow = true;
    }

    const delayMs = limits.maxQueueDelayMs;
    const delayExceeded = delayMs > 0 && nowMs >= lead.arrivalMs + delayMs;
    let last: number;
    if (best >= 0 && !delayExceeded) last = best;
    else if (cannotGrow || samples >= maxPreferred || delayExceeded || delayMs === 0) last = members.length - 1;
    else {
      let holdUntilMs = lead.arrivalMs + delayMs;
      if (drop) {
        for (const q of members) {
          const d = q.arrivalMs + q.qosTargetMs;
          if (d > nowMs) holdUntilMs = Math.min(holdUntilMs, d);
        }
      }
      return { holdUntilMs };
    }
    return { ready: { lead, fused: members.slice(1, last + 1), deadlineMs: deadlines[last]! } };
  }
}
