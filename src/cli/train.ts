/**
 * `abacus train`: fit a latency predictor to profile CSVs (`abacus profile`) and save it as
 * `predictor.json` (docs/predictor.md; `predict/train.ts` documents the split, folds and targets).
 *
 *     abacus train --data FILE.csv[,FILE2.csv] --kind mlp|linear --out predictor.json
 *                  [--holdout 0.2] [--folds 5] [--features full|flop] [--epochs E] [--seed S]
 *                  [--test-model M] [--max-slots K] [--json]
 *
 * Prints MAE (ms) and MAPE on the held-out groups and over the cross-validation folds;
 * `--json` prints `{"kind", "samples", "holdout": {"maeMs", "mape"}, "cv": {"maeMs", "mape"},
 * …}` (mape a fraction; `null` for a part that was skipped). Training progress goes to stderr.
 * The models named in the files are resolved by name (zoo, `-small` variants, imports) before
 * the rows are read; every row of every file must come from one device.
 */
import path from 'node:path';
import fs from 'node:fs/promises';
import { lazyBar, tenths } from './progress.ts';
import type { Command } from 'commander';
import { parse } from 'csv-parse/sync';
import { ensureDir } from '../fs.ts';
import { resolveModelSpec } from '../model/catalog.ts';
import { ModelRepository } from '../model/repository.ts';
import type { ModelSpec } from '../model/spec.ts';
import { readProfileCsv } from '../profile/csv.ts';
import type { ProfileRow } from '../profile/dataset.ts';
import { isFeatureSet, type FeatureSet } from '../predict/features.ts';
import { writePredictorFile } from '../predict/file.ts';
import { DEFAULT_MLP_OPTIONS } from '../predict/mlp/train-mlp.ts';
import { trainPredictor, type PredictorKind, type TrainProgress, type TrainResult } from '../predict/train.ts';
import { formatTable } from './format.ts';
import type { CliContext } from './context.ts';
import { UsageError } from './usage.ts';

/** `abacus train --json` output. */
export interface TrainJson {
  readonly kind: PredictorKind;
  readonly samples: number;
  readonly holdout: { readonly maeMs: number; readonly mape: number; readonly samples: number } | null;
  /** Held-out error by batch size (the largest batch among a group's slots), ascending. */
  readonly holdoutByBatch: readonly { readonly batch: number; readonly maeMs: number; readonly mape: number; readonly samples: number }[];
  readonly cv: { readonly maeMs: number; readonly mape: number; readonly samples: number } | null;
  readonly device: string;
  readonly features: FeatureSet;
  readonly trainSamples: number;
  /** Training time of the final model, s. */
  readonly trainSeconds: number;
  /** Everything, cross-validation included, s. */
  readonly totalSeconds: number;
  readonly testModel?: string;
  readonly out: string;
}

interface TrainOptions {
  data: string;
  kind: string;
  out: string;
  holdout: string;
  folds: string;
  features: string;
  epochs?: string;
  seed: string;
  testModel?: string;
  maxSlots?: string;
  json?: boolean;
}

function number(name: string, text: string, check: (x: number) => boolean, what: string): number {
  const x = Number(text);
  if (text.trim() === '' || !Number.isFinite(x) || !check(x)) throw new UsageError(`--${name} must be ${what}, got '${text}'`);
  return x;
}

/**
 * Every model name in the `model_i` columns of the files, with where it first appears, resolved
 * to specs. A light pre-pass (the reader then validates everything); a file without a usable
 * header is left to the reader's error.
 * @throws RangeError `FILE:LINE:COLUMN: unknown model …` for a name that does not resolve.
 */
export async function resolveProfileModels(files: readonly string[], repo: ModelRepository): Promise<Map<string, ModelSpec>> {
  const specs = new Map<string, ModelSpec>();
  const failed = new Set<string>();
  for (const file of files) {
    const text = await fs.readFile(file, 'utf8');
    let records: { record: string[]; info: { lines: number } }[];
    try {
      records = parse(text, { info: true, relax_column_count: true, skip_empty_lines: true, bom: true }) as unknown as { record: string[]; info: { lines: number } }[];
    } catch {
      continue; // malformed CSV: the reader names line and cause
    }
    const header = records[0]?.record ?? [];
    const columns = header.flatMap((c, i) => (/^model_\d+$/.test(c) ? [i] : []));
    for (const { record, info } of records.slice(1)) {
      for (const i of columns) {
        const name = record[i];
        if (name === undefined || name === '' || specs.has(name) || failed.has(name)) continue;
        try {
          specs.set(name, await resolveModelSpec(repo, name));
        } catch (err) {
          failed.add(name);
          throw new RangeError(`${file}:${info.lines}:${header[i]}: unknown model '${name}': ${err instanceof Error ? err.message : String(err)}`, { cause: err });
        }
      }
    }
  }
  return specs;
}

