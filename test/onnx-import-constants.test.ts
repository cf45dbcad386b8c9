/**
 * Constants where they are used (docs/import.md): a model whose weights are `Constant` nodes
 * (what Paddle2ONNX exports) imports at N = 1, 4, 8 and at its node count with every weight
 * copied into the operators that read it, none carried across a boundary; constant-only
 * subgraphs (Identity of a Constant, Constant with `value_floats`) fold the same way.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cliSandbox } from './helpers/cli.ts';
import { boundaryBytes } from '../src/model/boundary.ts';
import { GraphBuilder } from '../src/model/onnx/builder.ts';
import { foldConstants } from '../src/model/onnx/constants.ts';
import { importOnnxModel, partitionModel } from '../src/model/onnx/partition.ts';
import { onnx } from '../src/model/onnx/proto.ts';
import type { OnnxTypes } from '../src/model/onnx/proto.ts';
import { compareOutputs, runOnnx, runOperatorsInSequence } from '../src/model/onnx/verify.ts';
import { boundaryViolations, buildInceptionGraph, randomTensor, roundTrip } from './onnx-fixtures.ts';

let dir = '';
beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'abacus-onnx-constants-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const DT = onnx.TensorProto.DataType;
const sandbox = cliSandbox('abacus-constants-cli-');

/**
 * The inception fixture with every initializer turned into a `Constant` node (placed first, as
 * Paddle2ONNX does), `b2a.w` replaced by `b1.w` (one constant read by two operators), `fc.w`
 * read through an Identity (a foldable subgraph), and `bn.var` given as `value_floats`.
 * @returns the model and the number of weight elements (each distinct constant once).
 */
function constantWeighted(): { model: OnnxTypes.ModelProto; weightElements: number; constantNodes: number } {
  const m = roundTrip(buildInceptionGraph().model);
  const graph = m.graph!;
  graph.valueInfo = [];
  const constants: OnnxTypes.INodeProto[] = [];
  let weightElements = 0;
  for (const t of graph.initializer ?? []) {
    if (t.name === 'b2a.w') continue;
    const n = (t.dims ?? []).reduce((a: number, d) => a * Number(d), 1);
    weightElements += n;
    const out = t.name === 'fc.w' ? 'fc.w.const' : t.name!;
    if (t.name === 'bn.var') {
      constants.push({ opType: 'Constant', name: `const_${t.name}`, output: [out], attribute: [{ name: 'value_floats', type: onnx.AttributeProto.AttributeType.FLOATS, floats: new Array<number>(n).fill(1.5) }] });
    } else {
      constants.push({ opType: 'Constant', name: `const_${t.name}`, output: [out], attribute: [{ name: 'value', type: onnx.AttributeProto.AttributeType.TENSOR, t }] });
    }
  }
  constants.push({ opType: 'Identity', name: 'fc_w_identity', input: ['fc.w.const'], output: ['fc.w'] });
  for (const node of graph.node ?? []) node.input = (node.input ?? []).map((i) => (i === 'b2a.w' ? 'b1.w' : i));
  graph.node = [...constants, ...(graph.node ?? [])];
  graph.initializer = [];
  return { model: m, weightElements, constantNodes: constants.length };
}

