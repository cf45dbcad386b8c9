/**
 * Batch-aware Abacus decisions (docs/batching.md; `src/schedule/abacus/index.ts`, controller.ts
 * "Dynamic batching") on hand-computed scenarios, with the fake predictor of
 * test/schedule/fake-predictor.ts:
 *
 *   cost(slot) = msPerOp × ops × batch   a: 10 ops × 1 ms   b: 10 ops × 2 ms
 *                                         c: 20 ops × 0.5 ms  d: 8 ops × 1.5 ms
 *   latency    = max cost + 0.5 × (Σ cost − max cost)
 *
 * so a whole query of `a` fused to m samples takes 10·m ms alone. Headroom = qos − (now −
 * arrival); every query here arrived at NOW − 10. A group's budget is the headroom of its most
 * urgent member (heads and fused followers) − the running remainder. Expected values are
 * literals; the comments show the arithmetic. Latencies are sums of halves and integers, exact
 * in binary floating point, so they are compared exactly (tolerance 0).
 */
import { describe, expect, it } from 'vitest';
import { createController } from '../src/schedule/index.ts';
import type { BatchingLimits, LaunchSegment, QueryController, WaitingQuery } from '../src/schedule/controller.ts';
import { FakePredictor } from './schedule/fake-predictor.ts';
import { rng } from './helpers/rng.ts';
import { input, query, randomInput } from './schedule/query.ts';

const NOW = 100;
/** Batching limits with `maxBatchSize`, no queue delay, no preferred sizes. */
const limits = (maxBatchSize: number): BatchingLimits => ({ maxBatchSize, maxQueueDelayMs: 0, preferredBatchSizes: [] });
const L4 = limits(4);

/** A query without batching whose headroom at NOW is `headroomMs`. */
const q = (id: string, service: string, model: string, headroomMs: number, o: { nextOperator?: number; batch?: number } = {}): WaitingQuery =>
  query(id, service, model, { arrivalMs: NOW - 10, qosTargetMs: headroomMs + 10, ...o });

/** A query that may be fused (`batching` L4 unless given, fuseKey 'k' unless given). */
const bq = (id: string, service: string, model: string, headroomMs: number, o: { batch?: number; fuseKey?: string; batching?: BatchingLimits } = {}): WaitingQuery =>
  query(id, service, model, {
    arrivalMs: NOW - 10,
    qosTargetMs: headroomMs + 10,
    ...(o.batch === undefined ? {} : { batch: o.batch }),
    batching: o.batching ?? L4,
    fuseKey: o.fuseKey ?? 'k',
  });

/** The segment of `w` on `[nextOperator, end)` with `fused` behind it. */
const seg = (w: WaitingQuery, end = w.operators, fused: readonly WaitingQuery[] = []): LaunchSegment => ({
  queryId: w.id,
  service: w.service,
  start: w.nextOperator,
  end,
  ...(fused.length === 0 ? {} : { fused: fused.map((f) => f.id) }),
});

const abacus = (p: FakePredictor, params: Record<string, unknown> = {}): QueryController => createController('abacus', params, p);

