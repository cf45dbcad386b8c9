/**
 * `abacus demo` (what `npm start` runs): Abacus against one-query-at-a-time FCFS on this
 * machine's CPU, with real execution on onnxruntime-node (`device/ort`), end to end
 * (docs/demo.md):
 *
 *  1. build (or load from the cache) two models, sized so one query takes ~10–40 ms here;
 *  2. profile the device with the thread rules fixed:--threads and split:<cores> and train one
 *     thread-aware MLP predictor (`ensurePredictor`: cached under `.cache/predictors/` with the
 *     load average it was profiled under, so a second run starts at once; a profile taken
 *     under load is taken again on a quiet machine);
 *  3. measure each service's solo latency over its query mix, set the QoS targets from it
 *     (`QOS_RULE`) and the Poisson rate from the FCFS capacity it implies (`RATE_RULE`);
 *  4. run rounds: in each, the overlap gain is measured, then fcfs at `--threads` (the weak
 *     baseline), fcfs with every core (the strong one) and abacus serve the same Poisson arrivals
 *     (one seed per round), one after the other: A B C A B C …, with the load average at each
 *     round's start and end. abacus runs without the group barrier (a stream per service at
 *     `--threads`, each launch predicted against what runs, estimates corrected by measured
 *     ratios) with the calibration fallback (one query at a time on every core) and its
 *     interference trigger — the mode that served most on this CPU (docs/adaptive.md); with
 *     `--barrier`, the paper's group barrier (a lone query on every core, an overlapped group
 *     splitting them, refined online unless `--no-refine`), with the same fallback and trigger;
 *  5. take the better fcfs (higher goodput over all rounds) as the baseline, the median and
 *     range of the per-round abacus ÷ baseline goodput, decide whether the conditions let it
 *     mean anything (`demo-verdict.ts`), print the tables and write `report.html` (latency
 *     CDFs and violation bars over every round's records; `report/html.ts`, `report/plots.ts`).
 *
 * Every number printed is measured in this run on this machine. Hosting the models, the solo
 * latencies and the rounds are assembled by `deployment/demo.ts`; this command parses, reports
 * progress, pools, judges and prints.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { InvalidArgumentError, type Command } from 'commander';
import * as ort from 'onnxruntime-node';
import { ModelRepository } from '../model/repository.ts';
import type { ExperimentResult } from '../runtime/experiment.ts';
import { median } from '../stats.ts';
import { BUSY_LOAD_PER_CORE, demoVerdict, MAX_RELATIVE_SPREAD, MIN_ROUNDS, NO_OVERLAP_RATIO } from './demo-verdict.ts';
import { DEFAULT_MODELS, DEMO_MODELS, hostModels, runDemoRounds, SMALL_MODELS, SOLO_REPEAT, type DemoVariant } from '../deployment/demo.ts';
import { ensurePredictor, predictorCacheDir, profileThreadRules } from '../deployment/services.ts';
import { formatThreadRule, type ThreadRule } from '../threads.ts';
import { sampleLoad } from '../deployment/load-conditions.ts';
import { runJson } from './run-json.ts';
import { pool, RATE_RULE, startTicker, threadsLabel } from './demo-setup.ts';
import { buildReport, resultTables } from './demo-report.ts';
import type { DemoJson, DemoOptions, DemoRound } from './demo-types.ts';

export type { DemoJson, DemoOptions, DemoRound, DemoRoundRun } from './demo-types.ts';
import { formatTable } from './format.ts';
import type { CliContext } from './context.ts';
import { positiveInt } from './models.ts';
import { UsageError } from './usage.ts';

/** Above this group ÷ sequential ratio the demo warns that overlap has little to gain right now. */
const OVERLAP_WARN = 0.85;
/** Profiling samples for the predictor (each: 1 warm-up + 5 timed runs of one group). */
const DEFAULT_PROFILE_SAMPLES = 800;
/**
 * Default rounds and queries per policy run in a round. Before rounds the demo ran 2 policies
 * × 2000 queries; 3 rounds × 3 variants × 450 queries is about the same 4000 queries, so the
 * same wall time (measured in docs/demo.md).
 */
