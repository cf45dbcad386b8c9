/**
 * `predictor.json`: a trained predictor, versioned and self-describing (docs/predictor.md "Training").
 *
 * ```
 * {
 *   "formatVersion": 2,
 *   "kind": "mlp" | "linear",
 *   "deviceId": "sim:a100",
 *   "features": { "set": "full" | "flop", "maxSlots": 2, "names": [...],   // encoding, in order
 *                 "mean": [...], "std": [...] },                           // standardization
 *   "target": { "transform": "log" | "identity", "mean": m, "std": s },     // model output → ms
 *   "models": [{ "name", "operators", "gflopsBatch1", "paramMb" }],         // trained on, by name
 *   "training": { "files", "rows", "perModel": {name: rows}, "batch": [min, max],
 *                 "seqLen": [min, max], "seed", … },
 *   "metrics": { "holdout": { "maeMs", "mape", "samples" } | null, "cv": … | null },
 *   "mlp": { "layers": [{ "inputs", "units", "activation", "kernel", "bias" }] }   // kind mlp
 *   "linear": { "intercept", "coefficients" }                                      // kind linear
 * }
 * ```
 * `features.names` must equal what `features.ts` produces for the set, models and maxSlots
 * (a file from an encoder with other features is rejected, not misread). The models'
 * `operators`, `gflopsBatch1` (Σ GFLOP at batch 1, default sequence length) and `paramMb` are
 * the spec fingerprint (`specFingerprint`): a different variant under the same name (another
 * resolution, width or layer count) has other costs, so the GFLOP features would be wrong.
 *
 * `features.threads` (optional, docs/threads.md): true when every slot block ends in the
 * `threads` feature (`features.ts` "Thread count"); files without it, every file written
 * before, load as they always did (no thread feature), so the format version stays 2.
 *
 * Versions: 2 (generalization to models not profiled) splits each slot's GFLOP, MB and kernels by kind of
 * compute and puts the `flop` costs on a log scale (`features.ts`); a version-1 file is refused
 * with a message to retrain, not misread.
 */
import fs from 'node:fs/promises';
import { z } from 'zod';
import { InvalidConfigError } from '../errors.ts';
import type { ModelSpec } from '../model/spec.ts';
import { FeatureEncoder, featureNames, specFingerprint, type SpecFingerprint } from './features.ts';
import { LinearPredictor } from './linear/linear-predictor.ts';
import { MlpPredictor } from './mlp/mlp-predictor.ts';
import type { Predictor } from './predictor.ts';

/** The version this code writes and reads. */
export const PREDICTOR_FORMAT_VERSION = 2;

const finite = z.number().refine(Number.isFinite, 'must be a finite number');
const positive = z.number().refine((x) => Number.isFinite(x) && x > 0, 'must be a positive finite number');
const count = z.number().int().nonnegative();
const range = z.tuple([z.number(), z.number()]);
const metricsSchema = z.strictObject({ maeMs: z.number().nonnegative(), mape: z.number().nonnegative(), samples: count });

const modelSchema = z.strictObject({
  name: z.string().min(1),
  operators: z.number().int().positive(),
  gflopsBatch1: z.number().nonnegative(),
  paramMb: z.number().nonnegative(),
});

const layerSchema = z.strictObject({
  inputs: z.number().int().positive(),
  units: z.number().int().positive(),
  activation: z.enum(['relu', 'linear']),
  kernel: z.array(finite),
  bias: z.array(finite),
});

const baseShape = {
  formatVersion: z.literal(PREDICTOR_FORMAT_VERSION),
  deviceId: z.string().min(1),
  features: z.strictObject({
    set: z.enum(['full', 'flop']),
    maxSlots: z.number().int().min(1).max(64),
    names: z.array(z.string()),
    /** True when slot blocks end in the `threads` feature (docs/threads.md); absent in older files: false. */
    threads: z.boolean().optional(),
    mean: z.array(finite),
    std: z.array(z.number().nonnegative().refine(Number.isFinite, 'must be a finite number ≥ 0')),
  }),
  target: z.strictObject({ transform: z.enum(['log', 'identity']), mean: finite, std: positive }),
  models: z.array(modelSchema).min(1),
  training: z.strictObject({
    files: z.array(z.string()),
    rows: count,
    perModel: z.record(z.string(), count),
    batch: range,
    seqLen: range,
    seed: finite,
    featureSet: z.enum(['full', 'flop']),
    holdout: z.number().min(0).max(1),
    folds: count,
    /** Hyper-parameters of the fit (MLP: hidden, epochs, batchSize, learningRate; linear: lambda). */
    hyper: z.record(z.string(), z.union([finite, z.array(finite)])),
    testModel: z.string().optional(),
    trainSeconds: z.number().nonnegative(),
  }),
  metrics: z.strictObject({ holdout: metricsSchema.nullable(), cv: metricsSchema.nullable() }),
};

