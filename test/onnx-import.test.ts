/**
 * Import of ONNX files: end to end on a file without shape annotations (onnxruntime infers
 * shapes), unsorted nodes, dead nodes, exporter-style axis names, fixed batch; and every kind of
 * bad input — not ONNX, truncated, N out of range, cycles, external data missing or present.
 */
import { createHash } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidModelError } from '../src/errors.ts';
import { fixedBatchOf } from '../src/model/boundary.ts';
import { GraphBuilder } from '../src/model/onnx/builder.ts';
import { decodeOnnxModel, readOnnxModel } from '../src/model/onnx/load.ts';
import { detectDynamicAxes, indexGraph, isTopologicallySorted } from '../src/model/onnx/graph.ts';
import { importOnnxModel, partitionModel } from '../src/model/onnx/partition.ts';
import { onnx } from '../src/model/onnx/proto.ts';
import type { OnnxTypes } from '../src/model/onnx/proto.ts';
import { compareOutputs, runOnnx, runOperatorsInSequence } from '../src/model/onnx/verify.ts';
import { evalCost } from '../src/model/cost.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import { boundaryViolations, buildInceptionGraph, buildSkipGraph, randomTensor, roundTrip } from './onnx-fixtures.ts';

let dir = '';
beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'abacus-onnx-import-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function write(name: string, bytes: Uint8Array | string): Promise<string> {
  const file = path.join(dir, name);
  await writeFile(file, bytes);
  return file;
}

const encode = (m: OnnxTypes.IModelProto): Uint8Array => onnx.ModelProto.encode(m).finish();

async function expectSameOutputs(whole: OnnxTypes.IModelProto, result: Awaited<ReturnType<typeof importOnnxModel>>, feeds: Record<string, ort.Tensor>): Promise<void> {
  expect(boundaryViolations(result.spec)).toEqual([]);
  const expected = await runOnnx(whole, feeds);
  const actual = await runOperatorsInSequence(result.spec, result.operatorModels, feeds);
  for (const c of compareOutputs(expected, actual)) expect(c, c.name).toMatchObject({ ok: true });
}

/** Rename symbolic dims of the graph interface (what exporters do: `N`, `sequence`). */
function renameDims(m: OnnxTypes.ModelProto, names: Record<string, string | number>): void {
  for (const v of [...m.graph!.input!, ...m.graph!.output!, ...m.graph!.valueInfo!]) {
    for (const d of v.type?.tensorType?.shape?.dim ?? []) {
      const to = d.dimParam ? names[d.dimParam] : undefined;
      if (typeof to === 'string') d.dimParam = to;
      else if (typeof to === 'number') {
        d.dimParam = '';
        d.dimValue = to;
      }
    }
  }
}

