/**
 * Cores as a decision (docs/threads.md): the `threads` policy parameter, the thread counts a
 * controller gives each segment of a group, the counts its predictor is asked at, and the
 * runtime passing them to the device. Hand-computed with the fake predictor
 * (test/schedule/fake-predictor.ts), each slot's cost divided by its thread count.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { driveUntilSettled, VirtualClock } from '../src/clock/index.ts';
import type { Device, DeviceService, GroupResult, Segment } from '../src/device/device.ts';
import { ServingRuntime, type RuntimeService } from '../src/runtime/runtime.ts';
import { ModelRepository } from '../src/model/repository.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import { fixedPredictor } from './helpers/fixed-predictor.ts';
import { createController, parseControllerParams, ThreadAssigningController } from '../src/schedule/index.ts';
import { formatThreadRule, parseThreadRule, threadCountsOf, threadsFor } from '../src/threads.ts';
import { ThreadFake } from './schedule/thread-fake.ts';
import { input, query } from './schedule/query.ts';
import { describeControllerConformance } from './schedule/conformance.ts';

describe('thread rules', () => {
  it('parse, format and apply: split gives max(1, ⌊C/k⌋), fixed N, device nothing', () => {
    expect(parseThreadRule('split:2')).toEqual({ kind: 'split', cores: 2 });
    expect(parseThreadRule(' fixed:1 ')).toEqual({ kind: 'fixed', threads: 1 });
    expect(formatThreadRule(parseThreadRule('split:16'))).toBe('split:16');
    expect([1, 2, 3, 4, 5].map((k) => threadsFor({ kind: 'split', cores: 4 }, k))).toEqual([4, 2, 1, 1, 1]);
    expect(threadsFor({ kind: 'fixed', threads: 3 }, 5)).toBe(3);
    expect(threadsFor({ kind: 'device' }, 1)).toBeUndefined();
    expect(threadCountsOf({ kind: 'split', cores: 4 }, 4)).toEqual([1, 2, 4]);
    for (const bad of ['split:0', 'split', 'fixed:1.5', 'cores:2', 'split:1025']) expect(() => parseThreadRule(bad, '--threads-rule')).toThrow(/--threads-rule '.*' must be 'device', 'fixed:N'/);
  });

  it('the threads parameter: default device, validated by name', () => {
    expect(parseControllerParams('abacus')['threads']).toBe('device');
    expect(parseControllerParams('fcfs', { threads: 'split:2' })).toEqual({ drop: true, threads: 'split:2' });
    expect(() => parseControllerParams('edf', { threads: 'split:0' })).toThrow(new RangeError("edf parameter 'threads' must be 'device', 'fixed:N', 'split:C' or 'adapt:C' (N, C integers in [1, 1024]), got 'split:0'"));
    expect(() => parseControllerParams('abacus', { threads: 2 })).toThrow(TypeError);
    expect(() => parseControllerParams('triton', { threads: 'split:2' })).toThrow(/triton has no parameter 'threads'/);
  });
});

describe('controllers with a thread rule', () => {
  const NOW = 0;
  // a: 10 operators × 1 ms; b: 10 × 2 ms (fake predictor, 1 thread).
  const qa = query('qa', 'S1', 'a', { arrivalMs: 0, qosTargetMs: 100 });
  const qb = query('qb', 'S2', 'b', { arrivalMs: 0, qosTargetMs: 200 });

  it('without a rule (device): no thread counts anywhere, as before', () => {
    const p = new ThreadFake();
    const d = createController('fcfs', {}, p).decide(input(NOW, [[qa]]));
    expect(d.group).toEqual([{ queryId: 'qa', service: 'S1', start: 0, end: 10 }]);
    expect(d.predictedMs).toBe(10);
    expect(p.threadCalls.flat(2)).toEqual([undefined]);
  });

  it('fcfs split:2: the running query gets every core, predicted at 2 threads', () => {
    const p = new ThreadFake();
    const c = createController('fcfs', { threads: 'split:2' }, p);
    expect(c).toBeInstanceOf(ThreadAssigningController);
    const d = c.decide(input(NOW, [[qa], [qb]]));
    expect(d.group).toEqual([{ queryId: 'qa', service: 'S1', start: 0, end: 10, intraOpThreads: 2 }]);
    expect(d.predictedMs).toBe(5);
    expect(p.threadCalls.flat(2).every((t) => t === 2)).toBe(true);
  });

  it('abacus split:2: a lone query gets both cores; an overlapped pair one each, and every candidate is scored at its size', () => {
    const p = new ThreadFake();
    const c = createController('abacus', { threads: 'split:2' }, p);
    const lone = c.decide(input(NOW, [[qa]]));
    expect(lone.group).toEqual([{ queryId: 'qa', service: 'S1', start: 0, end: 10, intraOpThreads: 2 }]);
    expect(lone.predictedMs).toBe(5);
    const pair = c.decide(input(NOW, [[qa], [qb]]));
    // {qa, qb} at 1 thread each: max(10, 20) + 0.5 × 10 = 25 ≤ qa's headroom 100: both whole.
    expect(pair.group).toEqual([
      { queryId: 'qa', service: 'S1', start: 0, end: 10, intraOpThreads: 1 },
      { queryId: 'qb', service: 'S2', start: 0, end: 10, intraOpThreads: 1 },
    ]);
    expect(pair.predictedMs).toBe(25);
    for (const call of p.threadCalls) for (const g of call) expect(g.every((t) => t === threadsFor({ kind: 'split', cores: 2 }, g.length))).toBe(true);
  });

  it('abacus fixed:1 asks the predictor at 1 thread for every group', () => {
    const p = new ThreadFake();
    const d = createController('abacus', { threads: 'fixed:1' }, p).decide(input(NOW, [[qa], [qb]]));
    expect(d.group.map((s) => s.intraOpThreads)).toEqual([1, 1]);
    expect(p.threadCalls.flat(2).every((t) => t === 1)).toBe(true);
  });
});

describeControllerConformance('abacus threads split:2', (p) => createController('abacus', { threads: 'split:2' }, p), { samples: 150 });
describeControllerConformance('edf threads split:4', (p) => createController('edf', { threads: 'split:4' }, p), { samples: 150 });

/** A device that records the segments it is given and finishes each group after 1 ms. */
class RecordingDevice implements Device {
  readonly id = 'recording';
  readonly seen: Segment[][] = [];
  constructor(
    private readonly clock: VirtualClock,
    private readonly operators: number,
  ) {}
  load(_services: readonly DeviceService[]): Promise<void> {
    return Promise.resolve();
  }
  async runGroup(group: readonly Segment[]): Promise<GroupResult> {
    this.seen.push([...group]);
    await this.clock.sleep(1);
    return { groupLatencyMs: 1, segments: group.map((s) => ({ ok: true as const, queryId: s.queryId, service: s.service, latencyMs: 1, ...(s.end === this.operators ? { outputs: {} } : {}) })) };
  }
  releaseQuery(): Promise<void> {
    return Promise.resolve();
  }
  close(): Promise<void> {
    return Promise.resolve();
  }
}

