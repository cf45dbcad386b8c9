/**
 * The Abacus query controller (Cui et al., "Enable simultaneous DNN services based on
 * deterministic operator overlap and precise latency prediction", SC'21), generalized to
 * 1..N co-located services in one code path (docs/design.md#the-abacus-controller, docs/scheduling-runtime.md "The abacus controller"; the original artifact copies its search for 2, 3 and 4 queries), with the
 * batch size of each service as a second decision variable beside the cut point (docs/batching.md;
 * `controller.ts` "Dynamic batching").
 */
import type { Group, GroupSlot, Predictor, RefiningPredictor } from '../../predict/predictor.ts';
import type { Decision, GroupObservation, LaunchSegment, QueryController, RefinementStatus, Rejection, ScheduleInput } from '../controller.ts';
import { type Bracket, roundPoints, searchLargest } from './search.ts';
import { type Candidate, checkInput, collectHeads, compareUrgency, hopelessAtMs, type FusionPlan, fusedSlotOf, fusionPlan, newStats, positionOf, slotOf, SoloMemo } from '../heads.ts';

export interface AbacusParams {
  /** Points evaluated per search round (one batched predictor call), cut points and batch sizes alike; integer ≥ 2. Paper: 2. */
  readonly ways: number;
  /** Stop the cut-point search when budget − best feasible prediction < slackMs, ms ≥ 0. Paper: 5. */
  readonly slackMs: number;
  /** Reject hopeless heads (step 1). Paper: on. */
  readonly drop: boolean;
  /**
   * With online refinement: step 1 drops a head only when `optimisticFactor(dropQuantile)` × its
   * refined solo prediction exceeds its headroom (a run as fast as that quantile of the recent
   * measured ÷ refined would not make it); absent: the prediction itself, as the paper. Set
   * with the calibration fallback (`schedule/fallback.ts`, "Drops").
   */
  readonly dropQuantile?: number;
}

/** A head of the group being formed and what may be fused behind it (`heads.ts` `fusionPlan`). */
interface Head {
  readonly c: Candidate;
  readonly plan: FusionPlan;
  /** Followers of the fusion prefix tried first ("full"): all of `plan.followers`, or 0 (see step 3). */
  full: number;
}

/**
 * The earliest deadline among a group's members (ms on the runtime's clock) and the time the
 * group may take, the budget (ms): that member's headroom − `runningRemainingMs`.
 */
interface Limit {
  readonly deadlineMs: number;
  readonly budgetMs: number;
}

const UNLIMITED: Limit = { deadlineMs: Infinity, budgetMs: Infinity };

/**
 * `limit` with head `h` fused with its first `m` followers added. The budget is computed from the
 * member that sets the earliest deadline: a head's `headroomMs` (exactly the pre-batching budget
 * when no follower is more urgent than the heads), a follower's `deadline − nowMs`.
 */
function tighten(limit: Limit, h: Head, m: number, nowMs: number, runningMs: number): Limit {
  const d = h.plan.deadlineMs[m]!;
  if (!(d < limit.deadlineMs)) return limit;
  return { deadlineMs: d, budgetMs: (d < h.c.deadlineMs ? d - nowMs : h.c.headroomMs) - runningMs };
}

/** The slot of head `h` fused with its first `m` followers, all its remaining operators. */
function slotAt(h: Head, m: number): GroupSlot {
  return fusedSlotOf(h.c.query, h.plan.samples[m]!, h.c.query.operators);
}

