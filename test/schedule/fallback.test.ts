/**
 * abacus's calibration fallback (`src/schedule/fallback.ts`): the switch on measured overruns,
 * the way back when the predictor predicts what runs, no flapping, measured drops; and on a
 * `sim:` device with a drift step, in virtual time (no wall clock anywhere).
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { ModelRepository } from '../../src/model/repository.ts';
import type { ModelSpec } from '../../src/model/spec.ts';
import type { Decision, GroupObservation, QueryController, ScheduleInput } from '../../src/schedule/controller.ts';
import { AT_RISK_QUANTILE, ENTER_SHARE, EXIT_SHARE, FallbackController, MAX_DWELL_GROUPS, MAX_MEASURED_DROPS, MIN_DWELL_GROUPS, MIN_MEASURED, WINDOW_GROUPS } from '../../src/schedule/fallback.ts';
import { createController } from '../../src/schedule/index.ts';
import { withDeviceDefaults } from '../../src/deployment/policy-defaults.ts';
import { ServeMetrics } from '../../src/serve/metrics.ts';
import { crudeSimPredictor, FakePredictor } from './fake-predictor.ts';
import { driftRun } from './drift-run.ts';
import { input, query } from './query.ts';

/** A whole query of model `a` (10 ms by the fake predictor) run alone, measured `ms`, decided with `predictedMs`. */
function solo(id: string, ms: number, predictedMs = 10): GroupObservation {
  return { segments: [{ queryId: id, service: 'S1', model: 'a', start: 0, end: 10, operators: 10, batch: 1, seqLen: 0, latencyMs: ms }], groupLatencyMs: ms, predictedMs };
}

/** Decide for one waiting query of `a` (so the fallback remembers its prediction) and observe it measured `ms`. */
function runOne(c: QueryController, id: string, ms: number): void {
  const d = c.decide(input(0, [[query(id, 'S1', 'a', { arrivalMs: 0, qosTargetMs: 1000 })]]));
  c.observe(solo(id, ms, d.predictedMs));
}

const active = (c: QueryController): boolean => c.fallback?.active === true;

/** Decide and carry the decision out as the runtime does: its rejections told back (`QueryController.rejected`). */
function carriedOut(c: QueryController, inp: ScheduleInput): Decision {
  const d = c.decide(inp);
  if (d.rejected.length > 0) c.rejected?.(d.rejected);
  return d;
}

