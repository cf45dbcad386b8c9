/**
 * device/ort on real zoo models (small variants) built and partitioned by the real pipeline:
 * the conformance suite, and a query split across groups shared with another service equals
 * one plain ORT session of the whole model.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DeviceService } from '../src/device/device.ts';
import { OrtDevice } from '../src/device/ort/index.ts';
import { ModelRepository } from '../src/model/repository.ts';
import type { TensorMap } from '../src/tensor.ts';
import * as ort from 'onnxruntime-node';
import { describeDeviceConformance, randomInputs } from './device/conformance.ts';
import { SMALL_VARIANTS } from './helpers/small-variants.ts';
import { relativeMaxError, runWhole } from './helpers/run-operators.ts';

async function zooServices(names: readonly ('resnet50' | 'bert' | 'inception_v3' | 'vgg16')[]): Promise<{ services: DeviceService[]; cleanup: () => Promise<void> }> {
  const cacheDir = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-ortzoo-'));
  const repo = new ModelRepository({ cacheDir });
  const services: DeviceService[] = [];
  for (const name of names) services.push({ name, model: (await repo.zooArtifact(name, SMALL_VARIANTS[name])).artifact });
  return { services, cleanup: () => fs.rm(cacheDir, { recursive: true, force: true }) };
}

describeDeviceConformance('ort:cpu on zoo models', async () => {
  const { services, cleanup } = await zooServices(['resnet50', 'bert']);
  return { device: await OrtDevice.create(), services, cleanup };
});

describe('ort:cpu segments across groups equal the whole model', () => {
  let device: OrtDevice;
  let services: DeviceService[];
  let cleanup: () => Promise<void>;
  beforeAll(async () => {
    ({ services, cleanup } = await zooServices(['inception_v3', 'bert', 'vgg16']));
    device = await OrtDevice.create();
    await device.load(services);
  });
  afterAll(async () => {
    await device.close();
    await cleanup();
  });

  it('a sequence longer than the model accepts is a bad request, before anything runs', async () => {
    const bert = services.find((s) => s.name === 'bert')!;
    const max = bert.model.spec.maxSeqLen!;
    expect(max).toBe(SMALL_VARIANTS.bert['maxPositions']);
    await expect(
      device.runGroup([{ service: 'bert', queryId: 'too-long', start: 0, end: bert.model.spec.operators.length, batchSize: 1, seqLen: max + 1, input: { kind: 'synthetic', seed: 1 } }]),
    ).rejects.toMatchObject({ code: 'bad_request', message: expect.stringMatching(/maximum sequence length/) });
  });

  it.each([['inception_v3'], ['bert'], ['vgg16']])('%s in three segments interleaved with another service', async (name) => {
    const svc = services.find((s) => s.name === name)!;
    const other = services.find((s) => s.name !== name)!;
    const spec = svc.model.spec;
    const n = spec.operators.length;
    const seqLen = spec.dynamicAxes.seq === undefined ? 0 : 9;
    const otherSeq = other.model.spec.dynamicAxes.seq === undefined ? 0 : 5;
    const inputs = randomInputs(spec, 3, seqLen, 42);
    const cuts = [0, Math.max(1, Math.floor(n / 3)), Math.max(2, Math.floor((2 * n) / 3)), n];
    let outputs: TensorMap | undefined;
    for (let i = 0; i < 3; i++) {
      const res = await device.runGroup([
        { service: svc.name, queryId: `${name}-q`, start: cuts[i]!, end: cuts[i + 1]!, batchSize: 3, seqLen, input: i === 0 ? { kind: 'tensors', tensors: inputs } : { kind: 'resume' } },
        { service: other.name, queryId: `${name}-other-${i}`, start: 0, end: other.model.spec.operators.length, batchSize: 1, seqLen: otherSeq, input: { kind: 'synthetic', seed: i } },
      ]);
      for (const s of res.segments) expect(s.ok, s.ok ? '' : s.error.message).toBe(true);
      const first = res.segments[0]!;
      if (first.ok && first.outputs) outputs = first.outputs;
    }
    expect(outputs).toBeDefined();
    const feeds: Record<string, ort.Tensor> = {};
    for (const [k, t] of Object.entries(inputs)) feeds[k] = new ort.Tensor(t.dataType as 'float32', t.data as Float32Array, [...t.dims]);
    const whole = await runWhole(svc.model, feeds);
    for (const out of spec.outputs) {
      const got = outputs![out.name]!;
      expect(got.dims).toEqual(whole[out.name]!.dims);
      expect(relativeMaxError(whole[out.name]!, new ort.Tensor('float32', got.data as Float32Array, [...got.dims]))).toBeLessThanOrEqual(1e-4);
    }
  });
});
