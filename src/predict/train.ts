/**
 * Training and evaluation of a predictor from profile rows (`abacus train`, docs/predictor.md "Training").
 *
 * 1. Every row is encoded once (`features.ts`, the canonical slot order).
 * 2. Split by *group*, not by row: rows of the same operator group (same canonical slots) all
 *    land on one side, so a group measured twice cannot be in training and test at once. A
 *    seeded shuffle of the distinct groups puts a fraction `holdout` of them in the held-out
 *    set. With `testModel` M (generalization) the split is instead: train on rows with no
 *    slot of M, test on rows that contain M (`flop` features only; M is then "unseen").
 * 3. k-fold cross-validation over the training groups (`folds` ≥ 2): mean MAE and MAPE over
 *    the folds.
 * 4. The final model is trained on the whole training split and evaluated on the held-out
 *    rows through the same path a loaded file takes (`predictorFromFile`).
 *
 * Targets: the MLP predicts ln(median latency) standardized, trained on the absolute error of
 * that (`mlp/train-mlp.ts`): an error in log space is a relative error, what MAPE measures, and
 * latencies spanning 0.05–500 ms get equal weight per percent (on raw ms the large groups would
 * dominate and the small ones, the controller's fine-grained cuts, be predicted badly); the
 * linear baseline predicts latency in ms (the paper's LR), ridge
 * regression in closed form (λ = 1e-6·n on standardized features, i.e. ordinary least squares
 * with just enough regularization for collinear features).
 * Metrics: MAE in ms and MAPE as a fraction (mean of |predicted − measured| / measured).
 */
import type { ModelSpec } from '../model/spec.ts';
import { Rng } from '../rng.ts';
import { fitScaling, type FeatureScaling, type TargetTransform } from './encoded.ts';
import { FeatureEncoder, specFingerprint, type FeatureSet } from './features.ts';
import { PREDICTOR_FORMAT_VERSION, predictorFromFile, type PredictorFile, type PredictorMetrics } from './file.ts';
import { fitRidge, LinearPredictor, type LinearWeights } from './linear/linear-predictor.ts';
import { MlpPredictor, type DenseLayer } from './mlp/mlp-predictor.ts';
import { DEFAULT_MLP_OPTIONS, trainMlp, type MlpTrainOptions } from './mlp/train-mlp.ts';
import type { Predictor, ProfileRow } from './predictor.ts';

export type PredictorKind = 'mlp' | 'linear';
export const PREDICTOR_KINDS: readonly PredictorKind[] = ['mlp', 'linear'];

/** Progress of a training run: `cv` folds first, then the `final` model; one call per MLP epoch. */
export interface TrainProgress {
  readonly phase: 'cv' | 'final';
  /** 1-based fold (cv) ; 0 for the final model. */
  readonly fold: number;
  readonly folds: number;
  readonly epoch: number;
  readonly epochs: number;
  /** Mean training loss of the epoch (standardized target, MSE). */
  readonly loss: number;
}

/** Options of `trainPredictor`; defaults in brackets. */
export interface TrainPredictorOptions {
  readonly kind: PredictorKind;
  /** Specs of every model the rows name. */
  readonly specs: ReadonlyMap<string, ModelSpec>;
  /** ['full'] */
  readonly featureSet?: FeatureSet;
  /** Fraction of groups held out, in [0, 1) [0.2]; ignored with `testModel`. */
  readonly holdout?: number;
  /** Cross-validation folds; 0 or 1 skips cross-validation [5]. */
  readonly folds?: number;
  /** Seed of the split, the folds, the initial weights and the batch order [1]. */
  readonly seed?: number;
  /** MLP epochs [DEFAULT_MLP_OPTIONS.epochs]. */
  readonly epochs?: number;
  /** Other MLP hyper-parameters. */
  readonly mlp?: Partial<Omit<MlpTrainOptions, 'seed' | 'epochs' | 'onEpoch'>>;
  /** Ridge λ of the linear baseline [1e-6 × training rows]. */
  readonly lambda?: number;
  /** Slots per group the predictor accepts [the largest group in the rows]. */
  readonly maxSlots?: number;
  /** Generalization: train without model M, test on the rows with M (`flop` only). */
  readonly testModel?: string;
  /** Data files, recorded in the predictor file. */
  readonly files?: readonly string[];
  readonly onProgress?: (p: TrainProgress) => void;
}