const fileSchema = z.discriminatedUnion('kind', [
  z.strictObject({ ...baseShape, kind: z.literal('mlp'), mlp: z.strictObject({ layers: z.array(layerSchema).min(1) }) }),
  z.strictObject({ ...baseShape, kind: z.literal('linear'), linear: z.strictObject({ intercept: finite, coefficients: z.array(finite) }) }),
]);

/** A predictor file's content (validated). */
export type PredictorFile = z.infer<typeof fileSchema>;
/** One model entry of a predictor file. */
export type PredictorFileModel = z.infer<typeof modelSchema>;
/** Held-out or cross-validation error: MAE in ms, MAPE as a fraction (0.05 = 5%). */
export type PredictorMetrics = z.infer<typeof metricsSchema>;

function fieldPath(p: readonly PropertyKey[]): string {
  let out = '';
  for (const k of p) out += typeof k === 'number' ? `[${k}]` : out === '' ? String(k) : `.${String(k)}`;
  return out === '' ? '(top level)' : out;
}

/**
 * Validate a parsed predictor file: the schema (zod), then that feature names, scaling and
 * weights fit together.
 * @throws InvalidConfigError `SOURCE: FIELD: what is wrong`.
 */
export function parsePredictorFile(raw: unknown, source: string): PredictorFile {
  if (typeof raw === 'object' && raw !== null && 'formatVersion' in raw && raw.formatVersion !== PREDICTOR_FORMAT_VERSION) {
    const v = raw.formatVersion;
    throw new InvalidConfigError(`${source}: formatVersion: ${JSON.stringify(v)} is not supported (this version of abacus reads ${PREDICTOR_FORMAT_VERSION}; retrain with abacus train)`);
  }
  const parsed = fileSchema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const detail = issue.code === 'unrecognized_keys' ? `unknown field(s) ${issue.keys.map((k) => `'${k}'`).join(', ')}` : issue.message;
    throw new InvalidConfigError(`${source}: ${fieldPath(issue.path)}: ${detail}`);
  }
  const file = parsed.data;
  const bad = (field: string, what: string): never => {
    throw new InvalidConfigError(`${source}: ${field}: ${what}`);
  };
  const names = new Set<string>();
  file.models.forEach((m, i) => {
    if (names.has(m.name)) bad(`models[${i}].name`, `'${m.name}' is listed twice`);
    names.add(m.name);
  });
  const trained = file.models.map((m) => m.name).sort();
  const expected = featureNames(file.features.set, trained, file.features.maxSlots, file.features.threads === true);
  const f = file.features;
  if (f.names.length !== expected.length || f.names.some((n, i) => n !== expected[i])) {
    const i = f.names.findIndex((n, j) => n !== expected[j]);
    bad(`features.names${i >= 0 ? `[${i}]` : ''}`, `does not match the '${f.set}' encoding of these models with ${f.maxSlots} slots (expected ${expected.length} features: ${expected.slice(0, 6).join(', ')}, …); the file was written by another version`);
  }
  if (f.mean.length !== expected.length) bad('features.mean', `has ${f.mean.length} values for ${expected.length} features`);
  if (f.std.length !== expected.length) bad('features.std', `has ${f.std.length} values for ${expected.length} features`);
  if (file.kind === 'mlp') {
    let width = expected.length;
    file.mlp.layers.forEach((l, i) => {
      if (l.inputs !== width) bad(`mlp.layers[${i}].inputs`, `is ${l.inputs}, but ${width} values come in`);
      if (l.kernel.length !== l.inputs * l.units) bad(`mlp.layers[${i}].kernel`, `has ${l.kernel.length} values, expected ${l.inputs}×${l.units}`);
      if (l.bias.length !== l.units) bad(`mlp.layers[${i}].bias`, `has ${l.bias.length} values, expected ${l.units}`);
      width = l.units;
    });
    if (width !== 1) bad(`mlp.layers[${file.mlp.layers.length - 1}].units`, `the last layer must have 1 unit, has ${width}`);
  } else if (file.linear.coefficients.length !== expected.length) {
    bad('linear.coefficients', `has ${file.linear.coefficients.length} values for ${expected.length} features`);
  }
  return file;
}

/**
 * Read and validate a predictor file.
 * @throws InvalidConfigError naming the file (and the field); file-system errors as they are.
 */
export async function readPredictorFile(path: string): Promise<PredictorFile> {
  const text = await fs.readFile(path, 'utf8');
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new InvalidConfigError(`${path}: not valid JSON: ${(err as Error).message}`, { cause: err });
  }
  return parsePredictorFile(raw, path);
}

