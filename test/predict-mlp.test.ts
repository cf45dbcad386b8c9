/**
 * The MLP (`predict/mlp`): the plain typed-array forward pass used for serving matches tfjs'
 * own `model.predict` on the same weights (tolerance 1e-5 ms), training fits a linear map under
 * each loss (its gradients are right) and is
 * deterministic for a seed, and it learns a smooth non-linear latency surface.
 */
import { describe, expect, it } from 'vitest';
import { fromTarget } from '../src/predict/encoded.ts';
import { FeatureEncoder } from '../src/predict/features.ts';
import { predictWithTf } from './helpers/tf-reference.ts';
import { DEFAULT_MLP_OPTIONS, trainMlp } from '../src/predict/mlp/train-mlp.ts';
import { MlpPredictor, type DenseLayer } from '../src/predict/mlp/mlp-predictor.ts';
import { createDenseKernel } from '../src/predict/mlp/simd-kernel.ts';
import { Rng } from '../src/rng.ts';
import { trainPredictor } from '../src/predict/train.ts';
import type { PredictorFile } from '../src/predict/file.ts';
import { TINY_SPECS, formulaRows } from './predict-fixtures.ts';

function mlpOf(file: PredictorFile): DenseLayer[] {
  if (file.kind !== 'mlp') throw new Error(`expected an mlp file, got ${file.kind}`);
  return file.mlp.layers;
}

describe('forward pass', () => {
  it('matches tfjs model.predict within 1e-5 ms on 300 groups', async () => {
    const rows = formulaRows(500, 1);
    const r = await trainPredictor(rows, { kind: 'mlp', specs: TINY_SPECS, folds: 0, epochs: 4, seed: 3 });
    const file = r.file;
    const enc = new FeatureEncoder({ featureSet: file.features.set, maxSlots: file.features.maxSlots, trainedModels: file.models.map((m) => m.name), specs: TINY_SPECS });
    const groups = rows.slice(0, 300).map((row) => row.slots);
    const width = enc.width;
    const x = new Float32Array(groups.length * width);
    const raw = new Float64Array(width);
    groups.forEach((g, i) => {
      enc.encode(g, raw);
      for (let j = 0; j < width; j++) {
        const sd = file.features.std[j]!;
        x[i * width + j] = sd > 0 ? (raw[j]! - file.features.mean[j]!) / sd : 0;
      }
    });
    const tfOut = await predictWithTf(mlpOf(file), x, width);
    const ours = r.predictor.predict(groups);
    let worst = 0;
    for (let i = 0; i < groups.length; i++) worst = Math.max(worst, Math.abs(ours[i]! - Math.max(0, fromTarget(file.target, tfOut[i]!))));
    expect(worst).toBeLessThanOrEqual(1e-5);
    // the test means something: predictions are in the data's range, not all equal
    expect(new Set(Array.from(ours, (v) => v.toFixed(3))).size).toBeGreaterThan(50);
  });

  it('computes a hand-checked network: relu(x·W1 + b1)·W2 + b2', () => {
    // features of one cnn slot at maxSlots 1 (full): [count_cnn, start, end, batch, seq_len,
    //   gflop_spatial, gflop_dense, mb_spatial, mb_dense, kernels_spatial, kernels_dense]
    const enc = new FeatureEncoder({ featureSet: 'full', maxSlots: 1, trainedModels: ['cnn'], specs: new Map([['cnn', TINY_SPECS.get('cnn')!]]) });
    const width = enc.width; // 11
    // hidden unit 0 reads the GFLOP of both kinds (indices 5, 6) with weight 1, bias −1; unit 1
    // reads start (index 1) with weight −1 (always ≤ 0 → ReLU 0)
    const kernel1 = new Array<number>(width * 2).fill(0);
    kernel1[5 * 2 + 0] = 1;
    kernel1[6 * 2 + 0] = 1;
    kernel1[1 * 2 + 1] = -1;
    const layers: DenseLayer[] = [
      { inputs: width, units: 2, activation: 'relu', kernel: kernel1, bias: [-1, 0] },
      { inputs: 2, units: 1, activation: 'linear', kernel: [0.5, 100], bias: [0.25] },
    ];
    const p = new MlpPredictor(enc, { mean: new Array<number>(width).fill(0), std: new Array<number>(width).fill(1) }, { transform: 'identity', mean: 0, std: 1 }, layers, 'sim:a100');
    // cnn [0,3) batch 2: 6 spatial + 1 dense GFLOP → h0 = 6, h1 = relu(−0) = 0 → 0.5·6 + 0.25 = 3.25
    expect(p.predict([[{ model: 'cnn', start: 0, end: 3, batch: 2, seqLen: 0 }]])[0]).toBeCloseTo(3.25, 12);
    // cnn [2,3) batch 1: 0.5 dense GFLOP → h0 = relu(−0.5) = 0, h1 = relu(−2) = 0 → 0.25
    expect(p.predict([[{ model: 'cnn', start: 2, end: 3, batch: 1, seqLen: 0 }]])[0]).toBeCloseTo(0.25, 12);
  });

  it('writes into the given array without allocating a new one', async () => {
    const rows = formulaRows(120, 2);
    const r = await trainPredictor(rows, { kind: 'mlp', specs: TINY_SPECS, folds: 0, epochs: 1 });
    const out = new Float64Array(4);
    const got = r.predictor.predict([rows[0]!.slots, rows[1]!.slots], out);
    expect(got).toBe(out);
    expect(() => r.predictor.predict([rows[0]!.slots, rows[1]!.slots], new Float64Array(1))).toThrow(/out has length 1, fewer than the 2 groups/);
  });
});

