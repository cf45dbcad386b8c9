/**
 * `abacus reproduce EXPERIMENT` (docs/reproduction.md): the paper's evaluation on simulated accelerators,
 * with profiling and predictor training inside the command (cached), so one command on a
 * fresh clone reproduces it. Experiments: `qos` (§7.2), `throughput` (§7.3), `beyond-pair`
 * (§7.4), `mig` (§7.5), `cluster` (§7.6), `search` (§7.7, the only real measurement: decision
 * time on this CPU), `batching` (beyond the paper: dynamic batching of single-sample requests on
 * sim:a100 and sim:h200:graph, with and without the group barrier), `mixes` (3-4 services, tight
 * QoS, skewed load), `adaptive` (a ×1.5 drift at mid-run, with and without online refinement) and
 * `all`. Writes one CSV per experiment and `report.html` to `--out`
 * (default `out/reproduce`), prints tables, and `--json` prints the headline numbers.
 *
 * Results accumulate in `--out`/`results.json` (one entry per experiment, the latest run
 * wins), and the report is rebuilt from it after every experiment, so experiments run one by
 * one end up in one report. `all` starts from no results and rewrites both files after each
 * experiment, the report marking the rest as not run yet: stopped part-way, it leaves the
 * experiments it finished (`reproduce/progress.ts`, docs/reproduction.md "Interrupted runs").
 */
import path from 'node:path';
import fs from 'node:fs/promises';
import { InvalidArgumentError, type Command } from 'commander';
import { stringify } from 'csv-stringify/sync';
import { parseSimDeviceId } from '../device/sim/index.ts';
import { ModelRepository } from '../model/repository.ts';
import type { ModelSpec } from '../model/spec.ts';
import { ZOO_MODEL_NAMES } from '../model/zoo/index.ts';
import type { Predictor } from '../predict/predictor.ts';
import { findPeakRate } from '../runtime/experiment.ts';
import { CLUSTER_SET, summarizeCluster, type ClusterResult } from '../reproduce/cluster.ts';
import {
  availableVariants,
  BATCHING_ALL_BATCH_SIZES,
  BATCHING_DEVICES,
  BATCHING_MIN_SPAN_QOS,
  BATCHING_SEQ_LEN,
  BATCHING_TARGETS,
  BATCHING_TRAIN_BATCH_SIZES,
  batchingHeadline,
  batchingPairs,
  byPair,
  pairRatios,
  runBatching,
  type BatchingDeviceHeadline,
  type BatchingRow,
  type HoldoutRow,
} from '../reproduce/batching.ts';
import { BASELINES, PAPER_BATCH_SIZES, PAPER_SEQ_LENS, simEnv, workloadServices, type ColocationRow } from '../reproduce/colocation.ts';
import { ADAPTIVE_SETUP, runAdaptive, type AdaptiveJson, type DriftRunJson } from '../reproduce/adaptive.ts';
import { MIG_BATCH_SIZES, MIG_DEVICES, MIG_PAIRS, runMig, type MigRow } from '../reproduce/mig.ts';
import {
  bySet,
  colocationHeadline,
  EXPERIMENT_ORDER,
  peakRatio,
  readResults,
  throughputHeadline,
  type BatchingOutcome,
  type ClusterOutcome,
  type ColocationOutcome,
  type ReproduceResults,
} from '../reproduce/report.ts';
import { reportPath, runExperimentSequence } from '../reproduce/progress.ts';
import { measureSearch } from '../reproduce/search.ts';
import { CLUSTER_TRACE_PATH, readPaperWorkloads, type PaperWorkload } from '../reproduce/workloads.ts';
import { isPolicyName, POLICY_NAMES, POLICY_VARIANTS } from '../schedule/index.ts';
import { readLoadTrace } from '../workload/trace-file.ts';
import { formatTable } from './format.ts';
import type { CliContext } from './context.ts';
import { positiveInt } from './models.ts';
import { defaultReproduceWorkers, ReproducePool, type PredictorPlan } from './reproduce-pool.ts';
import { predictorPlans, SOURCE } from './reproduce-plans.ts';
import { batchingUnits, runUnit, type PredictorRef } from '../reproduce/units.ts';
import { mixesHeadline, type MixesHeadline } from '../reproduce/mixes.ts';
import { printMixes, runMixesExperiment } from './reproduce-mixes.ts';

const EXPERIMENTS = ['qos', 'throughput', 'beyond-pair', 'mig', 'cluster', 'search', 'batching', 'mixes', 'adaptive', 'all'] as const;
type Experiment = (typeof EXPERIMENTS)[number];
type SingleExperiment = Exclude<Experiment, 'all'>;
/**
 * Slack of the search experiment, ms: 0, so that every search runs until its interval is empty
 * (the paper's 5 ms stops most searches after their first round or before it, and then the
 * number of ways hardly matters).
 */
const SEARCH_SLACK_MS = 0;
const ALL: readonly SingleExperiment[] = EXPERIMENT_ORDER;


interface ReproduceOptions {
  device: string;
  out: string;
  quick?: boolean;
  queries?: number;
  policy: string[];
  seed: number;
  json?: boolean;
  nodes?: number;
  minutes?: number;
  decisions?: number;
  samples?: number;
  pairs?: number;
  /** batching: only these variants (`BATCHING_VARIANTS` ids). */
  variants?: string[];
  /** batching and mixes: the devices (default `BATCHING_DEVICES`). */
  devices?: string[];
  /** Threads the independent units run on (default `os.availableParallelism()`; 1: all in this thread, one after the other). */
  workers?: number;
}

/** A predictor profiled and trained (or found in the cache), loaded, and its file. */
type PredictorFor = (device: string, models: readonly string[], maxGroupSize: number, batchSizes?: readonly number[], seqLens?: readonly number[]) => Promise<{ predictor: Predictor; source: string }>;

