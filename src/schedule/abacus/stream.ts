/**
 * Abacus without the group barrier (abacus parameter `barrier: false`; docs/scheduling-runtime.md
 * "Abacus without the group barrier"). Each service runs on its own stream, one segment at a
 * time, as under Triton's one instance per model; unlike Triton, every launch is a decision the
 * predictor scored against what is already running, so the segments running together at any
 * instant are ones the controller chose and each is predicted to meet its deadline.
 *
 * The runtime's `launchWhileBusy` loop (`controller.ts`, `oneGroupPerService`) shows the queues
 * of the services with nothing in flight, the waiting queries of the others (`held`), and the
 * segments in flight (`running`); it decides again after every launch, arrival, completion and
 * at `wakeAtMs`. A decision launches at most one segment (the next service's launch is decided
 * with this one already running), always a whole query or fused batch: with a stream per service
 * there is no barrier to balance, so a cut would only add a hand-over.
 *
 * ## Predicting a launch that joins running segments
 * A running segment r launched at `launchMs` with decided latency P_r has run the fraction
 * φ = min(1, (nowMs − launchMs) / P_r) of its time. Its remainder is the slot `[k, end)` where k
 * is the last operator boundary whose predicted prefix latency (the predictor's solo latency of
 * `[0, k)`, one batched call per model, batch and sequence length, then remembered) is at most
 * φ of its segment's. The new segment X and the remainders are predicted as ONE group starting
 * now, latency T; each member i's own finish is estimated from T and the solo latencies s_i as
 *
 *     f_i = min(T, max(s_i, T − (s_max − s_i)))
 *
 * (the co-runners slow each other alike while they overlap; the longest, s_max, then runs on
 * alone: a member finishes s_max − s_i before the group's end, never before its solo latency).
 * f_i ≤ H_i (headroom) ⇔ T ≤ H_i + (s_max − s_i) when s_i ≤ H_i, else T ≤ H_i. The error of
 * this estimate is measured as for every policy: the runtime records each launch's predicted
 * latency (f_X) beside its measured one (`GroupRecord`), so the predictor MAPE of a run is the
 * error of exactly these estimates.
 *
 * ## Each decision
 * 1. Remainders of the running segments; without a launch, T0 = their group's prediction and
 *    each one's finish f_r0. A running segment is *protected* when f_r0 ≤ its headroom: no launch
 *    may push it past its deadline (one already predicted late does not block launches).
 * 2. Held queries (their service's segment runs; with `drop`): a held head whose headroom is
 *    ≤ 0, or that cannot finish even starting alone when its service's segment ends (that
 *    segment's decided end + its solo latency, both as a fast run would take them: "Correction")
 *    > headroom), is rejected on time; the next one of its queue is judged then.
 * 3. Heads of the free services (`heads.ts` `collectHeads`, hopeless ones dropped as abacus
 *    step 1), most urgent first. For each: the largest fusion prefix m (0 = the head at its own
 *    batch) whose group {X_m, remainders} fits — f_X ≤ the headroom of X_m's most urgent member
 *    and f_r ≤ headroom for every protected r — first m = all followers, then a multi-way search
 *    (`ways` points per call), then (a). The first head that fits is launched, unless (b) or (c):
 *    a. when the search cut the queue to fit the most urgent member, the whole queue instead
 *       when that finishes more of the queue's queries on time and keeps every protected
 *       segment on time. Queries counted from the predictions: the launched members whose deadline
 *       is at or after the launch's corrected finish, plus the rest of the queue, run as one
 *       batch alone after it. Where a batch costs little more than one sample, the cut saves
 *       the head and leaves its followers a whole launch behind: vgg16 + vgg19 at 30 ms on
 *       `sim:a100` (`abacus reproduce batching --quick`) reached 0.90 of Triton's peak with
 *       the cut alone, 0.98 with this choice (docs/batching.md "Without the group barrier").
 *    b. with `hold`, a partial batch (fewer samples than `maxBatchSize`, the head at operator 0
 *       with `batching`) waits for more samples while now < its most urgent member's deadline −
 *       `HOLD_FACTOR` (12) × the solo latency of a full batch, and for at most that long after the
 *       head arrived (`wakeAtMs` then): full batches make the most of the device, and queries
 *       arrive meanwhile. The second bound is for long targets: `abacus serve`'s warm-up queries
 *       (600 s) each waited about ten minutes for samples that never came, so a server with this
 *       mode and dynamic batching was not ready for most of an hour (`test/serve/stream-warmup.test.ts`);
 *       on `reproduce batching --quick` it changes nothing, on `reproduce mixes --quick` two H200
 *       mixes with bert gain 1–2 %. A deadline-aware queue delay that ignores `maxQueueDelayMs`;
 *       off (`hold: false`) the controller is work-conserving.
 *    c. the overlap gains nothing — {X, remainders} is predicted to take at least as long as
 *       the remainders' end plus X alone — and the head can afford to wait for them: it waits.
 * 4. A head that fits at no m waits (a running segment ends first, and the runtime decides
 *    again then) when m = 0 would push a protected segment past its deadline, or when it could
 *    still make it after the running segments end (max f_r0 + its solo ≤ headroom); otherwise
 *    it is launched now (its only chance), as abacus step 4c, fused with the largest prefix of
 *    its followers that keeps every protected segment on time: they would only wait behind it.
 *    (Launched alone, as before, a queue of late heads ran one sample at a time and never
 *    recovered: with `drop` off, resnet50 + vgg16 at 2× their batch-1 latency on `sim:a100`,
 *    1,000 queries, had 97.8 % and 98.5 % violations at 400 and 500 queries/s, 1.0 % and 1.8 %
 *    now.)
 * `wakeAtMs`: the first instant a kept head becomes hopeless (`heads.ts` `hopelessAtMs`), or a
 * kept held query's latest start passes (its deadline − its fast solo latency; hopeless then if
 * its service's segment still runs, which it does when that segment overran its decided end), so a
 * held query is rejected on time even when no arrival or completion comes then
 * (`test/runtime-stream-rejection.test.ts`).
 *
 * ## Correction
 * Each launch's uncorrected estimate f_X is kept until its group is observed; per kind of launch
 * (`correction.ts`: alone, or joining running segments; a launch joined later is not counted)
 * the window of the last 64 measured ÷ estimated ratios gives k, their median (after 16
 * launches, within [0.5, 2]): `kA` multiplies every solo time (a head after the running
 * segments, a hold's full batch, held queries), `kJ` every group time. `fast`, the alone
 * window's 0.1 quantile (≤ 1), is what the drop rules judge by: a dropped query is a violation
 * for sure, a launched one may still make it, so only a query that a run as fast as the fastest
 * tenth of recent launches would not finish is dropped. A held query (step 2) is judged by the
 * smaller of the two windows' fast quantiles: it starts after its service's running segment,
 * whose end was mostly decided as a joining launch, and runs beside the others itself (judged by
 * the alone window's quantile only, bert at 5 ms beside vgg19 on `sim:a100` dropped held queries
 * that Triton served on time: 245 against 334 queries/s at the peak, docs/batching.md). The decision's
 * `predictedMs` is k × f_X with the k of its kind.
 */
