/**
 * `abacus profile`: measure random operator groups of the listed models on a device and write
 * them to a CSV for `abacus train` (`profile/` does the work; docs/predictor.md "Profiling"
 * documents the file). Resumable; Ctrl-C stops after the sample in progress.
 */
import { InvalidArgumentError, type Command } from 'commander';
import { lazyBar, tenths } from './progress.ts';
import { VirtualClock } from '../clock/index.ts';
import { OrtDevice } from '../device/ort/index.ts';
import { parseSimDeviceId, SimDevice } from '../device/sim/index.ts';
import { artifactAt, type ModelArtifact } from '../model/artifact.ts';
import { resolveModelArtifact, resolveModelSpec, SMALL_SUFFIX } from '../model/catalog.ts';
import { ModelRepository } from '../model/repository.ts';
import { ZOO_MODEL_NAMES } from '../model/zoo/index.ts';
import { createLogger } from '../log.ts';
import { MAX_GROUP_SIZE, multisetCount, profileDevice, type ProfileDeviceOptions, type ProfileProgress, type ProfileResult } from '../profile/index.ts';
import { positiveInt } from './models.ts';
import os from 'node:os';
import { parseThreadRules, threadDeviceOptions, type ThreadRule } from '../threads.ts';
import type { CliContext } from './context.ts';

/** Parsed flags of `abacus profile`. */
export interface ProfileCliOptions {
  device: string;
  models: string[];
  samples: number;
  repeat: number;
  batchSizes: number[];
  seqLens?: number[];
  maxGroupSize?: number;
  warmup: number;
  seed: number;
  out: string;
  threads?: number;
  /** Thread rules drawn per sample (`--thread-rules fixed:1,split:2`; docs/threads.md). */
  threadRules?: ThreadRule[];
  json?: boolean;
}

/** `abacus profile --json` output. */
export interface ProfileJson {
  readonly out: string;
  readonly device: string;
  readonly samples: number;
  readonly measured: number;
  readonly skipped: number;
  readonly wallMs: number;
}

/** Default of `--max-group-size`: the number of models, at most this. */
const DEFAULT_MAX_GROUP_SIZE = 4;
/** Exit code after Ctrl-C (128 + SIGINT), as shells report it. */
const EXIT_INTERRUPTED = 130;

function nonNegativeInt(flag: string): (value: string) => number {
  return (value: string) => {
    const x = Number(value);
    if (!/^\s*\d+\s*$/.test(value) || !Number.isSafeInteger(x)) throw new InvalidArgumentError(`${flag} expects an integer ≥ 0, got '${value}'`);
    return x;
  };
}

function intList(flag: string): (value: string) => number[] {
  const one = positiveInt(flag);
  return (value: string) => {
    const items = value.split(',').map((s) => s.trim());
    if (items.some((s) => s === '')) throw new InvalidArgumentError(`${flag} expects a comma-separated list of integers ≥ 1, got '${value}'`);
    const xs = items.map((s) => one(s));
    return [...new Set(xs)];
  };
}

function parseModels(value: string): string[] {
  const names = value.split(',').map((s) => s.trim());
  if (names.length === 0 || names.some((s) => s === '')) {
    throw new InvalidArgumentError(`--models expects a comma-separated list of model names, got '${value}' (zoo: ${ZOO_MODEL_NAMES.join(', ')}, with ${SMALL_SUFFIX} for small variants; or imported ones)`);
  }
  const twice = names.find((n, i) => names.indexOf(n) !== i);
  if (twice !== undefined) throw new InvalidArgumentError(`--models lists '${twice}' twice; list each model once (groups of a model with itself are sampled anyway)`);
  return names;
}

function parseGroupSize(value: string): number {
  const k = positiveInt('--max-group-size')(value);
  if (k > MAX_GROUP_SIZE) throw new InvalidArgumentError(`--max-group-size expects an integer in [1, ${MAX_GROUP_SIZE}], got '${value}'`);
  return k;
}