describe('importOnnxModel', () => {
  it('partitions an unannotated, unsorted model with a dead node into N balanced operators that reproduce it', async () => {
    const original = roundTrip(buildSkipGraph().model);
    const m = roundTrip(original);
    m.graph!.valueInfo = [];
    renameDims(m, { batch: 'N', seq: 'sequence' });
    const nodes = m.graph!.node!;
    m.graph!.node = [...nodes.slice(10), { opType: 'Relu', input: ['x'], output: ['unused'], name: 'dead' }, ...nodes.slice(0, 10)];
    const bytes = encode(m);
    const file = await write('skip.onnx', bytes);

    const result = await importOnnxModel(file, { operators: 4 });
    const { spec, model } = result;
    expect(spec.name).toBe('skip');
    expect(spec.source).toEqual({ kind: 'import', file, sha256: createHash('sha256').update(bytes).digest('hex') });
    expect(spec.dynamicAxes).toEqual({ batch: 'N', seq: 'sequence' });
    expect(spec.defaultSeqLen).toBe(128);
    expect(spec.operators).toHaveLength(4);
    expect(spec.inputs.map((t) => t.shape)).toEqual([
      ['N', 'sequence', 8],
      ['N', 8],
    ]);
    // the Constant node (Clip's max) is folded into an initializer (docs/import.md, "Constants where they are used")
    const computeNodes = nodes.length - nodes.filter((n) => n.opType === 'Constant').length;
    expect(model.graph!.node).toHaveLength(computeNodes);
    expect(isTopologicallySorted(indexGraph(model.graph!, 'm'))).toBe(true);
    expect(spec.operators.reduce((a, o) => a + o.nodeCount, 0)).toBe(computeNodes);
    // interfaces inferred by onnxruntime keep the symbolic axes
    for (const op of spec.operators) for (const t of [...op.inputs, ...op.outputs]) if (t.shape.length > 0) expect(t.shape[0]).toBe('N');
    expect(spec.operators.some((op) => op.gflops.c2 > 0)).toBe(true);
    await expectSameOutputs(original, result, { x: randomTensor([3, 7, 8], 'x'), y: randomTensor([3, 8], 'y') });
    const named = await importOnnxModel(file, { operators: computeNodes, name: 'custom' });
    expect(named.spec.name).toBe('custom');
    expect(named.spec.operators.every((o) => o.nodeCount === 1)).toBe(true);
    await expectSameOutputs(original, named, { x: randomTensor([1, 2, 8], 'x2'), y: randomTensor([1, 8], 'y2') });
  });

  it('imports a model with a fixed batch of 1 and no symbolic dims', async () => {
    const m = roundTrip(buildInceptionGraph().model);
    m.graph!.valueInfo = [];
    renameDims(m, { batch: 1 });
    const file = await write('fixed.onnx', encode(m));
    expect(detectDynamicAxes(m)).toEqual({ batch: 'batch' });
    const result = await importOnnxModel(file, { operators: 5 });
    expect(result.spec.inputs[0]!.shape).toEqual([1, 3, 12, 12]);
    expect(result.spec.defaultSeqLen).toBe(0);
    await expectSameOutputs(m, result, { img: randomTensor([1, 3, 12, 12], 'img') });
  });

  it('imports an IR 3 model whose initializers are also listed as graph inputs', async () => {
    const m = roundTrip(buildInceptionGraph().model);
    m.irVersion = 3;
    m.opsetImport = [{ domain: '', version: 9 }];
    for (const t of m.graph!.initializer!) {
      m.graph!.input!.push({ name: t.name ?? '', type: { tensorType: { elemType: t.dataType ?? 0, shape: { dim: (t.dims ?? []).map((d) => ({ dimValue: Number(d) })) } } } });
    }
    const file = await write('ir3.onnx', encode(m));
    const result = await importOnnxModel(file, { operators: 4 });
    expect(result.spec.inputs.map((t) => t.name)).toEqual(['img']);
    expect(result.spec.opset).toBe(9);
    for (const sub of result.operatorModels) {
      expect(Number(sub.irVersion)).toBe(3);
      const inputs = new Set(sub.graph!.input!.map((v) => v.name));
      for (const t of sub.graph!.initializer!) expect(inputs.has(t.name)).toBe(true);
    }
    await expectSameOutputs(m, result, { img: randomTensor([2, 3, 12, 12], 'img3') });
  });

  it('rejects operators < 1 or > node count with a RangeError naming operators and the range', async () => {
    const m = buildSkipGraph().model;
    const n = m.graph!.node!.filter((node) => node.opType !== 'Constant').length; // Constant nodes fold into initializers
    const file = await write('range.onnx', encode(m));
    for (const operators of [0, -3, n + 1, 100, 1.5]) {
      const err = await importOnnxModel(file, { operators }).catch((e: unknown) => e);
      expect(err, String(operators)).toBeInstanceOf(RangeError);
      expect(String(err)).toMatch(/operators/);
      if (operators >= 1) expect(String(err)).toContain(`[1, ${n}]`);
    }
  });
});