describe('WebAssembly SIMD kernel', () => {
  it('is available in Node and equals the scalar sum exactly (blocks of 4 units and a remainder, ReLU on and off)', () => {
    const k = createDenseKernel();
    expect(k).toBeDefined();
    const heap = new Float64Array(k!.memory.buffer);
    const rng = new Rng(1);
    for (const [nIn, nOut, relu] of [
      [35, 33, 1],
      [7, 1, 0],
      [3, 4, 1],
    ] as const) {
      const x = 0;
      const w = 4 * nIn;
      const b = w + nIn * nOut;
      const out = b + nOut;
      for (let i = 0; i < out; i++) heap[i] = rng.nextNormal();
      k!.dense(x * 8, w * 8, b * 8, out * 8, nIn, nOut, relu);
      for (let g = 0; g < 4; g++) {
        for (let j = 0; j < nOut; j++) {
          let sum = heap[b + j]!;
          for (let i = 0; i < nIn; i++) sum += heap[x + i * 4 + g]! * heap[w + i * nOut + j]!;
          expect(heap[out + j * 4 + g]).toBe(relu && sum < 0 ? 0 : sum);
        }
      }
    }
  });

  it('the SIMD and the plain JS paths of MlpPredictor give the same predictions (≤ 1e-12 relative)', async () => {
    const rows = formulaRows(300, 8);
    const r = await trainPredictor(rows, { kind: 'mlp', specs: TINY_SPECS, folds: 0, epochs: 2 });
    const file = r.file;
    const enc = (): FeatureEncoder => new FeatureEncoder({ featureSet: file.features.set, maxSlots: file.features.maxSlots, trainedModels: file.models.map((m) => m.name), specs: TINY_SPECS });
    const scaling = { mean: file.features.mean, std: file.features.std };
    const simd = new MlpPredictor(enc(), scaling, file.target, mlpOf(file), 'sim:a100');
    const js = new MlpPredictor(enc(), scaling, file.target, mlpOf(file), 'sim:a100', { simd: false });
    expect(simd.simd).toBe(true);
    expect(js.simd).toBe(false);
    const groups = rows.map((row) => row.slots); // 300 groups: 75 calls of 4 lanes
    const a = simd.predict(groups);
    const b = js.predict(groups);
    for (let i = 0; i < groups.length; i++) expect(Math.abs(a[i]! - b[i]!)).toBeLessThanOrEqual(1e-12 * b[i]!);
    // 1..3 groups leave lanes unused
    for (let n = 1; n <= 3; n++) expect(Array.from(simd.predict(groups.slice(0, n)))).toEqual(Array.from(a.slice(0, n)));
  });
});

describe('training', () => {
  it('is deterministic for a seed (identical weights), different for another seed', async () => {
    const rows = formulaRows(200, 4);
    const train = (seed: number): Promise<DenseLayer[]> => trainPredictor(rows, { kind: 'mlp', specs: TINY_SPECS, folds: 0, epochs: 2, seed }).then((r) => mlpOf(r.file));
    const [a, b, c] = [await train(5), await train(5), await train(6)];
    expect(a).toEqual(b);
    expect(a).not.toEqual(c);
  });

  it('learns a non-linear latency surface better than the linear baseline (held-out MAPE < 10%; noise-free formula, distinct groups)', async () => {
    const seen = new Set<string>();
    const rows = formulaRows(3000, 9)
      .filter((row) => !seen.has(JSON.stringify(row.slots)) && Boolean(seen.add(JSON.stringify(row.slots))))
      .slice(0, 1200);
    const mlp = await trainPredictor(rows, { kind: 'mlp', specs: TINY_SPECS, folds: 0, epochs: 40 });
    const linear = await trainPredictor(rows, { kind: 'linear', specs: TINY_SPECS, folds: 0 });
    expect(mlp.holdout!.mape).toBeLessThan(0.1);
    expect(mlp.holdout!.mape).toBeLessThan(linear.holdout!.mape);
    expect(mlp.file.target.transform).toBe('log');
  });

  it('fits a linear map under each loss (the gradients are right), its epoch loss falling; refuses data of the wrong size', async () => {
    const width = 3;
    const n = 400;
    const rng = new Rng(2);
    const x = Float32Array.from({ length: n * width }, () => rng.nextNormal());
    const f = (i: number): number => 0.5 * x[i * width]! - x[i * width + 1]! + 0.25 * x[i * width + 2]!;
    const y = Float32Array.from({ length: n }, (_, i) => f(i));
    for (const loss of ['mse', 'mae', 'huber'] as const) {
      const losses: number[] = [];
      const layers = await trainMlp(x, y, width, { ...DEFAULT_MLP_OPTIONS, hidden: [16], epochs: 80, learningRate: 0.02, loss, onEpoch: (_e, _n, l) => losses.push(l) });
      expect(losses).toHaveLength(80);
      expect(losses.at(-1)!, loss).toBeLessThan(losses[0]! / 100);
      // the network's output (tfjs' forward pass, the independent reference) against the map, on 50 of the rows
      const out = await predictWithTf(layers, x.subarray(0, 50 * width), width);
      let worst = 0;
      for (let i = 0; i < 50; i++) worst = Math.max(worst, Math.abs(out[i]! - f(i)));
      expect(worst, loss).toBeLessThan(0.1);
    }
    await expect(trainMlp(x, y.subarray(1), width, DEFAULT_MLP_OPTIONS)).rejects.toThrow(/expected 399×3/);
    await expect(trainMlp(new Float32Array(0), new Float32Array(0), width, DEFAULT_MLP_OPTIONS)).rejects.toThrow(/0 samples/);
  });
});
