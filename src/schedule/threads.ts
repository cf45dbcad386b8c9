/**
 * Cores as a decision (docs/threads.md): a policy with a thread rule (`threads.ts`; policy
 * parameter `threads`, e.g. `split:2`) decides, per group, how many intra-op threads each of
 * its segments gets, and predicts every candidate group at exactly those counts.
 *
 * Both pieces wrap what exists instead of changing each policy:
 * - `ThreadedPredictor` gives every slot of a group of k slots `threadsFor(rule, k)` threads
 *   (a slot that already names a count keeps it) before the wrapped predictor scores it. Every
 *   group a controller scores while searching is scored as it would run: with `split:C`, the
 *   urgent query alone at all C cores, {q0, q1} at ⌊C/2⌋ each, and so on.
 * - `ThreadAssigningController` gives every segment of a decided group of k segments
 *   `threadsFor(rule, k)` (`LaunchSegment.intraOpThreads`). The decision's `predictedMs` is the
 *   prediction of that group at those counts, since its controller scores through a
 *   `ThreadedPredictor` with the same rule (`createController` builds both).
 *
 * With `fcfs`/`sjf`/`edf` every group has one segment, so `split:C` is "every core to the
 * running query", the strong one-at-a-time baseline on a CPU; with `abacus` a lone query gets
 * every core and an overlapped group splits them (VELTAIR, ASPLOS'22: the parallelism of a
 * co-located query adapts to what runs beside it). `split` is deterministic and uses only the
 * group's size: no search over thread counts (left out: it would multiply the candidates each
 * search round scores).
 *
 * `adapt:C` measures instead of assuming for the one case that is cheap to search, a query alone
 * (`LoneThreadChooser`): a lone slot is predicted at each of the rule's `loneCandidates` and runs
 * at the one whose prediction × the recent measured ÷ predicted ratio of that model at that count
 * is least. A count not chosen is measured by probes (below), so a neighbour that arrives or
 * leaves moves the choice within a few probes. Groups of k ≥ 2 keep `split:C`.
 */
import type { Group, GroupSlot, Predictor } from '../predict/predictor.ts';
import { median } from '../stats.ts';
import { formatThreadRule, loneCandidates, threadsFor, type ThreadRule } from '../threads.ts';
import type { Decision, GroupObservation, LaunchSegment, PolicyName, QueryController, RefinementStatus, Rejection, ScheduleInput, WaitingQuery } from './controller.ts';
import type { FallbackStatus } from './fallback.ts';

/**
 * A predictor that scores each group at the thread counts `rule` gives it (module docs).
 * Allocates one slot copy per slot without a count per call (a handful per search round).
 */
export class ThreadedPredictor implements Predictor {
  /** With an `adapt` rule: what picks the count of a query alone; undefined otherwise. */
  readonly chooser: LoneThreadChooser | undefined;
  readonly kind: string;
  readonly deviceId: string;
  readonly maxSlots: number;
  readonly threadFeature: boolean;

  /** @param rule not `device` (that rule changes nothing; use `base` itself); with `adapt`, the predictor builds its `chooser`. */
  constructor(
    readonly base: Predictor,
    readonly rule: ThreadRule,
  ) {
    this.chooser = rule.kind === 'adapt' ? new LoneThreadChooser(base, rule) : undefined;
    this.kind = base.kind;
    this.deviceId = base.deviceId;
    this.maxSlots = base.maxSlots;
    this.threadFeature = base.threadFeature === true;
  }

  /** The chooser's while it has one (its counts follow measurements), else the base's. */
  get revision(): number | undefined {
    return this.chooser?.revision ?? this.base.revision;
  }

  /** The base's models, read each time (a base may admit models while serving, `predict/unseen.ts`). */
  get models(): readonly string[] {
    return this.base.models;
  }