export interface TrainResult {
  readonly kind: PredictorKind;
  /** Rows used (training + held out). */
  readonly samples: number;
  readonly trainSamples: number;
  /** Error of the final model on the held-out rows (the `testModel` rows); null when none. */
  readonly holdout: PredictorMetrics | null;
  /**
   * The held-out error per batch size: rows grouped by the largest batch among their slots (a
   * fused batch is one slot of that many samples), ascending; empty when nothing is held out.
   */
  readonly holdoutByBatch: readonly ({ readonly batch: number } & PredictorMetrics)[];
  /** Mean error over the cross-validation folds; null when skipped. */
  readonly cv: PredictorMetrics | null;
  /** Wall time of training the final model, s. */
  readonly trainSeconds: number;
  /** Wall time of everything (cross-validation included), s. */
  readonly totalSeconds: number;
  readonly testModel?: string;
  readonly file: PredictorFile;
  readonly predictor: Predictor;
}

/** MAE (ms) and MAPE (fraction) of `predicted` against `measured`. */
export function errorMetrics(predicted: ArrayLike<number>, measured: ArrayLike<number>): PredictorMetrics {
  const n = measured.length;
  let ae = 0;
  let ape = 0;
  for (let i = 0; i < n; i++) {
    const d = Math.abs(predicted[i]! - measured[i]!);
    ae += d;
    ape += d / measured[i]!;
  }
  return { maeMs: n > 0 ? ae / n : 0, mape: n > 0 ? ape / n : 0, samples: n };
}

/** Key of a group's canonical slots (rows with equal keys measured the same group). */
function groupKey(encoder: FeatureEncoder, row: ProfileRow): string {
  return encoder
    .canonical(row.slots)
    .map((s) => `${s.model}:${s.start}:${s.end}:${s.batch}:${s.seqLen}:${s.intraOpThreads ?? 0}`)
    .join('|');
}

function shuffle<T>(items: T[], rng: Rng): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = rng.nextUint32() % (i + 1);
    const t = items[i]!;
    items[i] = items[j]!;
    items[j] = t;
  }
  return items;
}

const seconds = (t0: number): number => (performance.now() - t0) / 1000;

function checkOptions(rows: readonly ProfileRow[], o: TrainPredictorOptions): void {
  if (o.kind !== 'mlp' && o.kind !== 'linear') throw new RangeError(`kind must be mlp or linear, got '${String(o.kind)}'`);
  const holdout = o.holdout ?? 0.2;
  if (!(holdout >= 0 && holdout < 1)) throw new RangeError(`holdout must be a fraction in [0, 1), got ${holdout}`);
  const folds = o.folds ?? 5;
  if (!Number.isInteger(folds) || folds < 0) throw new RangeError(`folds must be an integer ≥ 0 (0 or 1: no cross-validation), got ${folds}`);
  if (o.seed !== undefined && !Number.isFinite(o.seed)) throw new RangeError(`seed must be a finite number, got ${o.seed}`);
  if (rows.length === 0) throw new RangeError('no profile rows to train on');
  const device = rows[0]!.device;
  for (const r of rows) {
    if (r.device !== device) throw new RangeError(`profile rows come from two devices ('${device}' and '${r.device}' in sample ${r.sample}): a predictor is for one device`);
    if (!(r.medianMs > 0)) throw new RangeError(`sample ${r.sample} has a median latency of ${r.medianMs} ms; latencies must be > 0 to learn relative errors`);
    for (const s of r.slots) if (!o.specs.has(s.model)) throw new RangeError(`sample ${r.sample} names model '${s.model}', which has no spec`);
  }
  if (o.testModel !== undefined) {
    if ((o.featureSet ?? 'full') !== 'flop') throw new RangeError(`--test-model ${o.testModel} needs --features flop: the 'full' features identify models, so they cannot describe one left out of training`);
    if (!rows.some((r) => r.slots.some((s) => s.model === o.testModel))) throw new RangeError(`--test-model ${o.testModel}: no row contains that model`);
  }
}