/** Write a predictor file (validated first, so a file that cannot be loaded is never written). */
export async function writePredictorFile(path: string, file: PredictorFile): Promise<void> {
  parsePredictorFile(file, path);
  await fs.writeFile(path, JSON.stringify(file) + '\n');
}

/** Options of `loadPredictor` / `predictorFromFile`. */
export interface LoadPredictorOptions {
  /** The device the predictor will serve on; must equal the file's `deviceId`. */
  readonly deviceId: string;
  /** Specs of the models to score, by name (a subset of the trained models, plus unseen ones with `allowUnseen`). */
  readonly models: ReadonlyMap<string, ModelSpec>;
  /** Admit models the predictor was not trained on (only with `flop` features). */
  readonly allowUnseen?: boolean;
}

const near = (a: number, b: number): boolean => Math.abs(a - b) <= 1e-6 * Math.max(Math.abs(a), Math.abs(b), 1e-9);

function checkModel(source: string, trained: PredictorFileModel, spec: ModelSpec): void {
  const fp: SpecFingerprint = specFingerprint(spec);
  if (fp.operators !== trained.operators) {
    throw new InvalidConfigError(`${source}: model '${trained.name}' has ${fp.operators} operators here but the predictor was trained with ${trained.operators}: a different partition or variant; profile and train it again`);
  }
  if (!near(fp.gflopsBatch1, trained.gflopsBatch1) || !near(fp.paramMb, trained.paramMb)) {
    throw new InvalidConfigError(
      `${source}: model '${trained.name}' is not the variant the predictor was trained with (${fp.gflopsBatch1.toFixed(4)} GFLOP and ${fp.paramMb.toFixed(3)} MB of parameters here, ` +
        `${trained.gflopsBatch1.toFixed(4)} GFLOP and ${trained.paramMb.toFixed(3)} MB in the file); profile and train it again`,
    );
  }
}

/**
 * A predictor from a validated file, for the models in `options.models` (which it then
 * scores; `Predictor.models`). `source` names the file in errors.
 * @throws InvalidConfigError when `deviceId` differs from the file's; a model was not trained
 *   on (unless `allowUnseen` and `flop` features; for `full` the message says to retrain with
 *   `--features flop`); a model's operator count or fingerprint differs from training.
 */
export function predictorFromFile(file: PredictorFile, options: LoadPredictorOptions, source = 'predictor'): Predictor {
  if (options.deviceId !== file.deviceId) {
    throw new InvalidConfigError(`${source}: the predictor was trained on device '${file.deviceId}', not '${options.deviceId}': latencies do not transfer between devices; profile ${options.deviceId} and train a predictor for it`);
  }
  const trained = new Map(file.models.map((m) => [m.name, m]));
  const unseen: string[] = [];
  for (const [name, spec] of options.models) {
    const entry = trained.get(name);
    if (entry === undefined) unseen.push(name);
    else checkModel(source, entry, spec);
  }
  if (unseen.length > 0) {
    const list = unseen.map((m) => `'${m}'`).join(', ');
    const known = [...trained.keys()].sort().join(', ');
    if (file.features.set === 'full') {
      throw new InvalidConfigError(`${source}: the predictor was not trained on ${list} (trained: ${known}) and its 'full' features cannot describe other models; profile them and retrain, or retrain with --features flop and allow unseen models`);
    }
    if (!options.allowUnseen) {
      throw new InvalidConfigError(`${source}: the predictor was not trained on ${list} (trained: ${known}); its 'flop' features can estimate them from their FLOPs and bytes: allow unseen models (--allow-unseen) to accept that`);
    }
  }
  const encoder = new FeatureEncoder({ featureSet: file.features.set, maxSlots: file.features.maxSlots, trainedModels: [...trained.keys()], specs: options.models, threads: file.features.threads === true });
  const scaling = { mean: file.features.mean, std: file.features.std };
  if (file.kind === 'mlp') return new MlpPredictor(encoder, scaling, file.target, file.mlp.layers, file.deviceId);
  return new LinearPredictor(encoder, scaling, file.target, file.linear, file.deviceId);
}

/**
 * Load `predictor.json` for serving `options.models` on `options.deviceId`.
 * @throws InvalidConfigError naming the file: unreadable JSON, a bad or missing field (named),
 *   an unsupported `formatVersion`, or a device / model mismatch (`predictorFromFile`).
 */
export async function loadPredictor(path: string, options: LoadPredictorOptions): Promise<Predictor> {
  return predictorFromFile(await readPredictorFile(path), options, path);
}
