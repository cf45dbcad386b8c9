/**
 * The Abacus query controller (Cui et al., "Enable simultaneous DNN services based on
 * deterministic operator overlap and precise latency prediction", SC'21), generalized to
 * 1..N co-located services in one code path (DESIGN.md "The Abacus query controller
 * (generalized)"; the original artifact copies its search for 2, 3 and 4 queries).
 */
import type { Group, GroupSlot, Predictor } from '../../predict/predictor.ts';
import type { Decision, LaunchSegment, QueryController, Rejection, ScheduleInput } from '../controller.ts';
import { checkInput, collectHeads, compareUrgency, newStats, slotOf, SoloMemo } from '../heads.ts';

export interface AbacusParams {
  /** Cut points evaluated per search round (one batched predictor call), integer ≥ 2. Paper: 2. */
  readonly ways: number;
  /** Stop searching when budget − best feasible prediction < slackMs, ms ≥ 0. Paper: 5. */
  readonly slackMs: number;
  /** Reject hopeless heads (step 1). Paper: on. */
  readonly drop: boolean;
}

/**
 * Each decision, with the heads of the service queues (`ScheduleInput.queues`):
 *
 * 1. With `drop`: reject every head whose headroom is ≤ 0, or whose predicted remaining solo
 *    latency (all heads in ONE batched call) exceeds its headroom; a rejected head is replaced
 *    by the next query of its queue, scored in the next round (`heads.ts` `collectHeads`).
 * 2. Sort the survivors by headroom ascending — computed as the deadline `arrivalMs +
 *    qosTargetMs`, the same order, so equal deadlines tie exactly. Ties: earlier arrival, then
 *    service name (code-unit order), then query id. q0 runs all its remaining operators.
 * 3. budget = headroom(q0) − `runningRemainingMs` (the new group starts after the running one).
 * 4. ONE batched call predicts the prefixes P1 = {q0}, P2 = {q0,q1}, …, Pn (n ≤ the
 *    predictor's `maxSlots`), each query running all its remaining operators. A group *fits*
 *    when its prediction ≤ budget. k = the largest j such that Pj fits (each prefix is checked
 *    on its own, so a predictor that is not monotone in added work cannot stop the scan
 *    early); when none fits, k = 1: q0 is launched alone even though it does not fit. With
 *    drop on, P1's prediction is q0's solo prediction from step 1 (not asked again).
 * 5. When Pk fits and a next query q(k) exists (k < n), multi-way search of q(k)'s end
 *    operator e: the open interval (lo, hi) starts as (nextOperator, operators) — `lo` is known
 *    to fit (no operator of q(k)), `hi` is known not to (Pk+1 does not fit). Each round
 *    evaluates, in ONE batched call, Pk plus q(k) on `[nextOperator, e)` for `ways` cut points
 *    e_i = lo + round(i·(hi − lo)/(ways + 1)), i = 1..ways (every integer of the interval when
 *    it holds ≤ `ways`). The largest fitting e_i becomes `lo` (and the best cut), the next
 *    evaluated point above it becomes `hi` (when no e_i fits: hi = e_1). The search runs while
 *    the interval holds an integer and budget − best ≥ `slackMs`, where best starts as Pk's
 *    prediction — so with less than `slackMs` left after Pk no search is done.
 * 6. The group is Pk plus q(k) on `[nextOperator, best cut)` when a cut fitted; its predicted
 *    latency is the prediction of exactly that group. A query cut before its last operator
 *    stays at the head of its queue (the runtime advances its `nextOperator`).
 *
 * Since q0 has the least headroom, a group that fits q0's budget also fits every other
 * member's. The decision's counters: predictor calls = (rounds of step 1 that had a head the
 * controller's memo did not remember) + (1 for step 4 unless a lone q0's solo prediction is
 * known) + search rounds. The memo (`heads.ts` `SoloMemo`) returns exactly what the predictor
 * returned for the same slot earlier, so it changes the cost of a decision, never the decision.
 */
