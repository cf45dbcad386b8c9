/**
 * Element types (docs/import.md): tensors of every element type onnxruntime-node can hold cross operator
 * boundaries. A model with STRING, BOOL and UINT32 boundaries (`buildTypedGraph`) imports at
 * N = 1, 4, 8 (its node count), and its operators in sequence equal the whole model exactly.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { importOnnxModel } from '../src/model/onnx/partition.ts';
import { onnx } from '../src/model/onnx/proto.ts';
import { compareOutputs, runOnnx, runOperatorsInSequence } from '../src/model/onnx/verify.ts';
import { boundaryViolations, buildTypedGraph } from './onnx-fixtures.ts';

let dir = '';
beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'abacus-onnx-types-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('element types across boundaries', () => {
  it('STRING, BOOL and UINT32 tensors cross operator boundaries at N = 1, 4, 8; outputs equal exactly', async () => {
    const model = buildTypedGraph();
    const file = path.join(dir, 'typed.onnx');
    await writeFile(file, onnx.ModelProto.encode(model).finish());
    const words = ['7', 'seven', '', 'ünïcode 7'];
    const feeds = { words: new ort.Tensor('string', [...words, '7', '7', 'x', 'y'], [2, 4]), x: new ort.Tensor('float32', Float32Array.from([1, 2, 3, 4, 5, 6, 7, 8]), [2, 4]) };
    const expected = await runOnnx(model, feeds);
    // golden by hand: neq = words ≠ "7"; u2 = 2·neq; y = x·u2
    expect([...(expected['neq']!.data as Uint8Array)]).toEqual([0, 1, 1, 1, 0, 0, 1, 1]);
    expect([...(expected['u2']!.data as Uint32Array)]).toEqual([0, 2, 2, 2, 0, 0, 2, 2]);
    expect([...(expected['y']!.data as Float32Array)]).toEqual([0, 4, 6, 8, 0, 0, 14, 16]);
    for (const operators of [1, 4, 8]) {
      const { spec, operatorModels } = await importOnnxModel(file, { operators });
      expect(boundaryViolations(spec)).toEqual([]);
      expect(spec.inputs.map((t) => t.dataType)).toEqual(['string', 'float32']);
      expect(spec.outputs.map((t) => [t.name, t.dataType])).toEqual([
        ['y', 'float32'],
        ['words_out', 'string'],
        ['u2', 'uint32'],
        ['neq', 'bool'],
      ]);
      if (operators === 8) {
        const crossing = new Map(spec.operators.slice(1).flatMap((op) => op.inputs.map((t) => [t.name, t.dataType] as const)));
        expect(crossing.get('w1')).toBe('string');
        expect(crossing.get('eq')).toBe('bool');
        expect(crossing.get('u')).toBe('uint32');
      }
      const actual = await runOperatorsInSequence(spec, operatorModels, feeds);
      for (const c of compareOutputs(expected, actual, 0)) expect(c, `N=${operators} ${c.name}`).toMatchObject({ ok: true, maxAbsError: 0 });
      expect(actual['words_out']!.data).toEqual([...words, '7', '7', 'x', 'y']);
    }
  });
});
