/**
 * The calibration fallback of abacus without the group barrier (`barrier: false, fallback: true`;
 * `src/schedule/fallback.ts`, "Without the barrier"): one query at a time means nothing beside
 * it, held queries are judged but never launched, the streams' alone correction learns from the
 * fallback's launches; and on a `sim:` device with a drift step, in virtual time.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { withDeviceDefaults } from '../../src/deployment/policy-defaults.ts';
import { ModelRepository } from '../../src/model/repository.ts';
import type { ModelSpec } from '../../src/model/spec.ts';
import type { Predictor } from '../../src/predict/predictor.ts';
import type { GroupObservation, QueryController, RunningSegment, ScheduleInput, WaitingQuery } from '../../src/schedule/controller.ts';
import { FallbackController, MAX_MEASURED_DROPS, WINDOW_GROUPS } from '../../src/schedule/fallback.ts';
import { nextInstantAfter } from '../../src/clock/instant.ts';
import { createController } from '../../src/schedule/index.ts';
import { FakePredictor } from './fake-predictor.ts';
import { driftRun } from './drift-run.ts';
import { measuredTablePredictor } from '../helpers/sim-table-predictor.ts';
import { query } from './query.ts';

/** A launch of one whole query of model `a` (10 ms by the fake predictor) measured `ms`, decided with `predictedMs`. */
function launchOf(id: string, service: string, ms: number, predictedMs: number | undefined): GroupObservation {
  return { segments: [{ queryId: id, service, model: 'a', start: 0, end: 10, operators: 10, batch: 1, seqLen: 0, latencyMs: ms }], groupLatencyMs: ms, ...(predictedMs === undefined ? {} : { predictedMs }) };
}

function streamInput(nowMs: number, queues: WaitingQuery[][], held: WaitingQuery[][] = [], running: RunningSegment[] = []): ScheduleInput {
  return { nowMs, queues, runningRemainingMs: 0, held, running };
}

/** A whole segment of service S2 (model b) launched at `launchMs`, decided with `predictedMs`. */
function runningOf(launchMs: number, predictedMs: number): RunningSegment {
  return { queryId: 'r', service: 'S2', model: 'b', operators: 10, start: 0, end: 10, batch: 1, seqLen: 0, launchMs, predictedMs, deadlineMs: launchMs + 1000 };
}

/** A stream controller with the fallback, driven into it: every launch the streams decide runs 3 × its decided latency. */
function inFallback(params: Record<string, unknown> = {}): QueryController {
  const c = createController('abacus', { barrier: false, fallback: true, ...params }, new FakePredictor());
  for (let i = 0; i < 4 * WINDOW_GROUPS && c.fallback?.active !== true; i++) {
    const d = c.decide(streamInput(i * 100, [[query(`w${i}`, 'S1', 'a', { arrivalMs: i * 100, qosTargetMs: 1000 })]]));
    expect(d.group.length).toBe(1);
    c.observe(launchOf(`w${i}`, 'S1', 3 * d.predictedMs!, d.predictedMs));
  }
  expect(c.fallback?.active).toBe(true);
  return c;
}

