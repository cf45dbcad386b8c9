/**
 * The calibration fallback (abacus policy parameter `fallback`; docs/adaptive.md "The
 * fallback"): when the measured group latencies say that abacus's predictions no longer hold,
 * stop overlapping and serve one query at a time, earliest arrival first, dropping only on measured
 * evidence; return to overlap when the predictions hold again.
 *
 * Why: abacus is only as good as its predictor. On a machine that other processes load, a
 * predictor profiled quiet underestimates every group, overlapped groups run late, and abacus
 * can serve less than plain FCFS (measured in docs/adaptive.md). One query at a time with every
 * core (the `split:C` thread rule gives a lone segment all C cores, `schedule/threads.ts`) is
 * the strong baseline itself, so falling back to it bounds the loss.
 *
 * ## The signal: overruns, measured
 * A group *overruns* when its measured latency exceeds the latency its decision was made with
 * (`GroupObservation.predictedMs`, the refined and guarded prediction abacus fitted into the
 * budget) by more than `OVERRUN_TOLERANCE` (25 %). The window holds the last `WINDOW_GROUPS`
 * (32) observed groups, in either mode.
 *
 * - **Overlap → fallback**: more than `ENTER_SHARE` (25 %) of the window overran, with at least
 *   `WINDOW_GROUPS` groups observed since the last switch. A step change of the machine that
 *   makes every group overrun switches after ⌈0.25 · 32⌉ + 1 = 9 groups (tested on `sim:` with a
 *   drift step, `test/schedule/fallback.test.ts`).
 * - **Overlap → fallback, without groups**: more than `DROP_ENTER_SHARE` (50 %) of the last
 *   `WINDOW_GROUPS` queries abacus disposed of (launched from their first operator — a fused
 *   batch counts once — or dropped) were dropped on a prediction, with at least that many
 *   disposed of since the last switch. A predictor that has learned a slow machine can call every
 *   query hopeless; then nothing runs, no group is measured, and without this abacus would
 *   drop everything for good (measured: 0 goodput in 2 of 3 rounds with four busy loops on 2
 *   cores, where the better fcfs served 1.5 and 6.3 queries/s; docs/adaptive.md). The drops are
 *   counted in `rejected`, which the runtime calls with the rejections of every decision it
 *   carried out (all of them: it answers every one), so `decide` changes no state.
 * - **Fallback → overlap**: at least `dwell` groups in the fallback, and over the last
 *   `WINDOW_GROUPS` of them the *predictor's* own prediction of the group (asked at the
 *   decision, though the decision was made on measured estimates) overran at most
 *   `EXIT_SHARE` (10 %) of the time: the predictor again predicts what runs.
 *
 * **No flapping**: the thresholds differ (hysteresis: 25 % to enter, 10 % to leave), each
 * switch needs a full window in its new mode (32 groups; for the drop path, 32 queries disposed
 * of), and `dwell` starts at `MIN_DWELL_GROUPS`
 * (64) and doubles, up to `MAX_DWELL_GROUPS` (1024), each time the fallback is entered again
 * within `4 × dwell` groups of leaving it; it returns to 64 after `MAX_DWELL_GROUPS` groups in
 * overlap. So a machine on which overlap keeps failing spends at most one window of every
 * 1024 + 32 groups overlapping after four quick re-entries.
 *
 * ## One at a time, dropping on measured evidence
 * In the fallback each decision launches the waiting head that arrived first (ties: earlier
 * deadline, service, id) whole, as one segment: the order of the strong baseline, fcfs with
 * every core, but for the choice of a safe query (below). A head is rejected when its
 * headroom is ≤ 0, or when the running group's remainder + a *fast measured* solo latency of
 * its shape exceeds its headroom — measured: the last `MEASURED_KEPT` (16) latencies of whole
 * queries of its (model, batch, sequence length, threads) run alone, with at least
 * `MIN_MEASURED` (3) of them; fast: their `FALLBACK_DROP_QUANTILE` (0.1) quantile (nearest
 * rank: the 2nd fastest of 16). On a machine shared with other processes the latencies have a
 * long tail (time slices lost); a query that a run as fast as the recent fast ones would finish
 * is kept (with the median it was dropped, and fcfs, whose offline predictor underestimated,
 * served more: docs/adaptive.md). A query of a shape never measured alone, or already cut by an
 * overlapped group, is never dropped on a prediction while the predictions are what failed; while
 * only the neighbours hold the fallback ("Interference"), a shape not yet measured is judged on
 * the predictor's solo latency at the launch's count, as fcfs judges it. Measurements age by use: after
 * `MAX_MEASURED_DROPS` (8) measured drops of a shape with no new run of it, its queries are kept
 * and run until a run of it is measured again (a spell of slow runs cannot drop a shape for good,
 * since nothing of it would run again to correct them; usually one query, two when the next
 * decision is taken ahead while the first runs). Such a query is judged, and woken, as one of a
 * shape never measured: at its deadline (woken at its fast run's latest start it was kept again,
 * and the wake came one representable instant later each time). With the policy's `drop` off nothing is dropped. The decision's `predictedMs` is that fast
 * measured latency when known (so the running group's remainder that the next drop is judged
 * against is the same optimistic estimate: with the median there, the fallback dropped queued
 * queries fcfs kept and served, 0.3 against 9.6 queries/s in a round with four busy loops),
 * else the predictor's. `Decision.fallback` marks every such decision (`GroupRecord.fallback`).
 *
 * ## Choosing a safe query
 * Under overload every head of a FIFO queue waits until it can just make its deadline on a
 * typical run, so a run in the slow tail finishes late: a whole run spent on a violation. A
 * kept query is *at risk* when the running remainder + a slow measured run of its shape (the
 * `AT_RISK_QUANTILE` (0.9) quantile of the same `MEASURED_KEPT` runs) exceeds its headroom. An
 * at-risk head gives way to the first *safe* query among the next `SAFE_SCAN` (16) of its queue
 * (whole, measured, finished even by a slow run), and across queues a safe candidate goes before
 * an at-risk one, then arrival order. The head passed over is not dropped by this choice: it
 * stays, the decision's wake covers it, and it is rejected on time by the drop rule above unless
 * the device frees first; the queries between it and the safe one are passed over too, each
 * rejected now if the drop rule says so, else covered by the wake. A decision launches something
 * whenever the drop rule leaves a query (an at-risk one when no safe one is in reach), so the
 * device never idles for it. What it changes is which queries the drop rule ends up rejecting:
 * under sustained overload an at-risk head is passed over at every decision until it is
 * hopeless, so the queries served are those with slack, and among the shapes of a queue those
 * whose slow runs are short — as fcfs with drops already rejects large batches first at the head
 * of a FIFO, but more often (a shape dropped `MAX_MEASURED_DROPS` times without a new run is kept
 * and run once, as everywhere in the fallback). A query of a shape not yet
 * measured is taken as safe unless its predicted solo latency (while the neighbours hold the
 * fallback, above) says otherwise. Measured on this machine in
 * docs/interference.md "Choosing a safe query".
 *
 * ## Drops in overlap mode
 * A drop is final and costs a sure violation; running a query that then misses costs device
 * time. abacus's step 1 drops a head whose predicted solo latency exceeds its headroom; with a
 * prediction centred on the measured latencies (what refinement learns) that drops about half
 * of the queries that sit right at the limit, and half of those would have made it. On a busy
 * CPU this made abacus drop 33 % of its queries where fcfs, whose offline predictor
 * underestimated, dropped 25 % and served more (docs/adaptive.md). So with the fallback on and
 * refinement on, abacus drops a head only when its refined prediction × min(1, the
 * `FALLBACK_DROP_QUANTILE` (0.1) quantile of measured ÷ refined over the recent groups)
 * exceeds its headroom: when even a run as fast as the fastest tenth of the recent ones would
 * not finish it (`AbacusParams.dropQuantile`, `RefiningPredictor.optimisticFactor`). Which
 * groups are formed does not change.
 *
 * ## Without the barrier
 * Abacus with `barrier: false` (`abacus/stream.ts`) launches while others run, one stream per
 * service; the fallback wraps it the same way, with three differences:
 * - **Nothing beside a fallback launch.** While any segment is in flight (`ScheduleInput.running`)
 *   the fallback launches nothing; the runtime decides again when it ends. Heads are judged
 *   against the latest decided end of the running segments (launch + decided latency), and the
 *   queries waiting behind a running segment of their own service (`held`) are judged too, never
 *   launched. The launch gets `threadsAlone` itself (no `ThreadAssigningController` assigns a
 *   count in that mode; a `fixed:N` rule gives N).
 * - **What counts.** A launch later joined by another ran beside a co-runner its decided latency
 *   could not know (the joiner's decision predicted that slowdown): it is not counted as an
 *   overrun or not (`joinedLater`). Only the fallback's own launches, which ran alone, are
 *   measured solo runs: a stream's launch of one segment may have run beside others.
 * - **The exit test** asks the streams' corrected solo estimate (`launchAlone`: the predictor's
 *   solo latency × the alone factor of the streams' correction, which learns from the
 *   fallback's launches), not the bare predictor, which no refiner corrects in that mode. So
 *   after a lasting change the alone factor follows within a window and overlap resumes; the
 *   joining factor relearns only while the streams overlap, so the first episodes of overlap
 *   may overrun again, which the doubling dwell bounds. Measured on `sim:a100:drift-2x@20000ms`
 *   (resnet50 + bert, QoS 50 ms, 100 queries/s, 4,000 queries, a predictor calibrated per shape
 *   before the step; `test/schedule/fallback-stream.test.ts`): overlap 2,011 launches, the step,
 *   fallback 69, overlap 55, fallback 127, overlap to the end (1,674); 2.65 % violations against
 *   2.60 % without the fallback, and no switch without the step.
 *
 * ## Interference
 * With `neighbours` (abacus's `interference`; `device/neighbours.ts`), a second trigger that asks
 * the machine rather than the predictions: while the other processes want at least
 * `CROWD_ENTER_CORES` cores and leave at least that much but under 2 − `CROWD_ENTER_CORES` free —
 * about one core, no room for two of our segments without one sharing a core with a neighbour —
 * it serves one query at a time at one thread (the free core), whatever the thread rule or
 * `launchThreads` say, judged on the median of the
 * shape's measured runs at that count (`CROWD_DROP_QUANTILE`). It ends when they want under
 * `CROWD_EXIT_CORES` or leave under `CROWD_EXIT_CORES` free. In the second case every core is
 * *contended*: then our threads get their fair share of every core, and more threads get more (fcfs
 * on two threads beside four busy loops served 1.9× what one thread did), so while the neighbours
 * leave under `CROWD_EXIT_CORES` free — until they leave `CROWD_ENTER_CORES` again — it serves one
 * query at a time at the fallback's own count (`launchThreads`, else the rule's for a lone
 * segment), judged on fast measured runs as the prediction fallback is: overlapped launches beside
 * neighbours on every core overran their corrected estimates (without the barrier 19–20 % of the
 * queries late with two and four busy loops, against 7–8 % for one at a time; docs/interference.md).
 * The thresholds are apart, and the demand is an average with a one-second half-life, so it does
 * not flap on a neighbour's bursts. The predictions' windows count nothing while the neighbours
 * hold it; the prediction trigger may hold at once (crowded wins the thread count).
 * `fallback.active` is true while any holds; `crowded`, `contended` and `neighbourCores` say which.
 * Measured in docs/interference.md.
 *
 * Cost: in overlap mode a scan of the decision's rejections and one window update per group. In the
 * fallback one predictor call per decision (the predictor's prediction of the launched query,
 * for the exit test), a scan of the queue heads, and a map lookup per head — for an at-risk head
 * up to `SAFE_SCAN` more (the queries behind it) — and a sort of a shape's 16 measured runs after
 * each new one (cached until the next).
 */