/** Headline numbers (`--json`), for the experiments that ran. */
export interface ReproduceJson {
  qos?: { abacusMaxViolationRatio: number; abacusMaxP99OverQos: number; violationReductionVsBest: number | null; sets: number };
  throughput?: { meanPeakRatioVsBest: number; minPeakRatioVsBest: number; sets: number; noBarrier?: { meanPeakRatioVsBest: number; minPeakRatioVsBest: number } };
  'beyond-pair'?: { abacusMaxViolationRatio: number; abacusMaxP99OverQos: number; sets: number };
  mig?: { meanPeakRatioVsFcfsBySlice: Record<string, number>; abacusMaxViolationRatio: number; pairs: number };
  cluster?: { throughputRatioVsClockwork: number; abacusGoodputQps: number; clockworkGoodputQps: number; peakMinuteRatio: number; nodes: number; minutes: number };
  search?: { medianUsByWays: Record<string, number>; p99UsByWays: Record<string, number>; maxOverMinMedian: number };
  /** Per device id (`sim:a100`, `sim:h200:graph`). */
  batching?: Record<string, BatchingDeviceHeadline>;
  /** Per device id: abacus without the barrier against the baselines on harder mixes (`reproduce/mixes.ts`). */
  mixes?: Record<string, MixesHeadline>;
  /** The drift run with and without online refinement (`reproduce/adaptive.ts`). */
  adaptive?: AdaptiveJson;
  device: string;
  queries: number;
  quick: boolean;
  out: string;
  report: string;
  wallSeconds: number;
}

function parseExperiment(value: string): Experiment {
  if ((EXPERIMENTS as readonly string[]).includes(value)) return value as Experiment;
  throw new InvalidArgumentError(`unknown experiment '${value}' (available: ${EXPERIMENTS.join(', ')})`);
}

const pct = (x: number): string => (Number.isFinite(x) ? (x * 100).toFixed(2) : '–');
const f2 = (x: number | undefined): string => (x !== undefined && Number.isFinite(x) ? x.toFixed(2) : '–');
const f1 = (x: number | undefined): string => (x !== undefined && Number.isFinite(x) ? x.toFixed(1) : '–');

const COLOCATION_COLUMNS = ['set', 'policy', 'qosMs', 'rateQps', 'violationRatio', 'p99Ms', 'p99OverQos', 'goodputQps', 'meanGroupSize', 'predictorMape', 'peakGoodputQps'];

/**
 * `--quick`: operator groups profiled per predictor (12,000 otherwise) and MLP training epochs
 * (60 otherwise). The 14 predictors of `reproduce all --quick` were about a third of its CPU time,
 * profiling and training about half each. Held-out MAPE of a sim:a100 predictor of the seven
 * models (10 % of the groups held out): 4,000 groups and 60 epochs 2.4 %, 4,000 and 30 2.8 %,
 * 3,000 and 30 3.6 %, 2,000 and 30 5.0 %.
 */
export const QUICK_SAMPLES = 3000;
export const QUICK_EPOCHS = 30;

