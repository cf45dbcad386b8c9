/**
 * Shapes of imported models resolve from (batch, seqLen) alone: dims the importer derives from
 * the axes are written as expressions (`batch*seq`, `seq+1`; grammar in `TensorSpec`), which
 * `resolveShape` evaluates. Golden values: the dims onnxruntime actually produces when the
 * operators run on real inputs, and hand-written expressions for the grammar. Synthetic inputs
 * (what the device feeds to warm-up and `synthetic` segments) run from every operator start.
 * Also: a dim no expression can write is a clear import error.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OrtDevice } from '../src/device/ort/index.ts';
import { BadRequestError, InvalidModelError } from '../src/errors.ts';
import { formatDimExpression, parseDimExpression, resolvedBoundary, resolveShape } from '../src/model/boundary.ts';
import { GraphBuilder } from '../src/model/onnx/builder.ts';
import { importOnnxModel } from '../src/model/onnx/partition.ts';
import { ModelRepository } from '../src/model/repository.ts';
import { onnx } from '../src/model/onnx/proto.ts';
import type { OnnxTypes } from '../src/model/onnx/proto.ts';
import { compareOutputs, runOnnx, runOperatorsInSequence } from '../src/model/onnx/verify.ts';
import type { ModelSpec, TensorSpec } from '../src/model/spec.ts';
import { syntheticTensors } from '../src/model/synthetic.ts';
import { randomTensor, roundTrip } from './onnx-fixtures.ts';

let dir = '';
beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'abacus-import-shapes-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Write `model` without value_info (shapes must come from onnxruntime) and return the path. */
async function writeStripped(name: string, model: OnnxTypes.IModelProto): Promise<string> {
  const m = roundTrip(model);
  m.graph!.valueInfo = [];
  const file = path.join(dir, `${name}.onnx`);
  await writeFile(file, onnx.ModelProto.encode(m).finish());
  return file;
}

const H = 16;

/**
 * Transformer-like block: x [batch, seq, 16] → MatMul → Reshape to [batch*seq, 16] → four
 * MatMuls (with Relu and a 2-D residual) → Reshape back with Shape(x) → + x. The five MatMuls
 * carry all the FLOPs, so for N ≤ 5 every cut falls between them (on 2-D tensors) and
 * Shape/Reshape stay together in the last operator.
 */
function buildFlattenBlock(): OnnxTypes.ModelProto {
  const g = new GraphBuilder({ name: 'flatten_block', seed: 5 });
  const B = 'batch';
  const S = 'seq';
  const BS = 'batch*seq';
  const x = g.input('x', 'float32', [B, S, H]);
  const w = (name: string): string => g.initializer(name, [H, H], { kind: 'uniform', bound: 0.4 });
  const to2d = g.initializer('to2d', [2], { kind: 'values', values: [-1, H] }, { dataType: 'int64', trainable: false });
  g.beginOperator('all');
  const [m0] = g.node('MatMul', [x, w('W0')], [[B, S, H]]);
  const [h0] = g.node('Reshape', [m0!, to2d], [[BS, H]], { outputs: ['h0'] });
  const [m1] = g.node('MatMul', [h0!, w('W1')], [[BS, H]]);
  const [r1] = g.node('Relu', [m1!], [[BS, H]]);
  const [m2] = g.node('MatMul', [r1!, w('W2')], [[BS, H]]);
  const [a2] = g.node('Add', [m2!, h0!], [[BS, H]]);
  const [m3] = g.node('MatMul', [a2!, w('W3')], [[BS, H]]);
  const [r3] = g.node('Relu', [m3!], [[BS, H]]);
  const [m4] = g.node('MatMul', [r3!, w('W4')], [[BS, H]]);
  const [shape] = g.node('Shape', [x], [[3]], { dataType: 'int64' });
  const [y] = g.node('Reshape', [m4!, shape!], [[B, S, H]]);
  g.node('Add', [y!, x], [[B, S, H]], { outputs: ['out'] });
  g.output('out');
  return g.build().model;
}

/**
 * A CLS-like token: x [batch, seq, 8] → MatMul → Pad one zero row in front along seq →
 * [batch, seq+1, 8] → Reshape to [batch*seq+batch, 8] → two MatMuls → Reshape back with the
 * shape of the padded tensor → Slice the CLS row off → + x.
 */