describe('abacus batching, one service', () => {
  it('a batch that fits: the head and every follower, in step 4’s call', () => {
    const p = new FakePredictor();
    const [a1, a2, a3] = [bq('a1', 'S1', 'a', 50), bq('a2', 'S1', 'a', 60), bq('a3', 'S1', 'a', 70)];
    const d = abacus(p).decide(input(NOW, [[a1, a2, a3]]));
    // step 1: a1 solo 10 ≤ 50. full prefix: 2 followers, 3 samples; budget = a1's 50 (followers later).
    // step 4: P1 = a×3 = 30 ≤ 50 → k = 1. q0's first batch round rides along: (0, 2) → m = 1 (a×2 = 20, unused).
    expect(d.group).toEqual([seg(a1, 10, [a2, a3])]);
    expect(d.predictedMs).toBe(30);
    expect(d.rejected).toEqual([]);
    expect(p.calls).toEqual([['a[0,10)x1'], ['a[0,10)x3', 'a[0,10)x2']]);
    expect(d.stats).toEqual({ predictorCalls: 2, groupsScored: 3, searchRounds: 0, soloMemoHits: 0 });
  });

  it('the deadline of the most urgent member limits the batch: a follower with a tight QoS is left out, and those after it', () => {
    const p = new FakePredictor();
    const a = [bq('a1', 'S1', 'a', 50), bq('a2', 'S1', 'a', 60), bq('a3', 'S1', 'a', 25), bq('a4', 'S1', 'a', 70)] as const;
    const d = abacus(p).decide(input(NOW, [[...a]]));
    // samples per prefix m: 1, 2, 3, 4; budget per m: 50, 50, 25 (a3), 25.
    // P1 = a×4 = 40 > 25 → k = 0; q0's search over (0, 3): m = 1 → a×2 = 20 ≤ 50 ✓, m = 2 → a×3 = 30 > 25 ✗
    // → lo 1, hi 2: done. a1 fused with a2 (20); a3 and a4 wait.
    expect(d.group).toEqual([seg(a[0], 10, [a[1]])]);
    expect(d.predictedMs).toBe(20);
    expect(p.calls).toEqual([['a[0,10)x1'], ['a[0,10)x4', 'a[0,10)x2', 'a[0,10)x3']]);
    expect(d.stats).toEqual({ predictorCalls: 2, groupsScored: 4, searchRounds: 0, soloMemoHits: 0 });
  });

  it('multi-round batch search: maxBatchSize 16, the largest fitting batch is 7 samples (ways 2)', () => {
    const p = new FakePredictor();
    const L16 = limits(16);
    const head = bq('a0', 'S1', 'a', 75, { batching: L16 });
    const rest = Array.from({ length: 15 }, (_, i) => bq(`a${i + 1}`, 'S1', 'a', 200, { batching: L16 }));
    const d = abacus(p, { ways: 2 }).decide(input(NOW, [[head, ...rest]]));
    // full: 15 followers (16 samples, 160 > 75). Search (0, 15), step 15/3 = 5: m = 5 → 60 ✓, m = 10 → 110 ✗ → (5, 10);
    // step 5/3: 5 + round(1.67) = 7 → 80 ✗, 5 + round(3.33) = 8 → 90 ✗ → (5, 7); only 6 → a×7 = 70 ≤ 75 ✓ → m0 = 6.
    expect(d.group).toEqual([seg(head, 10, rest.slice(0, 6))]);
    expect(d.predictedMs).toBe(70);
    expect(p.calls).toEqual([['a[0,10)x1'], ['a[0,10)x16', 'a[0,10)x6', 'a[0,10)x11'], ['a[0,10)x8', 'a[0,10)x9'], ['a[0,10)x7']]);
    expect(d.stats).toEqual({ predictorCalls: 4, groupsScored: 7, searchRounds: 2, soloMemoHits: 0 });
  });

  it('maxBatchSize limits the batch; the scan stops at the first query that would pass it', () => {
    const p = new FakePredictor();
    const L3 = limits(3);
    const a = ['a1', 'a2', 'a3', 'a4', 'a5'].map((id) => bq(id, 'S1', 'a', 100, { batching: L3 }));
    const d1 = abacus(p).decide(input(NOW, [a]));
    // 1 + 1 + 1 = 3 = maxBatchSize → followers a2, a3; P1 = a×3 = 30 ≤ 100.
    expect(d1.group).toEqual([seg(a[0]!, 10, [a[1]!, a[2]!])]);
    expect(d1.predictedMs).toBe(30);
    const b = [bq('b1', 'S1', 'a', 100, { batching: L3 }), bq('b2', 'S1', 'a', 100, { batch: 3, batching: L3 }), bq('b3', 'S1', 'a', 100, { batching: L3 })];
    const d2 = abacus(new FakePredictor()).decide(input(NOW, [b]));
    // b2 (batch 3) would make 4 > 3: the scan stops there (b3 is not looked at: fusing is by queue prefix).
    expect(d2.group).toEqual([seg(b[0]!)]);
    expect(d2.predictedMs).toBe(10);
  });

  it('fuseKey mismatch: followers with another fuseKey (or no batching) are skipped, later ones fused', () => {
    const p = new FakePredictor();
    const a1 = bq('a1', 'S1', 'a', 100);
    const other = bq('a2', 'S1', 'a', 100, { fuseKey: 'other' });
    const a3 = bq('a3', 'S1', 'a', 100);
    const plain = q('a4', 'S1', 'a', 100);
    const a5 = bq('a5', 'S1', 'a', 100);
    const d = abacus(p).decide(input(NOW, [[a1, other, a3, plain, a5]]));
    // followers a3, a5 (3 samples): P1 = 30 ≤ 100.
    expect(d.group).toEqual([seg(a1, 10, [a3, a5])]);
    expect(d.predictedMs).toBe(30);
  });

  it('a lead whose own batch exceeds maxBatchSize runs alone, with the calls of an unbatched decision', () => {
    const p = new FakePredictor();
    const big = bq('a1', 'S1', 'a', 100, { batch: 5 });
    const d = abacus(p).decide(input(NOW, [[big, bq('a2', 'S1', 'a', 100)]]));
    // batch 5 > 4: no follower; a lone unfused q0 reuses its solo (a×5 = 50): no step-4 call.
    expect(d.group).toEqual([seg(big)]);
    expect(d.predictedMs).toBe(50);
    expect(p.calls).toEqual([['a[0,10)x5']]);
    expect(d.stats).toEqual({ predictorCalls: 1, groupsScored: 1, searchRounds: 0, soloMemoHits: 0 });
  });

  it('drop off: q0’s batch search starts below 0 (its own batch is not known to fit)', () => {
    const p = new FakePredictor();
    const x = [bq('x1', 'S1', 'a', 25), bq('x2', 'S1', 'a', 100), bq('x3', 'S1', 'a', 100), bq('x4', 'S1', 'a', 100)] as const;
    const d = abacus(p, { drop: false, ways: 2 }).decide(input(NOW, [[...x]]));
    // no step-1 call. P1 = a×4 = 40 > 25. Search (−1, 3), step 4/3: −1 + round(1.33) = 0 → 10 ✓,
    // −1 + round(2.67) = 2 → 30 ✗ (both in step 4's call) → (0, 2); only 1 → a×2 = 20 ✓ → m0 = 1.
    expect(d.group).toEqual([seg(x[0], 10, [x[1]])]);
    expect(d.predictedMs).toBe(20);
    expect(p.calls).toEqual([['a[0,10)x4', 'a[0,10)x1', 'a[0,10)x3'], ['a[0,10)x2']]);
    expect(d.stats).toEqual({ predictorCalls: 2, groupsScored: 4, searchRounds: 1, soloMemoHits: 0 });
  });
});

