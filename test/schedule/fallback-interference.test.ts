/**
 * The interference trigger of the calibration fallback (`interference: true`;
 * `src/schedule/fallback.ts` "Interference", `src/device/neighbours.ts`): one query at a time
 * at the free core's count while the other processes leave about one core, at the fallback's
 * count while they contend for every core, with hysteresis, and every query answered once across
 * the switches. The neighbours are scripted; no wall clock.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { ProcNeighbours } from '../../src/device/neighbours.ts';
import type { CpuNeighbours } from '../../src/schedule/controller.ts';
import { ModelRepository } from '../../src/model/repository.ts';
import type { ModelSpec } from '../../src/model/spec.ts';
import type { Predictor } from '../../src/predict/predictor.ts';
import { simEnv } from '../../src/reproduce/colocation.ts';
import { runExperiment, type ExperimentService } from '../../src/runtime/experiment.ts';
import { createController } from '../../src/schedule/index.ts';
import { CROWD_ENTER_CORES, CROWD_EXIT_CORES } from '../../src/schedule/fallback.ts';
import { FakePredictor } from './fake-predictor.ts';
import { measuredTablePredictor } from '../helpers/sim-table-predictor.ts';
import { query } from './query.ts';

/** Neighbours that want `want` cores of `cores` (set it between decisions). */
class Scripted implements CpuNeighbours {
  want: number | undefined = 0;
  asked = 0;
  constructor(readonly cores: number) {}
  demandCores(): number | undefined {
    this.asked++;
    return this.want;
  }
}

const two = (): ReturnType<typeof query>[][] => [[query('a1', 'S1', 'a', { arrivalMs: 0, qosTargetMs: 1000 })], [query('b1', 'S2', 'b', { arrivalMs: 1, qosTargetMs: 1000 })]];

