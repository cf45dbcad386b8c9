/**
 * The paper's multi-way search experiment (`abacus reproduce search`, docs/reproduction.md; Abacus SC'21, "Effectiveness of
 * multi-way search": the time to determine an operator group with 1–16 search ways, ≈ 0.07–0.09
 * ms on the authors' machine). Unlike every other experiment of `abacus reproduce`, this is a
 * real measurement: the wall time of `AbacusController.decide` on this machine's CPU, with the
 * trained MLP predictor it serves with, timed one decision at a time with
 * `process.hrtime.bigint()` (as `bench/schedule.ts`).
 *
 * Inputs (`searchScenarios`, which `bench/schedule.ts` uses too, so that the search runs): per scenario one head per
 * service, random batch sizes and sequence lengths from the given sets, a third of them
 * partly executed, a random urgency order; q0's budget is drawn between the predicted latency
 * of q0 alone and of the largest prefix (computed with the same predictor, outside the timing),
 * the other heads have ample headroom (none is dropped). The same scenarios are used for every
 * number of ways; ways are interleaved in rounds so that machine noise spreads evenly.
 *
 * `ways = 1` is plain bisection (one cut point per predictor call). The controller factory
 * (`createController`) accepts ways ≥ 2 only, so the controller is built directly here.
 */
import { Rng } from '../rng.ts';
import type { ModelSpec } from '../model/spec.ts';
import type { GroupSlot, Predictor } from '../predict/predictor.ts';
import { nearestRank } from '../runtime/stats.ts';
import { AbacusController } from '../schedule/index.ts';
import type { ScheduleInput, WaitingQuery } from '../schedule/controller.ts';

/** One service of the scenarios. */
export interface SearchService {
  readonly spec: ModelSpec;
  readonly batchSizes: readonly number[];
  /** Sequence lengths (sequence models; others use 0). */
  readonly seqLens: readonly number[];
}

export interface SearchOptions {
  readonly services: readonly SearchService[];
  readonly predictor: Predictor;
  /** Ways to measure, e.g. 1..16. */
  readonly ways: readonly number[];
  /** Timed decisions per ways (integer ≥ 1). */
  readonly decisions: number;
  /** Untimed decisions per ways before timing. */
  readonly warmup: number;
  /** Abacus slack, ms (paper: 5). */
  readonly slackMs: number;
  readonly seed: number;
  /** Distinct scenarios, cycled [512]. */
  readonly scenarios?: number;
}

/** Decision time at one number of ways. */
export interface SearchRow {
  readonly ways: number;
  readonly decisions: number;
  readonly medianUs: number;
  readonly p99Us: number;
  readonly meanUs: number;
  /** Per decision, averaged. */
  readonly predictorCalls: number;
  readonly groupsScored: number;
  readonly searchRounds: number;
}

/** A uniformly random element of `xs`; a single choice draws nothing from `rng`. */
function pick<T>(rng: Rng, xs: readonly T[]): T {
  return xs.length === 1 ? xs[0]! : xs[Math.floor(rng.nextUnit() * xs.length)]!;
}