describe('the fallback without the group barrier', () => {
  it('builds with barrier: false (streams, one per service); refine still needs the barrier; a fixed thread count reaches every launch', () => {
    const c = createController('abacus', { barrier: false, fallback: true }, new FakePredictor());
    expect(c.launchWhileBusy).toBe(true);
    expect(c.oneGroupPerService).toBe(true);
    expect(c.fallback).toMatchObject({ active: false, entries: 0 });
    expect(() => createController('abacus', { barrier: false, refine: true }, new FakePredictor())).toThrow(/'refine' needs the group barrier/);
    const fixed = createController('abacus', { barrier: false, fallback: true, threads: 'fixed:1' }, new FakePredictor());
    const d = fixed.decide(streamInput(0, [[query('x', 'S1', 'a', { arrivalMs: 0, qosTargetMs: 100 })]]));
    expect(d.group).toEqual([expect.objectContaining({ queryId: 'x', intraOpThreads: 1 })]);
    // overlap-all has no stream per service: the fallback cannot tell what runs
    expect(() => new FallbackController(createController('overlap-all', {}), new FakePredictor())).toThrow(/no stream per service/);
  });

  it('on a real device abacus without the barrier gets the fallback by default, not refinement', () => {
    expect(withDeviceDefaults('abacus', { barrier: false }, false)).toEqual({ fallback: true, barrier: false });
    expect(withDeviceDefaults('abacus', { barrier: false, fallback: false }, false)).toEqual({ fallback: false, barrier: false });
    expect(withDeviceDefaults('abacus', { barrier: false }, true)).toEqual({ barrier: false });
  });

  it('switches on overrunning launches, then launches nothing while a segment runs and the earliest arrival alone once none does', () => {
    const c = inFallback({ threads: 'fixed:2' });
    const early = query('early', 'S2', 'b', { arrivalMs: 0, qosTargetMs: 1000 });
    const late = query('late', 'S1', 'a', { arrivalMs: 5, qosTargetMs: 1000 });
    // S2's segment runs: its waiting query is held; S1 is free but must wait too
    const busy = c.decide(streamInput(10, [[late]], [[early]], [runningOf(8, 10)]));
    expect(busy.fallback).toBe(true);
    expect(busy.group).toEqual([]);
    expect(busy.rejected).toEqual([]);
    // nothing runs: the earliest arrival, whole, with the rule's count for one segment
    const idle = c.decide(streamInput(20, [[late], [early]]));
    expect(idle.group).toEqual([{ queryId: 'early', service: 'S2', start: 0, end: 10, intraOpThreads: 2 }]);
  });

  it('fallbackThreads gives a fallback launch its own count while the streams keep the rule\'s; it needs the fallback', () => {
    const c = inFallback({ threads: 'fixed:1', fallbackThreads: 2 });
    const d = c.decide(streamInput(1e6, [[query('solo', 'S1', 'a', { arrivalMs: 1e6, qosTargetMs: 1000 })]]));
    expect(d.fallback).toBe(true);
    expect(d.group).toEqual([{ queryId: 'solo', service: 'S1', start: 0, end: 10, intraOpThreads: 2 }]);
    const streams = createController('abacus', { barrier: false, fallback: true, threads: 'fixed:1', fallbackThreads: 2 }, new FakePredictor());
    expect(streams.decide(streamInput(0, [[query('x', 'S1', 'a', { arrivalMs: 0, qosTargetMs: 100 })]])).group).toEqual([expect.objectContaining({ queryId: 'x', intraOpThreads: 1 })]);
    expect(() => createController('abacus', { barrier: false, threads: 'fixed:1', fallbackThreads: 2 }, new FakePredictor())).toThrow(/'fallbackThreads'.*needs 'fallback: true'/);
    expect(() => createController('abacus', { fallback: true, fallbackThreads: -1 }, new FakePredictor())).toThrow(/fallbackThreads' must be an integer in \[0, 1024\]/);
  });

  it('judges held queries on measured evidence: one that a fast measured run after the running segment cannot finish is rejected', () => {
    const c = inFallback();
    // three measured alone runs of S2's model-a shape at 10 ms (the fallback's own launches)
    for (let i = 0; i < 3; i++) {
      const d = c.decide(streamInput(10_000 + i * 100, [[query(`m${i}`, 'S2', 'a', { arrivalMs: 10_000 + i * 100, qosTargetMs: 1000 })]]));
      expect(d.group.map((s) => s.queryId)).toEqual([`m${i}`]);
      c.observe(launchOf(`m${i}`, 'S2', 10, d.predictedMs));
    }
    const tight = query('tight', 'S2', 'a', { arrivalMs: 20_000, qosTargetMs: 15 });
    const roomy = query('roomy', 'S2', 'a', { arrivalMs: 20_000, qosTargetMs: 40 });
    // S2 runs until 20,010 as decided: 10 ms + a 10 ms run > the 15 ms target; 20 ms < 40 ms
    expect(c.decide(streamInput(20_000, [], [[tight]], [runningOf(20_000, 10)])).rejected.map((r) => r.queryId)).toEqual(['tight']);
    const kept = c.decide(streamInput(20_000, [], [[roomy]], [runningOf(20_000, 10)]));
    expect(kept.rejected).toEqual([]);
    expect(kept.group).toEqual([]);
    expect(kept.wakeAtMs).toBeGreaterThan(20_000); // woken when it becomes hopeless
  });

  it('a shape kept after MAX_MEASURED_DROPS measured drops is woken when its headroom is gone, not one instant later each time', () => {
    const c = inFallback();
    for (let i = 0; i < 3; i++) {
      const d = c.decide(streamInput(10_000 + i * 100, [[query(`m${i}`, 'S1', 'a', { arrivalMs: 10_000 + i * 100, qosTargetMs: 1000 })]]));
      c.observe(launchOf(`m${i}`, 'S1', 10, d.predictedMs));
    }
    // 8 queries a fast 10 ms run cannot finish, dropped on the measurement and carried out
    for (let i = 0; i < MAX_MEASURED_DROPS; i++) {
      const d = c.decide(streamInput(20_000, [[query(`d${i}`, 'S1', 'a', { arrivalMs: 20_000, qosTargetMs: 5 })]]));
      expect(d.rejected.map((r) => r.queryId)).toEqual([`d${i}`]);
      c.rejected?.(d.rejected);
    }
    // the next one is kept (so the shape is measured again), waiting while S2 runs
    const k = query('k', 'S1', 'a', { arrivalMs: 21_000, qosTargetMs: 5 });
    const d = c.decide(streamInput(21_000, [[k]], [], [runningOf(20_999, 10)]));
    expect(d.rejected).toEqual([]);
    expect(d.group).toEqual([]);
    // its wake is its deadline (nothing measured may drop it now), and at the wake it is rejected
    expect(d.wakeAtMs).toBe(nextInstantAfter(21_005));
    const atWake = c.decide(streamInput(d.wakeAtMs!, [[k]], [], [runningOf(20_999, 10)]));
    expect(atWake.rejected.map((r) => r.queryId)).toEqual(['k']);
  });

  it('a launch that ran beside others is not a measured solo run: it can never justify a drop', () => {
    // driven into the fallback by the streams' launches of S1's shape, measured at 30 ms each
    const c = inFallback();
    // a query that a 30 ms run could not finish is kept and launched: no solo run of its shape was measured
    const q = query('q', 'S1', 'a', { arrivalMs: 30_000, qosTargetMs: 11 });
    const d = c.decide(streamInput(30_000, [[q]]));
    expect(d.rejected).toEqual([]);
    expect(d.group.map((s) => s.queryId)).toEqual(['q']);
  });
});

describe('the fallback without the barrier on a drifted simulator (virtual time)', () => {
  const specs = new Map<string, ModelSpec>();
  let predictor: Predictor;
  beforeAll(async () => {
    const repo = new ModelRepository();
    for (const name of ['resnet50', 'bert'] as const) specs.set(name, await repo.zooSpec(name));
    const shapes = [1, 2, 4].flatMap((batch) => [{ model: 'resnet50', batch, seqLen: 0 }, ...[16, 32].map((seqLen) => ({ model: 'bert', batch, seqLen }))]);
    predictor = await measuredTablePredictor(specs, shapes);
  });

  it('×2 at 20 s: switches within a window of launches after the step, overlaps again after it, answers every query once', async () => {
    const { r, groups, firstAfter } = await driftRun(specs, predictor, { barrier: false, fallback: true });
    expect(groups.slice(0, firstAfter).some((g) => g.fallback === true)).toBe(false);
    const entered = groups.findIndex((g, i) => i >= firstAfter && g.fallback === true);
    expect(entered).toBeGreaterThan(firstAfter);
    expect(entered - firstAfter).toBeLessThanOrEqual(WINDOW_GROUPS + 2);
    // fallback launches never overlap anything: each starts after every earlier launch ended
    let endMs = 0;
    for (const g of groups) {
      if (g.fallback === true) expect(g.launchMs, `group ${g.index}`).toBeGreaterThanOrEqual(endMs - 1e-9);
      endMs = Math.max(endMs, g.launchMs + g.measuredMs);
    }
    // and back to the streams, which overlap again
    const left = groups.findIndex((g, i) => i > entered && g.fallback !== true);
    expect(left).toBeGreaterThan(entered);
    const after = groups.slice(left).filter((g) => g.fallback !== true);
    expect(after.some((g, i) => i > 0 && g.launchMs < after[i - 1]!.launchMs + after[i - 1]!.measuredMs)).toBe(true);
    expect(r.fallbackShare).toBeGreaterThan(0);
    expect(r.fallbackShare).toBeLessThan(0.5);
    // without the step the predictions hold: never in the fallback
    expect((await driftRun(specs, predictor, { barrier: false, fallback: true }, 'sim:a100')).r.fallbackShare).toBe(0);
  }, 60_000);
});