describe('FallbackController: the switch', () => {
  it('is off by default and absent without the parameter; the paper controller decides', () => {
    expect(createController('abacus', {}, new FakePredictor()).fallback).toBeUndefined();
    const c = createController('abacus', { fallback: true }, new FakePredictor());
    expect(c.fallback).toMatchObject({ active: false, entries: 0 });
    const d = c.decide(input(0, [[query('x', 'S1', 'a', { arrivalMs: 0, qosTargetMs: 100 })], [query('y', 'S2', 'b', { arrivalMs: 0, qosTargetMs: 100 })]]));
    expect(d.fallback).toBeUndefined();
    expect(d.group.length).toBe(2); // abacus overlaps
  });

  it('predictions that hold never switch; a step that makes every group overrun switches after ⌊ENTER_SHARE × window⌋ + 1 groups', () => {
    const c = createController('abacus', { fallback: true }, new FakePredictor());
    for (let i = 0; i < 200; i++) c.observe(solo(`ok${i}`, i % 2 === 0 ? 12 : 8)); // ±20 %: within the tolerance
    expect(active(c)).toBe(false);
    const needed = Math.floor(ENTER_SHARE * WINDOW_GROUPS) + 1;
    for (let i = 1; i <= needed; i++) {
      expect(active(c), `after ${i - 1} overruns`).toBe(false);
      c.observe(solo(`slow${i}`, 15)); // 1.5 × the decided 10 ms
    }
    expect(active(c)).toBe(true);
    expect(c.fallback).toMatchObject({ entries: 1 });
  });

  it('tells of a switch with the overrun share that decided it (the log line of abacus serve), not the restarted window', () => {
    const switches: { active: boolean; overrunShare: number }[] = [];
    const c = new FallbackController(createController('abacus', {}, new FakePredictor()), new FakePredictor(), { onSwitch: (active, s) => switches.push({ active, overrunShare: s.overrunShare }) });
    for (let i = 0; i < WINDOW_GROUPS; i++) c.observe(solo(`ok${i}`, 10));
    for (let i = 0; i < WINDOW_GROUPS && switches.length === 0; i++) c.observe(solo(`slow${i}`, 15));
    expect(switches).toEqual([{ active: true, overrunShare: (Math.floor(ENTER_SHARE * WINDOW_GROUPS) + 1) / WINDOW_GROUPS }]);
    expect(c.fallback.overrunShare).toBe(0); // the window restarts in the new mode
  });

  it('a predictor that calls every query hopeless switches it too (nothing runs, so no group can overrun); then the query is kept, as nothing measured says it is hopeless', () => {
    const c = createController('abacus', { fallback: true }, new FakePredictor());
    // whole `a` is predicted 10 ms; a 5 ms target is hopeless by the prediction
    const tight = (id: string) => input(0, [[query(id, 'S1', 'a', { arrivalMs: 0, qosTargetMs: 5 })]]);
    for (let i = 0; i < WINDOW_GROUPS; i++) {
      expect(active(c)).toBe(false);
      expect(carriedOut(c, tight(`t${i}`)).rejected.map((r) => r.queryId)).toEqual([`t${i}`]);
    }
    expect(active(c)).toBe(true);
    const d = c.decide(tight('kept'));
    expect(d.rejected).toEqual([]);
    expect(d.group.map((g) => g.queryId)).toEqual(['kept']);
  });

  it('comes back after the dwell once the predictor predicts what runs, and a quick re-entry doubles the dwell (bounded): no flapping', () => {
    const c = createController('abacus', { fallback: true }, new FakePredictor());
    const enter = (): number => {
      let n = 0;
      while (!active(c)) {
        c.observe(solo(`s${n}`, 15));
        n++;
      }
      return n;
    };
    enter();
    // in the fallback, the predictor still 1.5× off: it stays
    for (let i = 0; i < 3 * MIN_DWELL_GROUPS; i++) runOne(c, `f${i}`, 15);
    expect(active(c)).toBe(true);
    // the predictor holds again: back after ≥ the dwell and a window of good groups
    let back = 0;
    while (active(c)) {
      runOne(c, `g${back}`, 10);
      back++;
      expect(back).toBeLessThanOrEqual(MIN_DWELL_GROUPS + WINDOW_GROUPS);
    }
    expect(back).toBeGreaterThanOrEqual(Math.ceil((1 - EXIT_SHARE) * WINDOW_GROUPS));
    // overlap fails again at once: re-entry doubles the dwell, up to the cap
    const dwells: number[] = [];
    for (let k = 0; k < 8; k++) {
      enter();
      dwells.push(c.fallback!.dwellGroups);
      let stay = 0;
      while (active(c)) {
        runOne(c, `h${k}-${stay}`, 10);
        stay++;
      }
      expect(stay).toBeGreaterThanOrEqual(c.fallback!.dwellGroups);
    }
    expect(dwells).toEqual([2, 4, 8, 16, 16, 16, 16, 16].map((x) => Math.min(MAX_DWELL_GROUPS, x * MIN_DWELL_GROUPS)));
  });
});