/** Scenarios where the controller has prefixes to score and a cut to search (see the file comment). */
export function searchScenarios(services: readonly SearchService[], predictor: Predictor, count: number, seed: number): ScheduleInput[] {
  const rng = new Rng(seed);
  const nowMs = 10_000;
  const out: ScheduleInput[] = [];
  let id = 0;
  for (let k = 0; k < count; k++) {
    const heads: WaitingQuery[] = services.map((s, i) => {
      const n = s.spec.operators.length;
      return {
        id: `q${id++}`,
        service: `s${i}-${s.spec.name}`,
        model: s.spec.name,
        operators: n,
        nextOperator: rng.nextUnit() < 0.33 ? Math.floor(rng.nextUnit() * n) : 0,
        batch: pick(rng, s.batchSizes),
        seqLen: s.spec.dynamicAxes.seq === undefined ? 0 : pick(rng, s.seqLens),
        arrivalMs: 0,
        qosTargetMs: 0,
      };
    });
    const order = heads.map((_, i) => i);
    for (let i = order.length - 1; i > 0; i--) {
      const j = Math.floor(rng.nextUnit() * (i + 1));
      [order[i], order[j]] = [order[j]!, order[i]!];
    }
    const slot = (q: WaitingQuery): GroupSlot => ({ model: q.model, start: q.nextOperator, end: q.operators, batch: q.batch, seqLen: q.seqLen });
    const slots = order.map((i) => slot(heads[i]!)).slice(0, predictor.maxSlots);
    const prefix = predictor.predict(slots.map((_, j) => slots.slice(0, j + 1)));
    const solo = predictor.predict(slots.map((s) => [s]));
    const p1 = prefix[0]!;
    const pMax = Math.max(...prefix);
    const runningRemainingMs = rng.nextUnit() < 0.5 ? 0 : rng.nextUnit() * 5;
    const headroom0 = runningRemainingMs + p1 + rng.nextUnit() * Math.max(0, pMax - p1) + 0.01;
    const queues: WaitingQuery[][] = order.map((i, rank) => {
      const headroomMs = rank === 0 ? headroom0 : Math.max(headroom0, solo[rank] ?? headroom0) + 10 * rank;
      const waitedMs = rng.nextUnit() * 20;
      return [{ ...heads[i]!, arrivalMs: nowMs - waitedMs, qosTargetMs: headroomMs + waitedMs }];
    });
    out.push({ nowMs, queues, runningRemainingMs });
  }
  return out;
}

/**
 * Measure decision time per number of ways (see the file comment). Synchronous CPU work.
 * @throws RangeError for a ways value < 1 or decisions < 1.
 */
export function measureSearch(o: SearchOptions): SearchRow[] {
  if (!Number.isInteger(o.decisions) || o.decisions < 1) throw new RangeError(`decisions must be an integer ≥ 1, got ${o.decisions}`);
  for (const w of o.ways) if (!Number.isInteger(w) || w < 1) throw new RangeError(`ways must be integers ≥ 1, got ${w}`);
  const inputs = searchScenarios(o.services, o.predictor, o.scenarios ?? 512, o.seed);
  const controllers = o.ways.map((ways) => new AbacusController(o.predictor, { ways, slackMs: o.slackMs, drop: true }));
  for (const c of controllers) for (let i = 0; i < o.warmup; i++) c.decide(inputs[i % inputs.length]!);
  const rounds = Math.min(10, o.decisions);
  const times = o.ways.map(() => new Float64Array(o.decisions));
  const totals = o.ways.map(() => ({ calls: 0, scored: 0, rounds: 0 }));
  const filled = o.ways.map(() => 0);
  for (let r = 0; r < rounds; r++) {
    const upTo = Math.round(((r + 1) * o.decisions) / rounds);
    controllers.forEach((c, w) => {
      const t = times[w]!;
      const tot = totals[w]!;
      for (let i = filled[w]!; i < upTo; i++) {
        const input = inputs[i % inputs.length]!;
        const t0 = process.hrtime.bigint();
        const d = c.decide(input);
        const t1 = process.hrtime.bigint();
        t[i] = Number(t1 - t0) / 1000;
        tot.calls += d.stats.predictorCalls;
        tot.scored += d.stats.groupsScored;
        tot.rounds += d.stats.searchRounds;
      }
      filled[w] = upTo;
    });
  }
  return o.ways.map((ways, w) => {
    const t = times[w]!.sort();
    const n = o.decisions;
    return {
      ways,
      decisions: n,
      medianUs: nearestRank(t, 50),
      p99Us: nearestRank(t, 99),
      meanUs: t.reduce((a, b) => a + b, 0) / n,
      predictorCalls: totals[w]!.calls / n,
      groupsScored: totals[w]!.scored / n,
      searchRounds: totals[w]!.rounds / n,
    };
  });
}
