/**
 * Axes a user can name (docs/import.md "Naming axes"): a recurrent model whose `state` input
 * [2, ?, 8] carries the batch in its anonymous dim 1 (silero VAD's layout) imports with no
 * flags (the importer infers the state's batch) and with `--axis state.1=batch --axis
 * input.1=samples`; wrong bindings fail with errors that name the input, the dim and the axis.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeInputsOf } from '../src/cli/models.ts';
import { batchingBlockerOf } from '../src/runtime/config.ts';
import { importOnnxModel } from '../src/model/onnx/partition.ts';
import { onnx } from '../src/model/onnx/proto.ts';
import type { OnnxTypes } from '../src/model/onnx/proto.ts';
import type { ProbeInputs } from '../src/model/onnx/shapes.ts';
import { compareOutputs, runOnnx, runOperatorsInSequence } from '../src/model/onnx/verify.ts';
import { cliSandbox } from './helpers/cli.ts';
import { boundaryViolations, randomTensor } from './onnx-fixtures.ts';

const sandbox = cliSandbox('abacus-axis-cli-');
let dir = '';
beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'abacus-onnx-axis-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const DT = onnx.TensorProto.DataType;
const AT = onnx.AttributeProto.AttributeType;
const H = 8;
const probeOf = (axes: [string, string][], shapes: [string, string][] = []): ProbeInputs => probeInputsOf(shapes, [], axes) ?? {};

/**
 * input [?, ?] (batch, samples; both anonymous), state [2, ?, 8] (h and c of an LSTM; dim 1 the
 * batch, anonymous): feat = mean of input over samples as [1, batch, 1]; h0, c0 = Split(state);
 * LSTM(feat, h0, c0) with hidden 8 → Y_h, Y_c; stateN = Concat(Y_h, Y_c) [2, batch, 8];
 * output = Sigmoid(Y_h[0] · v) [batch, 1]. 9 nodes, no value_info.
 */
function recurrentModel(): OnnxTypes.ModelProto {
  const f32 = (name: string, dims: number[], f: (i: number) => number): OnnxTypes.ITensorProto => {
    const n = dims.reduce((a, b) => a * b, 1);
    return { name, dataType: DT.FLOAT, dims, rawData: new Uint8Array(Float32Array.from({ length: n }, (_, i) => f(i)).buffer) };
  };
  const i64 = (name: string, values: number[], dims: number[]): OnnxTypes.ITensorProto => ({ name, dataType: DT.INT64, dims, rawData: new Uint8Array(BigInt64Array.from(values.map(BigInt)).buffer) });
  return onnx.ModelProto.create({
    irVersion: 8,
    opsetImport: [{ domain: '', version: 18 }],
    graph: {
      name: 'recurrent',
      input: [
        { name: 'input', type: { tensorType: { elemType: DT.FLOAT, shape: { dim: [{}, {}] } } } },
        { name: 'state', type: { tensorType: { elemType: DT.FLOAT, shape: { dim: [{ dimValue: 2 }, {}, { dimValue: H }] } } } },
      ],
      initializer: [
        i64('axis1', [1], [1]),
        i64('axis0', [0], [1]),
        i64('halves', [1, 1], [2]),
        f32('W', [1, 4 * H, 1], (i) => ((i % 5) - 2) / 4),
        f32('R', [1, 4 * H, H], (i) => ((i % 7) - 3) / 20),
        f32('v', [H, 1], (i) => (i - 3.5) / 4),
      ],
      node: [
        { opType: 'ReduceMean', input: ['input', 'axis1'], output: ['m'], name: 'mean', attribute: [{ name: 'keepdims', type: AT.INT, i: 1 }] },
        { opType: 'Unsqueeze', input: ['m', 'axis0'], output: ['feat'], name: 'feat' },
        { opType: 'Split', input: ['state', 'halves'], output: ['h0', 'c0'], name: 'split', attribute: [{ name: 'axis', type: AT.INT, i: 0 }] },
        { opType: 'LSTM', input: ['feat', 'W', 'R', '', '', 'h0', 'c0'], output: ['Y', 'Y_h', 'Y_c'], name: 'lstm', attribute: [{ name: 'hidden_size', type: AT.INT, i: H }] },
        { opType: 'Concat', input: ['Y_h', 'Y_c'], output: ['stateN'], name: 'state_out', attribute: [{ name: 'axis', type: AT.INT, i: 0 }] },
        { opType: 'Squeeze', input: ['Y_h', 'axis0'], output: ['h'], name: 'h' },
        { opType: 'MatMul', input: ['h', 'v'], output: ['logit'], name: 'head' },
        { opType: 'Sigmoid', input: ['logit'], output: ['output'], name: 'prob' },
      ],
      output: [{ name: 'output' }, { name: 'stateN' }],
    },
  });
}

