/**
 * The admission gate (`serve/admission.ts`), by hand: the device time per query it measures from
 * groups and completions, when it sheds, and its log summary.
 */
import { describe, expect, it } from 'vitest';
import { AdmissionGate, DRAIN_WINDOW_MS, MIN_SAMPLES, SHED_LOG_INTERVAL_MS, SHED_MARGIN, shedError } from '../../src/serve/admission.ts';

function gate(pending: { n: number }): AdmissionGate {
  return new AdmissionGate({ pendingQueries: () => pending.n });
}

/** `n` back-to-back groups of `ms` each from `fromMs`, each completing `perGroup` queries. */
function run(g: AdmissionGate, fromMs: number, n: number, ms: number, perGroup = 1): number {
  let t = fromMs;
  for (let i = 0; i < n; i++) {
    g.groupEnded(t, t + ms);
    t += ms;
    for (let k = 0; k < perGroup; k++) g.completed(t);
  }
  return t;
}

describe('AdmissionGate', () => {
  it('admits everything until MIN_SAMPLES completions were measured', () => {
    const pending = { n: 100 };
    const g = gate(pending);
    run(g, 0, MIN_SAMPLES - 1, 10);
    expect(g.estimate()).toEqual({ ahead: 100, finishMs: undefined });
    expect(g.shedReason(1, 0)).toBeUndefined();
    run(g, 1000, 1, 10);
    expect(g.estimate().finishMs).toBeDefined();
  });

  it('expects (ahead + ½) × the device time per completed query, and sheds past the QoS target', () => {
    const pending = { n: 3 };
    const g = gate(pending);
    run(g, 0, 10, 10); // busy 10 ms per completion at every instant: drain 10
    expect(g.estimate().drainMs).toBeCloseTo(10, 9);
    expect(g.estimate().finishMs).toBeCloseTo(35, 9);
    // shed past SHED_MARGIN (1.5) × the target: 35 ms fits a 23.34 ms target, not 23.33
    expect(SHED_MARGIN).toBe(1.5);
    expect(g.shedReason(23.34, 0)).toBeUndefined();
    expect(g.shedReason(23.33, 0)).toBe('3 queries ahead; expected to finish in 35.0 ms (3.5 × 10.0 ms of device time per query), past 1.5 × its QoS target of 23.33 ms');
    expect(g.shedReason(24, 3)).toBe('3 queries ahead; expected to finish in 38.0 ms (3.0 spent + 3.5 × 10.0 ms of device time per query), past 1.5 × its QoS target of 24 ms');
    pending.n = 1;
    expect(g.shedReason(9, 0)).toBe('1 query ahead; expected to finish in 15.0 ms (1.5 × 10.0 ms of device time per query), past 1.5 × its QoS target of 9 ms');
    // nothing ahead: always admitted (the device takes it next)
    pending.n = 0;
    expect(g.shedReason(1, 100)).toBeUndefined();
  });

  it('counts overlap and batching gains (two completions per group halve it) and time shared by overlapping groups once', () => {
    const g = gate({ n: 1 });
    run(g, 0, 10, 10, 2);
    expect(g.estimate().drainMs).toBeCloseTo(5, 9);
    // groups [0, 10] and [5, 15] (launched while the other runs), one completion at each end: busy 15 ms in all
    const h = gate({ n: 1 });
    for (let i = 0; i < MIN_SAMPLES; i++) h.completed(0); // settle the minimum at t = 0
    const h0 = gate({ n: 1 });
    h0.groupEnded(0, 10);
    h0.completed(10);
    h0.groupEnded(5, 15);
    h0.completed(15);
    for (let i = 0; i < MIN_SAMPLES; i++) h0.completed(15);
    const f = Math.exp(-5 / DRAIN_WINDOW_MS);
    // at 15: busy = 10·f + 5, completions = f + 1 + MIN_SAMPLES
    expect(h0.estimate().drainMs).toBeCloseTo((10 * f + 5) / (f + 1 + MIN_SAMPLES), 9);
    expect(h.estimate().drainMs).toBe(0);
  });

  it('keeps its figure through an idle device, and work that completes nothing raises it', () => {
    const g = gate({ n: 2 });
    const t = run(g, 0, 20, 10);
    // idle for 5 s: both sums decay alike
    g.completed(t + 5000);
    const f = Math.exp(-5000 / DRAIN_WINDOW_MS);
    const busy = 10 * Array.from({ length: 20 }, (_, i) => Math.exp(-(190 - 10 * i) / DRAIN_WINDOW_MS)).reduce((a, b) => a + b, 0);
    const done = busy / 10;
    expect(g.estimate().drainMs).toBeCloseTo((busy * f) / (done * f + 1), 9);
    // a 50 ms group whose query was rejected part-way: busy time, no completion
    const h = gate({ n: 2 });
    const u = run(h, 0, 10, 10);
    const before = h.estimate().drainMs!;
    h.groupEnded(u, u + 50);
    h.completed(u + 50);
    expect(h.estimate().drainMs!).toBeGreaterThan(before);
  });

  it('counts admitted requests not yet queued as ahead until their ticket settles (once)', () => {
    const pending = { n: 1 };
    const g = gate(pending);
    run(g, 0, 10, 10);
    const t1 = g.ticket(100);
    const t2 = g.ticket(101);
    expect(t1.receivedMs).toBe(100);
    expect(g.estimate().ahead).toBe(3);
    t1.settle();
    t1.settle();
    expect(g.estimate().ahead).toBe(2);
    t2.settle();
    expect(g.estimate().ahead).toBe(1);
  });

  it('logs a summary at most once per SHED_LOG_INTERVAL_MS per service', () => {
    const g = gate({ n: 0 });
    expect(g.countShed('a', 0)).toEqual({ shed: 1, windowMs: 0 });
    expect(g.countShed('a', 1)).toBeUndefined();
    expect(g.countShed('b', 2)).toEqual({ shed: 1, windowMs: 0 });
    expect(g.countShed('a', SHED_LOG_INTERVAL_MS)).toEqual({ shed: 2, windowMs: SHED_LOG_INTERVAL_MS });
    expect(g.countShed('a', SHED_LOG_INTERVAL_MS + 1)).toBeUndefined();
  });

  it('shedError is an overloaded ServeError without a stack, and leaves the stack limit as it was', () => {
    const before = Error.stackTraceLimit;
    const e = shedError('overloaded: x');
    expect(e.code).toBe('overloaded');
    expect(e.message).toBe('overloaded: x');
    expect(e.stack ?? '').not.toMatch(/\n\s+at /);
    expect(Error.stackTraceLimit).toBe(before);
  });
});
