/**
 * Decisions made while a group runs, and rejections on time (docs/design.md#deciding-ahead; the runtime's `decideAhead`, `heads.ts` `hopelessAtMs`): on a VirtualClock, a
 * device whose groups take exactly (or a set multiple of) what the fixed predictor predicts, so
 * every instant is known in advance and asserted exactly.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { driveUntilSettled, VirtualClock } from '../src/clock/index.ts';
import { nextInstantAfter } from '../src/clock/instant.ts';
import type { Device, DeviceService, GroupResult, Segment } from '../src/device/device.ts';
import { ModelRepository } from '../src/model/repository.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import type { Predictor } from '../src/predict/predictor.ts';
import type { Decision, QueryController, ScheduleInput } from '../src/schedule/controller.ts';
import { createController } from '../src/schedule/index.ts';
import { ServingRuntime, type QueryOutcome, type RuntimeService } from '../src/runtime/runtime.ts';
import { fixedPredictor } from './helpers/fixed-predictor.ts';

const MS_PER_OPERATOR = 2;

let spec: ModelSpec;
let operators: number;
beforeAll(async () => {
  spec = await new ModelRepository().zooSpec('resnet50');
  operators = spec.operators.length;
}, 60_000);

/** Runs each group in what `predictor` predicts for it × `slowdown(group index)`, on the clock. */
class PredictedDevice implements Device {
  readonly id = 'predicted';
  readonly released: string[] = [];
  groups = 0;
  constructor(
    private readonly clock: VirtualClock,
    private readonly predictor: Predictor,
    private readonly slowdown: (group: number) => number = () => 1,
  ) {}
  load(_services: readonly DeviceService[]): Promise<void> {
    return Promise.resolve();
  }
  async runGroup(group: readonly Segment[]): Promise<GroupResult> {
    const ms = this.predictor.predict([group.map((s) => ({ model: spec.name, start: s.start, end: s.end, batch: s.batchSize, seqLen: 0 }))])[0]! * this.slowdown(this.groups++);
    await this.clock.sleep(ms);
    return { groupLatencyMs: ms, segments: group.map((s) => ({ ok: true as const, queryId: s.queryId, service: s.service, latencyMs: ms, outputs: {} })) };
  }
  releaseQuery(_service: string, queryId: string): Promise<void> {
    this.released.push(queryId);
    return Promise.resolve();
  }
  close(): Promise<void> {
    return Promise.resolve();
  }
}

function setup(policy: string | QueryController, slowdown?: (group: number) => number, params: Record<string, unknown> = {}) {
  const clock = new VirtualClock();
  const predictor = fixedPredictor([spec.name], MS_PER_OPERATOR);
  const device = new PredictedDevice(clock, predictor, slowdown);
  const services: RuntimeService[] = ['long', 'short'].map((name) => ({ name, spec, qosTargetMs: 10_000, maxQueueLength: 100 }));
  const controller = typeof policy === 'string' ? createController(policy, params, predictor) : policy;
  const runtime = new ServingRuntime({ clock, device, controller, services });
  /** Predicted solo latency of a whole query at `batch`, ms. */
  const soloMs = (batch: number): number => predictor.predict([[{ model: spec.name, start: 0, end: operators, batch, seqLen: 0 }]])[0]!;
  return { clock, device, runtime, soloMs };
}

const DROPPING = ['abacus', 'fcfs', 'sjf', 'edf', 'fcfs-batch', 'edf-batch', 'clockwork'];

