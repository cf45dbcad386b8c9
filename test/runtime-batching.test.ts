/**
 * Dynamic batching in the serving runtime (docs/batching.md; `src/runtime/runtime.ts` "Dynamic
 * batching"): a fused batch is one device query whose inputs are its members' inputs
 * concatenated along dim 0 and whose outputs are split back, each member keeping its own record
 * and its single outcome through bad inputs, cancellation, rejection and device failure.
 *
 * Deterministic: a VirtualClock, a scripted device (`RowDevice`) whose output rows are a known
 * function of its input rows, and the scripted fusing controller of
 * `helpers/fusing-controller.ts`; the overload case runs on `sim:a100`.
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { driveUntilSettled, VirtualClock } from '../src/clock/index.ts';
import type { Device, DeviceService, GroupResult, Segment, SegmentResult } from '../src/device/device.ts';
import { SimDevice } from '../src/device/sim/index.ts';
import { BadRequestError, DeviceFailureError } from '../src/errors.ts';
import { artifactAt } from '../src/model/artifact.ts';
import { ModelRepository } from '../src/model/repository.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import type { Predictor } from '../src/predict/predictor.ts';
import type { BatchingLimits, LaunchSegment, QueryController, Rejection, WaitingQuery } from '../src/schedule/controller.ts';
import { createController } from '../src/schedule/index.ts';
import { ServingRuntime, type QueryOutcome, type RuntimeService } from '../src/runtime/runtime.ts';
import type { HostTensor, TensorMap } from '../src/tensor.ts';
import { constantArrivals, LoadGenerator } from '../src/workload/index.ts';
import { buildFixedBatchMlp, makeFixtureDir } from './fixtures/tiny-models.ts';
import { fixedPredictor } from './helpers/fixed-predictor.ts';
import { fusingController, type FusingControllerOptions } from './helpers/fusing-controller.ts';
import { SMALL_VARIANTS } from './helpers/small-variants.ts';

const LIMITS: BatchingLimits = { maxBatchSize: 8, maxQueueDelayMs: 0, preferredBatchSizes: [] };
/** Clock time one scripted group takes, ms. */
const GROUP_MS = 5;
/** Elements per sample of the small resnet50 input [batch, 3, 32, 32]. */
const SAMPLE = 3 * 32 * 32;
/** Classes of the small variant's `logits` [batch, 10]. */
const CLASSES = 10;

/** Small resnet50 (18 operators, input [batch, 3, 32, 32] float32, logits [batch, 10]). */
let spec: ModelSpec;
let operators: number;
let fixture: { dir: string; cleanup: () => Promise<void> };
beforeAll(async () => {
  fixture = await makeFixtureDir('abacus-rt-batch-');
  spec = await new ModelRepository({ cacheDir: path.join(fixture.dir, 'cache') }).zooSpec('resnet50', SMALL_VARIANTS.resnet50);
  operators = spec.operators.length;
}, 60_000);
afterAll(async () => fixture.cleanup());

/**
 * Input of query number `k`, `batch` samples: element j of sample r is `k·100000 + r·10000 + j`
 * (exact in float32 for j < 3072), so every row of every query is distinct and recognizable.
 */
function inputOf(k: number, batch = 1): TensorMap {
  const data = new Float32Array(batch * SAMPLE);
  for (let r = 0; r < batch; r++) for (let j = 0; j < SAMPLE; j++) data[r * SAMPLE + j] = k * 100_000 + r * 10_000 + j;
  return { input: { dataType: 'float32', dims: [batch, 3, 32, 32], data } };
}

/**
 * `RowDevice`'s model: logits[r, c] = input[r, c] + 0.5·c for each row r — a row's outputs
 * depend on that row only, so a member's outputs are right iff it got its own rows back.
 */
function logitsOf(x: HostTensor): HostTensor {
  const rows = x.dims[0]!;
  const per = x.data.length / rows;
  const data = new Float32Array(rows * CLASSES);
  for (let r = 0; r < rows; r++) for (let c = 0; c < CLASSES; c++) data[r * CLASSES + c] = (x.data as Float32Array)[r * per + c]! + 0.5 * c;
  return { dataType: 'float32', dims: [rows, CLASSES], data };
}

/**
 * A scripted device: each group takes `GROUP_MS` of clock time; it keeps each query's input
 * rows between segments (resume needs state at exactly `start`, as a real device), answers the
 * last segment with `logitsOf(rows)`, and fails the segments `fail` picks.
 */
