/**
 * `abacus simulate …`: the simulated accelerators (`device/sim`).
 *
 * `abacus simulate calibrate [--device sim:a100] [--json] [--reference FILE] [--fit]` prints,
 * for the seven zoo models at batch 1/4/16, the solo latency of the whole model next to the A100
 * reference, and for the 21 pairs at batch 4 the overlap ratio (group latency ÷ sum of solo
 * latencies) next to the reference's, flags the reference's artifacts and says whether the
 * calibration goals (docs/devices.md "Calibration against the A100 reference") are met. Bundled references exist for `sim:a100` (eager: the A100 reference) and
 * `sim:h200:graph` (the measured H200, `src/device/sim/reference/h200-measured/`); another `--device` is rejected
 * unless `--reference FILE` gives measurements of it. With `--random-overlap FILE` (default for
 * `sim:h200:graph`: the measured H200's) it also compares the uncontrolled overlap — B started at
 * a random moment of A — slowdowns of A and B (`random-overlap.ts`). `--fit` first refits the cost
 * model's constants to the reference (`fitConstants`; in graph mode with random-overlap data,
 * `fitGraphConstants`) and calibrates with them. Exit code 0 either way: missing a goal is a result.
 */
import type { Command } from 'commander';
import { ModelRepository } from '../model/repository.ts';
import { isZooModelName, ZOO_MODEL_NAMES } from '../model/zoo/index.ts';
import type { ModelSpec } from '../model/spec.ts';
import {
  BUNDLED_REFERENCE_PATH,
  CALIBRATION_GOALS,
  H200_RANDOM_OVERLAP_PATH,
  H200_REFERENCE_PATH,
  RANDOM_OVERLAP_TOLERANCE,
  calibrate,
  compareRandomOverlap,
  fitConstants,
  fitGraphConstants,
  loadRandomOverlap,
  loadReference,
  parseSimDeviceId,
  referenceModels,
  referenceSeqLens,
  simConstantsFor,
  type CalibrationPairRow,
  type CalibrationReport,
  type CalibrationSoloRow,
  type RandomOverlapReport,
  type SimConstants,
} from '../device/sim/index.ts';
import { formatTable } from './format.ts';
import type { CliContext } from './context.ts';

/** `abacus simulate calibrate --json` output. */
export interface CalibrateJson {
  readonly device: string;
  readonly reference: string;
  readonly constants: SimConstants;
  readonly solo: readonly CalibrationSoloRow[];
  readonly pairs: readonly Pick<CalibrationPairRow, 'models' | 'batch' | 'ratio' | 'referenceRatio' | 'artifact' | 'artifactReason'>[];
  readonly summary: CalibrationReport['summary'];
  /** The uncontrolled-overlap comparison, when random-overlap data was given (or bundled for the device). */
  readonly randomOverlap?: { readonly file: string } & RandomOverlapReport;
}

interface CalibrateOptions {
  device: string;
  json?: boolean;
  reference?: string;
  randomOverlap?: string;
  fit?: boolean;
}

/** The device the bundled A100 reference describes (A100, eager: the Abacus artifact's PyTorch). */
export const REFERENCE_DEVICE_ID = 'sim:a100';
/** The device the bundled H200 measurement describes (H200, PyTorch CUDA graphs, GPU only). */
export const H200_REFERENCE_DEVICE_ID = 'sim:h200:graph';

/** Bundled group-latency reference and random-overlap data per device id. */
const BUNDLED: Readonly<Record<string, { readonly reference: string; readonly randomOverlap?: string }>> = {
  [REFERENCE_DEVICE_ID]: { reference: BUNDLED_REFERENCE_PATH },
  [H200_REFERENCE_DEVICE_ID]: { reference: H200_REFERENCE_PATH, randomOverlap: H200_RANDOM_OVERLAP_PATH },
};

const round = (x: number, digits: number): number => Number(x.toFixed(digits));
const signed = (x: number, digits: number): string => (x >= 0 ? '+' : '−') + Math.abs(x).toFixed(digits);

