/**
 * The paper's one-query-at-a-time baselines (Abacus, SC'21: FCFS, SJF and EDF): each
 * decision launches the whole remaining part of ONE head query, alone, so there is no overlap
 * and the latency is predictable but the device idles between small kernels.
 *
 * `fcfs-batch` and `edf-batch` are the same policies with greedy dynamic batching (docs/design.md#dynamic-batching,
 * docs/batching.md): the chosen head takes along every query that may be fused behind
 * it (`heads.ts` `fusionPlan`: the following queries of its queue with its `fuseKey`, in queue
 * order, up to `BatchingLimits.maxBatchSize` samples) — the "batch as many as wait" rule of a
 * work-conserving batcher (Triton's dynamic batcher with its defaults: no delay, "batches as
 * large as possible up to the maximum batch size", docs/user_guide/batcher.md).
 */
import type { Predictor } from '../../predict/predictor.ts';
import type { Decision, LaunchSegment, QueryController, Rejection, ScheduleInput } from '../controller.ts';
import { type Candidate, checkInput, collectHeads, compareTies, compareUrgency, fusionPlan, newStats, positionOf, predictSolo, SoloMemo, withWake } from '../heads.ts';

export type OneAtATimePolicy = 'fcfs' | 'sjf' | 'edf' | 'fcfs-batch' | 'edf-batch';

export interface OneAtATimeParams {
  /** Reject hopeless heads with the abacus rule (headroom ≤ 0 or predicted remaining solo > headroom). Default on. */
  readonly drop: boolean;
}

/** Which head goes first. */
const ORDER: Readonly<Record<OneAtATimePolicy, (a: Candidate, b: Candidate) => number>> = {
  /** First come, first served: earliest arrival (then service name, query id). */
  fcfs: compareTies,
  /** Shortest job first: smallest predicted remaining solo latency (then arrival, service, id). */
  sjf: (a, b) => a.soloMs - b.soloMs || compareTies(a, b),
  /** Earliest deadline first = least headroom (then arrival, service, id). */
  edf: compareUrgency,
  'fcfs-batch': compareTies,
  'edf-batch': compareUrgency,
};

/** The policies that fuse the chosen head with its followers. */
const BATCHING: ReadonlySet<OneAtATimePolicy> = new Set(['fcfs-batch', 'edf-batch']);

/**
 * fcfs | sjf | edf | fcfs-batch | edf-batch. Each decision: collect the heads of the queues,
 * with `drop` rejecting the hopeless ones exactly as abacus step 1 (replacing a rejected head
 * by the next query of its queue); launch the first head in the policy's order with all its
 * remaining operators; the prediction is its remaining solo latency. Predictor calls: one per
 * round of step 1 (every head is scored when `drop` is on or the policy is sjf), else one for
 * the chosen query.
 *
 * fcfs-batch / edf-batch choose and drop exactly as fcfs / edf (the drop rule looks at each
 * head alone, at its own batch), then fuse the chosen head with EVERY follower of its
 * `fusionPlan` (`LaunchSegment.fused`, queue order; followers are not dropped — the fused batch
 * runs under the deadline of its most urgent member, whatever that is); the prediction is the
 * head's solo latency at the fused samples (one more predictor call unless the memo has it).
 * Without followers (no `batching` on the queries, a lone query, a head already started) they
 * decide exactly as fcfs / edf.
 */
export class OneAtATimeController implements QueryController {
  readonly policy: OneAtATimePolicy;
  readonly launchWhileBusy = false;
  readonly #predictor: Predictor;
  readonly #params: OneAtATimeParams;
  /** Remembered solo predictions (`heads.ts` `SoloMemo`: same values, fewer predictor calls). */
  readonly #memo = new SoloMemo();

  /** `params` are taken as valid; construct through `createController` (`schedule/index.ts`) to validate them. */
  constructor(policy: OneAtATimePolicy, predictor: Predictor, params: OneAtATimeParams) {
    this.policy = policy;
    this.#predictor = predictor;
    this.#params = params;
  }

  get params(): OneAtATimeParams {
    return this.#params;
  }

  decide(input: ScheduleInput): Decision {
    checkInput(input);
    const stats = newStats();
    const rejected: Rejection[] = [];
    const rule = { drop: this.#params.drop, score: this.policy === 'sjf', extraMs: input.runningRemainingMs, memo: this.#memo };
    const heads = collectHeads(input, this.#predictor, rule, stats, rejected);
    if (heads.length === 0) return { group: [], rejected, stats };
    const order = ORDER[this.policy];
    let best = heads[0]!;
    for (let i = 1; i < heads.length; i++) if (order(heads[i]!, best) < 0) best = heads[i]!;
    const q = best.query;
    const segment: LaunchSegment = { queryId: q.id, service: q.service, start: q.nextOperator, end: q.operators };
    if (BATCHING.has(this.policy)) {
      const at = positionOf(input.queues, q);
      const plan = at === undefined ? undefined : fusionPlan(at.queue, at.index);
      if (plan !== undefined && plan.followers.length > 0) {
        const samples = plan.samples[plan.followers.length]!;
        const predictedMs = predictSolo(this.#predictor, { ...q, batch: samples }, stats, this.#memo);
        return withWake({ group: [{ ...segment, fused: plan.followers.map((f) => f.id) }], predictedMs, rejected, stats }, rule.drop, heads);
      }
    }
    const predictedMs = Number.isNaN(best.soloMs) ? predictSolo(this.#predictor, q, stats, this.#memo) : best.soloMs;
    return withWake({ group: [segment], predictedMs, rejected, stats }, rule.drop, heads);
  }

  observe(): void {
    // Predictions come from the offline-trained predictor; nothing to learn here.
  }
}