/** `ort`, `ort:cpu`, `ort:cuda[:N]` or a sim id; returned canonical-ish (sim ids are checked). */
function parseDevice(value: string): string {
  const v = value.trim();
  if (v.startsWith('sim')) {
    let spec: ReturnType<typeof parseSimDeviceId>;
    try {
      spec = parseSimDeviceId(v);
    } catch (err) {
      throw new InvalidArgumentError(err instanceof Error ? err.message : String(err));
    }
    // A profile belongs to a device at one speed; the drift part exists to test refinement against one.
    if (spec.drift !== undefined) throw new InvalidArgumentError(`--device '${value}': a profile is taken on an undrifted device; leave out the drift part (profile ${spec.id})`);
    return spec.id;
  }
  if (v === 'ort' || v === 'ort:cpu' || v === 'ort:cuda' || /^ort:cuda:\d+$/.test(v)) return v;
  throw new InvalidArgumentError(`--device expects ort, ort:cpu, ort:cuda[:N] or a simulated device sim:<a100|v100|h100|h200>[…], got '${value}'`);
}

export function registerProfileCommand(program: Command, ctx: CliContext): void {
  program
    .command('profile')
    .description('measure random operator groups of the listed models on a device (warm-up, repeated timed runs) and write a CSV for `abacus train`; resumable')
    .requiredOption('--device <id>', 'ort | ort:cpu | ort:cuda[:N] (real execution) or sim:<a100|v100|h100|h200>[…] (simulated, virtual time)', parseDevice)
    .requiredOption('--models <a,b,…>', 'models to co-locate (distinct): zoo names, NAME-small variants, or imported models', parseModels)
    .requiredOption('--samples <n>', 'number of operator groups to measure', positiveInt('--samples'))
    .requiredOption('--batch-sizes <list>', 'batch sizes to draw from, e.g. 1,2,4,8', intList('--batch-sizes'))
    .option('--seq-lens <list>', 'sequence lengths to draw from for sequence models (BERT), e.g. 8,16,32,64 (default: the model\'s default)', intList('--seq-lens'))
    .option('--max-group-size <k>', `largest group, 1..${MAX_GROUP_SIZE} (default: the number of models, at most ${DEFAULT_MAX_GROUP_SIZE})`, parseGroupSize)
    .option('--repeat <n>', 'timed runs per group (median, mean, std after dropping min and max)', positiveInt('--repeat'), 5)
    .option('--warmup <n>', 'untimed runs per group before the timed ones', nonNegativeInt('--warmup'), 1)
    .option('--seed <n>', 'seed of the sample sequence (and of simulated-device noise)', nonNegativeInt('--seed'), 0)
    .requiredOption('--out <file.csv>', 'CSV to write; an existing one made with the same options is resumed')
    .option('--threads <n>', 'ORT intra-op threads per executor (ort only; default 1)', positiveInt('--threads'))
    .option('--thread-rules <list>', 'per sample, draw one of these rules and run the group\'s segments at its intra-op threads, e.g. fixed:1,split:2 (split:C: each of k segments max(1, C/k)); the CSV gets threads_i columns and a predictor trained on it the threads feature', (v: string) => {
      try {
        return parseThreadRules(v, '--thread-rules');
      } catch (err) {
        throw new InvalidArgumentError((err as Error).message);
      }
    })
    .option('--json', 'print {"out", "device", "samples", "measured", "skipped", "wallMs"} as JSON')
    .action(async (opts: ProfileCliOptions) => {
      await runProfileCommand(ctx, opts);
    });
}