import type { Group, GroupSlot, Predictor } from '../../predict/predictor.ts';
import { CorrectionWindow, type LaunchKind } from './correction.ts';
import type { Decision, GroupObservation, LaunchSegment, QueryController, Rejection, RunningSegment, ScheduleInput, WaitingQuery } from '../controller.ts';
import { checkInput, checkQuery, collectHeads, compareUrgency, fusedSlotOf, fusionPlan, type FusionPlan, hopelessAtMs, latestStartMs, newStats, positionOf, SoloMemo, type StatsCounter } from '../heads.ts';
import { nextInstantAfter } from '../../clock/instant.ts';
import { type FirstRound, roundPoints, searchLargest } from './search.ts';

export interface StreamAbacusParams {
  /** Points per batch-size search round (one batched predictor call), integer ≥ 2. */
  readonly ways: number;
  /** Reject hopeless queries (heads and held heads) on time. */
  readonly drop: boolean;
  /**
   * Let a partial batch wait for more samples while every member can afford it (module docs,
   * step 3b): a deadline-aware queue delay, on top of `maxQueueDelayMs`, which it ignores.
   */
  readonly hold: boolean;
}

/** A running segment's remainder as the controller predicts it. */
interface Remainder {
  readonly slot: GroupSlot;
  /** Predicted solo latency of the remainder, ms. */
  soloMs: number;
  readonly headroomMs: number;
  readonly service: string;
  /** Its finish without a new launch, ms from now. */
  finish0Ms: number;
  /** Its end as its launch was predicted (launch + decided latency − now), ms; NaN when the launch had no prediction. */
  readonly decidedEndMs: number;
  protected: boolean;
}