describe('decisions made while a group runs', () => {
  it('the next group is decided during the running one and launched the moment the device is free', async () => {
    const { clock, runtime } = setup('fcfs');
    const outcomes = [0, 1, 2].map((k) => runtime.submit({ service: 'short', batch: 1, id: `q${k}` }));
    await driveUntilSettled(clock, Promise.all(outcomes));
    const gs = runtime.groups;
    expect(gs).toHaveLength(3);
    expect(gs.map((g) => g.decidedAhead)).toEqual([false, true, true]);
    for (let i = 1; i < gs.length; i++) expect(gs[i]!.launchMs).toBe(gs[i - 1]!.launchMs + gs[i - 1]!.measuredMs);
    // queries waited at each end: the gap is recorded (0 in virtual time); none before the first group
    expect(gs.map((g) => g.idleBeforeMs)).toEqual([undefined, 0, 0]);
    expect(gs.every((g) => g.longestSegmentMs === g.measuredMs)).toBe(true);
  });

  it('decideAhead: false decides only when the device is idle (the baseline), with the same groups here', async () => {
    const clock = new VirtualClock();
    const predictor = fixedPredictor([spec.name], MS_PER_OPERATOR);
    const runtime = new ServingRuntime({ clock, device: new PredictedDevice(clock, predictor), controller: createController('fcfs', {}, predictor), services: [{ name: 'short', spec, qosTargetMs: 10_000, maxQueueLength: 100 }], decideAhead: false });
    await driveUntilSettled(clock, Promise.all([0, 1, 2].map((k) => runtime.submit({ service: 'short', batch: 1, id: `q${k}` }))));
    expect(runtime.groups.map((g) => [g.segments[0]!.queryId, g.decidedAhead])).toEqual([
      ['q0', false],
      ['q1', false],
      ['q2', false],
    ]);
  });

  it('an arrival while a group runs is decided ahead again; an overrun keeps a plan that still fits and rejects a planned query that no longer can, on time', async () => {
    const { clock, runtime, soloMs } = setup('fcfs', (g) => (g === 1 ? 1.5 : 1));
    const soloOneMs = soloMs(1); // 36 ms: a runs [0, 36), b is predicted [36, 72) but runs [36, 90)
    const first = [runtime.submit({ service: 'short', batch: 1, id: 'a' }), runtime.submit({ service: 'short', batch: 1, id: 'b' })];
    await driveUntilSettled(clock, clock.sleep(1));
    // c (deadline 116, latest start 80) and d (deadline 10001) arrive while a runs: b's plan is decided again at each arrival
    const c = runtime.submit({ service: 'long', batch: 1, id: 'c', qosTargetMs: 115 });
    const d = runtime.submit({ service: 'long', batch: 1, id: 'd' });
    const done = await driveUntilSettled(clock, Promise.all([...first, c, d]));
    expect(done.map((o) => (o.ok ? 'ok' : o.reason))).toEqual(['ok', 'ok', 'qos_violation', 'ok']);
    // c, planned after b, can no longer start by 80 while b overruns: rejected at that instant, before b ends
    expect(done[2]!.record.endMs).toBe(nextInstantAfter(1 + 115 - soloOneMs));
    const gs = runtime.groups;
    expect(gs.map((g) => g.segments[0]!.queryId)).toEqual(['a', 'b', 'd']);
    // d was decided at c's rejection, while b ran; b ended later than planned but d still fits its deadline: launched as decided
    expect(gs.map((g) => g.decidedAhead)).toEqual([false, true, true]);
    expect(gs[2]!.launchMs).toBe(gs[1]!.launchMs + gs[1]!.measuredMs);
    expect(gs[1]!.measuredMs).toBe(1.5 * soloOneMs);
  });

  it('a query cancelled while it is planned is not launched; the next group is decided again', async () => {
    const { clock, runtime } = setup('fcfs');
    const outcomes = ['a', 'b', 'c'].map((id) => runtime.submit({ service: 'short', batch: 1, id }));
    await driveUntilSettled(clock, clock.sleep(1));
    expect(runtime.cancel('b')).toBe('withdrawn');
    const done = await driveUntilSettled(clock, Promise.all(outcomes));
    expect(done.map((o) => (o.ok ? 'ok' : o.reason))).toEqual(['ok', 'cancelled', 'ok']);
    expect(runtime.groups.map((g) => [g.segments[0]!.queryId, g.decidedAhead])).toEqual([
      ['a', false],
      ['c', true],
    ]);
  });
});