describe('FallbackController: one query at a time, dropping on measured latencies', () => {
  /** A controller in the fallback whose measured latency of a whole `a` is `ms`. */
  const fallen = (ms: number): QueryController => {
    const c = createController('abacus', { fallback: true }, new FakePredictor());
    for (let i = 0; i < WINDOW_GROUPS; i++) c.observe(solo(`s${i}`, ms, ms / 2));
    expect(active(c)).toBe(true);
    for (let i = 0; i < MIN_MEASURED; i++) c.observe(solo(`m${i}`, ms, ms));
    return c;
  };

  it('launches the head that arrived first alone, whole (ties: the earlier deadline); never more than one segment', () => {
    const c = fallen(10);
    const d = c.decide(input(5, [[query('x', 'S1', 'a', { arrivalMs: 0, qosTargetMs: 100 })], [query('y', 'S2', 'b', { arrivalMs: 0, qosTargetMs: 60 })], [query('z', 'S3', 'c', { arrivalMs: 1, qosTargetMs: 20 })]]));
    expect(d.fallback).toBe(true);
    expect(d.group).toEqual([{ queryId: 'y', service: 'S2', start: 0, end: 10 }]);
    expect(d.rejected).toEqual([]);
  });

  it('drops on the measured latency, not the predicted: a query the predictor thinks fits but measurements say cannot is rejected, and the reverse is kept', () => {
    // measured 30 ms for a whole `a`; the fake predictor says 10 ms
    const c = fallen(30);
    const d = c.decide(input(0, [[query('x', 'S1', 'a', { arrivalMs: 0, qosTargetMs: 25 })]]));
    expect(d.rejected).toMatchObject([{ queryId: 'x', reason: 'qos_violation', predictedMs: 30 }]);
    expect(d.group).toEqual([]);
    // a shape never measured alone (batch 2) is kept even though the predictor says it cannot make it
    const kept = c.decide(input(0, [[query('z', 'S1', 'a', { arrivalMs: 0, qosTargetMs: 15, batch: 2 })]]));
    expect(kept.rejected).toEqual([]);
    expect(kept.group.map((s) => s.queryId)).toEqual(['z']);
    expect(kept.predictedMs).toBe(20); // the predictor's, since nothing was measured
    // the running group's remainder counts; headroom ≤ 0 is always dropped
    const later = c.decide(input(100, [[query('w', 'S1', 'a', { arrivalMs: 90, qosTargetMs: 50 })], [query('v', 'S2', 'b', { arrivalMs: 0, qosTargetMs: 100 })]], 25));
    expect(later.rejected.map((r) => r.queryId).sort()).toEqual(['v', 'w']);
  });

  it('a shape is not dropped for good: after MAX_MEASURED_DROPS measured drops the next query of it is kept until it runs, and a new measurement resets the count', () => {
    const c = fallen(30);
    const tight = (id: string, nowMs = 0) => input(nowMs, [[query(id, 'S1', 'a', { arrivalMs: 0, qosTargetMs: 25 })]]);
    // decided without being carried out, a drop counts nothing: the same decision again
    expect(c.decide(tight('d0')).rejected.map((r) => r.queryId)).toEqual(['d0']);
    for (let i = 0; i < MAX_MEASURED_DROPS; i++) expect(carriedOut(c, tight(`d${i}`)).rejected.map((r) => r.queryId)).toEqual([`d${i}`]);
    const kept = carriedOut(c, tight('keep'));
    expect(kept.rejected).toEqual([]);
    expect(kept.group.map((g) => g.queryId)).toEqual(['keep']);
    // decided again before it ran (a decision made ahead): still kept
    expect(carriedOut(c, tight('keep', 1)).rejected).toEqual([]);
    c.observe(solo('keep', 30, 30)); // it ran: measured again
    expect(carriedOut(c, tight('next')).rejected.map((r) => r.queryId)).toEqual(['next']);
  });

  it('passes over a head only a fast run would finish for the first safe query behind it, which stays woken on time; takes the head when nothing safe is in reach', () => {
    const c = createController('abacus', { fallback: true }, new FakePredictor());
    for (let i = 0; i < WINDOW_GROUPS; i++) c.observe(solo(`s${i}`, 20, 10));
    expect(active(c)).toBe(true);
    // the last 16 whole runs of `a`: 14 at 10 ms, 2 at 30 ms — fast (0.1 quantile) 10 ms, slow (AT_RISK_QUANTILE 0.9) 30 ms
    for (let i = 0; i < 16; i++) c.observe(solo(`m${i}`, i < 2 ? 30 : 10, 10));
    expect(AT_RISK_QUANTILE).toBe(0.9);
    const a = (id: string, arrivalMs: number, service = 'S1', model = 'a') => query(id, service, model, { arrivalMs, qosTargetMs: 40 });
    // at 100: head h has 20 ms left (a fast run fits, a slow one does not); n behind it has 35 (even a slow one fits)
    const d = c.decide(input(100, [[a('h', 80), a('m', 85), a('n', 95)]]));
    expect(d.group).toEqual([{ queryId: 'n', service: 'S1', start: 0, end: 10 }]);
    expect(d.rejected).toEqual([]);
    expect(d.wakeAtMs).toBeGreaterThan(110); // h: deadline 120 − fast 10, the first instant after it
    expect(d.wakeAtMs).toBeLessThan(110.001);
    // nothing safe within reach (m has 25 ms): the head, as fcfs
    expect(c.decide(input(100, [[a('h', 80), a('m', 85)]])).group.map((g) => g.queryId)).toEqual(['h']);
    // the same with the running group's remainder: 10 ms more leaves n at risk too
    expect(c.decide(input(100, [[a('h', 80), a('n', 95)]], 10)).group.map((g) => g.queryId)).toEqual(['h']);
    // across queues a safe head goes before an at-risk one that arrived first; a shape never measured counts as safe
    expect(c.decide(input(100, [[a('h', 80)], [a('k', 90, 'S2')]])).group.map((g) => g.queryId)).toEqual(['k']);
    expect(c.decide(input(100, [[a('u', 70, 'S3', 'b')], [a('k', 90, 'S2')]])).group.map((g) => g.queryId)).toEqual(['u']);
    // the queries between the head and the safe one are passed over too: rejected now when the drop rule says so, else woken
    const between = c.decide(input(100, [[a('h', 80), query('gone', 'S1', 'a', { arrivalMs: 82, qosTargetMs: 25 }), query('soon', 'S1', 'a', { arrivalMs: 84, qosTargetMs: 30 }), a('n', 95)]]));
    expect(between.group.map((g) => g.queryId)).toEqual(['n']);
    expect(between.rejected).toEqual([expect.objectContaining({ queryId: 'gone', predictedMs: 10 })]); // 7 ms left, a fast run takes 10
    expect(between.wakeAtMs).toBeGreaterThan(104); // soon (14 ms left): deadline 114 − fast 10, before h's 110
    expect(between.wakeAtMs).toBeLessThan(104.001);
    // new runs count at once (the sorted runs are not kept stale): 16 at 10 ms, and h is safe
    for (let i = 0; i < 16; i++) c.observe(solo(`r${i}`, 10, 10));
    expect(c.decide(input(100, [[a('h', 80), a('n', 95)]])).group.map((g) => g.queryId)).toEqual(['h']);
    // and with drop: false, arrival order alone
    const plain = createController('abacus', { fallback: true, drop: false }, new FakePredictor());
    for (let i = 0; i < WINDOW_GROUPS; i++) plain.observe(solo(`s${i}`, 20, 10));
    for (let i = 0; i < 16; i++) plain.observe(solo(`m${i}`, i < 2 ? 30 : 10, 10));
    expect(plain.decide(input(100, [[a('h', 80), a('n', 95)]])).group.map((g) => g.queryId)).toEqual(['h']);
  });

  it('with drop: false the fallback rejects nothing either', () => {
    const c = createController('abacus', { fallback: true, drop: false }, new FakePredictor());
    for (let i = 0; i < WINDOW_GROUPS; i++) c.observe(solo(`s${i}`, 30, 15));
    expect(active(c)).toBe(true);
    for (let i = 0; i < MIN_MEASURED; i++) c.observe(solo(`m${i}`, 30, 30));
    const d = c.decide(input(100, [[query('late', 'S1', 'a', { arrivalMs: 0, qosTargetMs: 25 })]]));
    expect(d.rejected).toEqual([]);
    expect(d.group.map((g) => g.queryId)).toEqual(['late']);
    expect(d.wakeAtMs).toBeUndefined();
  });

  it('wakes at the first instant after a waiting head becomes hopeless (never at or before now)', () => {
    const c = fallen(10);
    const d = c.decide(input(0, [[query('x', 'S1', 'a', { arrivalMs: 0, qosTargetMs: 100 })], [query('y', 'S2', 'a', { arrivalMs: 1, qosTargetMs: 50 })]]));
    expect(d.group.map((g) => g.queryId)).toEqual(['x']);
    expect(d.wakeAtMs).toBeGreaterThan(40); // y: deadline 51 − fast measured 10 = 41, the next instant after it
    expect(d.wakeAtMs).toBeLessThan(41.001);
  });

  it('with split:2 a fallback group gets both cores', () => {
    const c = createController('abacus', { fallback: true, threads: 'split:2' }, new FakePredictor());
    for (let i = 0; i < WINDOW_GROUPS; i++) c.observe(solo(`s${i}`, 30));
    expect(active(c)).toBe(true);
    const d = c.decide(input(0, [[query('x', 'S1', 'a', { arrivalMs: 0, qosTargetMs: 100 })], [query('y', 'S2', 'b', { arrivalMs: 0, qosTargetMs: 100 })]]));
    expect(d.group).toEqual([{ queryId: 'x', service: 'S1', start: 0, end: 10, intraOpThreads: 2 }]);
  });

  it('in overlap mode, with refinement, abacus drops only what a fast recent run would not finish', () => {
    const paper = createController('abacus', { refine: true }, new FakePredictor());
    const guarded = createController('abacus', { refine: true, fallback: true }, new FakePredictor());
    // whole `a`: base 10 ms, measured 12 and 8 in turn → refined 10 ms, measured ÷ refined 1.2 / 0.8 (no overrun of 25 %)
    for (let i = 0; i < 40; i++) for (const c of [paper, guarded]) c.observe(solo(`o${i}`, i % 2 === 0 ? 12 : 8, 10));
    expect(active(guarded)).toBe(false);
    const at = (qosTargetMs: number) => input(0, [[query('x', 'S1', 'a', { arrivalMs: 0, qosTargetMs })]]);
    expect(paper.decide(at(9)).rejected.map((r) => r.queryId)).toEqual(['x']); // 10 > 9
    expect(guarded.decide(at(9)).rejected).toEqual([]); // 0.8 × 10 ≤ 9: a fast run makes it
    const dropped = guarded.decide(at(7)).rejected;
    expect(dropped.map((r) => r.queryId)).toEqual(['x']);
    expect(dropped[0]!.predictedMs).toBeGreaterThan(7); // ≈ 0.8 × the refined ≈ 10 ms (the EWMA weighs the later observations more)
    expect(dropped[0]!.predictedMs).toBeLessThan(9);
  });

  it('needs one group at a time', () => {
    expect(() => new FallbackController(createController('overlap-all', {}), new FakePredictor())).toThrow(/launches while busy/);
  });
});

