/**
 * How good is the cost fallback for a model loaded at runtime that the predictor was not trained
 * on (`predict/unseen.ts`, docs/health.md "Model state and model control")? On sim:a100:
 *
 * 1. a `full`-feature MLP is trained on simulated groups (1–2 slots) of the KNOWN models
 *    (default resnet50-small, as `abacus serve` profiles a one-service config);
 * 2. the UNSEEN model (default bert-small) is admitted twice (`OpenPredictor.admit`): with the
 *    cost fallback transferred from that MLP (what a real device gets), and with the cost
 *    fallback fitted to its own solo runs on a private simulated device (what `sim:` devices get);
 * 3. simulated solo groups of the unseen model, and pairs of it with a known model, are measured
 *    and compared with what the OpenPredictor answers.
 *
 * Printed: the fallback's calibration MAPE on the known models, its MAPE on the unseen model's
 * solo groups and on the mixed pairs, and the fraction of groups it over-estimates (a prediction
 * ≥ the measured latency is what keeps a co-located query's plan safe). A benchmark, not a test:
 * the numbers depend on the simulator and the seed.
 *
 *   node --import tsx bench/unseen-fallback.ts [--known resnet50-small,vgg16-small] [--unseen bert-small] [--samples 3000]
 */
import { parseArgs } from 'node:util';
import { resolveModelSpec } from '../src/model/catalog.ts';
import { ModelRepository } from '../src/model/repository.ts';
import { trainPredictor } from '../src/predict/train.ts';
import { measureSoloOnSim } from '../src/deployment/solo-measure.ts';
import { artifactAt } from '../src/model/artifact.ts';
import { calibrationSlots, OpenPredictor } from '../src/predict/unseen.ts';
import type { ProfileRow } from '../src/profile/dataset.ts';
import { simulateProfileRows } from './predictor.ts';

const { values } = parseArgs({ options: { known: { type: 'string', default: 'resnet50-small' }, unseen: { type: 'string', default: 'bert-small' }, samples: { type: 'string', default: '3000' }, seed: { type: 'string', default: '1' } } });
const repo = new ModelRepository({});
const known = await Promise.all(values.known.split(',').map((m) => resolveModelSpec(repo, m)));
const unseen = await resolveModelSpec(repo, values.unseen);
const seed = Number(values.seed);
const batchSizes = [1, 2, 4, 8, 16];

const rows = await simulateProfileRows({ models: known, samples: Number(values.samples), maxGroupSize: 2, batchSizes, seqLens: [16, 32, 64], seed });
const trained = await trainPredictor(rows, { kind: 'mlp', specs: new Map(known.map((s) => [s.name, s])), holdout: 0.1, folds: 0, files: [] });
const specs = new Map(known.map((s) => [s.name, s]));
// transfer: fitted to the MLP's predictions of the known models; measured: fitted to the unseen model's solo runs on a private sim:a100
const transfer = new OpenPredictor(trained.predictor, { specs });
const transferAdmission = transfer.admit(unseen);
const measuredOpen = new OpenPredictor(trained.predictor, { specs });
const measured = await measureSoloOnSim('sim:a100', seed + 3, artifactAt('/nonexistent', unseen), calibrationSlots(unseen));
const measuredAdmission = measuredOpen.admit(unseen, { measured, measuredOn: 'a private sim:a100' });

function score(open: OpenPredictor, rows: readonly ProfileRow[]): { groups: number; mape: number; overestimated: number; medianRatio: number } {
  const predicted = open.predict(rows.map((r) => r.slots));
  const ratios = rows.map((r, i) => predicted[i]! / r.medianMs).sort((a, b) => a - b);
  return {
    groups: rows.length,
    mape: ratios.reduce((s, x) => s + Math.abs(x - 1), 0) / ratios.length,
    overestimated: ratios.filter((x) => x >= 1).length / ratios.length,
    medianRatio: ratios[Math.floor(ratios.length / 2)]!,
  };
}

const solo = await simulateProfileRows({ models: [unseen], samples: 400, maxGroupSize: 1, batchSizes, seqLens: [16, 32, 64], seed: seed + 1 });
const pairs = (await simulateProfileRows({ models: [unseen, ...known], samples: 1200, maxGroupSize: 2, batchSizes, seqLens: [16, 32, 64], seed: seed + 2 })).filter(
  (r) => r.slots.length === 2 && r.slots.some((s) => s.model === unseen.name) && r.slots.some((s) => s.model !== unseen.name),
);
const out = {
  known: known.map((s) => s.name),
  unseen: unseen.name,
  knownHoldoutMape: trained.holdout?.mape ?? null,
  transfer: { calibrationMape: transferAdmission.calibrationMape, scale: transfer.costFallbackOf(unseen.name)?.scale, unseenSolo: score(transfer, solo), mixedPairs: score(transfer, pairs) },
  measuredOnSim: { runs: measured.length, calibrationMape: measuredAdmission.calibrationMape, scale: measuredOpen.costFallbackOf(unseen.name)?.scale, unseenSolo: score(measuredOpen, solo), mixedPairs: score(measuredOpen, pairs) },
};
process.stdout.write(JSON.stringify(out, null, 2) + '\n');