/** Most prefix profiles remembered before the map is cleared. */
const MAX_PROFILES = 256;
/** Most launches remembered until observed (a bound for a runtime that never observes). */
const MAX_LAUNCHED = 4096;
/**
 * A partial batch waits until its most urgent member's deadline − HOLD_FACTOR × the solo latency
 * of a full batch (step 3b). Measured, not derived: a margin of 2 (room for the held batch's own
 * slowdown beside others, up to 1.9× its solo latency in the batching experiment's pairs) left the
 * stream busy until just before that deadline, and the queries that arrived during the hold then
 * waited behind it with too little of their own target left (vgg16 + vgg19 at 30 ms on `sim:a100`:
 * 0.85 of Triton's peak). Over the 21 pairs of `abacus reproduce batching --quick` (barrier-free
 * abacus ÷ Triton, mean on sim:a100 / sim:h200:graph) factors 2, 4, 6, 8, 12, 20, 40 gave
 * 1.000 / 1.018, 1.006 / 1.025, 1.006 / 1.033, 1.004 / 1.038, 1.005 / 1.043, 1.005 / 1.039,
 * 1.005 / 1.018 (at 40 bert at 75 ms no longer holds at all): 12 is the middle of the plateau
 * 8–20, chosen on these same pairs (docs/batching.md "Holding partial batches").
 */
const HOLD_FACTOR = 12;

/**
 * Each member's finish (ms from the group's start) estimated from the group's predicted latency
 * `groupMs` and the members' solo latencies (module docs): min(T, max(s_i, T − (s_max − s_i))).
 */
export function memberFinishesMs(soloMs: readonly number[], groupMs: number): number[] {
  let max = 0;
  for (const s of soloMs) max = Math.max(max, s);
  return soloMs.map((s) => Math.min(groupMs, Math.max(s, groupMs - (max - s))));
}

/** The largest group latency T with which a member of solo `soloMs` in a group whose longest solo is `maxSoloMs` still finishes within `headroomMs`. */
function groupBudgetMs(headroomMs: number, soloMs: number, maxSoloMs: number): number {
  return soloMs <= headroomMs ? headroomMs + (maxSoloMs - soloMs) : headroomMs;
}

export class StreamAbacusController implements QueryController {
  readonly policy = 'abacus';
  readonly launchWhileBusy = true;
  readonly oneGroupPerService = true;
  readonly #predictor: Predictor;
  readonly #params: StreamAbacusParams;
  /** Remembered solo predictions of every slot the controller asks alone (`heads.ts` `SoloMemo`: heads, fused batches, remainders, held queries). */
  readonly #memo = new SoloMemo();
  /** Per model|batch|seqLen: predicted solo latency of operators [0, j), j = 0..N. */
  readonly #profiles = new Map<string, Float64Array>();
  /**
   * Each launch not yet observed, by service (one segment per service runs at a time; a fused
   * batch gets its id only at its launch): its uncorrected latency estimate (ms), its kind, and
   * whether a later launch joined it (then it is not counted, `correction.ts`).
   */
  readonly #launched = new Map<string, { estimateMs: number; kind: LaunchKind; joined: boolean }>();
  /** The correction of each kind of launch (`correction.ts`). */
  readonly #corrections: Readonly<Record<LaunchKind, CorrectionWindow>> = { alone: new CorrectionWindow(), joining: new CorrectionWindow() };

  /** `params` are taken as valid; construct through `createController` (`schedule/index.ts`). */
  constructor(predictor: Predictor, params: StreamAbacusParams) {
    this.#predictor = predictor;
    this.#params = params;
  }

  get params(): StreamAbacusParams {
    return this.#params;
  }