function buildClsBlock(): OnnxTypes.ModelProto {
  const g = new GraphBuilder({ name: 'cls_block', seed: 6 });
  const B = 'batch';
  const S = 'seq';
  const x = g.input('x', 'float32', [B, S, 8]);
  const w = (name: string): string => g.initializer(name, [8, 8], { kind: 'uniform', bound: 0.5 });
  const i64 = (name: string, values: number[]): string => g.initializer(name, [values.length], { kind: 'values', values }, { dataType: 'int64', trainable: false });
  g.beginOperator('all');
  const [m0] = g.node('MatMul', [x, w('W0')], [[B, S, 8]]);
  const [p] = g.node('Pad', [m0!, i64('pads', [0, 1, 0, 0, 0, 0])], [[B, 'seq+1', 8]], { outputs: ['padded'] });
  const [h] = g.node('Reshape', [p!, i64('to2d', [-1, 8])], [['rows', 8]], { outputs: ['rows2d'] });
  const [m1] = g.node('MatMul', [h!, w('W1')], [['rows', 8]]);
  const [r1] = g.node('Relu', [m1!], [['rows', 8]]);
  const [m2] = g.node('MatMul', [r1!, w('W2')], [['rows', 8]]);
  const [shape] = g.node('Shape', [p!], [[3]], { dataType: 'int64' });
  const [y] = g.node('Reshape', [m2!, shape!], [[B, 'seq+1', 8]]);
  const [z] = g.node('Slice', [y!, i64('starts', [1]), i64('ends', [1 << 30]), i64('axes', [1])], [[B, S, 8]]);
  g.node('Add', [z!, x], [[B, S, 8]], { outputs: ['out'] });
  g.output('out');
  return g.build().model;
}

/** Every spec'd tensor of the operators (inputs and outputs) and the model interface. */
function allSpecs(spec: ModelSpec): TensorSpec[] {
  return [...spec.inputs, ...spec.outputs, ...spec.operators.flatMap((op) => [...op.inputs, ...op.outputs])];
}

/**
 * For each (batch, seq): run the operators on real inputs and check that every boundary k
 * holds exactly the tensors `resolvedBoundary(spec, k, …)` names, with the dims it computes;
 * the outputs equal the whole model's. Then feed synthetic tensors of boundary k to operators
 * [k, N) for every k and check the output dims.
 */
async function checkResolvable(model: OnnxTypes.IModelProto, spec: ModelSpec, operatorModels: readonly OnnxTypes.IModelProto[], points: readonly [number, number][]): Promise<void> {
  const n = spec.operators.length;
  for (const [batch, seq] of points) {
    const at = `batch ${batch}, seq ${seq}`;
    const feeds = { x: randomTensor(resolveShape(spec, spec.inputs[0]!, batch, seq), `x${batch}.${seq}`) };
    const seen: Record<number, Record<string, readonly number[]>> = {};
    const actual = await runOperatorsInSequence(spec, operatorModels, feeds, {
      onBoundary: (k, tensors) => {
        seen[k] = Object.fromEntries(Object.entries(tensors).map(([name, t]) => [name, t.dims]));
      },
    });
    for (let k = 0; k < n; k++) {
      const want = Object.fromEntries(resolvedBoundary(spec, k, batch, seq).map((t) => [t.name, t.dims]));
      expect(seen[k], `boundary ${k} at ${at}`).toEqual(want);
    }
    for (const t of spec.outputs) expect(actual[t.name]!.dims, `output ${t.name} at ${at}`).toEqual(resolveShape(spec, t, batch, seq));
    for (const c of compareOutputs(await runOnnx(model, feeds), actual)) expect(c, `${c.name} at ${at}`).toMatchObject({ ok: true });

    for (let k = 0; k < n; k++) {
      const synthetic = syntheticTensors(resolvedBoundary(spec, k, batch, seq), k + 1);
      const out = await runOperatorsInSequence(spec, operatorModels, synthetic, { start: k });
      for (const t of spec.outputs) expect(out[t.name]!.dims, `synthetic from operator ${k} at ${at}`).toEqual(resolveShape(spec, t, batch, seq));
    }
  }
}

const POINTS: readonly [number, number][] = [
  [1, 1],
  [2, 5],
  [3, 7],
];