describe('the interference trigger', () => {
  it('needs the fallback and the neighbours; off by default, so no neighbour is ever asked', () => {
    expect(() => createController('abacus', { interference: true }, new FakePredictor())).toThrow(/'interference'.*needs 'fallback: true'/);
    expect(() => createController('abacus', { fallback: true, interference: true }, new FakePredictor())).toThrow(/'interference' needs what the other processes want/);
    const n = new Scripted(2);
    n.want = 1;
    const c = createController('abacus', { fallback: true }, new FakePredictor(), { neighbours: n });
    expect(c.decide({ nowMs: 0, queues: two(), runningRemainingMs: 0 }).fallback).toBeUndefined();
    expect(n.asked).toBe(0);
  });

  it('one query at a time, at one thread, while neighbours leave about one of two cores; with hysteresis both ways', () => {
    const n = new Scripted(2);
    const c = createController('abacus', { fallback: true, interference: true, threads: 'split:2' }, new FakePredictor(), { neighbours: n });
    const decide = (): ReturnType<typeof c.decide> => c.decide({ nowMs: 0, queues: two(), runningRemainingMs: 0 });
    // quiet: abacus overlaps the two, one thread each under split:2
    n.want = 0.1;
    expect(decide().group).toHaveLength(2);
    expect(c.fallback).toMatchObject({ active: false, crowded: false, neighbourCores: 0.1, entries: 0 });
    // between the thresholds, from overlap: stays
    n.want = (CROWD_ENTER_CORES + CROWD_EXIT_CORES) / 2;
    expect(decide().group).toHaveLength(2);
    // one busy neighbour: the earliest arrival alone, at the one free core's count (the rule would give it 2)
    n.want = 1;
    const d = decide();
    expect(d.fallback).toBe(true);
    expect(d.group).toEqual([{ queryId: 'a1', service: 'S1', start: 0, end: 10, intraOpThreads: 1 }]);
    expect(c.fallback).toMatchObject({ active: true, crowded: true, entries: 1 });
    // between the thresholds, from the fallback: stays
    n.want = (CROWD_ENTER_CORES + CROWD_EXIT_CORES) / 2;
    expect(decide().fallback).toBe(true);
    // gone: overlap again
    n.want = 0.1;
    expect(decide().group).toHaveLength(2);
    expect(c.fallback).toMatchObject({ active: false, crowded: false });
  });

  it('held by the neighbours, a shape not yet measured is judged on the predictor, as fcfs judges it (the predictions fallback never drops on a prediction)', () => {
    const n = new Scripted(2);
    n.want = 1;
    const crowded = createController('abacus', { fallback: true, interference: true, threads: 'split:2' }, new FakePredictor(), { neighbours: n });
    // a whole `a` is 10 ms by the fake predictor; nothing of it has run yet
    const tight = crowded.decide({ nowMs: 100, queues: [[query('tight', 'S1', 'a', { arrivalMs: 92, qosTargetMs: 16 })]], runningRemainingMs: 0 });
    expect(tight.rejected).toEqual([expect.objectContaining({ queryId: 'tight', predictedMs: 10 })]);
    const fits = crowded.decide({ nowMs: 100, queues: [[query('fits', 'S1', 'a', { arrivalMs: 92, qosTargetMs: 20 })]], runningRemainingMs: 0 });
    expect(fits.rejected).toEqual([]);
    expect(fits.group).toEqual([expect.objectContaining({ queryId: 'fits', intraOpThreads: 1 })]);
    expect(crowded.fallback).toMatchObject({ crowded: true });
  });

  it('crowded, drops judge the median of the measured runs at the crowded count, not at the thread rule\'s', () => {
    const n = new Scripted(2);
    n.want = 1;
    const c = createController('abacus', { fallback: true, interference: true, threads: 'split:2' }, new FakePredictor(), { neighbours: n });
    // three solo runs of model a at one thread (the crowded count): 30, 40 and 100 ms
    for (const [i, ms] of [30, 40, 100].entries()) {
      const d = c.decide({ nowMs: i * 1000, queues: [[query(`m${i}`, 'S1', 'a', { arrivalMs: i * 1000, qosTargetMs: 1000 })]], runningRemainingMs: 0 });
      expect(d.group).toEqual([expect.objectContaining({ queryId: `m${i}`, intraOpThreads: 1 })]);
      c.observe({ segments: [{ queryId: `m${i}`, service: 'S1', model: 'a', start: 0, end: 10, operators: 10, batch: 1, seqLen: 0, latencyMs: ms, intraOpThreads: 1 }], groupLatencyMs: ms, predictedMs: d.predictedMs! });
    }
    // headroom 35 ms: the median run (40 ms) would not finish it, the fastest (30 ms) would
    const d = c.decide({ nowMs: 10_000, queues: [[query('late', 'S1', 'a', { arrivalMs: 9_965, qosTargetMs: 70 })]], runningRemainingMs: 0 });
    expect(d.rejected).toEqual([expect.objectContaining({ queryId: 'late', predictedMs: 40 })]);
    // one with 45 ms left runs, decided with the median
    const ok = c.decide({ nowMs: 10_000, queues: [[query('ok', 'S1', 'a', { arrivalMs: 9_975, qosTargetMs: 70 })]], runningRemainingMs: 0 });
    expect(ok.group).toEqual([expect.objectContaining({ queryId: 'ok', intraOpThreads: 1 })]);
    expect(ok.predictedMs).toBe(40);
  });

  it('when the neighbours contend for every core: one query at a time at the rule\'s count for a lone query (not one thread), with hysteresis; nothing when /proc says nothing', () => {
    const n = new Scripted(2);
    const c = createController('abacus', { fallback: true, interference: true, threads: 'split:2' }, new FakePredictor(), { neighbours: n });
    const decide = (): ReturnType<typeof c.decide> => c.decide({ nowMs: 0, queues: two(), runningRemainingMs: 0 });
    n.want = undefined;
    expect(decide().group).toHaveLength(2);
    expect(c.fallback).toMatchObject({ active: false, crowded: false, contended: false });
    // from overlap, free cores between the two thresholds: neither crowded nor contended
    n.want = 2 - (CROWD_ENTER_CORES + CROWD_EXIT_CORES) / 2;
    expect(decide().group).toHaveLength(2);
    expect(c.fallback).toMatchObject({ active: false, crowded: false, contended: false });
    // every core wanted (free < CROWD_EXIT_CORES): the earliest arrival alone on both cores
    for (const want of [2 - CROWD_EXIT_CORES + 0.01, 4]) {
      n.want = want;
      expect(decide().group, String(want)).toEqual([{ queryId: 'a1', service: 'S1', start: 0, end: 10, intraOpThreads: 2 }]);
      expect(c.fallback).toMatchObject({ active: true, crowded: false, contended: true, entries: 1 });
    }
    // a little room again (free between the thresholds): still contended
    n.want = 2 - (CROWD_ENTER_CORES + CROWD_EXIT_CORES) / 2;
    expect(decide().group).toHaveLength(1);
    expect(c.fallback).toMatchObject({ contended: true });
    // about one core free: crowded, one thread, the same episode (no new entry)
    n.want = 1;
    expect(decide().group).toEqual([expect.objectContaining({ queryId: 'a1', intraOpThreads: 1 })]);
    expect(c.fallback).toMatchObject({ active: true, crowded: true, contended: false, entries: 1 });
    // and back to every core contended, then quiet: overlap
    n.want = 3;
    expect(decide().group).toEqual([expect.objectContaining({ intraOpThreads: 2 })]);
    n.want = 0.1;
    expect(decide().group).toHaveLength(2);
    expect(c.fallback).toMatchObject({ active: false, crowded: false, contended: false, entries: 1 });
  });

  it('on more cores, only where about one is left: 16 cores, 15 wanted', () => {
    const n = new Scripted(16);
    const c = createController('abacus', { fallback: true, interference: true }, new FakePredictor(), { neighbours: n });
    n.want = 8;
    expect(c.decide({ nowMs: 0, queues: two(), runningRemainingMs: 0 }).group).toHaveLength(2);
    n.want = 15;
    expect(c.decide({ nowMs: 0, queues: two(), runningRemainingMs: 0 }).group).toEqual([expect.objectContaining({ queryId: 'a1', intraOpThreads: 1 })]);
  });
});

