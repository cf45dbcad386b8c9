/**
 * The triton policy in the serving runtime (VirtualClock, a scripted device that takes a fixed
 * time per service): batches of different services run concurrently (one model instance each,
 * `oneGroupPerService`), a batch that is neither full nor preferred waits until its oldest
 * query waited `maxQueueDelayMs` (`Decision.wakeAtMs`), a full batch goes at once, a service's
 * next batch forms only when its running one completes, and a held query is rejected at its
 * deadline. Every time below is a sum of the scripted durations and arrival times (exact).
 * Then every batching policy end to end on sim:a100: each query ends exactly once and fused
 * batches really run.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { driveUntilSettled, VirtualClock } from '../src/clock/index.ts';
import type { Device, DeviceService, GroupResult, Segment } from '../src/device/device.ts';
import { ModelRepository } from '../src/model/repository.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import type { BatchingLimits } from '../src/schedule/controller.ts';
import { createController } from '../src/schedule/index.ts';
import { ServingRuntime, type QueryOutcome, type RuntimeService } from '../src/runtime/runtime.ts';
import { SimDevice } from '../src/device/sim/index.ts';
import { artifactAt } from '../src/model/artifact.ts';
import { constantArrivals, LoadGenerator } from '../src/workload/index.ts';
import { fixedPredictor } from './helpers/fixed-predictor.ts';

let specs: ModelSpec[];
beforeAll(async () => {
  const repo = new ModelRepository();
  specs = [await repo.zooSpec('resnet50'), await repo.zooSpec('vgg16')];
}, 60_000);

/** Runs every group in a fixed time per service (the longest of its segments' services), on the clock. */
class TimedDevice implements Device {
  readonly id = 'timed';
  /** Every group: launch and end time, and what ran. */
  readonly runs: { startMs: number; endMs: number; segments: { service: string; batchSize: number }[] }[] = [];
  constructor(
    private readonly clock: VirtualClock,
    private readonly msByService: Readonly<Record<string, number>>,
  ) {}
  load(_services: readonly DeviceService[]): Promise<void> {
    return Promise.resolve();
  }
  async runGroup(group: readonly Segment[]): Promise<GroupResult> {
    const startMs = this.clock.now();
    const ms = Math.max(...group.map((s) => this.msByService[s.service] ?? 1));
    await this.clock.sleep(ms);
    this.runs.push({ startMs, endMs: this.clock.now(), segments: group.map((s) => ({ service: s.service, batchSize: s.batchSize })) });
    return { groupLatencyMs: ms, segments: group.map((s) => ({ ok: true as const, queryId: s.queryId, service: s.service, latencyMs: ms, outputs: {} })) };
  }
  releaseQuery(): Promise<void> {
    return Promise.resolve();
  }
  close(): Promise<void> {
    return Promise.resolve();
  }
}

const BATCHING: BatchingLimits = { maxBatchSize: 4, maxQueueDelayMs: 5, preferredBatchSizes: [] };

function setup(msByService: Record<string, number>, qosTargetMs = 1000) {
  const clock = new VirtualClock();
  const device = new TimedDevice(clock, msByService);
  const services: RuntimeService[] = [
    { name: 'A', spec: specs[0]!, qosTargetMs, maxQueueLength: 100, batching: BATCHING },
    { name: 'B', spec: specs[1]!, qosTargetMs, maxQueueLength: 100, batching: BATCHING },
  ];
  const runtime = new ServingRuntime({ clock, device, controller: createController('triton'), services });
  /** Submit one batch-1 query to `service` at clock time `atMs`. */
  const submitAt = (atMs: number, service: string, id: string, qos?: number): Promise<QueryOutcome> =>
    new Promise((resolve) => {
      clock.setTimer(atMs - clock.now(), () => {
        void runtime.submit({ service, batch: 1, id, ...(qos === undefined ? {} : { qosTargetMs: qos }) }).then(resolve);
      });
    });
  return { clock, device, runtime, submitAt };
}