class RowDevice implements Device {
  readonly id = 'rows';
  /** Every group it was asked to run (segments as given). */
  readonly groups: Segment[][] = [];
  readonly released: string[] = [];
  readonly kept = new Map<string, { next: number; x: HostTensor | undefined }>();
  fail: ((s: Segment) => boolean) | undefined;
  /** Reject the whole `runGroup` (as a device that is gone) when this picks a segment. */
  throwOn: ((s: Segment) => boolean) | undefined;
  /**
   * Answer a 'tensors' segment `bad_request` when a row's first element is ≥ this (as
   * onnxruntime refuses a token id beyond BERT's vocabulary): a value only the device checks.
   */
  refuseRowsFrom: number | undefined;
  constructor(private readonly clock: VirtualClock) {}
  load(_services: readonly DeviceService[]): Promise<void> {
    return Promise.resolve();
  }
  async runGroup(group: readonly Segment[]): Promise<GroupResult> {
    this.groups.push([...group]);
    if (group.some((s) => this.throwOn?.(s) === true)) throw new DeviceFailureError('scripted: the device is gone');
    await this.clock.sleep(GROUP_MS);
    const segments = group.map((s): SegmentResult => {
      const fail = (error: DeviceFailureError | BadRequestError): SegmentResult => {
        this.kept.delete(s.queryId);
        return { ok: false, queryId: s.queryId, service: s.service, error };
      };
      if (this.fail?.(s) === true) return fail(new DeviceFailureError(`scripted failure of ${s.queryId} [${s.start}, ${s.end})`));
      let x: HostTensor | undefined;
      if (s.input.kind === 'resume') {
        const k = this.kept.get(s.queryId);
        if (k?.next !== s.start) return fail(new BadRequestError(`no state of ${s.queryId} at operator ${s.start}`));
        x = k.x;
      } else if (s.input.kind === 'tensors') {
        x = s.input.tensors['input'];
        if (x?.dims[0] !== s.batchSize) return fail(new BadRequestError(`${s.queryId}: input rows ${String(x?.dims[0])} ≠ batchSize ${s.batchSize}`));
        const from = this.refuseRowsFrom;
        const bad = from === undefined ? -1 : [...Array(s.batchSize).keys()].find((r) => (x!.data as Float32Array)[r * SAMPLE]! >= from) ?? -1;
        if (bad >= 0) return fail(new BadRequestError(`value ${(x.data as Float32Array)[bad * SAMPLE]} out of range`));
      }
      if (s.end < operators) {
        this.kept.set(s.queryId, { next: s.end, x });
        return { ok: true, queryId: s.queryId, service: s.service, latencyMs: GROUP_MS };
      }
      this.kept.delete(s.queryId);
      const logits = x === undefined ? { dataType: 'float32' as const, dims: [s.batchSize, CLASSES], data: new Float32Array(s.batchSize * CLASSES) } : logitsOf(x);
      return { ok: true, queryId: s.queryId, service: s.service, latencyMs: GROUP_MS, outputs: { logits } };
    });
    return { groupLatencyMs: GROUP_MS, segments };
  }
  releaseQuery(_service: string, queryId: string): Promise<void> {
    this.released.push(queryId);
    this.kept.delete(queryId);
    return Promise.resolve();
  }
  close(): Promise<void> {
    return Promise.resolve();
  }
}

/**
 * A runtime serving the small resnet50 as service 'a' (batching `LIMITS`, QoS 1000 ms) and, when
 * asked, 'plain' without batching, on a `RowDevice`, with the scripted fusing controller held
 * until t = 1 ms so that everything submitted at t = 0 is fused in one batch.
 */
function setup(options: FusingControllerOptions = {}, extra: { qosTargetMs?: number; controller?: QueryController } = {}) {
  const clock = new VirtualClock();
  const device = new RowDevice(clock);
  const controller = fusingController({ gate: ({ nowMs }) => (nowMs < 1 ? 1 : undefined), ...options });
  const services: RuntimeService[] = [
    { name: 'a', spec, qosTargetMs: extra.qosTargetMs ?? 1000, maxQueueLength: 100, batching: LIMITS },
    { name: 'plain', spec, qosTargetMs: 1000, maxQueueLength: 100 },
  ];
  const runtime = new ServingRuntime({ clock, device, controller: extra.controller ?? controller, services });
  return { clock, device, controller, runtime };
}

/** Submit query `k` of service 'a' with its own input (`inputOf(k)`), id `a<k>`. */
function submitA(runtime: ServingRuntime, k: number, more: { qosTargetMs?: number; arrivalMs?: number; batch?: number } = {}): Promise<QueryOutcome> {
  return runtime.submit({ service: 'a', batch: more.batch ?? 1, id: `a${k}`, inputs: inputOf(k, more.batch ?? 1), ...more });
}