import type { GroupSlot, Predictor } from '../predict/predictor.ts';
import { nextInstantAfter } from '../clock/instant.ts';
import { checkInput, checkQuery, newStats, type StatsCounter } from './heads.ts';
import type { FallbackOptions } from './fallback-book.ts';
import { before, decidedRemainderMs, hopelessAt, type Measured, type MeasuredRecord, type Choice, remember, shapeKey, Window } from './fallback-book.ts';
import type { Decision, FallbackStatus, GroupObservation, LaunchSegment, PolicyName, QueryController, RefinementStatus, Rejection, ScheduleInput, WaitingQuery } from './controller.ts';

export type { FallbackStatus } from './controller.ts';
export type { FallbackOptions, StreamHooks } from './fallback-book.ts';

/** A group overruns when measured > (1 + this) × the latency it was decided with. */
export const OVERRUN_TOLERANCE = 0.25;
/** Observed groups in the window both switches read. */
export const WINDOW_GROUPS = 32;
/** Enter the fallback when more than this share of the window overran. */
export const ENTER_SHARE = 0.25;
/** Leave it when at most this share of the predictor's predictions of the window's groups overran. */
export const EXIT_SHARE = 0.1;
/** Groups the fallback lasts at least; doubles on quick re-entry, up to `MAX_DWELL_GROUPS`. */
export const MIN_DWELL_GROUPS = 64;
/** The longest dwell; also the groups of overlap after which the dwell returns to `MIN_DWELL_GROUPS`. */
export const MAX_DWELL_GROUPS = 1024;
/** Enter the fallback when more than this share of the last `WINDOW_GROUPS` queries abacus disposed of were dropped on a prediction. */
export const DROP_ENTER_SHARE = 0.5;
/** Measured solo latencies kept per shape: their `FALLBACK_DROP_QUANTILE` quantile decides drops and is the decided latency. */
export const MEASURED_KEPT = 16;
/**
 * After this many measured drops of a shape without a new measurement of it, the next query of
 * the shape is kept and run: measurements taken while the machine was slow cannot drop a shape
 * for good (nothing of it would run, so nothing would correct them).
 */