describe('a model with a fixed batch', () => {
  /** MLP x [B, 16] → MatMul [16, 32] → Add → Relu → MatMul [32, 8] → out [B, 8], B fixed or 'batch'. */
  function mlp(batch: number | string): OnnxTypes.ModelProto {
    const g = new GraphBuilder({ name: 'mlp', seed: 4 });
    const x = g.input('x', 'float32', [batch, 16]);
    g.beginOperator('all');
    const [m1] = g.node('MatMul', [x, g.initializer('W1', [16, 32], { kind: 'uniform', bound: 0.3 })], [[batch, 32]]);
    const [a1] = g.node('Add', [m1!, g.initializer('b1', [32], { kind: 'uniform', bound: 0.1 })], [[batch, 32]]);
    const [r1] = g.node('Relu', [a1!], [[batch, 32]]);
    g.node('MatMul', [r1!, g.initializer('W2', [32, 8], { kind: 'uniform', bound: 0.3 })], [[batch, 8]], { outputs: ['out'] });
    g.output('out');
    return g.build().model;
  }
  // FLOP of one run at batch 4 (2 per multiply-add, flops.ts): MatMul 2·4·32·16 = 4096,
  // Add 4·32 = 128, Relu 4·32 = 128, MatMul 2·4·8·32 = 2048 → 6400 FLOP = 6.4e-6 GFLOP.
  const RUN_GFLOP_AT_4 = 6400e-9;
  const total = (spec: ModelSpec, key: 'gflops' | 'inputBytes', batch: number): number => spec.operators.reduce((a, op) => a + evalCost(op[key], batch), 0);

  it('keeps costs per sample (per-run cost / fixed batch): evalCost at the fixed batch is one run', async () => {
    for (const stripped of [true, false]) {
      const m = roundTrip(mlp(4));
      if (stripped) m.graph!.valueInfo = [];
      const file = await write(`fixed4-${stripped}.onnx`, encode(m));
      const { spec, operatorModels } = await importOnnxModel(file, { operators: 2 });
      const label = stripped ? 'shapes from onnxruntime' : 'shapes from annotations';
      expect(spec.inputs[0]!.shape, label).toEqual([4, 16]);
      expect(fixedBatchOf(spec), label).toBe(4);
      expect(Math.abs(total(spec, 'gflops', 4) - RUN_GFLOP_AT_4) / RUN_GFLOP_AT_4, label).toBeLessThan(1e-12);
      expect(Math.abs(total(spec, 'gflops', 1) - RUN_GFLOP_AT_4 / 4) / RUN_GFLOP_AT_4, label).toBeLessThan(1e-12);
      // operator 0 reads x: 4·16 float32 = 256 bytes per run
      expect(evalCost(spec.operators[0]!.inputBytes, 4), label).toBeCloseTo(256, 9);
      await expectSameOutputs(m, { spec, model: m, operatorModels }, { x: randomTensor([4, 16], 'x4') });
    }
  });

  it('gives the same per-sample costs as the same model with a dynamic batch', async () => {
    const fixed = (await importOnnxModel(await write('fixed4.onnx', encode(mlp(4))), { operators: 3 })).spec;
    const dynamic = (await importOnnxModel(await write('dynamic.onnx', encode(mlp('batch'))), { operators: 3 })).spec;
    expect(fixedBatchOf(dynamic)).toBeUndefined();
    fixed.operators.forEach((op, k) => {
      for (const key of ['gflops', 'inputBytes', 'outputBytes'] as const) expect(op[key].c0, `op ${k} ${key}`).toBeCloseTo(dynamic.operators[k]![key].c0, 15);
    });
    expect(total(dynamic, 'gflops', 4)).toBeCloseTo(RUN_GFLOP_AT_4, 15);
  });
});

describe('bad ONNX files', () => {
  it('rejects random bytes and text files with InvalidModelError', async () => {
    let seed = 99;
    const random = Uint8Array.from({ length: 4096 }, () => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed & 0xff;
    });
    for (const [name, content] of [
      ['random.onnx', random],
      ['notes.onnx', 'This is a text file, not an ONNX model.\nir_version: 8\n'],
      ['empty.onnx', new Uint8Array(0)],
    ] as const) {
      const file = await write(name, content);
      await expect(readOnnxModel(file), name).rejects.toThrow(InvalidModelError);
      await expect(importOnnxModel(file, { operators: 1 }), name).rejects.toThrow(/not a valid ONNX model/);
    }
    await expect(readOnnxModel(path.join(dir, 'does-not-exist.onnx'))).rejects.toThrow(/cannot read model file/);
  });

  it('rejects every truncation of a model', async () => {
    const bytes = encode(buildSkipGraph({ withWeights: false }).model);
    for (let cut = 0; cut < bytes.length; cut++) {
      expect(() => decodeOnnxModel(bytes.subarray(0, cut), `cut ${cut}`), `cut at ${cut} of ${bytes.length}`).toThrow(InvalidModelError);
    }
    const file = await write('truncated.onnx', bytes.subarray(0, Math.floor(bytes.length * 0.6)));
    await expect(importOnnxModel(file, { operators: 2 })).rejects.toThrow(InvalidModelError);
  });

  it('rejects a graph with a cycle, naming the nodes on it', async () => {
    const vi = (name: string): OnnxTypes.IValueInfoProto => ({ name, type: { tensorType: { elemType: 1, shape: { dim: [{ dimValue: 4 }] } } } });
    const m = onnx.ModelProto.create({
      irVersion: 8,
      opsetImport: [{ domain: '', version: 17 }],
      graph: {
        name: 'loop',
        input: [vi('x')],
        output: [vi('out')],
        node: [
          { opType: 'Relu', input: ['x'], output: ['pre'], name: 'pre_relu' },
          { opType: 'Add', input: ['pre', 'c'], output: ['a'], name: 'node_A' },
          { opType: 'Relu', input: ['a'], output: ['b'], name: 'node_B' },
          { opType: 'Sigmoid', input: ['b'], output: ['c'], name: 'node_C' },
          { opType: 'Neg', input: ['b'], output: ['out'], name: 'post' },
        ],
      },
    });
    const file = await write('cycle.onnx', encode(m));
    const err = await importOnnxModel(file, { operators: 2 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidModelError);
    expect((err as InvalidModelError).code).toBe('invalid_model');
    expect(String(err)).toMatch(/cycle/);
    for (const name of ['node_A', 'node_B', 'node_C']) expect(String(err)).toContain(name);
    await expect(
      partitionModel({ name: 'loop', model: m, operatorOfNode: [0, 0, 0, 0, 1], dynamicAxes: { batch: 'batch' }, defaultSeqLen: 0, source: { kind: 'zoo', options: {} } }),
    ).rejects.toThrow(/cycle/);
  });

  it('rejects a node reading a value nothing defines', async () => {
    const m = roundTrip(buildSkipGraph({ withWeights: false }).model);
    m.graph!.node![3]!.input![0] = 'ghost';
    const file = await write('dangling.onnx', encode(m));
    await expect(importOnnxModel(file, { operators: 2 })).rejects.toThrow(/reads 'ghost'/);
  });
});