/** Run the experiments (used by the command and tests). */
export async function runReproduce(ctx: CliContext, experiment: Experiment, opts: ReproduceOptions): Promise<ReproduceJson> {
  const started = performance.now();
  const { id: deviceId } = parseSimDeviceId(opts.device);
  const repo = new ModelRepository(ctx.cacheOptions());
  const specs = new Map<string, ModelSpec>();
  for (const name of ZOO_MODEL_NAMES) specs.set(name, await repo.zooSpec(name));
  const workloads = await readPaperWorkloads();
  const quick = opts.quick === true;
  const queries = opts.queries ?? (quick ? 300 : 1000);
  const samples = opts.samples ?? (quick ? QUICK_SAMPLES : 12_000);
  const policies = opts.policy.includes('abacus') ? opts.policy : ['abacus', ...opts.policy];
  const say = (s: string): void => {
    if (!opts.json) ctx.err(s);
  };
  const print = (s: string): void => {
    if (!opts.json) ctx.out(s);
  };
  await fs.mkdir(opts.out, { recursive: true });
  // independent units (and the predictors they need, each built once) run on the pool's threads (`reproduce-pool.ts`)
  const pool = new ReproducePool(ctx, repo, specs, { workers: opts.workers ?? defaultReproduceWorkers(), samples, ...(quick ? { epochs: QUICK_EPOCHS } : {}), quiet: opts.json === true, say });
  const plan = (deviceId: string, models: readonly string[], maxGroupSize: number, batchSizes: readonly number[] = PAPER_BATCH_SIZES, seqLens: readonly number[] = PAPER_SEQ_LENS): PredictorPlan => ({ deviceId, models, maxGroupSize, batchSizes, seqLens });
  const predictorFor: PredictorFor = (device, models, maxGroupSize, batchSizes, seqLens) => pool.predictor(plan(device, models, maxGroupSize, batchSizes, seqLens));
  const predictorRef = (device: string, models: readonly string[], maxGroupSize: number, batchSizes?: readonly number[], seqLens?: readonly number[]): Promise<PredictorRef> => pool.predictorRef(plan(device, models, maxGroupSize, batchSizes, seqLens));
  // `all` starts afresh, so that what it leaves (also when stopped part-way) is its own experiments;
  // a single experiment adds to what earlier runs stored in --out
  const results: ReproduceResults = experiment === 'all' ? {} : await readResults(opts.out);
  const reportFile = reportPath(opts.out);
  const json: ReproduceJson = { device: deviceId, queries, quick, out: path.resolve(opts.out), report: path.resolve(reportFile), wallSeconds: 0 };
  const selected = experiment === 'all' ? ALL : [experiment];
  const common = { device: deviceId, quick, queries, seed: opts.seed };

  const runOne = async (exp: SingleExperiment): Promise<void> => {
    const t0 = performance.now();
    if (exp === 'qos' || exp === 'throughput' || exp === 'beyond-pair') {
      const sets = workloads.filter((w) => w.experiment === SOURCE[exp]);
      const models = [...new Set(sets.flatMap((w) => w.models))];
      const predictor = await predictorRef(deviceId, models, Math.max(...sets.map((w) => w.models.length)));
      say(`${exp}: ${sets.length} sets × ${policies.length} policies, ${queries} queries per run, predictor ${predictor.file}\n`);
      const options = { policies, queries, seed: opts.seed, findPeak: exp === 'throughput' };
      const perSet = await Promise.all(sets.map((workload) => runUnit(pool, { kind: 'colocation', deviceId, workload, predictor, options }, `${exp}: ${workload.models.join('+')} on ${deviceId}`)));
      const rows: ColocationRow[] = perSet.flat();
      await fs.writeFile(path.join(opts.out, `${exp}.csv`), stringify(rows, { header: true, columns: COLOCATION_COLUMNS }));
      const outcome: ColocationOutcome = { ...common, policies, rows, wallSeconds: (performance.now() - t0) / 1000 };
      results[exp] = outcome;
      printColocation(exp, outcome, policies, deviceId, print, json);
    } else if (exp === 'mig') {
      const pairs = quick ? MIG_PAIRS.slice(0, 2) : MIG_PAIRS;
      const sets = workloads.filter((w) => w.experiment === SOURCE.throughput);
      const models = [...new Set(pairs.flatMap((p) => p.split('+')))];
      const migPolicies = ['abacus', 'fcfs'];
      say(`mig: ${pairs.length} pairs × ${MIG_DEVICES.length} devices × ${migPolicies.join('/')}, peak goodput, ${queries} queries per run\n`);
      const options = { policies: migPolicies, queries, seed: opts.seed, findPeak: true, batchSizes: MIG_BATCH_SIZES };
      const rows = await runMig(sets, async (device, workload) => runUnit(pool, { kind: 'colocation', deviceId: device.id, workload, predictor: await predictorRef(device.id, models, 2, MIG_BATCH_SIZES), options }, `mig: ${workload.models.join('+')} on ${device.id}`), { pairs, onProgress: say });
      await fs.writeFile(path.join(opts.out, 'mig.csv'), stringify(rows, { header: true, columns: ['device', 'slice', 'set', 'policy', 'qosMs', 'peakGoodputQps', 'perGpuPeakQps', 'rateQps', 'violationRatio', 'p99Ms', 'p99OverQos', 'meanGroupSize', 'predictorMape'] }));
      results.mig = { ...common, pairs, policies: migPolicies, rows, wallSeconds: (performance.now() - t0) / 1000 };
      const lines = rows.filter((r) => r.policy === 'abacus').map((a) => {
        const f = rows.find((r) => r.device === a.device && r.set === a.set && r.policy === 'fcfs');
        const ratio = f?.peakGoodputQps !== undefined && f.peakGoodputQps > 0 ? (a.peakGoodputQps ?? 0) / f.peakGoodputQps : NaN;
        return [a.slice, a.set, f2(a.peakGoodputQps), f2(f?.peakGoodputQps), f2(ratio), f2(a.p99OverQos), f2(a.perGpuPeakQps)];
      });
      print(`\n§7.5 peak goodput at ≤ 1 % violations (queries/s) per A100 MIG instance\n` + formatTable(['slice', 'set', 'abacus', 'fcfs', 'abacus ÷ fcfs', 'abacus p99 ÷ QoS', 'abacus × instances/GPU'], lines) + '\n');
      json.mig = migHeadline(rows);
    } else if (exp === 'cluster') {
      const outcome = await runClusterExperiment(opts, deviceId, specs, quick, queries, pool, say);
      results.cluster = { ...outcome, wallSeconds: (performance.now() - t0) / 1000 };
      const { summary, abacus, clockwork, settings } = outcome;
      const csvRows = abacus.minutes.map((a, i) => {
        const c = clockwork.minutes[i]!;
        return { minute: a.minute, traceQps: a.traceQps, abacusGoodputQps: a.goodputQps, abacusP99Ms: a.p99Ms, abacusMeanMs: a.meanMs, abacusViolationRatio: a.violationRatio, clockworkGoodputQps: c.goodputQps, clockworkP99Ms: c.p99Ms, clockworkMeanMs: c.meanMs, clockworkViolationRatio: c.violationRatio };
      });
      await fs.writeFile(path.join(opts.out, 'cluster.csv'), stringify(csvRows, { header: true }));
      print(
        `\n§7.6 cluster: ${settings.nodes} nodes × ${settings.services.length} services (${settings.services.join(', ')}, QoS ${settings.qosMs} ms), ${settings.minutes} trace minutes at ${settings.minuteMs} ms each, load × ${settings.scale.toFixed(4)}\n` +
          formatTable(
            ['policy', 'goodput q/s (trace units)', 'p99 ms', 'mean ms', 'violations %', 'minutes with p99 > QoS'],
            [
              ['abacus', f1(summary.abacusGoodputQps), f2(abacus.overall.p99Ms), f2(abacus.overall.meanMs), pct(abacus.overall.violationRatio), String(summary.abacusMinutesOverQos)],
              ['clockwork', f1(summary.clockworkGoodputQps), f2(clockwork.overall.p99Ms), f2(clockwork.overall.meanMs), pct(clockwork.overall.violationRatio), String(summary.clockworkMinutesOverQos)],
            ],
          ) +
          `\nabacus ÷ clockwork-style cluster goodput: ${summary.throughputRatioVsClockwork.toFixed(3)} (paper ≈ 8.6k / 7.3k = 1.18)\n`,
      );
      json.cluster = {
        throughputRatioVsClockwork: summary.throughputRatioVsClockwork,
        abacusGoodputQps: summary.abacusGoodputQps,
        clockworkGoodputQps: summary.clockworkGoodputQps,
        peakMinuteRatio: summary.abacusPeakMinuteQps / summary.clockworkPeakMinuteQps,
        nodes: settings.nodes,
        minutes: settings.minutes,
      };
    } else if (exp === 'batching') {
      const outcome = await runBatchingExperiment(opts, pool, workloads, quick, queries, samples, say);
      const wallSeconds = (performance.now() - t0) / 1000;
      results.batching = { ...outcome, wallSeconds };
      await fs.writeFile(path.join(opts.out, 'batching.csv'), stringify([...outcome.rows], { header: true, columns: BATCHING_COLUMNS, cast: { boolean: (b) => String(b) } }));
      await fs.writeFile(
        path.join(opts.out, 'batching-predictor.csv'),
        stringify(outcome.holdout.map((h) => ({ device: h.device, batch: h.batch, groups: h.groups, mapeTrained1248_16: h.mape['used'], mapeTrained1to16: h.mape['every'] })), { header: true }),
      );
      json.batching = batchingHeadline(outcome.rows);
      printBatching(outcome.rows, outcome.variants, outcome.devices, json.batching, print);
    } else if (exp === 'mixes') {
      const outcome = await runMixesExperiment({ quick, queries, seed: opts.seed, out: opts.out, devices: opts.devices ?? BATCHING_DEVICES, ...(opts.variants === undefined ? {} : { variants: opts.variants }), ...(opts.pairs === undefined ? {} : { mixes: opts.pairs }) }, pool, workloads, say);
      results.mixes = { ...outcome, wallSeconds: (performance.now() - t0) / 1000 };
      json.mixes = mixesHeadline(outcome.rows);
      printMixes(outcome, json.mixes, print);
    } else if (exp === 'adaptive') {
      const models = [...ADAPTIVE_SETUP.models];
      const adaptiveQueries = opts.queries ?? (quick ? 2000 : 4000);
      const { predictor, source } = await predictorFor(deviceId, models, models.length, PAPER_BATCH_SIZES, ADAPTIVE_SETUP.seqLens);
      say(`adaptive: ${models.join(' + ')}, QoS ${ADAPTIVE_SETUP.qosMs} ms, ${adaptiveQueries} queries per run, drift ×${ADAPTIVE_SETUP.factor} at mid-run, predictor ${source}\n`);
      const adaptive = await runAdaptive({ deviceId, queries: adaptiveQueries, seed: opts.seed, onProgress: say }, specs, predictor);
      results.adaptive = { device: deviceId, quick, queries: adaptiveQueries, seed: opts.seed, adaptive, wallSeconds: (performance.now() - t0) / 1000 };
      const rows = adaptiveRows(adaptive);
      await fs.writeFile(path.join(opts.out, 'adaptive.csv'), stringify(rows.map(([run, r]) => ({ run, ...r })), { header: true }));
      print(
        `\nAdaptive runtime: ${adaptive.deviceId}, ${adaptive.rateQps.toFixed(1)} q/s (abacus peak at QoS ${(ADAPTIVE_SETUP.qosMs / ADAPTIVE_SETUP.factor).toFixed(1)} ms before the drift: ${adaptive.peakBeforeQps.toFixed(1)} q/s, ÷ ${ADAPTIVE_SETUP.factor}), ${adaptiveQueries} queries (simulated)\n` +
          formatTable(
            ['run', 'MAPE last 500 groups %', 'groups to recover', 'violations after recovery %', 'before change %', 'after change %', 'MAPE overall %'],
            rows.map(([run, r]) => [run, pct(r.mapeAfterRecovery), r.groupsToRecover === null ? 'never' : String(r.groupsToRecover), pct(r.violationRatioAfterRecovery), pct(r.violationRatioBeforeChange), pct(r.violationRatioAfterChange), pct(r.mapeOverall)]),
          ) +
          `\ntarget (with refinement, at ${adaptive.rateQps.toFixed(1)} q/s): rolling MAPE ≤ 5 % within 2000 groups of the change, violations ≤ 1 % after recovery\n` +
          `\nOn-time rejection (a bert query behind a resnet50 batch-16 group; simulated time):\n` +
          formatTable(
            ['case', 'long group predicted ms', 'simulated ms', 'hopeless at ms', 'answered at ms', 'late ms', 'deciding only when idle: answered at ms', 'late ms'],
            (['atArrival', 'duringOverrun'] as const).map((k) => {
              const c = adaptive.rejection[k];
              return [k === 'atArrival' ? 'hopeless on arrival' : 'hopeless while the group overruns (×1.5)', c.longPredictedMs.toFixed(2), c.longMeasuredMs.toFixed(2), c.hopelessAtMs.toFixed(3), c.answeredAtMs.toFixed(3), c.lateMs.toFixed(3), c.answeredAtMsDecidingWhenIdle.toFixed(3), c.lateMsDecidingWhenIdle.toFixed(3)];
            }),
          ) +
          `\nrejectionLateMs ${adaptive.rejectionLateMs} (target: 0 on the virtual clock)\n`,
      );
      json.adaptive = adaptive;
    } else {
      const models = CLUSTER_SET.models;
      const { predictor, source } = await predictorFor(deviceId, models, models.length);
      // wall time on this CPU: measured once no predictor is being built beside it
      await pool.predictorsSettled();
      const decisions = opts.decisions ?? (quick ? 2000 : 20_000);
      const ways = Array.from({ length: 16 }, (_, i) => i + 1);
      say(`search: abacus decide() wall time on this CPU, ${models.length} services, ways 1..16, ${decisions} decisions each, predictor ${source}\n`);
      const rows = measureSearch({
        services: models.map((m) => ({ spec: specs.get(m)!, batchSizes: PAPER_BATCH_SIZES, seqLens: PAPER_SEQ_LENS })),
        predictor,
        ways,
        decisions,
        warmup: Math.max(50, Math.round(decisions / 10)),
        slackMs: SEARCH_SLACK_MS,
        seed: opts.seed,
      });
      await fs.writeFile(path.join(opts.out, 'search.csv'), stringify(rows, { header: true }));
      results.search = { device: deviceId, quick, queries, seed: opts.seed, decisions, models: [...models], slackMs: SEARCH_SLACK_MS, rows, wallSeconds: (performance.now() - t0) / 1000 };
      print(`\n§7.7 decision time vs search ways (wall time on this CPU, µs)\n` + formatTable(['ways', 'median µs', 'p99 µs', 'predictor calls', 'groups scored', 'search rounds'], rows.map((r) => [String(r.ways), f1(r.medianUs), f1(r.p99Us), f2(r.predictorCalls), f2(r.groupsScored), f2(r.searchRounds)])) + '\n');
      const medians = rows.map((r) => r.medianUs);
      json.search = {
        medianUsByWays: Object.fromEntries(rows.map((r) => [String(r.ways), r.medianUs])),
        p99UsByWays: Object.fromEntries(rows.map((r) => [String(r.ways), r.p99Us])),
        maxOverMinMedian: Math.max(...medians) / Math.min(...medians),
      };
      print(`median decision time, slowest ÷ fastest number of ways: ${json.search.maxOverMinMedian.toFixed(2)} (target ≤ 2; paper ≈ 0.07–0.09 ms)\n`);
    }
    say(`${exp}: done in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`);
  };
  // results.json and report.html are rewritten after every experiment (`reproduce/progress.ts`)
  try {
    const planOptions = { deviceId, quick, ...(opts.pairs === undefined ? {} : { pairs: opts.pairs }), ...(opts.devices === undefined ? {} : { devices: opts.devices }) };
    pool.prefetch(selected.flatMap((exp) => predictorPlans(exp, workloads, planOptions)));
    await runExperimentSequence({
      out: opts.out,
      experiments: selected,
      results,
      run: runOne,
      onSaved: (exp, done) => {
        if (selected.length > 1) say(`${exp}: saved to results.json and ${reportFile} (${done} of ${selected.length} experiments)\n`);
      },
    });
  } finally {
    await pool.close();
  }
  json.wallSeconds = (performance.now() - started) / 1000;
  say(`wrote ${reportFile} (${json.wallSeconds.toFixed(1)} s in all)\n`);
  if (opts.json) ctx.out(JSON.stringify(json, null, 2) + '\n');
  return json;
}

