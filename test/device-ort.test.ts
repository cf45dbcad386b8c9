/**
 * device/ort: the conformance suite on onnxruntime-node (CPU), plus what only a real
 * executor shows — agreement with one ORT session of the whole model, ORT errors inside a
 * segment, executor crashes and restarts, CUDA unavailability, option and load errors.
 */
import path from 'node:path';
import fs from 'node:fs/promises';
import { InferenceSession, Tensor } from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DeviceService } from '../src/device/device.ts';
import { OrtDevice } from '../src/device/ort/index.ts';
import { BadRequestError, DeviceFailureError, DeviceUnavailableError, InvalidModelError } from '../src/errors.ts';
import { fixedBatchOf } from '../src/model/boundary.ts';
import { artifactAt } from '../src/model/artifact.ts';
import type { TensorMap } from '../src/tensor.ts';
import { describeDeviceConformance, maxAbsDiff, okResult, randomInputs, seg } from './device/conformance.ts';
import { buildFixedBatchMlp, buildSkipNet, buildTinyBert, makeFixtureDir } from './fixtures/tiny-models.ts';

describeDeviceConformance('ort:cpu', async () => {
  const { dir, cleanup } = await makeFixtureDir();
  const services: DeviceService[] = [
    { name: 'skipnet', model: await buildSkipNet(path.join(dir, 'skipnet')) },
    { name: 'tinybert', model: await buildTinyBert(path.join(dir, 'tinybert')) },
  ];
  return { device: await OrtDevice.create(), services, cleanup };
});

/** Run the whole model in one plain ORT session in this process (the reference). */
async function runWholeModel(modelPath: string, inputs: TensorMap): Promise<TensorMap> {
  const session = await InferenceSession.create(modelPath, { intraOpNumThreads: 1 });
  try {
    const feeds: Record<string, Tensor> = {};
    for (const [name, t] of Object.entries(inputs)) feeds[name] = new Tensor(t.dataType, t.data, [...t.dims]);
    const out = await session.run(feeds);
    const result: TensorMap = {};
    for (const [name, t] of Object.entries(out)) result[name] = { dataType: 'float32', dims: [...t.dims], data: t.data };
    return result;
  } finally {
    await session.release();
  }
}

const synth = (seed: number) => ({ kind: 'synthetic', seed }) as const;

