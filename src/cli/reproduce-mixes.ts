/**
 * `abacus reproduce mixes` (`reproduce/mixes.ts`): runs the mixes on both simulated devices,
 * writes `mixes.csv`, prints the tables.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { stringify } from 'csv-stringify/sync';
import { BATCHING_MIN_SPAN_QOS, BATCHING_SEQ_LEN, BATCHING_TRAIN_BATCH_SIZES } from '../reproduce/batching.ts';
import { mixesToRun, MIX_VARIANTS, runMixes, type MixesHeadline } from '../reproduce/mixes.ts';
import { MIXES_TARGET, mixesTables, type MixesOutcome } from '../reproduce/mixes-report.ts';
import type { PaperWorkload } from '../reproduce/workloads.ts';
import { mixUnits } from '../reproduce/units.ts';
import { formatTable } from './format.ts';
import type { ReproducePool } from './reproduce-pool.ts';
import { availableVariants } from '../reproduce/batching.ts';

const MIX_COLUMNS = ['mix', 'kind', 'device', 'policy', 'qosMs', 'peakGoodputQps', 'peakRateQps', 'violationRatio', 'meanBatch', 'predictorMape', 'coRunLimitQps', 'coRunBatch', 'bracketed'];

/** Most services of a mix: the predictors are profiled with groups of up to this many slots. */
export const MIX_MAX_GROUP = 4;

/**
 * Run the mixes.
 * @throws RangeError for a `variants` id that is not a mix policy.
 */
export async function runMixesExperiment(
  o: { quick: boolean; queries: number; seed: number; out: string; devices: readonly string[]; variants?: readonly string[]; mixes?: number },
  pool: ReproducePool,
  workloads: readonly PaperWorkload[],
  say: (s: string) => void,
): Promise<Omit<MixesOutcome, 'wallSeconds'>> {
  const list = mixesToRun(workloads, { quick: o.quick, ...(o.mixes === undefined ? {} : { count: o.mixes }) });
  const models = [...new Set(list.flatMap((m) => m.models))];
  const known = availableVariants(MIX_VARIANTS).run;
  const unknown = (o.variants ?? []).filter((id) => !known.some((v) => v.id === id));
  if (unknown.length > 0) throw new RangeError(`--variants: no mixes policy '${unknown.join("', '")}' (valid: ${known.map((v) => v.id).join(', ')})`);
  const variants = o.variants === undefined ? known : known.filter((v) => o.variants!.includes(v.id));
  const minSpanQos = o.quick ? BATCHING_MIN_SPAN_QOS.quick : BATCHING_MIN_SPAN_QOS.full;
  say(`mixes: ${list.length} mixes × ${o.devices.join(', ')} × ${variants.map((v) => v.id).join(', ')}; peak goodput; runs of ≥ ${o.queries} queries and ≥ ${minSpanQos} QoS targets\n`);
  const units = mixUnits(pool, (deviceId) => pool.predictorRef({ deviceId, models, maxGroupSize: MIX_MAX_GROUP, batchSizes: BATCHING_TRAIN_BATCH_SIZES, seqLens: [BATCHING_SEQ_LEN] }), { queries: o.queries, minSpanQos, seed: o.seed });
  const rows = await runMixes(list, units, { variants, devices: o.devices, onProgress: say });
  await fs.writeFile(path.join(o.out, 'mixes.csv'), stringify([...rows], { header: true, columns: MIX_COLUMNS, cast: { boolean: (b) => String(b) } }));
  return { device: o.devices.join(' + '), quick: o.quick, queries: o.queries, seed: o.seed, devices: o.devices, variants: variants.map((v) => v.id), rows };
}

/** The mixes' tables and headline (stdout). */
export function printMixes(o: Pick<MixesOutcome, 'devices' | 'variants' | 'rows'>, headline: Record<string, MixesHeadline>, print: (s: string) => void): void {
  for (const t of mixesTables(o)) print(`\nHarder mixes: peak goodput at ≤ 1 % violations (queries/s, simulated) on ${t.device}, batch-1 requests, dynamic batching\n` + formatTable(t.header, t.rows) + '\n');
  const lines = Object.entries(headline).map(([device, h]) => [device, `${h.meanRatioVsBestBaseline?.toFixed(2) ?? '–'} (goal ≥ ${MIXES_TARGET})`, h.meanRatioVsBestBaselineAll?.toFixed(2) ?? '–']);
  print(`\nAbacus without the group barrier ÷ the best baseline per mix, means\n` + formatTable(['device', '3-4 services and tight QoS', 'every mix'], lines) + '\n');
}