function printColocation(exp: 'qos' | 'throughput' | 'beyond-pair', outcome: ColocationOutcome, policies: readonly string[], deviceId: string, print: (s: string) => void, json: ReproduceJson): void {
  const table = bySet(outcome.rows);
  if (exp === 'throughput') {
    const h = throughputHeadline(outcome.rows);
    const lines = [...table].map(([set, byPolicy]) => [set, ...policies.map((p) => f2(byPolicy.get(p)?.peakGoodputQps)), f2(peakRatio(byPolicy))]);
    print(`\n§7.3 peak goodput at ≤ 1 % violations (queries/s) on ${deviceId}\n` + formatTable(['set', ...policies, 'abacus ÷ best baseline'], lines) + '\n');
    json.throughput = h;
    print(`mean abacus ÷ best of ${BASELINES.join('/')}: ${h.meanPeakRatioVsBest.toFixed(3)} (paper: 1.298)\n`);
    if (policies.includes('abacus-no-barrier')) {
      const nb = throughputHeadline(outcome.rows, 'abacus-no-barrier');
      json.throughput = { ...h, noBarrier: { meanPeakRatioVsBest: nb.meanPeakRatioVsBest, minPeakRatioVsBest: nb.minPeakRatioVsBest } };
      print(`mean abacus without the group barrier ÷ best of ${BASELINES.join('/')}: ${nb.meanPeakRatioVsBest.toFixed(3)} (lowest pair ${nb.minPeakRatioVsBest.toFixed(3)})\n`);
    }
    return;
  }
  const h = colocationHeadline(outcome.rows);
  const lines = [...table].map(([set, byPolicy]) => [set, String(byPolicy.get('abacus')!.qosMs), ...policies.map((p) => `${pct(byPolicy.get(p)?.violationRatio ?? NaN)} / ${f2(byPolicy.get(p)?.p99OverQos)}`)]);
  print(`\n${exp === 'qos' ? '§7.2' : '§7.4'} violation % / p99 ÷ QoS on ${deviceId}\n` + formatTable(['set', 'QoS ms', ...policies], lines) + '\n');
  if (exp === 'qos') {
    json.qos = h;
    const r = h.violationReductionVsBest;
    print(`abacus: worst violation ratio ${pct(h.abacusMaxViolationRatio)} %, worst p99 ÷ QoS ${h.abacusMaxP99OverQos.toFixed(2)}; violations vs the best baseline per set, summed: ${r === null ? 'baselines had none' : `${(-r * 100).toFixed(1)} %`} (paper: −51.3 %)\n`);
  } else {
    json['beyond-pair'] = { abacusMaxViolationRatio: h.abacusMaxViolationRatio, abacusMaxP99OverQos: h.abacusMaxP99OverQos, sets: h.sets };
  }
}

