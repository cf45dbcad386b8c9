/**
 * `abacus reproduce EXPERIMENT` (issue 7, first part): the paper's co-location experiments on
 * a simulated accelerator, with profiling and predictor training inside the command (cached),
 * so one command on a fresh clone reproduces them. Implemented: `qos` (§7.2), `throughput`
 * (§7.3), `beyond-pair` (§7.4) and `all` (those three). Writes one CSV per experiment to
 * `--out` (default `reproduce/`), prints tables, and `--json` prints the headline numbers.
 */
import path from 'node:path';
import fs from 'node:fs/promises';
import { InvalidArgumentError, type Command } from 'commander';
import { stringify } from 'csv-stringify/sync';
import { parseSimDeviceId } from '../device/sim/index.ts';
import { artifactAt } from '../model/artifact.ts';
import { ModelRepository } from '../model/repository.ts';
import type { ModelSpec } from '../model/spec.ts';
import { ZOO_MODEL_NAMES } from '../model/zoo/index.ts';
import { BASELINES, PAPER_BATCH_SIZES, PAPER_SEQ_LENS, runWorkload, type ColocationRow } from '../reproduce/colocation.ts';
import { readPaperWorkloads } from '../reproduce/workloads.ts';
import { isPolicyName, POLICY_NAMES } from '../schedule/index.ts';
import { formatTable } from './format.ts';
import type { CliContext } from './main.ts';
import { positiveInt } from './models.ts';
import { cachedPredictor } from './predictor-cache.ts';

const EXPERIMENTS = ['qos', 'throughput', 'beyond-pair', 'all'] as const;
type Experiment = (typeof EXPERIMENTS)[number];
const NOT_YET = ['mig', 'cluster', 'search'];

/** Where each experiment's sets come from in the workloads file. */
const SOURCE: Readonly<Record<Exclude<Experiment, 'all'>, string>> = { qos: '7.2_qos', throughput: '7.3_throughput', 'beyond-pair': '7.4_beyond_pair' };

interface ReproduceOptions {
  device: string;
  out: string;
  quick?: boolean;
  queries?: number;
  policy: string[];
  seed: number;
  json?: boolean;
}

/** Headline numbers (`--json`), for the experiments that ran. */
export interface ReproduceJson {
  qos?: { abacusMaxViolationRatio: number; abacusMaxP99OverQos: number; violationReductionVsBest: number | null; sets: number };
  throughput?: { meanPeakRatioVsBest: number; minPeakRatioVsBest: number; sets: number };
  'beyond-pair'?: { abacusMaxViolationRatio: number; abacusMaxP99OverQos: number; sets: number };
  device: string;
  queries: number;
  out: string;
}

function parseExperiment(value: string): Experiment {
  if ((EXPERIMENTS as readonly string[]).includes(value)) return value as Experiment;
  if (NOT_YET.includes(value)) throw new InvalidArgumentError(`experiment '${value}' is not in this version yet (available: ${EXPERIMENTS.join(', ')}; MIG, cluster and search ways are issue 7's next part)`);
  throw new InvalidArgumentError(`unknown experiment '${value}' (available: ${EXPERIMENTS.join(', ')})`);
}

const pct = (x: number): string => (Number.isFinite(x) ? (x * 100).toFixed(2) : '–');
const f2 = (x: number | undefined): string => (x !== undefined && Number.isFinite(x) ? x.toFixed(2) : '–');

/** Per set: the rows of each policy. */
function bySet(rows: readonly ColocationRow[]): Map<string, Map<string, ColocationRow>> {
  const out = new Map<string, Map<string, ColocationRow>>();
  for (const r of rows) {
    if (!out.has(r.set)) out.set(r.set, new Map());
    out.get(r.set)!.set(r.policy, r);
  }
  return out;
}