export const MAX_MEASURED_DROPS = 8;
/** Measured solo runs of a shape before it may justify a drop. */
export const MIN_MEASURED = 3;
/**
 * With the fallback, abacus's own drop (step 1, in overlap mode, with refinement) judges its
 * refined solo prediction × min(1, this quantile of the recent measured ÷ refined ratios).
 */
export const FALLBACK_DROP_QUANTILE = 0.1;
/**
 * Interference: one query at a time while the other processes want at least `CROWD_ENTER_CORES`
 * cores and leave at least `CROWD_ENTER_CORES` but fewer than 2 − `CROWD_ENTER_CORES` free (about
 * one free core: no room for two segments beside them without sharing a core); back once they
 * want under `CROWD_EXIT_CORES`. When they leave under `CROWD_EXIT_CORES` free, every core is
 * contended: one query at a time at the fallback's count until they leave `CROWD_ENTER_CORES`
 * again (module docs, docs/interference.md).
 */
export const CROWD_ENTER_CORES = 0.6;
export const CROWD_EXIT_CORES = 0.3;
/**
 * Crowded, drops judge the median of a shape's measured solo runs (not the fast tenth): one
 * query at a time on a core of its own runs as long as the last ones, and under overload every
 * head of a FIFO queue sits at its limit, so an optimistic estimate kept queries that then
 * finished late (with one busy loop, 33 % of the queries late against 3 % for fcfs at one
 * thread; docs/interference.md).
 */
