/**
 * QueryController conformance suite (STYLE.md §2): the behaviour every controller must show,
 * run against each one in a few lines:
 *
 *   describeControllerConformance('abacus ways 4', (p) => createController('abacus', { ways: 4 }, p));
 *
 * The factory gets a `FakePredictor` (test/schedule/fake-predictor.ts) and returns a fresh
 * controller. Most cases check invariants over seeded random inputs (`randomInput`), so they
 * hold whatever the policy decides. Known gaps are skipped by name with a reason:
 * `{ skip: { [CASE.fifo]: 'why' } }`.
 */
import { describe, expect, it } from 'vitest';
import { nextInstantAfter } from '../../src/clock/instant.ts';
import type { Decision, QueryController, ScheduleInput, WaitingQuery } from '../../src/schedule/controller.ts';
import { FakePredictor } from './fake-predictor.ts';
import { rng } from '../helpers/rng.ts';
import { input, query, randomInput } from './query.ts';

export interface ControllerConformanceOptions {
  readonly skip?: Readonly<Record<string, string>>;
  /** Random inputs per case (default 400). */
  readonly samples?: number;
}

export const CASE = {
  empty: 'an empty input gives an empty decision',
  segments: 'every segment names a visible query, starts at its nextOperator and ends in (start, operators]',
  unique: 'no query is launched twice, rejected twice, or both launched and rejected',
  reasons: 'every rejection carries reason qos_violation, its service and a headroom that justifies it',
  progress: 'an empty group means every visible query was rejected',
  fifo: 'one-group policies (and one-group-per-service batchers) launch at most one query per service, the first of its queue after rejections (a fallback decision may pass over kept queries, woken by their deadlines), fused followers in queue order passing over only rejected, unfusable or too large queries, within maxSlots',
  predicted: 'predictedMs is finite and ≥ 0 when present, absent for an empty group',
  deterministic: 'the same input gives the same decision, on the same and on a fresh instance',
  readOnly: 'decide does not mutate its (frozen) input',
  stats: 'stats count the predictor calls and groups scored',
  malformed: 'malformed input throws RangeError naming the field',
  observe: 'observe (and rejected) accept feedback from executed decisions, and the invariants still hold after it',
  fused:
    'with dynamic batching: each fused follower waits at operator 0 in the lead\'s queue with its fuseKey, the samples are ≤ maxBatchSize, followers are disjoint from every other segment and rejection, wakeAtMs is later than nowMs; every invariant holds, also after observing fused groups',
} as const;

function deepFreeze<T>(x: T): T {
  if (x !== null && typeof x === 'object') {
    for (const v of Object.values(x)) deepFreeze(v);
    Object.freeze(x);
  }
  return x;
}

/** Every query of the input, by id. */
function visible(inp: ScheduleInput): Map<string, { q: WaitingQuery; queue: number; pos: number }> {
  const m = new Map<string, { q: WaitingQuery; queue: number; pos: number }>();
  inp.queues.forEach((queue, qi) => queue.forEach((q, pos) => m.set(q.id, { q, queue: qi, pos })));
  return m;
}

