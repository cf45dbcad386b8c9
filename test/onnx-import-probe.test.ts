/**
 * Probes given by the user (docs/import.md "When the probe cannot guess"): an audio-like model (reflect padding of 80 samples, a
 * state input, a scalar sample-rate input that picks a row of a table) cannot be probed with
 * the default zero inputs (the rate 0 picks no row at every length; the padding exceeds 32
 * samples, which the probe's search for sizes fixes by itself); each error shows what the
 * probe fed and names the flags and the scalar input.
 * `--probe-shape audio=1x16000` fixes the padding (and sets the default sequence length);
 * with `--probe-value sr=16000` too it imports at
 * N = 1, 4, 8 and at its node count, and the operators in sequence equal the whole model at a
 * length it was not probed at.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { probeInputsOf } from '../src/cli/models.ts';
import { importOnnxModel } from '../src/model/onnx/partition.ts';
import { onnx } from '../src/model/onnx/proto.ts';
import type { ProbeInputs } from '../src/model/onnx/shapes.ts';
import type { OnnxTypes } from '../src/model/onnx/proto.ts';
import { compareOutputs, runOnnx, runOperatorsInSequence } from '../src/model/onnx/verify.ts';
import { cliSandbox } from './helpers/cli.ts';
import { boundaryViolations, randomTensor } from './onnx-fixtures.ts';

const sandbox = cliSandbox('abacus-probe-cli-');

let dir = '';
beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'abacus-onnx-probe-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const DT = onnx.TensorProto.DataType;
const probeOf = (...args: Parameters<typeof probeInputsOf>): ProbeInputs => probeInputsOf(...args) ?? {};
const AT = onnx.AttributeProto.AttributeType;

/**
 * audio [batch, samples], state [batch, 4], sr int64 []: padded = Pad(audio, 80 each side,
 * reflect); e = mean(padded², axis 1); coeff = table[sr / 1000 − 17] (a table of 16 rows: 16 kHz
 * → the last row; sr = 0 → index −17, out of bounds); out = state · coeff + e; new_state =
 * tanh(out). 9 nodes, no value_info (shapes must be probed).
 */
function audioModel(): OnnxTypes.ModelProto {
  const tableData = Float32Array.from({ length: 64 }, (_, i) => (i % 7) / 7 - 0.4);
  const i64 = (name: string, values: number[], dims: number[]): OnnxTypes.ITensorProto => ({ name, dataType: DT.INT64, dims, rawData: new Uint8Array(BigInt64Array.from(values.map(BigInt)).buffer) });
  return onnx.ModelProto.create({
    irVersion: 8,
    opsetImport: [{ domain: '', version: 17 }],
    graph: {
      name: 'audio',
      input: [
        { name: 'audio', type: { tensorType: { elemType: DT.FLOAT, shape: { dim: [{ dimParam: 'batch' }, { dimParam: 'samples' }] } } } },
        { name: 'state', type: { tensorType: { elemType: DT.FLOAT, shape: { dim: [{ dimParam: 'batch' }, { dimValue: 4 }] } } } },
        { name: 'sr', type: { tensorType: { elemType: DT.INT64, shape: { dim: [] } } } },
      ],
      initializer: [i64('pads', [0, 80, 0, 80], [4]), i64('khz', [1000], []), i64('offset', [17], []), { name: 'table', dataType: DT.FLOAT, dims: [16, 4], rawData: new Uint8Array(tableData.buffer) }],
      node: [
        { opType: 'Pad', input: ['audio', 'pads'], output: ['padded'], name: 'pad', attribute: [{ name: 'mode', type: AT.STRING, s: new TextEncoder().encode('reflect') }] },
        { opType: 'Mul', input: ['padded', 'padded'], output: ['sq'], name: 'sq' },
        { opType: 'ReduceMean', input: ['sq'], output: ['e'], name: 'energy', attribute: [{ name: 'axes', type: AT.INTS, ints: [1] }] },
        { opType: 'Div', input: ['sr', 'khz'], output: ['k'], name: 'khz' },
        { opType: 'Sub', input: ['k', 'offset'], output: ['row'], name: 'row' },
        { opType: 'Gather', input: ['table', 'row'], output: ['coeff'], name: 'coeff' },
        { opType: 'Mul', input: ['state', 'coeff'], output: ['s2'], name: 'scale' },
        { opType: 'Add', input: ['s2', 'e'], output: ['out'], name: 'add' },
        { opType: 'Tanh', input: ['out'], output: ['new_state'], name: 'tanh' },
      ],
      output: [{ name: 'out' }, { name: 'new_state' }],
    },
  });
}

