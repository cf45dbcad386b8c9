/**
 * `abacus_violation_ratio{model}`, the autoscaling signal (docs/deploy.md "Autoscaling"):
 * (late + qos_violation + overloaded) / (success + qos_violation + overloaded) over the last
 * 60 s, on an injected clock; golden values counted by hand.
 */
import { describe, expect, it } from 'vitest';
import { ServeMetrics, SlidingCounts, VIOLATION_WINDOW_S } from '../../src/serve/metrics.ts';
import { metricValue } from './child-serve.ts';

describe('abacus_violation_ratio', () => {
  it('counts late successes, QoS drops and overloaded answers against the capacity-relevant requests of the window', async () => {
    let now = 1_000_000;
    const m = new ServeMetrics({ models: ['a', 'b'], processMetrics: false, nowMs: () => now });
    const ratio = async (model: string): Promise<number> => metricValue(await m.text(), `abacus_violation_ratio{model="${model}"}`);
    expect(await ratio('a')).toBe(0);
    m.request('a', 'success', { latencyMs: 5 });
    m.request('a', 'success', { latencyMs: 50, late: true });
    m.request('a', 'qos_violation');
    m.request('a', 'overloaded');
    // left out: they say nothing about capacity
    m.request('a', 'bad_request');
    m.request('a', 'not_ready');
    m.request('a', 'cancelled');
    m.request('b', 'success', { latencyMs: 5 });
    expect(await ratio('a')).toBeCloseTo(3 / 4, 12);
    expect(await ratio('b')).toBe(0);
    now += 30_000;
    for (let i = 0; i < 4; i++) m.request('a', 'success', { latencyMs: 5 });
    expect(await ratio('a')).toBeCloseTo(3 / 8, 12);
    // the first four leave the window 60 s after their second
    now += 30_500;
    expect(await ratio('a')).toBe(0);
    now += VIOLATION_WINDOW_S * 1000;
    expect(await ratio('a')).toBe(0);
  });

  it('SlidingCounts keeps exactly the slots of the last windowS seconds', () => {
    const c = new SlidingCounts(3);
    c.add('k', 0, true);
    c.add('k', 999, false);
    c.add('k', 1000, false);
    c.add('k', 2500, true);
    expect(c.sums('k', 2999)).toEqual({ hits: 2, of: 4 });
    expect(c.sums('k', 3000)).toEqual({ hits: 1, of: 2 }); // second 0 expired
    expect(c.sums('k', 5999)).toEqual({ hits: 0, of: 0 });
    expect(c.sums('other', 0)).toEqual({ hits: 0, of: 0 });
    expect(() => new SlidingCounts(0)).toThrow(/windowS must be an integer ≥ 1/);
  });
});
