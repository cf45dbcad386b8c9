/**
 * Dynamic batching in the serving runtime (docs/batching.md; `src/runtime/runtime.ts` "Dynamic
 * batching"): a fused batch is one device query whose inputs are its members' inputs
 * concatenated along dim 0 and whose outputs are split back, each member keeping its own record
 * and its single outcome through bad inputs, cancellation, rejection and device failure.
 *
 * Deterministic: a VirtualClock, a scripted device (`RowDevice`) whose output rows are a known
 * function of its input rows, and the scripted fusing controller of
 * `helpers/fusing-controller.ts` (fixture: `helpers/row-device.ts`). Validation, `sim:a100` and
 * controllers that break the fusing contract: `runtime-batching-contract.test.ts`.
 */
import { describe, expect, it } from 'vitest';
import { driveUntilSettled, VirtualClock } from '../src/clock/index.ts';
import type { WaitingQuery } from '../src/schedule/controller.ts';
import { ServingRuntime } from '../src/runtime/runtime.ts';
import type { HostTensor } from '../src/tensor.ts';
import { fusingController } from './helpers/fusing-controller.ts';
import { advanceTo, CLASSES, expectOwnRows, GROUP_MS, inputOf, LIMITS, RowDevice, SAMPLE, setup, submitA, useSmallResnet } from './helpers/row-device.ts';

const fx = useSmallResnet();

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
    expect(seg).toMatchObject({ service: 'a', start: 0, end: fx.operators, batchSize: 7, seqLen: 0 });
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
    expect(runtime.groups[0]!.segments).toEqual([{ queryId: seg!.queryId, service: 'a', start: 0, end: fx.operators, batch: 7, seqLen: 0, members: ['a0', 'a1', 'a2', 'a3'] }]);
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
      [7, fx.operators, 3, 'resume'],
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
    expect(view).toMatchObject({ id: ids[0]![0], service: 'a', model: fx.spec.name, operators: fx.operators, nextOperator: 7, batch: 3, seqLen: 0 });
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
      services: ['a', 'b'].map((name) => ({ name, spec: fx.spec, qosTargetMs: 1000, maxQueueLength: 100, batching: LIMITS })),
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
    expect(device.groups[1]![0]).toMatchObject({ start: 7, end: fx.operators, batchSize: 4, input: { kind: 'resume' } });
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
    expect(device.groups.map((g) => g.map((s) => [s.batchSize, s.start, s.end]))).toEqual([[[3, 0, fx.operators]], [[1, 0, fx.operators]], [[1, 0, fx.operators]], [[1, 0, fx.operators]]]);
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
