/**
 * The linear baseline (`predict/linear`): the closed-form ridge / least-squares solve recovers
 * the coefficients of exactly linear data, and trained end to end on latencies that are an
 * exact linear function of the features it predicts them exactly.
 */
import { describe, expect, it } from 'vitest';
import { choleskySolve, fitRidge } from '../src/predict/linear/linear-predictor.ts';
import { trainPredictor } from '../src/predict/train.ts';
import { FeatureEncoder } from '../src/predict/features.ts';
import { Rng } from '../src/rng.ts';
import { TINY_SPECS, formulaRows } from './predict-fixtures.ts';

describe('choleskySolve', () => {
  it('solves a 3×3 SPD system (solution checked by hand: A·[1, -2, 3] = b)', () => {
    // A = [[4, 2, 0], [2, 5, 1], [0, 1, 3]]; A·[1, -2, 3] = [0, -5, 7]
    const w = choleskySolve(Float64Array.from([4, 2, 0, 2, 5, 1, 0, 1, 3]), Float64Array.from([0, -5, 7]), 3);
    for (const [i, e] of [1, -2, 3].entries()) expect(Math.abs(w[i]! - e)).toBeLessThan(1e-12);
  });

  it('rejects a singular system with off-diagonal mass', () => {
    expect(() => choleskySolve(Float64Array.from([1, 1, 1, 1]), Float64Array.from([1, 1]), 2)).toThrow(/not positive definite at feature 1/);
  });
});

describe('fitRidge', () => {
  it('recovers the intercept and coefficients of exactly linear data (λ = 0, |error| ≤ 1e-9)', () => {
    const rng = new Rng(11);
    const width = 5;
    const n = 200;
    const truth = [0.5, -2, 3.25, 0, 7];
    const x = new Float64Array(n * width);
    const y = new Float64Array(n);
    for (let r = 0; r < n; r++) {
      let v = 1.5;
      for (let j = 0; j < width; j++) {
        const xv = rng.nextNormal() * (j + 1);
        x[r * width + j] = xv;
        v += truth[j]! * xv;
      }
      y[r] = v;
    }
    const w = fitRidge(x, y, width, 0);
    expect(Math.abs(w.intercept - 1.5)).toBeLessThan(1e-9);
    for (let j = 0; j < width; j++) expect(Math.abs(w.coefficients[j]! - truth[j]!)).toBeLessThan(1e-9);
  });

  it('a column constant over the data gets coefficient 0 (λ = 0)', () => {
    const x = Float64Array.from([1, 5, 2, 5, 3, 5, 4, 5]);
    const y = Float64Array.from([3, 5, 7, 9]); // 1 + 2·x0
    const w = fitRidge(x, y, 2, 0);
    expect(w.coefficients[1]).toBe(0);
    expect(Math.abs(w.coefficients[0]! - 2)).toBeLessThan(1e-12);
    expect(Math.abs(w.intercept - 1)).toBeLessThan(1e-12);
  });

  it('fits on a subset of rows when given', () => {
    const x = Float64Array.from([0, 1, 2, 100]);
    const y = Float64Array.from([1, 3, 5, -50]); // rows 0..2: 1 + 2x
    const w = fitRidge(x, y, 1, 0, [0, 1, 2]);
    expect(Math.abs(w.coefficients[0]! - 2)).toBeLessThan(1e-12);
  });
});

describe('linear predictor end to end', () => {
  it('predicts latencies that are an exact linear function of the full features (held-out MAE ≤ 1e-6 ms)', async () => {
    // latency = 2 + Σ features · c, with the encoder the trainer will build (trained on both tiny models)
    const enc = new FeatureEncoder({ featureSet: 'full', maxSlots: 2, trainedModels: ['cnn', 'tx'], specs: TINY_SPECS });
    const coef = enc.names.map((_, j) => 0.01 * ((j % 5) + 1));
    const row = new Float64Array(enc.width);
    const rows = formulaRows(300, 5, 2, (slots) => {
      enc.encode(slots, row);
      return 2 + row.reduce((a, v, j) => a + v * coef[j]!, 0);
    });
    const r = await trainPredictor(rows, { kind: 'linear', specs: TINY_SPECS, folds: 3, lambda: 0 });
    expect(r.kind).toBe('linear');
    expect(r.holdout!.maeMs).toBeLessThan(1e-6);
    expect(r.cv!.maeMs).toBeLessThan(1e-6);
    expect(r.file.target.transform).toBe('identity');
  });
});
