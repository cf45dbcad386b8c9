/**
 * The serving runtime (docs/scheduling-runtime.md): every query ends exactly once, partially executed queries
 * resume at their next operator, rejections carry reasons, a 10× overload burst loses nothing.
 * Runs on `sim:a100` with a VirtualClock (deterministic) and on scripted fake devices.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { driveUntilSettled, VirtualClock } from '../src/clock/index.ts';
import type { Device, DeviceService, GroupResult, Segment } from '../src/device/device.ts';
import { SimDevice } from '../src/device/sim/index.ts';
import { DeviceFailureError } from '../src/errors.ts';
import { artifactAt } from '../src/model/artifact.ts';
import { ModelRepository } from '../src/model/repository.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import type { QueryController } from '../src/schedule/controller.ts';
import { createController } from '../src/schedule/index.ts';
import { ServingRuntime, type QueryOutcome, type RuntimeService } from '../src/runtime/runtime.ts';
import { constantArrivals, LoadGenerator } from '../src/workload/index.ts';
import { fixedPredictor } from './helpers/fixed-predictor.ts';

/** ms per operator of the fixed predictor (`test/helpers/fixed-predictor.ts`). */
const MS_PER_OPERATOR = 0.3;

let specs: ModelSpec[];
beforeAll(async () => {
  const repo = new ModelRepository();
  specs = [await repo.zooSpec('resnet50'), await repo.zooSpec('vgg16')];
}, 60_000);

async function simSetup(policy: string, params: Record<string, unknown> = {}, qos: readonly number[] = [50, 50], maxQueueLength = 10_000) {
  const clock = new VirtualClock();
  const device = await SimDevice.create({ clock, id: 'sim:a100', seed: 3 });
  const services: RuntimeService[] = specs.map((spec, i) => ({ name: spec.name, spec, qosTargetMs: qos[i]!, maxQueueLength }));
  await device.load(services.map((s) => ({ name: s.name, model: artifactAt('/nonexistent', s.spec) })));
  const controller = createController(policy, params, fixedPredictor(specs.map((s) => s.name), MS_PER_OPERATOR));
  const runtime = new ServingRuntime({ clock, device, controller, services });
  return { clock, device, runtime };
}