/** All invariants of one decision on one input (shared by the random cases). */
export function checkDecision(controller: QueryController, inp: ScheduleInput, d: Decision, maxSlots: number, which: readonly string[]): void {
  const byId = visible(inp);
  const ctx = (): string => JSON.stringify({ input: inp, decision: d });
  const launched = new Set<string>();
  const rejected = new Set<string>();
  if (which.includes(CASE.segments) || which.includes(CASE.unique)) {
    for (const s of d.group) {
      const v = byId.get(s.queryId);
      expect(v, `unknown query ${s.queryId}: ${ctx()}`).toBeDefined();
      if (!v) continue;
      expect(s.service, ctx()).toBe(v.q.service);
      expect(s.start, ctx()).toBe(v.q.nextOperator);
      expect(Number.isInteger(s.end) && s.end > s.start && s.end <= v.q.operators, `end ${s.end}: ${ctx()}`).toBe(true);
      expect(launched.has(s.queryId), `launched twice: ${ctx()}`).toBe(false);
      launched.add(s.queryId);
    }
    for (const r of d.rejected) {
      expect(byId.has(r.queryId), `unknown rejected ${r.queryId}: ${ctx()}`).toBe(true);
      expect(rejected.has(r.queryId), `rejected twice: ${ctx()}`).toBe(false);
      expect(launched.has(r.queryId), `launched and rejected: ${ctx()}`).toBe(false);
      rejected.add(r.queryId);
    }
  }
  if (which.includes(CASE.reasons)) {
    for (const r of d.rejected) {
      const v = byId.get(r.queryId)!;
      expect(r.reason).toBe('qos_violation');
      expect(r.service).toBe(v.q.service);
      expect(r.headroomMs).toBeCloseTo(v.q.qosTargetMs - (inp.nowMs - v.q.arrivalMs), 9);
      const justified = r.headroomMs <= 0 || (r.predictedMs !== undefined && r.predictedMs > r.headroomMs);
      expect(justified, `unjustified rejection: ${ctx()}`).toBe(true);
    }
  }
  if (which.includes(CASE.progress) && d.group.length === 0) {
    const rejectedIds = new Set(d.rejected.map((r) => r.queryId));
    if (d.wakeAtMs === undefined) {
      expect(rejectedIds, ctx()).toEqual(new Set(byId.keys()));
    } else {
      // A batcher holding queries on purpose: only queries of services that may wait
      // (maxQueueDelayMs > 0) are left, and it asks to be called again within that delay.
      let longestDelayMs = 0;
      for (const { q } of byId.values()) {
        if (rejectedIds.has(q.id)) continue;
        expect(q.batching !== undefined && q.batching.maxQueueDelayMs > 0, `${q.id} held without a queue delay: ${ctx()}`).toBe(true);
        longestDelayMs = Math.max(longestDelayMs, q.batching?.maxQueueDelayMs ?? 0);
      }
      expect(d.wakeAtMs > inp.nowMs && d.wakeAtMs <= inp.nowMs + longestDelayMs, `wakeAtMs ${d.wakeAtMs}: ${ctx()}`).toBe(true);
    }
  }
  if (which.includes(CASE.fifo) && (!controller.launchWhileBusy || controller.oneGroupPerService === true)) {
    const services = new Set<string>();
    const isRejected = (id: string): boolean => d.rejected.some((r) => r.queryId === id);
    for (const s of d.group) {
      const v = byId.get(s.queryId)!;
      expect(services.has(s.service), `two queries of ${s.service}: ${ctx()}`).toBe(false);
      services.add(s.service);
      const queue = inp.queues[v.queue]!;
      const before = queue.slice(0, v.pos);
      for (const b of before) {
        if (isRejected(b.id)) continue;
        // abacus's calibration fallback may pass over a head at risk of finishing late (`fallback.ts`,
        // "Choosing a safe query"): it stays, and the decision wakes the runtime by its deadline
        expect(d.fallback === true && d.wakeAtMs !== undefined && d.wakeAtMs <= nextInstantAfter(b.arrivalMs + b.qosTargetMs), `${s.queryId} launched before ${b.id}: ${ctx()}`).toBe(true);
      }
      // Fused followers come later in the lead's queue, in order; a query passed over between
      // the lead and the last follower was rejected, cannot fuse with the lead, or did not fit
      // in the samples left at that point.
      const fused = s.fused ?? [];
      if (fused.length === 0) continue;
      const positions = fused.map((id) => queue.findIndex((q) => q.id === id));
      for (let k = 0; k < positions.length; k++) expect(positions[k]! > (k === 0 ? v.pos : positions[k - 1]!), `fused out of queue order: ${ctx()}`).toBe(true);
      const lead = v.q;
      let samples = lead.batch;
      for (let pos = v.pos + 1; pos < positions.at(-1)!; pos++) {
        const q = queue[pos]!;
        if (fused.includes(q.id)) samples += q.batch;
        if (fused.includes(q.id) || isRejected(q.id)) continue;
        const fits = q.batching !== undefined && q.nextOperator === 0 && q.fuseKey === lead.fuseKey && samples + q.batch <= (lead.batching?.maxBatchSize ?? 0);
        expect(fits, `${q.id} passed over though it could join ${lead.id}: ${ctx()}`).toBe(false);
      }
    }
    expect(d.group.length).toBeLessThanOrEqual(maxSlots);
  }
  if (which.includes(CASE.fused)) {
    const inGroup = new Set(d.group.map((s) => s.queryId));
    const rejectedIds = new Set(d.rejected.map((r) => r.queryId));
    const followers = new Set<string>();
    for (const s of d.group) {
      const fused = s.fused ?? [];
      if (fused.length === 0) continue;
      const v = byId.get(s.queryId)!;
      const lead = v.q;
      expect(lead.batching !== undefined && lead.nextOperator === 0 && s.start === 0, `${lead.id} cannot lead a fused batch: ${ctx()}`).toBe(true);
      let samples = lead.batch;
      for (const id of fused) {
        const f = byId.get(id);
        expect(f, `unknown fused ${id}: ${ctx()}`).toBeDefined();
        if (!f) continue;
        expect(f.queue === v.queue && f.q.service === lead.service, `${id} is not in ${lead.id}'s queue: ${ctx()}`).toBe(true);
        expect(f.q.batching !== undefined && f.q.nextOperator === 0 && f.q.fuseKey === lead.fuseKey, `${id} cannot fuse with ${lead.id}: ${ctx()}`).toBe(true);
        expect(inGroup.has(id) || rejectedIds.has(id) || followers.has(id), `${id} fused twice, launched or rejected: ${ctx()}`).toBe(false);
        followers.add(id);
        samples += f.q.batch;
      }
      expect(samples, `samples of ${lead.id}'s batch: ${ctx()}`).toBeLessThanOrEqual(lead.batching!.maxBatchSize);
    }
    if (d.wakeAtMs !== undefined) expect(d.wakeAtMs, ctx()).toBeGreaterThan(inp.nowMs);
  }
  if (which.includes(CASE.predicted)) {
    if (d.group.length === 0) expect(d.predictedMs, ctx()).toBeUndefined();
    if (d.predictedMs !== undefined) expect(Number.isFinite(d.predictedMs) && d.predictedMs >= 0, ctx()).toBe(true);
  }
}

