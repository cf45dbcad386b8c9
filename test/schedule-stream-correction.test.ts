/**
 * The measured ÷ estimated correction of abacus without the group barrier
 * (`schedule/abacus/correction.ts`): its window (median, fast quantile, bounds, warm-up), and in
 * the controller one correction per kind of launch (alone, or joining running segments), with a
 * launch that a later one joined left uncounted, and held queries judged by the faster kind's
 * fast run. On the test predictor, no clock.
 */
import { describe, expect, it } from 'vitest';
import { CORRECTION_MIN, CorrectionWindow } from '../src/schedule/abacus/correction.ts';
import type { StreamAbacusController } from '../src/schedule/abacus/stream.ts';
import type { RunningSegment } from '../src/schedule/controller.ts';
import { createController } from '../src/schedule/index.ts';
import { FakePredictor } from './schedule/fake-predictor.ts';
import { query } from './schedule/query.ts';

describe('CorrectionWindow', () => {
  it('is 1 until CORRECTION_MIN ratios, then the median and the 0.1 quantile (at most 1), within [0.5, 2]', () => {
    const w = new CorrectionWindow();
    for (let i = 0; i < CORRECTION_MIN - 1; i++) w.add(1.5);
    expect([w.factor, w.fast]).toEqual([1, 1]);
    w.add(1.5);
    expect([w.factor, w.fast]).toEqual([1.5, 1]);
    const v = new CorrectionWindow();
    for (let i = 0; i < 20; i++) v.add(i < 2 ? 0.7 : 0.9);
    expect([v.factor, v.fast]).toEqual([0.9, 0.7]);
    const big = new CorrectionWindow();
    for (let i = 0; i < 20; i++) big.add(5);
    expect(big.factor).toBe(2);
    const small = new CorrectionWindow();
    for (let i = 0; i < 20; i++) small.add(0.1);
    expect([small.factor, small.fast]).toEqual([0.5, 0.5]);
  });

  it('ignores ratios that are not finite and positive', () => {
    const w = new CorrectionWindow();
    for (let i = 0; i < 20; i++) [NaN, Infinity, -1, 0].forEach((r) => w.add(r));
    expect([w.factor, w.fast]).toEqual([1, 1]);
  });
});

describe('abacus without the barrier: one correction per kind of launch', () => {
  /** B runs model b (20 ms whole), launched at 0 and predicted 20 ms, far from its deadline. */
  const runningB: RunningSegment = { queryId: 'b0', service: 'B', model: 'b', operators: 10, start: 0, end: 10, batch: 1, seqLen: 0, launchMs: 0, predictedMs: 20, deadlineMs: 1000 };
  const observe = (c: StreamAbacusController, service: string, model: string, groupLatencyMs: number): void =>
    c.observe({ segments: [{ queryId: 'x', service, model, start: 0, end: 10, operators: 10, batch: 1, seqLen: 0, latencyMs: groupLatencyMs }], groupLatencyMs });

  it('learns alone launches and joining launches apart', () => {
    const c = createController('abacus', { barrier: false }, new FakePredictor()) as StreamAbacusController;
    // alone: a (10 ms) with nothing running, measured 12 ms
    for (let i = 0; i < CORRECTION_MIN; i++) {
      expect(c.decide({ nowMs: 10, queues: [[query(`a${i}`, 'A', 'a', { arrivalMs: 5, qosTargetMs: 1000 })]], runningRemainingMs: 0 }).group).toHaveLength(1);
      observe(c, 'A', 'a', 12);
    }
    expect(c.correction).toEqual({ alone: 1.2, joining: 1 });
    // joining: a beside the remainder of b (estimated 15 ms), measured 12 ms
    for (let i = 0; i < CORRECTION_MIN; i++) {
      const d = c.decide({ nowMs: 10, queues: [[query(`j${i}`, 'A', 'a', { arrivalMs: 5, qosTargetMs: 1000 })]], runningRemainingMs: 0, running: [runningB] });
      expect(d.group).toHaveLength(1);
      observe(c, 'A', 'a', 12);
    }
    expect(c.correction.alone).toBe(1.2);
    expect(c.correction.joining).toBeCloseTo(0.8, 9);
  });

  it('judges a held query by the faster of the two kinds\' fast runs: it starts after a segment whose end was decided as a joining launch', () => {
    const c = createController('abacus', { barrier: false }, new FakePredictor()) as StreamAbacusController;
    // joining launches measured 0.8 of their estimate: the joining window's fast run is 0.8, the alone one's 1
    for (let i = 0; i < CORRECTION_MIN; i++) {
      expect(c.decide({ nowMs: 10, queues: [[query(`j${i}`, 'A', 'a', { arrivalMs: 5, qosTargetMs: 1000 })]], runningRemainingMs: 0, running: [runningB] }).group).toHaveLength(1);
      observe(c, 'A', 'a', 12);
    }
    // a0 runs until 10 as decided; at 5 the held a1 (10 ms alone, headroom 12) ends at 5 + 10 = 15
    // as predicted, at 0.8 · 5 + 0.8 · 10 = 12 as fast as the fastest tenth of joining launches: kept
    const running: RunningSegment = { queryId: 'a0', service: 'A', model: 'a', operators: 10, start: 0, end: 10, batch: 1, seqLen: 0, launchMs: 0, predictedMs: 10, deadlineMs: 100 };
    const held = [query('a1', 'A', 'a', { arrivalMs: 1, qosTargetMs: 16 })];
    expect(c.decide({ nowMs: 5, queues: [], runningRemainingMs: 0, running: [running], held: [held] }).rejected).toEqual([]);
    // a fresh controller (fast runs 1) drops it: 15 > 12
    const fresh = createController('abacus', { barrier: false }, new FakePredictor());
    expect(fresh.decide({ nowMs: 5, queues: [], runningRemainingMs: 0, running: [running], held: [held] }).rejected.map((r) => r.queryId)).toEqual(['a1']);
  });

  it('does not count a launch that a later launch joined: its estimate could not know the co-runner', () => {
    const c = createController('abacus', { barrier: false }, new FakePredictor()) as StreamAbacusController;
    for (let i = 0; i < CORRECTION_MIN; i++) {
      // b launched alone (20 ms) …
      expect(c.decide({ nowMs: 0, queues: [[query(`b${i}`, 'B', 'b', { arrivalMs: 0, qosTargetMs: 1000 })]], runningRemainingMs: 0 }).group).toHaveLength(1);
      // … then a joins it at 10, and b takes 40 ms: b is not counted, a is (joining)
      expect(c.decide({ nowMs: 10, queues: [[query(`a${i}`, 'A', 'a', { arrivalMs: 5, qosTargetMs: 1000 })]], runningRemainingMs: 0, running: [{ ...runningB, queryId: `b${i}` }] }).group).toHaveLength(1);
      observe(c, 'B', 'b', 40);
      observe(c, 'A', 'a', 15);
    }
    expect(c.correction).toEqual({ alone: 1, joining: 1 });
  });
});
