/**
 * fcfs / sjf / edf and overlap-all decisions on hand-computed scenarios, with the fake
 * predictor of test/schedule/fake-predictor.ts (whole queries at batch 1: a 10 ms, b 20 ms,
 * c 10 ms = 20 ops × 0.5 ms, d 12 ms). Headroom = qos − (now − arrival).
 */
import { describe, expect, it } from 'vitest';
import { createController } from '../src/schedule/index.ts';
import type { LaunchSegment, WaitingQuery } from '../src/schedule/controller.ts';
import { FakePredictor } from './schedule/fake-predictor.ts';
import { input, query } from './schedule/query.ts';

const seg = (w: WaitingQuery, end = w.operators): LaunchSegment => ({ queryId: w.id, service: w.service, start: w.nextOperator, end });

describe('fcfs / sjf / edf', () => {
  const NOW = 40;
  // f: arrival 10, deadline 110, headroom 70, solo 10
  // e: arrival 20, deadline 70,  headroom 30, solo 20
  // s: arrival 30, deadline 230, headroom 190, remaining ops 10..20 of c → 10 × 0.5 = 5
  const f = query('f', 'S1', 'a', { arrivalMs: 10, qosTargetMs: 100 });
  const e = query('e', 'S2', 'b', { arrivalMs: 20, qosTargetMs: 50 });
  const s = query('s', 'S3', 'c', { arrivalMs: 30, qosTargetMs: 200, nextOperator: 10 });

  it('each picks by its key and launches the whole remaining query alone', () => {
    const expected = { fcfs: [seg(f), 10], sjf: [seg(s), 5], edf: [seg(e), 20] } as const;
    for (const [policy, [segment, ms]] of Object.entries(expected)) {
      const p = new FakePredictor();
      const d = createController(policy, {}, p).decide(input(NOW, [[s], [e], [f]]));
      expect(d.group, policy).toEqual([segment]);
      expect(d.predictedMs, policy).toBe(ms);
      expect(d.rejected).toEqual([]);
      // drop on: all three heads scored in one call.
      expect(d.stats).toEqual({ predictorCalls: 1, groupsScored: 3, searchRounds: 0, soloMemoHits: 0 });
    }
  });

  it('drop: predicted solo > headroom is rejected (e: qos 35 → headroom 15 < 20), edf then takes f', () => {
    const tight = { ...e, qosTargetMs: 35 };
    const p = new FakePredictor();
    const d = createController('edf', {}, p).decide(input(NOW, [[s], [tight], [f]]));
    expect(d.rejected).toEqual([{ queryId: 'e', service: 'S2', reason: 'qos_violation', headroomMs: 15, predictedMs: 20 }]);
    expect(d.group).toEqual([seg(f)]);
    // drop off: kept and, as the earliest deadline (55), launched; only the chosen one is scored.
    const p2 = new FakePredictor();
    const d2 = createController('edf', { drop: false }, p2).decide(input(NOW, [[s], [tight], [f]]));
    expect(d2.rejected).toEqual([]);
    expect(d2.group).toEqual([seg(tight)]);
    expect(d2.predictedMs).toBe(20);
    expect(p2.calls).toEqual([['b[0,10)x1']]);
  });

  it('drop: headroom ≤ 0 is rejected (f: qos 30 → 0), fcfs then takes e', () => {
    const late = { ...f, qosTargetMs: 30 };
    const d = createController('fcfs', {}, new FakePredictor()).decide(input(NOW, [[s], [e], [late]]));
    expect(d.rejected).toEqual([{ queryId: 'f', service: 'S1', reason: 'qos_violation', headroomMs: 0 }]);
    expect(d.group).toEqual([seg(e)]);
  });

  it('a rejected head is replaced by the next query of its queue', () => {
    const late = { ...f, qosTargetMs: 30 };
    const next = query('g', 'S1', 'a', { arrivalMs: 15, qosTargetMs: 100 });
    const d = createController('fcfs', {}, new FakePredictor()).decide(input(NOW, [[late, next], [e]]));
    // f rejected; g (arrival 15) is earlier than e (20).
    expect(d.rejected.map((r) => r.queryId)).toEqual(['f']);
    expect(d.group).toEqual([seg(next)]);
  });

  it('ties: fcfs equal arrivals → service name; sjf equal solo → earlier arrival', () => {
    const x = query('x', 'S2', 'a', { arrivalMs: 10, qosTargetMs: 100 });
    const y = query('y', 'S1', 'c', { arrivalMs: 10, qosTargetMs: 100 });
    expect(createController('fcfs', {}, new FakePredictor()).decide(input(NOW, [[x], [y]])).group).toEqual([seg(y)]);
    // both solo 10 ms (a: 10 × 1, c: 20 × 0.5); x arrived first.
    const x2 = { ...x, arrivalMs: 5 };
    expect(createController('sjf', {}, new FakePredictor()).decide(input(NOW, [[y], [x2]])).group).toEqual([seg(x2)]);
  });

  it('sjf without drop still scores every head (one call); fcfs without drop scores only the chosen one', () => {
    const p = new FakePredictor();
    createController('sjf', { drop: false }, p).decide(input(NOW, [[s], [e], [f]]));
    expect(p.calls).toEqual([['c[10,20)x1', 'b[0,10)x1', 'a[0,10)x1']]);
    const p2 = new FakePredictor();
    createController('fcfs', { drop: false }, p2).decide(input(NOW, [[s], [e], [f]]));
    expect(p2.calls).toEqual([['a[0,10)x1']]);
  });
});

describe('overlap-all', () => {
  it('launches every waiting query whole at once, never rejects, predicts nothing, runs while busy', () => {
    const c = createController('overlap-all');
    expect(c.launchWhileBusy).toBe(true);
    const q1 = query('q1', 'S1', 'a', { arrivalMs: 0, qosTargetMs: 50, nextOperator: 3 });
    const q2 = query('q2', 'S1', 'a', { arrivalMs: 1, qosTargetMs: 50 });
    const q3 = query('q3', 'S2', 'b', { arrivalMs: 2, qosTargetMs: 10 }); // headroom 10 − 98 < 0: still launched
    const d = c.decide(input(100, [[q1, q2], [q3]], 7));
    expect(d).toEqual({ group: [seg(q1), seg(q2), seg(q3)], rejected: [], stats: { predictorCalls: 0, groupsScored: 0, searchRounds: 0, soloMemoHits: 0 } });
    expect(d.predictedMs).toBeUndefined();
  });

  it('every other policy but triton launches one group at a time', () => {
    for (const policy of ['abacus', 'fcfs', 'sjf', 'edf', 'fcfs-batch', 'edf-batch', 'clockwork']) {
      expect(createController(policy, {}, new FakePredictor()).launchWhileBusy, policy).toBe(false);
    }
  });
});