/** Run the calibration (used by the command and by tests). */
export async function runCalibration(opts: { device: string; reference?: string; randomOverlap?: string; fit?: boolean; cacheDir?: string }): Promise<CalibrateJson> {
  const { id, profile, mode, drift } = parseSimDeviceId(opts.device);
  if (drift !== undefined) throw new RangeError(`sim device id '${opts.device}': calibration compares the undrifted device with its reference; leave out the drift part (calibrate ${id})`);
  const bundled = BUNDLED[id];
  if (opts.reference === undefined && bundled === undefined) {
    throw new RangeError(
      `simulate calibrate --device ${opts.device}: the bundled references describe an A100 in eager mode and an H200 in graph mode, so one only exists for ${REFERENCE_DEVICE_ID} (eager) and ${H200_REFERENCE_DEVICE_ID}; ` +
        `comparing ${id} with them would say nothing about whether ${id} is calibrated. Calibrate ${REFERENCE_DEVICE_ID} or ${H200_REFERENCE_DEVICE_ID}, or pass --reference FILE with measurements of ${id}`,
    );
  }
  const referencePath = opts.reference ?? bundled!.reference;
  const randomOverlapPath = opts.randomOverlap ?? bundled?.randomOverlap;
  const ref = await loadReference(referencePath);
  const rows = randomOverlapPath === undefined ? undefined : await loadRandomOverlap(randomOverlapPath);
  const repo = new ModelRepository(opts.cacheDir === undefined ? {} : { cacheDir: opts.cacheDir });
  const specs = new Map<string, ModelSpec>();
  const names = new Set(referenceModels(ref));
  for (const r of rows ?? []) for (const m of [r.modelA, r.modelB]) names.add(m);
  for (const name of names) {
    if (!isZooModelName(name)) throw new RangeError(`reference ${referencePath} names '${name}', which is not a zoo model (${ZOO_MODEL_NAMES.join(', ')})`);
    specs.set(name, await repo.zooSpec(name));
  }
  let constants = simConstantsFor(profile, mode);
  if (opts.fit) constants = mode === 'graph' && rows !== undefined ? fitGraphConstants(specs, ref, rows, { profile, mode }).constants : fitConstants(specs, ref, { profile, mode }).constants;
  const report = calibrate(specs, ref, { profile, mode, constants });
  const randomOverlap = rows === undefined ? undefined : compareRandomOverlap(specs, rows, { profile, mode, constants }, referenceSeqLens(ref));
  return {
    device: id,
    reference: referencePath,
    constants,
    solo: report.solo.map((s) => ({ model: s.model, batch: s.batch, latencyMs: round(s.latencyMs, 4), referenceMs: s.referenceMs })),
    pairs: report.pairs.map((p) => ({
      models: p.models,
      batch: p.batch,
      ratio: round(p.ratio, 4),
      referenceRatio: round(p.referenceRatio, 4),
      artifact: p.artifact,
      ...(p.artifactReason === undefined ? {} : { artifactReason: p.artifactReason }),
    })),
    summary: report.summary,
    ...(randomOverlap === undefined || randomOverlapPath === undefined ? {} : { randomOverlap: { file: randomOverlapPath, ...randomOverlap } }),
  };
}