export class AbacusController implements QueryController {
  readonly policy = 'abacus';
  readonly launchWhileBusy = false;
  readonly #predictor: Predictor;
  readonly #params: AbacusParams;
  /** Step 1's remembered solo predictions (`heads.ts` `SoloMemo`: same values, fewer predictor calls). */
  readonly #memo = new SoloMemo();

  /** `params` are taken as valid; construct through `createController` (`schedule/index.ts`) to validate them. */
  constructor(predictor: Predictor, params: AbacusParams) {
    this.#predictor = predictor;
    this.#params = params;
  }

  get params(): AbacusParams {
    return this.#params;
  }

  decide(input: ScheduleInput): Decision {
    checkInput(input);
    const { ways, slackMs, drop } = this.#params;
    const predictor = this.#predictor;
    const stats = newStats();
    const rejected: Rejection[] = [];
    // Step 1.
    const heads = collectHeads(input, predictor, { drop, score: false, extraMs: 0, memo: this.#memo }, stats, rejected);
    if (heads.length === 0) return { group: [], rejected, stats };
    // Step 2.
    heads.sort(compareUrgency);
    // Step 3.
    const budget = heads[0]!.headroomMs - input.runningRemainingMs;
    // Step 4.
    const n = Math.min(heads.length, predictor.maxSlots);
    const whole: GroupSlot[] = [];
    for (let j = 0; j < n; j++) whole.push(slotOf(heads[j]!.query, heads[j]!.query.operators));
    const prefixMs = new Float64Array(n + 1); // prefixMs[j] = prediction of Pj
    const soloKnown = !Number.isNaN(heads[0]!.soloMs);
    if (soloKnown) prefixMs[1] = heads[0]!.soloMs;
    const from = soloKnown ? 2 : 1;
    if (from <= n) {
      const groups: Group[] = [];
      for (let j = from; j <= n; j++) groups.push(whole.slice(0, j));
      const out = predictor.predict(groups);
      stats.predictorCalls++;
      stats.groupsScored += groups.length;
      for (let j = from; j <= n; j++) prefixMs[j] = out[j - from]!;
    }
    let k = 1;
    for (let j = n; j >= 1; j--) {
      if (prefixMs[j]! <= budget) {
        k = j;
        break;
      }
    }
    let bestMs = prefixMs[k]!;
    const group: LaunchSegment[] = [];
    for (let j = 0; j < k; j++) {
      const q = heads[j]!.query;
      group.push({ queryId: q.id, service: q.service, start: q.nextOperator, end: q.operators });
    }
    // Step 5.
    if (k < n && bestMs <= budget) {
      const q = heads[k]!.query;
      const prefix = whole.slice(0, k);
      let lo = q.nextOperator;
      let hi = q.operators;
      let bestEnd = lo;
      const points: number[] = [];
      while (hi - lo > 1 && budget - bestMs >= slackMs) {
        points.length = 0;
        if (hi - lo - 1 <= ways) {
          for (let e = lo + 1; e < hi; e++) points.push(e);
        } else {
          const step = (hi - lo) / (ways + 1);
          for (let i = 1; i <= ways; i++) points.push(lo + Math.round(i * step));
        }
        const groups: Group[] = points.map((e) => [...prefix, slotOf(q, e)]);
        const out = predictor.predict(groups);
        stats.predictorCalls++;
        stats.groupsScored += groups.length;
        stats.searchRounds++;
        let f = -1;
        for (let i = points.length - 1; i >= 0; i--) {
          if (out[i]! <= budget) {
            f = i;
            break;
          }
        }
        if (f >= 0) {
          lo = bestEnd = points[f]!;
          bestMs = out[f]!;
        }
        if (f + 1 < points.length) hi = points[f + 1]!;
      }
      // Step 6.
      if (bestEnd > q.nextOperator) group.push({ queryId: q.id, service: q.service, start: q.nextOperator, end: bestEnd });
    }
    return { group, predictedMs: bestMs, rejected, stats };
  }

  observe(): void {
    // The predictor is trained offline; measured latencies go to the runtime's records.
  }
}