/**
 * An STFT-like front end without a rate input: audio [batch, samples], state [batch, 8];
 * framed = Conv(Pad(Unsqueeze(audio), 128 each side, reflect), 8 filters of 256 taps, stride
 * 32) — torch.stft's centre padding (n_fft/2) and framing, frames = samples/32 + 1; logspec =
 * log(framed² + 1e-6) [batch, 8, frames]; new_state = tanh(mean over frames + state). 9 nodes,
 * no value_info. The reflect pad needs samples > 128, so the default probe (samples 32–128)
 * fails; the graph's bound (129) makes the search start at a default length of 1024 (probing
 * from 256 samples). The probe's sizes (256, 512, 768, 1024, 257, 259) fit `(samples+23)/31`
 * as well as `samples/32+1`: the power-of-two stride is preferred.
 */
function stftModel(): OnnxTypes.ModelProto {
  const taps = 256;
  const filters = Float32Array.from({ length: 8 * taps }, (_, i) => Math.cos((2 * Math.PI * (1 + Math.floor(i / taps)) * (i % taps)) / taps) * 0.5 * (1 - Math.cos((2 * Math.PI * (i % taps)) / taps)));
  const i64 = (name: string, values: number[], dims: number[]): OnnxTypes.ITensorProto => ({ name, dataType: DT.INT64, dims, rawData: new Uint8Array(BigInt64Array.from(values.map(BigInt)).buffer) });
  const f32 = (name: string, values: Float32Array, dims: number[]): OnnxTypes.ITensorProto => ({ name, dataType: DT.FLOAT, dims, rawData: new Uint8Array(values.buffer) });
  return onnx.ModelProto.create({
    irVersion: 8,
    opsetImport: [{ domain: '', version: 17 }],
    graph: {
      name: 'stft',
      input: [
        { name: 'audio', type: { tensorType: { elemType: DT.FLOAT, shape: { dim: [{ dimParam: 'batch' }, { dimParam: 'samples' }] } } } },
        { name: 'state', type: { tensorType: { elemType: DT.FLOAT, shape: { dim: [{ dimParam: 'batch' }, { dimValue: 8 }] } } } },
      ],
      initializer: [i64('one', [1], [1]), i64('pads', [0, 0, 128, 0, 0, 128], [6]), f32('filters', filters, [8, 1, taps]), f32('eps', Float32Array.from([1e-6]), [])],
      node: [
        { opType: 'Unsqueeze', input: ['audio', 'one'], output: ['mono'], name: 'mono' },
        { opType: 'Pad', input: ['mono', 'pads'], output: ['padded'], name: 'centre', attribute: [{ name: 'mode', type: AT.STRING, s: new TextEncoder().encode('reflect') }] },
        { opType: 'Conv', input: ['padded', 'filters'], output: ['framed'], name: 'frames', attribute: [{ name: 'strides', type: AT.INTS, ints: [32] }] },
        { opType: 'Mul', input: ['framed', 'framed'], output: ['power'], name: 'power' },
        { opType: 'Add', input: ['power', 'eps'], output: ['power_eps'], name: 'floor' },
        { opType: 'Log', input: ['power_eps'], output: ['logspec'], name: 'log' },
        { opType: 'ReduceMean', input: ['logspec'], output: ['m'], name: 'mean', attribute: [{ name: 'axes', type: AT.INTS, ints: [2] }, { name: 'keepdims', type: AT.INT, i: 0 }] },
        { opType: 'Add', input: ['m', 'state'], output: ['out'], name: 'add' },
        { opType: 'Tanh', input: ['out'], output: ['new_state'], name: 'tanh' },
      ],
      output: [{ name: 'logspec' }, { name: 'new_state' }],
    },
  });
}