function printCalibration(ctx: CliContext, r: CalibrateJson): void {
  const g = CALIBRATION_GOALS;
  const what = r.reference === BUNDLED_REFERENCE_PATH ? 'A100 eager reference' : r.reference === H200_REFERENCE_PATH ? 'measured H200, CUDA graphs, GPU only' : 'reference';
  ctx.out(`Calibration of ${r.device} against ${r.reference} (${what}; latencies in ms, dispatch included)\n\n`);
  ctx.out(`Solo latency of the whole model (goal: within ±${g.soloRelativeError * 100}%):\n`);
  ctx.out(
    formatTable(
      ['model', 'batch', 'sim ms', 'reference ms', 'error %', 'within'],
      r.solo.map((s) => [s.model, s.batch, s.latencyMs.toFixed(2), s.referenceMs.toFixed(2), signed((s.latencyMs / s.referenceMs - 1) * 100, 1), Math.abs(s.latencyMs / s.referenceMs - 1) <= g.soloRelativeError ? 'yes' : 'NO']),
    ),
  );
  ctx.out(`\nPairs: overlap ratio = group latency / sum of solo latencies (goal: ≥ ${g.pairsWithin} of ${r.pairs.length} within ±${g.pairRatioError}):\n`);
  ctx.out(
    formatTable(
      ['pair', 'batch', 'sim ratio', 'reference ratio', 'difference', 'within', 'reference artifact'],
      r.pairs.map((p) => [
        `${p.models[0]} + ${p.models[1]}`,
        p.batch,
        p.ratio.toFixed(3),
        p.referenceRatio.toFixed(3),
        signed(p.ratio - p.referenceRatio, 3),
        Math.abs(p.ratio - p.referenceRatio) <= g.pairRatioError ? 'yes' : 'NO',
        p.artifactReason ?? '',
      ]),
    ),
  );
  const s = r.summary;
  ctx.out(
    `\nsolo: ${s.soloWithinGoal}/${s.soloTotal} within ±${g.soloRelativeError * 100}% (worst ${(s.worstSoloError * 100).toFixed(1)}%); ` +
      `pairs: ${s.pairsWithinGoal}/${s.pairsTotal} within ±${g.pairRatioError}; reference artifacts: ${s.artifacts}; goals ${s.met ? 'met' : 'NOT met'}\n`,
  );
  const k = r.constants;
  const graph = r.device.endsWith(':graph');
  const launch = graph ? k.launchUs.graph : k.launchUs.eager;
  ctx.out(
    `constants: launch ${launch.spatial.toFixed(2)} µs (spatial) / ${launch.dense.toFixed(2)} µs (dense) per kernel ${graph ? 'graph (device-side gap)' : 'eager'}, dispatch ${k.dispatchMs.toFixed(3)} ms, barrier ${k.barrierMs.toFixed(3)} ms, ` +
      `efficiency ${k.computeEfficiency.spatial.toFixed(3)} / ${k.computeEfficiency.dense.toFixed(3)}, outputs per SM ${Math.round(k.outputsPerSm.spatial)} / ${Math.round(k.outputsPerSm.dense)}, ` +
      `kernel floor ${k.kernelFloorUs.spatial.toFixed(2)} / ${k.kernelFloorUs.dense.toFixed(2)} µs, node traffic ${k.nodeTraffic.toFixed(3)}, kernel grain ${k.kernelGrain.toFixed(2)}\n`,
  );
  const ro = r.randomOverlap;
  if (ro === undefined) return;
  const tol = RANDOM_OVERLAP_TOLERANCE;
  ctx.out(`\nUncontrolled overlap (${ro.file}): B starts at a random moment of A; slowdown = latency / own solo latency (within: ±${tol}):\n`);
  ctx.out(
    formatTable(
      ['A', 'B', 'batch', 'A p50 sim', 'A p50 measured', 'A p99 sim', 'A p99 measured', 'B p99 sim', 'B p99 measured', 'within'],
      ro.rows.map((x) => [
        x.modelA,
        x.modelB,
        x.batch,
        x.simulated.aP50.toFixed(2),
        x.measured.aP50.toFixed(2),
        x.simulated.aP99.toFixed(2),
        x.measured.aP99.toFixed(2),
        x.simulated.bP99.toFixed(2),
        x.measured.bP99.toFixed(2),
        Math.abs(x.simulated.aP50 - x.measured.aP50) <= tol && Math.abs(x.simulated.aP99 - x.measured.aP99) <= tol ? 'yes' : 'NO',
      ]),
    ),
  );
  const q = ro.summary;
  ctx.out(
    `\nrandom overlap: A p50 slowdown ${q.aP50Within}/${q.pairs} within ±${tol} (mean |error| ${q.meanAbsErrorAP50.toFixed(3)}); ` +
      `A p99 slowdown ${q.aP99Within}/${q.pairs} within ±${tol} (mean |error| ${q.meanAbsErrorAP99.toFixed(3)}); mean A p99 slowdown ${q.meanSimulatedAP99.toFixed(2)} simulated vs ${q.meanMeasuredAP99.toFixed(2)} measured\n`,
  );
}

/** Register `simulate` (and `simulate calibrate`); returns the `simulate` command so `experiment.ts` can give it its run action. */
export function registerSimulateCommand(program: Command, ctx: CliContext): Command {
  const simulate = program
    .command('simulate')
    .enablePositionalOptions()
    .description('simulate co-located services on a simulated accelerator with the virtual clock (compare policies, --find-peak); `simulate calibrate`: the simulator against the A100 reference or the measured H200');
  simulate
    .command('calibrate')
    .description('compare the simulator with a reference (A100 eager, or the measured H200 in graph mode): solo latencies at batch 1/4/16, overlap ratios of the 21 pairs at batch 4, uncontrolled-overlap slowdowns')
    .option('--device <id>', 'simulated device id (sim:<a100|v100|h100|h200>[:mig-<k>g][:eager|graph]); other than sim:a100 and sim:h200:graph only with --reference', 'sim:a100')
    .option(
      '--reference <file>',
      'reference CSV (default: for sim:a100 src/device/sim/reference/a100-group-latency.csv, the A100 reference derived from the Abacus authors\' published predictor; for sim:h200:graph src/device/sim/reference/h200-measured/h200-group-latency.csv)',
    )
    .option('--random-overlap <file>', 'also compare uncontrolled overlap with this CSV (default for sim:h200:graph: src/device/sim/reference/h200-measured/h200-random-overlap.csv)')
    .option('--fit', 'refit the cost-model constants to the reference (and, in graph mode, the random-overlap data) first and calibrate with them')
    .option('--json', 'print {"solo": [...], "pairs": [...]} as JSON')
    .action(async (opts: CalibrateOptions) => {
      const result = await runCalibration({
        device: opts.device,
        ...(opts.reference === undefined ? {} : { reference: opts.reference }),
        ...(opts.randomOverlap === undefined ? {} : { randomOverlap: opts.randomOverlap }),
        ...(opts.fit ? { fit: true } : {}),
        ...ctx.cacheOptions(),
      });
      if (opts.json) {
        ctx.out(JSON.stringify(result, null, 2) + '\n');
        return;
      }
      printCalibration(ctx, result);
    });
  return simulate;
}
