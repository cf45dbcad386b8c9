/**
 * Strided and windowed dims (docs/import.md "Strided and windowed dims"): a frame count
 * ⌊(samples − 512)/160⌋ + 1 (a Conv1d of 512 taps and hop 160, an STFT of 400-sample frames and
 * hop 160) is written exactly from the graph's stride, kernel and pads, whatever the stride; the
 * operators in sequence equal the whole model at lengths the probe never fed, and every boundary
 * shape the spec writes is the one onnxruntime produces there. A dim no expression writes is
 * served with its actual shape as a model output, and refused on an inner boundary naming a count
 * that avoids it.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveShape } from '../src/model/boundary.ts';
import { importOnnxModel } from '../src/model/onnx/partition.ts';
import { onnx } from '../src/model/onnx/proto.ts';
import type { OnnxTypes } from '../src/model/onnx/proto.ts';
import { compareOutputs, runOnnx, runOperatorsInSequence } from '../src/model/onnx/verify.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import { boundaryViolations, randomTensor } from './onnx-fixtures.ts';

let dir = '';
beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'abacus-onnx-strided-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const DT = onnx.TensorProto.DataType;
const AT = onnx.AttributeProto.AttributeType;
const f32 = (name: string, values: Float32Array, dims: number[]): OnnxTypes.ITensorProto => ({ name, dataType: DT.FLOAT, dims, rawData: new Uint8Array(values.buffer) });
const i64 = (name: string, values: number[], dims: number[]): OnnxTypes.ITensorProto => ({ name, dataType: DT.INT64, dims, rawData: new Uint8Array(BigInt64Array.from(values.map(BigInt)).buffer) });
const input = (name: string, dims: (number | string)[]): OnnxTypes.IValueInfoProto => ({
  name,
  type: { tensorType: { elemType: DT.FLOAT, shape: { dim: dims.map((d) => (typeof d === 'number' ? { dimValue: d } : { dimParam: d })) } } },
});

/**
 * audio [batch, 1, samples] → Conv1d (8 filters of 512 taps, stride 160, no padding: frames =
 * ⌊(samples − 512)/160⌋ + 1) → power → + 1e-6 → log → Transpose to [batch, frames, 8] →
 * Relu. 6 nodes, no value_info.
 */
function convFrontEnd(): OnnxTypes.ModelProto {
  const taps = 512;
  const filters = Float32Array.from({ length: 8 * taps }, (_, i) => Math.cos((2 * Math.PI * (1 + Math.floor(i / taps)) * (i % taps)) / taps) * 0.02);
  return onnx.ModelProto.create({
    irVersion: 8,
    opsetImport: [{ domain: '', version: 17 }],
    graph: {
      name: 'hop160',
      input: [input('audio', ['batch', 1, 'samples'])],
      initializer: [f32('filters', filters, [8, 1, taps]), f32('eps', Float32Array.from([1e-6]), [])],
      node: [
        { opType: 'Conv', input: ['audio', 'filters'], output: ['framed'], name: 'frames', attribute: [{ name: 'strides', type: AT.INTS, ints: [160] }] },
        { opType: 'Mul', input: ['framed', 'framed'], output: ['power'], name: 'power' },
        { opType: 'Add', input: ['power', 'eps'], output: ['power_eps'], name: 'floor' },
        { opType: 'Log', input: ['power_eps'], output: ['logspec'], name: 'log' },
        { opType: 'Transpose', input: ['logspec'], output: ['t'], name: 'transpose', attribute: [{ name: 'perm', type: AT.INTS, ints: [0, 2, 1] }] },
        { opType: 'Relu', input: ['t'], output: ['features'], name: 'relu' },
      ],
      output: [{ name: 'features' }],
    },
  });
}

/**
 * audio [batch, samples] → Unsqueeze to [batch, samples, 1] → STFT (hop 160, a 400-sample Hann
 * window, onesided: [batch, frames, 201, 2], frames = ⌊(samples − 400)/160⌋ + 1) → squared →
 * ReduceSum over the last axis (power [batch, frames, 201]) → + 1e-6 → Log. 6 nodes.
 */
function stftFrontEnd(): OnnxTypes.ModelProto {
  const window = Float32Array.from({ length: 400 }, (_, i) => 0.5 - 0.5 * Math.cos((2 * Math.PI * i) / 400));
  return onnx.ModelProto.create({
    irVersion: 8,
    opsetImport: [{ domain: '', version: 17 }],
    graph: {
      name: 'stft160',
      input: [input('audio', ['batch', 'samples'])],
      initializer: [i64('last', [2], [1]), i64('hop', [160], []), f32('window', window, [400]), i64('minus1', [-1], [1]), f32('eps', Float32Array.from([1e-6]), [])],
      node: [
        { opType: 'Unsqueeze', input: ['audio', 'last'], output: ['signal'], name: 'signal' },
        { opType: 'STFT', input: ['signal', 'hop', 'window'], output: ['spec'], name: 'stft' },
        { opType: 'Mul', input: ['spec', 'spec'], output: ['sq'], name: 'sq' },
        { opType: 'ReduceSum', input: ['sq', 'minus1'], output: ['power'], name: 'power', attribute: [{ name: 'keepdims', type: AT.INT, i: 0 }] },
        { opType: 'Add', input: ['power', 'eps'], output: ['power_eps'], name: 'floor' },
        { opType: 'Log', input: ['power_eps'], output: ['mel'], name: 'log' },
      ],
      output: [{ name: 'mel' }],
    },
  });
}

