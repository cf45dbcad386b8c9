/**
 * The linear-regression baseline (the paper's "LR", Abacus §5.2/§7.2): latency in ms as an
 * affine function of the same standardized features as the MLP, fitted in closed form by
 * ridge regression (`fitRidge`). Kind `linear` in predictor files and on the CLI.
 */
import { EncodedPredictor, type FeatureScaling, type TargetTransform } from '../encoded.ts';
import type { FeatureEncoder } from '../features.ts';

/** Coefficients on standardized features; the output is the (standardized) target. */
export interface LinearWeights {
  readonly intercept: number;
  readonly coefficients: readonly number[];
}

export class LinearPredictor extends EncodedPredictor {
  readonly kind = 'linear';
  private readonly coefficients: Float64Array;
  private readonly intercept: number;

  /** @throws RangeError when there is not one coefficient per feature. */
  constructor(encoder: FeatureEncoder, scaling: FeatureScaling, target: TargetTransform, weights: LinearWeights, deviceId: string) {
    super(encoder, scaling, target, deviceId);
    if (weights.coefficients.length !== encoder.width) throw new RangeError(`linear predictor has ${weights.coefficients.length} coefficients for ${encoder.width} features`);
    this.coefficients = Float64Array.from(weights.coefficients);
    this.intercept = weights.intercept;
  }

  protected scoreRows(count: number): void {
    const { rows, raw, width, coefficients: c } = this;
    for (let k = 0; k < count; k++) {
      const base = k * width;
      let sum = this.intercept;
      for (let j = 0; j < width; j++) sum += rows[base + j]! * c[j]!;
      raw[k] = sum;
    }
  }
}

/**
 * Ridge regression in closed form: minimize Σ (y − b − x·w)² + λ·‖w‖² (the intercept b is not
 * penalized) over `n` rows of `x` (row-major `[n, width]`; `rows` selects a subset). Solves the
 * normal equations (XᵀX + λI) w = Xᵀy on centered data by Cholesky decomposition; with
 * λ = 0 that is ordinary least squares, and λ > 0 keeps it solvable when features are
 * collinear (e.g. a count feature equal to a slot's presence). Use λ small relative to n on
 * standardized features (`predict/train.ts`: 1e-6·n).
 * @throws RangeError when the system is not positive definite (λ = 0 with collinear features).
 */
export function fitRidge(x: ArrayLike<number>, y: ArrayLike<number>, width: number, lambda: number, rows?: ArrayLike<number>): LinearWeights {
  const n = rows === undefined ? y.length : rows.length;
  if (n === 0) throw new RangeError('cannot fit on 0 samples');
  if (!(lambda >= 0)) throw new RangeError(`ridge lambda must be ≥ 0, got ${lambda}`);
  const idx = (r: number): number => (rows === undefined ? r : rows[r]!);
  const mx = new Float64Array(width);
  let my = 0;
  for (let r = 0; r < n; r++) {
    const i = idx(r);
    for (let j = 0; j < width; j++) mx[j]! += x[i * width + j]!;
    my += y[i]!;
  }
  for (let j = 0; j < width; j++) mx[j]! /= n;
  my /= n;
  const a = new Float64Array(width * width);
  const b = new Float64Array(width);
  const xc = new Float64Array(width);
  for (let r = 0; r < n; r++) {
    const i = idx(r);
    for (let j = 0; j < width; j++) xc[j] = x[i * width + j]! - mx[j]!;
    const yc = y[i]! - my;
    for (let j = 0; j < width; j++) {
      const v = xc[j]!;
      if (v === 0) continue;
      b[j]! += v * yc;
      for (let k = 0; k <= j; k++) a[j * width + k]! += v * xc[k]!;
    }
  }
  for (let j = 0; j < width; j++) {
    a[j * width + j]! += lambda;
    for (let k = 0; k < j; k++) a[k * width + j] = a[j * width + k]!;
  }
  const w = choleskySolve(a, b, width);
  let intercept = my;
  for (let j = 0; j < width; j++) intercept -= mx[j]! * w[j]!;
  return { intercept, coefficients: Array.from(w) };
}

/**
 * Solve A w = b for symmetric positive definite A (`[m, m]` row-major; overwritten with its
 * Cholesky factor). A zero row and column (a feature constant over the data, with λ = 0) gets
 * coefficient 0.
 * @throws RangeError when A is not positive definite.
 */
export function choleskySolve(a: Float64Array, b: Float64Array, m: number): Float64Array {
  const scale = Math.max(1e-300, ...Array.from({ length: m }, (_, j) => Math.abs(a[j * m + j]!)));
  const skip = new Uint8Array(m);
  for (let j = 0; j < m; j++) {
    let d = a[j * m + j]!;
    for (let k = 0; k < j; k++) d -= a[j * m + k]! * a[j * m + k]!;
    if (d <= 1e-13 * scale) {
      let zeroRow = true;
      for (let k = 0; k < m; k++) if (k !== j && a[j * m + k] !== 0) zeroRow = false;
      if (zeroRow && Math.abs(a[j * m + j]!) <= 1e-13 * scale) {
        skip[j] = 1;
        a[j * m + j] = 1;
        continue;
      }
      throw new RangeError(`normal equations are not positive definite at feature ${j} (collinear features; use a ridge lambda > 0)`);
    }
    const l = Math.sqrt(d);
    a[j * m + j] = l;
    for (let i = j + 1; i < m; i++) {
      let s = a[i * m + j]!;
      for (let k = 0; k < j; k++) s -= a[i * m + k]! * a[j * m + k]!;
      a[i * m + j] = s / l;
    }
  }
  // forward: L z = b
  const z = new Float64Array(m);
  for (let i = 0; i < m; i++) {
    if (skip[i]) continue;
    let s = b[i]!;
    for (let k = 0; k < i; k++) s -= a[i * m + k]! * z[k]!;
    z[i] = s / a[i * m + i]!;
  }
  // back: Lᵀ w = z
  const w = new Float64Array(m);
  for (let i = m - 1; i >= 0; i--) {
    if (skip[i]) continue;
    let s = z[i]!;
    for (let k = i + 1; k < m; k++) s -= a[k * m + i]! * w[k]!;
    w[i] = s / a[i * m + i]!;
  }
  return w;
}