describe('probe sizes found by search', () => {
  it('an STFT-like model with a large reflect pad imports with no flags at N = 1, 4, 9; the operators in sequence equal the whole model', async () => {
    const model = stftModel();
    const file = path.join(dir, 'stft.onnx');
    await writeFile(file, onnx.ModelProto.encode(model).finish());
    const feeds = { audio: randomTensor([2, 5003], 'stft-audio'), state: randomTensor([2, 8], 'stft-state') };
    const expected = await runOnnx(model, feeds);
    for (const operators of [1, 4, 9]) {
      const { spec, operatorModels } = await importOnnxModel(file, { operators });
      expect(spec.defaultSeqLen).toBe(1024); // 128 · 8: the first length whose smallest probe (1024/4 = 256) is ≥ 129
      expect(spec.dynamicAxes).toEqual({ batch: 'batch', seq: 'samples' });
      expect(spec.outputs.find((t) => t.name === 'logspec')?.shape).toEqual(['batch', 8, 'samples/32+1']);
      expect(spec.operators.reduce((a, op) => a + op.nodeCount, 0)).toBe(9);
      expect(boundaryViolations(spec)).toEqual([]);
      const actual = await runOperatorsInSequence(spec, operatorModels, feeds);
      for (const c of compareOutputs(expected, actual, 1e-5)) expect(c, `N=${operators} ${c.name}`).toMatchObject({ ok: true });
    }
  });

  it('a model with dynamic height and width and a reflect pad of 48 gets both axes grown to 128 (probing from 64)', async () => {
    const weights = Float32Array.from({ length: 4 * 3 * 9 }, (_, i) => ((i % 11) - 5) / 20);
    const model = onnx.ModelProto.create({
      irVersion: 8,
      opsetImport: [{ domain: '', version: 17 }],
      graph: {
        name: 'padded-detector',
        input: [{ name: 'image', type: { tensorType: { elemType: DT.FLOAT, shape: { dim: [{ dimParam: 'batch' }, { dimValue: 3 }, { dimParam: 'height' }, { dimParam: 'width' }] } } } }],
        initializer: [
          { name: 'pads', dataType: DT.INT64, dims: [8], rawData: new Uint8Array(BigInt64Array.from([0n, 0n, 48n, 48n, 0n, 0n, 48n, 48n]).buffer) },
          { name: 'w', dataType: DT.FLOAT, dims: [4, 3, 3, 3], rawData: new Uint8Array(weights.buffer) },
        ],
        node: [
          { opType: 'Pad', input: ['image', 'pads'], output: ['padded'], name: 'pad', attribute: [{ name: 'mode', type: AT.STRING, s: new TextEncoder().encode('reflect') }] },
          { opType: 'Conv', input: ['padded', 'w'], output: ['conv'], name: 'conv', attribute: [{ name: 'strides', type: AT.INTS, ints: [2, 2] }, { name: 'pads', type: AT.INTS, ints: [1, 1, 1, 1] }] },
          { opType: 'Relu', input: ['conv'], output: ['features'], name: 'relu' },
        ],
        output: [{ name: 'features' }],
      },
    });
    const file = path.join(dir, 'padded-detector.onnx');
    await writeFile(file, onnx.ModelProto.encode(model).finish());
    const feeds = { image: randomTensor([2, 3, 50, 70], 'padded-image') };
    const expected = await runOnnx(model, feeds);
    for (const operators of [1, 3]) {
      const { spec, operatorModels } = await importOnnxModel(file, { operators });
      expect(spec.dynamicAxes).toEqual({ batch: 'batch', symbols: { height: 128, width: 128 } });
      // ⌊(H + 96 + 2 − 3)/2⌋ + 1 = ⌊(H + 1)/2⌋ + 48 (ONNX Conv output size)
      expect(spec.outputs[0]!.shape).toEqual(['batch', 4, '(height+1)/2+48', '(width+1)/2+48']);
      expect(boundaryViolations(spec)).toEqual([]);
      const actual = await runOperatorsInSequence(spec, operatorModels, feeds);
      for (const c of compareOutputs(expected, actual, 1e-5)) expect(c, `N=${operators} ${c.name}`).toMatchObject({ ok: true });
    }
  });

  it('a Reshape into frames of 48 samples, which no power-of-two length fills, stops the search after three sizes and names the flags; --probe-shape imports it', async () => {
    const model = onnx.ModelProto.create({
      irVersion: 8,
      opsetImport: [{ domain: '', version: 17 }],
      graph: {
        name: 'frames48',
        input: [{ name: 'audio', type: { tensorType: { elemType: DT.FLOAT, shape: { dim: [{ dimParam: 'batch' }, { dimParam: 'samples' }] } } } }],
        initializer: [{ name: 'shape', dataType: DT.INT64, dims: [3], rawData: new Uint8Array(BigInt64Array.from([0n, -1n, 48n]).buffer) }],
        node: [
          { opType: 'Reshape', input: ['audio', 'shape'], output: ['frames'], name: 'frames' },
          { opType: 'ReduceMean', input: ['frames'], output: ['energy'], name: 'energy', attribute: [{ name: 'axes', type: AT.INTS, ints: [2] }, { name: 'keepdims', type: AT.INT, i: 0 }] },
        ],
        output: [{ name: 'energy' }],
      },
    });
    const file = path.join(dir, 'frames48.onnx');
    await writeFile(file, onnx.ModelProto.encode(model).finish());
    const err = await importOnnxModel(file, { operators: 2 }).catch((e: unknown) => e);
    expect(String(err)).toMatch(/at batch 1, samples 128 .*Reshape.*--probe-shape NAME=DxD.*searched larger sizes of 'samples': 128, 256, 512; this is the failure at 512\)$/s);
    // 9600 samples: probed at 2400, 4800, 7200 and 9600, multiples of 48 far enough apart that
    // samples/47 does not fit them (2400/47 = 51)
    const { spec } = await importOnnxModel(file, { operators: 2, probe: probeOf([['audio', '1x9600']], []) });
    expect(spec.defaultSeqLen).toBe(9600);
    expect(spec.operators[1]!.inputs[0]!.shape).toEqual(['batch', 'samples/48', 48]);
  });

  it('abacus models import reports only the outcome: the failed probe runs before the search leave no onnxruntime log lines', async () => {
    const file = path.join(dir, 'stft-quiet.onnx');
    await writeFile(file, onnx.ModelProto.encode(stftModel()).finish());
    const res = await sandbox.abacus('models', 'import', file, '--operators', '2', '--json');
    expect(res.code, res.stderr).toBe(0);
    expect(res.stderr).not.toMatch(/onnxruntime:|\[E:/);
    expect((JSON.parse(res.stdout) as { defaultSeqLen: number }).defaultSeqLen).toBe(1024);
  });

  it('a length the user sets is not searched: --default-seq-len 128 still fails naming the flags', async () => {
    const file = path.join(dir, 'stft2.onnx');
    await writeFile(file, onnx.ModelProto.encode(stftModel()).finish());
    const err = await importOnnxModel(file, { operators: 2, defaultSeqLen: 128 }).catch((e: unknown) => e);
    expect(String(err)).toMatch(/at batch 1, samples 32 .*Pad.*--probe-shape NAME=DxD/s);
    expect(String(err)).not.toMatch(/searched larger sizes/);
  });
});