describe('axes a user can name', () => {
  it('infers the batch dim of a recurrent state [2, ?, 8]; with --axis input.1=samples the sequence axis takes that name; at N = 1, 4, 8 the operators equal the whole model at batch 3', async () => {
    const model = recurrentModel();
    const file = path.join(dir, 'recurrent.onnx');
    await writeFile(file, onnx.ModelProto.encode(model).finish());
    const feeds = { input: randomTensor([3, 1234], 'rec-input'), state: randomTensor([2, 3, H], 'rec-state') };
    const expected = await runOnnx(model, feeds);
    const inferred = await importOnnxModel(file, { operators: 4 });
    expect(inferred.spec.dynamicAxes).toEqual({ batch: 'batch', seq: 'seq' });
    expect(inferred.spec.inputs.map((t) => t.shape)).toEqual([
      ['batch', 'seq'],
      [2, 'batch', H],
    ]);
    expect(inferred.spec.outputs.map((t) => t.shape)).toEqual([
      ['batch', 1],
      [2, 'batch', H],
    ]);
    // fused batches concatenate along dim 0: a state batched in dim 1 keeps the service from fusing, naming the input
    expect(batchingBlockerOf(inferred.spec)).toMatch(/input 'state' of recurrent has dim 0 2, not the batch axis 'batch', so its queries cannot be fused/);
    for (const operators of [1, 4, 8]) {
      const { spec, operatorModels } = await importOnnxModel(file, { operators, probe: probeOf([['input.1', 'samples'], ['state.1', 'batch']]) });
      expect(spec.dynamicAxes).toEqual({ batch: 'batch', seq: 'samples' });
      expect(spec.inputs.map((t) => t.shape)).toEqual([
        ['batch', 'samples'],
        [2, 'batch', H],
      ]);
      expect(boundaryViolations(spec)).toEqual([]);
      const actual = await runOperatorsInSequence(spec, operatorModels, feeds);
      for (const c of compareOutputs(expected, actual, 1e-5)) expect(c, `N=${operators} ${c.name}`).toMatchObject({ ok: true });
    }
  });

  it('--axis input.1=512 fixes a length for a model that accepts one only: the spec has no sequence axis, the operators keep the file\'s dynamic dim', async () => {
    const model = recurrentModel();
    const file = path.join(dir, 'recurrent-fixed.onnx');
    await writeFile(file, onnx.ModelProto.encode(model).finish());
    const { spec, operatorModels, model: whole } = await importOnnxModel(file, { operators: 3, probe: probeOf([['input.1', '512']]) });
    expect(spec.dynamicAxes).toEqual({ batch: 'batch' });
    expect(spec.inputs.map((t) => t.shape)).toEqual([
      ['batch', 512],
      [2, 'batch', H],
    ]);
    const declared = (m: OnnxTypes.ModelProto): unknown => m.graph!.input!.find((v) => v.name === 'input')?.type?.tensorType?.shape?.dim?.map((d) => d.dimValue ?? d.dimParam ?? '?');
    expect(declared(whole)).toEqual(declared(model));
    expect(declared(operatorModels[0]!)).toEqual(declared(model));
    const feeds = { input: randomTensor([2, 512], 'fixed-input'), state: randomTensor([2, 2, H], 'fixed-state') };
    const expected = await runOnnx(model, feeds);
    const actual = await runOperatorsInSequence(spec, operatorModels, feeds);
    for (const c of compareOutputs(expected, actual, 1e-5)) expect(c, c.name).toMatchObject({ ok: true });
  });

  it('a wrong binding fails in the probe, which shows the axis it took each dim for; bad --axis flags name the input, the dim and the axis', async () => {
    const file = path.join(dir, 'recurrent2.onnx');
    await writeFile(file, onnx.ModelProto.encode(recurrentModel()).finish());
    const wrong = await importOnnxModel(file, { operators: 2, probe: probeOf([['state.1', 'seq']]) }).catch((e: unknown) => e);
    expect(String(wrong)).toMatch(/LSTM.*The probe fed input \[1 \(batch\), 32 \(seq\)\] = 0; state \[2, 32 \(seq\), 8\] = 0/s);
    const bad = async (axes: [string, string][]): Promise<string> => String(await importOnnxModel(file, { operators: 2, probe: probeOf(axes) }).catch((e: unknown) => e));
    expect(await bad([['state.0', 'batch']])).toMatch(/--axis state\.0=batch: dim 0 of 'state' is fixed at 2, so it cannot be the axis 'batch'/);
    expect(await bad([['mic.1', 'batch']])).toMatch(/--axis mic\.1=batch: 'mic' is not an input of .* \(its inputs: input, state\)/);
    expect(await bad([['state.3', 'batch']])).toMatch(/--axis state\.3=batch: 'state' has rank 3 \(\[2, \?, 8\]\), so it has no dim 3/);
    expect(await bad([['input.0', 'samples']])).toMatch(/--axis input\.0=samples: dim 0 of 'input' is the batch axis 'batch'/);
    expect(await bad([['input.1', 'a+b']])).toMatch(/--axis input\.1=a\+b: the axis name 'a\+b' must be/);
    expect(() => probeInputsOf([], [], [['state', 'batch']])).toThrow(/--axis state=batch: expects NAME\.D=AXIS/);
    expect(() => probeInputsOf([], [], [['state.1', 'batch'], ['state.1', 'seq']])).toThrow(/--axis gives dim 1 of 'state' twice/);
    // an input name with dots: the dim follows the last one
    expect(probeInputsOf([], [], [['input.1.2', 'samples']])?.axes).toEqual({ 'input.1': { 2: 'samples' } });
  });

  it('abacus models import takes --axis NAME.D=AXIS (repeatable)', async () => {
    const file = path.join(dir, 'recurrent3.onnx');
    await writeFile(file, onnx.ModelProto.encode(recurrentModel()).finish());
    const ok = await sandbox.abacus('models', 'import', file, '--operators', '3', '--axis', 'input.1=samples', '--axis', 'state.1=batch', '--json');
    expect(ok.code, ok.stderr).toBe(0);
    expect((JSON.parse(ok.stdout) as { dynamicAxes: unknown }).dynamicAxes).toEqual({ batch: 'batch', seq: 'samples' });
    const malformed = await sandbox.inProcess('models', 'import', file, '--operators', '3', '--axis', 'state.1');
    expect(malformed.code).toBe(2);
    expect(malformed.stderr).toMatch(/--axis expects NAME\.D=AXIS/);
  });
});
