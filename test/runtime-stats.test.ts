import { describe, expect, it } from 'vitest';
import { GroupStatsCollector, meanGroupSize, percentile, predictorMape, servingStats } from '../src/runtime/stats.ts';
import type { GroupRecord, QueryRecord } from '../src/runtime/records.ts';

const q = (id: string, arrivalMs: number, endMs: number, outcome: 'completed' | 'rejected', qosTargetMs = 10): QueryRecord => ({
  id,
  service: 's',
  arrivalMs,
  batch: 1,
  seqLen: 0,
  qosTargetMs,
  groups: [],
  outcome,
  endMs,
  ...(outcome === 'rejected' ? { reason: 'qos_violation' as const } : {}),
});

describe('serving statistics', () => {
  it('nearest-rank percentiles', () => {
    const xs = [5, 1, 4, 2, 3];
    expect(percentile(xs, 50)).toBe(3); // ⌈2.5⌉ = 3rd smallest
    expect(percentile(xs, 99)).toBe(5);
    expect(percentile(xs, 20)).toBe(1);
    expect(percentile([], 50)).toBeNaN();
    expect(() => percentile(xs, 0)).toThrow(RangeError);
  });

  it('violation ratio counts late and rejected over offered; goodput counts on-time per second of span', () => {
    // arrivals 0..3000 ms; latencies 5 (ok), 20 (late), rejected, 8 (ok)
    const records = [q('a', 0, 5, 'completed'), q('b', 1000, 1020, 'completed'), q('c', 2000, 2000, 'rejected'), q('d', 3000, 3008, 'completed')];
    const s = servingStats(records);
    expect(s.offered).toBe(4);
    expect(s.onTime).toBe(2);
    expect(s.late).toBe(1);
    expect(s.rejected).toBe(1);
    expect(s.rejectedBy).toEqual({ qos_violation: 1 });
    expect(s.violationRatio).toBe(0.5);
    expect(s.spanMs).toBe(3008);
    expect(s.goodputQps).toBeCloseTo(2000 / 3008, 12);
    expect(s.throughputQps).toBeCloseTo(3000 / 3008, 12);
    expect(s.p50Ms).toBe(8); // latencies [5, 8, 20]
    expect(s.p99Ms).toBe(20);
  });

  it('predictor MAPE and mean group size', () => {
    const g = (predictedMs: number | undefined, measuredMs: number, n: number): GroupRecord => ({ index: 0, launchMs: 0, predictedMs, measuredMs, segments: Array.from({ length: n }, () => ({ queryId: 'x', service: 's', start: 0, end: 1, batch: 1, seqLen: 0 })) });
    expect(predictorMape([g(11, 10, 1), g(8, 10, 2), g(undefined, 10, 3)])).toBeCloseTo(0.15, 12);
    expect(meanGroupSize([g(11, 10, 1), g(8, 10, 2), g(undefined, 10, 3)])).toBe(2);
    expect(predictorMape([])).toBeNaN();
  });

  it('between groups: idle gap and time outside the operators over busy time, share decided ahead', () => {
    const seg = { queryId: 'x', service: 's', start: 0, end: 1, batch: 1, seqLen: 0 };
    const c = new GroupStatsCollector();
    expect(c.idleGapRatio).toBeNaN();
    expect(c.decidedAheadShare).toBeNaN();
    c.add({ index: 0, launchMs: 0, predictedMs: 10, measuredMs: 10, segments: [seg], decidedAhead: false, longestSegmentMs: 9 });
    c.add({ index: 1, launchMs: 10.5, predictedMs: 10, measuredMs: 30, segments: [seg], decidedAhead: true, idleBeforeMs: 0.5, longestSegmentMs: 27 });
    c.add({ index: 2, launchMs: 50, predictedMs: 10, measuredMs: Number.NaN, segments: [seg], idleBeforeMs: 1 }); // failed: no busy time
    expect(c.idleGapRatio).toBeCloseTo(1.5 / 40, 12);
    expect(c.outsideOperatorsRatio).toBeCloseTo(4 / 40, 12);
    expect(c.decidedAheadShare).toBeCloseTo(1 / 3, 12);
  });
});