  /** `group` with every slot's thread count set by the rule (slots that have one keep it; a lone slot under `adapt`: the chooser's count). */
  withThreads(group: Group): Group {
    if (this.chooser !== undefined && group.length === 1 && group[0]!.intraOpThreads === undefined) return [{ ...group[0]!, intraOpThreads: this.chooser.threadsFor(group[0]!) }];
    const n = threadsFor(this.rule, Math.max(1, group.length));
    if (n === undefined || group.every((s) => s.intraOpThreads !== undefined)) return group;
    return group.map((s): GroupSlot => (s.intraOpThreads === undefined ? { ...s, intraOpThreads: n } : s));
  }

  /** @throws as the base predictor. */
  predict(groups: readonly Group[], out?: Float64Array): Float64Array {
    return this.base.predict(
      groups.map((g) => this.withThreads(g)),
      out,
    );
  }
}

/** Wraps a one-group-at-a-time controller: every decided segment gets the rule's thread count (module docs). */
export class ThreadAssigningController implements QueryController {
  readonly policy: PolicyName;
  readonly launchWhileBusy: boolean;
  readonly oneGroupPerService?: boolean;

  /** With an `adapt` rule: the chooser its inner controller's `ThreadedPredictor` consults (the same object). */
  readonly chooser: LoneThreadChooser | undefined;

  /**
   * @param inner a controller that scores through a `ThreadedPredictor` with the same `rule`.
   * @param chooser required with an `adapt` rule: the one the inner controller's predictor uses.
   * @throws RangeError for a `launchWhileBusy` controller with a `split` or `adapt` rule (its
   *   groups overlap one another, so no rule can split the cores among them; a `fixed` count
   *   does not depend on what runs beside, so it is given to every launch), the `device` rule,
   *   or an `adapt` rule without a chooser.
   */
  constructor(
    readonly inner: QueryController,
    readonly rule: ThreadRule,
    chooser?: LoneThreadChooser,
  ) {
    if (rule.kind === 'adapt' && chooser === undefined) throw new RangeError(`ThreadAssigningController: the '${formatThreadRule(rule)}' rule needs the LoneThreadChooser its controller's ThreadedPredictor consults`);
    this.chooser = rule.kind === 'adapt' ? chooser : undefined;
    if (inner.launchWhileBusy && rule.kind !== 'fixed') throw new RangeError(`policy ${inner.policy} launches while busy: a thread rule that splits cores (${formatThreadRule(rule)}) needs one group at a time; use 'fixed:N'`);
    if (rule.kind === 'device') throw new RangeError("ThreadAssigningController: the 'device' rule assigns nothing; use the controller itself");
    this.policy = inner.policy;
    this.launchWhileBusy = inner.launchWhileBusy;
    if (inner.oneGroupPerService !== undefined) this.oneGroupPerService = inner.oneGroupPerService;
  }

  get refinement(): RefinementStatus | undefined {
    return this.inner.refinement;
  }

  get fallback(): FallbackStatus | undefined {
    return this.inner.fallback;
  }

  /**
   * The inner decision with `intraOpThreads` on every segment (a lone one under `adapt`: the
   * chooser's count, a probe's when one is due, as the inner controller was scoring).
   * @throws as the inner controller.
   */
  decide(input: ScheduleInput): Decision {
    const chooser = this.chooser;
    if (chooser === undefined) return this.#assign(this.inner.decide(input), input);
    const [calls, groups] = [chooser.predictorCalls, chooser.groupsScored];
    chooser.probing = chooser.probeDue();
    try {
      const d = this.#assign(this.inner.decide(input), input);
      const extraCalls = chooser.predictorCalls - calls;
      if (extraCalls === 0) return d;
      return { ...d, stats: { ...d.stats, predictorCalls: d.stats.predictorCalls + extraCalls, groupsScored: d.stats.groupsScored + chooser.groupsScored - groups } };
    } finally {
      chooser.probing = false;
    }
  }

