/**
 * The clockwork controller (Clockwork, OSDI'20): p99 of the last 10 measurements per
 * (model, batch, seqLen), the predictor before any measurement, earliest deadline first, and
 * the drop rule now + running + estimate > deadline. Percentiles by linear interpolation at
 * position p·(n − 1) (Clockwork's SlidingWindow); tolerance 1e-9 ms for the interpolated ones.
 */
import { describe, expect, it } from 'vitest';
import { ClockworkController, createController, windowPercentile } from '../src/schedule/index.ts';
import type { GroupObservation, WaitingQuery } from '../src/schedule/controller.ts';
import { FakePredictor } from './schedule/fake-predictor.ts';
import { input, query } from './schedule/query.ts';

/** A whole-query, single-segment observation of model `a` (10 operators) at `batch`. */
const whole = (ms: number, batch = 1, model = 'a', operators = 10): GroupObservation => ({
  segments: [{ queryId: 'm', service: 'S1', model, start: 0, end: operators, operators, batch, seqLen: 0, latencyMs: ms - 0.5 }],
  groupLatencyMs: ms,
});

const clockwork = (p = new FakePredictor(), params: Record<string, unknown> = {}): ClockworkController =>
  createController('clockwork', params, p) as ClockworkController;

describe('windowPercentile', () => {
  it('interpolates between order statistics at p/100 · (n − 1)', () => {
    const w = Float64Array.from([30, 10, 11, 12, 13, 14, 15, 16, 17, 18]);
    // sorted 10..18, 30; position 0.99 × 9 = 8.91 → 0.09 × 18 + 0.91 × 30 = 1.62 + 27.3 = 28.92
    expect(windowPercentile(w, 10, 99)).toBeCloseTo(28.92, 9);
    // position 0.5 × 9 = 4.5 → (14 + 15) / 2 = 14.5
    expect(windowPercentile(w, 10, 50)).toBeCloseTo(14.5, 9);
    expect(windowPercentile(w, 1, 99)).toBe(30);
    expect(windowPercentile(w, 10, 100)).toBe(30);
  });
});

describe('clockwork', () => {
  it('before any measurement the estimate is the predictor solo latency', () => {
    const p = new FakePredictor();
    const c = clockwork(p);
    const x = query('x', 'S1', 'b', { arrivalMs: 90, qosTargetMs: 50 });
    const d = c.decide(input(100, [[x]]));
    expect(c.estimateMs('b', 1, 0)).toBeUndefined();
    expect(d.group).toEqual([{ queryId: 'x', service: 'S1', start: 0, end: 10 }]);
    expect(d.predictedMs).toBe(20);
    expect(d.stats).toEqual({ predictorCalls: 1, groupsScored: 1, searchRounds: 0, soloMemoHits: 0 });
  });

  it('p99 of the last 10 whole-query measurements; the 11th evicts the oldest', () => {
    const c = clockwork();
    for (const ms of [30, 10, 11, 12, 13, 14, 15, 16, 17, 18]) c.observe(whole(ms));
    // as windowPercentile above: 0.09 × 18 + 0.91 × 30
    expect(c.estimateMs('a', 1, 0)).toBeCloseTo(28.92, 9);
    c.observe(whole(19));
    // window 10..19: 0.09 × 18 + 0.91 × 19 = 1.62 + 17.29 = 18.91
    expect(c.estimateMs('a', 1, 0)).toBeCloseTo(18.91, 9);
    expect(c.estimateMs('a', 2, 0)).toBeUndefined();
  });

  it('uses the window estimate (no predictor call) for its shape, the predictor for others', () => {
    const p = new FakePredictor();
    const c = clockwork(p);
    for (const ms of [10, 20, 12]) c.observe(whole(ms));
    // sorted 10, 12, 20; position 0.99 × 2 = 1.98 → 0.02 × 12 + 0.98 × 20 = 0.24 + 19.6 = 19.84
    const x = query('x', 'S1', 'a', { arrivalMs: 90, qosTargetMs: 50 });
    const y = query('y', 'S2', 'a', { arrivalMs: 95, qosTargetMs: 60, batch: 2 });
    const d = c.decide(input(100, [[y], [x]]));
    expect(d.group).toEqual([{ queryId: 'x', service: 'S1', start: 0, end: 10 }]); // deadline 140 < 155
    expect(d.predictedMs).toBeCloseTo(19.84, 9);
    expect(p.calls).toEqual([['a[0,10)x2']]); // only y, batch 2 (no measurement yet)
  });

  it('drops a query whose estimated finish now + running + estimate is past its deadline', () => {
    const c = clockwork();
    for (const ms of [10, 20, 12]) c.observe(whole(ms)); // estimate 19.84
    const fits = query('fits', 'S1', 'a', { arrivalMs: 80, qosTargetMs: 45 }); // deadline 125
    const late = query('late', 'S2', 'a', { arrivalMs: 80, qosTargetMs: 44 }); // deadline 124
    // finish = 100 + 5 + 19.84 = 124.84: ≤ 125 keeps `fits`, > 124 drops `late`.
    const d = c.decide(input(100, [[fits], [late]], 5));
    expect(d.rejected).toHaveLength(1);
    expect(d.rejected[0]).toMatchObject({ queryId: 'late', service: 'S2', reason: 'qos_violation', headroomMs: 24 });
    expect(d.rejected[0]!.predictedMs).toBeCloseTo(24.84, 9);
    expect(d.group).toEqual([{ queryId: 'fits', service: 'S1', start: 0, end: 10 }]);
    // idle device: both fit (late: 100 + 19.84 ≤ 124); earliest deadline first → late.
    expect(c.decide(input(100, [[fits], [late]], 0)).group).toEqual([{ queryId: 'late', service: 'S2', start: 0, end: 10 }]);
  });

  it('ignores groups of several segments and partial segments; a partial query is estimated by the predictor', () => {
    const p = new FakePredictor();
    const c = clockwork(p);
    const s = whole(99).segments[0]!;
    c.observe({ segments: [s, { ...s, queryId: 'm2' }], groupLatencyMs: 50 });
    c.observe({ segments: [{ ...s, end: 5 }], groupLatencyMs: 50 });
    expect(c.estimateMs('a', 1, 0)).toBeUndefined();
    c.observe(whole(40));
    const partial: WaitingQuery = query('x', 'S1', 'a', { arrivalMs: 90, qosTargetMs: 50, nextOperator: 6 });
    const d = c.decide(input(100, [[partial]]));
    expect(d.predictedMs).toBe(4); // ops 6..10 × 1 ms, not the 40 ms whole-query estimate
    expect(() => c.observe({ ...whole(1), groupLatencyMs: NaN })).toThrow(RangeError);
  });

  it('window and percentile are parameters: window 3, p50 → median of the last 3', () => {
    const c = clockwork(new FakePredictor(), { window: 3, percentile: 50 });
    for (const ms of [100, 10, 30, 20]) c.observe(whole(ms));
    expect(c.estimateMs('a', 1, 0)).toBe(20); // window 10, 30, 20 → median 20
  });
});
