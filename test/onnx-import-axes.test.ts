/**
 * Dynamic axes and data-dependent shapes (docs/import.md): models with several dynamic axes (a detector with dynamic height and width
 * and stride-4/8 outputs, a text recognizer with a dynamic width and a W/8 output, an NHWC
 * model) import at N = 1, 4, 8 with each input dim its own symbol and boundary dims written as
 * expressions of them; the operators in sequence equal the whole model at sizes the probe never
 * used (H ≠ W). Data-dependent outputs (NonZero, TopK with a dynamic k) import as final outputs
 * with a `?data` dim; on a boundary they are refused naming the tensor and an operator count
 * that avoids them.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { batchFusionBlocker, DATA_DEPENDENT_DIM, evalDimExpression, querySize, resolveShape } from '../src/model/boundary.ts';
import { evalCost } from '../src/model/cost.ts';
import { VirtualClock } from '../src/clock/index.ts';
import { SimDevice } from '../src/device/sim/sim-device.ts';
import { artifactAt } from '../src/model/artifact.ts';
import { importOnnxModel } from '../src/model/onnx/partition.ts';
import { onnx } from '../src/model/onnx/proto.ts';
import type { OnnxTypes } from '../src/model/onnx/proto.ts';
import { compareOutputs, runOnnx, runOperatorsInSequence } from '../src/model/onnx/verify.ts';
import { detectorModel, fpnModel, nhwcModel, nonZeroModel, recognizerModel, topKModel } from './onnx-axes-fixtures.ts';
import { boundaryViolations, randomTensor } from './onnx-fixtures.ts';

let dir = '';
beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'abacus-onnx-axes-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function save(model: OnnxTypes.ModelProto, name: string): Promise<string> {
  const file = path.join(dir, `${name}.onnx`);
  await writeFile(file, onnx.ModelProto.encode(model).finish());
  return file;
}

describe('dim expressions', () => {
  it('evaluates floor division, remainder, parentheses and names with dots (by hand)', () => {
    const b = new Map([
      ['height', 67],
      ['width', 100],
      ['p2o.DynamicDimension.1', 33],
      ['batch', 2],
    ]);
    expect(evalDimExpression('(height+7)/8', b)).toBe(9); // ⌈67/8⌉
    expect(evalDimExpression('height/8', b)).toBe(8);
    expect(evalDimExpression('2*(height/4)*(width/4)', b)).toBe(2 * 16 * 25);
    expect(evalDimExpression('2*height/4', b)).toBe(33); // left to right: ⌊134/4⌋
    expect(evalDimExpression('p2o.DynamicDimension.1/2+1', b)).toBe(17);
    expect(evalDimExpression('-(width/3)+40', b)).toBe(7);
    expect(evalDimExpression('width%7', b)).toBe(2);
    expect(evalDimExpression('width/height', b)).toBeUndefined(); // division by a non-constant
    expect(evalDimExpression('depth+1', b)).toBeUndefined();
    expect(evalDimExpression('(width', b)).toBeUndefined();
  });
});

describe('several dynamic axes', () => {
  const H = 50;
  const W = 70;
  it('a detector with dynamic height and width: each its own symbol, stride-4/8 outputs, N = 1, 4, 8 and the node count', async () => {
    const model = detectorModel();
    const file = await save(model, 'detector');
    const feeds = { image: randomTensor([2, 3, H, W], 'image') };
    const expected = await runOnnx(model, feeds);
    for (const operators of [1, 4, 8, model.graph!.node!.length]) {
      const { spec, operatorModels } = await importOnnxModel(file, { operators });
      expect(spec.dynamicAxes).toEqual({ batch: 'batch', symbols: { height: 64, width: 64 } });
      expect(spec.inputs[0]!.shape).toEqual(['batch', 3, 'height', 'width']);
      const byName = new Map(spec.outputs.map((t) => [t.name, t.shape]));
      expect(byName.get('heat4')).toEqual(['batch', 2, '(height+3)/4', '(width+3)/4']);
      expect(byName.get('heat8')).toEqual(['batch', 2, '(height+7)/8', '(width+7)/8']);
      expect(byName.get('flat8')).toEqual(['batch', '2*((height+7)/8)*((width+7)/8)']);
      expect(spec.operators.reduce((a, op) => a + op.nodeCount, 0)).toBe(model.graph!.node!.length);
      expect(spec.operators).toHaveLength(operators);
      expect(boundaryViolations(spec)).toEqual([]);
      // every boundary resolves at a request's sizes: ⌈50/8⌉ = 7, ⌈70/8⌉ = 9
      expect(resolveShape(spec, spec.outputs.find((t) => t.name === 'flat8')!, 2, 0, { height: H, width: W })).toEqual([2, 2 * 7 * 9]);
      const actual = await runOperatorsInSequence(spec, operatorModels, feeds);
      for (const c of compareOutputs(expected, actual, 1e-5)) expect(c, `N=${operators} ${c.name}`).toMatchObject({ ok: true });
      expect(actual['heat8']!.dims).toEqual([2, 2, 7, 9]);
      expect(batchFusionBlocker(spec)).toMatch(/dynamic axes 'height', 'width'/);
    }
  });

  it('a recognizer with a dynamic width and a W/8 output imports at every N (the width is the sequence axis)', async () => {
    const model = recognizerModel();
    const file = await save(model, 'recognizer');
    const feeds = { image: randomTensor([3, 1, 32, 203], 'image') };
    const expected = await runOnnx(model, feeds);
    for (const operators of [1, 4, 8, 9]) {
      const { spec, operatorModels } = await importOnnxModel(file, { operators });
      expect(spec.dynamicAxes).toEqual({ batch: 'batch', seq: 'width' });
      expect(spec.outputs[0]!.shape).toEqual(['batch', '(width+7)/8', 10]);
      expect(spec.operators.reduce((a, op) => a + op.nodeCount, 0)).toBe(model.graph!.node!.length);
      expect(boundaryViolations(spec)).toEqual([]);
      const actual = await runOperatorsInSequence(spec, operatorModels, feeds);
      for (const c of compareOutputs(expected, actual, 1e-5)) expect(c, `N=${operators} ${c.name}`).toMatchObject({ ok: true });
      expect(actual['logits']!.dims).toEqual([3, 26, 10]);
      expect(batchFusionBlocker(spec)).toBeUndefined(); // a sequence axis: fused per length, as BERT
    }
  });

  it('an NHWC model: height and width in dims 1 and 2', async () => {
    const model = nhwcModel();
    const file = await save(model, 'nhwc');
    const feeds = { image: randomTensor([1, H, W, 3], 'image'), mask: randomTensor([1, H, W, 1], 'mask') };
    const expected = await runOnnx(model, feeds);
    for (const operators of [1, 4, 8, model.graph!.node!.length]) {
      const { spec, operatorModels } = await importOnnxModel(file, { operators });
      expect(spec.dynamicAxes.symbols).toEqual({ height: 64, width: 64 });
      expect(spec.outputs.find((t) => t.name === 'features')!.shape).toEqual(['batch', '(height+3)/4', '(width+3)/4', 8]);
      expect(spec.inputs.map((t) => t.shape)).toEqual([
        ['batch', 'height', 'width', 3],
        ['batch', 'height', 'width', 1],
      ]);
      expect(spec.operators.reduce((a, op) => a + op.nodeCount, 0)).toBe(model.graph!.node!.length);
      expect(boundaryViolations(spec)).toEqual([]);
      const actual = await runOperatorsInSequence(spec, operatorModels, feeds);
      for (const c of compareOutputs(expected, actual, 1e-5)) expect(c, `N=${operators} ${c.name}`).toMatchObject({ ok: true });
    }
  });
});

describe('a model that accepts only multiples of 8', () => {
  it('imports with the odd probe sizes left out (an FPN: s4 + upsampled s8), at N = 1, 4, 8 and the node count', async () => {
    const model = fpnModel();
    const file = await save(model, 'fpn');
    const feeds = { image: randomTensor([1, 3, 96, 160], 'fpn') };
    const expected = await runOnnx(model, feeds);
    await expect(runOnnx(model, { image: randomTensor([1, 3, 67, 64], 'odd') })).rejects.toThrow();
    for (const operators of [1, 4, 8, model.graph!.node!.length]) {
      const { spec, operatorModels } = await importOnnxModel(file, { operators });
      // two stride-2 convolutions with pads 1 give ⌊(H + 3)/4⌋ (ONNX Conv output size, which the
      // importer derives from the graph); at the multiples of 8 the model accepts it is H/4
      expect(spec.outputs[0]!.shape).toEqual(['batch', 2, '(height+3)/4', '(width+3)/4']);
      expect(spec.operators.reduce((a, op) => a + op.nodeCount, 0)).toBe(model.graph!.node!.length);
      expect(boundaryViolations(spec)).toEqual([]);
      const actual = await runOperatorsInSequence(spec, operatorModels, feeds);
      for (const c of compareOutputs(expected, actual, 1e-5)) expect(c, `N=${operators} ${c.name}`).toMatchObject({ ok: true });
    }
  });
});

describe('data-dependent shapes', () => {
  it('NonZero as a final output: imported with a ?data dim; across a boundary it is refused naming the tensor and a count that avoids it', async () => {
    const model = nonZeroModel();
    const file = await save(model, 'nonzero');
    const { spec, operatorModels } = await importOnnxModel(file, { operators: 2 });
    expect(spec.outputs.find((t) => t.name === 'found')!.shape).toEqual([DATA_DEPENDENT_DIM, 2]);
    const feeds = { x: randomTensor([2, 8], 'x') };
    const expected = await runOnnx(model, feeds);
    const actual = await runOperatorsInSequence(spec, operatorModels, feeds);
    for (const c of compareOutputs(expected, actual, 0)) expect(c, c.name).toMatchObject({ ok: true });
    expect(actual['found']!.dims[0]).toBeGreaterThan(0);
    expect(batchFusionBlocker(spec)).toMatch(/output 'found' .* data-dependent size/);
    const refused = await importOnnxModel(file, { operators: 5 }).catch((e: unknown) => e);
    expect(String(refused)).toMatch(/tensor '.+' would cross an operator boundary, but its size depends on the data .*import with --operators [1-4] /);
  });

  it('TopK with a dynamic k: the k dim is data-dependent, the batch dim is not', async () => {
    const model = topKModel();
    const file = await save(model, 'topk');
    const { spec, operatorModels } = await importOnnxModel(file, { operators: 1 });
    expect(spec.outputs.map((t) => t.shape)).toEqual([
      ['batch', DATA_DEPENDENT_DIM],
      ['batch', DATA_DEPENDENT_DIM],
    ]);
    const feeds = { x: randomTensor([2, 16], 'x'), k: new ort.Tensor('int64', BigInt64Array.from([5n]), [1]) };
    const actual = await runOperatorsInSequence(spec, operatorModels, feeds);
    expect(actual['scores']!.dims).toEqual([2, 5]);
    await expect(importOnnxModel(file, { operators: 3 })).rejects.toThrow(/tensor 'values' would cross an operator boundary.*--operators 2 /s);
  });
});

describe('costs of a model with several axes', () => {
  it('are polynomials in the size (height·width): the detector FLOPs at 128×96 match the convolutions counted by hand', async () => {
    const file = await save(detectorModel(), 'detector-costs');
    const { spec } = await importOnnxModel(file, { operators: 4 });
    expect(spec.defaultSeqLen).toBe(64 * 64);
    const at = (height: number, width: number): number => spec.operators.reduce((a, op) => a + evalCost(op.gflops, 1, querySize(spec, { height, width })), 0);
    // hand count: 2·Cout·Cin·k²·Hout·Wout per convolution (stride-2 3×3 convs, then 1×1 heads)
    const convs = (h: number, w: number): number => {
      const o = (s: number): number => Math.ceil(h / s) * Math.ceil(w / s);
      return (2 * (4 * 3 * 9 * o(2) + 8 * 4 * 9 * o(4) + 8 * 8 * 9 * o(8) + 2 * 8 * o(4) + 2 * 8 * o(8))) / 1e9;
    };
    for (const [h, w] of [
      [64, 64],
      [128, 96],
      [256, 64],
    ] as const) {
      expect(at(h, w) / convs(h, w), `${h}×${w}`).toBeGreaterThan(1);
      expect(at(h, w) / convs(h, w), `${h}×${w}`).toBeLessThan(1.05); // + bias adds, ReLU, Sigmoid
    }
    expect(at(128, 96) / at(64, 64)).toBeCloseTo(3, 2);
    expect(querySize(spec)).toBe(4096);
  });
});

describe('the sim device', () => {
  it('sizes the outputs of a several-axes query from its input dims, across a resume', async () => {
    const { spec } = await importOnnxModel(await save(detectorModel(), 'detector-sim'), { operators: 4 });
    const clock = new VirtualClock();
    const device = await SimDevice.create({ clock, noiseCv: 0 });
    await device.load([{ name: 'det', model: artifactAt('/nonexistent', spec) }]);
    const image = { dataType: 'float32' as const, dims: [1, 3, 50, 70], data: new Float32Array(3 * 50 * 70) };
    const size = querySize(spec, { height: 50, width: 70 });
    const first = device.runGroup([{ service: 'det', queryId: 'q', start: 0, end: 2, batchSize: 1, seqLen: size, input: { kind: 'tensors', tensors: { image } } }]);
    await clock.run();
    expect((await first).segments[0]!.ok).toBe(true);
    const rest = device.runGroup([{ service: 'det', queryId: 'q', start: 2, end: 4, batchSize: 1, seqLen: size, input: { kind: 'resume' } }]);
    await clock.run();
    const r = (await rest).segments[0]!;
    if (!r.ok || r.outputs === undefined) throw new Error('no outputs');
    expect(r.outputs['heat8']!.dims).toEqual([1, 2, 7, 9]);
    expect(r.outputs['flat8']!.dims).toEqual([1, 126]);
    await device.close();
  });
});