describe('abacus batching, 2 services', () => {
  it('q0 at its full batch, q1’s batch searched in what is left', () => {
    const p = new FakePredictor();
    const a = [bq('a1', 'S1', 'a', 40), bq('a2', 'S1', 'a', 100), bq('a3', 'S1', 'a', 100)] as const;
    const c = [bq('c1', 'S2', 'c', 100), bq('c2', 'S2', 'c', 100), bq('c3', 'S2', 'c', 100)] as const;
    const d = abacus(p, { ways: 2, slackMs: 5 }).decide(input(NOW, [[...a], [...c]]));
    // order a1 (40), c1 (100); budget 40. P1 = a×3 = 30 ✓, P2 = {30, c×3 = 30} = 30 + 15 = 45 ✗ → k = 1.
    // 40 − 30 = 10 ≥ 5 → c1's batch over (−1, 2): m = 0 → {30, 10} = 35 ✓, m = 1 → {30, 20} = 40 ✓ → m = 1.
    expect(d.group).toEqual([seg(a[0], 10, [a[1], a[2]]), seg(c[0], 20, [c[1]])]);
    expect(d.predictedMs).toBe(40);
    expect(p.calls).toEqual([
      ['a[0,10)x1', 'c[0,20)x1'],
      ['a[0,10)x3', 'a[0,10)x3+c[0,20)x3', 'a[0,10)x2'],
      ['a[0,10)x3+c[0,20)x1', 'a[0,10)x3+c[0,20)x2'],
    ]);
    expect(d.stats).toEqual({ predictorCalls: 3, groupsScored: 7, searchRounds: 1, soloMemoHits: 0 });
  });

  it('q1 whose head does not fit whole is cut alone at its own batch (a fused batch is never cut at launch)', () => {
    const p = new FakePredictor();
    const x = q('x', 'S1', 'a', 20);
    const y = [bq('y1', 'S2', 'b', 100), bq('y2', 'S2', 'b', 100), bq('y3', 'S2', 'b', 100)] as const;
    const d = abacus(p, { ways: 2, slackMs: 5 }).decide(input(NOW, [[x], [...y]]));
    // order x (20), y1 (100). P1 = 10 (solo), P2 = {10, b×3 = 60} = 65 ✗ → k = 1; 20 − 10 = 10 ≥ 5.
    // y1's batch over (−1, 2): m = 0 → {10, 20} = 25 ✗, m = 1 → {10, 40} = 45 ✗ → none.
    // Cut search at batch 1 over (0, 10): y[0,3) → 10 + 3 = 13 ✓, y[0,7) → 14 + 5 = 19 ✓ → best 7; 20 − 19 < 5 → stop.
    expect(d.group).toEqual([seg(x), seg(y[0], 7)]);
    expect(d.predictedMs).toBe(19);
    expect(p.calls).toEqual([
      ['a[0,10)x1', 'b[0,10)x1'],
      ['a[0,10)x1+b[0,10)x3'],
      ['a[0,10)x1+b[0,10)x1', 'a[0,10)x1+b[0,10)x2'],
      ['a[0,10)x1+b[0,3)x1', 'a[0,10)x1+b[0,7)x1'],
    ]);
    expect(d.stats).toEqual({ predictorCalls: 4, groupsScored: 7, searchRounds: 2, soloMemoHits: 0 });
  });

  it('a fused batch launched earlier (one query now, no batching) is cut like any query, and nothing is fused into it', () => {
    const p = new FakePredictor();
    const x = q('x', 'S1', 'a', 20);
    // the runtime's view of b1+b2+b3 after 4 operators: batch 3, no batching; b4, b5 still wait behind it.
    const fusedView = q('b1+2@0', 'S2', 'b', 200, { nextOperator: 4, batch: 3 });
    const b4 = bq('b4', 'S2', 'b', 200);
    const b5 = bq('b5', 'S2', 'b', 200);
    const d = abacus(p, { ways: 2, slackMs: 5 }).decide(input(NOW, [[x], [fusedView, b4, b5]]));
    // P2 = {10, b[4,10)×3 = 36} = 41 > 20 → k = 1; 20 − 10 ≥ 5 → cut over (4, 10), step 2: 6, 8:
    // b[4,6)×3 = 12 → 12 + 5 = 17 ✓, b[4,8)×3 = 24 → 29 ✗ → best 6; 20 − 17 = 3 < 5 → stop.
    expect(d.group).toEqual([seg(x), seg(fusedView, 6)]);
    expect(d.predictedMs).toBe(17);
    expect(p.calls[2]).toEqual(['a[0,10)x1+b[4,6)x3', 'a[0,10)x1+b[4,8)x3']);
    // alone it runs whole as q0, still without followers.
    expect(abacus(new FakePredictor()).decide(input(NOW, [[fusedView, b4, b5]])).group).toEqual([seg(fusedView)]);
  });

  it('queries without batching are unaffected: the plain service runs its head alone, the batching one fuses', () => {
    const p = new FakePredictor();
    const a = [bq('a1', 'S1', 'a', 100), bq('a2', 'S1', 'a', 100)] as const;
    const c = [q('c1', 'S2', 'c', 40), q('c2', 'S2', 'c', 40), q('c3', 'S2', 'c', 40)] as const;
    const d = abacus(p).decide(input(NOW, [[...a], [...c]]));
    // order c1 (40), a1 (100). c1 unfused: P1 = 10 (solo); P2 = {c 10, a×2 = 20} = 20 + 5 = 25 ≤ 40 → k = 2.
    expect(d.group).toEqual([seg(c[0]), seg(a[0], 10, [a[1]])]);
    expect(d.predictedMs).toBe(25);
    expect(p.calls).toEqual([['a[0,10)x1', 'c[0,20)x1'], ['a[0,10)x2+c[0,20)x1']]);
    expect(d.stats).toEqual({ predictorCalls: 2, groupsScored: 3, searchRounds: 0, soloMemoHits: 0 });
  });
});

