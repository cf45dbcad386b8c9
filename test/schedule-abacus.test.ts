/**
 * Abacus controller decisions on hand-computed scenarios (docs/design.md#the-abacus-controller,
 * docs/scheduling-runtime.md), with the fake predictor of test/schedule/fake-predictor.ts:
 *
 *   cost(slot) = msPerOp × ops × batch   a: 10 ops × 1 ms   b: 10 ops × 2 ms
 *                                         c: 20 ops × 0.5 ms  d: 8 ops × 1.5 ms
 *   latency    = max cost + 0.5 × (Σ cost − max cost)
 *
 * Whole queries at batch 1: a 10, b 20, c 10, d 12 ms. Headroom = qos − (now − arrival).
 * Expected values are literals; the comments show the arithmetic. Latencies are sums of
 * halves and integers, exact in binary floating point, so they are compared exactly.
 */
import { describe, expect, it } from 'vitest';
import { nextInstantAfter } from '../src/clock/instant.ts';
import { createController } from '../src/schedule/index.ts';
import type { LaunchSegment, QueryController, WaitingQuery } from '../src/schedule/controller.ts';
import { FakePredictor } from './schedule/fake-predictor.ts';
import { input, query } from './schedule/query.ts';

const NOW = 100;
/** A query of `service` whose headroom at NOW is `headroomMs` (arrival NOW − 10). */
const q = (id: string, service: string, model: string, headroomMs: number, extra: { nextOperator?: number; arrivalMs?: number } = {}): WaitingQuery => {
  const arrivalMs = extra.arrivalMs ?? NOW - 10;
  return query(id, service, model, { arrivalMs, qosTargetMs: headroomMs + (NOW - arrivalMs), ...(extra.nextOperator === undefined ? {} : { nextOperator: extra.nextOperator }) });
};
const seg = (w: WaitingQuery, end = w.operators): LaunchSegment => ({ queryId: w.id, service: w.service, start: w.nextOperator, end });
const abacus = (p: FakePredictor, params: Record<string, unknown> = {}): QueryController => createController('abacus', params, p);

describe('abacus, 2 services', () => {
  it('both whole when the pair fits the budget', () => {
    const p = new FakePredictor();
    const x = q('x', 'S1', 'a', 30);
    const y = q('y', 'S2', 'b', 95);
    const d = abacus(p).decide(input(NOW, [[y], [x]]));
    // step 1 solo: a 10 ≤ 30, b 20 ≤ 95. order x (30), y (95). budget 30 − 0 = 30.
    // P1 = 10 (solo, reused), P2 = max(10, 20) + 0.5 × 10 = 25 ≤ 30 → k = 2 = n, no search.
    expect(d.group).toEqual([seg(x), seg(y)]);
    expect(d.predictedMs).toBe(25);
    expect(d.rejected).toEqual([]);
    expect(p.calls).toEqual([['b[0,10)x1', 'a[0,10)x1'], ['a[0,10)x1+b[0,10)x1']]);
    expect(d.stats).toEqual({ predictorCalls: 2, groupsScored: 3, searchRounds: 0, soloMemoHits: 0 });
  });

  it('ways 2: the urgent query whole, the other cut at the largest fitting point; stops on slack', () => {
    const p = new FakePredictor();
    const x = q('x', 'S1', 'a', 20);
    const y = q('y', 'S2', 'b', 95);
    const d = abacus(p, { ways: 2, slackMs: 5 }).decide(input(NOW, [[x], [y]]));
    // budget 20. P2 = 25 > 20 → k = 1, best = P1 = 10; 20 − 10 = 10 ≥ 5 → search y in (0, 10):
    // step 10/3: cuts round(3.33) = 3, round(6.67) = 7.
    //   y[0,3): cost 6  → 10 + 0.5 × 6  = 13 ≤ 20
    //   y[0,7): cost 14 → 14 + 0.5 × 10 = 19 ≤ 20   → best 7 (19); 20 − 19 = 1 < 5 → stop.
    expect(d.group).toEqual([seg(x), seg(y, 7)]);
    expect(d.predictedMs).toBe(19);
    expect(p.calls[2]).toEqual(['a[0,10)x1+b[0,3)x1', 'a[0,10)x1+b[0,7)x1']);
    expect(d.stats).toEqual({ predictorCalls: 3, groupsScored: 5, searchRounds: 1, soloMemoHits: 0 });
  });

  it('ways 2 with a small slack: a second round finds nothing and the interval empties', () => {
    const p = new FakePredictor();
    const x = q('x', 'S1', 'a', 20);
    const y = q('y', 'S2', 'b', 95);
    const d = abacus(p, { ways: 2, slackMs: 0.5 }).decide(input(NOW, [[x], [y]]));
    // round 1 as above: best 7 (19), interval (7, 10); 20 − 19 = 1 ≥ 0.5 → round 2 with the
    // interval's only integers 8, 9 (≤ ways): y[0,8): 16 + 5 = 21 > 20; y[0,9): 18 + 5 = 23 > 20
    // → hi = 8, interval (7, 8) is empty → stop with best 7.
    expect(d.group).toEqual([seg(x), seg(y, 7)]);
    expect(d.predictedMs).toBe(19);
    expect(p.calls[3]).toEqual(['a[0,10)x1+b[0,8)x1', 'a[0,10)x1+b[0,9)x1']);
    expect(d.stats.searchRounds).toBe(2);
  });

  it('partly executed queries: slots and cut points start at nextOperator', () => {
    const p = new FakePredictor();
    const x = q('x', 'S1', 'a', 12, { nextOperator: 4 });
    const y = q('y', 'S2', 'b', 100, { nextOperator: 2 });
    const d = abacus(p).decide(input(NOW, [[x], [y]]));
    // solo x = 6 ops × 1 = 6 ≤ 12; y = 8 ops × 2 = 16. budget 12. P2 = 16 + 3 = 19 > 12 → k = 1,
    // best 6; 12 − 6 = 6 ≥ 5 → search y in (2, 10), step 8/3: 2 + round(2.67) = 5, 2 + round(5.33) = 7.
    //   y[2,5): 6  → 6 + 3 = 9 ≤ 12;  y[2,7): 10 → 10 + 3 = 13 > 12 → best 5 (9); 12 − 9 = 3 < 5 → stop.
    expect(d.group).toEqual([seg(x), seg(y, 5)]);
    expect(d.predictedMs).toBe(9);
    expect(p.calls[2]).toEqual(['a[4,10)x1+b[2,5)x1', 'a[4,10)x1+b[2,7)x1']);
  });
});

