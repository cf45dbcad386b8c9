/**
 * Profile-and-train on demand, cached: what `bench`, `simulate`, `demo` and `reproduce` do
 * when no predictor file is given. The cache lives next to the model cache
 * (`.cache/models` → `.cache/predictors/<device>-<key>/{profile.csv, predictor.json}`), keyed
 * by device (for a sim device also its model revision and constants), the models' fingerprints,
 * batch sizes, sequence lengths, group size, sample count and, when given, the thread rules
 * (with the executors' default thread count). The profile is resumable (an interrupted run continues where it stopped); the
 * predictor file is written atomically, so a present file is a complete one.
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
import { readProfileCsv } from '../profile/csv.ts';
import { profileDevice } from '../profile/profiler.ts';
import type { CliContext } from './main.ts';
import { progressReporter } from './profile.ts';
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
  /** Largest group profiled (1..8). */
  readonly maxGroupSize: number;
  readonly samples: number;
  /** Timed runs per sample [5]. */
  readonly repeat?: number;
  /** ort: intra-op threads per executor [1]. */
  readonly threads?: number;
  /**
   * Thread rules drawn per profiled sample (`profile/sampler.ts` "Threads"; issue 13 item 6)
   * [none]: the predictor then learns the thread count as a feature.
   */
  readonly threadRules?: readonly ThreadRule[];
  /** No progress output. */
  readonly quiet?: boolean;
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
export async function cachedPredictor(ctx: CliContext, repo: ModelRepository, request: PredictorRequest): Promise<{ predictor: Predictor; source: string }> {
  const { deviceId } = request;
  const repeat = request.repeat ?? 5;
  const models = [...request.models].sort((a, b) => (a.spec.name < b.spec.name ? -1 : a.spec.name > b.spec.name ? 1 : 0));
  const specs = new Map(models.map((m) => [m.spec.name, m.spec]));
  const batchSizes = [...new Set(request.batchSizes)].sort((a, b) => a - b);
  const seqLens = [...new Set(request.seqLens)].sort((a, b) => a - b);
  const threadRules = request.threadRules ?? [];
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
        // Only when given, so the keys of predictors profiled without rules stay what they were.
        ...(threadRules.length > 0 ? { threadRules: threadRules.map(formatThreadRule), threads: request.threads ?? 1 } : {}),
      }),
    )
    .digest('hex')
    .slice(0, 12);
  const dir = path.join(predictorCacheDir(repo), `${deviceId.replace(/[^A-Za-z0-9_.-]/g, '_')}-${key}`);
  const predictorFile = path.join(dir, 'predictor.json');
  const csv = path.join(dir, 'profile.csv');
  try {
    await fs.access(predictorFile);
    return { predictor: await loadPredictor(predictorFile, { deviceId, models: specs }), source: predictorFile };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  await ensureDir(dir);
  const say = (s: string): void => {
    if (!request.quiet) ctx.err(s);
  };
  say(`no cached predictor: profiling ${request.samples} operator groups of ${models.map((m) => m.spec.name).join(', ')} on ${deviceId} (cached in ${dir}) …\n`);
  const progress = request.quiet ? { update: () => undefined, stop: () => undefined } : progressReporter(ctx);
  const common = {
    models,
    samples: request.samples,
    maxGroupSize: request.maxGroupSize,
    batchSizes,
    ...(seqLens.length > 0 ? { seqLens } : {}),
    ...(threadRules.length > 0 ? { threadRules } : {}),
    seed: 1,
    repeat,
    warmup: 1,
    out: csv,
    onProgress: progress.update,
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
  const rows = await readProfileCsv([csv], { models: specs });
  say(`training an MLP predictor on ${rows.length} groups …\n`);
  const trained = await trainPredictor(rows, { kind: 'mlp', specs, holdout: 0.1, folds: 0, files: [csv] });
  const tmp = `${predictorFile}.tmp-${process.pid}`;
  await writePredictorFile(tmp, trained.file);
  await fs.rename(tmp, predictorFile);
  const mape = trained.holdout?.mape;
  say(`predictor trained in ${trained.trainSeconds.toFixed(1)} s${mape === undefined ? '' : `, held-out MAPE ${(mape * 100).toFixed(1)} %`} → ${predictorFile}\n`);
  if (mape !== undefined && mape > POOR_MAPE) {
    ctx.err(`warning: the predictor's held-out MAPE is ${(mape * 100).toFixed(1)} % (above ${POOR_MAPE * 100} %): decisions that rely on it will be poor; profile more groups, or on a quieter machine, and delete ${dir} to retrain\n`);
  }
  return { predictor: await loadPredictor(predictorFile, { deviceId, models: specs }), source: predictorFile };
}