describe('Constant-weighted models', () => {
  it('fold every weight into initializers of the operators that read it: N = 1, 4, 8 and the node count, none crosses', async () => {
    const { model, weightElements, constantNodes } = constantWeighted();
    const file = path.join(dir, 'paddle_style.onnx');
    await writeFile(file, onnx.ModelProto.encode(model).finish());
    const computeNodes = model.graph!.node!.length - constantNodes;
    const feeds = { img: randomTensor([2, 3, 12, 12], 'img') };
    const expected = await runOnnx(model, feeds);
    const weightNames = new Set(model.graph!.node!.flatMap((n) => (n.opType === 'Constant' || n.opType === 'Identity' ? (n.output ?? []) : [])));

    for (const operators of [1, 4, 8, computeNodes]) {
      const result = await importOnnxModel(file, { operators });
      const { spec, operatorModels } = result;
      expect(spec.operators).toHaveLength(operators);
      expect(boundaryViolations(spec)).toEqual([]);
      // The Constant and Identity nodes are gone; the compute nodes remain.
      expect(spec.operators.reduce((a, o) => a + o.nodeCount, 0)).toBe(computeNodes);
      expect(result.model.graph!.node!.some((n) => n.opType === 'Constant')).toBe(false);
      // Each distinct weight counted once (all are float).
      expect(spec.params).toBe(weightElements);
      for (const op of spec.operators) {
        for (const t of [...op.inputs, ...op.outputs]) {
          expect(weightNames.has(t.name), `operator ${op.index} interface tensor ${t.name}`).toBe(false);
          expect(t.constant).toBeUndefined();
        }
      }
      for (let k = 1; k < operators; k++) expect(boundaryBytes(spec, k, 2, 0).constantBytes).toBe(0);
      // Every sub-model holds the weights its nodes read.
      operatorModels.forEach((sub) => {
        const inits = new Set((sub.graph!.initializer ?? []).map((t) => t.name));
        for (const n of sub.graph!.node ?? []) for (const i of n.input ?? []) if (weightNames.has(i)) expect(inits.has(i), `${i}`).toBe(true);
      });
      const actual = await runOperatorsInSequence(spec, operatorModels, feeds);
      for (const c of compareOutputs(expected, actual, 1e-5)) expect(c, `N=${operators} ${c.name}`).toMatchObject({ ok: true });
    }
    // At the node count the shared constant b1.w is copied into both operators reading it.
    const { operatorModels } = await importOnnxModel(file, { operators: computeNodes });
    expect(operatorModels.filter((sub) => (sub.graph!.initializer ?? []).some((t) => t.name === 'b1.w'))).toHaveLength(2);
  });

  it('foldConstants keeps data bytes exact and leaves random ops and graph outputs alone', async () => {
    const m = onnx.ModelProto.create({
      irVersion: 8,
      opsetImport: [{ domain: '', version: 17 }],
      graph: {
        name: 'g',
        input: [{ name: 'x', type: { tensorType: { elemType: DT.FLOAT, shape: { dim: [{ dimValue: 2 }] } } } }],
        node: [
          { opType: 'Constant', output: ['c'], attribute: [{ name: 'value_ints', type: onnx.AttributeProto.AttributeType.INTS, ints: [3, 4] }] },
          { opType: 'Cast', input: ['c'], output: ['cf'], attribute: [{ name: 'to', type: onnx.AttributeProto.AttributeType.INT, i: DT.FLOAT }] },
          { opType: 'Add', input: ['x', 'cf'], output: ['y'] },
          { opType: 'RandomNormal', output: ['r'], attribute: [{ name: 'shape', type: onnx.AttributeProto.AttributeType.INTS, ints: [2] }] },
          { opType: 'Mul', input: ['r', 'y'], output: ['z'] },
          { opType: 'Constant', output: ['k'], attribute: [{ name: 'value_float', type: onnx.AttributeProto.AttributeType.FLOAT, f: 2 }] },
        ],
        output: [{ name: 'z' }, { name: 'k' }],
      },
    });
    const { model, foldedNodes, addedInitializers } = await foldConstants(m, 'g');
    expect(foldedNodes).toBe(2);
    expect(addedInitializers).toEqual(['cf']);
    expect(model.graph!.node!.map((n) => n.opType)).toEqual(['Add', 'RandomNormal', 'Mul', 'Constant']);
    const cf = model.graph!.initializer![0]!;
    expect(cf.dataType).toBe(DT.FLOAT);
    expect([...new Float32Array(cf.rawData!.slice().buffer)]).toEqual([3, 4]);
  });

  it('a constant that is not folded (partitionModel keeps nodes) is reported as constant bytes crossing', async () => {
    const g = new GraphBuilder({ name: 'carry', seed: 1 });
    const x = g.input('x', 'float32', ['batch', 4]);
    g.beginOperator('make');
    const [c] = g.node('Constant', [], [[4]], { attrs: { value_floats: { floats: [1, 2, 3, 4] } }, outputs: ['c'] });
    const [a] = g.node('Relu', [x], [['batch', 4]], { outputs: ['a'] });
    g.beginOperator('use');
    g.node('Add', [a!, c!], [['batch', 4]], { outputs: ['y'] });
    g.output('y');
    const built = g.build();
    const { spec } = await partitionModel({
      name: 'carry',
      model: built.model,
      operatorOfNode: built.operatorOfNode,
      dynamicAxes: { batch: 'batch' },
      defaultSeqLen: 0,
      source: { kind: 'zoo', options: {} },
    });
    expect(spec.operators[1]!.inputs.find((t) => t.name === 'c')?.constant).toBe(true);
    expect(spec.operators[1]!.inputs.find((t) => t.name === 'a')?.constant).toBeUndefined();
    expect(boundaryBytes(spec, 1, 3, 0)).toEqual({ activationBytes: 3 * 4 * 4, constantBytes: 4 * 4 });
  });

  it('abacus models show splits the bytes crossing each boundary into activations and constants (0)', async () => {
    const { model } = constantWeighted();
    const file = path.join(dir, 'paddle_cli.onnx');
    await writeFile(file, onnx.ModelProto.encode(model).finish());
    const imported = await sandbox.abacus('models', 'import', file, '--operators', '4', '--name', 'paddle-cli');
    expect(imported.code, imported.stderr).toBe(0);
    const r = await sandbox.abacus('models', 'show', 'paddle-cli', '--batch', '2');
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.split('\n');
    const header = lines.find((l) => l.includes('cross const MB'))!;
    expect(header).toContain('cross act MB');
    const cells = (l: string): string[] => l.trim().split(/\s{2,}/);
    const col = cells(header).indexOf('cross const MB');
    const rows = lines.filter((l) => /^\s*\d+\s/.test(l)).map(cells);
    expect(rows).toHaveLength(4);
    for (const row of rows.slice(0, 3)) {
      expect(Number(row[col - 1])).toBeGreaterThan(0); // activations cross
      expect(Number(row[col])).toBe(0); // no weight does
    }
    expect(rows[3]![col]).toBe('-');

    // Another file under the taken name is its version 2 (named paddle-cli@2); --force replaces every version.
    const other = path.join(dir, 'other.onnx');
    await writeFile(other, onnx.ModelProto.encode(buildInceptionGraph().model).finish());
    const second = await sandbox.inProcess('models', 'import', other, '--operators', '2', '--name', 'paddle-cli');
    expect(second.code, second.stderr).toBe(0);
    expect(second.stdout).toMatch(/^paddle-cli@2: imported/);
    const both = JSON.parse((await sandbox.inProcess('models', '--json')).stdout) as { name: string; operators: number }[];
    expect(both.filter((m) => m.name.startsWith('paddle-cli')).map((m) => [m.name, m.operators])).toEqual([
      ['paddle-cli', 4],
      ['paddle-cli@2', 2],
    ]);
    const forced = await sandbox.abacus('models', 'import', other, '--operators', '2', '--name', 'paddle-cli', '--force', '--json');
    expect(forced.code, forced.stderr).toBe(0);
    const list = JSON.parse((await sandbox.inProcess('models', '--json')).stdout) as { name: string; operators: number }[];
    expect(list.filter((m) => m.name.startsWith('paddle-cli')).map((m) => [m.name, m.operators])).toEqual([['paddle-cli', 2]]);
  });
});