  decide(input: ScheduleInput): Decision {
    checkInput(input);
    const { nowMs } = input;
    const { drop, ways } = this.#params;
    const predictor = this.#predictor;
    const stats = newStats();
    const rejected: Rejection[] = [];
    // The measured ÷ estimated corrections (module docs, "Correction"): `kA` multiplies every solo
    // estimate, `kJ` every estimate of a group with running remainders; drops judge a fast solo run.
    const { factor: kA, fast } = this.#corrections.alone;
    // A held query runs after its service's running segment, whose end was mostly decided as a
    // joining launch: judged by the faster of the two kinds' fast runs ("Correction").
    const fastHeld = Math.min(fast, this.#corrections.joining.fast);
    const kJ = this.#corrections.joining.factor;
    // Step 1.
    const runs = (input.running ?? []).map((r) => this.#remainder(r, nowMs, stats));
    const runSolos = this.#soloAll(runs.map((r) => r.slot), stats);
    // The group predicted holds the new segment and at most maxSlots − 1 remainders: the longest.
    const remainders = runs
      .map((r, i) => ({ ...r, soloMs: runSolos[i]! }))
      .sort((a, b) => b.soloMs - a.soloMs)
      .slice(0, Math.max(0, predictor.maxSlots - 1));
    const restSlots = remainders.map((r) => r.slot);
    let allEndMs = 0;
    let settled = false;
    /** Step 2's wake: the first instant a kept held query becomes hopeless while its service's segment still runs. */
    let heldWakeAtMs = Infinity;
    /** Finish of each remainder without a launch, from their group's prediction `t0Ms` (two or more), and step 2. */
    const settle = (t0Ms: number): void => {
      settled = true;
      const fin0 = remainders.length >= 2 ? memberFinishesMs(remainders.map((r) => r.soloMs), t0Ms) : remainders.map((r) => r.soloMs);
      remainders.forEach((r, i) => {
        r.finish0Ms = (remainders.length >= 2 ? kJ : kA) * fin0[i]!;
        r.protected = r.finish0Ms <= r.headroomMs;
        allEndMs = Math.max(allEndMs, r.finish0Ms);
      });
      // Step 2.
      if (drop) heldWakeAtMs = this.#judgeHeld(input, remainders, kA, fastHeld, stats, rejected);
    };
    // T0 rides with the first head's first call (below); without remainders to group, nothing to predict.
    if (remainders.length < 2) settle(NaN);
    // Step 3.
    // Drops judge a fast run, not the typical one (module docs, "Correction").
    const dropScale = fast;
    const found = collectHeads(input, predictor, { drop, score: true, extraMs: 0, memo: this.#memo, dropScale }, stats, rejected);
    found.sort(compareUrgency);
    if (!settled && found.length === 0) settle(this.#predictOne(restSlots, stats));
    let wakeAtMs = (drop ? hopelessAtMs(found, dropScale) : undefined) ?? Infinity;
    const points: number[] = [];
    for (const c of found) {
      const q = c.query;
      const at = positionOf(input.queues, q);
      const plan = at === undefined ? fusionPlan([q], 0) : fusionPlan(at.queue, at.index);
      const soloAt = this.#soloAll(plan.samples.map((n) => fusedSlotOf(q, n, q.operators)), stats);
      const groupAt = (m: number): Group => [fusedSlotOf(q, plan.samples[m]!, q.operators), ...restSlots];
      const budgetAt = (m: number, withNew = true): number => {
        const sNew = soloAt[m]!;
        let sMax = sNew;
        for (const r of remainders) sMax = Math.max(sMax, r.soloMs);
        const k = remainders.length > 0 ? kJ : kA;
        let budget = withNew ? groupBudgetMs((plan.deadlineMs[m]! - nowMs) / k, sNew, sMax) : Infinity;
        for (const r of remainders) if (r.protected) budget = Math.min(budget, groupBudgetMs(r.headroomMs / k, r.soloMs, sMax));
        return budget;
      };
      const full = plan.followers.length;
      // ONE call: X at its full prefix, at 0 (step 4), the search's first round, and T0 when still unknown.
      let fullMs: number;
      let aloneMs: number;
      let first: FirstRound | undefined;
      if (remainders.length === 0) {
        fullMs = soloAt[full]!;
        aloneMs = soloAt[0]!;
      } else {
        roundPoints(-1, full, ways, points);
        const groups: Group[] = [groupAt(full)];
        if (full > 0) groups.push(groupAt(0), ...points.map(groupAt));
        if (!settled) groups.push(restSlots);
        const out = predictor.predict(groups);
        stats.predictorCalls++;
        stats.groupsScored += groups.length;
        if (!settled) settle(out[groups.length - 1]!);
        fullMs = out[0]!;
        aloneMs = full > 0 ? out[1]! : fullMs;
        if (full > 0) first = { points: [...points], out, offset: 2 };
      }
      let m = -1;
      let ms = NaN;
      if (fullMs <= budgetAt(full)) {
        m = full;
        ms = fullMs;
      } else if (full > 0) {
        const b = searchLargest(predictor, stats, ways, 0, { lo: -1, loMs: NaN, leftMs: Infinity, hi: full, hiMs: fullMs }, groupAt, (x) => budgetAt(x), first);
        m = b.lo;
        ms = b.loMs;
        // Step 3a: the whole queue when it finishes more of its members on time than the cut
        // that fits the most urgent one (the rest of the queue waits behind the cut).
        if (m >= 0 && fullMs <= budgetAt(full, false)) {
          const membersAt = (x: number, groupMs: number): number => this.#onTimeMembers(q, plan, x, groupMs, soloAt, remainders, nowMs, kA, kJ, stats);
          if (membersAt(full, fullMs) > membersAt(m, ms)) {
            m = full;
            ms = fullMs;
          }
        }
      }
      if (m < 0) {
        // Step 4.
        const hurts = remainders.length > 0 && aloneMs > budgetAt(0, false);
        if (hurts || allEndMs + kA * soloAt[0]! <= c.headroomMs) continue;
        m = 0;
        ms = aloneMs;
        if (full > 0) {
          // Its only chance, whatever the followers do: the followers go with it (the largest
          // prefix that keeps every protected remainder on time), since waiting behind it cannot
          // get them done sooner. Launched alone, a late head left its queue to run one sample
          // at a time: without drops the queue never recovered (module docs, step 4).
          const noHurtAt = (x: number): number => budgetAt(x, false);
          if (fullMs <= noHurtAt(full)) {
            m = full;
            ms = fullMs;
          } else if (full > 1) {
            const b = searchLargest(predictor, stats, ways, 0, { lo: 0, loMs: aloneMs, leftMs: Infinity, hi: full, hiMs: fullMs }, groupAt, noHurtAt);
            m = b.lo;
            ms = b.loMs;
          }
        }
      }
      // Step 3b.
      const limits = q.batching;
      if (this.#params.hold && limits !== undefined && q.nextOperator === 0 && plan.samples[m]! < limits.maxBatchSize) {
        const fullBatchMs = this.#soloAll([fusedSlotOf(q, limits.maxBatchSize, q.operators)], stats)[0]!;
        // and no longer than that after the head arrived: with a long target (a warm-up query, a
        // client asking for seconds) it would otherwise wait almost all of it for samples that may not come
        const holdMs = HOLD_FACTOR * kA * fullBatchMs;
        const holdUntilMs = Math.min(plan.deadlineMs[m]! - holdMs, q.arrivalMs + holdMs);
        if (holdUntilMs > nowMs) {
          wakeAtMs = Math.min(wakeAtMs, holdUntilMs);
          continue;
        }
      }
      // Step 3c: overlap that gains nothing — waiting for the running segments and then running X
      // takes no longer — and the head can afford to wait.
      if (remainders.length > 0 && kJ * ms >= allEndMs + kA * soloAt[m]! && allEndMs + kA * soloAt[0]! <= c.headroomMs) continue;
      const soloMs = [soloAt[m]!, ...remainders.map((r) => r.soloMs)];
      const kind: LaunchKind = remainders.length === 0 ? 'alone' : 'joining';
      const estimateMs = kind === 'alone' ? ms : memberFinishesMs(soloMs, ms)[0]!;
      const predictedMs = (kind === 'alone' ? kA : kJ) * estimateMs;
      if (this.#launched.size >= MAX_LAUNCHED) this.#launched.clear();
      // the running segments it joins were estimated without it: they no longer count
      for (const r of input.running ?? []) {
        const entry = this.#launched.get(r.service);
        if (entry !== undefined) entry.joined = true;
      }
      this.#launched.set(q.service, { estimateMs, kind, joined: false });
      const segment: LaunchSegment = { queryId: q.id, service: q.service, start: q.nextOperator, end: q.operators };
      return { group: [m === 0 ? segment : { ...segment, fused: plan.followers.slice(0, m).map((f) => f.id) }], predictedMs, rejected, stats, ...wakeOf(Math.min(wakeAtMs, heldWakeAtMs)) };
    }
    return { group: [], rejected, stats, ...wakeOf(Math.min(wakeAtMs, heldWakeAtMs)) };
  }

  /**
   * Learn the correction (module docs, "Correction"): the measured latency of a launch ÷ its
   * uncorrected estimate, into a window of the last `CORRECTION_WINDOW`.
   */
  observe(observation: GroupObservation): void {
    for (const s of observation.segments) {
      const launch = this.#launched.get(s.service);
      if (launch === undefined) continue;
      this.#launched.delete(s.service);
      if (!launch.joined && launch.estimateMs > 0) this.#corrections[launch.kind].add(observation.groupLatencyMs / launch.estimateMs);
    }
  }

  /**
   * A launch of `slot` (a whole query) for `service` decided outside this controller with nothing
   * running beside it: the calibration fallback's (`schedule/fallback.ts`, "Without the
   * barrier"). It is remembered as an `alone` launch, so its measured latency corrects the alone
   * factor as the controller's own launches do, and the fallback's exit test compares with what
   * this controller would now predict.
   * @returns its solo estimate × the alone factor now, ms.
   */
  launchAlone(slot: GroupSlot, service: string): number {
    const estimateMs = this.#soloAll([slot], newStats())[0]!;
    if (this.#launched.size >= MAX_LAUNCHED) this.#launched.clear();
    this.#launched.set(service, { estimateMs, kind: 'alone', joined: false });
    return this.#corrections.alone.factor * estimateMs;
  }

  /**
   * Whether the launch `observation` reports was joined by a later launch while it ran: its
   * decided latency could not know that co-runner (the joiner's decision predicted the slowdown),
   * so it is no evidence against the predictions. Ask before `observe`; false for a launch this
   * controller does not remember.
   */
  joinedLater(observation: GroupObservation): boolean {
    return observation.segments.some((s) => this.#launched.get(s.service)?.joined === true);
  }

  /** The corrections now: the median measured ÷ estimated latency of the recent launches of each kind (1 before `CORRECTION_MIN`). */
  get correction(): { readonly alone: number; readonly joining: number } {
    return { alone: this.#corrections.alone.factor, joining: this.#corrections.joining.factor };
  }

  /**
   * Step 3a: how many of the head's queue are predicted on time when the head launches now
   * fused with its first `x` followers, predicted (uncorrected) as a group of `groupMs`: the
   * launched members whose deadline is at or after the launch's corrected finish, then the rest
   * of the fusion plan, run as one batch alone after it, whose deadline is at or after that.
   */
  #onTimeMembers(q: WaitingQuery, plan: FusionPlan, x: number, groupMs: number, soloAt: readonly number[], remainders: readonly Remainder[], nowMs: number, kA: number, kJ: number, stats: StatsCounter): number {
    const finishMs = remainders.length === 0 ? kA * groupMs : kJ * memberFinishesMs([soloAt[x]!, ...remainders.map((r) => r.soloMs)], groupMs)[0]!;
    const endMs = nowMs + finishMs;
    const members = [q, ...plan.followers];
    let n = 0;
    for (let j = 0; j <= x; j++) if (members[j]!.arrivalMs + members[j]!.qosTargetMs >= endMs) n++;
    const restSamples = plan.samples[plan.followers.length]! - plan.samples[x]!;
    if (restSamples === 0) return n;
    const restEndMs = endMs + kA * this.#soloAll([fusedSlotOf(q, restSamples, q.operators)], stats)[0]!;
    for (let j = x + 1; j < members.length; j++) if (members[j]!.arrivalMs + members[j]!.qosTargetMs >= restEndMs) n++;
    return n;
  }

  /** Step 2: reject the held heads that cannot finish even when their service's running segment ends. */
  #judgeHeld(input: ScheduleInput, remainders: readonly Remainder[], k: number, fast: number, stats: StatsCounter, rejected: Rejection[]): number {
    const { nowMs } = input;
    let wakeAtMs = Infinity;
    for (const queue of input.held ?? []) {
      const service = queue[0]?.service;
      const run = remainders.find((r) => r.service === service);
      // A fast run: the query's predicted time × `fast` instead of × k, after its service's running
      // segment ends as its launch was decided (its remainder as predicted now when that has passed
      // or is unknown), scaled alike.
      const endMs = run === undefined ? 0 : run.decidedEndMs > 0 ? run.decidedEndMs : run.finish0Ms;
      const startMs = (fast / k) * endMs;
      for (const q of queue) {
        checkQuery(q);
        const headroomMs = q.qosTargetMs - (nowMs - q.arrivalMs);
        if (headroomMs > 0) {
          const soloMs = fast * this.#soloAll([{ model: q.model, start: q.nextOperator, end: q.operators, batch: q.batch, seqLen: q.seqLen }], stats)[0]!;
          // the test of `heads.ts` (now + wait > latest start), so the wake below finds it hopeless at that instant
          const latestMs = latestStartMs(q.arrivalMs + q.qosTargetMs, soloMs);
          if (nowMs + startMs <= latestMs) {
            // kept: hopeless for sure once its latest start passes while its service's segment still runs
            wakeAtMs = Math.min(wakeAtMs, nextInstantAfter(Math.max(latestMs, nowMs)));
            break;
          }
          rejected.push({ queryId: q.id, service: q.service, reason: 'qos_violation', headroomMs, predictedMs: startMs + soloMs });
        } else {
          rejected.push({ queryId: q.id, service: q.service, reason: 'qos_violation', headroomMs });
        }
      }
    }
    return wakeAtMs;
  }

  /** A running segment's remainder (module docs); `soloMs` is filled by the caller. */
  #remainder(r: RunningSegment, nowMs: number, stats: StatsCounter): Remainder {
    const profile = this.#profile(r.model, r.operators, r.batch, r.seqLen, stats);
    const segmentMs = profile[r.end]! - profile[r.start]!;
    const expectedMs = r.predictedMs !== undefined && r.predictedMs > 0 ? r.predictedMs : segmentMs;
    const fraction = Math.min(1, Math.max(0, (nowMs - r.launchMs) / expectedMs));
    const target = profile[r.start]! + fraction * segmentMs;
    let k = r.start;
    while (k + 1 < r.end && profile[k + 1]! <= target) k++;
    return { slot: { model: r.model, start: k, end: r.end, batch: r.batch, seqLen: r.seqLen }, soloMs: NaN, headroomMs: r.deadlineMs - nowMs, service: r.service, finish0Ms: 0, protected: false, decidedEndMs: r.predictedMs === undefined ? NaN : r.launchMs + r.predictedMs - nowMs };
  }

  /** Predicted solo latency of every prefix [0, j) of a model at a batch and sequence length (j = 0..N; 0 at j = 0). */
  #profile(model: string, operators: number, batch: number, seqLen: number, stats: StatsCounter): Float64Array {
    const key = `${model}|${batch}|${seqLen}`;
    let p = this.#profiles.get(key);
    if (p !== undefined && p.length === operators + 1) return p;
    const groups: Group[] = [];
    for (let j = 1; j <= operators; j++) groups.push([{ model, start: 0, end: j, batch, seqLen }]);
    const out = this.#predictor.predict(groups);
    stats.predictorCalls++;
    stats.groupsScored += groups.length;
    p = new Float64Array(operators + 1);
    for (let j = 1; j <= operators; j++) p[j] = Math.max(p[j - 1]!, out[j - 1]!);
    if (this.#profiles.size >= MAX_PROFILES) this.#profiles.clear();
    this.#profiles.set(key, p);
    return p;
  }

  /** Solo latencies of `slots` (those the memo remembers not asked again; the rest in ONE call). */
  #soloAll(slots: readonly GroupSlot[], stats: StatsCounter): number[] {
    const memo = this.#memo;
    memo.sync(this.#predictor);
    const result = new Array<number>(slots.length);
    const missing: Group[] = [];
    const at: number[] = [];
    slots.forEach((s, i) => {
      const ms = memo.get(memo.slotKey(s.model, s.start, s.end, s.batch, s.seqLen));
      if (ms === undefined) {
        missing.push([s]);
        at.push(i);
      } else {
        result[i] = ms;
        stats.soloMemoHits++;
      }
    });
    if (missing.length > 0) {
      const out = this.#predictor.predict(missing);
      stats.predictorCalls++;
      stats.groupsScored += missing.length;
      missing.forEach((g, j) => {
        const s = g[0]!;
        result[at[j]!] = out[j]!;
        memo.set(memo.slotKey(s.model, s.start, s.end, s.batch, s.seqLen), out[j]!);
      });
    }
    return result;
  }

  #predictOne(group: Group, stats: StatsCounter): number {
    const out = this.#predictor.predict([group]);
    stats.predictorCalls++;
    stats.groupsScored++;
    return out[0]!;
  }
}

function wakeOf(atMs: number): { wakeAtMs?: number } {
  return Number.isFinite(atMs) ? { wakeAtMs: atMs } : {};
}