/** Run the experiments (used by the command and tests). */
export async function runReproduce(ctx: CliContext, experiment: Experiment, opts: ReproduceOptions): Promise<ReproduceJson> {
  const { id: deviceId } = parseSimDeviceId(opts.device);
  const repo = new ModelRepository(ctx.cacheOptions());
  const specs = new Map<string, ModelSpec>();
  for (const name of ZOO_MODEL_NAMES) specs.set(name, await repo.zooSpec(name));
  const workloads = await readPaperWorkloads();
  const queries = opts.queries ?? (opts.quick ? 300 : 1000);
  const samples = opts.quick ? 4000 : 12_000;
  const policies = opts.policy.includes('abacus') ? opts.policy : ['abacus', ...opts.policy];
  const say = (s: string): void => {
    if (!opts.json) ctx.err(s);
  };
  await fs.mkdir(opts.out, { recursive: true });
  const json: ReproduceJson = { device: deviceId, queries, out: path.resolve(opts.out) };
  const selected = experiment === 'all' ? (['qos', 'throughput', 'beyond-pair'] as const) : [experiment];
  for (const exp of selected) {
    const sets = workloads.filter((w) => w.experiment === SOURCE[exp]);
    const models = [...new Set(sets.flatMap((w) => w.models))];
    const maxGroupSize = Math.max(...sets.map((w) => w.models.length));
    const { predictor, source } = await cachedPredictor(ctx, repo, {
      deviceId,
      models: models.map((m) => artifactAt('/nonexistent', specs.get(m)!)),
      batchSizes: PAPER_BATCH_SIZES,
      seqLens: PAPER_SEQ_LENS,
      maxGroupSize,
      samples,
      quiet: opts.json === true,
    });
    say(`${exp}: ${sets.length} sets × ${policies.length} policies, ${queries} queries per run, predictor ${source}\n`);
    const rows: ColocationRow[] = [];
    for (const w of sets) {
      rows.push(...(await runWorkload(deviceId, w, specs, predictor, { policies, queries, seed: opts.seed, findPeak: exp === 'throughput' })));
    }
    const csvFile = path.join(opts.out, `${exp}.csv`);
    await fs.writeFile(csvFile, stringify(rows, { header: true, columns: ['set', 'policy', 'qosMs', 'rateQps', 'violationRatio', 'p99Ms', 'p99OverQos', 'goodputQps', 'meanGroupSize', 'predictorMape', 'peakGoodputQps'] }));
    const table = bySet(rows);
    if (exp === 'throughput') {
      const ratios: number[] = [];
      const lines = [...table].map(([set, byPolicy]) => {
        const abacus = byPolicy.get('abacus')!.peakGoodputQps ?? 0;
        const best = Math.max(...BASELINES.map((b) => byPolicy.get(b)?.peakGoodputQps ?? 0));
        const ratio = best > 0 ? abacus / best : Number.NaN;
        if (Number.isFinite(ratio)) ratios.push(ratio);
        return [set, ...policies.map((p) => f2(byPolicy.get(p)?.peakGoodputQps)), f2(ratio)];
      });
      if (!opts.json) ctx.out(`\n§7.3 peak goodput at ≤ 1 % violations (queries/s) on ${deviceId}\n` + formatTable(['set', ...policies, 'abacus ÷ best baseline'], lines) + '\n');
      json.throughput = { meanPeakRatioVsBest: ratios.reduce((a, b) => a + b, 0) / ratios.length, minPeakRatioVsBest: Math.min(...ratios), sets: ratios.length };
      if (!opts.json) ctx.out(`mean abacus ÷ best of ${BASELINES.join('/')}: ${json.throughput.meanPeakRatioVsBest.toFixed(3)} (paper: 1.298)\n`);
    } else {
      let maxViolation = 0;
      let maxP99 = 0;
      let abacusViolations = 0;
      let bestViolations = 0;
      const lines = [...table].map(([set, byPolicy]) => {
        const a = byPolicy.get('abacus')!;
        maxViolation = Math.max(maxViolation, a.violationRatio);
        maxP99 = Math.max(maxP99, a.p99OverQos);
        abacusViolations += a.violationRatio;
        bestViolations += Math.min(...BASELINES.map((b) => byPolicy.get(b)?.violationRatio ?? Infinity));
        return [set, String(a.qosMs), ...policies.map((p) => `${pct(byPolicy.get(p)?.violationRatio ?? Number.NaN)} / ${f2(byPolicy.get(p)?.p99OverQos)}`)];
      });
      if (!opts.json) ctx.out(`\n${exp === 'qos' ? '§7.2' : '§7.4'} violation % / p99 ÷ QoS on ${deviceId}\n` + formatTable(['set', 'QoS ms', ...policies], lines) + '\n');
      if (exp === 'qos') {
        const reduction = bestViolations > 0 ? 1 - abacusViolations / bestViolations : null;
        json.qos = { abacusMaxViolationRatio: maxViolation, abacusMaxP99OverQos: maxP99, violationReductionVsBest: reduction, sets: table.size };
        if (!opts.json) ctx.out(`abacus: worst violation ratio ${pct(maxViolation)} %, worst p99 ÷ QoS ${maxP99.toFixed(2)}; violations vs the best baseline per set, summed: ${reduction === null ? 'baselines had none' : `${(-reduction * 100).toFixed(1)} %`} (paper: −51.3 %)\n`);
      } else {
        json['beyond-pair'] = { abacusMaxViolationRatio: maxViolation, abacusMaxP99OverQos: maxP99, sets: table.size };
      }
    }
    say(`${exp}: wrote ${csvFile}\n`);
  }
  if (opts.json) ctx.out(JSON.stringify(json, null, 2) + '\n');
  return json;
}

export function registerReproduceCommand(program: Command, ctx: CliContext): void {
  program
    .command('reproduce')
    .argument('<experiment>', `${EXPERIMENTS.join(' | ')} (paper §7.2 qos, §7.3 throughput, §7.4 beyond-pair)`, parseExperiment)
    .description("reproduce the paper's co-location experiments on a simulated accelerator (profiles and trains its predictor first, cached)")
    .option('--device <id>', 'simulated device', 'sim:a100')
    .option('--out <dir>', 'folder for the CSV files', 'reproduce')
    .option('--quick', 'fewer queries per run (300) and a smaller profile (4000 groups)')
    .option('--queries <n>', 'queries per run (default 1000, --quick 300)', positiveInt('--queries'))
    .option('--policy <list>', `policies (abacus is always included; ${POLICY_NAMES.join(', ')})`, (v: string) => {
      const names = v.split(',').map((s) => s.trim());
      for (const n of names) if (!isPolicyName(n)) throw new InvalidArgumentError(`--policy: unknown policy '${n}' (valid: ${POLICY_NAMES.join(', ')})`);
      return names;
    }, ['abacus', 'fcfs', 'sjf', 'edf'])
    .option('--seed <n>', 'seed of the load and the simulator', positiveInt('--seed'), 1)
    .option('--json', 'print the headline numbers as JSON')
    .action(async (experiment: Experiment, opts: ReproduceOptions) => {
      await runReproduce(ctx, experiment, opts);
    });
}
