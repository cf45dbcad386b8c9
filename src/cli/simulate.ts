/**
 * `abacus simulate …`: the simulated accelerators (`device/sim`).
 *
 * `abacus simulate calibrate [--device sim:a100] [--json] [--reference FILE] [--fit]` prints,
 * for the seven zoo models at batch 1/4/16, the solo latency of the whole model next to the A100
 * reference, and for the 21 pairs at batch 4 the overlap ratio (group latency ÷ sum of solo
 * latencies) next to the reference's, flags the reference's artifacts and says whether the
 * goals (issue 3) are met. The bundled reference exists for `sim:a100` (eager) only: another
 * `--device` is rejected unless `--reference FILE` gives measurements of it. `--fit` first refits the cost model's constants to the reference
 * (`fitConstants`) and calibrates with them. Exit code 0 either way: missing a goal is a result.
 */
import type { Command } from 'commander';
import { ModelRepository } from '../model/repository.ts';
import { isZooModelName, ZOO_MODEL_NAMES } from '../model/zoo/index.ts';
import type { ModelSpec } from '../model/spec.ts';
import {
  BUNDLED_REFERENCE_PATH,
  CALIBRATION_GOALS,
  DEFAULT_SIM_CONSTANTS,
  calibrate,
  fitConstants,
  loadReference,
  parseSimDeviceId,
  referenceModels,
  type CalibrationPairRow,
  type CalibrationReport,
  type CalibrationSoloRow,
  type SimConstants,
} from '../device/sim/index.ts';
import { formatTable } from './format.ts';
import type { CliContext } from './main.ts';

/** `abacus simulate calibrate --json` output. */
export interface CalibrateJson {
  readonly device: string;
  readonly reference: string;
  readonly constants: SimConstants;
  readonly solo: readonly CalibrationSoloRow[];
  readonly pairs: readonly Pick<CalibrationPairRow, 'models' | 'batch' | 'ratio' | 'referenceRatio' | 'artifact' | 'artifactReason'>[];
  readonly summary: CalibrationReport['summary'];
}

interface CalibrateOptions {
  device: string;
  json?: boolean;
  reference?: string;
  fit?: boolean;
}

/** The only device the bundled reference describes (A100, eager: the Abacus artifact's PyTorch). */
export const REFERENCE_DEVICE_ID = 'sim:a100';

const round = (x: number, digits: number): number => Number(x.toFixed(digits));
const signed = (x: number, digits: number): string => (x >= 0 ? '+' : '−') + Math.abs(x).toFixed(digits);

/** Run the calibration (used by the command and by tests). */
export async function runCalibration(opts: { device: string; reference?: string; fit?: boolean; cacheDir?: string }): Promise<CalibrateJson> {
  const { id, profile, mode } = parseSimDeviceId(opts.device);
  if (opts.reference === undefined && id !== REFERENCE_DEVICE_ID) {
    throw new RangeError(
      `simulate calibrate --device ${opts.device}: the bundled reference describes an A100 in eager mode, so it only exists for ${REFERENCE_DEVICE_ID} (eager); ` +
        `comparing ${id} with it would say nothing about whether ${id} is calibrated. Calibrate ${REFERENCE_DEVICE_ID}, or pass --reference FILE with measurements of ${id}`,
    );
  }
  const referencePath = opts.reference ?? BUNDLED_REFERENCE_PATH;
  const ref = await loadReference(referencePath);
  const repo = new ModelRepository(opts.cacheDir === undefined ? {} : { cacheDir: opts.cacheDir });
  const specs = new Map<string, ModelSpec>();
  for (const name of referenceModels(ref)) {
    if (!isZooModelName(name)) throw new RangeError(`reference ${referencePath} names '${name}', which is not a zoo model (${ZOO_MODEL_NAMES.join(', ')})`);
    specs.set(name, await repo.zooSpec(name));
  }
  const constants = opts.fit ? fitConstants(specs, ref, { profile, mode }).constants : DEFAULT_SIM_CONSTANTS;
  const report = calibrate(specs, ref, { profile, mode, constants });
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
  };
}

function printCalibration(ctx: CliContext, r: CalibrateJson): void {
  const g = CALIBRATION_GOALS;
  const what = r.reference === BUNDLED_REFERENCE_PATH ? 'A100 eager reference' : 'reference';
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
  ctx.out(
    `constants: launch ${k.launchUs.eager.spatial.toFixed(2)} µs (spatial) / ${k.launchUs.eager.dense.toFixed(2)} µs (dense) per kernel eager, dispatch ${k.dispatchMs.toFixed(3)} ms, barrier ${k.barrierMs.toFixed(3)} ms, ` +
      `efficiency ${k.computeEfficiency.spatial.toFixed(3)} / ${k.computeEfficiency.dense.toFixed(3)}, outputs per SM ${Math.round(k.outputsPerSm.spatial)} / ${Math.round(k.outputsPerSm.dense)}\n`,
  );
}

/** Register `simulate` (and `simulate calibrate`); returns the `simulate` command so `experiment.ts` can give it its run action. */
export function registerSimulateCommand(program: Command, ctx: CliContext): Command {
  const simulate = program
    .command('simulate')
    .enablePositionalOptions()
    .description('simulate co-located services on a simulated accelerator with the virtual clock (compare policies, --find-peak); `simulate calibrate`: the simulator against the A100 reference');
  simulate
    .command('calibrate')
    .description('compare the simulator with the A100 reference: solo latencies at batch 1/4/16, overlap ratios of the 21 pairs at batch 4')
    .option('--device <id>', 'simulated device id (sim:<a100|v100|h100|h200>[:mig-<k>g][:eager|graph]); other than sim:a100 only with --reference', 'sim:a100')
    .option('--reference <file>', 'reference CSV (default: src/device/sim/reference/a100-group-latency.csv, the bundled copy of ../shared/reference/a100-group-latency.csv)')
    .option('--fit', 'refit the cost-model constants to the reference first and calibrate with them')
    .option('--json', 'print {"solo": [...], "pairs": [...]} as JSON')
    .action(async (opts: CalibrateOptions) => {
      const result = await runCalibration({ device: opts.device, ...(opts.reference === undefined ? {} : { reference: opts.reference }), ...(opts.fit ? { fit: true } : {}), ...ctx.cacheOptions() });
      if (opts.json) {
        ctx.out(JSON.stringify(result, null, 2) + '\n');
        return;
      }
      printCalibration(ctx, result);
    });
  return simulate;
}
