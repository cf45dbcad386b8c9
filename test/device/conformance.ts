/**
 * Device conformance suite (STYLE.md §2): the behaviour every `Device` implementation must
 * show, run against each one in three lines:
 *
 *   describeDeviceConformance('ort:cpu', async () => {
 *     return { device: await OrtDevice.create(), services: [...] };
 *   });
 *
 * The factory returns an unloaded device and at least two services whose models have at least
 * two operators each (and, for the first service, numeric inputs). The suite loads them once,
 * runs its cases in order on that device and closes it last. Known gaps are skipped by name
 * with a reason: `{ skip: { [CASE.outputsEqual]: 'sim device returns zero tensors' } }`.
 *
 * Tolerances: split-vs-whole outputs on one device compare within 1e-5 of the output scale
 * (max |value|); same sessions, same inputs, so real devices are bitwise equal.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Device, DeviceService, GroupResult, Segment, SegmentResult } from '../../src/device/device.ts';
import { AbacusError, BadRequestError } from '../../src/errors.ts';
import { resolvedBoundary, resolveShape } from '../../src/model/boundary.ts';
import type { ModelSpec, TensorSpec } from '../../src/model/spec.ts';
import { syntheticTensors } from '../../src/model/synthetic.ts';
import type { TensorMap } from '../../src/tensor.ts';

export interface ConformanceSetup {
  readonly device: Device;
  readonly services: readonly DeviceService[];
  /** Called after the device is closed (e.g. remove fixture files). */
  readonly cleanup?: () => Promise<void>;
}

export interface ConformanceOptions {
  /** Cases to skip, by name (see `CASE`), with the reason. */
  readonly skip?: Readonly<Record<string, string>>;
}

/** Case names, for `skip`. */
export const CASE = {
  load: 'load resolves and the id is stable',
  fullQuery: 'a full query returns the model outputs with the batch substituted',
  outputsEqual: 'segments [0,k)+[k,N) with resume equal the full query',
  twoServices: 'a group of two services completes with per-segment latencies',
  sameService: 'two queries of the same service in one group both complete',
  concurrentGroups: 'runGroup may be called again before an earlier group resolved; every segment of both completes',
  syntheticMid: 'synthetic input at start > 0 runs the rest of the model',
  emptyGroup: 'an empty group resolves with no segments',
  rangeErrors: 'unknown service and out-of-range start/end/batchSize/seqLen throw RangeError naming the field',
  duplicateQuery: 'a query twice in one group throws RangeError',
  inputKind: "'tensors' at start > 0 and 'resume' without state throw BadRequestError",
  inputTensors: 'missing, unknown, mistyped or misshaped input tensors throw BadRequestError naming the input',
  atomic: 'a group that fails validation runs nothing',
  resumeStart: 'resume at the wrong start throws BadRequestError naming the expected start',
  finished: 'a finished query keeps no state',
  release: 'releaseQuery frees kept state and is idempotent',
  releaseOwner: "releaseQuery with another service's name throws RangeError naming the owner and keeps the state",
  freshStartOwner: "'tensors' or 'synthetic' for a query whose state another service keeps throws BadRequestError naming the owner and keeps the state",
  unload: 'unload frees one service (its kept states lost, later use a RangeError), the others keep serving, and it loads again',
  close: 'close is idempotent and runGroup after close rejects with device_unavailable',
} as const;

/** Concrete dims of a spec'd tensor for a query (batch/seq substituted; `resolveShape`). */
export function dimsOf(spec: ModelSpec, t: TensorSpec, batch: number, seqLen: number): number[] {
  return resolveShape(spec, t, batch, seqLen);
}

/** Seeded inputs of a model (boundary 0), as the device's synthetic inputs: `syntheticTensors` rules (masks all ones). */
export function randomInputs(spec: ModelSpec, batch: number, seqLen: number, seed: number): TensorMap {
  return syntheticTensors(resolvedBoundary(spec, 0, batch, seqLen), seed);
}