describe('abacus, 3 services', () => {
  const setup = (): { x: WaitingQuery; y: WaitingQuery; z: WaitingQuery; p: FakePredictor } => ({
    x: q('x', 'S1', 'a', 20),
    y: q('y', 'S2', 'c', 50),
    z: q('z', 'S3', 'b', 80),
    p: new FakePredictor(),
  });

  it('ways 4: prefix {x, y} fits, z is cut by a 4-way search', () => {
    const { x, y, z, p } = setup();
    const d = abacus(p, { ways: 4, slackMs: 5 }).decide(input(NOW, [[z], [y], [x]]));
    // budget 20. P1 = 10, P2 = {10, 10} = 10 + 5 = 15 ≤ 20, P3 = {10, 10, 20} = 20 + 10 = 30 > 20 → k = 2.
    // 20 − 15 = 5 ≥ 5 → search z in (0, 10), step 2: cuts 2, 4, 6, 8:
    //   z[0,2): 4  → 10 + 0.5 × 14 = 17 ✓   z[0,4): 8  → 10 + 0.5 × 18 = 19 ✓
    //   z[0,6): 12 → 12 + 0.5 × 20 = 22 ✗   z[0,8): 16 → 16 + 0.5 × 20 = 26 ✗
    // → best 4 (19), hi 6; 20 − 19 = 1 < 5 → stop.
    expect(d.group).toEqual([seg(x), seg(y), seg(z, 4)]);
    expect(d.predictedMs).toBe(19);
    expect(p.calls[1]).toEqual(['a[0,10)x1+c[0,20)x1', 'a[0,10)x1+b[0,10)x1+c[0,20)x1']);
    expect(p.calls[2]).toEqual(['a[0,10)x1+b[0,2)x1+c[0,20)x1', 'a[0,10)x1+b[0,4)x1+c[0,20)x1', 'a[0,10)x1+b[0,6)x1+c[0,20)x1', 'a[0,10)x1+b[0,8)x1+c[0,20)x1']);
    expect(d.stats).toEqual({ predictorCalls: 3, groupsScored: 9, searchRounds: 1, soloMemoHits: 0 });
  });

  it('slack: no search when budget − P(k) < slack (20 − 15 = 5 < 6)', () => {
    const { x, y, z, p } = setup();
    const d = abacus(p, { ways: 4, slackMs: 6 }).decide(input(NOW, [[z], [y], [x]]));
    expect(d.group).toEqual([seg(x), seg(y)]);
    expect(d.predictedMs).toBe(15);
    expect(d.stats).toEqual({ predictorCalls: 2, groupsScored: 5, searchRounds: 0, soloMemoHits: 0 });
  });

  it('each prefix is checked on its own: P2 overridden to 25 does not fit, P3 = 20 does → all three whole', () => {
    const p = new FakePredictor({ overrides: { 'a[0,10)x1+a[0,10)x1': 25 } });
    const x = q('x', 'S1', 'a', 20);
    const y = q('y', 'S2', 'a', 30);
    const z = q('z', 'S3', 'c', 40);
    const d = abacus(p).decide(input(NOW, [[x], [y], [z]]));
    // budget 20. P2 = 25 (override) > 20; P3 = {10, 10, 10} = 10 + 10 = 20 ≤ 20 → k = 3 = n.
    expect(d.group).toEqual([seg(x), seg(y), seg(z)]);
    expect(d.predictedMs).toBe(20);
  });

  it("the predictor's maxSlots caps the group: 3 fitting heads, maxSlots 2 → the two most urgent, no search", () => {
    const p = new FakePredictor({ maxSlots: 2 });
    const x = q('x', 'S1', 'a', 100);
    const y = q('y', 'S2', 'a', 110);
    const z = q('z', 'S3', 'a', 90);
    const d = abacus(p).decide(input(NOW, [[x], [y], [z]]));
    // order z (90), x (100), y (110); P2 = 15 ≤ 90 → k = 2 = n (capped) → y waits.
    expect(d.group).toEqual([seg(z), seg(x)]);
    expect(d.predictedMs).toBe(15);
    expect(d.stats.searchRounds).toBe(0);
  });
});