/** The command's work (exposed for tests); sets `process.exitCode` to 130 when interrupted. */
export async function runProfileCommand(ctx: CliContext, opts: ProfileCliOptions): Promise<ProfileResult> {
  if (opts.out.trim() === '') throw new RangeError('--out must name a file');
  const isSim = opts.device.startsWith('sim');
  if (isSim && opts.threads !== undefined) throw new RangeError(`--threads applies to ort devices only, not ${opts.device}`);
  const maxGroupSize = opts.maxGroupSize ?? Math.min(opts.models.length, DEFAULT_MAX_GROUP_SIZE);
  const repo = new ModelRepository(ctx.cacheOptions());
  const models: ModelArtifact[] = [];
  for (const name of opts.models) {
    if (isSim) models.push(artifactAt('/nonexistent', await resolveModelSpec(repo, name))); // sim reads specs only
    else models.push((await resolveModelArtifact(repo, name, (n) => ctx.err(`building ${n} (first run only; cached in ${repo.cacheDir}) …\n`))).artifact);
  }
  const controller = new AbortController();
  const onSigint = (): void => {
    if (controller.signal.aborted) process.exit(EXIT_INTERRUPTED); // a second Ctrl-C: now (a cut-short last line is dropped on resume)
    ctx.err('\nCtrl-C: stopping after the sample in progress (Ctrl-C again to quit at once)\n');
    controller.abort();
  };
  const progress = progressReporter(ctx);
  const common = {
    models,
    samples: opts.samples,
    maxGroupSize,
    batchSizes: opts.batchSizes,
    ...(opts.seqLens === undefined ? {} : { seqLens: opts.seqLens }),
    seed: opts.seed,
    ...(opts.threadRules === undefined ? {} : { threadRules: opts.threadRules }),
    repeat: opts.repeat,
    warmup: opts.warmup,
    out: opts.out,
    signal: controller.signal,
    onProgress: progress.update,
  };
  const combos = multisetCount(models.length, maxGroupSize);
  if (!opts.json) {
    ctx.err(`profiling ${opts.samples} groups of 1..${maxGroupSize} of ${opts.models.join(', ')} (${combos} model combinations) on ${opts.device}, ${opts.warmup} warm-up + ${opts.repeat} timed runs each → ${opts.out}\n`);
  }
  process.on('SIGINT', onSigint);
  let result: ProfileResult;
  try {
    if (isSim) {
      // A fresh simulated device per sample, seeded from (seed, sample): a resumed run writes
      // the same file as an uninterrupted one.
      const id = opts.device;
      result = await profileDevice({
        ...common,
        openDevice: async (seed: number) => {
          const clock = new VirtualClock();
          return { device: await SimDevice.create({ clock, id, seed }), clock };
        },
      } satisfies ProfileDeviceOptions);
    } else {
      const cuda = /^ort:cuda(?::(\d+))?$/.exec(opts.device);
      const device = await OrtDevice.create({
        intraOpNumThreads: opts.threads ?? 1,
        ...threadDeviceOptions(opts.threadRules ?? [], maxGroupSize, os.availableParallelism()),
        logger: createLogger({ defaultLevel: 'warn' }),
        ...(cuda ? { executionProvider: 'cuda' as const, cudaDeviceId: Number(cuda[1] ?? 0) } : {}),
      });
      try {
        result = await profileDevice({ ...common, device });
      } finally {
        await device.close();
      }
    }
  } finally {
    process.off('SIGINT', onSigint);
    progress.stop();
  }
  if (result.interrupted) {
    ctx.err(`interrupted: ${result.skipped + result.measured} of ${result.samples} samples in ${result.out}; rerun the same command to resume\n`);
    process.exitCode = EXIT_INTERRUPTED;
  }
  if (opts.json) {
    const json: ProfileJson = { out: result.out, device: result.device, samples: result.samples, measured: result.measured, skipped: result.skipped, wallMs: Math.round(result.wallMs) };
    ctx.out(JSON.stringify(json, null, 2) + '\n');
  } else if (!result.interrupted) {
    ctx.out(
      `${result.device}: ${result.measured} groups measured, ${result.skipped} already in the file, in ${(result.wallMs / 1000).toFixed(1)} s → ${result.out}\n`,
    );
  }
  return result;
}

/**
 * Progress on stderr: a bar with ETA when stderr is a terminal, else one plain line per ~10%
 * of the samples (and the first report when resuming).
 */
export function progressReporter(ctx: CliContext): { update: (p: ProfileProgress) => void; stop: () => void } {
  if (process.stderr.isTTY) {
    const bar = lazyBar('profile [{bar}] {percentage}% | {value}/{total} samples | ETA {eta_formatted} | {duration_formatted}', 200);
    return { update: (p) => bar.update(p.total, p.done), stop: () => bar.stop() };
  }
  const t0 = performance.now();
  const tenth = tenths();
  return {
    update: (p) => {
      if (p.measured === 0) {
        if (p.skipped > 0) ctx.err(`resuming: ${p.skipped} of ${p.total} samples already in the file\n`);
        tenth.skipTo(p.done, p.total);
        return;
      }
      if (!tenth.due(p.done, p.total)) return;
      const elapsedS = (performance.now() - t0) / 1000;
      const rate = p.measured / elapsedS;
      const etaS = (p.total - p.done) / rate;
      ctx.err(`profile: ${p.done}/${p.total} samples (${Math.floor((100 * p.done) / p.total)}%), ${rate.toFixed(1)} samples/s, ETA ${formatDuration(etaS)}\n`);
    },
    stop: () => {},
  };
}

function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds)) return '?';
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, '0')}m`;
}