/**
 * Train a predictor on `rows` and measure it (file comment).
 * @throws RangeError for bad options, rows of several devices, a latency ≤ 0, a model without
 *   a spec, a group larger than `maxSlots`, or a split that leaves no training rows.
 */
export async function trainPredictor(rows: readonly ProfileRow[], options: TrainPredictorOptions): Promise<TrainResult> {
  const tStart = performance.now();
  checkOptions(rows, options);
  const kind = options.kind;
  const featureSet = options.featureSet ?? 'full';
  const seed = options.seed ?? 1;
  const holdoutFraction = options.testModel === undefined ? (options.holdout ?? 0.2) : 0;
  const foldCount = options.folds ?? 5;
  const deviceId = rows[0]!.device;
  const largest = Math.max(...rows.map((r) => r.slots.length));
  const maxSlots = options.maxSlots ?? largest;
  if (largest > maxSlots) throw new RangeError(`maxSlots ${maxSlots} is smaller than the largest group in the data (${largest} slots)`);

  const present = [...new Set(rows.flatMap((r) => r.slots.map((s) => s.model)))].sort();
  const trainedModels = present.filter((m) => m !== options.testModel);
  if (trainedModels.length === 0) throw new RangeError(`no model left to train on besides --test-model ${options.testModel}`);
  const specs = new Map(present.map((m) => [m, options.specs.get(m)!]));
  // Profiles with thread counts (`abacus profile --thread-rules`) train the `threads` feature.
  const threads = rows.some((r) => r.slots.some((s) => s.intraOpThreads !== undefined));
  const encoder = new FeatureEncoder({ featureSet, maxSlots, trainedModels, specs, threads });
  const width = encoder.width;
  const n = rows.length;
  const x = new Float64Array(n * width);
  const y = new Float64Array(n);
  rows.forEach((r, i) => {
    encoder.encode(r.slots, x, i * width, i);
    y[i] = r.medianMs;
  });

  // split (file comment)
  const rng = new Rng(seed);
  const keys = rows.map((r) => groupKey(encoder, r));
  const trainIdx: number[] = [];
  const testIdx: number[] = [];
  let trainKeys: string[];
  if (options.testModel !== undefined) {
    const m = options.testModel;
    rows.forEach((r, i) => (r.slots.some((s) => s.model === m) ? testIdx : trainIdx).push(i));
    trainKeys = [...new Set(trainIdx.map((i) => keys[i]!))];
  } else {
    const distinct = shuffle([...new Set(keys)], rng);
    const held = new Set(distinct.slice(0, Math.round(holdoutFraction * distinct.length)));
    keys.forEach((k, i) => (held.has(k) ? testIdx : trainIdx).push(i));
    trainKeys = distinct.filter((k) => !held.has(k));
  }
  if (trainIdx.length === 0) throw new RangeError('the split leaves no rows to train on (lower --holdout)');

  const mlpOptions = { ...DEFAULT_MLP_OPTIONS, ...options.mlp, seed, epochs: options.epochs ?? DEFAULT_MLP_OPTIONS.epochs };
  const fit = async (idx: readonly number[], phase: 'cv' | 'final', fold: number, folds: number): Promise<Fitted> => {
    const scaling = fitScaling(x, width, idx, encoder.tiedColumns);
    if (kind === 'linear') {
      const target = targetOf('identity', y, idx);
      const lambda = options.lambda ?? 1e-6 * idx.length;
      const weights = fitRidge(standardize(x, width, scaling, idx), Float64Array.from(idx, (i) => (y[i]! - target.mean) / target.std), width, lambda);
      return { kind, scaling, target, linear: weights, hyper: { lambda } };
    }
    const target = targetOf('log', y, idx);
    const xs = Float32Array.from(standardize(x, width, scaling, idx));
    const ys = Float32Array.from(idx, (i) => (Math.log(y[i]!) - target.mean) / target.std);
    const layers = await trainMlp(xs, ys, width, {
      ...mlpOptions,
      onEpoch: (epoch, epochs, loss) => options.onProgress?.({ phase, fold, folds, epoch, epochs, loss }),
    });
    return { kind, scaling, target, layers, hyper: { hidden: [...mlpOptions.hidden], epochs: mlpOptions.epochs, batchSize: mlpOptions.batchSize, learningRate: mlpOptions.learningRate } };
  };
  const evaluate = (p: Predictor, idx: readonly number[]): PredictorMetrics => {
    const predicted = p.predict(idx.map((i) => rows[i]!.slots));
    return errorMetrics(predicted, Float64Array.from(idx, (i) => y[i]!));
  };

  // cross-validation over the training groups
  let cv: PredictorMetrics | null = null;
  if (foldCount >= 2) {
    const k = Math.min(foldCount, trainKeys.length);
    if (k < 2) throw new RangeError(`cross-validation needs at least 2 distinct groups in the training split, there are ${trainKeys.length} (use --folds 0)`);
    const foldOf = new Map(trainKeys.map((key, i) => [key, i % k]));
    let mae = 0;
    let mape = 0;
    let samples = 0;
    for (let f = 0; f < k; f++) {
      const inFold = trainIdx.filter((i) => foldOf.get(keys[i]!) === f);
      const outFold = trainIdx.filter((i) => foldOf.get(keys[i]!) !== f);
      const fitted = await fit(outFold, 'cv', f + 1, k);
      const m = evaluate(buildPredictor(fitted, encoder, specs, trainedModels, deviceId), inFold);
      mae += m.maeMs;
      mape += m.mape;
      samples += m.samples;
    }
    cv = { maeMs: mae / k, mape: mape / k, samples };
  }

  const tFinal = performance.now();
  const fitted = await fit(trainIdx, 'final', 0, foldCount >= 2 ? foldCount : 0);
  const trainSeconds = seconds(tFinal);
  const file = toFile(fitted, {
    deviceId,
    featureSet,
    encoder,
    specs,
    trainedModels,
    rows,
    trainIdx,
    files: options.files ?? [],
    seed,
    holdout: holdoutFraction,
    folds: foldCount,
    trainSeconds,
    ...(options.testModel === undefined ? {} : { testModel: options.testModel }),
  });
  // evaluate through the same path as a loaded file
  const predictor = predictorFromFile(file, { deviceId, models: specs, allowUnseen: options.testModel !== undefined });
  const holdout = testIdx.length > 0 ? evaluate(predictor, testIdx) : null;
  const byBatch = new Map<number, number[]>();
  for (const i of testIdx) {
    const b = Math.max(...rows[i]!.slots.map((s) => s.batch));
    let list = byBatch.get(b);
    if (list === undefined) byBatch.set(b, (list = []));
    list.push(i);
  }
  const holdoutByBatch = [...byBatch.entries()].sort((a, b) => a[0] - b[0]).map(([batch, idx]) => ({ batch, ...evaluate(predictor, idx) }));
  const withMetrics: PredictorFile = { ...file, metrics: { holdout, cv } };
  return {
    kind,
    samples: n,
    trainSamples: trainIdx.length,
    holdout,
    holdoutByBatch,
    cv,
    trainSeconds,
    totalSeconds: seconds(tStart),
    ...(options.testModel === undefined ? {} : { testModel: options.testModel }),
    file: withMetrics,
    predictor,
  };
}