describe('ServingRuntime on sim:a100', () => {
  it.each(['fcfs', 'sjf', 'edf', 'abacus', 'clockwork', 'overlap-all'])('%s: every query ends exactly once with outputs or a reason', async (policy) => {
    const { clock, device, runtime } = await simSetup(policy);
    const outcomes: QueryOutcome[] = [];
    const gen = new LoadGenerator({ clock, arrivals: constantArrivals(200), services: specs.map((s) => ({ service: s.name, batchSizes: { values: [1, 4] } })), seed: 1, maxQueries: 200 });
    const work = (async () => {
      const pending: Promise<void>[] = [];
      await gen.run((q) => pending.push(runtime.submit({ service: q.service, batch: q.batch, arrivalMs: q.arrivalMs }).then((o) => void outcomes.push(o))));
      await Promise.all(pending);
      await runtime.drained();
    })();
    await driveUntilSettled(clock, work);
    expect(outcomes).toHaveLength(200);
    expect(new Set(outcomes.map((o) => o.record.id)).size).toBe(200);
    expect(runtime.counters).toMatchObject({ submitted: 200, pending: 0 });
    expect(runtime.counters.completed + runtime.counters.rejected).toBe(200);
    for (const o of outcomes) {
      if (o.ok) {
        expect(o.record.outcome).toBe('completed');
        expect(Object.keys(o.outputs).length).toBeGreaterThan(0);
        // the segments a completed query ran in cover its operators exactly, in order
        const segs = o.record.groups.map((gi) => runtime.groups[gi]!.segments.find((s) => s.queryId === o.record.id)!);
        expect(segs[0]!.start).toBe(0);
        for (let i = 1; i < segs.length; i++) expect(segs[i]!.start).toBe(segs[i - 1]!.end);
        expect(segs.at(-1)!.end).toBe(specs.find((s) => s.name === o.record.service)!.operators.length);
      } else {
        expect(['qos_violation', 'overloaded']).toContain(o.reason);
        expect(o.message.length).toBeGreaterThan(0);
      }
      expect(o.record.endMs).toBeGreaterThanOrEqual(o.record.arrivalMs);
    }
    if (policy !== 'overlap-all') {
      // one group at a time: groups never overlap in time
      const gs = runtime.groups;
      for (let i = 1; i < gs.length; i++) expect(gs[i]!.launchMs).toBeGreaterThanOrEqual(gs[i - 1]!.launchMs + gs[i - 1]!.measuredMs - 1e-9);
    }
    await device.close();
  });

  it('abacus co-locates: some groups hold two segments and some queries run in several segments', async () => {
    const { clock, device, runtime } = await simSetup('abacus', {}, [30, 30]);
    const gen = new LoadGenerator({ clock, arrivals: constantArrivals(300), services: specs.map((s) => ({ service: s.name, batchSizes: { values: [1, 2, 4] } })), seed: 2, maxQueries: 300 });
    const work = (async () => {
      const pending: Promise<QueryOutcome>[] = [];
      await gen.run((q) => pending.push(runtime.submit({ service: q.service, batch: q.batch, arrivalMs: q.arrivalMs })));
      return Promise.all(pending);
    })();
    await driveUntilSettled(clock, work);
    expect(runtime.groups.some((g) => g.segments.length === 2)).toBe(true);
    expect(runtime.queries.some((q) => q.outcome === 'completed' && q.groups.length > 1)).toBe(true);
    expect(runtime.groups.every((g) => g.predictedMs !== undefined && Number.isFinite(g.measuredMs))).toBe(true);
    await device.close();
  });

  it('a 10× overload burst loses no query and answers none twice; full queues reject as overloaded', async () => {
    const { clock, device, runtime } = await simSetup('abacus', {}, [40, 40], 20);
    const seen = new Map<string, number>();
    let resolved = 0;
    const work = (async () => {
      const pending: Promise<void>[] = [];
      // about 10× what the device can serve, all within 200 ms
      const gen = new LoadGenerator({ clock, arrivals: constantArrivals(5000), services: specs.map((s) => ({ service: s.name, batchSizes: { values: [8] } })), seed: 4, maxQueries: 1000 });
      await gen.run((q) =>
        pending.push(
          runtime.submit({ service: q.service, batch: q.batch, arrivalMs: q.arrivalMs }).then((o) => {
            resolved++;
            seen.set(o.record.id, (seen.get(o.record.id) ?? 0) + 1);
          }),
        ),
      );
      await Promise.all(pending);
    })();
    await driveUntilSettled(clock, work);
    expect(resolved).toBe(1000);
    expect(seen.size).toBe(1000);
    expect([...seen.values()].every((n) => n === 1)).toBe(true);
    const reasons = new Set(runtime.queries.filter((q) => q.outcome === 'rejected').map((q) => q.reason));
    expect(reasons.has('overloaded')).toBe(true);
    expect(reasons.has('qos_violation')).toBe(true);
    expect(runtime.queries.every((q) => q.outcome !== 'pending')).toBe(true);
    await device.close();
  });
});

/** A device that fails every segment of service 'bad' and runs others in `ms` of clock time. */
class ScriptedDevice implements Device {
  readonly id = 'fake';
  released: string[] = [];
  constructor(
    private readonly clock: VirtualClock,
    private readonly ms: number,
  ) {}
  load(_services: readonly DeviceService[]): Promise<void> {
    return Promise.resolve();
  }
  async runGroup(group: readonly Segment[]): Promise<GroupResult> {
    await this.clock.sleep(this.ms);
    return {
      groupLatencyMs: this.ms,
      segments: group.map((s) =>
        s.service === 'bad'
          ? { ok: false as const, queryId: s.queryId, service: s.service, error: new DeviceFailureError('scripted failure') }
          : { ok: true as const, queryId: s.queryId, service: s.service, latencyMs: this.ms, outputs: {} },
      ),
    };
  }
  releaseQuery(_service: string, queryId: string): Promise<void> {
    this.released.push(queryId);
    return Promise.resolve();
  }
  close(): Promise<void> {
    return Promise.resolve();
  }
}