/**
 * Each decision, with the heads of the service queues (`ScheduleInput.queues`). A head may be
 * *fused* with its first m followers (`heads.ts` `fusionPlan`: later queries of its queue at
 * operator 0 with its `fuseKey`, samples ≤ `maxBatchSize`; prefix semantics): it then runs
 * `samples[m]` samples and the group must meet `deadlineMs[m]`, the deadline of its most urgent
 * member. A head without `batching` has no followers (m = 0), and without any the steps below
 * are exactly the paper's (same groups, calls, decisions).
 *
 * 1. With `drop`: reject every head whose headroom is ≤ 0, or whose predicted remaining solo
 *    latency at its own batch (all heads in ONE batched call) exceeds its headroom; a rejected
 *    head is replaced by the next query of its queue, scored in the next round (`heads.ts`
 *    `collectHeads`). Followers are not judged here: they only limit the batch (below).
 * 2. Sort the survivors by the head's headroom ascending — computed as the deadline `arrivalMs +
 *    qosTargetMs`, the same order, so equal deadlines tie exactly. Ties: earlier arrival, then
 *    service name (code-unit order), then query id. q0 runs all its remaining operators. Only the
 *    first n = min(heads, the predictor's `maxSlots`) heads are considered.
 * 3. The budget of a group is the headroom of its most urgent member (earliest deadline among
 *    the heads and the followers fused behind them) − `runningRemainingMs` (the new group starts
 *    after the running one); a group *fits* when its prediction ≤ its budget. Without followers
 *    that is headroom(q0) − `runningRemainingMs`. Each head is first tried at its *full* fusion
 *    prefix (every follower); q0 is not fused (full = 0) when its solo prediction from step 1 is
 *    known not to fit (fit is monotone in the batch, so no batch of it would).
 * 4. ONE batched call predicts the prefixes P1 = {q0}, P2 = {q0,q1}, …, Pn, each head at its full
 *    prefix running all its remaining operators, plus — when q0 has followers — q0 alone at the
 *    first round of its batch-size search (the `ways` points of step 4b's interval). k = the
 *    largest j such that Pj fits (each prefix checked on its own against its own budget, so a
 *    predictor that is not monotone in added work cannot stop the scan early). With drop on and
 *    q0 unfused, P1's prediction is q0's solo prediction from step 1 (not asked again).
 *    a. k ≥ 1: the group is Pk (heads fused at their full prefix); go to step 5.
 *    b. No Pj fits and q0 has followers (its full batch does not fit): multi-way search of q0's
 *       batch m over the open interval (lo, full), lo = 0 when q0 alone at its own batch is known
 *       to fit (drop on), else −1 (nothing known): each round ONE call for `ways` values of m
 *       (every integer when the interval holds ≤ `ways`; otherwise lo + round(i·(hi − lo)/(ways
 *       + 1)), i = 1..ways — the same rule as the cut points), q0 alone fused with m followers, a
 *       point fitting against the deadline of ITS members. The largest fitting m becomes `lo`,
 *       the next evaluated point above it `hi`; no slack stop (each sample more is throughput,
 *       and the rounds are few): the search ends when the interval holds no integer (at most
 *       ⌈log_{ways+1}(full + 1)⌉ rounds), giving the largest batch that fits — fit being monotone
 *       in m (more samples, earlier deadline); with a predictor that is not, a fitting m may be
 *       missed, but the m taken always fits. If q0 fits at m0 = lo and n > 1: ONE call predicts
 *       P'2..P'n = {q0 fused with m0} + q1.. at their full prefixes; k = the largest fitting j
 *       (else 1). If not even q0 at its own batch fits (drop off), k = 1 as in (c).
 *    c. No Pj fits and q0 has no followers: k = 1, q0 is launched alone at its own batch even
 *       though it does not fit; no step 5.
 * 5. When the group of k heads fits, a next head q(k) exists (k < n) and budget − prediction
 *    ≥ `slackMs`, q(k) — whose full prefix was just found not to fit — is added:
 *    a. When it has followers: batch-size search as in 4b over (−1, full), each point the group
 *       plus q(k) fused with m followers running all its operators, against the budget of all
 *       members; the largest fitting m is taken, q(k) running whole.
 *    b. When it has none, or not even m = 0 fits whole: multi-way search of q(k)'s end operator
 *       e at its own batch (never fused: a cut fused batch stays one query for the rest of its
 *       operators, tying every member to the slowest path; and a 2-D batch × cut search would
 *       cost a call per round more): the open interval (lo, hi) starts as (nextOperator, operators) — `lo`
 *       is known to fit (no operator of q(k)), `hi` is known not to. Each round evaluates, in ONE
 *       batched call, the group plus q(k) on `[nextOperator, e)` for `ways` cut points e_i = lo +
 *       round(i·(hi − lo)/(ways + 1)), i = 1..ways (every integer of the interval when it holds ≤
 *       `ways`). The largest fitting e_i becomes `lo` (and the best cut), the next evaluated
 *       point above it becomes `hi` (when no e_i fits: hi = e_1). The search runs while the
 *       interval holds an integer and budget − best ≥ `slackMs`, where best starts as the
 *       group's prediction.
 *    Later heads wait for the next decision.
 * 6. The group is the k heads (each with the queries fused behind it, `LaunchSegment.fused`,
 *    in queue order) plus q(k) when step 5 placed it; its predicted latency is the prediction of
 *    exactly that group. A query cut before its last operator stays at the head of its queue
 *    (the runtime advances its `nextOperator`); a fused batch becomes one query (samples =
 *    Σ batch, the most urgent member's deadline) and is never fused again.
 *
 * q0 is never starved of budget by the others: its batch is settled first against its own
 * members' deadline, and the others only join within what is left. The decision's counters:
 * predictor calls = (rounds of step 1 that had a head the controller's memo did not remember) +
 * (1 for step 4 unless a lone, unfused q0's solo prediction is known) + (batch-size rounds of
 * 4b after the first) + (1 for 4b's P' call when q0 fits and n > 1) + (rounds of step 5,
 * batch sizes and cut points); search rounds = the calls of
 * 4b's and 5's searches but 4b's first round (it rides with step 4's call). The memo (`heads.ts`
 * `SoloMemo`) returns exactly what the predictor returned for the same slot earlier, so it changes
 * the cost of a decision, never the decision. With online refinement (`refine`) it keeps the
 * base prediction and refines it when read (`RefiningPredictor.soloMs`), what the refined
 * predictor would answer up to rounding.
 */