/**
 * A model that accepts 256 to 640 samples only (like silero VAD's 16 kHz op15 export): framed =
 * Conv(Unsqueeze(audio), 4 filters of 256 taps, stride 128) needs samples ≥ 256; pad = a
 * ConstantOfShape of 640 − samples elements (fails above 640), summed to a scalar 0 and added
 * to the frames. 9 nodes, no value_info.
 */
function boundedModel(): OnnxTypes.ModelProto {
  const i64 = (name: string, values: number[], dims: number[]): OnnxTypes.ITensorProto => ({ name, dataType: DT.INT64, dims, rawData: new Uint8Array(BigInt64Array.from(values.map(BigInt)).buffer) });
  const filters = Float32Array.from({ length: 4 * 256 }, (_, i) => Math.sin(i / 9) * 0.05);
  return onnx.ModelProto.create({
    irVersion: 8,
    opsetImport: [{ domain: '', version: 17 }],
    graph: {
      name: 'bounded',
      input: [{ name: 'audio', type: { tensorType: { elemType: DT.FLOAT, shape: { dim: [{ dimParam: 'batch' }, { dimParam: 'samples' }] } } } }],
      initializer: [i64('one', [1], [1]), i64('zero', [0], [1]), i64('most', [640], [1]), { name: 'filters', dataType: DT.FLOAT, dims: [4, 1, 256], rawData: new Uint8Array(filters.buffer) }],
      node: [
        { opType: 'Unsqueeze', input: ['audio', 'one'], output: ['mono'], name: 'mono' },
        { opType: 'Conv', input: ['mono', 'filters'], output: ['framed'], name: 'frames', attribute: [{ name: 'strides', type: AT.INTS, ints: [128] }] },
        { opType: 'Shape', input: ['audio'], output: ['shape'], name: 'shape' },
        { opType: 'Gather', input: ['shape', 'one'], output: ['n'], name: 'n' },
        { opType: 'Sub', input: ['most', 'n'], output: ['room'], name: 'room' },
        { opType: 'ConstantOfShape', input: ['room'], output: ['spare'], name: 'spare' },
        { opType: 'ReduceSum', input: ['spare', 'zero'], output: ['nothing'], name: 'nothing', attribute: [{ name: 'keepdims', type: AT.INT, i: 0 }] },
        { opType: 'Cast', input: ['nothing'], output: ['nothing_f'], name: 'cast', attribute: [{ name: 'to', type: AT.INT, i: DT.FLOAT }] },
        { opType: 'Add', input: ['framed', 'nothing_f'], output: ['out'], name: 'add' },
      ],
      output: [{ name: 'out' }],
    },
  });
}

