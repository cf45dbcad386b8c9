/**
 * Profile-and-train on demand, cached: what `bench`, `simulate`, `demo` and `reproduce` do
 * when no predictor file is given. The cache lives next to the model cache
 * (`.cache/models` → `.cache/predictors/<device>-<key>/{profile.csv, predictor.json}`), keyed
 * by device (for a sim device also its model revision and constants), the models' fingerprints,
 * batch sizes, sequence lengths, group size, sample count, intra-op threads (when not 1) and,
 * when given, the thread rules. The profile is resumable (an interrupted run continues where it stopped); the
 * predictor file is written atomically, so a present file is a complete one.
 *
 * On a real device the load the profile was taken under is stored beside it
 * (`conditions.json`: the 1-minute load average and cores before and after profiling,
 * `load-conditions.ts`); a predictor profiled under load is profiled again when the machine is
 * quiet at the next lookup, and a quiet one looked up on a busy machine is kept with a note
 * (`cachedPredictorAction`).
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';
import { VirtualClock } from '../clock/index.ts';
import { OrtDevice } from '../device/ort/index.ts';
import { SimDevice, simModelFingerprint } from '../device/sim/index.ts';
import { ensureDir } from '../fs.ts';
import { createLogger } from '../log.ts';
import type { ModelArtifact } from '../model/artifact.ts';
import type { ModelRepository } from '../model/repository.ts';
import { specFingerprint } from '../predict/features.ts';
import { loadPredictor, writePredictorFile } from '../predict/file.ts';
import type { Predictor } from '../predict/predictor.ts';
import { trainPredictor } from '../predict/train.ts';
import { DEFAULT_MLP_OPTIONS } from '../predict/mlp/train-mlp.ts';
import { readProfileCsv } from '../profile/csv.ts';
import { profileDevice, type ProfileProgress } from '../profile/profiler.ts';
import type { ModelShapes } from '../profile/sampler.ts';
import { cachedPredictorAction, parseProfileConditions, sampleLoad as machineLoad, isUnderLoad, type LoadSample, type ProfileConditions } from './load-conditions.ts';
import type { DeploymentContext } from './context.ts';
import os from 'node:os';
import { formatThreadRule, threadDeviceOptions, type ThreadRule } from '../threads.ts';

/** What to profile and train. */
export interface PredictorRequest {
  /** Canonical device id (`sim:a100`, `ort:cpu`). */
  readonly deviceId: string;
  /** Models to co-locate (distinct names); on `sim:` devices only their specs are read. */
  readonly models: readonly ModelArtifact[];
  readonly batchSizes: readonly number[];
  /** Sequence lengths for sequence models (empty: each model's default). */
  readonly seqLens: readonly number[];
  /**
   * Per model name: the batch sizes and sequence lengths of its own services, so that a model
   * is profiled only at shapes it is served at (`SamplerOptions.shapes`) [none: the shared lists].
   */
  readonly shapes?: ReadonlyMap<string, ModelShapes>;
  /** Stop profiling (after the sample in progress; the profile stays resumable) and throw `ProfileStoppedError`. */
  readonly signal?: AbortSignal;
  /** Largest group profiled (1..8). */
  readonly maxGroupSize: number;
  readonly samples: number;
  /** Timed runs per sample [5]. */
  readonly repeat?: number;
  /** MLP training epochs [`DEFAULT_MLP_OPTIONS.epochs`, 60]; part of the cache key when set otherwise. */
  readonly epochs?: number;
  /** ort: intra-op threads per executor [1]. */
  readonly threads?: number;
  /**
   * Thread rules drawn per profiled sample (`profile/sampler.ts` "Threads")
   * [none]: the predictor then learns the thread count as a feature.
   */
  readonly threadRules?: readonly ThreadRule[];
  /** No progress output. */
  readonly quiet?: boolean;
  /** The load reading used for the conditions (default `sampleLoad`: the machine's now; tests pass a fixed one). */
  readonly sampleLoad?: () => LoadSample;
  /**
   * The load before the caller's own work began, taken as "the load now" when judging a cached
   * predictor and as a new profile's start reading (default: read now). A command that looks
   * up several predictors passes one reading, so the second lookup does not count the first
   * one's profiling as other processes' load.
   */
  readonly loadBefore?: LoadSample;
}

/** A cached predictor and what is known about how it was made. */
export interface CachedPredictor {
  readonly predictor: Predictor;
  /** Path of its predictor.json. */
  readonly source: string;
  /** Real devices: the load it was profiled under (undefined on `sim:` devices and for predictors cached before conditions were recorded). */
  readonly conditions?: ProfileConditions;
  /** Said on stderr too: why a cached predictor was profiled again, or why its conditions may not match now. */
  readonly note?: string;
}

