/**
 * The admission gate (`serve/admission.ts`), by hand: the device time per query it measures from
 * groups and completions, the run time per service, when it sheds, tickets, and its log summary.
 */
import { describe, expect, it } from 'vitest';
import { admitOnArrival, type ShedSinks } from '../../src/serve/shed.ts';
import { ServeMetrics } from '../../src/serve/metrics.ts';
import { ModelStatsRecorder } from '../../src/serve/stats.ts';
import { ServeError } from '../../src/serve/inference.ts';
import { AdmissionGate, BUDGET_STEP, DRAIN_WINDOW_MS, FRONT_END_AHEAD_MS, LATE_TARGET, MIN_BUDGET, MIN_SAMPLES, RUN_WEIGHT, SHED_LOG_INTERVAL_MS, shedError } from '../../src/serve/admission.ts';

function gate(pending: { n: number }): AdmissionGate {
  return new AdmissionGate({ pendingQueries: () => pending.n });
}

/** `n` back-to-back groups of `ms` each from `fromMs` on service `a`, each completing `perGroup` queries that ran `ms`. */
function run(g: AdmissionGate, fromMs: number, n: number, ms: number, perGroup = 1): number {
  let t = fromMs;
  for (let i = 0; i < n; i++) {
    g.groupEnded(t, t + ms);
    t += ms;
    for (let k = 0; k < perGroup; k++) g.completed('a', t, ms);
  }
  return t;
}