describe('OrtDevice (onnxruntime-node, cpu)', () => {
  let fixtures: { dir: string; cleanup: () => Promise<void> };
  let device: OrtDevice;
  let cnn: DeviceService;
  let nlp: DeviceService;
  let fragile: DeviceService;
  let fixed: DeviceService;

  beforeAll(async () => {
    fixtures = await makeFixtureDir();
    cnn = { name: 'cnn', model: await buildSkipNet(path.join(fixtures.dir, 'cnn')) };
    nlp = { name: 'nlp', model: await buildTinyBert(path.join(fixtures.dir, 'nlp')) };
    // Operator 2's sub-model declares batch 1 while its spec says 'batch': batch 2 fails inside ORT.
    fragile = { name: 'fragile', model: await buildSkipNet(path.join(fixtures.dir, 'fragile'), { fixedBatchAtOperator: 2 }) };
    fixed = { name: 'fixed', model: await buildFixedBatchMlp(path.join(fixtures.dir, 'fixed'), 4) };
    device = await OrtDevice.create({ intraOpNumThreads: 1, spinning: false });
    await device.load([cnn, nlp, fragile, fixed]);
  });

  afterAll(async () => {
    await device?.close();
    await fixtures?.cleanup();
  });

  it('has id ort:cpu and lists its services', () => {
    expect(device.id).toBe('ort:cpu');
    expect([...device.services].sort()).toEqual(['cnn', 'fixed', 'fragile', 'nlp']);
  });

  it('one segment, [0,2)+[2,4) with resume, and a single whole-model ORT session agree', async () => {
    for (const [s, batch, seqLen] of [
      [cnn, 2, 0],
      [nlp, 2, 6],
    ] as const) {
      const n = s.model.spec.operators.length;
      const inputs = randomInputs(s.model.spec, batch, seqLen, 5);
      const reference = await runWholeModel(s.model.modelPath, inputs);
      const whole = okResult((await device.runGroup([seg(s, `${s.name}-whole`, 0, n, { kind: 'tensors', tensors: inputs }, batch, seqLen)])).segments[0]);
      const k = Math.min(2, n - 1);
      okResult((await device.runGroup([seg(s, `${s.name}-split`, 0, k, { kind: 'tensors', tensors: inputs }, batch, seqLen)])).segments[0]);
      const split = okResult((await device.runGroup([seg(s, `${s.name}-split`, k, n, { kind: 'resume' }, batch, seqLen)])).segments[0]);
      for (const got of [whole.outputs!, split.outputs!]) {
        const { diff, scale } = maxAbsDiff(got, reference);
        expect(scale).toBeGreaterThan(0);
        expect(diff).toBeLessThanOrEqual(1e-5 * scale); // same kernels; only fusion order may differ
      }
    }
  });

  it('the skip connection is carried across operators 1 and 2 (passthrough)', async () => {
    const spec = cnn.model.spec;
    expect(spec.operators[1]!.passthrough).toEqual(['a']);
    expect(spec.operators[2]!.passthrough).toEqual(['a']);
    // One operator per segment: the state after each must carry 'a' to the head.
    const inputs = randomInputs(spec, 1, 0, 8);
    const reference = await runWholeModel(cnn.model.modelPath, inputs);
    okResult((await device.runGroup([seg(cnn, 'hop', 0, 1, { kind: 'tensors', tensors: inputs })])).segments[0]);
    okResult((await device.runGroup([seg(cnn, 'hop', 1, 2, { kind: 'resume' })])).segments[0]);
    okResult((await device.runGroup([seg(cnn, 'hop', 2, 3, { kind: 'resume' })])).segments[0]);
    const last = okResult((await device.runGroup([seg(cnn, 'hop', 3, 4, { kind: 'resume' })])).segments[0]);
    const { diff, scale } = maxAbsDiff(last.outputs!, reference);
    expect(diff).toBeLessThanOrEqual(1e-5 * scale);
  });

  it('a model with a fixed batch runs at that batchSize only: any other is a BadRequestError naming service and batch, before anything runs', async () => {
    const spec = fixed.model.spec;
    expect(fixedBatchOf(spec)).toBe(4);
    expect(spec.inputs[0]!.shape).toEqual([4, 16]);
    const inputs = randomInputs(spec, 4, 0, 3); // [4, 16] whatever the batch argument
    for (const batch of [1, 2, 8]) {
      for (const input of [synth(1), { kind: 'tensors', tensors: inputs } as const]) {
        const p = device.runGroup([seg(cnn, `fx-peer-${batch}`, 0, 2, synth(1)), seg(fixed, `fx-${batch}`, 0, 2, input, batch)]);
        await expect(p).rejects.toThrow(BadRequestError);
        await expect(p).rejects.toThrow(`group[1].batchSize ${batch}: service fixed has a fixed batch of 4`);
        await expect(p).rejects.toThrow(/must use batchSize 4/);
      }
      // Nothing ran: the valid segment of the rejected group kept no state.
      await expect(device.runGroup([seg(cnn, `fx-peer-${batch}`, 2, 4, { kind: 'resume' })])).rejects.toThrow(/no kept state/);
    }
    // At batch 4: whole and split runs both equal one ORT session of the whole model.
    const reference = await runWholeModel(fixed.model.modelPath, inputs);
    const whole = okResult((await device.runGroup([seg(fixed, 'fx-whole', 0, 2, { kind: 'tensors', tensors: inputs }, 4)])).segments[0]);
    expect(whole.outputs!.out!.dims).toEqual([4, 8]);
    okResult((await device.runGroup([seg(fixed, 'fx-split', 0, 1, { kind: 'tensors', tensors: inputs }, 4)])).segments[0]);
    const split = okResult((await device.runGroup([seg(fixed, 'fx-split', 1, 2, { kind: 'resume' }, 4)])).segments[0]);
    for (const r of [whole, split]) {
      const { diff, scale } = maxAbsDiff(r.outputs!, reference);
      expect(diff).toBeLessThanOrEqual(1e-5 * scale); // same kernels; only fusion order may differ
    }
    okResult((await device.runGroup([seg(fixed, 'fx-synth', 0, 2, synth(1), 4)])).segments[0]);
  });

  it('synthetic int64 inputs are valid ids and synthetic runs are deterministic per seed', async () => {
    const n = nlp.model.spec.operators.length;
    const run = async (q: string, seed: number) => okResult((await device.runGroup([seg(nlp, q, 0, n, synth(seed), 2, 7)])).segments[0]).outputs!;
    const [x, y, z] = [await run('s1', 4), await run('s2', 4), await run('s3', 5)];
    expect(x.hidden!.dims).toEqual([2, 7, 16]);
    expect(maxAbsDiff(x, y).diff).toBe(0);
    expect(maxAbsDiff(x, z).diff).toBeGreaterThan(0);
    for (const v of x.hidden!.data as Float32Array) expect(Number.isFinite(v)).toBe(true);
  });

  it('an ORT error fails only its segment, names service, query and operator, and the executor stays usable', async () => {
    const r = await device.runGroup([seg(fragile, 'f-bad', 0, 4, synth(1), 2), seg(cnn, 'f-peer', 0, 4, synth(1), 2)]);
    const bad = r.segments[0]!;
    expect(bad.ok).toBe(false);
    if (bad.ok) return;
    expect(bad.error).toBeInstanceOf(DeviceFailureError);
    expect(bad.error.code).toBe('device_failure');
    expect(bad.error.message).toMatch(/fragile/);
    expect(bad.error.message).toMatch(/f-bad/);
    expect(bad.error.message).toMatch(/operator 2 \(block\.conv2\)/);
    okResult(r.segments[1]);
    // The failed query's state is gone: resuming it yields an error result, not a throw.
    const again = await device.runGroup([seg(fragile, 'f-bad', 3, 4, { kind: 'resume' }, 2)]);
    expect(again.segments[0]!.ok).toBe(false);
    // Same executor (no restart), still working at batch 1.
    okResult((await device.runGroup([seg(fragile, 'f-good', 0, 4, synth(1), 1)])).segments[0]);
    expect(device.executorRestarts('fragile')).toBe(0);
  });

  it('an executor that exits mid-segment fails its queries with errors, restarts, and later groups work', async () => {
    // A query of cnn with kept state, then a crash while another cnn query runs.
    okResult((await device.runGroup([seg(cnn, 'kept', 0, 2, synth(1))])).segments[0]);
    await device.injectExecutorFault('cnn', 'exit-in-next-segment');
    const r = await device.runGroup([seg(cnn, 'victim', 0, 4, synth(2)), seg(nlp, 'bystander', 0, 3, synth(2))]);
    const victim = r.segments[0]!;
    expect(victim.ok).toBe(false);
    if (!victim.ok) {
      expect(victim.error).toBeInstanceOf(DeviceFailureError);
      expect(victim.error.message).toMatch(/service cnn/);
      expect(victim.error.message).toMatch(/victim/);
      expect(victim.error.message).toMatch(/exit code 70/);
    }
    okResult(r.segments[1]); // the other service's executor is unaffected
    // The kept query gets an error result at its next resume — never silence.
    const resumed = (await device.runGroup([seg(cnn, 'kept', 2, 4, { kind: 'resume' })])).segments[0]!;
    expect(resumed.ok).toBe(false);
    if (!resumed.ok) expect(resumed.error.message).toMatch(/state was lost/);
    // After that error the query is unknown: resuming again is a caller error.
    await expect(device.runGroup([seg(cnn, 'kept', 2, 4, { kind: 'resume' })])).rejects.toThrow(/no kept state/);
    // Restarted and usable.
    const after = okResult((await device.runGroup([seg(cnn, 'after', 0, 4, synth(3))])).segments[0]);
    expect(after.outputs!.logits!.dims).toEqual([1, 10]);
    expect(device.executorRestarts('cnn')).toBe(1);
  });

  it('an executor killed while idle (SIGKILL) is restarted; its kept state yields errors', async () => {
    okResult((await device.runGroup([seg(nlp, 'nlp-kept', 0, 1, synth(1), 1, 4)])).segments[0]);
    await device.injectExecutorFault('nlp', 'kill');
    const r = await device.runGroup([seg(nlp, 'nlp-kept', 1, 3, { kind: 'resume' }, 1, 4), seg(nlp, 'nlp-new', 0, 3, synth(1), 1, 4)]);
    expect(r.segments[0]!.ok).toBe(false);
    if (!r.segments[0]!.ok) expect(r.segments[0]!.error.message).toMatch(/SIGKILL/);
    okResult(r.segments[1]);
    expect(device.executorRestarts('nlp')).toBe(1);
  });

  it('releaseQuery while the segment is running drops the state once it finishes', async () => {
    const p = device.runGroup([seg(cnn, 'rel-inflight', 0, 2, synth(1))]);
    await device.releaseQuery('cnn', 'rel-inflight');
    okResult((await p).segments[0]);
    await expect(device.runGroup([seg(cnn, 'rel-inflight', 2, 4, { kind: 'resume' })])).rejects.toThrow(/no kept state/);
    expect(await device.executorKeptQueries('cnn')).not.toContain('rel-inflight');
  });

  it('releaseQuery while the segment waits for an executor restart frees its state in the restarted executor', async () => {
    // 'kill' resolves once the death is handled and the restart has begun, so the segment
    // below waits for the restart, when nothing can be sent to the child.
    await device.injectExecutorFault('cnn', 'kill');
    const p = device.runGroup([seg(cnn, 'rel-restart', 0, 2, synth(1))]);
    await device.releaseQuery('cnn', 'rel-restart');
    okResult((await p).segments[0]);
    await expect(device.runGroup([seg(cnn, 'rel-restart', 2, 4, { kind: 'resume' })])).rejects.toThrow(/no kept state/);
    // The fresh executor holds only what the device keeps: a control query, until released.
    okResult((await device.runGroup([seg(cnn, 'rel-control', 0, 2, synth(2))])).segments[0]);
    expect(await device.executorKeptQueries('cnn')).toEqual(['rel-control']);
    await device.releaseQuery('cnn', 'rel-control');
    expect(await device.executorKeptQueries('cnn')).toEqual([]);
  });

  it('a query cannot be in two groups at once', async () => {
    const p = device.runGroup([seg(cnn, 'busy', 0, 4, synth(1))]);
    await expect(device.runGroup([seg(cnn, 'busy', 0, 4, synth(1))])).rejects.toThrow(/already has a segment running/);
    okResult((await p).segments[0]);
  });
});