describe('the runtime passes the decided thread counts to the device and records them', () => {
  let spec: ModelSpec;
  beforeAll(async () => {
    spec = await new ModelRepository().zooSpec('resnet50');
  }, 60_000);

  it.each([
    ['abacus', 'split:2', [[2], [1, 1]]],
    ['fcfs', 'split:2', [[2], [2]]],
    ['fcfs', 'device', [[undefined], [undefined]]],
  ] as const)('%s threads %s', async (policy, rule, expected) => {
    const clock = new VirtualClock();
    const n = spec.operators.length;
    const device = new RecordingDevice(clock, n);
    const services: RuntimeService[] = ['s1', 's2'].map((name) => ({ name, spec, qosTargetMs: 10_000, maxQueueLength: 10 }));
    const runtime = new ServingRuntime({ clock, device, controller: createController(policy, { threads: rule }, fixedPredictor([spec.name], 1)), services });
    // q0 launches alone at once; q1 and q2 arrive while it runs and go next (abacus: together).
    const all = ['q0', 'q1', 'q2'].map((id, i) => runtime.submit({ service: i === 2 ? 's2' : 's1', batch: 1, id }));
    await driveUntilSettled(clock, Promise.all(all));
    const seen = device.seen.map((g) => g.map((s) => s.intraOpThreads));
    expect(seen.slice(0, 2)).toEqual(expected);
    expect(runtime.groups.map((g) => g.segments.map((s) => s.intraOpThreads))).toEqual(seen);
  });
});