describe('a range of lengths given by the user', () => {
  it('a model that accepts 256–640 samples imports without flags (a window from the graph bound: 256–512) and with --probe-shape audio=1x256-640 (probed at 256, 448, 640); the operators equal the whole model at lengths never probed', async () => {
    const model = boundedModel();
    const file = path.join(dir, 'bounded.onnx');
    await writeFile(file, onnx.ModelProto.encode(model).finish());
    // No flags: the doubling search fails (256–1024 samples: the ConstantOfShape refuses 1024),
    // then the window from the graph's bound (the Conv's 256 taps) to twice it is accepted.
    const bare = await importOnnxModel(file, { operators: 3 });
    expect(bare.spec.defaultSeqLen).toBe(512);
    expect(bare.spec.outputs[0]!.shape).toEqual(['batch', 4, 'samples/128-1']);
    const probe = probeOf([['audio', '1x256-640']], []);
    expect(probe.ranges).toEqual({ audio: { 1: [256, 640] } });
    for (const operators of [1, 3, 9]) {
      const { spec, operatorModels } = await importOnnxModel(file, { operators, probe });
      expect(spec.defaultSeqLen).toBe(640);
      expect(spec.outputs[0]!.shape).toEqual(['batch', 4, 'samples/128-1']); // ⌊(samples − 256)/128⌋ + 1
      expect(boundaryViolations(spec)).toEqual([]);
      for (const samples of [300, 512, 601]) {
        const feeds = { audio: randomTensor([2, samples], `bounded-${samples}`) };
        const expected = await runOnnx(model, feeds);
        const actual = await runOperatorsInSequence(spec, operatorModels, feeds);
        for (const c of compareOutputs(expected, actual, 1e-5)) expect(c, `N=${operators} ${samples}: ${c.name}`).toMatchObject({ ok: true });
      }
    }
    await expect(importOnnxModel(file, { operators: 2, probe: probeOf([['audio', '2-9x640']], []) })).rejects.toThrow(/dim 0 of 'audio' is not the sequence axis 'samples'; a range of sizes is accepted for the sequence axis only/);
    await expect(importOnnxModel(file, { operators: 2, probe: probeOf([['audio', '1x640-641']], []) })).rejects.toThrow(/a range needs at least 3 lengths/);
    expect(() => probeInputsOf([['audio', '1x640-256']], [])).toThrow(/the range 640-256 must be LO-HI with 1 ≤ LO ≤ HI/);
  });
});