export const CROWD_DROP_QUANTILE = 0.5;
/**
 * A kept query is *at risk* when a run as slow as this quantile of its shape's measured solo runs
 * (nearest rank: the 2nd slowest of 16) would not finish it in its headroom. The fallback passes
 * over an at-risk head for the first query behind it that is not ("Choosing a safe query").
 */
export const AT_RISK_QUANTILE = 0.9;
/** Queue positions behind an at-risk head the fallback looks at for a safe query (bounds a decision's work on a long queue). */
export const SAFE_SCAN = 16;


/**
 * Wraps the abacus controller (module docs). Sits inside a `ThreadAssigningController` when a
 * thread rule is set, so a fallback group of one segment gets the rule's count for one segment.
 */
export class FallbackController implements QueryController {
  readonly policy: PolicyName;
  /** The inner controller's: true for abacus without the group barrier (module docs, "Without the barrier"). */
  readonly launchWhileBusy: boolean;
  readonly oneGroupPerService?: boolean;
  readonly #inner: QueryController;
  readonly #predictor: Predictor;
  readonly #options: FallbackOptions;
  #active = false;
  /** Interference: neighbours leave about one core (module docs); one query at a time at one thread. */
  #crowded = false;
  /** Interference: neighbours contend for every core (module docs); one query at a time at the fallback's count. */
  #contended = false;
  #neighbourCores: number | undefined;
  #entries = 0;
  #observed = 0;
  #inFallback = 0;
  /** Groups observed since the last switch. */
  #sinceSwitch = 0;
  /** Queries disposed of since the last switch in overlap mode (launched from operator 0, or dropped on a prediction). */
  #disposedSinceSwitch = 0;
  #dwell = MIN_DWELL_GROUPS;
  /** Overruns of the decided latency (both modes). */
  readonly #overruns = new Window(WINDOW_GROUPS);
  /** In overlap mode: per query disposed of, whether it was dropped on a prediction (1) or launched from its first operator (0). */
  readonly #predictedDrops = new Window(WINDOW_GROUPS);
  /** In the fallback: overruns of the predictor's own prediction. */
  readonly #predictorOverruns = new Window(WINDOW_GROUPS);
  /** Measured solo latencies by shape key: the last `MEASURED_KEPT` (a ring), how many were taken, and measured drops since the last one. */
  readonly #measured = new Map<string, MeasuredRecord>();
  /** The shape record of each query the fallback's decisions dropped on a measurement, by query id, until `rejected` counts the drop. */
  readonly #droppedOn = new Map<string, { drops: number }>();
  /** In the fallback: the predictor's prediction of each launched query, by query id. */
  readonly #predicted = new Map<string, number>();
  readonly #one = new Float64Array(1);
  /** While the neighbours hold the fallback: the predictor's solo latency of shapes not yet measured, by shape key, as of `#predictedAt` observations. */
  readonly #predictedSolo = new Map<string, number>();
  #predictedAt = -1;