const DEFAULT_ROUNDS = 3;
const DEFAULT_QUERIES = 450;

function parseModels(value: string): string[] {
  const names = value.split(',').map((s) => s.trim()).filter((s) => s !== '');
  if (names.length < 2) throw new InvalidArgumentError(`--models needs at least two models, e.g. ${DEFAULT_MODELS.join(',')} (demo variants: ${Object.keys(DEMO_MODELS).join(', ')}; zoo names, <zoo>-small, or imported models)`);
  return names;
}

function positiveNumber(flag: string, max = Infinity): (value: string) => number {
  return (value: string) => {
    const x = Number(value);
    if (value.trim() === '' || !Number.isFinite(x) || x <= 0 || x > max) throw new InvalidArgumentError(`${flag} expects a number in (0, ${max}], got '${value}'`);
    return x;
  };
}

function qosList(value: string): number[] {
  const xs = value.split(',').map((s) => Number(s.trim()));
  if (xs.some((x) => !Number.isFinite(x) || x <= 0)) throw new InvalidArgumentError(`--qos-ms expects one number > 0 or one per model, got '${value}'`);
  return xs;
}

export function registerDemoCommand(program: Command, ctx: CliContext): void {
  program
    .command('demo')
    .description("abacus vs fcfs (one thread and every core) on this machine's CPU (onnxruntime): profile, train, serve two models under the same Poisson load in interleaved rounds, print the ratio with its spread (or why the machine was too busy for it) and write report.html")
    .option('--models <a,b>', `models to co-locate (default ${DEFAULT_MODELS.join(',')}; demo variants, zoo names, <zoo>-small, imported)`, parseModels)
    .option('--rate <qps>', `offered load over all services, queries/s (default: ${RATE_RULE(1)})`, positiveNumber('--rate'))
    .option('--load <fraction>', 'rate as a fraction of the FCFS capacity when no --rate', positiveNumber('--load', 10), 1)
    .option('--queries <n>', 'queries per policy run in each round', positiveInt('--queries'), DEFAULT_QUERIES)
    .option('--rounds <n>', 'rounds: every policy runs once per round, A B C A B C …, under that round\'s arrivals (seed + round − 1)', positiveInt('--rounds'), DEFAULT_ROUNDS)
    .option('--qos-ms <ms[,ms]>', 'QoS target(s): one value or one per model (default: the QoS rule)', qosList)
    .option('--qos-factor <x>', 'QoS target as a multiple of the solo p50 latency', positiveNumber('--qos-factor'), 4)
    .option('--out <file>', 'where to write the HTML report', 'report.html')
    .option('--seed <n>', 'seed of the Poisson load and the query mix in round 1 (round k: seed + k − 1)', positiveInt('--seed'), 1)
    .option('--small', `use the tiny ${SMALL_MODELS.join(',')} variants (a few ms per query; for quick checks)`)
    .option('--threads <n>', 'onnxruntime intra-op threads of the weak fcfs and of each abacus stream (one executor per service; also the executors\' default); the strong fcfs and a fallback launch use every core (with --barrier: a lone abacus query every core, an overlapped group splitting them)', positiveInt('--threads'), 1)
    .option('--profile-samples <n>', 'operator groups profiled when the predictor is not cached', positiveInt('--profile-samples'), DEFAULT_PROFILE_SAMPLES)
    .option('--barrier', "abacus with the paper's group barrier: a lone query on every core, an overlapped group splitting them, refined online (default: without it, a stream per service at --threads; docs/demo.md)")
    .option('--no-refine', 'with --barrier: abacus serves with its offline predictor only (default: it refines the predictor online from measured group latencies, with the guard; docs/adaptive.md)')
    .option('--json', 'print {"runs": [...], "abacusOverFcfsGoodput", "abacusOverFcfsGoodputSpread", "meaningful", "reason", "conditions", "rounds", "report", …} as JSON (progress stays on stderr)')
    .action(async (opts: DemoOptions) => {
      await runDemo(ctx, opts);
    });
}