describe('ProcNeighbours', () => {
  it('runnable threads machine-wide minus ours, averaged; undefined without /proc/stat', () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'abacus-proc-'));
    try {
      const task = (pid: number, tid: number, state: string): void => {
        fs.mkdirSync(path.join(root, String(pid), 'task', String(tid)), { recursive: true });
        fs.writeFileSync(path.join(root, String(pid), 'task', String(tid), 'stat'), `${tid} (node (x) y) ${state} 1 2 3`);
      };
      // this process: two threads, one runnable; an executor (pid 999999): one runnable
      task(process.pid, 1, 'R');
      task(process.pid, 2, 'S');
      task(999_999, 3, 'R');
      fs.writeFileSync(path.join(root, 'stat'), 'cpu  1 2 3\nprocs_running 5\nprocs_blocked 0\n');
      const n = new ProcNeighbours(() => [999_999], { root, cores: 2 });
      expect(n.cores).toBe(2);
      expect(n.demandCores(0)).toBe(3); // 5 runnable, 2 of them ours
      fs.writeFileSync(path.join(root, 'stat'), 'procs_running 2\n');
      expect(n.demandCores(10)).toBe(3); // within the sampling period: the last average
      expect(n.demandCores(1000)).toBeCloseTo(3 * 0.5, 6); // one half-life after the first sample: halfway to 0
      expect(new ProcNeighbours(() => [], { root: path.join(root, 'none') }).demandCores(0)).toBeUndefined();
    } finally {
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});

describe('the interference trigger in a run (sim:a100, virtual time)', () => {
  const specs = new Map<string, ModelSpec>();
  let predictor: Predictor;
  beforeAll(async () => {
    const repo = new ModelRepository();
    for (const name of ['resnet50', 'bert'] as const) specs.set(name, await repo.zooSpec(name));
    predictor = await measuredTablePredictor(specs, [{ model: 'resnet50', batch: 1, seqLen: 0 }, { model: 'bert', batch: 1, seqLen: 32 }]);
  });

  it('neighbours coming and going every 200 decisions: one at a time while they stay, every query answered once', async () => {
    const services: ExperimentService[] = ['resnet50', 'bert'].map((name) => ({ name, spec: specs.get(name)!, qosTargetMs: 50, maxQueueLength: 10_000, batchSizes: [1], ...(name === 'bert' ? { seqLens: [32] } : {}) }));
    const n = new Scripted(2);
    const neighbours: CpuNeighbours = { cores: 2, demandCores: () => (n.asked++ % 400 < 200 ? 0 : 1) };
    const r = await runExperiment(simEnv('sim:a100', services, predictor, 3), { services, policy: 'abacus', policyParams: { fallback: true, interference: true }, neighbours, rateQps: 150, queries: 2000, seed: 3, keepRecords: true });
    const qs = r.records!.queries;
    expect(qs.length).toBe(2000);
    expect(new Set(qs.map((q) => q.id)).size).toBe(2000);
    for (const q of qs) expect(q.outcome, q.id).toBeDefined();
    const groups = r.records!.groups;
    const crowded = groups.filter((g) => g.fallback);
    // both modes ran, and a group decided one at a time never overlapped
    expect(crowded.length).toBeGreaterThan(0);
    expect(crowded.length).toBeLessThan(groups.length);
    for (const g of crowded) expect(g.segments.length).toBe(1);
    expect(groups.some((g) => !g.fallback && g.segments.length > 1)).toBe(true);
  });
});
