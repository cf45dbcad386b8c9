/**
 * The batching baselines on hand-computed scenarios: fcfs-batch / edf-batch (greedy fusion
 * behind the fcfs / edf head), clockwork with batching (Clockwork, OSDI'20: the largest batch
 * whose estimated finish meets the deadline of its most urgent member, estimate ≤ max_exec),
 * and triton (Triton's dynamic batcher: full or preferred batch at once, else wait up to
 * maxQueueDelayMs). Fake predictor (test/schedule/fake-predictor.ts): a whole query of model
 * `a` at batch s takes 10·s ms (10 ops × 1 ms × s), `b` 20·s ms, `c` 10·s ms. Deadline =
 * arrival + QoS; headroom = QoS − (now − arrival). Exact values (no tolerance) unless noted:
 * every number here is a small sum of integers.
 */
import { describe, expect, it } from 'vitest';
import { ClockworkController, createController, TritonController } from '../src/schedule/index.ts';
import type { BatchingLimits, GroupObservation, LaunchSegment, WaitingQuery } from '../src/schedule/controller.ts';
import { FakePredictor } from './schedule/fake-predictor.ts';
import { rng } from './helpers/rng.ts';
import { input, query, randomInput, type QueryOpts } from './schedule/query.ts';

const limits = (maxBatchSize: number, maxQueueDelayMs = 0, preferredBatchSizes: number[] = []): BatchingLimits => ({ maxBatchSize, maxQueueDelayMs, preferredBatchSizes });

/** A query of a service that batches with `l` (fuseKey 'k' unless given). */
const bq = (id: string, service: string, model: string, l: BatchingLimits, o: QueryOpts): WaitingQuery => query(id, service, model, { ...o, batching: l });

const seg = (w: WaitingQuery, fused: readonly WaitingQuery[] = []): LaunchSegment => ({
  queryId: w.id,
  service: w.service,
  start: w.nextOperator,
  end: w.operators,
  ...(fused.length === 0 ? {} : { fused: fused.map((f) => f.id) }),
});

const NO_STATS = { predictorCalls: 0, groupsScored: 0, searchRounds: 0, soloMemoHits: 0 };