/** Read the files (one device across all of them) and train (used by the command and tests). */
export async function runTrain(
  opts: { files: readonly string[]; kind: PredictorKind; out: string; holdout: number; folds: number; featureSet: FeatureSet; epochs?: number; seed: number; testModel?: string; maxSlots?: number; cacheDir?: string },
  onProgress?: (p: TrainProgress) => void,
): Promise<{ result: TrainResult; json: TrainJson }> {
  const repo = new ModelRepository(opts.cacheDir === undefined ? {} : { cacheDir: opts.cacheDir });
  const specs = await resolveProfileModels(opts.files, repo);
  const rows: ProfileRow[] = [];
  let device: { id: string; file: string } | undefined;
  for (const file of opts.files) {
    const fileRows = await readProfileCsv([file], { models: specs });
    for (const r of fileRows) {
      if (device === undefined) device = { id: r.device, file };
      else if (r.device !== device.id) {
        throw new RangeError(`${file}: sample ${r.sample} was measured on '${r.device}' but ${device.file === file ? 'earlier rows of this file' : device.file} on '${device.id}': a predictor is for one device; train one per device`);
      }
      rows.push(r);
    }
  }
  if (rows.length === 0) throw new RangeError(`${opts.files.join(', ')}: no profile rows (only a header)`);
  if (opts.testModel !== undefined && !specs.has(opts.testModel)) throw new RangeError(`--test-model ${opts.testModel}: no row of ${opts.files.join(', ')} names that model`);
  const result = await trainPredictor(rows, {
    kind: opts.kind,
    specs,
    featureSet: opts.featureSet,
    holdout: opts.holdout,
    folds: opts.folds,
    seed: opts.seed,
    files: opts.files.map((f) => path.resolve(f)),
    ...(opts.epochs === undefined ? {} : { epochs: opts.epochs }),
    ...(opts.testModel === undefined ? {} : { testModel: opts.testModel }),
    ...(opts.maxSlots === undefined ? {} : { maxSlots: opts.maxSlots }),
    ...(onProgress === undefined ? {} : { onProgress }),
  });
  await ensureDir(path.dirname(path.resolve(opts.out)));
  await writePredictorFile(opts.out, result.file);
  const json: TrainJson = {
    kind: result.kind,
    samples: result.samples,
    holdout: result.holdout,
    holdoutByBatch: result.holdoutByBatch,
    cv: result.cv,
    device: result.predictor.deviceId,
    features: opts.featureSet,
    trainSamples: result.trainSamples,
    trainSeconds: Number(result.trainSeconds.toFixed(3)),
    totalSeconds: Number(result.totalSeconds.toFixed(3)),
    ...(result.testModel === undefined ? {} : { testModel: result.testModel }),
    out: opts.out,
  };
  return { result, json };
}

/** Epoch progress on stderr: a bar when stderr is a terminal, else a line per ~10%. */
function progressReporter(ctx: CliContext, total: number): { update: (p: TrainProgress) => void; stop: () => void } {
  let done = 0;
  if (process.stderr.isTTY) {
    const bar = lazyBar('train [{bar}] {percentage}% | {stage} | loss {loss} | ETA {eta_formatted}', 50);
    return {
      update: (p) => {
        done++;
        bar.update(total, done, { stage: p.phase === 'cv' ? `fold ${p.fold}/${p.folds} epoch ${p.epoch}/${p.epochs}` : `final model epoch ${p.epoch}/${p.epochs}`, loss: p.loss.toFixed(4) });
      },
      stop: () => bar.stop(),
    };
  }
  const tenth = tenths();
  return {
    update: (p) => {
      done++;
      if (!tenth.due(done, total)) return;
      const stage = p.phase === 'cv' ? `fold ${p.fold}/${p.folds}, epoch ${p.epoch}/${p.epochs}` : `final model, epoch ${p.epoch}/${p.epochs}`;
      ctx.err(`train: ${Math.floor((100 * done) / total)}% (${stage}), loss ${p.loss.toFixed(4)}\n`);
    },
    stop: () => undefined,
  };
}

const pct = (x: number): number => Number((x * 100).toFixed(2));
const ms = (x: number): number => Number(x.toFixed(3));