describe('triton in the runtime', () => {
  it('holds batches for maxQueueDelayMs, runs the batches of two services at the same time, a full batch at once', async () => {
    // A takes 10 ms per batch, B 8 ms; maxBatchSize 4, maxQueueDelayMs 5 for both.
    const { clock, device, runtime, submitAt } = setup({ A: 10, B: 8 });
    const outcomes = await driveUntilSettled(
      clock,
      Promise.all([
        submitAt(0, 'A', 'a1'),
        submitAt(1, 'B', 'b1'),
        submitAt(2, 'A', 'a2'),
        submitAt(2, 'A', 'a3'),
        submitAt(7, 'A', 'a4'), // A's batch runs (5..15): waits for it
        ...['b2', 'b3', 'b4', 'b5'].map((id) => submitAt(12, 'B', id)), // B's runs (6..14)
      ]),
    );
    expect(outcomes.every((o) => o.ok)).toBe(true);
    const groups = runtime.groups.map((g) => ({ launchMs: g.launchMs, service: g.segments[0]!.service, members: g.segments[0]!.members ?? [g.segments[0]!.queryId], batch: g.segments[0]!.batch }));
    expect(groups).toEqual([
      // a1 waited 0 + 5 ms (a2, a3 joined at 2: 3 samples, not full): sent at 5
      { launchMs: 5, service: 'A', members: ['a1', 'a2', 'a3'], batch: 3 },
      // b1 waited 1 + 5 ms, while A's batch runs
      { launchMs: 6, service: 'B', members: ['b1'], batch: 1 },
      // b2..b5 fill B's batch (4): sent as soon as B's instance is free (14), before their 5 ms
      { launchMs: 14, service: 'B', members: ['b2', 'b3', 'b4', 'b5'], batch: 4 },
      // a4 (arrived 7) waited for A's batch to finish at 15; by then 8 ≥ 5 ms: sent alone
      { launchMs: 15, service: 'A', members: ['a4'], batch: 1 },
    ]);
    // A's first batch (5..15) and B's (6..14) overlap on the device; no service ever overlaps itself
    expect(device.runs.map((r) => [r.startMs, r.endMs])).toEqual([
      [6, 14],
      [5, 15],
      [14, 22],
      [15, 25],
    ]);
    expect(runtime.groups.every((g) => g.predictedMs === undefined)).toBe(true);
    const endOf = (id: string): number | undefined => runtime.queries.find((q) => q.id === id)?.endMs;
    expect(['a1', 'a2', 'a3', 'b1', 'b2', 'a4'].map(endOf)).toEqual([15, 15, 15, 14, 22, 25]);
  });

  it('a held query is rejected at its deadline (drop: queue policy REJECT at the QoS target), not at the end of the delay', async () => {
    const { clock, runtime, submitAt } = setup({ A: 10, B: 8 });
    // alone in A: held until 0 + 5 ms, but its QoS target is 3 ms
    const [o] = await driveUntilSettled(clock, Promise.all([submitAt(0, 'A', 'short', 3)]));
    expect(o.ok === false && o.reason).toBe('qos_violation');
    expect(o.record.endMs).toBe(3);
    expect(runtime.groups).toEqual([]);
  });

  it("a query waiting behind its service's running batch is rejected at its deadline, not when the batch ends", async () => {
    // A takes 100 ms per batch; 'first' fills nothing and goes at 5 (5..105); 'late' arrives at 10
    // with a 20 ms target: hidden from batch formation while A's batch runs, timed out at 30
    const { clock, runtime, submitAt } = setup({ A: 100, B: 8 });
    const [first, late] = await driveUntilSettled(clock, Promise.all([submitAt(0, 'A', 'first'), submitAt(10, 'A', 'late', 20)]));
    expect(first.ok).toBe(true);
    expect(late.ok === false && late.reason).toBe('qos_violation');
    expect(late.record.endMs).toBe(30);
    expect(runtime.groups.map((g) => g.segments[0]!.queryId)).toEqual(['first']);
  });
});

describe('batching policies on sim:a100', () => {
  it.each(['abacus', 'triton', 'fcfs-batch', 'edf-batch', 'clockwork'])('%s: every query ends exactly once; queries are fused (members ≤ maxBatchSize samples)', async (policy) => {
    const clock = new VirtualClock();
    const device = await SimDevice.create({ clock, id: 'sim:a100', seed: 3 });
    const batching: BatchingLimits = { maxBatchSize: 8, maxQueueDelayMs: 2, preferredBatchSizes: [4] };
    const services: RuntimeService[] = specs.map((spec) => ({ name: spec.name, spec, qosTargetMs: 60, maxQueueLength: 10_000, batching }));
    await device.load(services.map((s) => ({ name: s.name, model: artifactAt('/nonexistent', s.spec) })));
    const controller = createController(policy, {}, fixedPredictor(specs.map((s) => s.name), 0.3));
    const runtime = new ServingRuntime({ clock, device, controller, services });
    const gen = new LoadGenerator({ clock, arrivals: constantArrivals(1000), services: specs.map((s) => ({ service: s.name, batchSizes: { values: [1, 2] } })), seed: 5, maxQueries: 300 });
    const work = (async () => {
      const pending: Promise<QueryOutcome>[] = [];
      await gen.run((q) => pending.push(runtime.submit({ service: q.service, batch: q.batch, arrivalMs: q.arrivalMs })));
      return Promise.all(pending);
    })();
    const outcomes = await driveUntilSettled(clock, work);
    expect(outcomes).toHaveLength(300);
    expect(new Set(outcomes.map((o) => o.record.id)).size).toBe(300);
    expect(runtime.counters).toMatchObject({ submitted: 300, pending: 0 });
    for (const o of outcomes) if (!o.ok) expect(o.reason).toBe('qos_violation');
    const fused = runtime.groups.flatMap((g) => g.segments).filter((s) => (s.members?.length ?? 1) > 1);
    expect(fused.length).toBeGreaterThan(0);
    for (const s of fused) expect(s.batch).toBeLessThanOrEqual(8);
    // a fused batch's members complete together, each with its own record
    const byId = new Map(runtime.queries.map((q) => [q.id, q]));
    for (const s of fused) {
      const ends = new Set(s.members!.map((id) => byId.get(id)!).filter((q) => q.outcome === 'completed').map((q) => q.endMs));
      expect(ends.size).toBeLessThanOrEqual(1);
    }
    await device.close();
  });
});
