/**
 * Control flow inside one operator (docs/import.md "Control flow"): an If, a Loop and a Scan
 * stay whole inside one operator, with the outer-scope values their subgraphs read among that
 * operator's inputs; the shape probe runs the branch its values take, and its size search
 * looks into the branches (a reflect Pad inside an If that zeros take). Every model is built
 * here with GraphBuilder, without value_info.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveShape } from '../src/model/boundary.ts';
import { importOnnxModel } from '../src/model/onnx/partition.ts';
import { onnx } from '../src/model/onnx/proto.ts';
import type { OnnxTypes } from '../src/model/onnx/proto.ts';
import { compareOutputs, runOnnx, runOperatorsInSequence } from '../src/model/onnx/verify.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import { loopModel, scanModel, vadLikeModel } from './onnx-control-flow-fixtures.ts';
import { boundaryViolations, randomTensor } from './onnx-fixtures.ts';

let dir = '';
beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'abacus-onnx-control-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function save(model: OnnxTypes.ModelProto, name: string): Promise<string> {
  const file = path.join(dir, `${name}.onnx`);
  await writeFile(file, onnx.ModelProto.encode(model).finish());
  return file;
}

/** The operator holding the node of that op type, and the names it reads from the boundary. */
function operatorOf(spec: ModelSpec, model: OnnxTypes.ModelProto, operatorModels: readonly OnnxTypes.ModelProto[], opType: string): { index: number; inputs: string[] } {
  const index = operatorModels.findIndex((m) => (m.graph?.node ?? []).some((n) => n.opType === opType));
  expect(index, `${opType} in ${model.graph?.name}`).toBeGreaterThanOrEqual(0);
  // the node and its subgraphs are whole: every one of its kind is in that one operator
  expect(operatorModels.filter((m) => (m.graph?.node ?? []).some((n) => n.opType === opType))).toHaveLength(1);
  return { index, inputs: spec.operators[index]!.inputs.map((t) => t.name) };
}

const rate = (hz: number): ort.Tensor => new ort.Tensor('int64', BigInt64Array.from([BigInt(hz)]), []);

describe('If: the network in the branches of an If on the sample rate', () => {
  it('imports with no flags (the search looks into the branch zeros take) and with --probe-value sr=16000; at N = 1, 3 and 7 the operators in sequence equal the whole model for both rates at lengths never probed', async () => {
    const model = vadLikeModel();
    const file = await save(model, 'vadlike');
    const bare = await importOnnxModel(file, { operators: 3 });
    // sr = 0 takes the else branch (reflect pad 64, stride 64); the graph bound (Conv of 256
    // taps in the then branch) starts the search at 1024 (probing from 256)
    expect(bare.spec.defaultSeqLen).toBe(1024);
    expect(bare.spec.outputs.find((t) => t.name === 'features')!.shape).toEqual(['batch', 4, 'samples/64+1']);
    const zeros = await importOnnxModel(file, { operators: 7 });
    expect(zeros.spec.operators.flatMap((op) => op.inputs).find((t) => t.name === 'is16k')?.domain).toEqual({ values: [0] });
    for (const operators of [1, 3, 7]) {
      const { spec, operatorModels } = await importOnnxModel(file, { operators, probe: { values: { sr: 16000 } } });
      expect(spec.outputs.find((t) => t.name === 'features')!.shape).toEqual(['batch', 4, 'samples/128+1']);
      expect(boundaryViolations(spec)).toEqual([]);
      const holder = operatorOf(spec, model, operatorModels, 'If');
      // the branches read `mono`, made by an earlier node: it is an input of the If's operator
      // unless that operator makes it itself
      const makesMono = (operatorModels[holder.index]!.graph?.node ?? []).some((n) => n.output?.includes('mono'));
      expect(makesMono || holder.inputs.includes('mono')).toBe(true);
      if (operators === 7) {
        expect(holder.inputs).toEqual(expect.arrayContaining(['is16k', 'mono']));
        // the computed condition keeps the value the probe saw, so warm-up takes the probed branch
        expect(spec.operators[holder.index]!.inputs.find((t) => t.name === 'is16k')?.domain).toEqual({ values: [1] });
      }
      for (const samples of [16000, 5003, 12345]) {
        for (const hz of [16000, 8000]) {
          const feeds = { input: randomTensor([2, samples], `vad-${samples}`), sr: rate(hz) };
          const expected = await runOnnx(model, feeds);
          const actual = await runOperatorsInSequence(spec, operatorModels, feeds);
          for (const c of compareOutputs(expected, actual, 1e-5)) expect(c, `N=${operators} ${samples} samples at ${hz} Hz: ${c.name}`).toMatchObject({ ok: true });
          if (hz === 16000) expect(resolveShape(spec, spec.outputs.find((t) => t.name === 'features')!, 2, samples)).toEqual([...expected['features']!.dims]);
        }
      }
    }
  });
});

describe('Loop and Scan bodies reading outer values', () => {
  it('a Loop stays whole in one operator with the outer value its body reads as an input; at N = 1, 2, 3 the operators equal the whole model', async () => {
    const model = loopModel();
    const file = await save(model, 'looped');
    for (const operators of [1, 2, 3]) {
      const { spec, operatorModels } = await importOnnxModel(file, { operators });
      expect(spec.outputs[0]!.shape).toEqual(['batch', 'samples']);
      expect(boundaryViolations(spec)).toEqual([]);
      const holder = operatorOf(spec, model, operatorModels, 'Loop');
      const makesScaled = (operatorModels[holder.index]!.graph?.node ?? []).some((n) => n.output?.includes('scaled'));
      expect(makesScaled || holder.inputs.includes('scaled')).toBe(true);
      const feeds = { x: randomTensor([3, 777], 'loop') };
      const expected = await runOnnx(model, feeds);
      const actual = await runOperatorsInSequence(spec, operatorModels, feeds);
      for (const c of compareOutputs(expected, actual, 1e-6)) expect(c, `N=${operators} ${c.name}`).toMatchObject({ ok: true });
    }
  });

  it('a Scan along the samples axis stays whole in one operator; at N = 1, 2, 3 the operators equal the whole model', async () => {
    const model = scanModel();
    const file = await save(model, 'scanned');
    for (const operators of [1, 2, 3]) {
      const { spec, operatorModels } = await importOnnxModel(file, { operators });
      expect(spec.outputs.map((t) => t.shape)).toEqual([['batch'], ['batch', 'samples']]);
      expect(boundaryViolations(spec)).toEqual([]);
      const holder = operatorOf(spec, model, operatorModels, 'Scan');
      const makesW = (operatorModels[holder.index]!.graph?.node ?? []).some((n) => n.output?.includes('w'));
      expect(makesW || holder.inputs.includes('w')).toBe(true);
      const feeds = { x: randomTensor([2, 301], 'scan') };
      const expected = await runOnnx(model, feeds);
      const actual = await runOperatorsInSequence(spec, operatorModels, feeds);
      for (const c of compareOutputs(expected, actual, 1e-5)) expect(c, `N=${operators} ${c.name}`).toMatchObject({ ok: true });
    }
  });
});