const BATCHING_COLUMNS = ['pair', 'device', 'policy', 'qosMs', 'peakGoodputQps', 'peakRateQps', 'violationRatio', 'p99Ms', 'meanBatch', 'meanGroupSize', 'predictorMape', 'saturationQps', 'coLaunchQps', 'coRunLimitQps', 'coRunBatch', 'bracketed'];

/**
 * The batching experiment (`reproduce/batching.ts`): the §7.2 pairs on both devices under every
 * variant the controller factory knows, then the held-out check of each device's predictor
 * against one trained on every batch size 1..16. `samples`: the groups profiled per predictor
 * (the pool's), which also bounds the held-out check.
 */
async function runBatchingExperiment(
  opts: ReproduceOptions,
  pool: ReproducePool,
  workloads: readonly PaperWorkload[],
  quick: boolean,
  queries: number,
  samples: number,
  say: (s: string) => void,
): Promise<Omit<BatchingOutcome, 'wallSeconds'>> {
  const pairs = batchingPairs(workloads, { quick, ...(opts.pairs === undefined ? {} : { pairs: opts.pairs }) });
  const models = [...new Set(pairs.flatMap((w) => w.models))];
  const { run: all, skipped } = availableVariants();
  const unknown = (opts.variants ?? []).filter((id) => !all.some((v) => v.id === id));
  if (unknown.length > 0) throw new RangeError(`--variants: no batching variant '${unknown.join("', '")}' (valid: ${all.map((v) => v.id).join(', ')})`);
  // --quick leaves out edf-batch: both services of a §7.2 pair share one QoS target, so deadline
  // order is arrival order and its peaks equal fcfs-batch's (all 42 rows of a 21-pair run)
  const variants = opts.variants === undefined ? all.filter((v) => !quick || v.id !== 'edf-batch') : all.filter((v) => opts.variants!.includes(v.id));
  if (skipped.length > 0) say(`batching: the controller factory does not know ${skipped.join(', ')} (yet): skipped\n`);
  const minSpanQos = quick ? BATCHING_MIN_SPAN_QOS.quick : BATCHING_MIN_SPAN_QOS.full;
  // the held-out check profiles no more fresh groups than the predictor it checks was trained on
  const holdoutSamples = Math.min(quick ? 2000 : 4000, samples);
  const predictorOf = (deviceId: string, batchSizes: readonly number[]): Promise<PredictorRef> => pool.predictorRef({ deviceId, models, maxGroupSize: 2, batchSizes, seqLens: [BATCHING_SEQ_LEN] });
  const devices = opts.devices ?? BATCHING_DEVICES;
  say(`batching: ${pairs.length} pairs × ${devices.join(', ')} × ${variants.map((v) => v.id).join(', ')}; peak goodput; runs of ≥ ${queries} queries and ≥ ${minSpanQos} QoS targets\n`);
  const units = batchingUnits(pool, (device) => predictorOf(device, BATCHING_TRAIN_BATCH_SIZES), { queries, minSpanQos, seed: opts.seed });
  // the held-out check of each device's predictors runs beside the peak searches
  const holdouts = devices.map(async (deviceId) => {
    const predictors = { used: await predictorOf(deviceId, BATCHING_TRAIN_BATCH_SIZES), every: await predictorOf(deviceId, BATCHING_ALL_BATCH_SIZES) };
    const csv = path.join(opts.out, `batching-holdout-${deviceId.replace(/[^A-Za-z0-9_.-]/g, '_')}.csv`);
    say(`batching: held-out predictor error per batch size on ${deviceId} (${holdoutSamples} fresh groups)\n`);
    return runUnit(pool, { kind: 'batching-holdout', deviceId, models, predictors, options: { samples: holdoutSamples, seed: 2, csv } }, `batching: held-out predictor error on ${deviceId}`);
  });
  const [{ rows, solo }, ...perDevice] = await Promise.all([runBatching(pairs, units, { variants, onProgress: say, devices }), ...holdouts]);
  const holdout: HoldoutRow[] = perDevice.flat();
  return {
    device: devices.join(' + '),
    quick,
    queries,
    seed: opts.seed,
    devices,
    variants: variants.map((v) => v.id),
    skipped,
    minSpanQos,
    samples,
    holdoutSamples,
    rows,
    solo,
    holdout,
  };
}