export class AbacusController implements QueryController {
  readonly policy = 'abacus';
  readonly launchWhileBusy = false;
  readonly #predictor: Predictor;
  readonly #params: AbacusParams;
  /** Step 1's remembered solo predictions (`heads.ts` `SoloMemo`: same values, fewer predictor calls). */
  readonly #memo: SoloMemo;
  readonly #refiner: RefiningPredictor | undefined;
  /** Reused by `observe` for the base prediction of the executed group. */
  readonly #one = new Float64Array(1);

  /**
   * `params` are taken as valid; construct through `createController` (`schedule/index.ts`) to
   * validate them.
   * @param refiner online refinement (policy parameter `refine`): when given, every prediction
   *   comes from it (not from `predictor`, which should be its `base`) and `observe` feeds it.
   */
  constructor(predictor: Predictor, params: AbacusParams, refiner?: RefiningPredictor) {
    this.#predictor = refiner ?? predictor;
    this.#params = params;
    this.#refiner = refiner;
    this.#memo = new SoloMemo(undefined, refiner);
  }

  get params(): AbacusParams {
    return this.#params;
  }

  /** The online refinement, when on (its `rollingMape` is the serving error). */
  get refiner(): RefiningPredictor | undefined {
    return this.#refiner;
  }

  get refinement(): RefinementStatus | undefined {
    return this.#refiner;
  }