describe('the fallback on a drifted simulator (virtual time)', () => {
  const specs = new Map<string, ModelSpec>();
  beforeAll(async () => {
    const repo = new ModelRepository();
    for (const name of ['resnet50', 'bert'] as const) specs.set(name, await repo.zooSpec(name));
  });

  const crude = crudeSimPredictor;

  it('×2 at 20 s: switches within a window of groups after the step, returns to overlap once refined, answers every query once', async () => {
    const { r, groups, firstAfter } = await driftRun(specs, crude(), { refine: true, fallback: true });
    // in overlap just before the step
    expect(groups.slice(firstAfter - 20, firstAfter).some((g) => g.fallback === true)).toBe(false);
    // the switch: within a window of groups after the step (each group ends, then is observed; + the one decided ahead)
    const entered = groups.findIndex((g, i) => i >= firstAfter && g.fallback === true);
    expect(entered).toBeGreaterThan(firstAfter);
    expect(entered - firstAfter).toBeLessThanOrEqual(WINDOW_GROUPS + 2);
    // and back: overlapped groups again after it
    const left = groups.findIndex((g, i) => i > entered && g.fallback !== true);
    expect(left).toBeGreaterThan(entered);
    expect(groups.slice(left).some((g) => g.segments.length > 1)).toBe(true);
    expect(r.fallbackShare).toBeGreaterThan(0);
    expect(r.fallbackShare).toBeLessThan(0.5);
  }, 60_000);
});