describe('fcfs-batch / edf-batch', () => {
  const NOW = 100;
  const L8 = limits(8);
  // S1 (model a, batches up to 8): a1 + a2 = 3 samples; a3 has another shape (skipped);
  // a4 → 7 samples; a5 (2) would make 9 > 8: the scan stops there.
  const a1 = bq('a1', 'S1', 'a', L8, { arrivalMs: 10, qosTargetMs: 200 }); // deadline 210, headroom 110
  const a2 = bq('a2', 'S1', 'a', L8, { arrivalMs: 20, qosTargetMs: 200, batch: 2 });
  const a3 = bq('a3', 'S1', 'a', L8, { arrivalMs: 30, qosTargetMs: 200, fuseKey: 'other' });
  const a4 = bq('a4', 'S1', 'a', L8, { arrivalMs: 40, qosTargetMs: 200, batch: 4 });
  const a5 = bq('a5', 'S1', 'a', L8, { arrivalMs: 50, qosTargetMs: 200, batch: 2 });
  // S2 (model b, no batching): deadline 115, headroom 15, solo 20 > 15 with drop → rejected
  const b1 = query('b1', 'S2', 'b', { arrivalMs: 15, qosTargetMs: 100 });

  it('fcfs-batch fuses every follower of the head up to maxBatchSize, skipping another shape; predicted = solo at the fused samples', () => {
    const p = new FakePredictor();
    const d = createController('fcfs-batch', { drop: false }, p).decide(input(NOW, [[a1, a2, a3, a4, a5], [b1]]));
    expect(d.group).toEqual([seg(a1, [a2, a4])]);
    expect(d.predictedMs).toBe(70); // a at 1 + 2 + 4 = 7 samples: 10 × 7
    expect(d.rejected).toEqual([]);
    // no drop: only the chosen head's fused batch is scored
    expect(p.calls).toEqual([['a[0,10)x7']]);
    expect(d.stats).toEqual({ predictorCalls: 1, groupsScored: 1, searchRounds: 0, soloMemoHits: 0 });
  });

  it('fcfs-batch drops as fcfs (heads alone, at their own batch), then fuses; the memo answers the same decision again', () => {
    const p = new FakePredictor();
    const c = createController('fcfs-batch', {}, p);
    const d = c.decide(input(NOW, [[a1, a2, a3, a4, a5], [b1]]));
    expect(d.rejected).toEqual([{ queryId: 'b1', service: 'S2', reason: 'qos_violation', headroomMs: 15, predictedMs: 20 }]);
    expect(d.group).toEqual([seg(a1, [a2, a4])]);
    expect(d.predictedMs).toBe(70);
    expect(p.calls).toEqual([['a[0,10)x1', 'b[0,10)x1'], ['a[0,10)x7']]);
    const again = c.decide(input(NOW, [[a1, a2, a3, a4, a5], [b1]]));
    expect(again.group).toEqual(d.group);
    expect(again.stats).toEqual({ predictorCalls: 0, groupsScored: 0, searchRounds: 0, soloMemoHits: 3 });
  });

  it('a head rejected by drop is replaced by the next query, which then leads the batch', () => {
    const late = bq('late', 'S1', 'a', L8, { arrivalMs: 0, qosTargetMs: 100 }); // headroom 0
    const d = createController('fcfs-batch', {}, new FakePredictor()).decide(input(NOW, [[late, a1, a2]]));
    expect(d.rejected).toEqual([{ queryId: 'late', service: 'S1', reason: 'qos_violation', headroomMs: 0 }]);
    expect(d.group).toEqual([seg(a1, [a2])]);
    expect(d.predictedMs).toBe(30);
  });

  it('edf-batch takes the earliest deadline and fuses regardless of the followers\u2019 or the batch\u2019s deadline (greedy)', () => {
    // c1: deadline 120, headroom 20, solo 10 (kept); c2, c3 fuse: c at 3 samples = 30 ms > 20
    const L4 = limits(4);
    const c1 = bq('c1', 'S3', 'c', L4, { arrivalMs: 60, qosTargetMs: 60 });
    const c2 = bq('c2', 'S3', 'c', L4, { arrivalMs: 70, qosTargetMs: 200 });
    const c3 = bq('c3', 'S3', 'c', L4, { arrivalMs: 80, qosTargetMs: 200 });
    const d = createController('edf-batch', {}, new FakePredictor()).decide(input(NOW, [[a1, a2], [c1, c2, c3]]));
    expect(d.group).toEqual([seg(c1, [c2, c3])]);
    expect(d.predictedMs).toBe(30);
    // fcfs-batch on the same input: a1 arrived first
    expect(createController('fcfs-batch', {}, new FakePredictor()).decide(input(NOW, [[a1, a2], [c1, c2, c3]])).group).toEqual([seg(a1, [a2])]);
  });

  it('a head that already ran operators, a lone query or a service without batching launches alone', () => {
    const started = bq('s', 'S1', 'a', L8, { arrivalMs: 10, qosTargetMs: 200, nextOperator: 3 });
    const d = createController('edf-batch', {}, new FakePredictor()).decide(input(NOW, [[started, a2]]));
    expect(d.group).toEqual([seg(started)]);
    expect(d.predictedMs).toBe(7); // ops 3..10 at batch 1
    const plain = [query('p1', 'S1', 'a', { arrivalMs: 10, qosTargetMs: 200 }), query('p2', 'S1', 'a', { arrivalMs: 20, qosTargetMs: 200 })];
    expect(createController('fcfs-batch', {}, new FakePredictor()).decide(input(NOW, [plain])).group).toEqual([seg(plain[0]!)]);
  });

  it('without batching on the queries they decide exactly as fcfs / edf (200 random inputs each, drop on and off)', () => {
    const r = rng(21);
    for (const [batched, plain] of [['fcfs-batch', 'fcfs'], ['edf-batch', 'edf']] as const) {
      for (const drop of [true, false]) {
        const cb = createController(batched, { drop }, new FakePredictor());
        const cp = createController(plain, { drop }, new FakePredictor());
        for (let i = 0; i < 200; i++) {
          const inp = randomInput(r, `q${i}`);
          expect(cb.decide(inp)).toEqual(cp.decide(inp));
        }
      }
    }
  });
});

/** A whole-query observation of model `a` at `batch` samples taking `ms`. */
const measured = (ms: number, batch: number): GroupObservation => ({
  segments: [{ queryId: 'm', service: 'S1', model: 'a', start: 0, end: 10, operators: 10, batch, seqLen: 0, latencyMs: ms }],
  groupLatencyMs: ms,
});