  #assign(d: Decision, input: ScheduleInput): Decision {
    if (d.group.length === 0) return d;
    // the calibration fallback's launch with its own count (abacus `fallbackThreads`) keeps it
    if (d.fallback === true && d.group.every((s) => s.intraOpThreads !== undefined)) return d;
    if (d.group.length === 1 && this.chooser !== undefined) {
      const s = d.group[0]!;
      const slot = loneSlot(s, input);
      if (slot !== undefined) return { ...d, group: [{ ...s, intraOpThreads: this.chooser.threadsFor(slot) }] };
    }
    const n = threadsFor(this.rule, d.group.length)!;
    return { ...d, group: d.group.map((s) => ({ ...s, intraOpThreads: n })) };
  }

  observe(observation: GroupObservation): void {
    this.inner.observe(observation);
    this.chooser?.observe(observation);
  }

  rejected(rejections: readonly Rejection[]): void {
    this.inner.rejected?.(rejections);
  }
}

/** How `LoneThreadChooser` measures (defaults in brackets). */
export interface LoneThreadOptions {
  /** Recent lone groups kept per (model, count), whose median measured ÷ predicted ratio corrects that count's prediction [8]. */
  readonly window?: number;
  /** Lone groups of a (model, count) before its ratio is used; until then its prediction stands uncorrected [3]. */
  readonly minObservations?: number;
  /** A probe every this many lone decisions once every (model, count) seen has its minimum [16]. */
  readonly probeEvery?: number;
  /** A probe every this many lone decisions while some (model, count) has fewer [4]. */
  readonly probeEveryLearning?: number;
  /** A count below C is chosen only when its score is below (1 − margin) × C's [0.1]: noise in a window of 8 runs does not move a lone query off every core. */
  readonly margin?: number;
}

/**
 * Picks the intra-op thread count of a query that runs alone under an `adapt:C` rule (module
 * docs), from what lone groups measured.
 *
 * - **Choice.** For a lone slot of model m, each candidate count n (`loneCandidates`) scores
 *   p(n) × r(m, n): p the base predictor's latency at n, r the median of measured ÷ p over the
 *   last `window` lone groups of m at n (1 until `minObservations` of them). Least score wins,
 *   but a count below C only when its score is under (1 − `margin`) × C's (ties and near-ties
 *   stay on every core, where the strong baseline runs). A lone segment is one that ran with
 *   nothing beside it (the group latency is its latency), a whole query or part of one.
 * - **Probes.** The count chosen is measured whenever it runs; the others only when probed:
 *   once `probeEvery` lone groups have been observed since the last probe (`probeEveryLearning`
 *   while some model has a count with fewer than `minObservations`), decisions are taken with
 *   every lone slot at its least-measured other count (`probing`; ties: the larger count) until
 *   a lone group at a count other than its best is observed. A probe costs at most one query's
 *   difference between two counts, once per 16 lone queries. The controller scores a probe's
 *   decision at the probe's counts, so its `predictedMs` is that of what runs. A decision
 *   changes no state (the same input gives the same decision until an observation).
 * - **Cost.** A lone slot's choice is one predictor call over the candidates, remembered per
 *   shape until the next observation or probe switch (`revision`); the controller's decision
 *   stats count these calls.
 * - **Why a ratio per count.** The refiner's key (`predict/refine.ts`) does not hold the thread
 *   count: it corrects a model's lone groups at every count by one fit. A busy neighbour can slow
 *   a second intra-op thread more than the first (docs/threads.md), which one fit cannot
 *   tell; the per-count ratios do, and they only rank counts, never change a prediction.
 *
 * A model's ratios pool its shapes and cuts: where the base predictor's error differs between
 * shapes, the count that ran the friendlier shapes lately looks faster (on `sim:a100` with a
 * crude predictor and no thread model, 19 % of lone groups ran at one thread). A key per shape
 * would learn each more slowly and probe more. State is bounded by models × candidates ×
 * `window`. Not thread-safe (one controller's).
 */