describe('shape probes given by the user', () => {
  it('names --probe-shape and --probe-value when the automatic probe fails; with both it imports at N = 1, 4, 8, 9', async () => {
    const model = audioModel();
    const file = path.join(dir, 'audio.onnx');
    await writeFile(file, onnx.ModelProto.encode(model).finish());

    // The Gather fails on the rate 0 (at every size: no search): the error names the scalar input.
    const bare = await importOnnxModel(file, { operators: 4 }).catch((e: unknown) => e);
    expect(String(bare)).toMatch(/onnxruntime failed to run it at batch 1, samples 32 to infer value shapes: .*Gather.*The probe fed audio \[1 \(batch\), 32 \(samples\)\] = 0; state \[1 \(batch\), 4\] = 0; sr \[\] = 0\. .*--probe-shape NAME=DxD.*--probe-value NAME=V.*the scalar \(0-d\) input 'sr' \(int64\) may be read so.*--probe-value sr=V/s);
    expect(String(bare)).not.toMatch(/searched larger sizes/);

    // With the rate given, the search finds the length itself.
    const valueOnly = await importOnnxModel(file, { operators: 4, probe: probeOf([], [['sr', '16000']]) });
    expect(valueOnly.spec.defaultSeqLen).toBe(512);

    const shapeOnly = await importOnnxModel(file, { operators: 4, probe: probeOf([['audio', '1x16000']], []) }).catch((e: unknown) => e);
    expect(String(shapeOnly)).toMatch(/at batch 1, samples 4000 .*Gather.*The probe fed audio \[1 \(batch\), 4000 \(samples\)\] = 0; state \[1 \(batch\), 4\] = 0; sr \[\] = 0\. .*--probe-value NAME=V/s);

    const probe = probeOf([['audio', '1x16000']], [['sr', '16000']]);
    const feeds = { audio: randomTensor([2, 12345], 'audio'), state: randomTensor([2, 4], 'state'), sr: new ort.Tensor('int64', BigInt64Array.from([16000n]), []) };
    const expected = await runOnnx(model, feeds);
    for (const operators of [1, 4, 8, 9]) {
      const { spec, operatorModels } = await importOnnxModel(file, { operators, probe });
      expect(spec.defaultSeqLen).toBe(16000);
      expect(spec.dynamicAxes).toEqual({ batch: 'batch', seq: 'samples' });
      expect(boundaryViolations(spec)).toEqual([]);
      if (operators === 9) expect(spec.operators[1]!.inputs.find((t) => t.name === 'padded')?.shape).toEqual(['batch', 'samples+160']);
      const actual = await runOperatorsInSequence(spec, operatorModels, feeds);
      for (const c of compareOutputs(expected, actual, 1e-5)) expect(c, `N=${operators} ${c.name}`).toMatchObject({ ok: true });
    }
  });

  it('refuses probe inputs that do not fit the model, naming the flag and the input', async () => {
    const file = path.join(dir, 'audio2.onnx');
    await writeFile(file, onnx.ModelProto.encode(audioModel()).finish());
    await expect(importOnnxModel(file, { operators: 2, probe: probeOf([['mic', '1x100']], []) })).rejects.toThrow(/--probe-shape mic=…: 'mic' is not an input of .* \(its inputs: audio, state, sr\)/);
    await expect(importOnnxModel(file, { operators: 2, probe: probeOf([['state', '1x5']], []) })).rejects.toThrow(/--probe-shape state=1x5: dim 1 of 'state' is fixed at 4/);
    await expect(importOnnxModel(file, { operators: 2, probe: probeOf([['audio', '16000']], []) })).rejects.toThrow(/'audio' has rank 2/);
    expect(() => probeInputsOf([['audio', '1xten']], [])).toThrow(/--probe-shape audio=1xten: dims must be integers ≥ 1/);
    expect(() => probeInputsOf([], [['sr', 'fast']])).toThrow(/--probe-value sr=fast: the value must be a finite number/);
  });

  it('abacus models import takes --probe-shape and --probe-value (repeatable NAME=VALUE)', async () => {
    const file = path.join(dir, 'audio3.onnx');
    await writeFile(file, onnx.ModelProto.encode(audioModel()).finish());
    const bare = await sandbox.inProcess('models', 'import', file, '--operators', '3'); // errors in this process: no child's start-up
    expect(bare.code).not.toBe(0);
    expect(bare.stderr).toMatch(/--probe-shape NAME=DxD/);
    const ok = await sandbox.abacus('models', 'import', file, '--operators', '3', '--probe-shape', 'audio=1x16000', '--probe-value', 'sr=16000', '--json');
    expect(ok.code, ok.stderr).toBe(0);
    expect((JSON.parse(ok.stdout) as { defaultSeqLen: number }).defaultSeqLen).toBe(16000);
    const malformed = await sandbox.inProcess('models', 'import', file, '--operators', '3', '--probe-value', 'sr');
    expect(malformed.code).toBe(2);
    expect(malformed.stderr).toMatch(/--probe-value expects NAME=VALUE/);
  });
});