  /**
   * @param inner the abacus controller (its decisions in overlap mode; observations always go to it).
   * @param predictor what `inner` predicts with (for a thread rule: the `ThreadedPredictor`; with
   *   refinement: the refiner), asked for the exit test.
   */
  constructor(inner: QueryController, predictor: Predictor, options: FallbackOptions = {}) {
    if (inner.launchWhileBusy && inner.oneGroupPerService !== true) throw new RangeError(`fallback: policy ${inner.policy} launches while busy with no stream per service; the fallback needs to know what runs`);
    this.policy = inner.policy;
    this.launchWhileBusy = inner.launchWhileBusy;
    if (inner.oneGroupPerService !== undefined) this.oneGroupPerService = inner.oneGroupPerService;
    this.#inner = inner;
    this.#predictor = predictor;
    this.#options = options;
  }

  get refinement(): RefinementStatus | undefined {
    return this.#inner.refinement;
  }

  get fallback(): FallbackStatus {
    return {
      active: this.#active || this.#crowded || this.#contended,
      entries: this.#entries,
      observedGroups: this.#observed,
      fallbackGroups: this.#inFallback,
      overrunShare: this.#overruns.share,
      dwellGroups: this.#dwell,
      ...(this.#options.neighbours === undefined ? {} : { crowded: this.#crowded, contended: this.#contended, ...(this.#neighbourCores === undefined ? {} : { neighbourCores: this.#neighbourCores }) }),
    };
  }

  /** Interference: follow what the neighbours want (module docs); called at each decision, at the runtime clock's `nowMs`. */
  #watchNeighbours(nowMs: number): void {
    const n = this.#options.neighbours;
    if (n === undefined) return;
    const want = n.demandCores(nowMs);
    this.#neighbourCores = want;
    if (want === undefined) return;
    const free = n.cores - want;
    const crowded = this.#crowded
      ? want >= CROWD_EXIT_CORES && free >= CROWD_EXIT_CORES && free < 2 - CROWD_EXIT_CORES
      : want >= CROWD_ENTER_CORES && free >= CROWD_ENTER_CORES && free < 2 - CROWD_ENTER_CORES;
    // every core contended: in below the crowded band's floor, out once about one core is free again
    const contended = !crowded && (this.#contended ? free < CROWD_ENTER_CORES : free < CROWD_EXIT_CORES);
    if (crowded === this.#crowded && contended === this.#contended) return;
    const held = this.#crowded || this.#contended;
    this.#crowded = crowded;
    this.#contended = contended;
    // the overlap-mode windows are left as they were: nothing the neighbours held was counted in them
    if (!this.#active) {
      if (!held && (crowded || contended)) this.#entries++;
      this.#options.onSwitch?.(crowded || contended, { ...this.fallback, overrunShare: this.#overruns.share });
    }
  }

  decide(input: ScheduleInput): Decision {
    this.#watchNeighbours(input.nowMs);
    if (!this.#active && !this.#crowded && !this.#contended) return this.#inner.decide(input);
    checkInput(input);
    const stats = newStats();
    const rejected: Rejection[] = [];
    const { nowMs } = input;
    const streams = this.launchWhileBusy;
    // Without the barrier the segments in flight are shown, not their remainder: the latest decided end.
    const runningRemainingMs = streams ? decidedRemainderMs(input) : input.runningRemainingMs;
    const drop = this.#options.drop !== false;
    let best: Choice | undefined;
    let wakeAtMs = Infinity;
    // Without the barrier, the queues of services with a segment in flight are `held`: judged, never launched.
    const held = streams ? (input.held ?? []) : [];
    for (const [i, queue] of [...input.queues, ...held].entries()) {
      const launchable = i < input.queues.length;
      for (let j = 0; j < queue.length; j++) {
        const q = queue[j]!;
        checkQuery(q);
        const kept = this.#judge(q, nowMs, runningRemainingMs, drop, rejected, stats);
        if (kept === undefined) continue;
        const { deadlineMs, measured, judged } = kept;
        const headroomMs = deadlineMs - nowMs;
        if (!launchable) {
          wakeAtMs = Math.min(wakeAtMs, hopelessAt(deadlineMs, judged));
          break;
        }
        // (without drop every query is taken as safe: arrival order alone)
        let pick: Choice = { q, deadlineMs, measured, judged, safe: !drop || judged === undefined || runningRemainingMs + judged.slowMs <= headroomMs };
        // an at-risk head gives way to the first safe query behind it; it and the queries between are
        // rejected now if the drop rule says so, else woken to be judged again on time ("Choosing a safe query")
        const safe = pick.safe ? undefined : this.#safeBehind(queue, j, nowMs, runningRemainingMs, rejected, stats);
        if (safe !== undefined) {
          wakeAtMs = Math.min(wakeAtMs, hopelessAt(deadlineMs, judged), safe.passedWakeAtMs);
          pick = safe.choice;
        }
        // a safe query before an at-risk one, then arrival order
        if (best === undefined || (pick.safe !== best.safe ? pick.safe : before(pick.q, pick.deadlineMs, best.q, best.deadlineMs))) {
          if (best !== undefined) wakeAtMs = Math.min(wakeAtMs, hopelessAt(best.deadlineMs, best.judged));
          best = pick;
        } else {
          wakeAtMs = Math.min(wakeAtMs, hopelessAt(pick.deadlineMs, pick.judged));
        }
        break; // the queue's head (or the safe query it gave way to) decides; the rest of the queue waits
      }
    }
    // Without the barrier: one query at a time means nothing beside it; the next is decided when the running ones end.
    if (best !== undefined && streams && (input.running?.length ?? 0) > 0) {
      wakeAtMs = Math.min(wakeAtMs, hopelessAt(best.deadlineMs, best.judged));
      best = undefined;
    }
    /** The decision's wake: the first instant after the earliest kept query becomes hopeless (never at or before now). */
    const wake = (): { wakeAtMs?: number } => (drop && Number.isFinite(wakeAtMs) ? { wakeAtMs: nextInstantAfter(Math.max(wakeAtMs, nowMs)) } : {});
    // (with the barrier, a decision that launches nothing sets none: the runtime decides again when a query arrives)
    if (best === undefined) return { group: [], rejected, stats, fallback: true, ...(streams ? wake() : {}) };
    const q = best.q;
    // Without the barrier no `ThreadAssigningController` gives a lone segment its count: the fallback does.
    const alone = this.#options.threadsAlone;
    const pinned = this.#pinnedThreads();
    const threads = pinned ?? (streams && typeof alone === 'number' ? alone : undefined);
    const segment: LaunchSegment = { queryId: q.id, service: q.service, start: q.nextOperator, end: q.operators, ...(threads === undefined ? {} : { intraOpThreads: threads }) };
    // the predictor scores at the rule's count itself (`ThreadedPredictor`), or at a pinned count the slot names
    const slot: GroupSlot = { model: q.model, start: q.nextOperator, end: q.operators, batch: q.batch, seqLen: q.seqLen, ...(pinned === undefined ? {} : { intraOpThreads: pinned }) };
    const hooks = streams ? this.#options.streams : undefined;
    const predictorMs = hooks !== undefined ? hooks.launchAlone(slot, q.service) : this.#predictor.predict([[slot]], this.#one)[0]!;
    stats.predictorCalls++;
    stats.groupsScored++;
    remember(this.#predicted, q.id, predictorMs);
    const predictedMs = best.measured?.fastMs ?? predictorMs;
    return { group: [segment], predictedMs, rejected, stats, fallback: true, ...wake() };
  }

  /**
   * Count the drops of the decision just carried out: in overlap mode those abacus made on a
   * prediction (the drop window; may switch into the fallback), in the fallback those made on a
   * measurement (per shape, `MAX_MEASURED_DROPS`). Forwarded to the inner controller.
   */
  rejected(rejections: readonly Rejection[]): void {
    this.#inner.rejected?.(rejections);
    if (this.#active || this.#crowded || this.#contended) {
      for (const r of rejections) {
        const record = this.#droppedOn.get(r.queryId);
        if (record === undefined) continue;
        this.#droppedOn.delete(r.queryId);
        record.drops++;
      }
      return;
    }
    let counted = false;
    for (const r of rejections) {
      if (r.predictedMs === undefined) continue; // headroom gone: not the predictor's call
      this.#predictedDrops.push(true);
      this.#disposedSinceSwitch++;
      counted = true;
    }
    if (counted) this.#maybeEnter();
  }

  observe(observation: GroupObservation): void {
    const joined = this.#options.streams?.joinedLater(observation) === true;
    this.#inner.observe(observation);
    const segs = observation.segments;
    if (segs.length === 0) return;
    const measuredMs = observation.groupLatencyMs;
    if (segs.length === 1) {
      const s = segs[0]!;
      // Without the barrier a launch of one segment may have run beside others: only the fallback's own launches ran alone.
      const alone = !this.launchWhileBusy || ((this.#active || this.#crowded || this.#contended) && this.#predicted.has(s.queryId));
      if (alone && s.start === 0 && s.end === s.operators && measuredMs > 0 && Number.isFinite(measuredMs)) {
        const key = shapeKey(s.model, s.batch, s.seqLen, s.intraOpThreads);
        let m = this.#measured.get(key);
        if (m === undefined) remember(this.#measured, key, (m = { ms: new Float64Array(MEASURED_KEPT), n: 0, drops: 0, sorted: new Float64Array(MEASURED_KEPT), sortedAt: -1 }));
        m.ms[m.n % MEASURED_KEPT] = measuredMs;
        m.n++;
        m.drops = 0;
      }
    }
    if (!this.#active && !this.#crowded && !this.#contended) {
      for (const s of segs) {
        if (s.start !== 0) continue;
        this.#predictedDrops.push(false); // a fused batch counts once
        this.#disposedSinceSwitch++;
      }
    }
    this.#observed++;
    this.#sinceSwitch++;
    const decidedMs = observation.predictedMs;
    if (decidedMs !== undefined && decidedMs > 0 && !joined && (this.#active || (!this.#crowded && !this.#contended))) this.#overruns.push(measuredMs > (1 + OVERRUN_TOLERANCE) * decidedMs);
    if (this.#active) {
      this.#inFallback++;
      const predictorMs = segs.length === 1 ? this.#predicted.get(segs[0]!.queryId) : undefined;
      if (predictorMs !== undefined) {
        this.#predicted.delete(segs[0]!.queryId);
        this.#predictorOverruns.push(measuredMs > (1 + OVERRUN_TOLERANCE) * predictorMs);
      }
      if (this.#sinceSwitch >= this.#dwell && this.#predictorOverruns.size >= WINDOW_GROUPS && this.#predictorOverruns.share <= EXIT_SHARE) this.#switch(false);
    } else if (this.#crowded || this.#contended) {
      this.#inFallback++;
      if (segs.length === 1) this.#predicted.delete(segs[0]!.queryId);
    } else {
      this.#maybeEnter();
    }
  }

  /** Overlap mode: switch into the fallback when either window says so (module docs). */
  #maybeEnter(): void {
    if (this.#sinceSwitch >= MAX_DWELL_GROUPS) this.#dwell = MIN_DWELL_GROUPS;
    const overran = this.#sinceSwitch >= WINDOW_GROUPS && this.#overruns.size >= WINDOW_GROUPS && this.#overruns.share > ENTER_SHARE;
    const dropped = this.#disposedSinceSwitch >= WINDOW_GROUPS && this.#predictedDrops.size >= WINDOW_GROUPS && this.#predictedDrops.share > DROP_ENTER_SHARE;
    if (!overran && !dropped) return;
    if (this.#entries > 0 && this.#sinceSwitch < 4 * this.#dwell) this.#dwell = Math.min(MAX_DWELL_GROUPS, 2 * this.#dwell);
    this.#switch(true);
  }

  #switch(active: boolean): void {
    // what decided the switch, reported before the windows restart
    const overrunShare = this.#overruns.share;
    this.#active = active;
    this.#sinceSwitch = 0;
    this.#disposedSinceSwitch = 0;
    this.#overruns.clear();
    this.#predictedDrops.clear();
    this.#predictorOverruns.clear();
    this.#predicted.clear();
    this.#droppedOn.clear();
    if (active) this.#entries++;
    this.#options.onSwitch?.(active, { ...this.fallback, overrunShare });
  }

  /** The count every fallback launch carries whatever the thread rule says: one while crowded, else `launchThreads`; undefined: the rule's. */
  #pinnedThreads(): number | undefined {
    return this.#crowded ? 1 : this.#options.launchThreads;
  }

  /**
   * The drop rule on one waiting query: with `drop`, rejected (appended to `rejected`, undefined
   * returned) when its headroom is ≤ 0 or the running remainder + a fast run of its shape exceeds
   * it; else its deadline (ms), its estimate (`#estimate`) and the estimate it may be dropped on
   * (`judged`: none after `MAX_MEASURED_DROPS` drops with no new run — such a shape is kept and
   * judged, and woken, as unmeasured, else its wake would find it kept one instant later each time).
   */
  #judge(q: WaitingQuery, nowMs: number, runningRemainingMs: number, drop: boolean, rejected: Rejection[], stats: StatsCounter): { deadlineMs: number; measured: Measured | undefined; judged: Measured | undefined } | undefined {
    const deadlineMs = q.arrivalMs + q.qosTargetMs;
    const headroomMs = deadlineMs - nowMs;
    const measured = this.#estimate(q, stats);
    const judged = measured !== undefined && measured.record.drops < MAX_MEASURED_DROPS ? measured : undefined;
    if (drop && headroomMs <= 0) {
      rejected.push({ queryId: q.id, service: q.service, reason: 'qos_violation', headroomMs });
      return undefined;
    }
    if (drop && judged !== undefined && runningRemainingMs + judged.fastMs > headroomMs) {
      remember(this.#droppedOn, q.id, judged.record);
      rejected.push({ queryId: q.id, service: q.service, reason: 'qos_violation', headroomMs, predictedMs: runningRemainingMs + judged.fastMs });
      return undefined;
    }
    return { deadlineMs, measured, judged };
  }

  /**
   * The first query of `queue` after position `at` (at most `SAFE_SCAN` positions) that is safe:
   * whole, of a measured shape, and finished in its headroom even by a slow run
   * (`AT_RISK_QUANTILE`) after the running remainder; undefined when none is. When one is found,
   * the queries between `at` and it are passed over too: those the drop rule rejects now (headroom
   * ≤ 0, or the running remainder + a fast measured run past it) are appended to `rejected`; the
   * earliest instant one of the rest becomes hopeless is `passedWakeAtMs` (Infinity when none).
   */
  #safeBehind(queue: readonly WaitingQuery[], at: number, nowMs: number, runningRemainingMs: number, rejected: Rejection[], stats: StatsCounter): { choice: Choice; passedWakeAtMs: number } | undefined {
    const end = Math.min(queue.length, at + 1 + SAFE_SCAN);
    for (let j = at + 1; j < end; j++) {
      const q = queue[j]!;
      checkQuery(q);
      const measured = this.#estimate(q, stats);
      if (measured === undefined || measured.record.drops >= MAX_MEASURED_DROPS) continue;
      const deadlineMs = q.arrivalMs + q.qosTargetMs;
      if (runningRemainingMs + measured.slowMs > deadlineMs - nowMs) continue;
      let passedWakeAtMs = Infinity;
      for (let k = at + 1; k < j; k++) {
        const kept = this.#judge(queue[k]!, nowMs, runningRemainingMs, true, rejected, stats);
        if (kept !== undefined) passedWakeAtMs = Math.min(passedWakeAtMs, hopelessAt(kept.deadlineMs, kept.judged));
      }
      return { choice: { q, deadlineMs, measured, judged: measured, safe: true }, passedWakeAtMs };
    }
    return undefined;
  }

  /**
   * What `q` is judged on: its shape's measured solo runs (`#measuredSolo`); while the neighbours
   * hold the fallback (crowded or contended, the predictions not found wrong), a shape not yet
   * measured is judged on the predictor's solo latency at the launch's thread count, as fcfs
   * judges every query (fast = slow = it; its record counts no drops). Predictions are cached per
   * shape until the next observation. Undefined: nothing to judge on (never dropped on it).
   */
  #estimate(q: WaitingQuery, stats: StatsCounter): Measured | undefined {
    const measured = this.#measuredSolo(q);
    if (measured !== undefined || this.#active || !(this.#crowded || this.#contended) || q.nextOperator !== 0) return measured;
    const threads = this.#judgedThreads(q);
    const key = shapeKey(q.model, q.batch, q.seqLen, threads);
    if (this.#predictedAt !== this.#observed) {
      this.#predictedSolo.clear();
      this.#predictedAt = this.#observed;
    }
    let ms = this.#predictedSolo.get(key);
    if (ms === undefined) {
      const slot: GroupSlot = { model: q.model, start: 0, end: q.operators, batch: q.batch, seqLen: q.seqLen, ...(threads === undefined ? {} : { intraOpThreads: threads }) };
      ms = this.#predictor.predict([[slot]], this.#one)[0]!;
      stats.predictorCalls++;
      stats.groupsScored++;
      remember(this.#predictedSolo, key, ms);
    }
    return Number.isFinite(ms) && ms > 0 ? { fastMs: ms, slowMs: ms, record: { drops: 0 } } : undefined;
  }

  /** The count the next launch of `q` (whole) runs at — the decision's — so it is judged on runs (and predictions) at that count; undefined: the device default. */
  #judgedThreads(q: WaitingQuery): number | undefined {
    const alone = this.#pinnedThreads() ?? this.#options.threadsAlone;
    return typeof alone === 'function' ? alone({ model: q.model, start: 0, end: q.operators, batch: q.batch, seqLen: q.seqLen }) : alone;
  }

  /** The measured solo latencies of `q`'s shape when they may justify a drop (whole query, enough runs). */
  #measuredSolo(q: WaitingQuery): Measured | undefined {
    if (q.nextOperator !== 0) return undefined;
    const m = this.#measured.get(shapeKey(q.model, q.batch, q.seqLen, this.#judgedThreads(q)));
    if (m === undefined || m.n < MIN_MEASURED) return undefined;
    const count = Math.min(m.n, MEASURED_KEPT);
    if (m.sortedAt !== m.n) {
      m.sorted.set(m.ms.subarray(0, count));
      m.sorted.subarray(0, count).sort();
      m.sortedAt = m.n;
    }
    const at = (quantile: number): number => m.sorted[Math.max(0, Math.ceil(quantile * count) - 1)]!;
    // crowded, a run at one thread beside the neighbours is as long as the last ones: their median (module docs, "Interference")
    const fastMs = at(this.#crowded && !this.#active ? CROWD_DROP_QUANTILE : FALLBACK_DROP_QUANTILE);
    return { fastMs, slowMs: at(AT_RISK_QUANTILE), record: m };
  }
}