type Fitted =
  | { readonly kind: 'linear'; readonly scaling: FeatureScaling; readonly target: TargetTransform; readonly linear: LinearWeights; readonly hyper: Record<string, number | number[]> }
  | { readonly kind: 'mlp'; readonly scaling: FeatureScaling; readonly target: TargetTransform; readonly layers: DenseLayer[]; readonly hyper: Record<string, number | number[]> };

function targetOf(transform: 'log' | 'identity', y: Float64Array, idx: readonly number[]): TargetTransform {
  const v = idx.map((i) => (transform === 'log' ? Math.log(y[i]!) : y[i]!));
  const mean = v.reduce((a, b) => a + b, 0) / v.length;
  const sd = Math.sqrt(v.reduce((a, b) => a + (b - mean) * (b - mean), 0) / v.length);
  return { transform, mean, std: sd > 1e-12 ? sd : 1 };
}

/** Rows `idx` of `x`, standardized, row-major `[idx.length, width]`. */
function standardize(x: Float64Array, width: number, s: FeatureScaling, idx: readonly number[]): Float64Array {
  const out = new Float64Array(idx.length * width);
  const inv = s.std.map((sd) => (sd > 0 ? 1 / sd : 0));
  idx.forEach((i, r) => {
    for (let j = 0; j < width; j++) out[r * width + j] = (x[i * width + j]! - s.mean[j]!) * inv[j]!;
  });
  return out;
}