describe('ServingRuntime failure paths', () => {
  it('a failing segment rejects only its query (device_failure); a controller error fails the waiting queries, never leaves them hanging', async () => {
    const clock = new VirtualClock();
    const device = new ScriptedDevice(clock, 2);
    const spec = specs[0]!;
    const services: RuntimeService[] = [
      { name: 'good', spec, qosTargetMs: 1000, maxQueueLength: 100 },
      { name: 'bad', spec, qosTargetMs: 1000, maxQueueLength: 100 },
    ];
    const runtime = new ServingRuntime({ clock, device, controller: createController('fcfs', {}, fixedPredictor([spec.name], MS_PER_OPERATOR)), services });
    const outcomes = await driveUntilSettled(clock, Promise.all([runtime.submit({ service: 'good', batch: 1 }), runtime.submit({ service: 'bad', batch: 1 }), runtime.submit({ service: 'good', batch: 2 })]));
    expect(outcomes.map((o) => (o.ok ? 'ok' : o.reason))).toEqual(['ok', 'device_failure', 'ok']);

    const throwing = new ServingRuntime({
      clock,
      device,
      controller: { policy: 'fcfs', launchWhileBusy: false, decide: () => { throw new RangeError('predictor does not know the model'); }, observe: () => undefined },
      services,
    });
    const failed = await driveUntilSettled(clock, Promise.all([throwing.submit({ service: 'good', batch: 1 }), throwing.submit({ service: 'bad', batch: 1 })]));
    expect(failed.map((o) => (o.ok ? 'ok' : `${o.reason}: ${o.message}`))).toEqual([
      'device_failure: the fcfs controller failed: predictor does not know the model',
      'device_failure: the fcfs controller failed: predictor does not know the model',
    ]);
  });

  it('bad submissions throw synchronously and record nothing; close() answers waiting queries', async () => {
    const clock = new VirtualClock();
    const device = new ScriptedDevice(clock, 5);
    const spec = specs[0]!;
    const runtime = new ServingRuntime({ clock, device, controller: createController('fcfs', {}, fixedPredictor([spec.name], MS_PER_OPERATOR)), services: [{ name: 'good', spec, qosTargetMs: 1000, maxQueueLength: 100 }] });
    expect(() => runtime.submit({ service: 'nope', batch: 1 })).toThrow(/unknown service 'nope'/);
    expect(() => runtime.submit({ service: 'good', batch: 0 })).toThrow(/batch/);
    expect(runtime.queries).toHaveLength(0);
    const a = runtime.submit({ service: 'good', batch: 1 });
    const b = runtime.submit({ service: 'good', batch: 1 });
    runtime.close();
    const c = runtime.submit({ service: 'good', batch: 1 });
    const [oa, ob, oc] = await driveUntilSettled(clock, Promise.all([a, b, c]));
    expect([oa.ok, ob.ok, oc.ok]).toEqual([true, false, false]);
    expect(ob.ok === false && ob.reason).toBe('overloaded');
  });
});

/** A controller that launches the head of the first non-empty queue one operator at a time. */
function oneOperatorAtATime(): QueryController {
  return {
    policy: 'fcfs',
    launchWhileBusy: false,
    decide: ({ queues }) => {
      const head = queues.find((q) => q.length > 0)?.[0];
      return {
        group: head === undefined ? [] : [{ queryId: head.id, service: head.service, start: head.nextOperator, end: head.nextOperator + 1 }],
        rejected: [],
        stats: { predictorCalls: 0, groupsScored: 0, searchRounds: 0, soloMemoHits: 0 },
      };
    },
    observe: () => undefined,
  };
}