/** The member's logits must be exactly `logitsOf` its own input (copies and + 0.5·c are exact in float32). */
function expectOwnRows(o: QueryOutcome, k: number, batch = 1): void {
  expect(o.ok, o.ok ? '' : `${o.reason}: ${o.message}`).toBe(true);
  if (!o.ok) return;
  const got = o.outputs['logits']!;
  const want = logitsOf(inputOf(k, batch)['input']!);
  expect(got.dims).toEqual(want.dims);
  expect([...(got.data as Float32Array)]).toEqual([...(want.data as Float32Array)]);
}

/** Drive the clock to time `ms` (every timer due by then fires). */
async function advanceTo(clock: VirtualClock, ms: number): Promise<void> {
  await driveUntilSettled(clock, clock.sleep(ms - clock.now()));
}

describe('fused batches on a scripted device', () => {
  it('fuses the queued queries into ONE device query: inputs concatenated in queue order, each member gets its own output rows and its own record', async () => {
    const { clock, device, runtime } = setup();
    // batches 1, 2, 1, 3: 7 samples ≤ maxBatchSize 8
    const batches = [1, 2, 1, 3];
    const outcomes = batches.map((batch, k) => submitA(runtime, k, { batch }));
    const done = await driveUntilSettled(clock, Promise.all(outcomes));
    done.forEach((o, k) => expectOwnRows(o, k, batches[k]));

    expect(device.groups).toHaveLength(1);
    const [seg] = device.groups[0]!;
    expect(seg).toMatchObject({ service: 'a', start: 0, end: operators, batchSize: 7, seqLen: 0 });
    // the device query is new (none of the members' ids) and its input is the rows in queue order
    expect(['a0', 'a1', 'a2', 'a3']).not.toContain(seg!.queryId);
    expect(seg!.input.kind).toBe('tensors');
    const x = seg!.input.kind === 'tensors' ? seg!.input.tensors['input']! : undefined;
    expect(x?.dims).toEqual([7, 3, 32, 32]);
    const rowStarts = [0, 1, 2, 3, 4, 5, 6].map((r) => (x!.data as Float32Array)[r * SAMPLE]);
    // first element of each row: k·100000 + r·10000 (member k, its row r)
    expect(rowStarts).toEqual([0, 100_000, 110_000, 200_000, 300_000, 310_000, 320_000]);

    // records: one group, its segment names the members in batch order; each query ran at batch 7
    expect(runtime.groups).toHaveLength(1);
    expect(runtime.groups[0]!.segments).toEqual([{ queryId: seg!.queryId, service: 'a', start: 0, end: operators, batch: 7, seqLen: 0, members: ['a0', 'a1', 'a2', 'a3'] }]);
    for (const [k, o] of done.entries()) {
      expect(o.record).toMatchObject({ id: `a${k}`, batch: batches[k], runBatch: 7, groups: [0], outcome: 'completed', endMs: 1 + GROUP_MS });
    }
    expect(runtime.counters).toEqual({ submitted: 4, completed: 4, rejected: 0, groups: 1, pending: 0 });
    expect(device.kept.size).toBe(0);
    expect(device.released).toEqual([]);
  });

  it('a query alone in a batching service runs under its own id with runBatch = its batch; a service without batching is never fused', async () => {
    const { clock, device, runtime } = setup();
    const plain = [0, 1, 2].map((k) => runtime.submit({ service: 'plain', batch: 1, id: `p${k}`, inputs: inputOf(10 + k) }));
    const alone = submitA(runtime, 0, { batch: 2 });
    const all = await driveUntilSettled(clock, Promise.all([...plain, alone]));
    all.slice(0, 3).forEach((o, k) => expectOwnRows(o, 10 + k));
    expectOwnRows(all[3]!, 0, 2);
    // all arrived at 0: the scripted controller takes the first queue on a tie ('a', then 'plain')
    expect(device.groups.map((g) => g.map((s) => `${s.queryId}×${s.batchSize}`))).toEqual([['a0×2'], ['p0×1'], ['p1×1'], ['p2×1']]);
    expect(all.map((o) => o.record.runBatch)).toEqual([1, 1, 1, 2]);
    expect(runtime.groups.every((g) => g.segments.every((s) => s.members === undefined))).toBe(true);
  });

  it('a fused batch cut in two groups ([0, 7) then [7, N)) resumes under its one id and gives every member its own rows', async () => {
    const { clock, device, controller, runtime } = setup({ cuts: [7] });
    const outcomes = [0, 1, 2].map((k) => submitA(runtime, k));
    const done = await driveUntilSettled(clock, Promise.all(outcomes));
    done.forEach((o, k) => expectOwnRows(o, k));
    const ids = device.groups.map((g) => g.map((s) => s.queryId));
    expect(ids).toHaveLength(2);
    expect(ids[0]).toEqual(ids[1]);
    expect(device.groups.map((g) => [g[0]!.start, g[0]!.end, g[0]!.batchSize, g[0]!.input.kind])).toEqual([
      [0, 7, 3, 'tensors'],
      [7, operators, 3, 'resume'],
    ]);
    for (const o of done) expect(o.record).toMatchObject({ groups: [0, 1], runBatch: 3 });
    expect(runtime.groups.map((g) => g.segments[0]!.members)).toEqual([
      ['a0', 'a1', 'a2'],
      ['a0', 'a1', 'a2'],
    ]);
    // between the two groups the controller saw the batch as ONE query: no batching, no fuseKey
    const between = controller.seen.find((s) => s.queues.some((q) => q.some((w) => w.nextOperator === 7)))!;
    expect(between.queues.flat()).toHaveLength(1);
    const view = between.queues.flat()[0]!;
    expect(view).toMatchObject({ id: ids[0]![0], service: 'a', model: spec.name, operators, nextOperator: 7, batch: 3, seqLen: 0 });
    expect(view.batching).toBeUndefined();
    expect(view.fuseKey).toBeUndefined();
  });

  it("the fused view's deadline is its most urgent member's: arrivalMs of its first member, qosTargetMs shortened to match; it moves when that member leaves", async () => {
    const { clock, controller, runtime } = setup({ cuts: [5, 10], gate: ({ nowMs }) => (nowMs < 1 ? 1 : nowMs >= 6 && nowMs < 20 ? 20 : undefined) });
    // deadlines (arrival + QoS): a0 −3 + 200 = 197, a1 0 + 40 = 40, a2 −1 + 60 = 59, a3 0 + 500 = 500
    const outcomes = [
      submitA(runtime, 0, { arrivalMs: -3, qosTargetMs: 200 }),
      submitA(runtime, 1, { arrivalMs: 0, qosTargetMs: 40 }),
      submitA(runtime, 2, { arrivalMs: -1, qosTargetMs: 60 }),
      submitA(runtime, 3, { arrivalMs: 0, qosTargetMs: 500 }),
    ];
    // before the fusion the controller sees the four queries with their own deadlines (each submit decides, held by the gate)
    expect(controller.seen).toHaveLength(4);
    expect(controller.seen.at(-1)!.queues.flat().map((w) => [w.id, w.arrivalMs, w.qosTargetMs, w.batching?.maxBatchSize === LIMITS.maxBatchSize])).toEqual([
      ['a0', -3, 200, true],
      ['a1', 0, 40, true],
      ['a2', -1, 60, true],
      ['a3', 0, 500, true],
    ]);
    // group [0, 5) runs [1, 6); the batch then waits until 20
    await advanceTo(clock, 10);
    const fusedView = (): WaitingQuery => controller.seen.at(-1)!.queues.flat()[0]!;
    expect(fusedView()).toMatchObject({ nextOperator: 5, batch: 4, arrivalMs: -3, qosTargetMs: 43 }); // deadline 40 = −3 + 43
    expect(runtime.cancel('a1')).toBe('withdrawn');
    // a1 gone: the view is rebuilt at once (same id, same rows), now with a2's deadline 59
    await advanceTo(clock, 20);
    // the decision that launched [5, 10) at 20 (the one after it is made ahead, while that group runs)
    const atLaunch = controller.seen.findLast((s) => s.nowMs === 20 && s.queues.flat()[0]?.nextOperator === 5)!.queues.flat();
    expect(atLaunch).toHaveLength(1);
    expect(atLaunch[0]).toMatchObject({ id: fusedView().id, nextOperator: 5, batch: 4, arrivalMs: -3, qosTargetMs: 62 });
    // the first member leaves: the view's arrival becomes the next live member's (a2, −1): deadline 59 = −1 + 60
    await advanceTo(clock, 22);
    expect(runtime.cancel('a0')).toBe('after_group'); // group [5, 10) running [20, 25)
    await advanceTo(clock, 26);
    expect(controller.seen.at(-1)!.queues.flat()[0]).toMatchObject({ nextOperator: 10, batch: 4, arrivalMs: -1, qosTargetMs: 60 });
    const done = await driveUntilSettled(clock, Promise.all(outcomes));
    expect(done.map((o) => (o.ok ? 'ok' : o.reason))).toEqual(['cancelled', 'cancelled', 'ok', 'ok']);
    expectOwnRows(done[2]!, 2);
    expectOwnRows(done[3]!, 3);
  });

  it('a member with invalid input tensors is answered bad_request at submit and never joins (poisons) the batch', async () => {
    const { clock, device, runtime } = setup();
    const good = [0, 2, 3].map((k) => submitA(runtime, k));
    const wrongDims = runtime.submit({ service: 'a', batch: 1, id: 'a1', inputs: { input: { dataType: 'float32', dims: [1, 3, 16, 16], data: new Float32Array(3 * 16 * 16) } } });
    const wrongType = runtime.submit({ service: 'a', batch: 1, id: 'a4', inputs: { input: { dataType: 'int32', dims: [1, 3, 32, 32], data: new Int32Array(SAMPLE) } as unknown as HostTensor } });
    const wrongBatch = runtime.submit({ service: 'a', batch: 2, id: 'a5', inputs: inputOf(5, 1) });
    const unknownName = runtime.submit({ service: 'a', batch: 1, id: 'a6', inputs: { ...inputOf(6), extra: inputOf(6)['input']! } });
    // answered before any clock time passes, never recorded in a group
    for (const [p, pattern] of [
      [wrongDims, /input 'input' .* dim 2 must be 32/],
      [wrongType, /input 'input' .* must be float32, got int32/],
      [wrongBatch, /dim 0 must be 2 \(batchSize\), got 1/],
      [unknownName, /unknown input 'extra'/],
    ] as const) {
      const o = await p;
      expect(o.ok === false && o.reason).toBe('bad_request');
      expect(o.ok === false && o.message).toMatch(pattern);
      expect(o.record).toMatchObject({ groups: [], endMs: 0, outcome: 'rejected', reason: 'bad_request' });
      expect(o.record.runBatch).toBeUndefined();
    }
    expect(runtime.queueLength('a')).toBe(3);
    const done = await driveUntilSettled(clock, Promise.all(good));
    done.forEach((o, i) => expectOwnRows(o, [0, 2, 3][i]!));
    expect(device.groups).toHaveLength(1);
    expect(device.groups[0]![0]!.batchSize).toBe(3);
    expect(runtime.groups[0]!.segments[0]!.members).toEqual(['a0', 'a2', 'a3']);
    expect(runtime.counters).toMatchObject({ submitted: 7, completed: 3, rejected: 4, pending: 0 });
  });

  it('queries with synthetic inputs never fuse with queries carrying tensors (different fuseKey); each kind fuses with its own', async () => {
    const { clock, device, runtime } = setup();
    const outcomes = [submitA(runtime, 0), runtime.submit({ service: 'a', batch: 1, id: 's1' }), submitA(runtime, 2), runtime.submit({ service: 'a', batch: 2, id: 's3' })];
    const done = await driveUntilSettled(clock, Promise.all(outcomes));
    expect(done.every((o) => o.ok)).toBe(true);
    expectOwnRows(done[0]!, 0);
    expectOwnRows(done[2]!, 2);
    expect(runtime.groups.map((g) => g.segments[0]!.members)).toEqual([
      ['a0', 'a2'],
      ['s1', 's3'],
    ]);
    expect(device.groups.map((g) => [g[0]!.batchSize, g[0]!.input.kind])).toEqual([
      [2, 'tensors'],
      [3, 'synthetic'],
    ]);
    // synthetic members get their rows of the (zero) outputs: [batch, 10]
    expect(done[1]!.ok && done[1]!.outputs['logits']!.dims).toEqual([1, CLASSES]);
    expect(done[3]!.ok && done[3]!.outputs['logits']!.dims).toEqual([2, CLASSES]);
  });

  it('maxBatchSize bounds a batch: the followers that do not fit wait for the next one', async () => {
    const { clock, device, runtime } = setup();
    // 3 + 4 = 7, then + 2 > 8: the third starts the next batch with the fourth
    const batches = [3, 4, 2, 1];
    const done = await driveUntilSettled(clock, Promise.all(batches.map((batch, k) => submitA(runtime, k, { batch }))));
    done.forEach((o, k) => expectOwnRows(o, k, batches[k]));
    expect(device.groups.map((g) => g[0]!.batchSize)).toEqual([7, 3]);
    expect(done.map((o) => o.record.runBatch)).toEqual([7, 7, 3, 3]);
  });

  it('a query larger than maxBatchSize runs alone and nothing is fused behind it', async () => {
    const { clock, device, runtime } = setup();
    const batches = [9, 1, 2];
    const done = await driveUntilSettled(clock, Promise.all(batches.map((batch, k) => submitA(runtime, k, { batch }))));
    done.forEach((o, k) => expectOwnRows(o, k, batches[k]));
    expect(device.groups.map((g) => g[0]!.batchSize)).toEqual([9, 3]);
    expect(runtime.groups.map((g) => g.segments[0]!.members)).toEqual([undefined, ['a1', 'a2']]);
  });

  it('launchWhileBusy with one group per service (Triton-like): services overlap, a service never runs two groups at once, each member gets its own rows', async () => {
    const clock = new VirtualClock();
    const device = new RowDevice(clock);
    const runtime = new ServingRuntime({
      clock,
      device,
      controller: fusingController({ launchWhileBusy: true }),
      services: ['a', 'b'].map((name) => ({ name, spec, qosTargetMs: 1000, maxQueueLength: 100, batching: LIMITS })),
    });
    // at 0: a0 and b0 launch at once, alone; a1..a3 and b1, b2 wait for their service's group
    const outcomes = [0, 1, 2, 3].map((k) => submitA(runtime, k));
    outcomes.push(...[0, 1, 2].map((k) => runtime.submit({ service: 'b', batch: 1, id: `b${k}`, inputs: inputOf(10 + k) })));
    await advanceTo(clock, 2);
    const late = runtime.submit({ service: 'a', batch: 1, id: 'a4', inputs: inputOf(4) });
    const done = await driveUntilSettled(clock, Promise.all([...outcomes, late]));
    [0, 1, 2, 3].forEach((k) => expectOwnRows(done[k]!, k));
    [0, 1, 2].forEach((k) => expectOwnRows(done[4 + k]!, 10 + k));
    expectOwnRows(done[7]!, 4);
    expect(runtime.groups.map((g) => [g.launchMs, g.segments[0]!.service, g.segments[0]!.batch, g.segments[0]!.members])).toEqual([
      [0, 'a', 1, undefined],
      [0, 'b', 1, undefined],
      [GROUP_MS, 'a', 4, ['a1', 'a2', 'a3', 'a4']],
      [GROUP_MS, 'b', 2, ['b1', 'b2']],
    ]);
    expect(runtime.counters).toMatchObject({ completed: 8, rejected: 0, pending: 0 });
  });
});