export class LoneThreadChooser {
  /** The counts a lone query may run at, descending (`loneCandidates`). */
  readonly candidates: readonly number[];
  /** Calls to the base predictor so far, and the groups they scored (for decision stats). */
  predictorCalls = 0;
  groupsScored = 0;
  #probing = false;
  #observed = 0;
  /** Chosen count per lone shape, valid for the current `revision`. */
  readonly #chosen = new Map<string, number>();
  readonly #window: number;
  readonly #minObservations: number;
  readonly #probeEvery: number;
  readonly #probeEveryLearning: number;
  readonly #margin: number;
  /** Per model: per candidate index, a ring of ratios and how many were pushed. */
  readonly #ratios = new Map<string, { ring: Float64Array; n: number }[]>();
  #sinceProbe = 0;
  readonly #many: Float64Array;
  #probes = 0;

  /**
   * @param base the predictor whose per-count latencies are ranked (thread-aware: `threadFeature`).
   * @param rule an `adapt` rule.
   * @throws RangeError for another rule, a count option that is not an integer ≥ 1, or a
   *   `margin` outside [0, 1).
   */
  constructor(
    readonly base: Predictor,
    rule: ThreadRule,
    options: LoneThreadOptions = {},
  ) {
    if (rule.kind !== 'adapt') throw new RangeError(`LoneThreadChooser needs an adapt:C rule, got '${formatThreadRule(rule)}'`);
    this.candidates = loneCandidates(rule);
    this.#window = positive('window', options.window ?? 8);
    this.#minObservations = positive('minObservations', options.minObservations ?? 3);
    this.#probeEvery = positive('probeEvery', options.probeEvery ?? 16);
    this.#probeEveryLearning = positive('probeEveryLearning', options.probeEveryLearning ?? 4);
    this.#many = new Float64Array(this.candidates.length);
    const margin = options.margin ?? 0.1;
    if (!(margin >= 0 && margin < 1)) throw new RangeError(`LoneThreadChooser margin ${margin} must be in [0, 1)`);
    this.#margin = margin;
  }

  /** Lone groups observed at a count other than the best one then (probes, whoever decided them). */
  get probes(): number {
    return this.#probes;
  }

  /** True while decisions are probes (set by `ThreadAssigningController.decide` from `probeDue`). */
  get probing(): boolean {
    return this.#probing;
  }

  set probing(on: boolean) {
    if (on === this.#probing) return;
    this.#probing = on;
    this.#chosen.clear();
  }

  /** Moves with every recorded observation and probe switch (`Predictor.revision`). */
  get revision(): number {
    return 2 * this.#observed + (this.#probing ? 1 : 0);
  }

  /** The count `slot` runs at alone now: the best by score, or while `probing` its least-measured other count. */
  threadsFor(slot: GroupSlot): number {
    const c = this.candidates;
    if (c.length === 1) return c[0]!;
    const key = `${slot.model}\u0000${slot.start}\u0000${slot.end}\u0000${slot.batch}\u0000${slot.seqLen}`;
    const known = this.#chosen.get(key);
    if (known !== undefined) return known;
    const n = this.#choose(slot, this.#probing);
    if (this.#chosen.size >= 4096) this.#chosen.clear();
    this.#chosen.set(key, n);
    return n;
  }

  #choose(slot: GroupSlot, probing: boolean): number {
    return this.#pick(slot.model, this.#predictAll(slot), probing);
  }

  /** The base predictor's latency of `slot` alone at every candidate count (one call; `#many`, overwritten by the next). */
  #predictAll(slot: GroupSlot): Float64Array {
    const groups = this.candidates.map((n): Group => [{ ...slot, intraOpThreads: n }]);
    this.predictorCalls++;
    this.groupsScored += groups.length;
    return this.base.predict(groups, this.#many);
  }

  /** The candidate count for a slot of `model` predicted `p` (per candidate): the best by score, or while `probing` its least-measured other count. */
  #pick(model: string, p: Float64Array, probing: boolean): number {
    const c = this.candidates;
    const rows = this.#ratios.get(model);
    let best = 0;
    let bestScore = p[0]! * this.#ratio(rows?.[0]) * (1 - this.#margin);
    for (let i = 1; i < c.length; i++) {
      const score = p[i]! * this.#ratio(rows?.[i]);
      if (score < bestScore) [best, bestScore] = [i, score];
    }
    if (!probing) return c[best]!;
    let probe = -1;
    for (let i = 0; i < c.length; i++) {
      if (i !== best && (probe < 0 || (rows?.[i]?.n ?? 0) < (rows?.[probe]?.n ?? 0))) probe = i;
    }
    return c[probe]!;
  }

