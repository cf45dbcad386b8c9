/**
 * A Clockwork-style controller: Gujarati et al., "Serving DNNs like Clockwork: Performance
 * Predictability from the Bottom Up", OSDI'20. One query at a time (no overlap, so latency is
 * predictable), earliest deadline first, latency estimated from the recent measurements of the
 * same model and batch, and a query dropped as soon as it can no longer finish by its deadline.
 * With dynamic batching, the largest batch behind the earliest-deadline request whose estimated
 * finish meets the earliest deadline among its requests, up to `max_batch` samples and
 * `max_exec` ms of estimated execution (Clockwork's scheduler parameters `max_batch_size` and
 * `max_allowable_exec_time`, src/clockwork/controller/infer5/: a batch size whose estimate
 * exceeds `max_allowable_exec_time` is never used, batch 1 always is). Differences, on purpose:
 * Clockwork runs only the batch sizes its models were compiled for (1, 2, 4, 8, 16) and excludes
 * sizes by their profiled estimate once at load; here any number of samples up to maxBatchSize
 * may run, and the current estimate decides at every decision.
 */
import type { GroupSlot, Predictor } from '../../predict/predictor.ts';
import type { Decision, GroupObservation, LaunchSegment, QueryController, Rejection, ScheduleInput, WaitingQuery } from '../controller.ts';
import { checkInput, collectHeads, compareUrgency, fusedSlotOf, fusionPlan, newStats, positionOf, SoloMemo, type StatsCounter, withWake } from '../heads.ts';

export interface ClockworkParams {
  /** Measurements kept per (model, batch, seqLen), integer ≥ 1. Clockwork: 10. */
  readonly window: number;
  /** Percentile of the window used as the estimate, in (0, 100]. Clockwork: 99. */
  readonly percentile: number;
  /**
   * Clockwork's `max_exec`: a fused batch whose estimated execution exceeds this (ms) is not
   * chosen; the head alone always may be. > 0; default 25. (Clockwork's `max_batch` is the
   * service's `BatchingLimits.maxBatchSize`, default 16.)
   */
  readonly maxExecMs: number;
}

interface History {
  readonly ring: Float64Array;
  count: number;
  next: number;
  estimateMs: number;
}

/**
 * `p`-th percentile (0 < p ≤ 100) of `xs[0..n)` by linear interpolation between order
 * statistics at position p/100·(n − 1) — the rule of Clockwork's `SlidingWindow::
 * get_percentile` (src/clockwork/util.h) and numpy's default. n = 10, p = 99: 0.09·x₍₈₎ + 0.91·x₍₉₎
 * (0-based order statistics).
 */
export function windowPercentile(xs: Float64Array, n: number, p: number): number {
  const s = xs.slice(0, n).sort();
  const pos = (p / 100) * (n - 1);
  const down = Math.floor(pos);
  const up = Math.ceil(pos);
  return up === down ? s[up]! : s[up]! * (pos - down) + s[down]! * (up - pos);
}

/**
 * clockwork. Each decision:
 * - estimate(q) = the `percentile` (p99) of the last `window` (10) measured latencies of
 *   whole queries of q's (model, batch, seqLen) — the sequence length is part of the key as it
 *   changes the work like the batch does (Clockwork's models have fixed shapes); before any
 *   measurement, or for a query already partly executed (`nextOperator > 0`, which this policy
 *   never produces itself), the predictor's remaining solo latency.
 * - drop (always on, as in Clockwork): a head whose headroom is ≤ 0, or whose estimated finish
 *   `nowMs + runningRemainingMs + estimate` is past its deadline `arrivalMs + qosTargetMs`
 *   (⇔ runningRemainingMs + estimate > headroom) is rejected and replaced by the next query of
 *   its queue (`heads.ts` `collectHeads`; heads without an estimate scored in one batched call).
 * - launch the surviving head with the earliest deadline (ties: arrival, service, id), whole;
 *   predicted latency = its estimate.
 * - dynamic batching (the head carries `batching`): the head is fused with the first m
 *   followers of its `fusionPlan` (queue order, same `fuseKey`, samples s(m) ≤ maxBatchSize),
 *   m the largest with `nowMs + runningRemainingMs + estimate(s(m)) ≤ deadline(m)` (the
 *   earliest deadline among the head and those m followers) and, for m ≥ 1,
 *   `estimate(s(m)) ≤ maxExecMs`; m = 0 (the head alone) otherwise. estimate(s) is the window
 *   estimate of (model, s, seqLen) when measured, else the predictor's whole-model latency at
 *   batch s; all the missing sizes are scored in one batched call. predicted latency =
 *   estimate(s(m)). Without `batching` (or without followers) the decision is unchanged.
 *
 * `observe` records the group latency (`groupLatencyMs`, what the runtime waits for) of groups
 * of exactly one segment covering a whole query; other groups are ignored.
 */
export class ClockworkController implements QueryController {
  readonly policy = 'clockwork';
  readonly launchWhileBusy = false;
  readonly #predictor: Predictor;
  readonly #params: ClockworkParams;
  readonly #history = new Map<string, History>();
  /** Remembered predictor answers for heads without a measured estimate (`heads.ts` `SoloMemo`). */
  readonly #memo = new SoloMemo();