function printResult(ctx: CliContext, j: TrainJson): void {
  const what = j.testModel === undefined ? 'held-out groups' : `groups with ${j.testModel} (unseen)`;
  ctx.out(`${j.kind} predictor, '${j.features}' features, ${j.samples.toLocaleString('en-US')} samples from ${j.device} → ${j.out}\n\n`);
  const rows: (string | number)[][] = [];
  if (j.holdout !== null) rows.push([what, j.holdout.samples, ms(j.holdout.maeMs), pct(j.holdout.mape)]);
  if (j.cv !== null) rows.push(['cross-validation (mean of folds)', j.cv.samples, ms(j.cv.maeMs), pct(j.cv.mape)]);
  if (rows.length > 0) ctx.out(formatTable(['evaluated on', 'samples', 'MAE ms', 'MAPE %'], rows));
  else ctx.out('no held-out rows and no cross-validation: nothing to evaluate on (--holdout, --folds)\n');
  if (j.holdoutByBatch.length > 1) {
    ctx.out(`\n${what} by batch size (the largest batch in the group):\n`);
    ctx.out(formatTable(['batch', 'samples', 'MAE ms', 'MAPE %'], j.holdoutByBatch.map((b) => [b.batch, b.samples, ms(b.maeMs), pct(b.mape)])));
  }
  ctx.out(`\ntrained on ${j.trainSamples.toLocaleString('en-US')} samples in ${j.trainSeconds.toFixed(1)} s (${j.totalSeconds.toFixed(1)} s with cross-validation)\n`);
}

export function registerTrainCommand(program: Command, ctx: CliContext): void {
  program
    .command('train')
    .description('train a latency predictor (MLP or linear baseline) on profile CSVs; print MAE and MAPE on held-out groups and in cross-validation')
    .requiredOption('--data <files>', 'profile CSV file(s) from abacus profile, comma-separated')
    .requiredOption('--out <file>', 'predictor file to write (predictor.json)')
    .option('--kind <kind>', 'mlp (3×32 ReLU, the paper\'s) or linear (least squares baseline)', 'mlp')
    .option('--holdout <fraction>', 'fraction of the distinct groups held out for testing, in [0, 1)', '0.2')
    .option('--folds <k>', 'cross-validation folds on the training split (0 or 1: none)', '5')
    .option('--features <set>', "full (model counts + per-slot start/end/batch/seq + GFLOP/MB/kernels) or flop (model-agnostic, for unseen models)", 'full')
    .option('--epochs <n>', `MLP training epochs (default ${DEFAULT_MLP_OPTIONS.epochs})`)
    .option('--seed <n>', 'seed of the split, folds, initial weights and batch order', '1')
    .option('--test-model <model>', 'generalization: train without this model, test on the groups that contain it (needs --features flop)')
    .option('--max-slots <k>', 'slots per group the predictor accepts (default: the largest group in the data)')
    .option('--json', 'print {"kind", "samples", "holdout": {"maeMs", "mape"}, "cv": {"maeMs", "mape"}, …} as JSON')
    .action(async (o: TrainOptions) => {
      const files = o.data.split(',').map((f) => f.trim()).filter((f) => f !== '');
      if (files.length === 0) throw new UsageError('--data must name at least one CSV file');
      const twice = files.find((f, i) => files.findIndex((g) => path.resolve(g) === path.resolve(f)) !== i);
      if (twice !== undefined) throw new UsageError(`--data lists ${twice} twice: its rows would count double`);
      if (o.kind !== 'mlp' && o.kind !== 'linear') throw new UsageError(`--kind must be mlp or linear, got '${o.kind}'`);
      if (!isFeatureSet(o.features)) throw new UsageError(`--features must be full or flop, got '${o.features}'`);
      const holdout = number('holdout', o.holdout, (x) => x >= 0 && x < 1, 'a fraction in [0, 1)');
      const folds = number('folds', o.folds, (x) => Number.isInteger(x) && x >= 0, 'an integer ≥ 0');
      const seed = number('seed', o.seed, (x) => Number.isSafeInteger(x) && x >= 0, 'an integer ≥ 0');
      const epochs = o.epochs === undefined ? undefined : number('epochs', o.epochs, (x) => Number.isInteger(x) && x >= 1, 'an integer ≥ 1');
      const maxSlots = o.maxSlots === undefined ? undefined : number('max-slots', o.maxSlots, (x) => Number.isInteger(x) && x >= 1 && x <= 64, 'an integer in [1, 64]');
      if (o.testModel !== undefined && o.features !== 'flop') throw new UsageError(`--test-model needs --features flop: the 'full' features identify models, so they cannot describe one left out of training`);
      const kind: PredictorKind = o.kind;
      const totalEpochs = kind === 'mlp' ? (folds >= 2 ? folds + 1 : 1) * (epochs ?? DEFAULT_MLP_OPTIONS.epochs) : 0;
      const progress = progressReporter(ctx, Math.max(1, totalEpochs));
      let json: TrainJson;
      try {
        ({ json } = await runTrain(
          {
            files,
            kind,
            out: o.out,
            holdout,
            folds,
            featureSet: o.features,
            seed,
            ...(epochs === undefined ? {} : { epochs }),
            ...(o.testModel === undefined ? {} : { testModel: o.testModel }),
            ...(maxSlots === undefined ? {} : { maxSlots }),
            ...ctx.cacheOptions(),
          },
          progress.update,
        ));
      } finally {
        progress.stop();
      }
      if (o.json) ctx.out(JSON.stringify(json, null, 2) + '\n');
      else printResult(ctx, json);
    });
}
