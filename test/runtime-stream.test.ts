/**
 * Abacus without the group barrier (`barrier: false`, `schedule/abacus/stream.ts`) in the serving
 * runtime on sim:a100 (virtual time): segments of different services start while others run
 * (no barrier), every launch decision sees the segments in flight (`ScheduleInput.running`), and
 * every query ends exactly once through arrivals, cancellations, failing segments and a
 * controller that throws. Then the controller alone on the test predictor: the finish estimate,
 * the batch it picks, and when it waits.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { driveUntilSettled, VirtualClock } from '../src/clock/index.ts';
import type { Device, GroupResult, Segment } from '../src/device/device.ts';
import { SimDevice } from '../src/device/sim/index.ts';
import { artifactAt } from '../src/model/artifact.ts';
import { ModelRepository } from '../src/model/repository.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import { ServingRuntime, type QueryOutcome, type RuntimeService } from '../src/runtime/runtime.ts';
import type { BatchingLimits, Decision, QueryController, ScheduleInput } from '../src/schedule/controller.ts';
import { createController, StreamAbacusController } from '../src/schedule/index.ts';
import { memberFinishesMs } from '../src/schedule/abacus/stream.ts';
import { constantArrivals, LoadGenerator } from '../src/workload/index.ts';
import { fixedPredictor } from './helpers/fixed-predictor.ts';
import { FakePredictor } from './schedule/fake-predictor.ts';
import { query, randomInput } from './schedule/query.ts';
import { rng } from './helpers/rng.ts';

let specs: ModelSpec[];
beforeAll(async () => {
  const repo = new ModelRepository();
  specs = [await repo.zooSpec('resnet50'), await repo.zooSpec('vgg16')];
}, 60_000);

const BATCHING: BatchingLimits = { maxBatchSize: 8, maxQueueDelayMs: 0, preferredBatchSizes: [] };

/** Fails every `every`-th group it is given (the whole group: a device error), else runs it on `inner`. */
class FlakyDevice implements Device {
  readonly id: string;
  calls = 0;
  constructor(
    private readonly inner: Device,
    private readonly every: number,
  ) {
    this.id = inner.id;
  }
  load(s: Parameters<Device['load']>[0]): Promise<void> {
    return this.inner.load(s);
  }
  runGroup(group: readonly Segment[]): Promise<GroupResult> {
    if (++this.calls % this.every === 0) return Promise.reject(new Error('injected device failure'));
    return this.inner.runGroup(group);
  }
  releaseQuery(service: string, queryId: string): Promise<void> {
    return this.inner.releaseQuery(service, queryId);
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

/** Records every input, and throws on every `throwEvery`-th decision (0: never). */
function recording(inner: QueryController, throwEvery = 0): { controller: QueryController; inputs: ScheduleInput[] } {
  const inputs: ScheduleInput[] = [];
  let n = 0;
  const controller: QueryController = {
    policy: inner.policy,
    launchWhileBusy: inner.launchWhileBusy,
    ...(inner.oneGroupPerService === undefined ? {} : { oneGroupPerService: inner.oneGroupPerService }),
    decide(input: ScheduleInput): Decision {
      inputs.push(input);
      if (throwEvery > 0 && ++n % throwEvery === 0) throw new Error('injected controller failure');
      return inner.decide(input);
    },
    observe: (o) => inner.observe(o),
  };
  return { controller, inputs };
}

async function run(o: { failEvery?: number; throwEvery?: number; cancelEvery?: number; queries?: number; rateQps?: number }) {
  const clock = new VirtualClock();
  const sim = await SimDevice.create({ clock, id: 'sim:a100', seed: 3 });
  const device = o.failEvery === undefined ? sim : new FlakyDevice(sim, o.failEvery);
  const services: RuntimeService[] = specs.map((spec) => ({ name: spec.name, spec, qosTargetMs: 60, maxQueueLength: 10_000, batching: BATCHING }));
  await device.load(services.map((s) => ({ name: s.name, model: artifactAt('/nonexistent', s.spec) })));
  const inner = createController('abacus', { barrier: false }, fixedPredictor(specs.map((s) => s.name), 0.05));
  const { controller, inputs } = recording(inner, o.throwEvery ?? 0);
  const runtime = new ServingRuntime({ clock, device, controller, services });
  const total = o.queries ?? 400;
  const gen = new LoadGenerator({ clock, arrivals: constantArrivals(o.rateQps ?? 600), services: specs.map((s) => ({ service: s.name, batchSizes: { values: [1, 2] } })), seed: 5, maxQueries: total });
  const work = (async () => {
    const pending: Promise<QueryOutcome>[] = [];
    let i = 0;
    await gen.run((q) => {
      const id = `q${i++}`;
      pending.push(runtime.submit({ id, service: q.service, batch: q.batch, arrivalMs: q.arrivalMs }));
      // cancel some queries 1 ms after they arrived (waiting, or already launched)
      if (o.cancelEvery !== undefined && i % o.cancelEvery === 0) clock.setTimer(1, () => runtime.cancel(id));
    });
    return Promise.all(pending);
  })();
  const outcomes = await driveUntilSettled(clock, work);
  await device.close();
  return { outcomes, runtime, inputs, total };
}

function expectEachOnce(outcomes: readonly QueryOutcome[], total: number, runtime: ServingRuntime): void {
  expect(outcomes).toHaveLength(total);
  expect(new Set(outcomes.map((o) => o.record.id)).size).toBe(total);
  expect(runtime.counters).toMatchObject({ submitted: total, pending: 0 });
  for (const o of outcomes) expect(o.record.outcome).not.toBe('pending');
}

describe('abacus without the group barrier in the runtime (sim:a100)', () => {
  it('starts segments while others run, shows them to the controller, fuses, and answers every query once', async () => {
    const { outcomes, runtime, inputs, total } = await run({});
    expectEachOnce(outcomes, total, runtime);
    expect(outcomes.filter((o) => o.ok).length).toBeGreaterThan(total / 2);
    for (const o of outcomes) if (!o.ok) expect(o.reason).toBe('qos_violation');
    const groups = runtime.groups;
    for (const g of groups) expect(g.segments).toHaveLength(1);
    // some launch happened while a group of the other service was running (no barrier)
    const midGroup = groups.filter((g) => groups.some((h) => h !== g && h.segments[0]!.service !== g.segments[0]!.service && h.launchMs < g.launchMs && g.launchMs < h.launchMs + h.measuredMs));
    expect(midGroup.length).toBeGreaterThan(0);
    // those decisions saw the running segment, with its launch time, predicted latency and deadline
    const seen = inputs.filter((i) => (i.running?.length ?? 0) > 0);
    expect(seen.length).toBeGreaterThan(0);
    for (const i of seen) {
      for (const r of i.running!) {
        expect(r.launchMs).toBeLessThanOrEqual(i.nowMs);
        expect(r.predictedMs).toBeGreaterThan(0);
        expect(Number.isFinite(r.deadlineMs)).toBe(true);
        expect(r.end).toBe(r.operators);
        // a service with a segment in flight is not among the launchable queues
        expect(i.queues.every((q) => q.every((w) => w.service !== r.service))).toBe(true);
      }
    }
    expect(groups.some((g) => (g.segments[0]!.members?.length ?? 1) > 1)).toBe(true);
  });

  it('answers every query once with cancellations, failing groups and a controller that throws', async () => {
    const { outcomes, runtime, total } = await run({ failEvery: 7, throwEvery: 11, cancelEvery: 5 });
    expectEachOnce(outcomes, total, runtime);
    const reasons = new Set(outcomes.filter((o) => !o.ok).map((o) => (o.ok ? '' : o.reason)));
    expect(reasons.has('cancelled')).toBe(true);
    expect(reasons.has('device_failure')).toBe(true);
    expect(outcomes.some((o) => o.ok)).toBe(true);
  });
});

describe('StreamAbacusController', () => {
  it('memberFinishesMs: the longest member ends with the group; the others its solo-length difference earlier, never before their solo latency', () => {
    expect(memberFinishesMs([10, 4], 12)).toEqual([12, 6]);
    expect(memberFinishesMs([10, 4], 10)).toEqual([10, 4]);
    expect(memberFinishesMs([5], 7)).toEqual([7]);
    expect(memberFinishesMs([10, 10], 15)).toEqual([15, 15]);
  });

  const limits: BatchingLimits = { maxBatchSize: 4, maxQueueDelayMs: 0, preferredBatchSizes: [] };
  const controller = (hold = false): StreamAbacusController => createController('abacus', { barrier: false, hold }, new FakePredictor()) as StreamAbacusController;

  it('with nothing running launches the head fused with every follower that fits', () => {
    // model a: 1 ms per operator per sample, 10 operators: batch n alone takes 10·n ms
    const queue = [0, 1, 2, 3].map((i) => query(`a${i}`, 'A', 'a', { arrivalMs: i, qosTargetMs: 100, batching: limits }));
    const d = controller().decide({ nowMs: 10, queues: [queue], runningRemainingMs: 0 });
    expect(d.group).toEqual([{ queryId: 'a0', service: 'A', start: 0, end: 10, fused: ['a1', 'a2', 'a3'] }]);
    expect(d.predictedMs).toBeCloseTo(40, 9);
    // a tight deadline: 10 + 10·n ≤ 35 → n = 2
    const tight = queue.map((q) => ({ ...q, qosTargetMs: 35 }));
    expect(controller().decide({ nowMs: 10, queues: [tight], runningRemainingMs: 0 }).group[0]!.fused).toEqual(['a1']);
  });

  it('a head predicted late runs now (its only chance) with every follower, which would only wait behind it', () => {
    // batch n alone takes 10·n ms; at 10 the head (deadline 15) cannot make it even alone, nor can a1..a3
    const late = [0, 1, 2, 3].map((i) => query(`a${i}`, 'A', 'a', { arrivalMs: i, qosTargetMs: 15, batching: limits }));
    const noDrop = createController('abacus', { barrier: false, hold: false, drop: false }, new FakePredictor());
    const d = noDrop.decide({ nowMs: 10, queues: [late], runningRemainingMs: 0 });
    expect(d.group).toEqual([{ queryId: 'a0', service: 'A', start: 0, end: 10, fused: ['a1', 'a2', 'a3'] }]);
    expect(d.predictedMs).toBeCloseTo(40, 9);
  });

  it('takes the whole queue instead of the cut that fits the head when that finishes more of its members on time', () => {
    // batch 1 takes 10 ms, 2 takes 20 ms, and 3 (made cheap) 16 ms; at 10 only the head alone
    // fits the head's deadline (25). The cut: a0 at 20, then a1 + a2 alone until 40, past their
    // deadline 38: one on time. The whole queue: all end at 26, a1 and a2 on time: two.
    const limits3: BatchingLimits = { maxBatchSize: 3, maxQueueDelayMs: 0, preferredBatchSizes: [] };
    const cheap = (): StreamAbacusController => createController('abacus', { barrier: false, hold: false }, new FakePredictor({ overrides: { 'a[0,10)x3': 16 } })) as StreamAbacusController;
    const queue = [query('a0', 'A', 'a', { arrivalMs: 0, qosTargetMs: 25, batching: limits3 }), ...[1, 2].map((i) => query(`a${i}`, 'A', 'a', { arrivalMs: 8, qosTargetMs: 30, batching: limits3 }))];
    const d = cheap().decide({ nowMs: 10, queues: [queue], runningRemainingMs: 0 });
    expect(d.group).toEqual([{ queryId: 'a0', service: 'A', start: 0, end: 10, fused: ['a1', 'a2'] }]);
    expect(d.predictedMs).toBeCloseTo(16, 9);
    // followers with room to wait (deadline 108): the cut keeps all three on time (a0 at 20, a1 + a2 at 40), the whole queue two
    const roomy = queue.map((q, i) => (i === 0 ? q : { ...q, qosTargetMs: 100 }));
    const cut = cheap().decide({ nowMs: 10, queues: [roomy], runningRemainingMs: 0 });
    expect(cut.group).toEqual([{ queryId: 'a0', service: 'A', start: 0, end: 10 }]);
    expect(cut.predictedMs).toBeCloseTo(10, 9);
  });

  it('predicts a launch against the running remainder and waits when it would make the running query late', () => {
    // B runs model b (2 ms per operator, 20 ms whole), launched at 0 and predicted 20 ms; at 10 it is half done.
    const running = [{ queryId: 'b0', service: 'B', model: 'b', operators: 10, start: 0, end: 10, batch: 1, seqLen: 0, launchMs: 0, predictedMs: 20, deadlineMs: 100 }];
    const a = query('a0', 'A', 'a', { arrivalMs: 5, qosTargetMs: 100 });
    const d = controller().decide({ nowMs: 10, queues: [[a]], runningRemainingMs: 0, running });
    // remainder b[5,10) = 10 ms, a alone 10 ms: group = 10 + 0.5·10 = 15 ms, both finish at 15
    expect(d.group).toEqual([{ queryId: 'a0', service: 'A', start: 0, end: 10 }]);
    expect(d.predictedMs).toBeCloseTo(15, 9);
    // the running query's deadline is 22 (finishes at 20 alone, at 25 with a): a waits
    const late = controller().decide({ nowMs: 10, queues: [[a]], runningRemainingMs: 0, running: [{ ...running[0]!, deadlineMs: 22 }] });
    expect(late.group).toEqual([]);
    expect(late.rejected).toEqual([]);
  });

  it('with hold, a partial batch waits while its members can afford it and goes at its latest start', () => {
    const queue = [0, 1].map((i) => query(`a${i}`, 'A', 'a', { arrivalMs: i, qosTargetMs: 500, batching: limits }));
    // a full batch (4) takes 40 ms alone: hold until the deadline 500 − 12·40 = 20 (HOLD_FACTOR 12)
    const d = controller(true).decide({ nowMs: 10, queues: [queue], runningRemainingMs: 0 });
    expect(d.group).toEqual([]);
    expect(d.wakeAtMs).toBeCloseTo(20, 9);
    const later = controller(true).decide({ nowMs: 20, queues: [queue], runningRemainingMs: 0 });
    expect(later.group).toEqual([{ queryId: 'a0', service: 'A', start: 0, end: 10, fused: ['a1'] }]);
    // a target shorter than 12 full batches leaves nothing to hold for: the partial batch goes now
    const tight = [0, 1].map((i) => query(`t${i}`, 'A', 'a', { arrivalMs: i, qosTargetMs: 100, batching: limits }));
    const now = controller(true).decide({ nowMs: 10, queues: [tight], runningRemainingMs: 0 });
    expect(now.group).toEqual([{ queryId: 't0', service: 'A', start: 0, end: 10, fused: ['t1'] }]);
  });

  it('with hold, a partial batch with a long target waits no longer than 12 full batches after its head arrived (a warm-up query with a 600 s target went after 600 s)', () => {
    const queue = [query('w0', 'A', 'a', { arrivalMs: 0, qosTargetMs: 600_000, batching: limits })];
    // a full batch (4) takes 40 ms alone: held until 0 + 12·40 = 480, not until 600,000 − 480
    const d = controller(true).decide({ nowMs: 10, queues: [queue], runningRemainingMs: 0 });
    expect(d.group).toEqual([]);
    expect(d.wakeAtMs).toBeCloseTo(480, 9);
    expect(controller(true).decide({ nowMs: 480, queues: [queue], runningRemainingMs: 0 }).group).toEqual([{ queryId: 'w0', service: 'A', start: 0, end: 10 }]);
  });

  it('rejects a held query that cannot finish after its own service\'s running segment, on time', () => {
    const running = [{ queryId: 'a0', service: 'A', model: 'a', operators: 10, start: 0, end: 10, batch: 1, seqLen: 0, launchMs: 0, predictedMs: 10, deadlineMs: 100 }];
    const held = [query('a1', 'A', 'a', { arrivalMs: 1, qosTargetMs: 14 }), query('a2', 'A', 'a', { arrivalMs: 2, qosTargetMs: 100 })];
    // at 5: a0 ends at 10, a1 (10 ms alone) would end at 20 > its deadline 15
    const d = controller().decide({ nowMs: 5, queues: [], runningRemainingMs: 0, running, held: [held] });
    expect(d.rejected.map((r) => r.queryId)).toEqual(['a1']);
  });
});

describe('the barrier mode is unchanged', () => {
  it('barrier abacus decides the same whether or not the input shows running segments, and barrier: true is the default', () => {
    const r = rng(24);
    for (let i = 0; i < 400; i++) {
      const input = randomInput(r, `p${i}`, { batching: i % 2 === 0 });
      const running = [{ queryId: 'x', service: 'elsewhere', model: 'a', operators: 10, start: 0, end: 10, batch: 4, seqLen: 0, launchMs: input.nowMs - 3, predictedMs: 9, deadlineMs: input.nowMs + 20 }];
      const plain = createController('abacus', {}, new FakePredictor()).decide(input);
      expect(createController('abacus', { barrier: true }, new FakePredictor()).decide(input)).toEqual(plain);
      expect(createController('abacus', {}, new FakePredictor()).decide({ ...input, running })).toEqual(plain);
    }
  });
});
