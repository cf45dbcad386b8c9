/**
 * What both predictor kinds share around their model: validate and encode each group
 * (`features.ts`), standardize the features, score, undo the target transform, clamp at 0.
 * `predict/mlp` and `predict/linear` extend `EncodedPredictor` and only implement `score`.
 */
import type { FeatureEncoder } from './features.ts';
import type { Group, Predictor } from './predictor.ts';

/**
 * How the model's output maps to a latency: `log` — the model predicts
 * (ln latencyMs − mean) / std; `identity` — it predicts (latencyMs − mean) / std.
 */
export interface TargetTransform {
  readonly transform: 'log' | 'identity';
  readonly mean: number;
  readonly std: number;
}

/**
 * Per-feature standardization: x' = (x − mean) / std. A feature constant over the training
 * data has std 0 and standardizes to 0 whatever its value: it carried no information, so it is
 * ignored rather than extrapolated (e.g. `seq_len` when the training models have no sequence
 * axis and an unseen BERT comes in).
 */
export interface FeatureScaling {
  readonly mean: readonly number[];
  readonly std: readonly number[];
}

/** Latency in ms from a model output (inverse of `toTarget`), not clamped. */
export function fromTarget(t: TargetTransform, y: number): number {
  const v = y * t.std + t.mean;
  return t.transform === 'log' ? Math.exp(v) : v;
}

/** Model output for a latency in ms (the training target). */
export function toTarget(t: TargetTransform, latencyMs: number): number {
  return ((t.transform === 'log' ? Math.log(latencyMs) : latencyMs) - t.mean) / t.std;
}

/**
 * Mean and std of each column of `x` (rows × width, row-major) over `rows` (all when
 * omitted); a column whose std is below 1e-12 of its scale (constant) gets std 0.
 *
 * `tied`: groups of columns that share one mean and std, those of all their values pooled
 * (the mean of the columns' means; the pooled second moment less its square). For columns of
 * one quantity in one unit (`FeatureEncoder.tiedColumns`: a slot's spatial and dense GFLOP):
 * a column that is nearly constant in training then keeps the scale of its partner instead of
 * turning a value seen only in serving into dozens of stds.
 */
export function fitScaling(x: ArrayLike<number>, width: number, rows?: ArrayLike<number>, tied: readonly (readonly number[])[] = []): FeatureScaling {
  const n = rows === undefined ? x.length / width : rows.length;
  const mean = new Array<number>(width).fill(0);
  const sq = new Array<number>(width).fill(0);
  for (let r = 0; r < n; r++) {
    const base = (rows === undefined ? r : rows[r]!) * width;
    for (let j = 0; j < width; j++) mean[j]! += x[base + j]!;
  }
  for (let j = 0; j < width; j++) mean[j] = mean[j]! / Math.max(n, 1);
  for (let r = 0; r < n; r++) {
    const base = (rows === undefined ? r : rows[r]!) * width;
    for (let j = 0; j < width; j++) {
      const d = x[base + j]! - mean[j]!;
      sq[j]! += d * d;
    }
  }
  const variance = sq.map((s) => s / Math.max(n, 1));
  for (const group of tied) {
    if (group.length === 0) continue;
    for (const j of group) if (!(Number.isInteger(j) && j >= 0 && j < width)) throw new RangeError(`fitScaling: tied column ${j} is outside 0..${width - 1}`);
    let m = 0;
    let second = 0;
    for (const j of group) {
      m += mean[j]!;
      second += variance[j]! + mean[j]! * mean[j]!;
    }
    m /= group.length;
    const v = Math.max(0, second / group.length - m * m);
    for (const j of group) {
      mean[j] = m;
      variance[j] = v;
    }
  }
  const std = variance.map((v, j) => {
    const sd = Math.sqrt(v);
    return sd > 1e-12 * Math.max(1, Math.abs(mean[j]!)) ? sd : 0;
  });
  return { mean, std };
}

/** Groups encoded and scored together (the controller scores up to 4 candidates per call). */
export const LANES = 4;

/**
 * Base of the predictor kinds: `predict` validates and encodes the groups, up to `LANES` at a
 * time, into standardized rows (`rows`, `[LANES, width]`), calls `scoreRows` and maps the raw
 * outputs back to ms. Allocation-free when `out` is given.
 */
export abstract class EncodedPredictor implements Predictor {
  abstract readonly kind: string;
  readonly deviceId: string;
  readonly models: readonly string[];
  readonly maxSlots: number;
  /** Whether the encoding has the `threads` feature (`Predictor.threadFeature`). */
  readonly threadFeature: boolean;
  protected readonly encoder: FeatureEncoder;
  /** Feature vector length. */
  protected readonly width: number;
  private readonly mean: Float64Array;
  private readonly invStd: Float64Array;
  private readonly target: TargetTransform;
  /** Standardized feature rows of the groups being scored, `[LANES, width]`, read by `scoreRows`. */
  protected readonly rows: Float64Array;
  /** Raw model outputs, `[LANES]`, written by `scoreRows`. */
  protected readonly raw: Float64Array;

  protected constructor(encoder: FeatureEncoder, scaling: FeatureScaling, target: TargetTransform, deviceId: string) {
    if (scaling.mean.length !== encoder.width || scaling.std.length !== encoder.width) {
      throw new RangeError(`feature scaling has ${scaling.mean.length} means and ${scaling.std.length} stds for ${encoder.width} features`);
    }
    this.encoder = encoder;
    this.width = encoder.width;
    this.deviceId = deviceId;
    this.models = encoder.models;
    this.maxSlots = encoder.maxSlots;
    this.threadFeature = encoder.threads;
    this.mean = Float64Array.from(scaling.mean);
    this.invStd = Float64Array.from(scaling.std, (s) => (s > 0 ? 1 / s : 0));
    this.target = target;
    this.rows = new Float64Array(LANES * encoder.width);
    this.raw = new Float64Array(LANES);
  }

  /** Score `rows[0 .. count)` (count ≤ LANES) into `raw[0 .. count)`. */
  protected abstract scoreRows(count: number): void;

  predict(groups: readonly Group[], out?: Float64Array): Float64Array {
    const n = groups.length;
    if (out !== undefined && out.length < n) throw new RangeError(`predict: out has length ${out.length}, fewer than the ${n} groups`);
    const result = out ?? new Float64Array(n);
    const { rows, raw, width, mean, invStd, target } = this;
    for (let g0 = 0; g0 < n; g0 += LANES) {
      const count = n - g0 < LANES ? n - g0 : LANES;
      for (let k = 0; k < count; k++) {
        const base = k * width;
        this.encoder.encode(groups[g0 + k]!, rows, base, g0 + k);
        for (let j = 0; j < width; j++) rows[base + j] = (rows[base + j]! - mean[j]!) * invStd[j]!;
      }
      this.scoreRows(count);
      for (let k = 0; k < count; k++) {
        const v = raw[k]! * target.std + target.mean;
        const ms = target.transform === 'log' ? Math.exp(v) : v;
        result[g0 + k] = ms > 0 ? ms : 0;
      }
    }
    return result;
  }
}