describe('abacus, 4 services, ways 4', () => {
  const heads = (): WaitingQuery[] => [q('w', 'S1', 'a', 30), q('x', 'S2', 'c', 40), q('y', 'S3', 'd', 50), q('z', 'S4', 'b', 60)];

  it('running group term: budget 30 − 3 = 27; prefix of 3, z cut at 5 after two rounds (fit is ≤ budget)', () => {
    const p = new FakePredictor();
    const [w, x, y, z] = heads() as [WaitingQuery, WaitingQuery, WaitingQuery, WaitingQuery];
    const d = abacus(p, { ways: 4, slackMs: 0.5 }).decide(input(NOW, [[z], [y], [x], [w]], 3));
    // P1 10, P2 {10,10} = 15, P3 {10,10,12} = 12 + 10 = 22 ≤ 27, P4 {10,10,12,20} = 20 + 16 = 36 > 27 → k = 3.
    // 27 − 22 = 5 ≥ 0.5 → z in (0, 10), cuts 2, 4, 6, 8 (others' costs 10, 10, 12):
    //   z[0,2): 4  → 12 + 0.5 × 24 = 24 ✓   z[0,4): 8  → 12 + 0.5 × 28 = 26 ✓
    //   z[0,6): 12 → 12 + 0.5 × 32 = 28 ✗   z[0,8): 16 → 16 + 0.5 × 32 = 32 ✗   → best 4 (26), hi 6.
    // 27 − 26 = 1 ≥ 0.5 → round 2, interval (4, 6) holds only 5: z[0,5): 10 → 12 + 0.5 × 30 = 27 ≤ 27 ✓
    // → best 5 (27); 27 − 27 = 0 < 0.5 → stop.
    expect(d.group).toEqual([seg(w), seg(x), seg(y), seg(z, 5)]);
    expect(d.predictedMs).toBe(27);
    expect(p.calls.map((c) => c.length)).toEqual([4, 3, 4, 1]);
    expect(d.stats).toEqual({ predictorCalls: 4, groupsScored: 12, searchRounds: 2, soloMemoHits: 0 });
  });

  it('idle device: budget 30, z cut at 7', () => {
    const p = new FakePredictor();
    const [w, x, y, z] = heads() as [WaitingQuery, WaitingQuery, WaitingQuery, WaitingQuery];
    const d = abacus(p, { ways: 4, slackMs: 0.5 }).decide(input(NOW, [[w], [x], [y], [z]], 0));
    // k = 3 (P4 = 36 > 30). cuts 2, 4, 6, 8 → 24, 26, 28 ✓, 32 ✗ → best 6 (28), hi 8; 30 − 28 = 2 ≥ 0.5
    // → round 2, only 7: z[0,7): 14 → 14 + 0.5 × 32 = 30 ≤ 30 ✓ → best 7 (30); 30 − 30 < 0.5 → stop.
    expect(d.group).toEqual([seg(w), seg(x), seg(y), seg(z, 7)]);
    expect(d.predictedMs).toBe(30);
  });

  it('q0 alone does not fit (running 25 → budget 5 < 10): launched alone, no search', () => {
    const p = new FakePredictor();
    const [w, x, y, z] = heads() as [WaitingQuery, WaitingQuery, WaitingQuery, WaitingQuery];
    // drop off: with drop on, w would be rejected (solo 10 + running 25 > headroom 30; see "drop rules").
    const d = abacus(p, { ways: 4, slackMs: 0, drop: false }).decide(input(NOW, [[w], [x], [y], [z]], 25));
    // budget 30 − 25 = 5; P1 = 10 > 5, P2 = 15, P3 = 22, P4 = 36 all > 5 → k = 1 forced; P1 does not fit → no search.
    expect(d.group).toEqual([seg(w)]);
    expect(d.predictedMs).toBe(10);
    // no step-1 call without drop: P1…P4 in one call.
    expect(d.stats).toEqual({ predictorCalls: 1, groupsScored: 4, searchRounds: 0, soloMemoHits: 0 });
  });
});