export function describeControllerConformance(
  name: string,
  factory: (predictor: FakePredictor) => QueryController,
  options: ControllerConformanceOptions = {},
): void {
  const samples = options.samples ?? 400;
  describe(`QueryController conformance: ${name}`, () => {
    const test = (caseName: string, fn: () => void): void => {
      const reason = options.skip?.[caseName];
      if (reason !== undefined) it.skip(`${caseName} — skipped: ${reason}`, fn);
      else it(caseName, fn);
    };
    /** Run `check` on `samples` seeded random inputs with a fresh predictor + controller each time. */
    const eachRandom = (seed: number, check: (c: QueryController, p: FakePredictor, inp: ScheduleInput) => void): void => {
      const r = rng(seed);
      const p = new FakePredictor({ maxSlots: 3 });
      const c = factory(p);
      for (let i = 0; i < samples; i++) check(c, p, randomInput(r, `r${i}`));
    };
    const invariant = (caseName: string, seed: number): void => {
      test(caseName, () => {
        eachRandom(seed, (c, p, inp) => checkDecision(c, inp, c.decide(inp), p.maxSlots, [caseName]));
      });
    };

    test(CASE.empty, () => {
      const c = factory(new FakePredictor());
      for (const inp of [input(0, []), input(5, [[], []]), input(5, [[]], 3)]) {
        const d = c.decide(inp);
        expect(d.group).toEqual([]);
        expect(d.rejected).toEqual([]);
        expect(d.predictedMs).toBeUndefined();
      }
    });
    invariant(CASE.segments, 1);
    invariant(CASE.unique, 2);
    invariant(CASE.reasons, 3);
    invariant(CASE.progress, 4);
    invariant(CASE.fifo, 5);
    invariant(CASE.predicted, 6);

    test(CASE.deterministic, () => {
      eachRandom(7, (c, p, inp) => {
        const a = c.decide(inp);
        // Again on the same instance: the same decision (a memo may make it cheaper, so stats aside).
        const { stats: again, ...decisionAgain } = c.decide(inp);
        const { stats: first, ...decision } = a;
        expect(decisionAgain).toEqual(decision);
        expect(again.predictorCalls).toBeLessThanOrEqual(first.predictorCalls);
        const { stats: _fresh, ...decisionFresh } = factory(new FakePredictor({ maxSlots: p.maxSlots })).decide(inp);
        expect(decisionFresh).toEqual(decision);
      });
    });

    test(CASE.readOnly, () => {
      eachRandom(8, (c, _p, inp) => {
        const before = JSON.stringify(inp);
        deepFreeze(inp);
        c.decide(inp);
        expect(JSON.stringify(inp)).toBe(before);
      });
    });

    test(CASE.stats, () => {
      eachRandom(9, (c, p, inp) => {
        const callsBefore = p.calls.length;
        const scoredBefore = p.calls.flat().length;
        const { stats } = c.decide(inp);
        expect(stats.predictorCalls).toBe(p.calls.length - callsBefore);
        expect(stats.groupsScored).toBe(p.calls.flat().length - scoredBefore);
        expect(Number.isInteger(stats.searchRounds) && stats.searchRounds >= 0).toBe(true);
        expect(stats.searchRounds).toBeLessThanOrEqual(stats.predictorCalls);
      });
    });

    test(CASE.malformed, () => {
      const c = factory(new FakePredictor());
      const ok = query('m1', 's', 'a', { arrivalMs: 0, qosTargetMs: 50 });
      const bad: [Partial<WaitingQuery>, RegExp][] = [
        [{ nextOperator: 10 }, /nextOperator/],
        [{ nextOperator: -1 }, /nextOperator/],
        [{ nextOperator: 1.5 }, /nextOperator/],
        [{ operators: 0 }, /operators/],
        [{ batch: 0 }, /batch/],
        [{ arrivalMs: NaN }, /arrivalMs/],
        [{ qosTargetMs: Infinity }, /qosTargetMs/],
      ];
      for (const [patch, re] of bad) expect(() => c.decide(input(10, [[{ ...ok, ...patch }]]))).toThrow(re);
      for (const [patch] of bad) expect(() => c.decide(input(10, [[{ ...ok, ...patch }]]))).toThrow(RangeError);
      expect(() => c.decide(input(NaN, [[ok]]))).toThrow(/nowMs/);
      expect(() => c.decide(input(10, [[ok]], -1))).toThrow(/runningRemainingMs/);
    });

    // ---- Dynamic batching (batching baselines): fused segments on inputs with BatchingLimits ----
    test(CASE.fused, () => {
      const r = rng(11);
      const p = new FakePredictor({ maxSlots: 3 });
      const c = factory(p);
      for (let i = 0; i < samples; i++) {
        const inp = randomInput(r, `b${i}`, { batching: true });
        const d = c.decide(inp);
        checkDecision(c, inp, d, p.maxSlots, Object.values(CASE));
        // feed back the fused group as the runtime would (one segment per fused batch, its samples)
        const byId = visible(inp);
        const segments = d.group.map((s) => {
          const q = byId.get(s.queryId)!.q;
          const batch = q.batch + (s.fused ?? []).reduce((n, id) => n + byId.get(id)!.q.batch, 0);
          const [ms] = p.predict([[{ model: q.model, start: s.start, end: s.end, batch, seqLen: q.seqLen }]]);
          return { queryId: s.queryId, service: s.service, start: s.start, end: s.end, model: q.model, operators: q.operators, batch, seqLen: q.seqLen, latencyMs: ms! };
        });
        if (segments.length > 0) c.observe({ segments, groupLatencyMs: (d.predictedMs ?? 10) * 1.1, ...(d.predictedMs === undefined ? {} : { predictedMs: d.predictedMs }) });
        checkDecision(c, inp, c.decide(inp), p.maxSlots, Object.values(CASE));
      }
    });

    test(CASE.observe, () => {
      eachRandom(10, (c, p, inp) => {
        const d = c.decide(inp);
        if (d.rejected.length > 0) c.rejected?.(d.rejected); // carried out, as the runtime does
        const byId = visible(inp);
        const segments = d.group.map((s) => {
          const q = byId.get(s.queryId)!.q;
          const [ms] = p.predict([[{ model: q.model, start: s.start, end: s.end, batch: q.batch, seqLen: q.seqLen }]]);
          return { ...s, model: q.model, operators: q.operators, batch: q.batch, seqLen: q.seqLen, latencyMs: ms! };
        });
        if (segments.length > 0) {
          const measured = (d.predictedMs ?? 10) * 1.1;
          c.observe({ segments, groupLatencyMs: measured, ...(d.predictedMs === undefined ? {} : { predictedMs: d.predictedMs }) });
        }
        checkDecision(c, inp, c.decide(inp), p.maxSlots, Object.values(CASE));
      });
    });
  });
}