function buildPredictor(f: Fitted, encoder: FeatureEncoder, specs: ReadonlyMap<string, ModelSpec>, trainedModels: readonly string[], deviceId: string): Predictor {
  const enc = new FeatureEncoder({ featureSet: encoder.featureSet, maxSlots: encoder.maxSlots, trainedModels, specs, threads: encoder.threads });
  return f.kind === 'mlp' ? new MlpPredictor(enc, f.scaling, f.target, f.layers, deviceId) : new LinearPredictor(enc, f.scaling, f.target, f.linear, deviceId);
}

interface FileContext {
  readonly deviceId: string;
  readonly featureSet: FeatureSet;
  readonly encoder: FeatureEncoder;
  readonly specs: ReadonlyMap<string, ModelSpec>;
  readonly trainedModels: readonly string[];
  readonly rows: readonly ProfileRow[];
  readonly trainIdx: readonly number[];
  readonly files: readonly string[];
  readonly seed: number;
  readonly holdout: number;
  readonly folds: number;
  readonly trainSeconds: number;
  readonly testModel?: string;
}

function toFile(f: Fitted, c: FileContext): PredictorFile {
  const perModel: Record<string, number> = {};
  let batch: [number, number] = [Infinity, -Infinity];
  let seq: [number, number] = [Infinity, -Infinity];
  for (const i of c.trainIdx) {
    const r = c.rows[i]!;
    for (const m of new Set(r.slots.map((s) => s.model))) perModel[m] = (perModel[m] ?? 0) + 1;
    for (const s of r.slots) {
      batch = [Math.min(batch[0], s.batch), Math.max(batch[1], s.batch)];
      seq = [Math.min(seq[0], s.seqLen), Math.max(seq[1], s.seqLen)];
    }
  }
  const base = {
    formatVersion: PREDICTOR_FORMAT_VERSION as 2,
    deviceId: c.deviceId,
    features: { set: c.featureSet, maxSlots: c.encoder.maxSlots, names: [...c.encoder.names], ...(c.encoder.threads ? { threads: true } : {}), mean: [...f.scaling.mean], std: [...f.scaling.std] },
    target: { ...f.target },
    models: c.trainedModels.map((name) => ({ name, ...pickFingerprint(c.specs.get(name)!) })),
    training: {
      files: [...c.files],
      rows: c.trainIdx.length,
      perModel,
      batch,
      seqLen: seq,
      seed: c.seed,
      featureSet: c.featureSet,
      holdout: c.holdout,
      folds: c.folds,
      hyper: f.hyper,
      ...(c.testModel === undefined ? {} : { testModel: c.testModel }),
      trainSeconds: c.trainSeconds,
    },
    metrics: { holdout: null, cv: null },
  };
  return f.kind === 'mlp' ? { ...base, kind: 'mlp', mlp: { layers: f.layers.map((l) => ({ ...l, kernel: [...l.kernel], bias: [...l.bias] })) } } : { ...base, kind: 'linear', linear: { intercept: f.linear.intercept, coefficients: [...f.linear.coefficients] } };
}

function pickFingerprint(spec: ModelSpec): { operators: number; gflopsBatch1: number; paramMb: number } {
  const fp = specFingerprint(spec);
  return { operators: fp.operators, gflopsBatch1: fp.gflopsBatch1, paramMb: fp.paramMb };
}