/** Max |a - b| over all outputs, and the output scale (max |b|). */
export function maxAbsDiff(a: TensorMap, b: TensorMap): { diff: number; scale: number } {
  let diff = 0;
  let scale = 0;
  for (const [name, tb] of Object.entries(b)) {
    const ta = a[name];
    if (!ta) return { diff: Infinity, scale };
    expect(ta.dims).toEqual(tb.dims);
    for (let i = 0; i < tb.data.length; i++) {
      const x = Number(ta.data[i]);
      const y = Number(tb.data[i]);
      diff = Math.max(diff, Math.abs(x - y));
      scale = Math.max(scale, Math.abs(y));
    }
  }
  return { diff, scale };
}

/** A segment of service `s` (tests' shorthand). */
export const seg = (s: DeviceService, queryId: string, start: number, end: number, input: Segment['input'], batchSize = 1, seqLen = 0): Segment => ({
  service: s.name,
  queryId,
  start,
  end,
  batchSize,
  seqLen,
  input,
});

/** The result of a segment that must have succeeded (fails the test with its error otherwise). */
export function okResult(r: SegmentResult | undefined): Extract<SegmentResult, { ok: true }> {
  if (!r) throw new Error('missing segment result');
  if (!r.ok) throw new Error(`segment of ${r.queryId} failed: ${r.error.code}: ${r.error.message}`);
  return r;
}