async function runDemo(ctx: CliContext, opts: DemoOptions): Promise<DemoJson> {
  const t0 = performance.now();
  const say = (s: string): void => {
    if (!opts.json) ctx.out(s);
  };
  const progress = (s: string): void => ctx.err(s);
  const seconds = (since: number): string => `${((performance.now() - since) / 1000).toFixed(1)} s`;
  const models = opts.models ?? [...(opts.small ? SMALL_MODELS : DEFAULT_MODELS)];
  if (opts.qosMs !== undefined && opts.qosMs.length !== 1 && opts.qosMs.length !== models.length) throw new UsageError(`--qos-ms needs one value or one per model (${models.length}), got ${opts.qosMs.length}`);
  if (opts.refine === false && opts.barrier !== true) throw new UsageError('--no-refine applies to abacus with the group barrier (--barrier): without it abacus corrects its estimates from measured ratios and has no online refinement to turn off');
  const allCores = os.availableParallelism();
  const machine = {
    cpus: os.cpus().length,
    availableParallelism: allCores,
    cpuModel: os.cpus()[0]?.model.trim() ?? 'unknown',
    onnxruntime: ort.env.versions.node ?? ort.env.versions.common ?? 'unknown',
    node: process.version,
    threadsPerExecutor: opts.threads,
    allCoresThreads: allCores,
    loadAverage1m: sampleLoad().loadAverage1m,
  };
  // fcfs with --threads per executor (the weak baseline) and with every core (the strong one); one row when they coincide.
  const fcfsThreads = [...new Set([opts.threads, allCores])];
  say(
    `Abacus-TS demo: abacus vs fcfs, measured on this machine's CPU with onnxruntime-node ${machine.onnxruntime}\n` +
      `${allCores} cores (${machine.cpuModel}), one executor process per service; fcfs with ${fcfsThreads.map(threadsLabel).join(' and with ')}, ${opts.barrier === true ? 'abacus with the group barrier, every core for a lone query and the cores split among an overlapped group' : `abacus without the group barrier, a stream per service at ${threadsLabel(opts.threads)}, every core when it falls back to one query at a time`}; ${opts.rounds} interleaved round${opts.rounds === 1 ? '' : 's'}\n\n`,
  );

  // 1. models
  const repo = new ModelRepository(ctx.cacheOptions());
  const tModels = performance.now();
  progress(`[1/5] models: ${models.join(', ')} …\n`);
  const hosted = await hostModels(ctx, repo, models, opts.threads);
  progress(`      ready in ${seconds(tModels)} (cache ${repo.cacheDir})\n`);

  // 2. the predictor: groups profiled with the thread rules the variants use (fixed:--threads, split:<cores>), so one
  //    thread-aware predictor scores abacus's groups (a lone query on every core, a pair split) and fcfs's solo runs alike
  const tPred = performance.now();
  progress(`[2/5] predictor: profile + MLP, cached in ${predictorCacheDir(repo)} …\n`);
  const weakRule: ThreadRule = { kind: 'fixed', threads: opts.threads };
  const allRule: ThreadRule = { kind: 'split', cores: allCores };
  const rules = profileThreadRules([weakRule, allRule], allCores);
  const main = await ensurePredictor(ctx, repo, hosted, { samples: opts.profileSamples, threads: opts.threads, threadRules: rules });
  progress(`      ready in ${seconds(tPred)} (${main.source}; thread rules ${rules.map(formatThreadRule).join(', ')})\n`);

  // abacus without the barrier: a stream per service at --threads, each fallback launch on every core; with --barrier a
  // lone query on every core, an overlapped pair split (split:<cores>), refined online; both with the calibration
  // fallback and its interference trigger (one at a time while other processes leave about one core, or take them all)
  const abacusVariant: DemoVariant =
    opts.barrier === true
      ? { label: 'abacus', policy: 'abacus', threads: allCores, params: { threads: formatThreadRule(allRule), refine: opts.refine, fallback: true, interference: true } }
      : { label: 'abacus', policy: 'abacus', threads: opts.threads, params: { barrier: false, threads: formatThreadRule(weakRule), fallback: true, interference: true, fallbackThreads: allCores } };
  const variants: DemoVariant[] = [...fcfsThreads.map((t): DemoVariant => ({ label: `fcfs (${threadsLabel(t)})`, policy: 'fcfs', threads: t, params: { threads: formatThreadRule(t === allCores ? allRule : weakRule) } })), abacusVariant];
  const measured = await runDemoRounds(
    {
      hosted,
      predictor: main.predictor,
      threadRules: rules,
      threads: opts.threads,
      variants,
      seed: opts.seed,
      rounds: opts.rounds,
      queries: opts.queries,
      // 3. solo latencies → QoS targets and rate
      qosTargetMs: (solo, i) => (opts.qosMs === undefined ? Math.ceil(opts.qosFactor * solo.p50Ms) : opts.qosMs.length === 1 ? opts.qosMs[0]! : opts.qosMs[i]!),
      rateQps: (capacityQps) => opts.rate ?? Math.round(opts.load * capacityQps * 10) / 10,
    },
    {
      soloStart: () => progress(`[3/5] solo latencies (${SOLO_REPEAT} runs of each batch size${hosted.services.some((s) => s.seqLens !== undefined) ? ' and sequence length' : ''} per service, ${threadsLabel(opts.threads)}) …\n`),
      solosMeasured: (measuredServices, measuredSolos, capacityQps, rate) => {
        for (const [i, s] of measuredServices.entries()) {
          const solo = measuredSolos[i]!;
          progress(`      ${s.name}: solo p50 ${solo.p50Ms.toFixed(1)} ms (${solo.byShape.map((b) => `b${b.batch}${b.seqLen > 0 ? `/s${b.seqLen}` : ''} ${b.medianMs.toFixed(1)}`).join(', ')}) → QoS ${s.qosTargetMs} ms\n`);
        }
        progress(`      FCFS capacity (${threadsLabel(opts.threads)}) ≈ ${capacityQps.toFixed(1)} queries/s → rate ${rate} queries/s${opts.rate === undefined ? ` (${opts.load} × capacity)` : ' (--rate)'}\n`);
        // 4. rounds: every variant under the same arrivals per round, A B C A B C …
        progress(`[4/5] ${opts.rounds} round${opts.rounds === 1 ? '' : 's'} of ${variants.map((v) => v.label).join(', ')}: ${opts.queries} queries each, Poisson ${rate} queries/s …\n`);
      },
      roundStart: (round, seed, load, overlap) =>
        progress(`      round ${round}/${opts.rounds} (seed ${seed}; load average ${load}; overlap ${overlap.ratio.toFixed(2)} × sequential${overlap.ratio > OVERLAP_WARN ? ': little gain right now — is another process using the cores?' : ''})\n`),
      runStart: (label, expectedS) => startTicker(ctx, label, expectedS),
      runEnd: (label, r) => progress(`        ${label.padEnd(18)} ${(r.overall.violationRatio * 100).toFixed(1).padStart(5)} % violations, goodput ${r.overall.goodputQps.toFixed(1)} queries/s\n`),
    },
  );
  const { services, solos, rateQps } = measured;
  const byLabel = new Map<string, ExperimentResult[]>(variants.map((v, i) => [v.label, measured.rounds.map((r) => r.results[i]!)]));
  const rounds: DemoRound[] = measured.rounds.map((r) => ({
    round: r.round,
    seed: r.seed,
    loadAverage1mStart: r.loadAverage1mStart,
    loadAverage1mEnd: r.loadAverage1mEnd,
    overlapRatio: r.overlapRatio,
    runs: r.results.map((x, i) => ({ label: variants[i]!.label, policy: variants[i]!.policy, threadsPerExecutor: variants[i]!.threads, goodputQps: x.overall.goodputQps, violationRatio: x.overall.violationRatio, p99Ms: x.overall.p99Ms, meanGroupSize: x.meanGroupSize, fallbackShare: shareOrZero(x.fallbackShare) })),
    abacusOverFcfsGoodput: null, // set below, once the baseline is known
  }));

  // The better fcfs over all rounds is the baseline; each round's ratio is against it in that round.
  const pooled = variants.map((v) => pool(v.label, byLabel.get(v.label)!));
  const fcfsVariants = variants.filter((v) => v.policy === 'fcfs');
  const goodputOf = (label: string): number => pooled.find((p) => p.policy === label)!.overall.goodputQps;
  const baseline = fcfsVariants.reduce((best, v) => (goodputOf(v.label) > goodputOf(best.label) ? v : best), fcfsVariants[0]!).label;
  const ratioIn = (round: DemoRound, against: string): number | null => {
    const a = round.runs.find((r) => r.label === 'abacus')!.goodputQps;
    const f = round.runs.find((r) => r.label === against)!.goodputQps;
    return f > 0 ? a / f : null;
  };
  const finalRounds = rounds.map((r) => ({ ...r, abacusOverFcfsGoodput: ratioIn(r, baseline) }));
  const verdict = demoVerdict(finalRounds.map((r) => ({ ratio: r.abacusOverFcfsGoodput, loadAverage1mStart: r.loadAverage1mStart, loadAverage1mEnd: r.loadAverage1mEnd, overlapRatio: r.overlapRatio })), allCores);
  const byBaseline: Record<string, number | null> = {};
  for (const v of fcfsVariants) {
    const xs = finalRounds.map((r) => ratioIn(r, v.label));
    byBaseline[v.label] = xs.every((x) => x !== null) ? median(xs) : null;
  }

  const runs = pooled.map((p, i) => ({ ...runJson(p), policy: variants[i]!.policy, label: variants[i]!.label, threadsPerExecutor: variants[i]!.threads }));
  const outFile = path.resolve(opts.out);
  const json: DemoJson = {
    runs,
    abacusOverFcfsGoodput: verdict.ratio?.median ?? null,
    abacusOverFcfsGoodputRounds: finalRounds.map((r) => r.abacusOverFcfsGoodput),
    abacusOverFcfsGoodputSpread: verdict.ratio,
    baseline,
    abacusOverFcfsGoodputByBaseline: byBaseline,
    meaningful: verdict.meaningful,
    reason: verdict.meaningful ? null : verdict.reasons.join('; '),
    reasons: verdict.reasons,
    abacusBarrier: opts.barrier === true,
    abacusRefines: opts.barrier === true && opts.refine,
    abacusFallbackShare: shareOrZero(pooled[variants.findIndex((v) => v.policy === 'abacus')]!.fallbackShare),
    conditions: {
      cores: allCores,
      loadAverage1mStart: finalRounds[0]!.loadAverage1mStart,
      loadAverage1mMax: verdict.maxLoadAverage1m,
      overlapRatio: verdict.overlapRatio,
      thresholds: { busyLoadPerCore: BUSY_LOAD_PER_CORE, maxRelativeSpread: MAX_RELATIVE_SPREAD, noOverlapRatio: NO_OVERLAP_RATIO, minRounds: MIN_ROUNDS },
      predictor: {
        ...(main.conditions === undefined ? {} : { profiledLoadAverage1m: main.conditions.start.loadAverage1m, profiledCores: main.conditions.start.cores, profiledUnderLoad: main.conditions.underLoad }),
        ...(main.note === undefined ? {} : { note: main.note }),
      },
    },
    rounds: finalRounds,
    report: outFile,
    rateQps,
    queries: opts.queries,
    seed: opts.seed,
    predictor: main.source,
    services: services.map((s, i) => ({ service: s.name, model: s.spec.name, qosTargetMs: s.qosTargetMs, soloP50Ms: solos[i]!.p50Ms, soloMeanMs: solos[i]!.meanMs })),
    overlapRatio: verdict.overlapRatio,
    machine,
    // Until the results; --json prints the time including the report.
    elapsedS: (performance.now() - t0) / 1000,
  };
  const tables = resultTables(pooled, services, variants, finalRounds);
  const headline = headlineOf(json);

  // 5. report
  progress(`[5/5] report …\n`);
  const html = await buildReport({ results: pooled, services, solos, rateQps, opts, machine, source: main.source, tables, headline, models: hosted, json });
  await fs.mkdir(path.dirname(outFile), { recursive: true });
  await fs.writeFile(outFile, html);

  const elapsedS = (performance.now() - t0) / 1000;
  if (opts.json) {
    ctx.out(JSON.stringify({ ...json, elapsedS }, null, 2) + '\n');
    return { ...json, elapsedS };
  }
  say(`\n${services.map((s) => `${s.name} (QoS ${s.qosTargetMs} ms)`).join(' + ')}, ${opts.rounds} round${opts.rounds === 1 ? '' : 's'} × ${opts.queries} queries per policy at ${rateQps} queries/s (Poisson, seeds ${opts.seed}–${opts.seed + opts.rounds - 1}); every query of every round:\n\n`);
  say(formatTable(tables.overall.header, tables.overall.rows) + '\n');
  say(formatTable(tables.perService.header, tables.perService.rows) + '\n');
  say(formatTable(tables.rounds.header, tables.rounds.rows) + '\n');
  say(`${headline.join('\n')}\n`);
  const shown = path.relative(process.cwd(), outFile);
  say(`report: ${shown.startsWith('..') || path.isAbsolute(shown) ? outFile : shown} (latency CDFs, violation bars, rounds, settings)\n`);
  say(`total ${elapsedS.toFixed(0)} s\n`);
  return { ...json, elapsedS };
}