describe('rejection on time', () => {
  it.each(DROPPING)('%s: a query that cannot finish behind the running group is rejected at its arrival, not when the group ends', async (policy) => {
    const { clock, runtime, soloMs } = setup(policy);
    const longMs = soloMs(64);
    expect(longMs).toBeGreaterThan(250); // a long group (≥ 250 ms) …
    const long = runtime.submit({ service: 'long', batch: 64, id: 'long' });
    await driveUntilSettled(clock, clock.sleep(10));
    // … and a query with a 100 ms target behind it: hopeless at once (its own solo 36 ms fits the target alone)
    expect(soloMs(1)).toBeLessThan(100);
    const short = await driveUntilSettled(clock, runtime.submit({ service: 'short', batch: 1, id: 'short', qosTargetMs: 100 }));
    expect(short.ok).toBe(false);
    if (short.ok) return;
    expect(short.reason).toBe('qos_violation');
    expect(short.record.endMs).toBe(10);
    expect(short.message).toMatch(/until the running group ends exceeds headroom/);
    expect((await driveUntilSettled(clock, long)).ok).toBe(true);
  });

  it.each(DROPPING)('%s: while a group overruns its prediction, a waiting query is rejected exactly at its hopeless instant', async (policy) => {
    const { clock, runtime, soloMs } = setup(policy, (g) => (g === 0 ? 4 : 1));
    const long = runtime.submit({ service: 'long', batch: 4, id: 'long' }); // predicted 2 × 18 × 2 = 72 ms, runs 288 ms
    await driveUntilSettled(clock, clock.sleep(1));
    const qosTargetMs = 150;
    const short = runtime.submit({ service: 'short', batch: 1, id: 'short', qosTargetMs, arrivalMs: 1 });
    // not hopeless at arrival (72 + 36 < 150) …
    await driveUntilSettled(clock, clock.sleep(5));
    expect(runtime.queries.find((q) => q.id === 'short')!.outcome).toBe('pending');
    // … but from the instant after its latest start (deadline − solo), with the long group still running
    const latestStartMs = 1 + qosTargetMs - soloMs(1);
    const o = await driveUntilSettled(clock, short);
    expect(o.ok === false && o.reason).toBe('qos_violation');
    expect(o.record.endMs).toBe(nextInstantAfter(latestStartMs));
    expect(o.record.endMs!).toBeLessThan(288);
    expect((await driveUntilSettled(clock, long)).ok).toBe(true);
  });

  it('without drop nothing is rejected and no wake is set', async () => {
    const { clock, runtime } = setup('fcfs', (g) => (g === 0 ? 4 : 1), { drop: false });
    const outcomes = [runtime.submit({ service: 'long', batch: 4 }), runtime.submit({ service: 'short', batch: 1, qosTargetMs: 50 })];
    const done = await driveUntilSettled(clock, Promise.all(outcomes));
    expect(done.map((o) => o.ok)).toEqual([true, true]);
  });
});

/**
 * A controller that runs the head of the first queue one operator per group (predicting 5 ms
 * for each), with `rejectStarted` rejecting a head that already ran one, and throwing at its
 * `throwAt`-th decision.
 */
function stepper(options: { rejectStarted: boolean; throwAt?: number }): QueryController & { seen: ScheduleInput[] } {
  const seen: ScheduleInput[] = [];
  return {
    policy: 'fcfs',
    launchWhileBusy: false,
    seen,
    decide(input): Decision {
      seen.push(input);
      if (seen.length === options.throwAt) throw new Error('scripted controller failure');
      const stats = { predictorCalls: 0, groupsScored: 0, searchRounds: 0, soloMemoHits: 0 };
      const head = input.queues.find((q) => q.length > 0)?.[0];
      if (head === undefined) return { group: [], rejected: [], stats };
      if (options.rejectStarted && head.nextOperator > 0) return { group: [], rejected: [{ queryId: head.id, service: head.service, reason: 'qos_violation', headroomMs: 0 }], stats };
      return { group: [{ queryId: head.id, service: head.service, start: head.nextOperator, end: head.nextOperator + 1 }], predictedMs: 5, rejected: [], stats };
    },
    observe: () => undefined,
  };
}

