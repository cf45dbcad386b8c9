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
 * co-located query adapts to what runs beside it). The rule is deterministic and uses only the
 * group's size: no search over thread counts (left out: it would multiply the candidates each
 * search round scores).
 */
import type { Group, GroupSlot, Predictor } from '../predict/predictor.ts';
import { formatThreadRule, threadsFor, type ThreadRule } from '../threads.ts';
import type { Decision, GroupObservation, PolicyName, QueryController, RefinementStatus, ScheduleInput } from './controller.ts';
import type { FallbackStatus } from './fallback.ts';

/**
 * A predictor that scores each group at the thread counts `rule` gives it (module docs).
 * Allocates one slot copy per slot without a count per call (a handful per search round).
 */
export class ThreadedPredictor implements Predictor {
  readonly kind: string;
  readonly deviceId: string;
  readonly maxSlots: number;
  readonly threadFeature: boolean;

  /** @param rule not `device` (that rule changes nothing; use `base` itself). */
  constructor(
    readonly base: Predictor,
    readonly rule: ThreadRule,
  ) {
    this.kind = base.kind;
    this.deviceId = base.deviceId;
    this.maxSlots = base.maxSlots;
    this.threadFeature = base.threadFeature === true;
  }

  /** The base's models, read each time (a base may admit models while serving, `predict/unseen.ts`). */
  get models(): readonly string[] {
    return this.base.models;
  }

  /** `group` with every slot's thread count set by the rule (slots that have one keep it). */
  withThreads(group: Group): Group {
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

  /**
   * @param inner a controller that scores through a `ThreadedPredictor` with the same `rule`.
   * @throws RangeError for a `launchWhileBusy` controller (its groups overlap one another
   *   uncoordinated, so no rule can split the cores among them) or the `device` rule.
   */
  constructor(
    readonly inner: QueryController,
    readonly rule: ThreadRule,
  ) {
    if (inner.launchWhileBusy) throw new RangeError(`policy ${inner.policy} launches while busy: a thread rule (${formatThreadRule(rule)}) needs one group at a time`);
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

  /** The inner decision with `intraOpThreads` on every segment. @throws as the inner controller. */
  decide(input: ScheduleInput): Decision {
    const d = this.inner.decide(input);
    if (d.group.length === 0) return d;
    const n = threadsFor(this.rule, d.group.length)!;
    return { ...d, group: d.group.map((s) => ({ ...s, intraOpThreads: n })) };
  }

  observe(observation: GroupObservation): void {
    this.inner.observe(observation);
  }
}