describe('clockwork with batching', () => {
  const NOW = 100;
  const L16 = limits(16);
  // samples 1, 2, 3, 4; earliest deadline among the first m: 190, 190, 134, 134
  const h = bq('h', 'S1', 'a', L16, { arrivalMs: 90, qosTargetMs: 100 }); // deadline 190
  const f1 = bq('f1', 'S1', 'a', L16, { arrivalMs: 92, qosTargetMs: 100 }); // 192
  const f2 = bq('f2', 'S1', 'a', L16, { arrivalMs: 94, qosTargetMs: 40 }); // 134
  const f3 = bq('f3', 'S1', 'a', L16, { arrivalMs: 96, qosTargetMs: 100 }); // 196
  const clockwork = (p: FakePredictor, params: Record<string, unknown> = {}): ClockworkController => createController('clockwork', params, p) as ClockworkController;

  it('max_exec 25 ms (default): batch 2 (20 ms) is the largest whose estimate is ≤ 25; the missing sizes in one batched call', () => {
    const p = new FakePredictor();
    const d = clockwork(p).decide(input(NOW, [[h, f1, f2, f3]]));
    // estimates 20, 30, 40 for 2, 3, 4 samples; 30 and 40 exceed max_exec
    expect(d.group).toEqual([seg(h, [f1])]);
    expect(d.predictedMs).toBe(20);
    expect(p.calls).toEqual([['a[0,10)x1'], ['a[0,10)x2', 'a[0,10)x3', 'a[0,10)x4']]);
    expect(d.stats).toEqual({ predictorCalls: 2, groupsScored: 4, searchRounds: 0, soloMemoHits: 0 });
  });

  it('the estimated finish must meet the earliest deadline among the batch (f2: 134)', () => {
    // max_exec 100: 4 samples finish at 100 + 40 = 140 > 134; 3 samples at 130 ≤ 134
    const d = clockwork(new FakePredictor(), { maxExecMs: 100 }).decide(input(NOW, [[h, f1, f2, f3]]));
    expect(d.group).toEqual([seg(h, [f1, f2])]);
    expect(d.predictedMs).toBe(30);
    // the running group's remainder delays the start: 105 + 30 = 135 > 134; 2 samples: 125 ≤ 190
    const busy = clockwork(new FakePredictor(), { maxExecMs: 100 }).decide(input(NOW, [[h, f1, f2, f3]], 5));
    expect(busy.group).toEqual([seg(h, [f1])]);
    expect(busy.predictedMs).toBe(20);
  });

  it('measured estimates replace the predictor for their batch size; only the other sizes are scored', () => {
    const p = new FakePredictor();
    const c = clockwork(p);
    c.observe(measured(12, 3)); // one measurement: estimate(a, 3) = 12
    const d = c.decide(input(NOW, [[h, f1, f2, f3]]));
    // 4 samples: 40 > 25; 3 samples: 12 ≤ 25 and 100 + 12 = 112 ≤ 134
    expect(d.group).toEqual([seg(h, [f1, f2])]);
    expect(d.predictedMs).toBe(12);
    expect(p.calls).toEqual([['a[0,10)x1'], ['a[0,10)x2', 'a[0,10)x4']]);
  });

  it('the head alone when no batch qualifies (max_exec 15 < 20 ms for 2 samples); max batch and shape bound the plan', () => {
    const alone = clockwork(new FakePredictor(), { maxExecMs: 15 }).decide(input(NOW, [[h, f1, f2, f3]]));
    expect(alone.group).toEqual([seg(h)]);
    expect(alone.predictedMs).toBe(10);
    // maxBatchSize 2: only f1 may join
    const L2 = limits(2);
    const small = [h, f1, f2].map((q) => ({ ...q, batching: L2 }));
    const p = new FakePredictor();
    expect(clockwork(p, { maxExecMs: 100 }).decide(input(NOW, [small])).group).toEqual([seg(small[0]!, [small[1]!])]);
    expect(p.calls).toEqual([['a[0,10)x1'], ['a[0,10)x2']]);
    // f1 of another shape is passed over: h + f2 (deadline 134) + f3, 3 samples: 130 ≤ 134
    const odd = { ...f1, fuseKey: 'other' };
    expect(clockwork(new FakePredictor(), { maxExecMs: 100 }).decide(input(NOW, [[h, odd, f2, f3]])).group).toEqual([seg(h, [f2, f3])]);
  });

  it('drop still judges the head alone; the batch is then chosen behind the surviving head', () => {
    const late = bq('late', 'S1', 'a', L16, { arrivalMs: 0, qosTargetMs: 105 }); // headroom 5 < 10
    const d = clockwork(new FakePredictor()).decide(input(NOW, [[late, h, f1]]));
    expect(d.rejected).toEqual([{ queryId: 'late', service: 'S1', reason: 'qos_violation', headroomMs: 5, predictedMs: 10 }]);
    expect(d.group).toEqual([seg(h, [f1])]);
  });
});

