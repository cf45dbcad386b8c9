/**
 * Dynamic batching in the serving runtime, continued (`runtime-batching.test.ts` has the fused
 * batches' rows, cancellation, rejection and failure): `RuntimeService` batching validation,
 * fused batches on `sim:a100` (VirtualClock), and controllers that break the fusing contract.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { driveUntilSettled, VirtualClock } from '../src/clock/index.ts';
import { SimDevice } from '../src/device/sim/index.ts';
import { artifactAt } from '../src/model/artifact.ts';
import { ModelRepository } from '../src/model/repository.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import type { Predictor } from '../src/predict/predictor.ts';
import type { BatchingLimits, LaunchSegment, QueryController, Rejection } from '../src/schedule/controller.ts';
import { createController } from '../src/schedule/index.ts';
import { ServingRuntime, type QueryOutcome, type RuntimeService } from '../src/runtime/runtime.ts';
import { constantArrivals, LoadGenerator } from '../src/workload/index.ts';
import { buildFixedBatchMlp, makeFixtureDir } from './fixtures/tiny-models.ts';
import { fixedPredictor } from './helpers/fixed-predictor.ts';
import { fusingController } from './helpers/fusing-controller.ts';
import { CLASSES, expectOwnRows, inputOf, LIMITS, RowDevice, setup, submitA, useSmallResnet } from './helpers/row-device.ts';

const fx = useSmallResnet();

describe('RuntimeService batching validation', () => {
  const services = (batching: BatchingLimits, s: ModelSpec = fx.spec): RuntimeService[] => [{ name: 'svc', spec: s, qosTargetMs: 100, maxQueueLength: 10, batching }];
  const make = (batching: BatchingLimits, s?: ModelSpec) => (): ServingRuntime => {
    const clock = new VirtualClock();
    return new ServingRuntime({ clock, device: new RowDevice(clock), controller: fusingController(), services: services(batching, s) });
  };

  it.each([
    [{ maxBatchSize: 0, maxQueueDelayMs: 0, preferredBatchSizes: [] }, /service 'svc' batching\.maxBatchSize must be an integer ≥ 1, got 0/],
    [{ maxBatchSize: 2.5, maxQueueDelayMs: 0, preferredBatchSizes: [] }, /maxBatchSize must be an integer ≥ 1, got 2\.5/],
    [{ maxBatchSize: NaN, maxQueueDelayMs: 0, preferredBatchSizes: [] }, /maxBatchSize must be an integer ≥ 1, got NaN/],
    [{ maxBatchSize: 4, maxQueueDelayMs: -1, preferredBatchSizes: [] }, /service 'svc' batching\.maxQueueDelayMs must be a finite number ≥ 0, got -1/],
    [{ maxBatchSize: 4, maxQueueDelayMs: Infinity, preferredBatchSizes: [] }, /maxQueueDelayMs must be a finite number ≥ 0, got Infinity/],
    [{ maxBatchSize: 4, maxQueueDelayMs: 0, preferredBatchSizes: [2, 2] }, /preferredBatchSizes must be ascending integers in \[1, maxBatchSize 4\], got \[2, 2\]/],
    [{ maxBatchSize: 4, maxQueueDelayMs: 0, preferredBatchSizes: [2, 8] }, /preferredBatchSizes .* got \[2, 8\]/],
    [{ maxBatchSize: 4, maxQueueDelayMs: 0, preferredBatchSizes: [0] }, /preferredBatchSizes .* got \[0\]/],
    [{ maxBatchSize: 4, maxQueueDelayMs: 0, preferredBatchSizes: [1.5] }, /preferredBatchSizes .* got \[1\.5\]/],
  ] as [BatchingLimits, RegExp][])('refuses %o with a RangeError naming the service and the field', (batching, message) => {
    expect(make(batching)).toThrow(RangeError);
    expect(make(batching)).toThrow(message);
  });

  it('accepts good limits (preferred sizes ascending, ≤ maxBatchSize) and keeps its own frozen copy', () => {
    const preferred = [2, 4];
    const clock = new VirtualClock();
    const controller = fusingController();
    const runtime = new ServingRuntime({ clock, device: new RowDevice(clock), controller, services: services({ maxBatchSize: 4, maxQueueDelayMs: 2.5, preferredBatchSizes: preferred }) });
    preferred.push(99); // the caller's array changes after the runtime was built
    void runtime.submit({ service: 'svc', batch: 1 });
    const view = controller.seen[0]!.queues[0]![0]!;
    expect(view.batching).toEqual({ maxBatchSize: 4, maxQueueDelayMs: 2.5, preferredBatchSizes: [2, 4] });
    expect(Object.isFrozen(view.batching)).toBe(true);
    expect(Object.isFrozen(view.batching!.preferredBatchSizes)).toBe(true);
    expect(view.fuseKey).toBe('synthetic seq=0');
  });

  it('refuses batching for a model that cannot be fused: a fixed batch (numeric dim 0), an output using the batch axis elsewhere', async () => {
    const { dir, cleanup } = await makeFixtureDir('abacus-rt-fixed-');
    try {
      const fixed = (await buildFixedBatchMlp(dir, 4)).spec;
      expect(make(LIMITS, fixed)).toThrow(/service 'svc' batching: queries cannot be fused: input 'x' of fixedmlp has dim 0 4, not the batch axis/);
      // without batching the same model serves (at its fixed batch)
      const clock = new VirtualClock();
      expect(() => new ServingRuntime({ clock, device: new RowDevice(clock), controller: fusingController(), services: [{ name: 'svc', spec: fixed, qosTargetMs: 100, maxQueueLength: 10 }] })).not.toThrow();
    } finally {
      await cleanup();
    }
    const transposed: ModelSpec = { ...fx.spec, outputs: [{ ...fx.spec.outputs[0]!, shape: [CLASSES, 'batch'] }] };
    expect(make(LIMITS, transposed)).toThrow(/queries cannot be fused: output 'logits' of resnet50 has dim 0 10, not the batch axis 'batch'/);
    const flattened: ModelSpec = { ...fx.spec, outputs: [{ ...fx.spec.outputs[0]!, shape: ['batch', 'batch*10'] }] };
    expect(make(LIMITS, flattened)).toThrow(/output 'logits' of resnet50 uses the batch axis in dim 1/);
  });
});

describe('fused batches on sim:a100 (VirtualClock)', () => {
  let full: ModelSpec[];
  beforeAll(async () => {
    const repo = new ModelRepository();
    full = [await repo.zooSpec('resnet50'), await repo.zooSpec('vgg16')];
  }, 60_000);

  async function simSetup(controller: (predictor: Predictor) => QueryController, maxQueueLength: number, qosTargetMs: number) {
    const clock = new VirtualClock();
    const device = await SimDevice.create({ clock, id: 'sim:a100', seed: 3 });
    const services: RuntimeService[] = full.map((s) => ({ name: s.name, spec: s, qosTargetMs, maxQueueLength, batching: { maxBatchSize: 16, maxQueueDelayMs: 0, preferredBatchSizes: [] } }));
    await device.load(services.map((s) => ({ name: s.name, model: artifactAt('/nonexistent', s.spec) })));
    const runtime = new ServingRuntime({ clock, device, controller: controller(fixedPredictor(full.map((s) => s.name), 0.3)), services });
    return { clock, device, runtime };
  }

  it('the sim device runs a fused segment of synthetic queries: one batch-4 group, each member gets its [1, 1000] logits, faster than four solo runs', async () => {
    const solo = await simSetup(() => fusingController({ maxFollowers: 0 }), 100, 1000);
    const fused = await simSetup(() => fusingController({ gate: ({ nowMs }) => (nowMs < 1 ? 1 : undefined) }), 100, 1000);
    const results: QueryOutcome[][] = [];
    for (const { clock, runtime, device } of [solo, fused]) {
      const outs = await driveUntilSettled(clock, Promise.all([0, 1, 2, 3].map((k) => runtime.submit({ service: 'resnet50', batch: 1, id: `r${k}` }))));
      results.push(outs);
      await device.close();
    }
    expect(solo.runtime.groups).toHaveLength(4);
    expect(fused.runtime.groups).toHaveLength(1);
    expect(fused.runtime.groups[0]!.segments[0]).toMatchObject({ batch: 4, start: 0, end: full[0]!.operators.length, members: ['r0', 'r1', 'r2', 'r3'] });
    for (const outs of results) for (const o of outs) {
      expect(o.ok).toBe(true);
      if (o.ok) expect(Object.values(o.outputs).map((t) => t.dims[0])).toEqual(Object.values(o.outputs).map(() => 1));
    }
    // batching's point (docs/design.md#dynamic-batching: batch 16 takes 1–3× batch 1): 4 samples at once cost less than 4 one at a time
    const soloMs = solo.runtime.groups.reduce((s, g) => s + g.measuredMs, 0);
    expect(fused.runtime.groups[0]!.measuredMs).toBeLessThan(soloMs);
    expect(fused.runtime.groups[0]!.measuredMs).toBeGreaterThan(soloMs / 4);
  });

  /** Every controller, and two scripted fusing ones, run the overload case with batching on. */
  const OVERLOAD_CONTROLLERS: [string, (p: Predictor) => QueryController][] = [
    ['fcfs', (p) => createController('fcfs', {}, p)],
    ['scripted fuse-all', () => fusingController()],
    ['scripted fuse-4, cut at 6 and 12', () => fusingController({ maxFollowers: 3, cuts: [6, 12] })],
    ['abacus', (p) => createController('abacus', {}, p)],
    ['fcfs-batch', (p) => createController('fcfs-batch', {}, p)],
    ['edf-batch', (p) => createController('edf-batch', {}, p)],
    ['clockwork', (p) => createController('clockwork', {}, p)],
    ['triton', (p) => createController('triton', {}, p)],
    ['overlap-all', () => createController('overlap-all')],
  ];

  it.each(OVERLOAD_CONTROLLERS)('%s: a 10× overload burst with batching on loses no query and answers none twice', async (name, make) => {
    const { clock, device, runtime } = await simSetup(make, 20, 40);
    const seen = new Map<string, number>();
    const outcomes: QueryOutcome[] = [];
    const work = (async () => {
      const pending: Promise<void>[] = [];
      // 1000 queries of 1 to 4 samples within 125 ms: about 10× what the device serves batched (fuse-all: ~75 queries per 100 ms), ~60× unbatched
      const gen = new LoadGenerator({ clock, arrivals: constantArrivals(8000), services: full.map((s) => ({ service: s.name, batchSizes: { values: [1, 1, 2, 4] } })), seed: 4, maxQueries: 1000 });
      await gen.run((q) =>
        pending.push(
          runtime.submit({ service: q.service, batch: q.batch, arrivalMs: q.arrivalMs }).then((o) => {
            outcomes.push(o);
            seen.set(o.record.id, (seen.get(o.record.id) ?? 0) + 1);
          }),
        ),
      );
      await Promise.all(pending);
      await runtime.drained();
    })();
    await driveUntilSettled(clock, work);
    expect(outcomes).toHaveLength(1000);
    expect(seen.size).toBe(1000);
    expect([...seen.values()].every((n) => n === 1)).toBe(true);
    expect(runtime.counters).toMatchObject({ submitted: 1000, pending: 0 });
    expect(runtime.counters.completed + runtime.counters.rejected).toBe(1000);
    expect(runtime.queries.every((q) => q.outcome !== 'pending')).toBe(true);
    const reasons = new Set(outcomes.flatMap((o) => (o.ok ? [] : [o.reason])));
    expect(reasons.has('overloaded')).toBe(true);
    for (const r of reasons) expect(['overloaded', 'qos_violation']).toContain(r);
    // each completed query ran its operators exactly once, in order, in the segments that carried it
    const carried = (g: (typeof runtime.groups)[number], id: string) => g.segments.find((s) => s.queryId === id || (s.members?.includes(id) ?? false));
    for (const o of outcomes) {
      if (!o.ok) continue;
      const segs = o.record.groups.map((gi) => carried(runtime.groups[gi]!, o.record.id)!);
      expect(segs[0]!.start).toBe(0);
      for (let i = 1; i < segs.length; i++) expect(segs[i]!.start).toBe(segs[i - 1]!.end);
      expect(segs.at(-1)!.end).toBe(full.find((s) => s.name === o.record.service)!.operators.length);
      expect(o.record.runBatch).toBe(segs[0]!.batch);
      expect(o.record.runBatch).toBeGreaterThanOrEqual(o.record.batch);
      expect(o.record.runBatch).toBeLessThanOrEqual(16);
      for (const t of Object.values(o.outputs)) expect(t.dims[0]).toBe(o.record.batch);
    }
    if (name.startsWith('scripted')) expect(runtime.groups.some((g) => (g.segments[0]!.members?.length ?? 0) > 1)).toBe(true);
    await device.close();
  });
});