  /** True when the next decision should be a probe (`probing`). */
  probeDue(): boolean {
    return this.#sinceProbe + 1 >= (this.#learning() ? this.#probeEveryLearning : this.#probeEvery);
  }

  /** Record a lone group's measured ÷ predicted ratio at the count it ran with; other groups are ignored. */
  observe(observation: GroupObservation): void {
    if (observation.segments.length !== 1) return;
    const s = observation.segments[0]!;
    const i = s.intraOpThreads === undefined ? -1 : this.candidates.indexOf(s.intraOpThreads);
    const measuredMs = observation.groupLatencyMs;
    if (i < 0 || !(measuredMs > 0) || !Number.isFinite(measuredMs)) return;
    const p = this.#predictAll({ model: s.model, start: s.start, end: s.end, batch: s.batch, seqLen: s.seqLen });
    const predictedMs = p[i]!;
    if (!(predictedMs > 0) || !Number.isFinite(predictedMs)) return;
    if (this.#pick(s.model, p, false) !== s.intraOpThreads) {
      this.#probes++;
      this.#sinceProbe = 0;
    } else {
      this.#sinceProbe++;
    }
    let rows = this.#ratios.get(s.model);
    if (rows === undefined) this.#ratios.set(s.model, (rows = this.candidates.map(() => ({ ring: new Float64Array(this.#window), n: 0 }))));
    const row = rows[i]!;
    row.ring[row.n % this.#window] = measuredMs / predictedMs;
    row.n++;
    this.#observed++;
    this.#chosen.clear();
  }

  /** Per candidate: the median measured ÷ predicted ratio of `model`'s lone groups (null until `minObservations`). */
  ratios(model: string): (number | null)[] {
    const rows = this.#ratios.get(model);
    return this.candidates.map((_, i) => {
      const row = rows?.[i];
      return row !== undefined && row.n >= this.#minObservations ? this.#ratio(row) : null;
    });
  }

  #ratio(row: { ring: Float64Array; n: number } | undefined): number {
    if (row === undefined || row.n < this.#minObservations) return 1;
    return median(Array.from(row.ring.subarray(0, Math.min(row.n, this.#window))));
  }

  /** Some model seen has a count with fewer than `minObservations` lone groups. */
  #learning(): boolean {
    for (const rows of this.#ratios.values()) if (rows.some((r) => r.n < this.#minObservations)) return true;
    return this.#ratios.size === 0;
  }
}

/**
 * The predictor's slot of a decided lone segment: its lead query's model and sequence length,
 * the samples of the lead and its fused queries; undefined when the lead is not in `input`
 * (a controller's bug: the segment then keeps the rule's count for a group of one).
 */
function loneSlot(s: LaunchSegment, input: ScheduleInput): GroupSlot | undefined {
  let lead: WaitingQuery | undefined;
  const fused = new Set(s.fused ?? []);
  let samples = 0;
  for (const queue of input.queues) {
    for (const q of queue) {
      if (q.id === s.queryId) lead = q;
      else if (fused.has(q.id)) samples += q.batch;
    }
  }
  return lead === undefined ? undefined : { model: lead.model, start: s.start, end: s.end, batch: lead.batch + samples, seqLen: lead.seqLen };
}

function positive(name: string, v: number): number {
  if (!Number.isInteger(v) || v < 1) throw new RangeError(`LoneThreadChooser ${name} ${v} must be an integer ≥ 1`);
  return v;
}