describe('cancelling members of a fused batch', () => {
  it('a member cancelled before the launch leaves the batch: it is not fused, and the others keep their own rows', async () => {
    const { clock, device, runtime } = setup();
    const outcomes = [0, 1, 2, 3].map((k) => submitA(runtime, k));
    expect(runtime.cancel('a1', 'client went away')).toBe('withdrawn');
    const done = await driveUntilSettled(clock, Promise.all(outcomes));
    expect(done[1]!.ok === false && [done[1]!.reason, done[1]!.message]).toEqual(['cancelled', 'client went away']);
    expect(done[1]!.record).toMatchObject({ groups: [], endMs: 0 });
    for (const k of [0, 2, 3]) expectOwnRows(done[k]!, k);
    expect(device.groups[0]![0]!.batchSize).toBe(3);
    expect(runtime.groups[0]!.segments[0]!.members).toEqual(['a0', 'a2', 'a3']);
  });

  it('a member cancelled while its batch waits between two segments is answered cancelled at once; the others complete with their own rows, the rows ride along', async () => {
    // group [0, 7) runs [1, 6); the batch waits until 20; group [7, N) runs [20, 25)
    const { clock, device, runtime } = setup({ cuts: [7], gate: ({ nowMs }) => (nowMs < 1 ? 1 : nowMs >= 6 && nowMs < 20 ? 20 : undefined) });
    const outcomes = [0, 1, 2, 3].map((k) => submitA(runtime, k));
    await advanceTo(clock, 10);
    expect(runtime.cancel('a1', 'gone')).toBe('withdrawn');
    const a1 = await outcomes[1]!;
    expect(a1.ok === false && [a1.reason, a1.message]).toEqual(['cancelled', 'gone']);
    expect(a1.record).toMatchObject({ endMs: 10, groups: [0], runBatch: 4 });
    expect(runtime.queueLength('a')).toBe(3);
    expect(device.released).toEqual([]); // the batch's state is still needed
    const done = await driveUntilSettled(clock, Promise.all(outcomes));
    for (const k of [0, 2, 3]) {
      expectOwnRows(done[k]!, k);
      expect(done[k]!.record).toMatchObject({ groups: [0, 1], endMs: 20 + GROUP_MS });
    }
    // the second segment still carries 4 rows (the batch's state on the device has 4), 3 members
    expect(device.groups[1]![0]).toMatchObject({ start: 7, end: operators, batchSize: 4, input: { kind: 'resume' } });
    expect(runtime.groups[1]!.segments[0]).toMatchObject({ batch: 4, members: ['a0', 'a2', 'a3'] });
    expect(device.released).toEqual([]);
  });

  it('a member cancelled while its group runs ends after that group: cancelled if the batch has operators left, completed if that group finished the model', async () => {
    const { clock, device, runtime } = setup({ cuts: [7] });
    // group [0, 7) runs [1, 6), group [7, N) runs [6, 11)
    const outcomes = [0, 1, 2].map((k) => submitA(runtime, k));
    await advanceTo(clock, 3);
    expect(runtime.cancel('a1', 'mid-group')).toBe('after_group');
    await advanceTo(clock, 8);
    expect(runtime.cancel('a2', 'too late')).toBe('after_group');
    const done = await driveUntilSettled(clock, Promise.all(outcomes));
    expect(done[1]!.ok === false && [done[1]!.reason, done[1]!.message]).toEqual(['cancelled', 'mid-group']);
    expect(done[1]!.record).toMatchObject({ endMs: 1 + GROUP_MS, groups: [0] });
    expectOwnRows(done[0]!, 0);
    expectOwnRows(done[2]!, 2); // its last group ran: the work is done, the outputs delivered
    expect(done[2]!.record).toMatchObject({ outcome: 'completed', endMs: 1 + 2 * GROUP_MS, groups: [0, 1] });
    expect(runtime.groups[1]!.segments[0]!.members).toEqual(['a0', 'a2']);
    expect(device.released).toEqual([]);
  });

  it('every member cancelled between segments: the fused device query is released once and never launched again', async () => {
    const { clock, device, runtime } = setup({ cuts: [7], gate: ({ nowMs }) => (nowMs < 1 ? 1 : nowMs >= 6 && nowMs < 20 ? 20 : undefined) });
    const outcomes = [0, 1, 2].map((k) => submitA(runtime, k));
    await advanceTo(clock, 10);
    const fusedId = device.groups[0]![0]!.queryId;
    expect(device.kept.has(fusedId)).toBe(true);
    expect(['a0', 'a1'].map((id) => runtime.cancel(id))).toEqual(['withdrawn', 'withdrawn']);
    expect(device.released).toEqual([]);
    expect(runtime.cancel('a2')).toBe('withdrawn');
    expect(device.released).toEqual([fusedId]);
    const done = await driveUntilSettled(clock, Promise.all(outcomes));
    expect(done.map((o) => (o.ok ? 'ok' : o.reason))).toEqual(['cancelled', 'cancelled', 'cancelled']);
    await advanceTo(clock, 40);
    expect(device.groups).toHaveLength(1);
    expect(device.released).toEqual([fusedId]);
    expect(runtime.queueLength('a')).toBe(0);
    expect(runtime.counters).toMatchObject({ submitted: 3, completed: 0, rejected: 3, groups: 1, pending: 0 });
  });

  it('every member cancelled while the group runs: all end after it, and the device state is released', async () => {
    const { clock, device, runtime } = setup({ cuts: [7] });
    const outcomes = [0, 1].map((k) => submitA(runtime, k));
    await advanceTo(clock, 3);
    expect(['a0', 'a1'].map((id) => runtime.cancel(id))).toEqual(['after_group', 'after_group']);
    const done = await driveUntilSettled(clock, Promise.all(outcomes));
    expect(done.map((o) => (o.ok ? 'ok' : o.reason))).toEqual(['cancelled', 'cancelled']);
    expect(device.released).toEqual([device.groups[0]![0]!.queryId]);
    expect(device.groups).toHaveLength(1);
  });
});