describe('a controller that breaks the fusing contract', () => {
  const NO_STATS = { predictorCalls: 0, groupsScored: 0, searchRounds: 0, soloMemoHits: 0 };
  type Bad = () => { group: LaunchSegment[]; rejected?: Rejection[] };
  const seg = (queryId: string, service: string, fused?: string[], start = 0): LaunchSegment => ({ queryId, service, start, end: fx.operators, ...(fused ? { fused } : {}) });
  const CASES: [string, Bad][] = [
    ['fuses past maxBatchSize (4 + 4 + 4 > 8)', () => ({ group: [seg('a0', 'a', ['a1', 'a2'])] })],
    ['fuses a query of another service', () => ({ group: [seg('a0', 'a', ['p0'])] })],
    ['fuses queries of a service without batching', () => ({ group: [seg('p0', 'plain', ['p1'])] })],
    ['fuses a query twice', () => ({ group: [seg('a0', 'a', ['a1', 'a1'])] })],
    ['fuses a query with synthetic inputs behind one with tensors (another fuseKey)', () => ({ group: [seg('a0', 'a', ['s3'])] })],
    ['launches a query as a lead and fused behind another', () => ({ group: [seg('a0', 'a', ['a1']), seg('a1', 'a')] })],
    ['launches and rejects the same query', () => ({ group: [seg('a0', 'a', ['a1'])], rejected: [{ queryId: 'a1', service: 'a', reason: 'qos_violation', headroomMs: 1 }] })],
    ['launches an unknown query', () => ({ group: [seg('nope', 'a')] })],
    ['starts a query at another operator than its next', () => ({ group: [seg('a0', 'a', undefined, 3)] })],
  ];

  it.each(CASES)('%s: a controller failure — the visible queries are answered device_failure; nothing throws, none is left waiting', async (_name, bad) => {
    const clock = new VirtualClock();
    const device = new RowDevice(clock);
    let calls = 0;
    const good = fusingController();
    const controller: QueryController = {
      policy: 'fcfs',
      launchWhileBusy: false,
      observe: () => undefined,
      decide: (input) => {
        calls++;
        if (input.nowMs < 1) return { group: [], rejected: [], stats: NO_STATS, wakeAtMs: 1 };
        if (calls > 100) throw new Error('the runtime keeps asking: a loop');
        const d = bad();
        return calls === 7 ? { group: d.group, rejected: d.rejected ?? [], stats: NO_STATS } : good.decide(input);
      },
    };
    const runtime = new ServingRuntime({
      clock,
      device,
      controller,
      services: [
        { name: 'a', spec: fx.spec, qosTargetMs: 1000, maxQueueLength: 100, batching: LIMITS },
        { name: 'plain', spec: fx.spec, qosTargetMs: 1000, maxQueueLength: 100 },
      ],
    });
    // 6 submits decide (held) at t = 0; the 7th decision, at t = 1, is the bad one
    const outcomes = [
      ...[0, 1, 2].map((k) => submitA(runtime, k, { batch: 4 })),
      runtime.submit({ service: 'a', batch: 1, id: 's3' }),
      runtime.submit({ service: 'plain', batch: 1, id: 'p0', inputs: inputOf(10) }),
      runtime.submit({ service: 'plain', batch: 1, id: 'p1', inputs: inputOf(11) }),
    ];
    const done = await driveUntilSettled(clock, Promise.all(outcomes), { idleTimeoutMs: 5000 });
    for (const o of done) {
      expect(o.ok).toBe(false);
      expect(o.ok === false && [o.reason, o.message]).toEqual(['device_failure', expect.stringMatching(/^the fcfs controller failed: controller fcfs .*\(internal error\)$/)]);
    }
    expect(device.groups).toEqual([]);
    expect(runtime.counters).toMatchObject({ submitted: 6, rejected: 6, pending: 0, groups: 0 });
  });

  it('a launchWhileBusy controller that launches part of a query (it leaves the queues at launch, so its rest would never run) has failed: device_failure, none left pending', async () => {
    const { clock, device, runtime } = setup({ launchWhileBusy: true, cuts: [7] });
    const outcomes = [submitA(runtime, 0), submitA(runtime, 1)];
    const done = await driveUntilSettled(clock, Promise.all(outcomes), { idleTimeoutMs: 2000 });
    for (const o of done) {
      expect(o.ok === false && [o.reason, o.message]).toEqual(['device_failure', expect.stringMatching(/^the fcfs controller failed: controller fcfs .*whole queries only \(internal error\)$/)]);
    }
    expect(device.groups).toEqual([]);
    expect(runtime.counters).toMatchObject({ submitted: 2, rejected: 2, pending: 0, groups: 0 });
    expect(runtime.queueLength('a')).toBe(0);
  });

  it('a fused batch never takes the id of a pending query (a client may choose any id)', async () => {
    const { clock, device, runtime } = setup();
    const outcomes = [submitA(runtime, 0), submitA(runtime, 1)];
    // ids a client could pick that look like the runtime's fused ids
    const lookalikes = ['a0+1@0', 'a0+1@1', "a0+1@0'"].map((id, k) => runtime.submit({ service: 'plain', batch: 1, id, inputs: inputOf(20 + k) }));
    const done = await driveUntilSettled(clock, Promise.all([...outcomes, ...lookalikes]), { idleTimeoutMs: 5000 });
    done.slice(0, 2).forEach((o, k) => expectOwnRows(o, k));
    done.slice(2).forEach((o, k) => expectOwnRows(o, 20 + k));
    const ids = device.groups.map((g) => g[0]!.queryId);
    expect(new Set(ids).size).toBe(4);
  });
});