/** Above this share of abacus's groups in the fallback, the headline says abacus fell back rather than headlining a comparison of policies. */
export const FALLBACK_HEADLINE_SHARE = 0.5;

/** A share that is NaN or absent for no groups, as 0. */
const shareOrZero = (x: number | undefined): number => (x !== undefined && Number.isFinite(x) ? x : 0);


/**
 * The result's headline lines (stdout and report.html): the ratio with its spread when the
 * verdict says it is meaningful, else plainly why not, with the measured numbers marked as
 * not a result; led by "abacus fell back …" when its fallback decided at least
 * `FALLBACK_HEADLINE_SHARE` of its groups.
 */
export function headlineOf(json: Pick<DemoJson, 'meaningful' | 'reasons' | 'abacusOverFcfsGoodputSpread' | 'abacusOverFcfsGoodputByBaseline' | 'baseline' | 'rounds'> & { readonly abacusFallbackShare?: number }): string[] {
  const s = json.abacusOverFcfsGoodputSpread;
  const n = json.rounds.length;
  const others = Object.entries(json.abacusOverFcfsGoodputByBaseline)
    .filter(([label]) => label !== json.baseline)
    .map(([label, x]) => `against ${label}: ${x === null ? '–' : x.toFixed(2)}`);
  const measured =
    s === null
      ? `abacus goodput ÷ ${json.baseline} goodput: – (${json.baseline} had no goodput in some round)`
      : `abacus goodput ÷ ${json.baseline} goodput (the better fcfs) = ${s.median.toFixed(2)}, median of ${n} round${n === 1 ? '' : 's'}, range ${s.min.toFixed(2)}–${s.max.toFixed(2)}${others.length > 0 ? ` (${others.join(', ')})` : ''}`;
  const fell = json.abacusFallbackShare ?? 0;
  if (fell >= FALLBACK_HEADLINE_SHARE) {
    const line = `abacus fell back to one query at a time for ${(fell * 100).toFixed(0)} % of its groups (its measured groups overran their predictions, or other processes crowded the cores: the machine is too busy for overlap to gain); ${measured}`;
    return json.meaningful ? [line.charAt(0).toUpperCase() + line.slice(1)] : [`NOT A MEANINGFUL RESULT: ${json.reasons.join('; ')}.`, `Measured anyway, not a result: ${line}.`];
  }
  if (json.meaningful) return [measured.charAt(0).toUpperCase() + measured.slice(1)];
  return [`NOT A MEANINGFUL RESULT: ${json.reasons.join('; ')}.`, `Measured anyway, not a result: ${measured}.`];
}