/** The batching tables (stdout): per device, each pair's peaks and batch-aware Abacus' ratios; then the headline against the batching targets (`BATCHING_TARGETS`). */
function printBatching(rows: readonly BatchingRow[], variants: readonly string[], devices: readonly string[], headline: Record<string, BatchingDeviceHeadline>, print: (s: string) => void): void {
  for (const device of devices) {
    const lines = [...byPair(rows, device)].map(([pair, byPolicy]) => {
      const r = pairRatios(byPolicy, device);
      const a = byPolicy.get('abacus');
      return [pair, String(a?.qosMs ?? '–'), ...variants.map((v) => f1(byPolicy.get(v)?.peakGoodputQps)), f2(r.vsUnbatched), `${f2(r.vsBest)} (${r.best ?? '–'})`, f2(r.vsTriton), f2(a?.meanBatch), f2(a?.meanGroupSize), pct(a?.predictorMape ?? NaN), f1(a?.saturationQps), f2(r.saturation), f2(r.coLaunch), f1(byPolicy.values().next().value?.coRunLimitQps)];
    });
    print(
      `\nDynamic batching: peak goodput at ≤ 1 % violations (queries/s, simulated) on ${device}, batch-1 requests\n` +
        formatTable(['pair', 'QoS ms', ...variants, 'abacus ÷ no batching', 'abacus ÷ best baseline', 'abacus ÷ triton', 'abacus batch', 'abacus group', 'abacus MAPE %', 'saturation q/s', 'abacus ÷ saturation', 'abacus ÷ co-launch', 'co-run limit q/s'], lines) +
        '\n',
    );
  }
  const target = BATCHING_TARGETS;
  const lines = Object.entries(headline).map(([device, h]) => {
    const t = target.byDevice[device];
    return [device, `${f2(h.peakRatioVsUnbatched ?? NaN)} (≥ ${t?.peakRatioVsUnbatched ?? '–'})`, `${f2(h.peakRatioVsBestBatching ?? NaN)} (≥ ${t?.peakRatioVsBestBatching.toFixed(2) ?? '–'}; best of ${h.bestOf.join('/') || '–'})`, f2(h.peakRatioVsTriton ?? NaN), `${pct(h.abacusMaxViolationRatio)} (≤ ${pct(target.abacusMaxViolationRatio)})`, `${f2(h.saturationFraction ?? NaN)} (aim ≥ ${target.saturationFractionAim})`, f2(h.coLaunchFraction ?? NaN)];
  });
  print(`\nBatch-aware abacus, means over the pairs (target in parentheses)\n` + formatTable(['device', '÷ no batching', '÷ best batching baseline', '÷ triton', 'worst violations %', '÷ saturation', '÷ co-launch'], lines) + '\n');
  const nb = Object.entries(headline).flatMap(([device, h]) => {
    const n = h.noBarrier;
    return n === undefined ? [] : [[device, f2(n.peakRatioVsTriton ?? NaN), f2(n.minPairRatioVsTriton ?? NaN), f2(n.peakRatioVsBarrier ?? NaN), f2(n.coRunLimitFraction ?? NaN), f2(n.tritonCoRunLimitFraction ?? NaN), pct(n.maxViolationRatio), pct(n.predictorMape ?? NaN)]];
  });
  if (nb.length > 0) print(`\nAbacus without the group barrier, means over the pairs\n` + formatTable(['device', '÷ triton', 'lowest pair ÷ triton', '÷ barrier abacus', '÷ co-run limit', 'triton ÷ co-run limit', 'worst violations %', 'MAPE %'], nb) + '\n');
}