describe('AdmissionGate', () => {
  it('admits everything until MIN_SAMPLES completions were measured; then a service with none is judged on the queue ahead alone', () => {
    const pending = { n: 100 };
    const g = gate(pending);
    run(g, 0, MIN_SAMPLES - 1, 10);
    expect(g.estimate('a')).toEqual({ ahead: 100, finishMs: undefined });
    expect(g.drainMs()).toBeUndefined();
    expect(g.shedReason('a', 1, 0)).toBeUndefined();
    run(g, 1000, 1, 10);
    expect(g.estimate('a').finishMs).toBeDefined();
    // 'b' never completed (under overload from the start the controller may drop all of them): run 0
    expect(g.estimate('b')).toEqual({ ahead: 100, finishMs: expect.closeTo(1000, 6) as number, drainMs: expect.closeTo(10, 6) as number, runMs: 0 });
    expect(g.shedReason('b', 999, 0)).toMatch(/^100 queries ahead; expected to finish in 1000\.0 ms/);
    expect(g.shedReason('b', 1001, 0)).toBeUndefined();
  });

  it('expects ahead × the device time per completed query + the run time, and sheds past the QoS target', () => {
    const pending = { n: 3 };
    const g = gate(pending);
    run(g, 0, 10, 10); // busy 10 ms per completion at every instant: drain 10; every run 10
    expect(g.estimate('a')).toEqual({ ahead: 3, finishMs: expect.closeTo(40, 9) as number, drainMs: expect.closeTo(10, 9) as number, runMs: 10 });
    expect(g.drainMs()).toBeCloseTo(10, 9);
    expect(g.shedReason('a', 40.001, 0)).toBeUndefined();
    expect(g.shedReason('a', 40, 3)).toBe('3 queries ahead; expected to finish in 43.0 ms (3.0 spent + 3 × 10.0 ms of device time per query + 10.0 ms to run), past its QoS target of 40 ms');
    pending.n = 1;
    expect(g.shedReason('a', 19, 0)).toBe('1 query ahead; expected to finish in 20.0 ms (1 × 10.0 ms of device time per query + 10.0 ms to run), past its QoS target of 19 ms');
    // nothing ahead: always admitted (the device takes it next)
    pending.n = 0;
    expect(g.shedReason('a', 1, 100)).toBeUndefined();
  });

  it('before the model is known, sheds only when every model would shed, with the reason of the one closest to making it', () => {
    const pending = { n: 3 };
    const g = gate(pending);
    run(g, 0, 10, 10); // drain 10, run 10 for 'a': a request of 'a' expects 40 ms
    g.completed('b', 100, 20); // 'b' runs 20 ms: expects 50 ms
    expect(g.shedReasonForAll([])).toBeUndefined();
    expect(g.shedReasonForAll([{ name: 'a', qosTargetMs: 39 }, { name: 'b', qosTargetMs: 50 }])).toBeUndefined();
    expect(g.shedReasonForAll([{ name: 'a', qosTargetMs: 30 }, { name: 'b', qosTargetMs: 45 }])).toBe(g.shedReason('b', 45, 0));
    expect(g.shedReasonForAll([{ name: 'a', qosTargetMs: 39 }, { name: 'b', qosTargetMs: 20 }])).toBe(g.shedReason('a', 39, 0));
    // a model none of whose queries completed: judged on the queue ahead (3 × 10 ms)
    expect(g.shedReasonForAll([{ name: 'a', qosTargetMs: 1 }, { name: 'c', qosTargetMs: 31 }])).toBeUndefined();
    expect(g.shedReasonForAll([{ name: 'a', qosTargetMs: 1 }, { name: 'c', qosTargetMs: 29 }])).toBe(g.shedReason('c', 29, 0));
    pending.n = 0;
    expect(g.shedReasonForAll([{ name: 'a', qosTargetMs: 1 }])).toBeUndefined();
  });

  it('sheds earlier where asked (budgeted) while admitted queries end late: the budget settles where LATE_TARGET of them are late, within [MIN_BUDGET, 1]', () => {
    const pending = { n: 3 };
    const g = gate(pending);
    run(g, 0, 10, 10); // a request of 'a' expects 40 ms
    expect(g.budget('a')).toBe(1);
    expect(g.shedReason('a', 45, 0, undefined, true)).toBeUndefined();
    // ten late outcomes (finished late, or dropped by the controller): 1 - 10 × BUDGET_STEP
    for (let i = 0; i < 10; i++) g.outcome('a', true);
    expect(g.budget('a')).toBeCloseTo(1 - 10 * BUDGET_STEP, 9);
    expect(g.shedReason('a', 45, 0, undefined, true)).toMatch(/past 80 % of its QoS target of 45 ms/);
    // not budgeted (gRPC, whose resends are not paced; a check after decoding): the plain target
    expect(g.shedReason('a', 45, 0)).toBeUndefined();
    expect(g.shedReasonForAll([{ name: 'a', qosTargetMs: 45 }])).toBeUndefined();
    // per service: 'b', whose outcomes were all on time so far, keeps its whole target
    g.completed('b', 100, 10);
    expect(g.budget('b')).toBe(1);
    expect(g.shedReason('b', 45, 0, undefined, true)).toBeUndefined();
    for (let i = 0; i < 1000; i++) g.outcome('a', true);
    expect(g.budget('a')).toBe(MIN_BUDGET);
    // on time: back up by BUDGET_STEP × LATE_TARGET / (1 − LATE_TARGET) each
    const up = (BUDGET_STEP * LATE_TARGET) / (1 - LATE_TARGET);
    for (let i = 0; i < 100; i++) g.completed('a', 200, 10, false);
    expect(g.budget('a')).toBeCloseTo(MIN_BUDGET + 100 * up, 9);
    for (let i = 0; i < 10 / up; i++) g.outcome('a', false);
    expect(g.budget('a')).toBe(1);
    // one late in 1 / LATE_TARGET holds it where it is
    const h = gate(pending);
    for (let i = 0; i < 20; i++) h.outcome('a', true);
    const before = h.budget('a');
    for (let k = 0; k < 50; k++) for (let i = 0; i < 1 / LATE_TARGET; i++) h.outcome('a', i === 0);
    expect(h.budget('a')).toBeCloseTo(before, 6);
  });

  it('admitOnArrival judges against the budget only a request whose body the HTTP front end has not read (unread: body)', () => {
    const pending = { n: 3 };
    const g = gate(pending);
    run(g, 0, 10, 10); // a request of 'a' expects 40 ms
    for (let i = 0; i < 10; i++) g.outcome('a', true); // budget 0.8: 45 ms × 0.8 = 36 < 40
    const sinks: ShedSinks = { gate: g, metrics: undefined, stats: new ModelStatsRecorder(['a'], '1'), feed: undefined, logger: undefined, nextId: () => 'x' };
    const m = { name: 'a', qosTargetMs: 45 };
    expect(() => admitOnArrival(sinks, m, 100, true, undefined, 'body')).toThrow(ServeError);
    // a gRPC stream message (no `unread`, no arrival ticket) and gRPC calls: the plain target
    admitOnArrival(sinks, m, 100, true, undefined, undefined).settle();
    admitOnArrival(sinks, m, 100, true, g.ticket(100), 'message').settle();
  });

  it('abacus_admission_budget shows each model\'s budget, and no series without a gate', async () => {
    const g = gate({ n: 0 });
    for (let i = 0; i < 5; i++) g.outcome('a', true);
    const metrics = new ServeMetrics({ models: ['a', 'b'], processMetrics: false });
    expect(await metrics.text()).not.toMatch(/^abacus_admission_budget\{/m);
    metrics.bind({ queueDepth: () => 0, ready: () => true, admissionBudget: (model) => g.budget(model) });
    const text = await metrics.text();
    expect(Number(/^abacus_admission_budget\{model="a"\} (\S+)$/m.exec(text)?.[1])).toBeCloseTo(1 - 5 * BUDGET_STEP, 9);
    expect(text).toMatch(/^abacus_admission_budget\{model="b"\} 1$/m);
  });

  it('takes the run time per service as a weighted mean', () => {
    const g = gate({ n: 1 });
    run(g, 0, 10, 10);
    g.completed('a', 100, 30);
    expect(g.estimate('a').runMs).toBeCloseTo(10 + RUN_WEIGHT * (30 - 10), 9);
    g.completed('b', 100, 7);
    expect(g.estimate('b').runMs).toBe(7);
  });

  it('counts overlap and batching gains (two completions per group halve the drain) and time shared by overlapping groups once', () => {
    const g = gate({ n: 1 });
    run(g, 0, 10, 10, 2);
    expect(g.estimate('a').drainMs).toBeCloseTo(5, 9);
    // groups [0, 10] and [5, 15] (launched while the other runs), one completion at each end: busy 15 ms in all
    const h = gate({ n: 1 });
    h.groupEnded(0, 10);
    h.completed('a', 10, 10);
    h.groupEnded(5, 15);
    h.completed('a', 15, 10);
    for (let i = 0; i < MIN_SAMPLES; i++) h.completed('a', 15, 10);
    const f = Math.exp(-5 / DRAIN_WINDOW_MS);
    // at 15: busy = 10·f + 5, completions = f + 1 + MIN_SAMPLES
    expect(h.estimate('a').drainMs).toBeCloseTo((10 * f + 5) / (f + 1 + MIN_SAMPLES), 9);
  });

  it('keeps its figure through an idle device, and work that completes nothing raises it', () => {
    const g = gate({ n: 2 });
    const t = run(g, 0, 20, 10);
    g.completed('a', t + 5000, 10); // after 5 s idle: both sums decayed alike
    const f = Math.exp(-5000 / DRAIN_WINDOW_MS);
    const busy = 10 * Array.from({ length: 20 }, (_, i) => Math.exp(-(190 - 10 * i) / DRAIN_WINDOW_MS)).reduce((a, b) => a + b, 0);
    expect(g.estimate('a').drainMs).toBeCloseTo((busy * f) / ((busy / 10) * f + 1), 9);
    // a 50 ms group whose query was rejected part-way: busy time, no completion
    const h = gate({ n: 2 });
    const u = run(h, 0, 10, 10);
    const before = h.estimate('a').drainMs!;
    h.groupEnded(u, u + 50);
    h.completed('a', u + 50, 10);
    expect(h.estimate('a').drainMs!).toBeGreaterThan(before);
  });

  it('counts admitted requests not yet queued as ahead until their ticket settles (once)', () => {
    const pending = { n: 1 };
    const g = gate(pending);
    run(g, 0, 10, 10);
    const t1 = g.ticket(100);
    const t2 = g.ticket(101);
    expect(t1.receivedMs).toBe(100);
    expect(g.estimate('a').ahead).toBe(3);
    t1.settle();
    t1.settle();
    expect(g.estimate('a').ahead).toBe(2);
    t2.settle();
    expect(g.estimate('a').ahead).toBe(1);
  });

  it('lets go of a request still in a front end FRONT_END_AHEAD_MS after it arrived: a stalled client cannot make everyone shed', () => {
    const pending = { n: 0 };
    const g = gate(pending);
    run(g, 0, 10, 10);
    const stalled = Array.from({ length: 50 }, () => g.ticket(1000));
    expect(g.estimate('a').ahead).toBe(50);
    expect(g.shedReason('a', 100, 0)).toBeDefined();
    // a request arriving FRONT_END_AHEAD_MS later finds none of them ahead, only its own kind
    const fresh = g.ticket(1000 + FRONT_END_AHEAD_MS + 1);
    expect(g.estimate('a').ahead).toBe(1);
    expect(g.shedReason('a', 100, 0)).toBeUndefined();
    for (const t of stalled) t.settle(); // late settles change nothing
    fresh.settle();
    expect(g.estimate('a').ahead).toBe(0);
  });

  it('lets go of stalled requests by the clock of the arrivals it judges, even when it sheds every one of them (no ticket taken)', () => {
    const pending = { n: 0 };
    const g = gate(pending);
    run(g, 0, 10, 10);
    // three requests whose message never comes: enough to shed a 30 ms request
    for (let i = 0; i < 3; i++) g.ticket(1000);
    expect(g.shedReasonForAll([{ name: 'a', qosTargetMs: 30 }], 1000)).toBeDefined();
    expect(g.shedReason('a', 30, 0, 1000)).toBeDefined();
    // arrivals FRONT_END_AHEAD_MS later, shed or not, find none of them ahead: a shed arrival
    // takes no ticket, so the gate's clock must move with the arrivals judged
    const later = 1000 + FRONT_END_AHEAD_MS + 1;
    expect(g.shedReasonForAll([{ name: 'a', qosTargetMs: 30 }], later)).toBeUndefined();
    expect(g.shedReason('a', 30, 0, later)).toBeUndefined();
    expect(g.estimate('a', later).ahead).toBe(0);
  });

  it('logs a summary at most once per SHED_LOG_INTERVAL_MS per service', () => {
    const g = gate({ n: 0 });
    expect(g.countShed('a', 0)).toEqual({ shed: 1, windowMs: 0 });
    expect(g.countShed('a', 1)).toBeUndefined();
    expect(g.countShed('b', 2)).toEqual({ shed: 1, windowMs: 0 });
    expect(g.countShed('a', SHED_LOG_INTERVAL_MS)).toEqual({ shed: 2, windowMs: SHED_LOG_INTERVAL_MS });
    expect(g.countShed('a', SHED_LOG_INTERVAL_MS + 1)).toBeUndefined();
  });

  it('shedError is an overloaded ServeError without a stack, with the retryInMs given, and leaves the stack limit as it was', () => {
    const before = Error.stackTraceLimit;
    const e = shedError('overloaded: x');
    expect(e.code).toBe('overloaded');
    expect(e.message).toBe('overloaded: x');
    expect(e.stack ?? '').not.toMatch(/\n\s+at /);
    expect(Error.stackTraceLimit).toBe(before);
    expect(e.retryInMs).toBeUndefined();
    // the gate's device time per query, for the HTTP front end's pacing; kept with the request's id
    const paced = shedError('overloaded: y', 12.5);
    expect([paced.retryInMs, paced.withId('r1').retryInMs, paced.withId('r1').id]).toEqual([12.5, 12.5, 'r1']);
  });
});
