/**
 * A scripted fusing controller for the batching tests (runtime, ort and sim devices): no
 * prediction, no dropping, fully determined by its options, so a test knows exactly which
 * queries are fused and where each segment ends.
 *
 * Each decision takes the queue whose head arrived first (ties: the order the runtime passes
 * the queues in), and launches that head fused with every follower that `fusionPlan`
 * (`src/schedule/heads.ts`) allows — up to `maxFollowers` — from its next operator to the
 * first of `cuts` above it (else to the model's end). A query that `reject` picks is rejected
 * (`qos_violation`, headroom as seen) instead; `gate` can hold everything until a given time.
 */
import type { Decision, LaunchSegment, QueryController, Rejection, ScheduleInput, WaitingQuery } from '../../src/schedule/controller.ts';
import { fusionPlan } from '../../src/schedule/heads.ts';

export interface FusingControllerOptions {
  /**
   * Operator indices where segments stop: a query at `nextOperator` s runs `[s, c)` with c the
   * smallest cut > s, else `[s, operators)` (empty: whole model in one segment).
   */
  readonly cuts?: readonly number[];
  /** Followers fused behind a head, at most [Infinity: every one `fusionPlan` allows]. */
  readonly maxFollowers?: number;
  /** Queries to reject (answered `qos_violation`) instead of launching. */
  readonly reject?: (q: WaitingQuery) => boolean;
  /**
   * Launch nothing while this returns a time (ms): the decision is empty with
   * `wakeAtMs` = that time (as a batcher that waits on purpose). Undefined: decide normally.
   */
  readonly gate?: (input: ScheduleInput) => number | undefined;
  /**
   * Launch while other groups run, one group per service at a time (as Triton with one model
   * instance: `launchWhileBusy` and `oneGroupPerService`) [false: one group at a time].
   */
  readonly launchWhileBusy?: boolean;
}

/** The scripted controller, with a copy of every input it was asked to decide on. */
export interface ScriptedFusingController extends QueryController {
  readonly seen: { readonly nowMs: number; readonly queues: readonly (readonly WaitingQuery[])[] }[];
}

const NO_STATS = Object.freeze({ predictorCalls: 0, groupsScored: 0, searchRounds: 0, soloMemoHits: 0 });

export function fusingController(options: FusingControllerOptions = {}): ScriptedFusingController {
  const cuts = [...(options.cuts ?? [])].sort((a, b) => a - b);
  const maxFollowers = options.maxFollowers ?? Infinity;
  const seen: { nowMs: number; queues: WaitingQuery[][] }[] = [];
  const decide = (input: ScheduleInput): Decision => {
    seen.push({ nowMs: input.nowMs, queues: input.queues.map((q) => [...q]) });
    const wakeAtMs = options.gate?.(input);
    if (wakeAtMs !== undefined) return { group: [], rejected: [], stats: NO_STATS, wakeAtMs };
    const rejected: Rejection[] = [];
    let queue: WaitingQuery[] | undefined;
    for (const q of input.queues) {
      const live: WaitingQuery[] = [];
      for (const w of q) {
        if (options.reject?.(w) === true) rejected.push({ queryId: w.id, service: w.service, reason: 'qos_violation', headroomMs: w.qosTargetMs - (input.nowMs - w.arrivalMs) });
        else live.push(w);
      }
      if (live.length > 0 && (queue === undefined || live[0]!.arrivalMs < queue[0]!.arrivalMs)) queue = live;
    }
    if (queue === undefined) return { group: [], rejected, stats: NO_STATS };
    const head = queue[0]!;
    const plan = fusionPlan(queue, 0);
    const fused = plan.followers.slice(0, maxFollowers).map((f) => f.id);
    const end = cuts.find((c) => c > head.nextOperator && c < head.operators) ?? head.operators;
    const segment: LaunchSegment = { queryId: head.id, service: head.service, start: head.nextOperator, end, ...(fused.length > 0 ? { fused } : {}) };
    return { group: [segment], rejected, stats: NO_STATS };
  };
  const busy = options.launchWhileBusy === true;
  return { policy: 'fcfs', launchWhileBusy: busy, ...(busy ? { oneGroupPerService: true } : {}), seen, decide, observe: () => undefined };
}