describe('triton', () => {
  const NOW = 100;
  const triton = (params: Record<string, unknown> = {}): TritonController => createController('triton', params) as TritonController;

  it('runs while busy, one group per service, predicts nothing; defaults: greedy up to maxBatchSize, at once', () => {
    const c = triton();
    expect([c.launchWhileBusy, c.oneGroupPerService]).toEqual([true, true]);
    const L4 = limits(4);
    const t = [1, 1, 2, 1].map((batch, i) => bq(`t${i}`, 'T1', 'a', L4, { arrivalMs: 90 + i, qosTargetMs: 100, batch }));
    // 1 + 1 + 2 = 4 = maxBatchSize (the preferred size when none is given): sent, t3 waits
    expect(c.decide(input(NOW, [t]))).toEqual({ group: [seg(t[0]!, [t[1]!, t[2]!])], rejected: [], stats: NO_STATS });
    // 2 samples only: no delay configured → sent as is
    expect(c.decide(input(NOW, [t.slice(0, 2)])).group).toEqual([seg(t[0]!, [t[1]!])]);
  });

  it('holds a batch that is neither full nor preferred until the oldest query waited maxQueueDelayMs (wakeAtMs)', () => {
    const L = limits(8, 20);
    const t1 = bq('t1', 'T1', 'a', L, { arrivalMs: 90, qosTargetMs: 100 });
    const t2 = bq('t2', 'T1', 'a', L, { arrivalMs: 95, qosTargetMs: 100 });
    const c = triton();
    expect(c.decide(input(NOW, [[t1, t2]]))).toEqual({ group: [], rejected: [], stats: NO_STATS, wakeAtMs: 110 });
    expect(c.decide(input(109.5, [[t1, t2]])).wakeAtMs).toBe(110);
    // at 90 + 20 the delay is over: what is there goes
    expect(c.decide(input(110, [[t1, t2]]))).toEqual({ group: [seg(t1, [t2])], rejected: [], stats: NO_STATS });
    // a full batch does not wait
    const full = Array.from({ length: 8 }, (_, i) => bq(`u${i}`, 'T1', 'a', L, { arrivalMs: 95, qosTargetMs: 100 }));
    expect(c.decide(input(NOW, [full])).group).toEqual([seg(full[0]!, full.slice(1))]);
  });

  it('with drop, a hold ends at a member\u2019s deadline, where that member is rejected', () => {
    const L = limits(8, 20);
    const t1 = bq('t1', 'T1', 'a', L, { arrivalMs: 90, qosTargetMs: 100 });
    const t2 = bq('t2', 'T1', 'a', L, { arrivalMs: 95, qosTargetMs: 12 }); // deadline 107
    expect(triton().decide(input(NOW, [[t1, t2]])).wakeAtMs).toBe(107);
    expect(triton({ drop: false }).decide(input(NOW, [[t1, t2]])).wakeAtMs).toBe(110);
    const at107 = triton().decide(input(107, [[t1, t2]]));
    expect(at107.rejected).toEqual([{ queryId: 't2', service: 'T1', reason: 'qos_violation', headroomMs: 0 }]);
    expect(at107.group).toEqual([]);
    expect(at107.wakeAtMs).toBe(110);
  });

  it('preferred sizes: the largest preferred batch that can be formed goes at once', () => {
    const L = limits(8, 50, [2, 4]);
    const seven = Array.from({ length: 7 }, (_, i) => bq(`p${i}`, 'T1', 'a', L, { arrivalMs: 90 + i, qosTargetMs: 200 }));
    const c = triton();
    // 7 waiting: 4 is the largest preferred size formed
    expect(c.decide(input(NOW, [seven])).group).toEqual([seg(seven[0]!, seven.slice(1, 4))]);
    // 3 waiting: 2
    expect(c.decide(input(NOW, [seven.slice(0, 3)])).group).toEqual([seg(seven[0]!, [seven[1]!])]);
    // 1 waiting: no preferred size, hold until 90 + 50
    expect(c.decide(input(NOW, [seven.slice(0, 1)]))).toMatchObject({ group: [], wakeAtMs: 140 });
    // the delay is over: everything formed goes (7 samples), not just the preferred 4
    expect(c.decide(input(140, [seven])).group).toEqual([seg(seven[0]!, seven.slice(1))]);
    // batches 1, 2, 2: prefix sums 1, 3, 5 hit no preferred size; 5 would pass max(P) = 4, so the
    // prefix below it (3 samples) is the preferred batch (Triton's GetDynamicBatch)
    const uneven = [1, 2, 2].map((batch, i) => bq(`v${i}`, 'T1', 'a', L, { arrivalMs: 90 + i, qosTargetMs: 200, batch }));
    expect(c.decide(input(NOW, [uneven])).group).toEqual([seg(uneven[0]!, [uneven[1]!])]);
  });

  it('a query of another shape ends the batch, which then goes at once; a service without batching sends its head alone', () => {
    const L = limits(8, 50);
    const k = ['k', 'k', 'x', 'k'].map((fuseKey, i) => bq(`k${i}`, 'T1', 'a', L, { arrivalMs: 90 + i, qosTargetMs: 200, fuseKey }));
    expect(triton().decide(input(NOW, [k])).group).toEqual([seg(k[0]!, [k[1]!])]);
    const plain = [query('n1', 'T2', 'b', { arrivalMs: 99, qosTargetMs: 200 }), query('n2', 'T2', 'b', { arrivalMs: 99, qosTargetMs: 200 })];
    expect(triton().decide(input(NOW, [plain])).group).toEqual([seg(plain[0]!)]);
    const started = bq('st', 'T1', 'a', L, { arrivalMs: 90, qosTargetMs: 200, nextOperator: 4 });
    expect(triton().decide(input(NOW, [[started, k[0]!]])).group).toEqual([seg(started)]);
  });

  it('drop (queue policy REJECT at the QoS target): timed-out queries met while forming the batch are rejected and skipped', () => {
    const L = limits(4);
    const gone = bq('gone', 'T1', 'a', L, { arrivalMs: 0, qosTargetMs: 100 }); // headroom 0
    const t1 = bq('t1', 'T1', 'a', L, { arrivalMs: 90, qosTargetMs: 100 });
    const mid = bq('mid', 'T1', 'a', L, { arrivalMs: 50, qosTargetMs: 40 }); // headroom −10
    const t2 = bq('t2', 'T1', 'a', L, { arrivalMs: 95, qosTargetMs: 100 });
    const d = triton().decide(input(NOW, [[gone, t1, mid, t2]]));
    expect(d.rejected).toEqual([
      { queryId: 'gone', service: 'T1', reason: 'qos_violation', headroomMs: 0 },
      { queryId: 'mid', service: 'T1', reason: 'qos_violation', headroomMs: -10 },
    ]);
    expect(d.group).toEqual([seg(t1, [t2])]);
    expect(d.predictedMs).toBeUndefined();
    // no drop: nothing is rejected; gone leads and 1 + 1 + 1 + 1 = 4 samples fill the batch
    const kept = triton({ drop: false }).decide(input(NOW, [[gone, t1, mid, t2]]));
    expect(kept.rejected).toEqual([]);
    expect(kept.group).toEqual([seg(gone, [t1, mid, t2])]);
  });

  it('one segment per decision: the ready batch with the earliest deadline; a held service\u2019s wake comes along', () => {
    const plain = query('n', 'T1', 'b', { arrivalMs: 0, qosTargetMs: 200 }); // ready, deadline 200
    const L4 = limits(4);
    const r = [0, 1, 2, 3].map((i) => bq(`r${i}`, 'T2', 'c', L4, { arrivalMs: 95, qosTargetMs: 50 + 10 * i })); // full; deadline min 145
    const LH = limits(8, 30);
    const held = bq('h', 'T3', 'a', LH, { arrivalMs: 95, qosTargetMs: 200 }); // holds until 125
    const c = triton();
    const d = c.decide(input(NOW, [[plain], [held], r]));
    expect(d).toEqual({ group: [seg(r[0]!, r.slice(1))], rejected: [], stats: NO_STATS, wakeAtMs: 125 });
    // the runtime hides T2 while its batch runs and asks again: T1 goes next
    expect(c.decide(input(NOW, [[plain], [held]])).group).toEqual([seg(plain)]);
    expect(c.decide(input(NOW, [[held]]))).toEqual({ group: [], rejected: [], stats: NO_STATS, wakeAtMs: 125 });
  });
});