describe('abacus, ties in headroom', () => {
  it('equal deadlines: the earlier arrival is q0 (runs whole), the other is cut', () => {
    const p = new FakePredictor();
    // both headroom 14 at NOW; x arrived at 90 (qos 24), y at 94 (qos 20); y's service sorts first.
    const x = q('x', 'S2', 'a', 14, { arrivalMs: 90 });
    const y = q('y', 'S1', 'a', 14, { arrivalMs: 94 });
    const d = abacus(p, { slackMs: 1 }).decide(input(NOW, [[y], [x]]));
    // budget 14. P2 = 10 + 5 = 15 > 14 → k = 1 (x). 14 − 10 = 4 ≥ 1 → y in (0, 10), cuts 3, 7:
    // y[0,3): 10 + 1.5 = 11.5 ✓, y[0,7): 10 + 3.5 = 13.5 ✓ → best 7; 14 − 13.5 = 0.5 < 1 → stop.
    expect(d.group).toEqual([seg(x), seg(y, 7)]);
    expect(d.predictedMs).toBe(13.5);
  });

  it('equal deadlines and arrivals: the smaller service name is q0, whatever the queue order', () => {
    const p = new FakePredictor();
    const x = q('x', 'S2', 'a', 14);
    const y = q('y', 'S1', 'a', 14);
    for (const queues of [[[x], [y]], [[y], [x]]]) {
      const d = abacus(p, { slackMs: 1 }).decide(input(NOW, queues));
      expect(d.group).toEqual([seg(y), seg(x, 7)]);
    }
  });
});