/** Every boundary tensor of the spec at (batch, samples) as the spec writes it, by name. */
function specShapes(spec: ModelSpec, batch: number, samples: number): Map<string, number[]> {
  const out = new Map<string, number[]>();
  for (const op of spec.operators) for (const t of [...op.inputs, ...op.outputs]) out.set(t.name, resolveShape(spec, t, batch, samples));
  return out;
}

describe('strided and windowed dims', () => {
  it('a Conv1d of 512 taps and hop 160 is written exactly; at N = 1, 3, 6 its operators in sequence equal the whole model at 3 lengths never probed', async () => {
    const model = convFrontEnd();
    const file = path.join(dir, 'hop160.onnx');
    await writeFile(file, onnx.ModelProto.encode(model).finish());
    for (const operators of [1, 3, 6]) {
      const { spec, operatorModels } = await importOnnxModel(file, { operators });
      expect(spec.dynamicAxes).toEqual({ batch: 'batch', seq: 'samples' });
      // ⌊(samples − 512)/160⌋ + 1 = ⌊(samples + 128)/160⌋ − 3
      expect(spec.outputs[0]!.shape).toEqual(['batch', '(samples+128)/160-3', 8]);
      expect(boundaryViolations(spec)).toEqual([]);
      for (const samples of [16000, 5003, 12345]) {
        const feeds = { audio: randomTensor([2, 1, samples], `hop-${samples}`) };
        const expected = await runOnnx(model, feeds);
        const actual = await runOperatorsInSequence(spec, operatorModels, feeds);
        for (const c of compareOutputs(expected, actual, 1e-4)) expect(c, `N=${operators} at ${samples}: ${c.name}`).toMatchObject({ ok: true });
        expect(resolveShape(spec, spec.outputs[0]!, 2, samples)).toEqual([...expected['features']!.dims]);
        // each inner boundary as the spec writes it is what onnxruntime produces
        const written = specShapes(spec, 2, samples);
        for (const [name, dims] of written) if (name === 'framed' || name === 'power' || name === 'logspec') expect(dims[2], `${name} at ${samples}`).toBe(Math.floor((samples - 512) / 160) + 1);
      }
    }
  });

  it('an STFT with hop 160 and a 400-sample window is written exactly and imports at N = 4', async () => {
    const model = stftFrontEnd();
    const file = path.join(dir, 'stft160.onnx');
    await writeFile(file, onnx.ModelProto.encode(model).finish());
    const { spec, operatorModels } = await importOnnxModel(file, { operators: 4 });
    // ⌊(samples − 400)/160⌋ + 1 = ⌊(samples + 80)/160⌋ − 2
    expect(spec.outputs[0]!.shape).toEqual(['batch', '(samples+80)/160-2', 201]);
    expect(boundaryViolations(spec)).toEqual([]);
    for (const samples of [16000, 4321, 9999]) {
      const feeds = { audio: randomTensor([1, samples], `stft-${samples}`) };
      const expected = await runOnnx(model, feeds);
      const actual = await runOperatorsInSequence(spec, operatorModels, feeds);
      for (const c of compareOutputs(expected, actual, 1e-3)) expect(c, `at ${samples}: ${c.name}`).toMatchObject({ ok: true });
      expect(resolveShape(spec, spec.outputs[0]!, 1, samples)).toEqual([...expected['mel']!.dims]);
    }
  });

  it('pools with ceil_mode and SAME padding (hops 160 and 320) are written exactly: equal shapes and outputs at 3 lengths never probed', async () => {
    // x [batch, 1, samples] → MaxPool(kernel 400, stride 160, ceil_mode) → ⌈(samples − 400)/160⌉ + 1
    // → AveragePool(kernel 2, stride 320, SAME_UPPER) → ⌈(that)/320⌉ … over a second branch:
    // AveragePool(kernel 640, stride 320, SAME_UPPER) of x → ⌈samples/320⌉
    const model = onnx.ModelProto.create({
      irVersion: 8,
      opsetImport: [{ domain: '', version: 17 }],
      graph: {
        name: 'pools',
        input: [input('x', ['batch', 1, 'samples'])],
        node: [
          { opType: 'MaxPool', input: ['x'], output: ['peaks'], name: 'peaks', attribute: [{ name: 'kernel_shape', type: AT.INTS, ints: [400] }, { name: 'strides', type: AT.INTS, ints: [160] }, { name: 'ceil_mode', type: AT.INT, i: 1 }] },
          { opType: 'Relu', input: ['peaks'], output: ['peaks_out'], name: 'relu1' },
          { opType: 'AveragePool', input: ['x'], output: ['means'], name: 'means', attribute: [{ name: 'kernel_shape', type: AT.INTS, ints: [640] }, { name: 'strides', type: AT.INTS, ints: [320] }, { name: 'auto_pad', type: AT.STRING, s: new TextEncoder().encode('SAME_UPPER') }] },
          { opType: 'Relu', input: ['means'], output: ['means_out'], name: 'relu2' },
        ],
        output: [{ name: 'peaks_out' }, { name: 'means_out' }],
      },
    });
    const file = path.join(dir, 'pools.onnx');
    await writeFile(file, onnx.ModelProto.encode(model).finish());
    const { spec, operatorModels } = await importOnnxModel(file, { operators: 4 });
    expect(boundaryViolations(spec)).toEqual([]);
    for (const samples of [16000, 5003, 12345]) {
      const feeds = { x: randomTensor([1, 1, samples], `pools-${samples}`) };
      const expected = await runOnnx(model, feeds);
      expect(expected['peaks_out']!.dims[2]).toBe(Math.ceil((samples - 400) / 160) + 1);
      expect(expected['means_out']!.dims[2]).toBe(Math.ceil(samples / 320));
      for (const t of spec.outputs) expect(resolveShape(spec, t, 1, samples), `${t.name} at ${samples}`).toEqual([...expected[t.name]!.dims]);
      const actual = await runOperatorsInSequence(spec, operatorModels, feeds);
      for (const c of compareOutputs(expected, actual, 1e-5)) expect(c, `${samples}: ${c.name}`).toMatchObject({ ok: true });
    }
  });

  it('a dim no expression writes (samples + ⌈samples/3⌉) is served with its actual shape as a model output, and refused on an inner boundary naming a count that avoids it', async () => {
    // x [batch, 1, samples] → r = Relu → MaxPool (kernel 1, stride 3: ⌈samples/3⌉) → joined =
    // Concat of r and it along the samples axis (samples + ⌈samples/3⌉: no product of factors)
    // → (with a tail) Relu.
    const joinedModel = (tail: boolean): OnnxTypes.ModelProto =>
      onnx.ModelProto.create({
        irVersion: 8,
        opsetImport: [{ domain: '', version: 17 }],
        graph: {
          name: 'joined',
          input: [input('x', ['batch', 1, 'samples'])],
          node: [
            { opType: 'Relu', input: ['x'], output: ['r'], name: 'relu' },
            { opType: 'MaxPool', input: ['r'], output: ['thirds'], name: 'pool', attribute: [{ name: 'kernel_shape', type: AT.INTS, ints: [1] }, { name: 'strides', type: AT.INTS, ints: [3] }] },
            { opType: 'Concat', input: ['r', 'thirds'], output: ['joined'], name: 'concat', attribute: [{ name: 'axis', type: AT.INT, i: 2 }] },
            ...(tail ? [{ opType: 'Relu', input: ['joined'], output: ['out'], name: 'tail' }] : []),
          ],
          output: [{ name: tail ? 'out' : 'joined' }],
        },
      });
    const file = path.join(dir, 'joined.onnx');
    const model = joinedModel(false);
    await writeFile(file, onnx.ModelProto.encode(model).finish());
    for (const operators of [1, 3]) {
      const { spec, operatorModels } = await importOnnxModel(file, { operators });
      expect(spec.outputs[0]!.shape).toEqual(['batch', 1, '?data']);
      const feeds = { x: randomTensor([2, 1, 1001], 'joined') };
      const expected = await runOnnx(model, feeds);
      expect(expected['joined']!.dims).toEqual([2, 1, 1001 + 334]);
      const actual = await runOperatorsInSequence(spec, operatorModels, feeds);
      for (const c of compareOutputs(expected, actual, 1e-6)) expect(c).toMatchObject({ ok: true });
    }
    const tailed = path.join(dir, 'joined-tail.onnx');
    await writeFile(tailed, onnx.ModelProto.encode(joinedModel(true)).finish());
    const err = await importOnnxModel(tailed, { operators: 4 }).catch((e: unknown) => e);
    expect(String(err)).toMatch(/tensor 'joined' would cross an operator boundary, but its shape cannot be written in terms of the model's axes \(dim 2 of tensor 'joined' is .*\), which executors cannot size ahead; import with --operators 2 /s);
    expect(String(err)).not.toMatch(/another operator count/);
  });
});
