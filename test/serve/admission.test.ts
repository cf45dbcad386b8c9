/**
 * The admission gate (`serve/admission.ts`), by hand: the estimate it forms from completions and
 * the queue, when it sheds, and its log summary.
 */
import { describe, expect, it } from 'vitest';
import { AdmissionGate, ADMISSION_EWMA_WEIGHT, MIN_SAMPLES, SHED_LOG_INTERVAL_MS, shedError } from '../../src/serve/admission.ts';

function gate(pending: { n: number }): AdmissionGate {
  return new AdmissionGate({ pendingQueries: () => pending.n });
}

describe('AdmissionGate', () => {
  it('admits everything until MIN_SAMPLES completions of the service were measured', () => {
    const pending = { n: 100 };
    const g = gate(pending);
    for (let i = 0; i < MIN_SAMPLES - 1; i++) g.completed('a', i * 10, i * 10 + 10);
    expect(g.estimate('a')).toEqual({ ahead: 100, finishMs: undefined });
    expect(g.shedReason('a', 1, 0)).toBeUndefined();
    expect(g.shedReason('b', 1, 0)).toBeUndefined();
  });

  it('estimates ahead × drain + run from the measured gaps between completions and run times', () => {
    const pending = { n: 3 };
    const g = gate(pending);
    // completions every 10 ms with a backlog; each ran 8 ms from first launch to completion
    for (let i = 1; i <= 10; i++) g.completed('a', i * 10 - 8, i * 10);
    // nine gaps of 10 ms (the first completion has none before it): drain = 10, run = 8 exactly
    expect(g.estimate('a').finishMs).toBeCloseTo(3 * 10 + 8, 9);
    // a 38 ms finish fits a 40 ms target; with 3 ms already spent it does not
    expect(g.shedReason('a', 40, 0)).toBeUndefined();
    expect(g.shedReason('a', 40, 3)).toMatch(/^3 queries ahead; expected to finish in 41\.0 ms, past the QoS target of 40 ms$/);
    // nothing ahead: always admitted (the device takes it next)
    pending.n = 0;
    expect(g.shedReason('a', 1, 100)).toBeUndefined();
  });

  it('weights new samples by ADMISSION_EWMA_WEIGHT and ignores gaps after a completion that left nothing pending', () => {
    const pending = { n: 1 };
    const g = gate(pending);
    for (let i = 1; i <= 6; i++) g.completed('a', i * 10 - 5, i * 10); // drain 10, run 5
    pending.n = 0;
    g.completed('a', 65, 70); // gap 10 counted (backlog at 60), no backlog after it
    pending.n = 2;
    g.completed('a', 995, 1000); // gap 930 follows an idle device: not counted
    // run: every sample was 5 ms → 5; drain stays 10
    expect(g.estimate('a').finishMs).toBeCloseTo(2 * 10 + 5, 9);
    g.completed('a', 1000, 1020); // gap 20 counted; run 20
    const drain = 10 + ADMISSION_EWMA_WEIGHT * (20 - 10);
    const run = 5 + ADMISSION_EWMA_WEIGHT * (20 - 5);
    expect(g.estimate('a').finishMs).toBeCloseTo(2 * drain + run, 9);
  });

  it('falls back to the run time for the drain until enough gaps were measured', () => {
    const pending = { n: 0 };
    const g = gate(pending);
    for (let i = 1; i <= MIN_SAMPLES; i++) g.completed('a', i * 100 - 7, i * 100); // no backlog: no gaps
    pending.n = 4;
    expect(g.estimate('a').finishMs).toBeCloseTo(4 * 7 + 7, 9);
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