describe('abacus, drop rules', () => {
  it('headroom ≤ 0 is rejected without a prediction; exactly 0 counts', () => {
    const p = new FakePredictor();
    const zero = q('zero', 'S1', 'a', 0);
    const late = q('late', 'S2', 'a', -10);
    const ok = q('ok', 'S3', 'a', 45);
    const d = abacus(p).decide(input(NOW, [[zero], [late], [ok]]));
    expect(d.rejected).toEqual([
      { queryId: 'zero', service: 'S1', reason: 'qos_violation', headroomMs: 0 },
      { queryId: 'late', service: 'S2', reason: 'qos_violation', headroomMs: -10 },
    ]);
    expect(d.group).toEqual([seg(ok)]);
    expect(d.predictedMs).toBe(10);
    // one slot scored (ok); a lone q0 reuses its solo prediction: no prefix call.
    expect(p.calls).toEqual([['a[0,10)x1']]);
  });

  it('predicted remaining solo > headroom is rejected; equal is kept', () => {
    const p = new FakePredictor();
    const tight = q('tight', 'S1', 'b', 19); // solo 20 > 19
    const exact = q('exact', 'S2', 'b', 20); // solo 20 ≤ 20
    const d = abacus(p).decide(input(NOW, [[tight], [exact]]));
    expect(d.rejected).toEqual([{ queryId: 'tight', service: 'S1', reason: 'qos_violation', headroomMs: 19, predictedMs: 20 }]);
    expect(d.group).toEqual([seg(exact)]);
  });

  it('decided while a group runs: a head that cannot start before its latest start is rejected at once', () => {
    const p = new FakePredictor();
    const tight = q('tight', 'S1', 'b', 44); // solo 20 + running 25 = 45 > 44
    const exact = q('exact', 'S2', 'b', 45); // 20 + 25 = 45 ≤ 45: starting exactly at its latest start still meets it
    const d = abacus(p).decide(input(NOW, [[tight], [exact]], 25));
    expect(d.rejected).toEqual([{ queryId: 'tight', service: 'S1', reason: 'qos_violation', headroomMs: 44, predictedMs: 45 }]);
    expect(d.group).toEqual([seg(exact)]);
  });

  it('wakeAtMs: the first instant after the earliest latest start of a kept head (launched or not: a decision made ahead only plans)', () => {
    const p = new FakePredictor();
    const x = q('x', 'S1', 'a', 14); // deadline 114, solo 10 → latest start 104
    const y = q('y', 'S2', 'b', 30); // deadline 130, solo 20 → latest start 110
    const d = abacus(p, { ways: 2, slackMs: 100 }).decide(input(NOW, [[x], [y]]));
    // budget 14: P2 = 25 > 14 → x alone (slack 100 > 4 → no search); x becomes hopeless just after 104 if still waiting then.
    expect(d.group).toEqual([seg(x)]);
    expect(d.wakeAtMs).toBeGreaterThan(104);
    expect(d.wakeAtMs! - 104).toBeLessThan(1e-12);
    const later = abacus(p).decide(input(d.wakeAtMs!, [[x], [y]]));
    expect(later.rejected.map((r) => r.queryId)).toEqual(['x']);
    expect(later.wakeAtMs! - 110).toBeLessThan(1e-12);
    const atLatest = abacus(p).decide(input(104, [[x]]));
    expect(atLatest.rejected).toEqual([]);
    expect(abacus(p, { drop: false }).decide(input(NOW, [[x], [y]])).wakeAtMs).toBeUndefined();
  });

  it('a rejected head is replaced by the next query of its queue, scored in a second round (here from the memo)', () => {
    const p = new FakePredictor();
    const hopeless = q('h', 'S1', 'b', 19);
    const next = q('n', 'S1', 'a', 50);
    const other = q('o', 'S2', 'a', 30);
    const d = abacus(p).decide(input(NOW, [[hopeless, next], [other]]));
    // round 1: h 20 > 19 ✗, o 10 ≤ 30; round 2: n 10 ≤ 50 — n's slot a[0,10)x1 is o's, so the
    // memo answers it without a call. order o (30), n (50); P2 = 15 ≤ 30.
    expect(d.rejected.map((r) => r.queryId)).toEqual(['h']);
    expect(d.group).toEqual([seg(other), seg(next)]);
    expect(p.calls).toEqual([['b[0,10)x1', 'a[0,10)x1'], ['a[0,10)x1+a[0,10)x1']]);
    expect(d.stats).toEqual({ predictorCalls: 2, groupsScored: 3, searchRounds: 0, soloMemoHits: 1 });
  });

  it('every head hopeless: empty group, all rejected', () => {
    const p = new FakePredictor();
    const d = abacus(p).decide(input(NOW, [[q('h1', 'S1', 'b', 5), q('h2', 'S1', 'b', -1)], [q('h3', 'S2', 'a', 9.5)]]));
    expect(d.group).toEqual([]);
    expect(d.predictedMs).toBeUndefined();
    // round 1: h1 20 > 5 ✗, h3 10 > 9.5 ✗; round 2: h2 headroom −1 ≤ 0 ✗ (no prediction).
    expect(d.rejected.map((r) => r.queryId)).toEqual(['h1', 'h3', 'h2']);
    expect(d.stats.predictorCalls).toBe(1);
  });

  it('drop off: nothing rejected; a late q0 (budget −10) is launched alone', () => {
    const p = new FakePredictor();
    const late = q('late', 'S1', 'a', -10);
    const other = q('o', 'S2', 'b', 100);
    const d = abacus(p, { drop: false }).decide(input(NOW, [[late], [other]]));
    // no step-1 call; P1 = 10, P2 = 25, both > −10 → k = 1 forced, no search.
    expect(d.rejected).toEqual([]);
    expect(d.group).toEqual([seg(late)]);
    expect(d.predictedMs).toBe(10);
    expect(p.calls).toEqual([['a[0,10)x1', 'a[0,10)x1+b[0,10)x1']]);
  });

  it('one service is the same code path: its head whole', () => {
    const p = new FakePredictor();
    const only = q('only', 'S1', 'd', 40);
    expect(abacus(p).decide(input(NOW, [[only]]))).toEqual({
      group: [seg(only)],
      predictedMs: 12,
      rejected: [],
      stats: { predictorCalls: 1, groupsScored: 1, searchRounds: 0, soloMemoHits: 0 },
      wakeAtMs: nextInstantAfter(NOW - 10 + 50 - 12), // deadline 140 − solo 12: hopeless just after 128 if it still waited then
    });
  });
});