describe('defaults on real devices; /metrics', () => {
  it('abacus on ort refines and keeps the fallback unless the config says otherwise; sim and other policies keep the paper defaults', () => {
    expect(withDeviceDefaults('abacus', {}, false)).toEqual({ refine: true, fallback: true });
    expect(withDeviceDefaults('abacus', { refine: false, ways: 4 }, false)).toEqual({ refine: false, fallback: true, ways: 4 });
    expect(withDeviceDefaults('abacus', {}, true)).toEqual({});
    expect(withDeviceDefaults('fcfs', { drop: false }, false)).toEqual({ drop: false });
  });

  it('abacus_fallback_active and abacus_fallback_entries_total follow the controller; no series without the fallback', async () => {
    const metrics = new ServeMetrics({ models: ['m'], processMetrics: false });
    const source: { c: QueryController | undefined } = { c: undefined };
    metrics.bind({ queueDepth: () => 0, ready: () => true, fallback: () => source.c?.fallback });
    expect(await metrics.registry.metrics()).not.toMatch(/abacus_fallback_(active|entries)\{/);
    const c = createController('abacus', { fallback: true }, new FakePredictor());
    source.c = c;
    expect(await metrics.registry.metrics()).toContain('abacus_fallback_active{policy="abacus"} 0');
    for (let i = 0; i < WINDOW_GROUPS; i++) c.observe(solo(`s${i}`, 30));
    const text = await metrics.registry.metrics();
    expect(text).toContain('abacus_fallback_active{policy="abacus"} 1');
    expect(text).toContain('abacus_fallback_entries_total{policy="abacus"} 1');
  });
});