  /** `params` are taken as valid; construct through `createController` (`schedule/index.ts`) to validate them. */
  constructor(predictor: Predictor, params: ClockworkParams) {
    this.#predictor = predictor;
    this.#params = params;
  }

  get params(): ClockworkParams {
    return this.#params;
  }

  /** The current estimate (ms) for whole queries of this shape, or undefined before any measurement. */
  estimateMs(model: string, batch: number, seqLen: number): number | undefined {
    return this.#history.get(keyOf(model, batch, seqLen))?.estimateMs;
  }

  readonly #known = (q: WaitingQuery): number | undefined => (q.nextOperator === 0 ? this.estimateMs(q.model, q.batch, q.seqLen) : undefined);

  decide(input: ScheduleInput): Decision {
    checkInput(input);
    const stats = newStats();
    const rejected: Rejection[] = [];
    const rule = { drop: true, score: true, extraMs: input.runningRemainingMs, known: this.#known, memo: this.#memo };
    const heads = collectHeads(input, this.#predictor, rule, stats, rejected);
    if (heads.length === 0) return { group: [], rejected, stats };
    let best = heads[0]!;
    for (let i = 1; i < heads.length; i++) if (compareUrgency(heads[i]!, best) < 0) best = heads[i]!;
    const q = best.query;
    const segment: LaunchSegment = { queryId: q.id, service: q.service, start: q.nextOperator, end: q.operators };
    const at = positionOf(input.queues, q);
    const plan = at === undefined ? undefined : fusionPlan(at.queue, at.index);
    if (plan === undefined || plan.followers.length === 0) return withWake({ group: [segment], predictedMs: best.soloMs, rejected, stats }, true, heads);
    const estimates = this.#batchEstimates(q, plan.samples, stats);
    const startMs = input.nowMs + input.runningRemainingMs;
    for (let m = plan.followers.length; m >= 1; m--) {
      const ms = estimates[m]!;
      if (ms <= this.#params.maxExecMs && startMs + ms <= plan.deadlineMs[m]!) {
        return withWake({ group: [{ ...segment, fused: plan.followers.slice(0, m).map((f) => f.id) }], predictedMs: ms, rejected, stats }, true, heads);
      }
    }
    return withWake({ group: [segment], predictedMs: best.soloMs, rejected, stats }, true, heads);
  }

  /**
   * estimate(samples[m]) for m ≥ 1 (index 0 unused: the head's own estimate is its `soloMs`):
   * the window estimate when measured, else the memo, else the predictor (the missing sizes in
   * one batched call).
   */
  #batchEstimates(q: WaitingQuery, samples: readonly number[], stats: StatsCounter): number[] {
    const out: number[] = [Number.NaN];
    const missing: { m: number; key: number }[] = [];
    this.#memo.sync(this.#predictor);
    for (let m = 1; m < samples.length; m++) {
      const s = samples[m]!;
      const measured = this.estimateMs(q.model, s, q.seqLen);
      if (measured !== undefined) {
        out.push(measured);
        continue;
      }
      const key = this.#memo.key({ ...q, batch: s });
      const remembered = this.#memo.get(key);
      if (remembered !== undefined) stats.soloMemoHits++;
      else missing.push({ m, key });
      out.push(remembered ?? Number.NaN);
    }
    if (missing.length > 0) {
      const groups: GroupSlot[][] = missing.map(({ m }) => [fusedSlotOf(q, samples[m]!, q.operators)]);
      const scored = this.#predictor.predict(groups);
      stats.predictorCalls++;
      stats.groupsScored += groups.length;
      missing.forEach(({ m, key }, i) => {
        out[m] = scored[i]!;
        this.#memo.set(key, scored[i]!);
      });
    }
    return out;
  }

  /** @throws RangeError for a negative or non-finite `groupLatencyMs` of a recorded group. */
  observe(observation: GroupObservation): void {
    if (observation.segments.length !== 1) return;
    const s = observation.segments[0]!;
    if (s.start !== 0 || s.end !== s.operators) return;
    const ms = observation.groupLatencyMs;
    if (!(ms >= 0) || !Number.isFinite(ms)) throw new RangeError(`groupLatencyMs must be a finite number ≥ 0, got ${ms}`);
    const key = keyOf(s.model, s.batch, s.seqLen);
    let h = this.#history.get(key);
    if (h === undefined) {
      h = { ring: new Float64Array(this.#params.window), count: 0, next: 0, estimateMs: 0 };
      this.#history.set(key, h);
    }
    h.ring[h.next] = ms;
    h.next = (h.next + 1) % h.ring.length;
    h.count = Math.min(h.count + 1, h.ring.length);
    h.estimateMs = windowPercentile(h.ring, h.count, this.#params.percentile);
  }
}

function keyOf(model: string, batch: number, seqLen: number): string {
  return `${model}\u0000${batch}\u0000${seqLen}`;
}