describe('rejection and failure of a fused batch reach every member', () => {
  it('the controller rejecting the fused id rejects every member (qos_violation) and releases its device state', async () => {
    const { clock, device, runtime } = setup({ cuts: [7], reject: (q) => q.nextOperator === 7 });
    const done = await driveUntilSettled(clock, Promise.all([0, 1, 2].map((k) => submitA(runtime, k))));
    for (const o of done) {
      expect(o.ok === false && o.reason).toBe('qos_violation');
      expect(o.ok === false && o.message).toMatch(/dropped by the fcfs controller: headroom/);
      expect(o.record).toMatchObject({ groups: [0], runBatch: 3, endMs: 1 + GROUP_MS });
    }
    expect(device.groups).toHaveLength(1);
    expect(device.released).toEqual([device.groups[0]![0]!.queryId]);
  });

  it('a failed fused segment fails every member (device_failure); a query of another service in the same runtime is unaffected', async () => {
    const { clock, device, runtime } = setup({ cuts: [7] });
    device.fail = (s) => s.service === 'a' && s.start === 7;
    const members = [0, 1, 2].map((k) => submitA(runtime, k));
    const plain = runtime.submit({ service: 'plain', batch: 1, id: 'p', inputs: inputOf(9) });
    const done = await driveUntilSettled(clock, Promise.all(members));
    for (const o of done) {
      expect(o.ok === false && [o.reason, o.message]).toEqual(['device_failure', expect.stringMatching(/scripted failure of .* \[7, 18\)/)]);
      expect(o.record.groups).toHaveLength(2);
    }
    expectOwnRows(await driveUntilSettled(clock, plain), 9);
    expect(runtime.counters).toMatchObject({ completed: 1, rejected: 3, pending: 0 });
  });

  it('a fused segment the device refuses (bad_request: a value only the device checks) is split: every member reruns alone, only the bad one fails, with its own message', async () => {
    const { clock, device, runtime } = setup();
    device.refuseRowsFrom = 5_000_000; // query 66's row starts at 6,600,000
    const done = await driveUntilSettled(clock, Promise.all([0, 66, 2].map((k) => submitA(runtime, k))));
    expectOwnRows(done[0]!, 0);
    expectOwnRows(done[2]!, 2);
    const bad = done[1]!;
    expect(bad.ok === false && [bad.reason, bad.message]).toEqual(['bad_request', 'value 6600000 out of range']);
    // the fused group, then each member alone (not fused again), in queue order
    expect(device.groups.map((g) => g.map((s) => [s.batchSize, s.start, s.end]))).toEqual([[[3, 0, operators]], [[1, 0, operators]], [[1, 0, operators]], [[1, 0, operators]]]);
    expect(device.groups.slice(1).map((g) => g[0]!.queryId)).toEqual(['a0', 'a66', 'a2']);
    for (const o of [done[0]!, done[2]!]) expect(o.record).toMatchObject({ runBatch: 1, groups: [0, expect.any(Number)], outcome: 'completed' });
    expect(runtime.counters).toMatchObject({ completed: 2, rejected: 1, pending: 0 });
    expect(device.kept.size).toBe(0);
  });

  it('a device that rejects the whole group fails every member of the fused batch', async () => {
    const { clock, device, runtime } = setup();
    device.throwOn = (s) => s.batchSize > 1;
    const done = await driveUntilSettled(clock, Promise.all([0, 1, 2].map((k) => submitA(runtime, k))));
    for (const o of done) expect(o.ok === false && [o.reason, o.message]).toEqual(['device_failure', 'the device refused the group: scripted: the device is gone']);
    expect(runtime.groups).toHaveLength(1);
    expect(runtime.groups[0]!.measuredMs).toBeNaN();
    expect(runtime.counters.pending).toBe(0);
  });

  it('close() answers the waiting members of a fused batch (overloaded) and releases its state', async () => {
    const { clock, device, runtime } = setup({ cuts: [7], gate: ({ nowMs }) => (nowMs < 1 ? 1 : nowMs >= 6 && nowMs < 20 ? 20 : undefined) });
    const outcomes = [0, 1].map((k) => submitA(runtime, k));
    await advanceTo(clock, 10);
    runtime.close();
    const done = await driveUntilSettled(clock, Promise.all(outcomes));
    expect(done.map((o) => (o.ok ? 'ok' : o.reason))).toEqual(['overloaded', 'overloaded']);
    expect(device.released).toEqual([device.groups[0]![0]!.queryId]);
  });
});

describe('RuntimeService batching validation', () => {
  const services = (batching: BatchingLimits, s: ModelSpec = spec): RuntimeService[] => [{ name: 'svc', spec: s, qosTargetMs: 100, maxQueueLength: 10, batching }];
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
    const transposed: ModelSpec = { ...spec, outputs: [{ ...spec.outputs[0]!, shape: [CLASSES, 'batch'] }] };
    expect(make(LIMITS, transposed)).toThrow(/queries cannot be fused: output 'logits' of resnet50 has dim 0 10, not the batch axis 'batch'/);
    const flattened: ModelSpec = { ...spec, outputs: [{ ...spec.outputs[0]!, shape: ['batch', 'batch*10'] }] };
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
  const seg = (queryId: string, service: string, fused?: string[], start = 0): LaunchSegment => ({ queryId, service, start, end: operators, ...(fused ? { fused } : {}) });
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
        { name: 'a', spec, qosTargetMs: 1000, maxQueueLength: 100, batching: LIMITS },
        { name: 'plain', spec, qosTargetMs: 1000, maxQueueLength: 100 },
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