describe('external data', () => {
  /** The skip graph with W1 stored in `weights.bin` at offset 16; returns the model and W1's bytes. */
  function externalModel(location: string): { model: OnnxTypes.ModelProto; raw: Uint8Array } {
    const m = roundTrip(buildSkipGraph().model);
    const w1 = m.graph!.initializer!.find((t) => t.name === 'W1')!;
    const raw = Uint8Array.from(w1.rawData!);
    w1.rawData = new Uint8Array(0);
    w1.dataLocation = onnx.TensorProto.DataLocation.EXTERNAL;
    w1.externalData = [
      { key: 'location', value: location },
      { key: 'offset', value: '16' },
      { key: 'length', value: String(raw.length) },
    ];
    return { model: m, raw };
  }

  it('loads tensors from the data file next to the model, and the import reproduces the model', async () => {
    const sub = await mkdtemp(path.join(dir, 'ext-'));
    const { model, raw } = externalModel('weights.bin');
    const file = path.join(sub, 'ext.onnx');
    await writeFile(file, encode(model));
    await writeFile(path.join(sub, 'weights.bin'), Buffer.concat([Buffer.alloc(16, 0xee), Buffer.from(raw)]));
    const loaded = await readOnnxModel(file);
    const w1 = loaded.graph!.node && loaded.graph!.initializer!.find((t) => t.name === 'W1')!;
    expect(Array.from(w1!.rawData!)).toEqual(Array.from(raw));
    expect(w1!.dataLocation).toBe(onnx.TensorProto.DataLocation.DEFAULT);
    const result = await importOnnxModel(file, { operators: 3 });
    await expectSameOutputs(buildSkipGraph().model, result, { x: randomTensor([2, 3, 8], 'x'), y: randomTensor([2, 8], 'y') });
    // partitionModel refuses a model whose external data is not loaded
    await expect(
      partitionModel({ name: 'ext', model: decodeOnnxModel(encode(model), 'ext'), operatorOfNode: new Array<number>(model.graph!.node!.length).fill(0), dynamicAxes: { batch: 'batch', seq: 'seq' }, defaultSeqLen: 8, source: { kind: 'zoo', options: {} } }),
    ).rejects.toThrow(/external data/);
  });

  it('rejects a missing, short or escaping data file, naming the file and the tensor', async () => {
    const sub = await mkdtemp(path.join(dir, 'ext-bad-'));
    const { model, raw } = externalModel('weights.bin');
    const file = path.join(sub, 'ext.onnx');
    await writeFile(file, encode(model));
    const missing = await importOnnxModel(file, { operators: 2 }).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(InvalidModelError);
    expect(String(missing)).toMatch(/weights\.bin/);
    expect(String(missing)).toMatch(/'W1'/);
    await writeFile(path.join(sub, 'weights.bin'), Buffer.concat([Buffer.alloc(16), Buffer.from(raw.subarray(0, 100))]));
    await expect(readOnnxModel(file)).rejects.toThrow(/weights\.bin' is too short for tensor 'W1'/);
    const escaping = path.join(sub, 'escape.onnx');
    await writeFile(escaping, encode(externalModel('../weights.bin').model));
    await expect(readOnnxModel(escaping)).rejects.toThrow(/relative path inside/);
  });
});