describe('abacus batching, 3 services', () => {
  it('q0’s full batch does not fit: its batch is searched, then the others join (P′ call), q1 whole at its own batch', () => {
    const p = new FakePredictor();
    const x = [bq('x1', 'S1', 'a', 25), bq('x2', 'S1', 'a', 100), bq('x3', 'S1', 'a', 100), bq('x4', 'S1', 'a', 100)] as const;
    const y = [bq('y1', 'S2', 'c', 60), bq('y2', 'S2', 'c', 100)] as const;
    const z = q('z', 'S3', 'd', 80);
    const d = abacus(p, { ways: 2, slackMs: 5 }).decide(input(NOW, [[...x], [...y], [z]]));
    // order x1 (25), y1 (60), z (80); budget 25. Step 4: P1 = a×4 = 40, P2 = {40, c×2 = 20} = 50,
    // P3 = {40, 20, 12} = 56, all ✗; q0's round over (0, 3): m = 1 → 20 ✓, m = 2 → 30 ✗ → m0 = 1 (20).
    // P′2 = {a×2 20, c×2 20} = 30 ✗, P′3 = {20, 20, 12} = 36 ✗ → k = 1. 25 − 20 = 5 ≥ 5 →
    // y1's batch over (−1, 1): m = 0 → {20, 10} = 25 ≤ 25 ✓ → y1 whole, alone. z waits.
    expect(d.group).toEqual([seg(x[0], 10, [x[1]]), seg(y[0])]);
    expect(d.predictedMs).toBe(25);
    expect(p.calls).toEqual([
      ['a[0,10)x1', 'c[0,20)x1', 'd[0,8)x1'],
      ['a[0,10)x4', 'a[0,10)x4+c[0,20)x2', 'a[0,10)x4+c[0,20)x2+d[0,8)x1', 'a[0,10)x2', 'a[0,10)x3'],
      ['a[0,10)x2+c[0,20)x2', 'a[0,10)x2+c[0,20)x2+d[0,8)x1'],
      ['a[0,10)x2+c[0,20)x1'],
    ]);
    expect(d.stats).toEqual({ predictorCalls: 4, groupsScored: 11, searchRounds: 1, soloMemoHits: 0 });
  });

  it('two fused heads at their full prefix, the third (unbatched) cut', () => {
    const p = new FakePredictor();
    const x = [bq('x1', 'S1', 'a', 38), bq('x2', 'S1', 'a', 100)] as const;
    const y = [bq('y1', 'S2', 'c', 80), bq('y2', 'S2', 'c', 100)] as const;
    const z = q('z', 'S3', 'b', 100);
    const d = abacus(p, { ways: 2, slackMs: 5 }).decide(input(NOW, [[...x], [...y], [z]]));
    // budget 38. P1 = a×2 = 20, P2 = {20, c×2 = 20} = 30 ✓, P3 = {20, 20, 20} = 40 ✗ → k = 2; 38 − 30 = 8 ≥ 5.
    // z cut over (0, 10): z[0,3) 6 → 20 + 0.5 × 26 = 33 ✓, z[0,7) 14 → 20 + 0.5 × 34 = 37 ✓ → 7; 38 − 37 < 5.
    expect(d.group).toEqual([seg(x[0], 10, [x[1]]), seg(y[0], 20, [y[1]]), seg(z, 7)]);
    expect(d.predictedMs).toBe(37);
    expect(p.calls).toEqual([
      ['a[0,10)x1', 'c[0,20)x1', 'b[0,10)x1'],
      ['a[0,10)x2', 'a[0,10)x2+c[0,20)x2', 'a[0,10)x2+b[0,10)x1+c[0,20)x2'],
      ['a[0,10)x2+b[0,3)x1+c[0,20)x2', 'a[0,10)x2+b[0,7)x1+c[0,20)x2'],
    ]);
    expect(d.stats).toEqual({ predictorCalls: 3, groupsScored: 8, searchRounds: 1, soloMemoHits: 0 });
  });

  it('a follower more urgent than every head sets the budget of the whole group', () => {
    const p = new FakePredictor();
    // x1's follower x2 has headroom 22 < x1's 30: with it fused, the group's budget is 22.
    const x = [bq('x1', 'S1', 'a', 30), bq('x2', 'S1', 'a', 22)] as const;
    const y = q('y', 'S2', 'a', 50);
    const d = abacus(p).decide(input(NOW, [[...x], [y]]));
    // P1 = a×2 = 20 ≤ 22 ✓, P2 = {20, 10} = 25 > 22 ✗ (it would fit x1's own 30) → k = 1; 22 − 20 = 2 < 5: no search.
    expect(d.group).toEqual([seg(x[0], 10, [x[1]])]);
    expect(d.predictedMs).toBe(20);
  });
});

describe('abacus batching, properties', () => {
  it('batching with nothing to fuse (unique fuseKeys) gives exactly the unbatched decisions, calls and counters', () => {
    const r = rng(21);
    for (let i = 0; i < 300; i++) {
      const plain = randomInput(r, `u${i}`);
      const lone = {
        ...plain,
        queues: plain.queues.map((queue) => queue.map((w) => (w.nextOperator === 0 ? { ...w, batching: L4, fuseKey: w.id } : w))),
      };
      const p1 = new FakePredictor({ maxSlots: 3 });
      const p2 = new FakePredictor({ maxSlots: 3 });
      expect(abacus(p2).decide(lone)).toEqual(abacus(p1).decide(plain));
      expect(p2.calls).toEqual(p1.calls);
    }
  });
});
