/**
 * The paper's one-query-at-a-time baselines (Abacus, SC'21: FCFS, SJF and EDF): each
 * decision launches the whole remaining part of ONE head query, alone, so there is no overlap
 * and the latency is predictable but the device idles between small kernels.
 */
import type { Predictor } from '../../predict/predictor.ts';
import type { Decision, QueryController, Rejection, ScheduleInput } from '../controller.ts';
import { type Candidate, checkInput, collectHeads, compareTies, compareUrgency, newStats, predictSolo, SoloMemo } from '../heads.ts';

export type OneAtATimePolicy = 'fcfs' | 'sjf' | 'edf';

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
};

/**
 * fcfs | sjf | edf. Each decision: collect the heads of the queues, with `drop` rejecting the
 * hopeless ones exactly as abacus step 1 (replacing a rejected head by the next query of its
 * queue); launch the first head in the policy's order with all its remaining operators; the
 * prediction is its remaining solo latency. Predictor calls: one per round of step 1 (every
 * head is scored when `drop` is on or the policy is sjf), else one for the chosen query.
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
    const rule = { drop: this.#params.drop, score: this.policy === 'sjf', extraMs: 0, memo: this.#memo };
    const heads = collectHeads(input, this.#predictor, rule, stats, rejected);
    if (heads.length === 0) return { group: [], rejected, stats };
    const order = ORDER[this.policy];
    let best = heads[0]!;
    for (let i = 1; i < heads.length; i++) if (order(heads[i]!, best) < 0) best = heads[i]!;
    const q = best.query;
    const predictedMs = Number.isNaN(best.soloMs) ? predictSolo(this.#predictor, q, stats, this.#memo) : best.soloMs;
    return { group: [{ queryId: q.id, service: q.service, start: q.nextOperator, end: q.operators }], predictedMs, rejected, stats };
  }

  observe(): void {
    // Predictions come from the offline-trained predictor; nothing to learn here.
  }
}