/** Profiling or training was stopped by `PredictorRequest.signal` (nothing was written but the resumable profile). */
export class ProfileStoppedError extends Error {
  override readonly name = 'ProfileStoppedError';
}

/** Held-out MAPE above which a freshly trained predictor gets a warning (the paper's MLP: ~6 %). */
const POOR_MAPE = 0.15;

/** Predictor cache folder next to the model cache (`.cache/models` → `.cache/predictors`). */
export function predictorCacheDir(repo: ModelRepository): string {
  const base = path.basename(repo.cacheDir);
  return path.join(path.dirname(repo.cacheDir), base === 'models' ? 'predictors' : `${base}-predictors`);
}

/**
 * The cached predictor for `request`, profiling the device and training an MLP first when it
 * is not cached yet (progress on stderr).
 * @returns the predictor and the path of its file.
 * @throws what profiling and training throw (device errors, bad options).
 */
export async function cachedPredictor(ctx: DeploymentContext, repo: ModelRepository, request: PredictorRequest): Promise<CachedPredictor> {
  const { deviceId } = request;
  const repeat = request.repeat ?? 5;
  const models = [...request.models].sort((a, b) => (a.spec.name < b.spec.name ? -1 : a.spec.name > b.spec.name ? 1 : 0));
  const specs = new Map(models.map((m) => [m.spec.name, m.spec]));
  const batchSizes = [...new Set(request.batchSizes)].sort((a, b) => a - b);
  const seqLens = [...new Set(request.seqLens)].sort((a, b) => a - b);
  const threadRules = request.threadRules ?? [];
  const epochs = request.epochs ?? DEFAULT_MLP_OPTIONS.epochs;
  const shapes = [...(request.shapes ?? new Map<string, ModelShapes>())]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([model, s]) => ({ model, batchSizes: [...new Set(s.batchSizes ?? [])].sort((a, b) => a - b), seqLens: [...new Set(s.seqLens ?? [])].sort((a, b) => a - b) }));
  const key = createHash('sha256')
    .update(
      JSON.stringify({
        v: 2,
        deviceId,
        // A sim device's latencies also depend on its model revision and constants: a cached predictor of an older simulator is stale.
        ...(deviceId.startsWith('sim') ? { sim: simModelFingerprint(deviceId) } : {}),
        models: models.map((m) => ({ name: m.spec.name, fp: specFingerprint(m.spec) })),
        batchSizes,
        seqLens,
        samples: request.samples,
        maxGroupSize: request.maxGroupSize,
        repeat,
        // Only when not the defaults, so the keys of predictors cached before threads and rules were part of the key stay valid.
        ...((request.threads ?? 1) !== 1 || threadRules.length > 0 ? { threads: request.threads ?? 1 } : {}),
        ...(threadRules.length > 0 ? { threadRules: threadRules.map(formatThreadRule) } : {}),
        ...(shapes.length > 0 ? { shapes } : {}),
        ...(epochs !== DEFAULT_MLP_OPTIONS.epochs ? { epochs } : {}),
      }),
    )
    .digest('hex')
    .slice(0, 12);
  const dir = path.join(predictorCacheDir(repo), `${deviceId.replace(/[^A-Za-z0-9_.-]/g, '_')}-${key}`);
  const predictorFile = path.join(dir, 'predictor.json');
  const csv = path.join(dir, 'profile.csv');
  const conditionsFile = path.join(dir, 'conditions.json');
  const isReal = !deviceId.startsWith('sim');
  const sampleLoad = request.sampleLoad ?? machineLoad;
  const say = (s: string): void => {
    if (!request.quiet) ctx.err(s);
  };
  let note: string | undefined;
  if (await exists(predictorFile)) {
    const conditions = isReal ? await readConditions(conditionsFile) : undefined;
    const action = isReal ? cachedPredictorAction(conditions, request.loadBefore ?? sampleLoad()) : { kind: 'use' as const };
    if (action.kind !== 'reprofile') {
      if (action.kind === 'use-with-note') say(`note: ${action.note}\n`);
      return {
        predictor: await loadPredictor(predictorFile, { deviceId, models: specs }),
        source: predictorFile,
        ...(conditions === undefined ? {} : { conditions }),
        ...(action.kind === 'use-with-note' ? { note: action.note } : {}),
      };
    }
    note = action.note;
    say(`note: ${action.note}\n`);
    // A fresh profile, not a resumed one: the old rows were measured under load.
    await fs.rm(predictorFile, { force: true });
    await fs.rm(csv, { force: true });
    await fs.rm(conditionsFile, { force: true });
  }
  await ensureDir(dir);
  say(`no cached predictor: profiling ${request.samples} operator groups of ${models.map((m) => m.spec.name).join(', ')} on ${deviceId} (cached in ${dir}) …\n`);
  const progress = (request.quiet ? undefined : ctx.progress?.()) ?? { update: () => undefined, stop: () => undefined };
  const start = request.loadBefore ?? sampleLoad();
  const common = {
    models,
    samples: request.samples,
    maxGroupSize: request.maxGroupSize,
    batchSizes,
    ...(seqLens.length > 0 ? { seqLens } : {}),
    ...(threadRules.length > 0 ? { threadRules } : {}),
    ...(request.shapes === undefined ? {} : { shapes: request.shapes }),
    ...(request.signal === undefined ? {} : { signal: request.signal }),
    seed: 1,
    repeat,
    warmup: 1,
    out: csv,
    onProgress: (p: ProfileProgress) => progress.update(p),
  };
  try {
    if (deviceId.startsWith('sim')) {
      await profileDevice({
        ...common,
        openDevice: async (seed: number) => {
          const clock = new VirtualClock();
          return { device: await SimDevice.create({ clock, id: deviceId, seed }), clock };
        },
      });
    } else {
      const device = await OrtDevice.create({
        intraOpNumThreads: request.threads ?? 1,
        ...threadDeviceOptions(threadRules, request.maxGroupSize, os.availableParallelism()),
        logger: createLogger({ defaultLevel: 'warn' }),
      });
      try {
        await profileDevice({ ...common, device });
      } finally {
        await device.close();
      }
    }
  } finally {
    progress.stop();
  }
  const stopped = (): void => {
    if (request.signal?.aborted === true) throw new ProfileStoppedError(`profiling stopped before the predictor was trained (the profile in ${dir} is resumed at the next start)`);
  };
  stopped();
  const conditions: ProfileConditions | undefined = isReal ? { start, end: sampleLoad(), underLoad: isUnderLoad(start), profiledAt: new Date().toISOString() } : undefined;
  const rows = await readProfileCsv([csv], { models: specs });
  say(`training an MLP predictor on ${rows.length} groups${epochs === DEFAULT_MLP_OPTIONS.epochs ? '' : ` (${epochs} epochs)`} …\n`);
  const trained = await trainPredictor(rows, { kind: 'mlp', specs, holdout: 0.1, folds: 0, epochs, files: [csv], onProgress: stopped });
  if (conditions !== undefined) {
    // Written before the predictor: a present predictor.json always has its conditions.
    const tmpConditions = `${conditionsFile}.tmp-${process.pid}`;
    await fs.writeFile(tmpConditions, JSON.stringify(conditions, null, 2) + '\n');
    await fs.rename(tmpConditions, conditionsFile);
    if (conditions.underLoad) say(`note: profiled under load (load average ${start.loadAverage1m} on ${start.cores} cores at the start); it is profiled again at a later run on a quiet machine\n`);
  }
  const tmp = `${predictorFile}.tmp-${process.pid}`;
  await writePredictorFile(tmp, trained.file);
  await fs.rename(tmp, predictorFile);
  const mape = trained.holdout?.mape;
  say(`predictor trained in ${trained.trainSeconds.toFixed(1)} s${mape === undefined ? '' : `, held-out MAPE ${(mape * 100).toFixed(1)} %`} → ${predictorFile}\n`);
  if (mape !== undefined && mape > POOR_MAPE) {
    ctx.err(`warning: the predictor's held-out MAPE is ${(mape * 100).toFixed(1)} % (above ${POOR_MAPE * 100} %): decisions that rely on it will be poor; profile more groups, or on a quieter machine, and delete ${dir} to retrain\n`);
  }
  return {
    predictor: await loadPredictor(predictorFile, { deviceId, models: specs }),
    source: predictorFile,
    ...(conditions === undefined ? {} : { conditions }),
    ...(note === undefined ? {} : { note }),
  };
}

async function exists(file: string): Promise<boolean> {
  try {
    await fs.access(file);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
    throw err;
  }
}

/** The stored profiling conditions; undefined when the file is absent or not a complete record. */
async function readConditions(file: string): Promise<ProfileConditions | undefined> {
  let text: string;
  try {
    text = await fs.readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
  try {
    return parseProfileConditions(JSON.parse(text));
  } catch {
    return undefined;
  }
}
