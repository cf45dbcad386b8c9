/**
 * `predictor.json` (`predict/file.ts`): save → load gives the same predictions, bit for bit,
 * for both kinds; every load error is clear and names what is wrong (device, unknown model,
 * operator count, variant, a bad field, the version, JSON syntax).
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidConfigError } from '../src/errors.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import { loadPredictor, readPredictorFile, writePredictorFile, type PredictorFile } from '../src/predict/file.ts';
import { trainPredictor, type TrainResult } from '../src/predict/train.ts';
import { CNN, TINY_SPECS, TX, formulaRows } from './predict-fixtures.ts';

let tmp: string;
let linear: TrainResult;
let mlp: TrainResult;
let flop: TrainResult;
const rows = formulaRows(300, 21);

beforeAll(async () => {
  tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-predict-file-'));
  linear = await trainPredictor(rows, { kind: 'linear', specs: TINY_SPECS, folds: 2, files: ['data.csv'] });
  mlp = await trainPredictor(rows, { kind: 'mlp', specs: TINY_SPECS, folds: 0, epochs: 2 });
  flop = await trainPredictor(rows, { kind: 'linear', specs: TINY_SPECS, folds: 0, featureSet: 'flop' });
});
afterAll(async () => {
  await fs.rm(tmp, { recursive: true, force: true });
});

async function save(file: PredictorFile | object, name: string): Promise<string> {
  const p = path.join(tmp, name);
  await fs.writeFile(p, JSON.stringify(file));
  return p;
}

const opts = (models: ReadonlyMap<string, ModelSpec> = TINY_SPECS, extra: { deviceId?: string; allowUnseen?: boolean } = {}): { deviceId: string; models: ReadonlyMap<string, ModelSpec>; allowUnseen?: boolean } => ({
  deviceId: 'sim:a100',
  models,
  ...extra,
});

describe('round trip', () => {
  it.each(['linear', 'mlp'] as const)('%s: save → load → identical predictions and metadata', async (kind) => {
    const trained = kind === 'linear' ? linear : mlp;
    const p = path.join(tmp, `${kind}.json`);
    await writePredictorFile(p, trained.file);
    const loaded = await loadPredictor(p, opts());
    expect(loaded.kind).toBe(kind);
    expect(loaded.deviceId).toBe('sim:a100');
    expect(loaded.models).toEqual(['cnn', 'tx']);
    expect(loaded.maxSlots).toBe(2);
    const groups = rows.map((r) => r.slots);
    expect(Array.from(loaded.predict(groups))).toEqual(Array.from(trained.predictor.predict(groups)));
    const file = await readPredictorFile(p);
    expect(file.formatVersion).toBe(2);
    expect(file.training.rows).toBe(trained.trainSamples);
    expect(file.models.map((m) => [m.name, m.operators])).toEqual([
      ['cnn', 3],
      ['tx', 2],
    ]);
    expect(file.metrics.holdout).toEqual(trained.holdout);
  });

  it('records the training summary: files, rows per model, batch and seq ranges, metrics', () => {
    const t = linear.file.training;
    expect(t.files).toEqual(['data.csv']);
    expect(t.perModel['cnn']! + t.perModel['tx']!).toBeGreaterThanOrEqual(t.rows);
    expect(t.batch).toEqual([1, 8]);
    expect(t.seqLen[1]).toBe(16);
    expect(linear.file.metrics.cv).not.toBeNull();
  });

  it('a subset of the trained models loads and scores only those', async () => {
    const p = await save(linear.file, 'subset.json');
    const loaded = await loadPredictor(p, opts(new Map([['cnn', CNN]])));
    expect(loaded.models).toEqual(['cnn']);
    expect(() => loaded.predict([[{ model: 'tx', start: 0, end: 1, batch: 1, seqLen: 0 }]])).toThrow(/group 0 slot 0: model 'tx' is not known/);
  });
});

describe('load errors', () => {
  const renamed = (spec: ModelSpec, name: string): ModelSpec => ({ ...spec, name });

  it('another device', async () => {
    const p = await save(linear.file, 'device.json');
    await expect(loadPredictor(p, opts(TINY_SPECS, { deviceId: 'ort:cpu' }))).rejects.toThrow(/device\.json: the predictor was trained on device 'sim:a100', not 'ort:cpu'/);
  });

  it('a model it was not trained on: full → retrain with --features flop', async () => {
    const p = await save(linear.file, 'unknown.json');
    const models = new Map([...TINY_SPECS, ['other', renamed(CNN, 'other')]]);
    const err = loadPredictor(p, opts(models, { allowUnseen: true }));
    await expect(err).rejects.toThrow(InvalidConfigError);
    await expect(loadPredictor(p, opts(models))).rejects.toThrow(/not trained on 'other' \(trained: cnn, tx\).*--features flop/);
  });

  it('a model it was not trained on: flop → needs allowUnseen, then scores it', async () => {
    const p = await save(flop.file, 'flop.json');
    const models = new Map([...TINY_SPECS, ['other', renamed(TX, 'other')]]);
    await expect(loadPredictor(p, opts(models))).rejects.toThrow(/not trained on 'other'.*--allow-unseen/);
    const loaded = await loadPredictor(p, opts(models, { allowUnseen: true }));
    expect(loaded.models).toEqual(['cnn', 'other', 'tx']);
    // flop features carry no identity: the unseen copy of tx scores like tx
    const [a, b] = loaded.predict([[{ model: 'other', start: 0, end: 2, batch: 2, seqLen: 8 }], [{ model: 'tx', start: 0, end: 2, batch: 2, seqLen: 8 }]]);
    expect(a).toBe(b);
  });

  it('a changed operator count', async () => {
    const p = await save(linear.file, 'ops.json');
    const fewer: ModelSpec = { ...CNN, operators: CNN.operators.slice(0, 2) };
    await expect(loadPredictor(p, opts(new Map([['cnn', fewer]])))).rejects.toThrow(/model 'cnn' has 2 operators here but the predictor was trained with 3/);
  });

  it('another variant with the same name and operator count (fingerprint)', async () => {
    const p = await save(linear.file, 'variant.json');
    const wider: ModelSpec = { ...CNN, operators: CNN.operators.map((o) => ({ ...o, gflops: { ...o.gflops, c0: o.gflops.c0 * 2 } })) };
    await expect(loadPredictor(p, opts(new Map([['cnn', wider]])))).rejects.toThrow(/model 'cnn' is not the variant the predictor was trained with \(7\.0000 GFLOP/);
  });

  it.each([
    ['features.mean', (f: Record<string, unknown>) => ({ ...f, features: { ...(f['features'] as object), mean: 'x' } }), /features\.mean: /],
    ['target.std', (f: Record<string, unknown>) => ({ ...f, target: { ...(f['target'] as object), std: 0 } }), /target\.std: must be a positive finite number/],
    ['kind', (f: Record<string, unknown>) => ({ ...f, kind: 'forest' }), /kind: /],
    ['missing deviceId', (f: Record<string, unknown>) => ({ ...f, deviceId: undefined }), /deviceId: /],
    ['extra field', (f: Record<string, unknown>) => ({ ...f, extra: 1 }), /unknown field\(s\) 'extra'/],
    ['linear.coefficients length', (f: Record<string, unknown>) => ({ ...f, linear: { intercept: 0, coefficients: [1, 2] } }), /linear\.coefficients: has 2 values for 22 features/],
    ['feature names', (f: Record<string, unknown>) => ({ ...f, features: { ...(f['features'] as { names: string[] }), names: ['a', ...(f['features'] as { names: string[] }).names.slice(1)] } }), /features\.names\[0\]: does not match/],
  ] as [string, (f: Record<string, unknown>) => object, RegExp][])('a bad field: %s', async (name, edit, re) => {
    const p = await save(edit({ ...linear.file }), `bad-${name.replace(/\W/g, '_')}.json`);
    const err = loadPredictor(p, opts());
    await expect(err).rejects.toThrow(InvalidConfigError);
    await expect(loadPredictor(p, opts())).rejects.toThrow(new RegExp(`bad-.*\\.json: .*${re.source}`));
  });

  it('an mlp layer that does not chain', async () => {
    if (mlp.file.kind !== 'mlp') throw new Error('mlp expected');
    const layers = mlp.file.mlp.layers.map((l, i) => (i === 1 ? { ...l, inputs: 5, kernel: l.kernel.slice(0, 5 * l.units) } : l));
    const p = await save({ ...mlp.file, mlp: { layers } }, 'chain.json');
    await expect(loadPredictor(p, opts())).rejects.toThrow(/mlp\.layers\[1\]\.inputs: is 5, but 32 values come in/);
  });

  it('another format version: a version-1 file (features before the split by kind) is refused', async () => {
    const p = await save({ ...linear.file, formatVersion: 1 }, 'v1.json');
    await expect(loadPredictor(p, opts())).rejects.toThrow(/v1\.json: formatVersion: 1 is not supported \(this version of abacus reads 2; retrain with abacus train\)/);
  });

  it('not JSON', async () => {
    const p = path.join(tmp, 'broken.json');
    await fs.writeFile(p, '{"formatVersion": 2,');
    await expect(loadPredictor(p, opts())).rejects.toThrow(/broken\.json: not valid JSON/);
  });
});