  decide(input: ScheduleInput): Decision {
    checkInput(input);
    const { ways, slackMs, drop } = this.#params;
    const predictor = this.#predictor;
    const { nowMs, runningRemainingMs: runningMs } = input;
    const stats = newStats();
    const rejected: Rejection[] = [];
    // Step 1.
    const dropQuantile = this.#params.dropQuantile;
    const dropScale = dropQuantile === undefined || this.#refiner === undefined ? 1 : this.#refiner.optimisticFactor(dropQuantile);
    const found = collectHeads(input, predictor, { drop, score: false, extraMs: runningMs, memo: this.#memo, dropScale }, stats, rejected);
    if (found.length === 0) return { group: [], rejected, stats };
    // Step 2.
    found.sort(compareUrgency);
    const n = Math.min(found.length, predictor.maxSlots);
    const heads: Head[] = [];
    for (let i = 0; i < n; i++) {
      const c = found[i]!;
      const at = positionOf(input.queues, c.query); // always found: collectHeads took it from there
      const plan = at === undefined ? fusionPlan([c.query], 0) : fusionPlan(at.queue, at.index);
      heads.push({ c, plan, full: plan.followers.length });
    }
    const h0 = heads[0]!;
    const soloKnown = !Number.isNaN(h0.c.soloMs);
    // Step 3.
    const tightenWith = (limit: Limit, h: Head, m: number): Limit => tighten(limit, h, m, nowMs, runningMs);
    if (soloKnown && h0.full > 0 && h0.c.soloMs > tightenWith(UNLIMITED, h0, 0).budgetMs) h0.full = 0;
    // Step 4.
    const whole: GroupSlot[] = [];
    const prefixLimit: Limit[] = [UNLIMITED]; // prefixLimit[j] = the limit of Pj
    for (let j = 0; j < n; j++) {
      whole.push(slotAt(heads[j]!, heads[j]!.full));
      prefixLimit.push(tightenWith(prefixLimit[j]!, heads[j]!, heads[j]!.full));
    }
    const prefixMs = new Float64Array(n + 1); // prefixMs[j] = prediction of Pj
    const p1Known = soloKnown && h0.full === 0;
    if (p1Known) prefixMs[1] = h0.c.soloMs;
    const from = p1Known ? 2 : 1;
    const lo0 = soloKnown ? 0 : -1;
    const points0 = h0.full > 0 ? roundPoints(lo0, h0.full, ways, []) : [];
    let outA: Float64Array = new Float64Array(0);
    if (from <= n) {
      const groups: Group[] = [];
      for (let j = from; j <= n; j++) groups.push(whole.slice(0, j));
      for (const m of points0) groups.push([slotAt(h0, m)]);
      outA = predictor.predict(groups);
      stats.predictorCalls++;
      stats.groupsScored += groups.length;
      for (let j = from; j <= n; j++) prefixMs[j] = outA[j - from]!;
    }
    let k = 0;
    for (let j = n; j >= 1; j--) {
      if (prefixMs[j]! <= prefixLimit[j]!.budgetMs) {
        k = j;
        break;
      }
    }
    /** Followers fused behind each head of the group, in urgency order; slots of the group. */
    const chosen: number[] = [];
    const slots: GroupSlot[] = [];
    let limit: Limit;
    let bestMs: number;
    let fits: boolean;
    if (k >= 1) {
      // 4a.
      for (let j = 0; j < k; j++) chosen.push(heads[j]!.full);
      slots.push(...whole.slice(0, k));
      limit = prefixLimit[k]!;
      bestMs = prefixMs[k]!;
      fits = true;
    } else if (h0.full === 0) {
      // 4c.
      chosen.push(0);
      slots.push(whole[0]!);
      limit = prefixLimit[1]!;
      bestMs = prefixMs[1]!;
      fits = false;
    } else {
      // 4b.
      const start: Bracket = { lo: lo0, loMs: NaN, leftMs: Infinity, hi: h0.full, hiMs: prefixMs[1]! };
      if (soloKnown) {
        start.loMs = h0.c.soloMs;
        start.leftMs = tightenWith(UNLIMITED, h0, 0).budgetMs - h0.c.soloMs;
      }
      const b = searchLargest(
        predictor,
        stats,
        ways,
        0,
        start,
        (m) => [slotAt(h0, m)],
        (m) => tightenWith(UNLIMITED, h0, m).budgetMs,
        { points: points0, out: outA, offset: n - from + 1 },
      );
      fits = b.lo >= 0;
      const m0 = fits ? b.lo : 0;
      chosen.push(m0);
      slots.push(slotAt(h0, m0));
      limit = tightenWith(UNLIMITED, h0, m0);
      bestMs = fits ? b.loMs : b.hiMs;
      if (fits && n > 1) {
        const limits: Limit[] = [limit, limit]; // limits[j] = the limit of P'j
        const groups: Group[] = [];
        const withQ0 = [slots[0]!, ...whole.slice(1)];
        for (let j = 2; j <= n; j++) {
          limits.push(tightenWith(limits[j - 1]!, heads[j - 1]!, heads[j - 1]!.full));
          groups.push(withQ0.slice(0, j));
        }
        const out = predictor.predict(groups);
        stats.predictorCalls++;
        stats.groupsScored += groups.length;
        for (let j = n; j >= 2; j--) {
          if (out[j - 2]! <= limits[j]!.budgetMs) {
            for (let i = 1; i < j; i++) chosen.push(heads[i]!.full);
            slots.length = 0;
            slots.push(...withQ0.slice(0, j));
            limit = limits[j]!;
            bestMs = out[j - 2]!;
            break;
          }
        }
      }
    }
    const group: LaunchSegment[] = [];
    for (let i = 0; i < chosen.length; i++) {
      const h = heads[i]!;
      const q = h.c.query;
      const m = chosen[i]!;
      const segment: LaunchSegment = { queryId: q.id, service: q.service, start: q.nextOperator, end: q.operators };
      group.push(m === 0 ? segment : { ...segment, fused: h.plan.followers.slice(0, m).map((f) => f.id) });
    }
    // Step 5.
    const next = heads[chosen.length];
    if (fits && next !== undefined && limit.budgetMs - bestMs >= slackMs) {
      const q = next.c.query;
      const base = limit;
      let placed = false;
      if (next.full > 0) {
        // 5a.
        const b = searchLargest(
          predictor,
          stats,
          ways,
          0,
          { lo: -1, loMs: NaN, leftMs: Infinity, hi: next.full, hiMs: NaN },
          (m) => [...slots, slotAt(next, m)],
          (m) => tightenWith(base, next, m).budgetMs,
        );
        if (b.lo >= 0) {
          placed = true;
          bestMs = b.loMs;
          const segment: LaunchSegment = { queryId: q.id, service: q.service, start: q.nextOperator, end: q.operators };
          group.push(b.lo === 0 ? segment : { ...segment, fused: next.plan.followers.slice(0, b.lo).map((f) => f.id) });
        }
      }
      if (!placed) {
        // 5b.
        const b = searchLargest(
          predictor,
          stats,
          ways,
          slackMs,
          { lo: q.nextOperator, loMs: bestMs, leftMs: base.budgetMs - bestMs, hi: q.operators, hiMs: NaN },
          (e) => [...slots, slotOf(q, e)],
          () => base.budgetMs,
        );
        // Step 6.
        if (b.lo > q.nextOperator) {
          bestMs = b.loMs;
          group.push({ queryId: q.id, service: q.service, start: q.nextOperator, end: b.lo });
        }
      }
    }
    const wakeAtMs = drop ? hopelessAtMs(found, dropScale) : undefined;
    return { group, predictedMs: bestMs, rejected, stats, ...(wakeAtMs === undefined ? {} : { wakeAtMs }) };
  }

  /**
   * Without refinement: nothing (the predictor is trained offline; measured latencies go to the
   * runtime's records). With it: the executed group's BASE prediction is recomputed (one predictor
   * call on the base, off the decision path) and fed to the refiner with the measured group
   * latency; `observation.predictedMs` is not used, since it is the refined prediction of the
   * decided group (learning against it would chase its own correction, and a group whose failed
   * segments were left out differs from the one decided). The solo memo keeps base predictions
   * and refines them when read (`heads.ts` `SoloScale`), so it stays valid across observations.
   */
  observe(observation: GroupObservation): void {
    const refiner = this.#refiner;
    if (refiner === undefined || observation.segments.length === 0) return;
    const group: GroupSlot[] = observation.segments.map((s) => ({ model: s.model, start: s.start, end: s.end, batch: s.batch, seqLen: s.seqLen }));
    const baseMs = refiner.base.predict([group], this.#one)[0]!;
    refiner.observe(group, baseMs, observation.groupLatencyMs);
  }
}
