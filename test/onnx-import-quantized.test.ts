/**
 * A quantized network (docs/import.md "Models that work") (DynamicQuantizeLinear + ConvInteger, uint8 weights) imports
 * at N = 1, 4, 8 and at its node count; its parameter count includes the uint8 weights; uint8
 * tensors cross operator boundaries; operators in sequence equal the whole model.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import seedrandom from 'seedrandom';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { importOnnxModel } from '../src/model/onnx/partition.ts';
import { onnx } from '../src/model/onnx/proto.ts';
import type { OnnxTypes } from '../src/model/onnx/proto.ts';
import { compareOutputs, runOnnx, runOperatorsInSequence } from '../src/model/onnx/verify.ts';
import { boundaryViolations, randomTensor } from './onnx-fixtures.ts';

let dir = '';
beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'abacus-onnx-quantized-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const DT = onnx.TensorProto.DataType;
const AT = onnx.AttributeProto.AttributeType;

function uint8Tensor(name: string, dims: number[], rng: () => number): OnnxTypes.ITensorProto {
  const n = dims.reduce((a, b) => a * b, 1);
  const data = new Uint8Array(n);
  for (let i = 0; i < n; i++) data[i] = Math.floor(rng() * 256);
  return { name, dims, dataType: DT.UINT8, rawData: data };
}

/**
 * Two blocks of x → DynamicQuantizeLinear → ConvInteger (uint8 weight [4, C, 3, 3], pads 1) →
 * Cast float → × (x_scale · w_scale) → Relu; input x [batch, 3, 8, 8], output [batch, 4, 8, 8].
 * 12 nodes. Parameters: 4·3·9 + 4·4·9 uint8 weights, two uint8 weight zero points, two float
 * weight scales = 256 elements.
 */
function quantizedNet(): OnnxTypes.ModelProto {
  const rng = seedrandom.alea('quantized');
  const nodes: OnnxTypes.INodeProto[] = [];
  const inits: OnnxTypes.ITensorProto[] = [];
  let x = 'x';
  for (const [i, c] of [
    [1, 3],
    [2, 4],
  ] as const) {
    inits.push(uint8Tensor(`w${i}`, [4, c, 3, 3], rng));
    inits.push({ name: `w${i}_zp`, dims: [], dataType: DT.UINT8, rawData: new Uint8Array([128]) });
    inits.push({ name: `w${i}_scale`, dims: [], dataType: DT.FLOAT, floatData: [0.01] });
    nodes.push({ opType: 'DynamicQuantizeLinear', input: [x], output: [`q${i}`, `s${i}`, `z${i}`], name: `dql${i}` });
    nodes.push({ opType: 'ConvInteger', input: [`q${i}`, `w${i}`, `z${i}`, `w${i}_zp`], output: [`acc${i}`], name: `conv${i}`, attribute: [{ name: 'pads', type: AT.INTS, ints: [1, 1, 1, 1] }] });
    nodes.push({ opType: 'Cast', input: [`acc${i}`], output: [`accf${i}`], name: `cast${i}`, attribute: [{ name: 'to', type: AT.INT, i: DT.FLOAT }] });
    nodes.push({ opType: 'Mul', input: [`s${i}`, `w${i}_scale`], output: [`scale${i}`], name: `scale${i}` });
    nodes.push({ opType: 'Mul', input: [`accf${i}`, `scale${i}`], output: [`deq${i}`], name: `deq${i}` });
    nodes.push({ opType: 'Relu', input: [`deq${i}`], output: [`y${i}`], name: `relu${i}` });
    x = `y${i}`;
  }
  return onnx.ModelProto.create({
    irVersion: 8,
    opsetImport: [{ domain: '', version: 17 }],
    graph: {
      name: 'qnet',
      node: nodes,
      initializer: inits,
      input: [{ name: 'x', type: { tensorType: { elemType: DT.FLOAT, shape: { dim: [{ dimParam: 'batch' }, { dimValue: 3 }, { dimValue: 8 }, { dimValue: 8 }] } } } }],
      output: [{ name: x, type: { tensorType: { elemType: DT.FLOAT, shape: { dim: [{ dimParam: 'batch' }, { dimValue: 4 }, { dimValue: 8 }, { dimValue: 8 }] } } } }],
    },
  });
}

describe('quantized (DynamicQuantizeLinear + ConvInteger) network', () => {
  it('imports at N = 1, 4, 8, 12 with its uint8 weights counted, uint8 tensors crossing, outputs equal', async () => {
    const model = quantizedNet();
    const file = path.join(dir, 'qnet.onnx');
    await writeFile(file, onnx.ModelProto.encode(model).finish());
    const feeds = { x: randomTensor([2, 3, 8, 8], 'qx') };
    const expected = await runOnnx(model, feeds);
    for (const operators of [1, 4, 8, 12]) {
      const { spec, operatorModels } = await importOnnxModel(file, { operators });
      expect(boundaryViolations(spec)).toEqual([]);
      expect(spec.params).toBe(4 * 3 * 9 + 4 * 4 * 9 + 2 + 2);
      expect(spec.operators.reduce((a, op) => a + op.paramBytes, 0)).toBeGreaterThanOrEqual(4 * 3 * 9 + 4 * 4 * 9 + 2 + 2 * 4);
      if (operators === 12) {
        const crossing = spec.operators.slice(1).flatMap((op) => op.inputs);
        expect(crossing.find((t) => t.name === 'q1')).toMatchObject({ dataType: 'uint8', shape: ['batch', 3, 8, 8] });
        expect(crossing.find((t) => t.name === 'z1')).toMatchObject({ dataType: 'uint8', shape: [] });
        expect(crossing.find((t) => t.name === 'acc1')).toMatchObject({ dataType: 'int32' });
      }
      const actual = await runOperatorsInSequence(spec, operatorModels, feeds);
      for (const c of compareOutputs(expected, actual, 0)) expect(c, `N=${operators} ${c.name}`).toMatchObject({ ok: true });
    }
  });
});