export function describeDeviceConformance(name: string, factory: () => Promise<ConformanceSetup>, options: ConformanceOptions = {}): void {
  describe(`Device conformance: ${name}`, () => {
    let setup: ConformanceSetup;
    let device: Device;
    let a: DeviceService;
    let b: DeviceService;
    let qn = 0;
    const qid = (tag: string): string => `${name}-${tag}-${++qn}`;
    const nOps = (s: DeviceService): number => s.model.spec.operators.length;
    const run = (group: Segment[]): Promise<GroupResult> => device.runGroup(group);
    const test = (caseName: string, fn: () => Promise<void>): void => {
      const reason = options.skip?.[caseName];
      if (reason !== undefined) it.skip(`${caseName} — skipped: ${reason}`, fn);
      else it(caseName, fn);
    };

    beforeAll(async () => {
      setup = await factory();
      device = setup.device;
      expect(setup.services.length).toBeGreaterThanOrEqual(2);
      [a, b] = setup.services as [DeviceService, DeviceService];
      expect(nOps(a)).toBeGreaterThanOrEqual(2);
      expect(nOps(b)).toBeGreaterThanOrEqual(2);
      await device.load(setup.services);
    });

    afterAll(async () => {
      await device?.close();
      await setup?.cleanup?.();
    });

    test(CASE.load, async () => {
      expect(device.id).toMatch(/^[a-z0-9]+:[a-z0-9:._-]+$/);
      const id = device.id;
      await run([]);
      expect(device.id).toBe(id);
    });

    test(CASE.fullQuery, async () => {
      const spec = a.model.spec;
      const r = okResult((await run([seg(a, qid('full'), 0, nOps(a), { kind: 'synthetic', seed: 3 }, 2)])).segments[0]);
      expect(r.latencyMs).toBeGreaterThan(0);
      expect(r.outputs).toBeDefined();
      expect(Object.keys(r.outputs!).sort()).toEqual(spec.outputs.map((o) => o.name).sort());
      for (const o of spec.outputs) {
        const t = r.outputs![o.name]!;
        expect(t.dataType).toBe(o.dataType);
        expect(t.dims).toEqual(dimsOf(spec, o, 2, 0));
        expect(t.data.length).toBe(t.dims.reduce((x, y) => x * y, 1));
      }
    });

    test(CASE.outputsEqual, async () => {
      const n = nOps(a);
      const k = Math.floor(n / 2);
      const inputs = randomInputs(a.model.spec, 2, 0, 42);
      const whole = okResult((await run([seg(a, qid('whole'), 0, n, { kind: 'tensors', tensors: inputs }, 2)])).segments[0]);
      const q = qid('split');
      const first = okResult((await run([seg(a, q, 0, k, { kind: 'tensors', tensors: inputs }, 2)])).segments[0]);
      expect(first.outputs).toBeUndefined();
      const second = okResult((await run([seg(a, q, k, n, { kind: 'resume' }, 2)])).segments[0]);
      const { diff, scale } = maxAbsDiff(second.outputs!, whole.outputs!);
      expect(scale).toBeGreaterThan(0);
      expect(diff).toBeLessThanOrEqual(1e-5 * scale);
    });

    test(CASE.twoServices, async () => {
      const r = await run([seg(a, qid('pair-a'), 0, nOps(a), { kind: 'synthetic', seed: 1 }), seg(b, qid('pair-b'), 0, nOps(b), { kind: 'synthetic', seed: 2 })]);
      expect(r.segments).toHaveLength(2);
      const [ra, rb] = [okResult(r.segments[0]), okResult(r.segments[1])];
      expect([ra.service, rb.service]).toEqual([a.name, b.name]);
      expect(ra.latencyMs).toBeGreaterThan(0);
      expect(rb.latencyMs).toBeGreaterThan(0);
      expect(ra.outputs).toBeDefined();
      expect(rb.outputs).toBeDefined();
      // The group spans each of its segments (behaviour, not a speed bound).
      expect(r.groupLatencyMs).toBeGreaterThanOrEqual(Math.max(ra.latencyMs, rb.latencyMs) - 1e-3);
    });

    test(CASE.sameService, async () => {
      const r = await run([seg(a, qid('same-1'), 0, nOps(a), { kind: 'synthetic', seed: 1 }), seg(a, qid('same-2'), 0, 1, { kind: 'synthetic', seed: 2 })]);
      const [r1, r2] = [okResult(r.segments[0]), okResult(r.segments[1])];
      expect(r1.outputs).toBeDefined();
      expect(r2.outputs).toBeUndefined();
      expect(r1.latencyMs).toBeGreaterThan(0);
      expect(r2.latencyMs).toBeGreaterThan(0);
      await device.releaseQuery(a.name, r2.queryId);
    });

    test(CASE.concurrentGroups, async () => {
      const [g1, g2] = await Promise.all([
        run([seg(a, qid('conc-a'), 0, nOps(a), { kind: 'synthetic', seed: 1 })]),
        run([seg(a, qid('conc-a2'), 0, nOps(a), { kind: 'synthetic', seed: 2 }), seg(b, qid('conc-b'), 0, nOps(b), { kind: 'synthetic', seed: 3 })]),
      ]);
      for (const r of [...g1.segments, ...g2.segments]) expect(okResult(r).outputs).toBeDefined();
    });

    test(CASE.syntheticMid, async () => {
      for (const s of [a, b]) {
        const start = nOps(s) - 1;
        const r = okResult((await run([seg(s, qid('mid'), start, nOps(s), { kind: 'synthetic', seed: 9 }, 3, 5)])).segments[0]);
        for (const o of s.model.spec.outputs) expect(r.outputs![o.name]!.dims).toEqual(dimsOf(s.model.spec, o, 3, 5));
      }
    });

    test(CASE.emptyGroup, async () => {
      const r = await run([]);
      expect(r.segments).toEqual([]);
      expect(r.groupLatencyMs).toBeGreaterThanOrEqual(0);
    });

    test(CASE.rangeErrors, async () => {
      const n = nOps(a);
      const synth = { kind: 'synthetic', seed: 1 } as const;
      await expect(run([{ ...seg(a, qid('r'), 0, 1, synth), service: 'no-such-service' }])).rejects.toThrow(RangeError);
      await expect(run([{ ...seg(a, qid('r'), 0, 1, synth), service: 'no-such-service' }])).rejects.toThrow(/service 'no-such-service'/);
      await expect(run([seg(a, qid('r'), n, n + 1, synth)])).rejects.toThrow(new RegExp(`start ${n} .*\\[0, ${n - 1}\\]`));
      await expect(run([seg(a, qid('r'), -1, 1, synth)])).rejects.toThrow(RangeError);
      await expect(run([seg(a, qid('r'), 1, 1, synth)])).rejects.toThrow(new RegExp(`end 1 .*\\[2, ${n}\\]`));
      await expect(run([seg(a, qid('r'), 0, n + 1, synth)])).rejects.toThrow(RangeError);
      await expect(run([seg(a, qid('r'), 0.5, 1, synth)])).rejects.toThrow(/start/);
      await expect(run([seg(a, qid('r'), 0, 1, synth, 0)])).rejects.toThrow(/batchSize/);
      // Integers so large that costs would overflow are out of range too, not a hang.
      await expect(run([seg(a, qid('r'), 0, 1, synth, 1e300)])).rejects.toThrow(/batchSize 1e\+300 must be an integer in \[1, 65536\]/);
      await expect(run([seg(a, qid('r'), 0, 1, synth, 65_537)])).rejects.toThrow(RangeError);
      await expect(run([seg(a, qid('r'), 0, 1, synth, 1, 1e300)])).rejects.toThrow(/seqLen 1e\+300 must be an integer in \[0, 1048576\]/);
    });

    test(CASE.duplicateQuery, async () => {
      const q = qid('dup');
      const p = run([seg(a, q, 0, 1, { kind: 'synthetic', seed: 1 }), seg(b, q, 0, 1, { kind: 'synthetic', seed: 1 })]);
      await expect(p).rejects.toThrow(RangeError);
      await expect(p).rejects.toThrow(/queryId/);
    });

    test(CASE.inputKind, async () => {
      const inputs = randomInputs(a.model.spec, 1, 0, 1);
      const p1 = run([seg(a, qid('kind'), 1, nOps(a), { kind: 'tensors', tensors: inputs })]);
      await expect(p1).rejects.toThrow(BadRequestError);
      await expect(p1).rejects.toThrow(/tensors.*start/);
      const p2 = run([seg(a, qid('kind'), 1, nOps(a), { kind: 'resume' })]);
      await expect(p2).rejects.toThrow(BadRequestError);
      await expect(p2).rejects.toThrow(/no kept state/);
    });

    test(CASE.inputTensors, async () => {
      const spec = a.model.spec;
      const first = spec.inputs[0]!;
      const good = randomInputs(spec, 2, 0, 1);
      const bad = async (tensors: TensorMap, pattern: RegExp): Promise<void> => {
        const p = run([seg(a, qid('bad'), 0, nOps(a), { kind: 'tensors', tensors }, 2)]);
        await expect(p).rejects.toThrow(BadRequestError);
        await expect(p).rejects.toThrow(pattern);
      };
      const without = { ...good };
      delete without[first.name];
      await bad(without, new RegExp(`'${first.name}'.*missing`));
      await bad({ ...good, not_an_input: good[first.name]! }, /unknown input 'not_an_input'/);
      const t = good[first.name]!;
      await bad({ ...good, [first.name]: { ...t, dataType: t.dataType === 'float32' ? 'int32' : 'float32' } }, new RegExp(`'${first.name}'.*must be`));
      await bad({ ...good, [first.name]: { ...t, dims: [3, ...t.dims.slice(1)] } }, new RegExp(`'${first.name}'.*dim 0 must be 2`));
      await bad({ ...good, [first.name]: { ...t, dims: [...t.dims, 1] } }, new RegExp(`'${first.name}'.*rank`));
      await bad({ ...good, [first.name]: { ...t, data: t.data.slice(1) } }, new RegExp(`'${first.name}'.*elements`));
    });

    test(CASE.atomic, async () => {
      const q = qid('atomic');
      await expect(run([seg(a, q, 0, 1, { kind: 'synthetic', seed: 1 }), seg(b, qid('atomic'), 0, nOps(b) + 5, { kind: 'synthetic', seed: 1 })])).rejects.toThrow(RangeError);
      // The valid first segment did not run: its query has no state to resume.
      await expect(run([seg(a, q, 1, nOps(a), { kind: 'resume' })])).rejects.toThrow(/no kept state/);
    });

    test(CASE.resumeStart, async () => {
      const q = qid('resume-start');
      okResult((await run([seg(a, q, 0, 1, { kind: 'synthetic', seed: 1 })])).segments[0]);
      if (nOps(a) > 2) await expect(run([seg(a, q, 2, nOps(a), { kind: 'resume' })])).rejects.toThrow(/must resume at start 1/);
      await expect(run([seg(a, q, 1, nOps(a), { kind: 'resume' }, 2)])).rejects.toThrow(/batchSize/);
      const done = okResult((await run([seg(a, q, 1, nOps(a), { kind: 'resume' })])).segments[0]);
      expect(done.outputs).toBeDefined();
    });

    test(CASE.finished, async () => {
      const q = qid('finished');
      okResult((await run([seg(b, q, 0, nOps(b), { kind: 'synthetic', seed: 1 })])).segments[0]);
      await expect(run([seg(b, q, 1, nOps(b), { kind: 'resume' })])).rejects.toThrow(BadRequestError);
    });

    test(CASE.release, async () => {
      const q = qid('release');
      okResult((await run([seg(b, q, 0, 1, { kind: 'synthetic', seed: 1 })])).segments[0]);
      await device.releaseQuery(b.name, q);
      await device.releaseQuery(b.name, q);
      await device.releaseQuery(b.name, qid('never-seen'));
      await expect(run([seg(b, q, 1, nOps(b), { kind: 'resume' })])).rejects.toThrow(/no kept state/);
      // The query id can start over.
      okResult((await run([seg(b, q, 0, nOps(b), { kind: 'synthetic', seed: 1 })])).segments[0]);
    });

    test(CASE.releaseOwner, async () => {
      const q = qid('owner');
      okResult((await run([seg(a, q, 0, 1, { kind: 'synthetic', seed: 1 })])).segments[0]);
      const p = device.releaseQuery(b.name, q);
      await expect(p).rejects.toThrow(RangeError);
      await expect(p).rejects.toThrow(a.name);
      // Nothing was released: the query resumes on its own service.
      const done = okResult((await run([seg(a, q, 1, nOps(a), { kind: 'resume' })])).segments[0]);
      expect(done.outputs).toBeDefined();
    });

    test(CASE.freshStartOwner, async () => {
      const q = qid('fresh-owner');
      okResult((await run([seg(b, q, 0, 1, { kind: 'synthetic', seed: 1 })])).segments[0]);
      const p1 = run([seg(a, q, 0, nOps(a), { kind: 'synthetic', seed: 2 })]);
      await expect(p1).rejects.toThrow(BadRequestError);
      await expect(p1).rejects.toThrow(`belongs to service ${b.name}`);
      const p2 = run([seg(a, q, 0, nOps(a), { kind: 'tensors', tensors: randomInputs(a.model.spec, 1, 0, 3) })]);
      await expect(p2).rejects.toThrow(BadRequestError);
      await expect(p2).rejects.toThrow(`belongs to service ${b.name}`);
      // Nothing was dropped: the query resumes on its own service.
      const done = okResult((await run([seg(b, q, 1, nOps(b), { kind: 'resume' })])).segments[0]);
      expect(done.outputs).toBeDefined();
    });

    test(CASE.unload, async () => {
      if (device.unload === undefined) throw new Error(`${name} does not implement Device.unload`);
      const kept = qid('unload-kept');
      okResult((await run([seg(b, kept, 0, 1, { kind: 'synthetic', seed: 5 })])).segments[0]);
      await device.unload(b.name);
      await expect(run([seg(b, qid('unload-after'), 0, nOps(b), { kind: 'synthetic', seed: 6 })])).rejects.toThrow(RangeError);
      await expect(device.releaseQuery(b.name, kept)).rejects.toThrow(RangeError);
      await expect(device.unload(b.name)).rejects.toThrow(new RegExp(`service '${b.name}' is not loaded`));
      expect(okResult((await run([seg(a, qid('unload-other'), 0, nOps(a), { kind: 'synthetic', seed: 7 })])).segments[0]).outputs).toBeDefined();
      await device.load([b]);
      expect(okResult((await run([seg(b, qid('unload-again'), 0, nOps(b), { kind: 'synthetic', seed: 8 })])).segments[0]).outputs).toBeDefined();
      // the state kept before the unload is gone: resuming it is a device_failure result
      const resumed = (await run([seg(b, kept, 1, nOps(b), { kind: 'resume' })])).segments[0]!;
      expect(resumed.ok).toBe(false);
      if (!resumed.ok) expect(resumed.error.code).toBe('device_failure');
    });

    test(CASE.close, async () => {
      await device.close();
      await device.close();
      const p = run([seg(a, qid('closed'), 0, 1, { kind: 'synthetic', seed: 1 })]);
      await expect(p).rejects.toBeInstanceOf(AbacusError);
      await expect(p).rejects.toMatchObject({ code: 'device_unavailable' });
      await device.releaseQuery(a.name, 'whatever');
    });
  });
}