describe('decisions ahead keep every query answered exactly once', () => {
  it('a query of the running group rejected ahead ends qos_violation when its group ends, its device state released', async () => {
    const controller = stepper({ rejectStarted: true });
    const { clock, device, runtime } = setup(controller);
    const o = await driveUntilSettled(clock, runtime.submit({ service: 'short', batch: 1, id: 'x' }));
    expect(o.ok === false && o.reason).toBe('qos_violation');
    // the decision ahead saw x where it will wait (operator 1) while its group [0, 1) ran
    expect(controller.seen[1]!.queues.flat()[0]).toMatchObject({ id: 'x', nextOperator: 1 });
    expect(controller.seen[1]!.runningRemainingMs).toBe(5);
    expect(o.record.endMs).toBe(runtime.groups[0]!.measuredMs);
    expect(o.record.groups).toEqual([0]);
    expect(device.released).toEqual(['x']);
    expect(runtime.counters).toMatchObject({ submitted: 1, rejected: 1, pending: 0 });
  });

  it('a controller that throws while deciding ahead fails the queries it was shown (the running one after its group), once each', async () => {
    // decisions: 1 launches x [0, 1); 2 (ahead) plans x [1, 2); y arrives: 3 (ahead, shown x at 1 and y) throws
    const controller = stepper({ rejectStarted: false, throwAt: 3 });
    const { clock, runtime } = setup(controller);
    const outcomes = ['x', 'y'].map((id) => runtime.submit({ service: 'short', batch: 1, id }));
    expect(controller.seen[2]!.queues.flat().map((w) => [w.id, w.nextOperator])).toEqual([
      ['x', 1],
      ['y', 0],
    ]);
    const done = await driveUntilSettled(clock, Promise.all(outcomes));
    expect(done.map((o: QueryOutcome) => (o.ok ? 'ok' : `${o.reason}: ${o.message}`))).toEqual([
      'device_failure: the fcfs controller failed: scripted controller failure',
      'device_failure: the fcfs controller failed: scripted controller failure',
    ]);
    // y failed at once (t = 0, it was waiting); x when its running group ended
    expect(done.map((o) => o.record.endMs)).toEqual([runtime.groups[0]!.measuredMs, 0]);
    expect(runtime.groups).toHaveLength(1);
    expect(runtime.counters).toMatchObject({ submitted: 2, rejected: 2, pending: 0 });
  });

  it('a controller may launch a later query of a queue first: decided ahead, the queue shows the rest without the one in flight, each answered once', async () => {
    // launches the newest waiting query of the first queue, whole (as abacus's fallback may, passing over an at-risk head)
    const seen: string[][] = []; // ids shown per decision (copied: the runtime's queue views are live)
    const newest: QueryController = {
      policy: 'fcfs',
      launchWhileBusy: false,
      decide(input: ScheduleInput): Decision {
        seen.push(input.queues.flat().map((w) => w.id));
        const q = input.queues.find((queue) => queue.length > 0)?.at(-1);
        const stats = { predictorCalls: 0, groupsScored: 0, searchRounds: 0, soloMemoHits: 0 };
        if (q === undefined) return { group: [], rejected: [], stats };
        return { group: [{ queryId: q.id, service: q.service, start: q.nextOperator, end: q.operators }], predictedMs: MS_PER_OPERATOR * (q.operators - q.nextOperator), rejected: [], stats };
      },
      observe: () => undefined,
    };
    const { clock, runtime } = setup(newest);
    const outcomes = ['x', 'y', 'z'].map((id) => runtime.submit({ service: 'short', batch: 1, id }));
    const done = await driveUntilSettled(clock, Promise.all(outcomes));
    expect(done.map((o) => o.ok)).toEqual([true, true, true]);
    // x launched on arrival; y and z arrived while it ran: z (the newest) went before y
    expect(runtime.groups.map((g) => g.segments.map((s) => s.queryId))).toEqual([['x'], ['z'], ['y']]);
    // decided ahead while z ran, the queue shows y alone: z, in flight behind the head, is not shown (nor launched twice)
    expect(seen).toEqual([['x'], ['y'], ['y', 'z'], ['y']]);
    expect(runtime.counters).toMatchObject({ submitted: 3, pending: 0 });
  });
});