describe('OrtDevice creation and loading', () => {
  let fixtures: { dir: string; cleanup: () => Promise<void> };
  beforeAll(async () => {
    fixtures = await makeFixtureDir();
  });
  afterAll(async () => {
    await fixtures?.cleanup();
  });

  it('CUDA requested on a box without it → DeviceUnavailableError naming cpu, no crash', async () => {
    const p = OrtDevice.create({ executionProvider: 'cuda' });
    await expect(p).rejects.toBeInstanceOf(DeviceUnavailableError);
    await expect(p).rejects.toThrow(/CUDA is not available here/);
    await expect(p).rejects.toThrow(/executionProvider 'cpu'/);
  });

  it('bad options → RangeError/TypeError naming the option', async () => {
    await expect(OrtDevice.create({ intraOpNumThreads: -1 })).rejects.toThrow(/intraOpNumThreads -1 .*\[0, 1024\]/);
    await expect(OrtDevice.create({ interOpNumThreads: 1.5 })).rejects.toThrow(RangeError);
    await expect(OrtDevice.create({ executionProvider: 'tpu' as 'cpu' })).rejects.toThrow(/executionProvider 'tpu'.*'cpu', 'cuda'/);
    await expect(OrtDevice.create({ graphOptimizationLevel: 'max' as 'all' })).rejects.toThrow(/graphOptimizationLevel/);
  });

  it('load errors: missing operator file, model not matching its spec, duplicate name; close while running', async () => {
    const good = await buildSkipNet(path.join(fixtures.dir, 'good'));
    const missingDir = path.join(fixtures.dir, 'missing');
    const missing = await buildSkipNet(missingDir);
    await fs.rm(missing.operatorPaths[3]!);
    // Spec says the stem reads 'image', the ONNX file says 'x'.
    const mismatched = artifactAt(good.dir, {
      ...good.spec,
      inputs: [{ ...good.spec.inputs[0]!, name: 'image' }],
      operators: good.spec.operators.map((op, k) => (k === 0 ? { ...op, inputs: [{ ...op.inputs[0]!, name: 'image' }] } : op)),
    });

    const device = await OrtDevice.create({ warmupRuns: 0 });
    try {
      await expect(device.load([{ name: 'm', model: missing }])).rejects.toThrow(InvalidModelError);
      await expect(device.load([{ name: 'm', model: missing }])).rejects.toThrow(/operator 3 file .*op-003\.onnx/);
      const p = device.load([{ name: 'mm', model: mismatched }]);
      await expect(p).rejects.toThrow(InvalidModelError);
      await expect(p).rejects.toThrow(/operator 0 \(stem\).*does not match its spec/);
      await expect(device.load([{ name: 'g', model: good }, { name: 'g', model: good }])).rejects.toThrow(/'g' is already loaded or listed twice/);
      expect(device.services).toEqual([]);

      await device.load([{ name: 'g', model: good }]);
      await expect(device.load([{ name: 'g', model: good }])).rejects.toThrow(RangeError);
      // close() while a segment runs: it gets an error result, never silence.
      const running = device.runGroup([{ service: 'g', queryId: 'late', start: 0, end: 4, batchSize: 64, seqLen: 0, input: synth(1) }]);
      await device.close();
      const r = await running;
      const s = r.segments[0]!;
      if (!s.ok) expect(s.error.code).toBe('device_unavailable');
      await expect(device.load([{ name: 'g2', model: good }])).rejects.toThrow(DeviceUnavailableError);
    } finally {
      await device.close();
    }
  });
});