/** The drift runs of the adaptive experiment, labelled, in table order. */
function adaptiveRows(a: AdaptiveJson): [string, DriftRunJson][] {
  const { withoutRefinement, literal, ...withRefinement } = a;
  return [
    ['refined', withRefinement],
    ['offline only', withoutRefinement],
    [`refined, ${a.literalRateQps.toFixed(1)} q/s (literal rate)`, literal.withRefinement],
    [`offline only, ${a.literalRateQps.toFixed(1)} q/s (literal rate)`, literal.withoutRefinement],
  ];
}

function migHeadline(rows: readonly MigRow[]): NonNullable<ReproduceJson['mig']> {
  const bySlice: Record<string, number> = {};
  for (const slice of [...new Set(rows.map((r) => r.slice))]) {
    const ratios = rows
      .filter((r) => r.slice === slice && r.policy === 'abacus')
      .map((a) => {
        const f = rows.find((r) => r.slice === slice && r.set === a.set && r.policy === 'fcfs')?.peakGoodputQps ?? 0;
        return f > 0 ? (a.peakGoodputQps ?? 0) / f : NaN;
      })
      .filter((x) => Number.isFinite(x));
    bySlice[slice] = ratios.length === 0 ? NaN : ratios.reduce((a, b) => a + b, 0) / ratios.length;
  }
  const abacus = rows.filter((r) => r.policy === 'abacus');
  return { meanPeakRatioVsFcfsBySlice: bySlice, abacusMaxViolationRatio: Math.max(0, ...abacus.map((r) => r.violationRatio)), pairs: new Set(rows.map((r) => r.set)).size };
}

/**
 * The cluster experiment: calibrate the scale on one node (Abacus peak goodput at ≤ 1 %
 * violations with the cluster's services), then replay the trace under both policies.
 */