describe('imported boundary shapes resolve from (batch, seq)', () => {
  it('writes the flattened [batch*seq, 16] tensors as `batch*seq`; boundaries resolve and synthetic segments run at every start', async () => {
    const model = buildFlattenBlock();
    const file = await writeStripped('flatten', model);
    for (const operators of [3, 4, 5]) {
      const { spec, operatorModels } = await importOnnxModel(file, { operators, defaultSeqLen: 32 });
      expect(spec.dynamicAxes).toEqual({ batch: 'batch', seq: 'seq' });
      // a cut falls on the 2-D tensor, and nothing but float activations crosses a cut
      const internal = spec.operators.slice(1).flatMap((op) => op.inputs);
      expect(internal.map((t) => t.shape), `N=${operators}`).toContainEqual(['batch*seq', H]);
      for (const t of internal) expect(t.dataType, `N=${operators} ${t.name}`).toBe('float32');
      for (const t of allSpecs(spec)) for (const d of t.shape) expect(['batch', 'seq', 'batch*seq', H, 3]).toContain(d);
      await checkResolvable(model, spec, operatorModels, POINTS);
    }
  });

  it('OrtDevice loads the import (warm-up at every operator) and runs synthetic segments at start > 0', async () => {
    const file = await writeStripped('flatten_device', buildFlattenBlock());
    const repo = new ModelRepository({ cacheDir: path.join(dir, 'cache') });
    const { artifact } = await repo.importModel(file, { operators: 4 });
    const device = await OrtDevice.create({ warmupRuns: 1 });
    try {
      await device.load([{ name: 'flat', model: artifact }]);
      const res = await device.runGroup([
        { service: 'flat', queryId: 's2', start: 2, end: 4, batchSize: 3, seqLen: 5, input: { kind: 'synthetic', seed: 1 } },
        { service: 'flat', queryId: 's1', start: 1, end: 3, batchSize: 2, seqLen: 0, input: { kind: 'synthetic', seed: 2 } },
      ]);
      for (const seg of res.segments) expect(seg.ok, seg.ok ? '' : seg.error.message).toBe(true);
    } finally {
      await device.close();
    }
  });

  it('writes a padded sequence as `seq+1` and its flattened form as `batch*seq+batch`', async () => {
    const model = buildClsBlock();
    const file = await writeStripped('cls', model);
    const { spec, operatorModels } = await importOnnxModel(file, { operators: 3, defaultSeqLen: 16 });
    const shapes = Object.fromEntries(allSpecs(spec).map((t) => [t.name, t.shape]));
    expect(shapes['padded']).toEqual(['batch', 'seq+1', 8]);
    expect(spec.operators.some((op) => op.inputs.some((t) => t.shape[0] === 'batch*seq+batch'))).toBe(true);
    await checkResolvable(model, spec, operatorModels, POINTS);
  });

  it('writes a stride-2 conv as `(seq+1)/2` (⌈seq/2⌉), and rejects a dim that is no product of such factors (seq + ⌈seq/2⌉), naming the tensor', async () => {
    const g = new GraphBuilder({ name: 'strided', seed: 2 });
    const x = g.input('x', 'float32', ['batch', 4, 'seq']);
    g.beginOperator('all');
    const [c] = g.node('Conv', [x, g.initializer('w', [4, 4, 1], { kind: 'uniform', bound: 0.5 })], [['batch', 4, 'half']], { attrs: { strides: { ints: [2] } }, outputs: ['halved'] });
    g.node('Relu', [c!], [['batch', 4, 'half']], { outputs: ['out'] });
    g.output('out');
    const file = await writeStripped('strided', g.build().model);
    const { spec } = await importOnnxModel(file, { operators: 2, defaultSeqLen: 32 });
    expect(spec.outputs[0]!.shape).toEqual(['batch', 4, '(seq+1)/2']);
    expect(resolveShape(spec, spec.outputs[0]!, 2, 33)).toEqual([2, 4, 17]);

    const h = new GraphBuilder({ name: 'joined', seed: 2 });
    const y = h.input('x', 'float32', ['batch', 4, 'seq']);
    h.beginOperator('all');
    const [d] = h.node('Conv', [y, h.initializer('w', [4, 4, 1], { kind: 'uniform', bound: 0.5 })], [['batch', 4, 'half']], { attrs: { strides: { ints: [2] } } });
    const [joined] = h.node('Concat', [y, d!], [['batch', 4, 'both']], { attrs: { axis: { int: 2 } }, outputs: ['joined'] });
    h.node('Relu', [joined!], [['batch', 4, 'both']], { outputs: ['out'] });
    h.output('out');
    const bad = await writeStripped('joined', h.build().model);
    const err = await importOnnxModel(bad, { operators: 3, defaultSeqLen: 32 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidModelError);
    expect(String(err)).toMatch(/tensor '(joined|out)'/);
    expect(String(err)).toMatch(/dim 2/);
  });
});

describe('dim expressions (TensorSpec grammar)', () => {
  const spec = (axes: ModelSpec['dynamicAxes'], defaultSeqLen = 0): ModelSpec => ({
    name: 'm',
    source: { kind: 'zoo', options: {} },
    inputs: [],
    outputs: [],
    dynamicAxes: axes,
    defaultSeqLen,
    operators: [],
    params: 0,
    opset: 17,
  });
  const t = (...shape: (number | string)[]): TensorSpec => ({ name: 't', dataType: 'float32', shape });
  const bs = spec({ batch: 'batch', seq: 'seq' }, 9);

  it('resolves axis names, products and sums of them with integers', () => {
    expect(resolveShape(bs, t('batch', 'seq', 7), 3, 5)).toEqual([3, 5, 7]);
    expect(resolveShape(bs, t('batch*seq', '12*batch', 'seq+1', 'batch*seq+batch', 'batch*seq*seq', '2*seq-1', ' 4 * seq '), 3, 5)).toEqual([15, 36, 6, 18, 75, 9, 20]);
    expect(resolveShape(bs, t('-seq+10', '6'), 2, 4)).toEqual([6, 6]);
    // the general form (docs/import.md "Dynamic axes"): parentheses, floor division and remainder by constants
    expect(resolveShape(bs, t('(seq)', 'seq/2', '(seq+1)/2', 'batch*((seq+3)/4)', 'seq%3'), 3, 5)).toEqual([5, 2, 3, 6, 2]);
    expect(resolveShape(bs, t('batch*seq'), 2, 0)).toEqual([18]); // seqLen 0 → default 9
    // axis names with operator characters are matched literally, longest first
    const odd = spec({ batch: 'batch-size', seq: 'seq' });
    expect(resolveShape(odd, t('batch-size*seq', '2*batch-size', 'batch-size-seq'), 4, 3)).toEqual([12, 8, 1]);
  });

  it('rejects unknown names, malformed expressions, a missing seq and negative values with BadRequestError naming tensor and dim', () => {
    for (const bad of ['heads', 'batch*', '*seq', 'batch**seq', 'batch seq', 'batch+', '(seq', 'seq/batch', 'seq/0', '']) {
      expect(() => resolveShape(bs, t(4, bad), 2, 3), JSON.stringify(bad)).toThrow(BadRequestError);
      expect(() => resolveShape(bs, t(4, bad), 2, 3), JSON.stringify(bad)).toThrow(/'t' dim 1/);
    }
    const noSeq = spec({ batch: 'batch' });
    expect(() => resolveShape(noSeq, t('batch*seq'), 2, 3)).toThrow(/dim 0 is symbolic 'batch\*seq'/);
    const seqNoDefault = spec({ batch: 'batch', seq: 'seq' }, 0);
    expect(() => resolveShape(seqNoDefault, t('batch*seq'), 2, 0)).toThrow(/no seqLen was given/);
    expect(() => resolveShape(bs, t('1-seq'), 2, 5)).toThrow(/is -4 at batch 2, seq 5/);
  });

  it('formats polynomials canonically, and parsing the result gives the same values', () => {
    const axes = { batch: 'batch', seq: 'seq' };
    const cases: [Parameters<typeof formatDimExpression>[0], number | string][] = [
      [[{ coefficient: 1, batchPower: 1, seqPower: 1 }], 'batch*seq'],
      [[{ coefficient: 12, batchPower: 1, seqPower: 0 }], '12*batch'],
      [[{ coefficient: 1, batchPower: 0, seqPower: 0 }, { coefficient: 1, batchPower: 0, seqPower: 1 }], 'seq+1'],
      [[{ coefficient: 1, batchPower: 1, seqPower: 0 }, { coefficient: 1, batchPower: 1, seqPower: 1 }], 'batch*seq+batch'],
      [[{ coefficient: 2, batchPower: 0, seqPower: 1 }, { coefficient: -1, batchPower: 0, seqPower: 0 }], '2*seq-1'],
      [[{ coefficient: 0, batchPower: 1, seqPower: 2 }, { coefficient: 7, batchPower: 0, seqPower: 0 }], 7],
      [[{ coefficient: 1, batchPower: 1, seqPower: 0 }], 'batch'],
    ];
    for (const [terms, text] of cases) {
      expect(formatDimExpression(terms, axes)).toBe(text);
      if (typeof text === 'string') {
        const value = (b: number, s: number): number => terms.reduce((a, x) => a + x.coefficient * b ** x.batchPower * s ** x.seqPower, 0);
        const parsed = parseDimExpression(text, axes)!;
        expect(parsed.reduce((a, x) => a + x.coefficient * 3 ** x.batchPower * 5 ** x.seqPower, 0)).toBe(value(3, 5));
      }
    }
    expect(() => formatDimExpression([{ coefficient: 1, batchPower: 0, seqPower: 1 }], { batch: 'batch' })).toThrow(RangeError);
    expect(() => formatDimExpression([{ coefficient: 0.5, batchPower: 0, seqPower: 1 }], axes)).toThrow(RangeError);
  });
});