describe('ServingRuntime.cancel', () => {
  it('withdraws a waiting query before it runs: one cancelled outcome, no device time', async () => {
    const clock = new VirtualClock();
    const device = new ScriptedDevice(clock, 5);
    const spec = specs[0]!;
    const runtime = new ServingRuntime({ clock, device, controller: createController('fcfs', { drop: false }, fixedPredictor([spec.name], MS_PER_OPERATOR)), services: [{ name: 'good', spec, qosTargetMs: 1000, maxQueueLength: 100 }] });
    const a = runtime.submit({ service: 'good', batch: 1, id: 'a' });
    const b = runtime.submit({ service: 'good', batch: 1, id: 'b' });
    expect(runtime.queueLength('good')).toBe(2);
    expect(runtime.cancel('b', 'client went away')).toBe('withdrawn');
    expect(runtime.cancel('b')).toBe('not_pending');
    expect(runtime.cancel('nope')).toBe('not_pending');
    expect(runtime.queueLength('good')).toBe(1);
    const [oa, ob] = await driveUntilSettled(clock, Promise.all([a, b]));
    expect(oa.ok).toBe(true);
    expect(ob.ok === false && [ob.reason, ob.message]).toEqual(['cancelled', 'client went away']);
    expect(ob.record.groups).toEqual([]);
    expect(runtime.groups.flatMap((g) => g.segments.map((s) => s.queryId))).toEqual(['a']);
    expect(runtime.counters).toMatchObject({ submitted: 2, completed: 1, rejected: 1, pending: 0 });
    expect(device.released).toEqual([]);
  });

  it('a query cancelled while its group runs ends cancelled after that group, its device state released; one whose running group completes it completes', async () => {
    const clock = new VirtualClock();
    const device = new ScriptedDevice(clock, 5);
    const spec = specs[0]!;
    const runtime = new ServingRuntime({ clock, device, controller: oneOperatorAtATime(), services: [{ name: 'good', spec, qosTargetMs: 1000, maxQueueLength: 100 }] });
    const outcome = runtime.submit({ service: 'good', batch: 1, id: 'mid' });
    // its first one-operator group is running now
    expect(runtime.cancel('mid', 'bye')).toBe('after_group');
    expect(runtime.cancel('mid', 'again')).toBe('after_group');
    const o = await driveUntilSettled(clock, outcome);
    expect(o.ok === false && [o.reason, o.message]).toEqual(['cancelled', 'bye']);
    expect(o.record.groups).toHaveLength(1);
    expect(device.released).toEqual(['mid']);
    expect(runtime.counters.pending).toBe(0);

    // between two groups: withdrawn at once, state released
    const second = runtime.submit({ service: 'good', batch: 1, id: 'between' });
    await driveUntilSettled(clock, clock.sleep(7)); // first group done (5 ms), second running
    expect(runtime.cancel('between')).toBe('after_group');
    const o2 = await driveUntilSettled(clock, second);
    expect(o2.ok === false && o2.reason).toBe('cancelled');
    expect(o2.record.groups).toHaveLength(2);
    expect(device.released).toEqual(['mid', 'between']);

    // a one-group query cancelled while running completes: the work is done
    const fcfs = new ServingRuntime({ clock, device, controller: createController('fcfs', { drop: false }, fixedPredictor([spec.name], MS_PER_OPERATOR)), services: [{ name: 'good', spec, qosTargetMs: 1000, maxQueueLength: 100 }] });
    const whole = fcfs.submit({ service: 'good', batch: 1, id: 'whole' });
    expect(fcfs.cancel('whole')).toBe('after_group');
    const o3 = await driveUntilSettled(clock, whole);
    expect(o3.ok).toBe(true);
  });
});