async function runClusterExperiment(
  opts: ReproduceOptions,
  deviceId: string,
  specs: ReadonlyMap<string, ModelSpec>,
  quick: boolean,
  queries: number,
  pool: ReproducePool,
  say: (s: string) => void,
): Promise<Omit<ClusterOutcome, 'wallSeconds'>> {
  const w: PaperWorkload = { experiment: 'cluster', models: CLUSTER_SET.models, qosMs: CLUSTER_SET.qosMs, offeredLoadQps: 50, queries, searchWays: CLUSTER_SET.searchWays, slackMs: CLUSTER_SET.slackMs };
  const services = workloadServices(w, specs);
  const plan: PredictorPlan = { deviceId, models: w.models, maxGroupSize: w.models.length, batchSizes: PAPER_BATCH_SIZES, seqLens: PAPER_SEQ_LENS };
  const ref = await pool.predictorRef(plan);
  const { predictor, source } = await pool.predictor(plan);
  const fullTrace = await readLoadTrace(CLUSTER_TRACE_PATH);
  const trace = opts.minutes === undefined ? fullTrace : fullTrace.slice(0, opts.minutes);
  const nodes = opts.nodes ?? 16;
  const minuteMs = quick ? 500 : 2000;
  say(`cluster: calibrating one node's Abacus peak goodput (${w.models.join('+')}, QoS ${w.qosMs} ms), predictor ${source}\n`);
  const peak = await findPeakRate(simEnv(deviceId, services, predictor, opts.seed), {
    services,
    policy: 'abacus',
    policyParams: { ways: w.searchWays, slackMs: w.slackMs },
    queries,
    seed: opts.seed,
    startQps: 50,
    bisections: quick ? 4 : 6,
  });
  const nodePeakQps = peak.peakGoodputQps;
  if (!(nodePeakQps > 0)) throw new Error(`cluster: one node of ${deviceId} met no load at ≤ 1 % violations with ${w.models.join('+')} (QoS ${w.qosMs} ms)`);
  const traceMean = fullTrace.reduce((a, b) => a + b, 0) / fullTrace.length;
  const scale = (nodePeakQps * nodes) / traceMean;
  say(`cluster: one node peaks at ${nodePeakQps.toFixed(1)} q/s; trace × ${scale.toFixed(4)} so its mean (${traceMean.toFixed(0)} q/s) = ${nodes} × that; ${trace.length} minutes × ${minuteMs} ms\n`);
  // the two replays are independent units (`reproduce/units.ts`)
  const run = (policy: 'abacus' | 'clockwork'): Promise<ClusterResult> => {
    say(`cluster: replaying under ${policy} …\n`);
    const options = { deviceId, nodes, services, policy, abacus: { ways: w.searchWays, slackMs: w.slackMs }, perMinuteQps: trace, scale, minuteMs, seed: opts.seed };
    return runUnit(pool, { kind: 'cluster-replay', options, predictor: ref }, `cluster: the trace replay under ${policy} on ${deviceId}`);
  };
  const [abacus, clockwork] = await Promise.all([run('abacus'), run('clockwork')]);
  return {
    device: deviceId,
    quick,
    queries,
    seed: opts.seed,
    settings: { nodes, services: services.map((s) => s.name), qosMs: w.qosMs, minutes: trace.length, minuteMs, scale, nodePeakQps, traceMeanQps: traceMean },
    abacus,
    clockwork,
    summary: summarizeCluster(abacus, clockwork, w.qosMs),
  };
}

export function registerReproduceCommand(program: Command, ctx: CliContext): void {
  program
    .command('reproduce')
    .argument('<experiment>', `${EXPERIMENTS.join(' | ')} (paper §7.2 qos, §7.3 throughput, §7.4 beyond-pair, §7.5 mig, §7.6 cluster, §7.7 search; batching: dynamic batching on sim:a100 and sim:h200:graph; mixes: 3-4 services, tight QoS, skewed load, with and without the group barrier; adaptive: a ×1.5 drift at mid-run with and without online refinement)`, parseExperiment)
    .description("reproduce the paper's evaluation on simulated accelerators (profiles and trains its predictors first, cached) and write report.html")
    .option('--device <id>', 'simulated device (mig always uses the A100 and its MIG instances, batching sim:a100 and sim:h200:graph)', 'sim:a100')
    .option('--out <dir>', 'folder for the CSV files, results.json and report.html', 'out/reproduce')
    .option('--quick', 'smaller runs: 300 queries per run, 3000-group profiles, 2 MIG pairs, 0.5 s per cluster trace minute, 2000 decisions per search ways, batching on 7 of the 21 pairs without edf-batch and mixes on 7 of the 12, runs of ≥ 10 QoS targets instead of 30, 30 training epochs per predictor instead of 60')
    .option('--queries <n>', 'queries per run (default 1000, --quick 300; adaptive 4000, --quick 2000)', positiveInt('--queries'))
    .option('--policy <list>', `policies of qos/throughput/beyond-pair (abacus is always included; ${POLICY_NAMES.join(', ')}, or abacus-no-barrier: abacus without the group barrier)`, (v: string) => {
      const names = v.split(',').map((s) => s.trim());
      for (const n of names) if (!isPolicyName(n) && POLICY_VARIANTS[n] === undefined) throw new InvalidArgumentError(`--policy: unknown policy '${n}' (valid: ${[...POLICY_NAMES, ...Object.keys(POLICY_VARIANTS)].join(', ')})`);
      return names;
    }, ['abacus', 'fcfs', 'sjf', 'edf'])
    .option('--seed <n>', 'seed of the load and the simulator', positiveInt('--seed'), 1)
    .option('--nodes <n>', 'cluster: nodes (default 16)', positiveInt('--nodes'))
    .option('--minutes <n>', 'cluster: replay only the first n trace minutes (default all 120)', positiveInt('--minutes'))
    .option('--samples <n>', 'operator groups profiled per predictor (default 12000, --quick 3000); the batching held-out check profiles at most as many', positiveInt('--samples'))
    .option('--pairs <n>', 'batching: only the first n of the 21 pairs; mixes: the first n of the 12 mixes (--quick: of its 7 of each; default all)', positiveInt('--pairs'))
    .option('--devices <ids>', 'batching and mixes: simulated devices, comma-separated (default sim:a100,sim:h200:graph; e.g. sim:a100:interference: the A100 with the H200 fit\'s interference term)', (v: string) =>
      v.split(',').map((x) => {
        try {
          return parseSimDeviceId(x.trim()).id;
        } catch (err) {
          throw new InvalidArgumentError(`--devices: ${(err as Error).message}`);
        }
      }),
    )
    .option('--variants <ids>', 'batching and mixes: only these policies, comma-separated (e.g. abacus,abacus-no-barrier,triton; default all)', (v: string) => v.split(',').map((x) => x.trim()).filter((x) => x !== ''))
    .option('--workers <n>', 'threads the independent simulations (one peak search, one predictor to train) run on, side by side; 1: one after the other in this thread (default: the cores, os.availableParallelism()); the numbers do not depend on it', positiveInt('--workers'))
    .option('--decisions <n>', 'search: timed decisions per ways (default 20000, --quick 2000)', positiveInt('--decisions'))
    .option('--json', 'print the headline numbers as JSON')
    .action(async (experiment: Experiment, opts: ReproduceOptions) => {
      await runReproduce(ctx, experiment, opts);
    });
}
