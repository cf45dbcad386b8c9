/**
 * `/metrics` latency histograms: bucket edges around every served QoS target
 * (`latencyBucketsS`), so that `le="<target>"` counts the requests that met it.
 */
import { describe, expect, it } from 'vitest';
import { latencyBucketsS, ServeMetrics } from '../../src/serve/metrics.ts';

describe('latency buckets around the QoS targets', () => {
  it('adds 0.5 … 2 × each target (in s, rounded to the µs) to the fixed edges, sorted, without repeats', () => {
    const fixed = latencyBucketsS([]);
    expect(fixed).toEqual([0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]);
    const b = latencyBucketsS([43, 50, Number.NaN, -1]);
    for (const edge of [0.0215, 0.0344, 0.0387, 0.043, 0.0473, 0.05375, 0.0645, 0.086, 0.025, 0.04, 0.045, 0.05, 0.055, 0.0625, 0.075]) expect(b).toContain(edge);
    expect(b).toEqual([...new Set(b)].sort((x, y) => x - y));
    expect(b.length).toBe(fixed.length + 8 + 8 - 3); // 50 ms: 0.025, 0.05 and 0.1 were already fixed edges
  });

  it('the served targets appear as `le` edges of abacus_request_duration_seconds', async () => {
    const m = new ServeMetrics({ models: ['a'], processMetrics: false, qosTargetsMs: [43] });
    m.request('a', 'success', { latencyMs: 40 });
    m.request('a', 'success', { latencyMs: 46 });
    const text = await m.text();
    expect(text).toMatch(/abacus_request_duration_seconds_bucket\{le="0\.043",model="a"\} 1\n/);
    expect(text).toMatch(/abacus_request_duration_seconds_bucket\{le="0\.0473",model="a"\} 2\n/);
  });
});

describe('device time: busy, idle while queries waited, overhead around the operators', () => {
  it('sums each group: busy its interval, waiting idle its idleBeforeMs, overhead measured − longest segment', async () => {
    const m = new ServeMetrics({ models: ['a'], processMetrics: false });
    const seg = [{ service: 'a', batch: 1 }];
    // launched at 10 after 4 ms idle with queries waiting; 12 ms measured, its longest segment ran 9
    m.group({ segments: seg, predictedMs: 11, measuredMs: 12, launchMs: 10, idleBeforeMs: 4, longestSegmentMs: 9 }, 22);
    // nothing waited before it; its segment failed (longest 0): no overhead counted
    m.group({ segments: seg, predictedMs: undefined, measuredMs: 5, launchMs: 30, longestSegmentMs: 0 }, 35);
    const text = await m.text();
    expect(text).toMatch(/abacus_device_busy_seconds_total 0\.017\n/);
    expect(text).toMatch(/abacus_device_waiting_idle_seconds_total 0\.004\n/);
    expect(text).toMatch(/abacus_group_overhead_seconds_total 0\.003\n/);
  });
});
