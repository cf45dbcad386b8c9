/**
 * Goodput on a busy machine (`npm run bench -- --only contention [-- --busy 0,1,2,4] [-- --rounds
 * 3] [-- --queries 300] [-- --load 1]`): the demo's two models on this CPU (`ort`), abacus against
 * one query at a time, while N busy-loop processes (`node -e 'for(;;){}'`, started and stopped
 * here) share the cores. docs/adaptive.md has the table and the reading.
 *
 * Setup, measured once on the quiet machine (no busy loop) before the rounds, and then fixed, so
 * a busy level is "the same service when a neighbour arrives":
 * - the QoS targets: 4 × each service's solo p50 at one intra-op thread (the demo's rule);
 * - the rate: the demo's rule, `--load` × the one-thread FCFS capacity, 1 / the mean solo latency
 *   over the mix at one thread. fcfs with every core serves about 1.35× that here, so at
 *   `--load 1` it is loaded but keeps up on the quiet machine (a rate at the all-cores capacity
 *   left every policy above 55 % violations in a trial run).
 *
 * One device, one predictor profiled with the thread rules fixed:1 and split:C (C = the cores),
 * cached like the demo's. Variants, each under the same Poisson arrivals in a round:
 * - `fcfs (1 thread)`, `fcfs (C threads)`: one whole query at a time, earliest arrival first;
 * - `abacus`: abacus without the group barrier (`barrier: false`, a stream per service, each query
 *   launched when its stream frees; docs/scheduling-runtime.md), one thread per segment
 *   (`fixed:1`), the offline predictor corrected by the streams' measured ratios (that mode has no
 *   refinement), and the calibration fallback as that mode runs it (one query at a time with
 *   nothing beside it; `schedule/fallback.ts`, "Without the barrier"), each fallback launch on
 *   every core (`fallbackThreads: C`) as the strong baseline runs a query alone, with its
 *   interference trigger (one query at a time at one thread while the other processes leave about
 *   one core, at every core while they contend for all): the mode that served most on this CPU
 *   quiet (docs/adaptive.md);
 * - `abacus (predictions only)`: the same with the fallback on its predictions alone (no
 *   interference trigger);
 * - `abacus (barrier)`: the paper's group barrier, refined online, the `split:C` rule (a lone query
 *   every core, a pair ⌊C/2⌋ each) and the calibration fallback with its interference trigger, as
 *   `abacus demo --barrier` runs it (the demo defaults to the headline mode).
 *
 * Rounds are interleaved over levels and variants: round r runs level 0, then 1, 2, 4, each
 * level every variant in turn, so a change of the machine's own load hits all alike. Per level:
 * abacus ÷ the better fcfs (the fcfs variant with the higher goodput pooled over the level's
 * rounds), per round, with median and range; violation ratios pooled over the rounds; the share
 * of abacus's groups decided in the fallback; the 1-minute load averages seen.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import os from 'node:os';
import type { CliContext } from '../src/cli/context.ts';
import { pool, type Pooled } from '../src/cli/demo-setup.ts';
import { DEFAULT_MODELS, hostModels, measureSolo } from '../src/deployment/demo.ts';
import type { GroupRecord } from '../src/runtime/records.ts';
import { ensurePredictor, openEnv, profileThreadRules } from '../src/deployment/services.ts';
import { sampleLoad } from '../src/deployment/load-conditions.ts';
import { ModelRepository } from '../src/model/repository.ts';
import { runExperiment, type ExperimentResult, type ExperimentService } from '../src/runtime/experiment.ts';
import { median } from '../src/stats.ts';
import { formatThreadRule, type ThreadRule } from '../src/threads.ts';

/** Ratios over the rounds: their median (null unless every round had one), lowest and highest. */
export interface RatioSummary {
  readonly median: number | null;
  readonly min: number | null;
  readonly max: number | null;
}

/** `RatioSummary` of per-round ratios. */
function summarize(ratios: readonly (number | null)[]): RatioSummary {
  const known = ratios.filter((x): x is number => x !== null);
  return {
    median: known.length === ratios.length && known.length > 0 ? median(known) : null,
    min: known.length > 0 ? Math.min(...known) : null,
    max: known.length > 0 ? Math.max(...known) : null,
  };
}

export interface ContentionLevel {
  /** Busy-loop processes beside the server. */
  readonly busy: number;
  /** abacus ÷ the better fcfs, per round; null where that fcfs had no goodput. */
  readonly ratios: readonly (number | null)[];
  readonly ratioMedian: number | null;
  readonly ratioMin: number | null;
  readonly ratioMax: number | null;
  /** The fcfs variant with the higher pooled goodput at this level. */
  readonly baseline: string;
  readonly abacusViolation: number;
  readonly fcfsViolation: number;
  /** Share of abacus's groups decided in the calibration fallback (fraction). */
  readonly fallbackActiveFraction: number;
  /** Pooled per variant: goodput (queries/s), violation ratio, mean group size, predictor MAPE. */
  readonly variants: readonly VariantOutcome[];
  /** Every abacus variant ÷ the same better fcfs, per round summarized (median, range; null where that fcfs had no goodput in a round), by label. */
  readonly abacusRatios: Readonly<Record<string, RatioSummary>>;
  /** 1-minute load averages at the start and end of each round's runs at this level. */
  readonly loadAverages1m: readonly (readonly [number, number])[];
}

/** One variant at one level, pooled over the rounds: what it served and why it lost what it lost. */
export interface VariantOutcome {
  readonly label: string;
  readonly goodputQps: number;
  readonly violationRatio: number;
  /** Of the offered queries: dropped by the policy (qos_violation), and completed late (fractions). */
  readonly droppedShare: number;
  readonly lateShare: number;
  readonly meanGroupSize: number;
  readonly predictorMape: number;
  /** Share of groups decided in the calibration fallback. */
  readonly fallbackShare: number;
  /** Groups of ≥ 2 segments, and of them those measured > 1.25 × the latency they were decided with (fractions). */
  readonly overlappedShare: number;
  readonly overlappedOverrunShare: number;
  /** The same overrun share for groups of one segment. */
  readonly soloOverrunShare: number;
  /** Of the groups of one segment, those run at one intra-op thread (under `adapt:C`, the count measured fastest). */
  readonly soloOneThreadShare: number;
  /** Median measured ÷ decided latency over all predicted groups. */
  readonly measuredOverPredictedMedian: number;
}

export interface ContentionResult {
  readonly rateQps: number;
  readonly services: readonly { readonly service: string; readonly qosTargetMs: number; readonly soloP50Ms1Thread: number; readonly soloMeanMsAllCores: number }[];
  readonly cores: number;
  readonly rounds: number;
  readonly queries: number;
  readonly predictor: string;
  readonly levels: readonly ContentionLevel[];
}

/** Starts `n` busy loops; `stop` kills them (also on exit). */
function busyLoops(n: number): { stop(): void } {
  const children: ChildProcess[] = [];
  for (let i = 0; i < n; i++) children.push(spawn(process.execPath, ['-e', 'for(;;){}'], { stdio: 'ignore' }));
  const stop = (): void => {
    for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  };
  // killed with the bench: on its normal exit, and on Ctrl-C or SIGTERM (then the bench exits 130 / 143)
  const onSignal = (signal: NodeJS.Signals): void => {
    stop();
    process.exit(signal === 'SIGINT' ? 130 : 143);
  };
  process.once('exit', stop);
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  return {
    stop: () => {
      stop();
      process.removeListener('exit', stop);
      process.removeListener('SIGINT', onSignal);
      process.removeListener('SIGTERM', onSignal);
    },
  };
}

/** `VariantOutcome` of a variant's pooled runs. */
function outcome(label: string, p: Pooled): VariantOutcome {
  const groups = p.records.groups;
  const overran = (x: GroupRecord): boolean => x.predictedMs !== undefined && x.measuredMs > 1.25 * x.predictedMs;
  const share = (xs: readonly GroupRecord[], f: (x: GroupRecord) => boolean): number => (xs.length === 0 ? Number.NaN : xs.filter(f).length / xs.length);
  const overlapped = groups.filter((x) => x.segments.length > 1);
  const solo = groups.filter((x) => x.segments.length === 1);
  const ratios = groups.filter((x) => x.predictedMs !== undefined && x.predictedMs > 0 && Number.isFinite(x.measuredMs)).map((x) => x.measuredMs / x.predictedMs!);
  const o = p.overall;
  return {
    label,
    goodputQps: o.goodputQps,
    violationRatio: o.violationRatio,
    droppedShare: o.offered === 0 ? 0 : o.rejected / o.offered,
    lateShare: o.offered === 0 ? 0 : o.late / o.offered,
    meanGroupSize: p.meanGroupSize,
    predictorMape: p.predictorMape,
    fallbackShare: p.fallbackShare ?? Number.NaN,
    overlappedShare: groups.length === 0 ? Number.NaN : overlapped.length / groups.length,
    overlappedOverrunShare: share(overlapped, overran),
    soloOverrunShare: share(solo, overran),
    soloOneThreadShare: share(solo, (x) => x.segments[0]!.intraOpThreads === 1),
    measuredOverPredictedMedian: ratios.length === 0 ? Number.NaN : median(ratios),
  };
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

interface VariantSpec {
  readonly label: string;
  readonly policy: 'fcfs' | 'abacus';
  readonly params: Readonly<Record<string, unknown>>;
}

export async function benchContention(opts: { log?: (s: string) => void; busy?: readonly number[]; rounds?: number; queries?: number; load?: number; control?: boolean } = {}): Promise<ContentionResult> {
  const log = opts.log ?? (() => undefined);
  const levels = opts.busy ?? [0, 1, 2, 4];
  const rounds = opts.rounds ?? 3;
  const queries = opts.queries ?? 300;
  const load = opts.load ?? 1;
  const cores = os.availableParallelism();
  const ctx: CliContext = { out: log, err: log, cacheOptions: () => ({}) };
  const repo = new ModelRepository();
  const hosted = await hostModels(ctx, repo, DEFAULT_MODELS, 1);
  const rules: ThreadRule[] = profileThreadRules([{ kind: 'fixed', threads: 1 }, { kind: 'split', cores }], cores);
  const { predictor, source } = await ensurePredictor(ctx, repo, hosted, { samples: 800, threads: 1, threadRules: rules });
  const env = await openEnv(hosted, predictor, { virtual: false, seed: 1, threads: 1, threadRules: rules });
  const all = `split:${cores}`;
  const variants: VariantSpec[] = [
    { label: 'fcfs (1 thread)', policy: 'fcfs', params: { threads: 'fixed:1' } },
    { label: `fcfs (${cores} threads)`, policy: 'fcfs', params: { threads: all } },
    { label: 'abacus', policy: 'abacus', params: { barrier: false, threads: 'fixed:1', fallback: true, interference: true, fallbackThreads: cores } },
    { label: 'abacus (predictions only)', policy: 'abacus', params: { barrier: false, threads: 'fixed:1', fallback: true, fallbackThreads: cores } },
    { label: 'abacus (barrier)', policy: 'abacus', params: { threads: all, refine: true, fallback: true, interference: true } },
  ];
  // `control`: the headline abacus once more, as a variant of its own — two runs of one controller
  // under the same arrivals, whose ratios differ only by the machine: the benchmark's resolution
  if (opts.control === true) variants.push({ ...variants[2]!, label: 'abacus (control)' });
  const fcfsLabels = variants.filter((v) => v.policy === 'fcfs').map((v) => v.label);
  try {
    const opened = await env.open();
    let services: ExperimentService[];
    let info: ContentionResult['services'];
    let rateQps: number;
    try {
      log(`contention: solo latencies on the quiet machine (load average ${sampleLoad().loadAverage1m}) …\n`);
      const one = await measureSolo(opened.device, hosted.services);
      const wide = await measureSolo(opened.device, hosted.services, cores);
      services = hosted.services.map((s, i) => ({ ...s, qosTargetMs: Math.ceil(4 * one[i]!.p50Ms) }));
      const meanOneMs = one.reduce((a, s) => a + s.meanMs, 0) / one.length;
      rateQps = Math.round(load * (1000 / meanOneMs) * 10) / 10;
      info = services.map((s, i) => ({ service: s.name, qosTargetMs: s.qosTargetMs, soloP50Ms1Thread: one[i]!.p50Ms, soloMeanMsAllCores: wide[i]!.meanMs }));
      log(`contention: ${info.map((s) => `${s.service} QoS ${s.qosTargetMs} ms`).join(', ')}; rate ${rateQps} queries/s (${load} × the 1-thread fcfs capacity; the ${cores}-thread one is ${(1000 / (info.reduce((a, x) => a + x.soloMeanMsAllCores, 0) / info.length)).toFixed(1)})\n`);
    } finally {
      await opened.release();
    }
    const results = new Map<string, ExperimentResult[]>(); // `${busy}/${label}`
    const loads = new Map<number, [number, number][]>();
    for (let r = 0; r < rounds; r++) {
      for (const busy of levels) {
        const loops = busyLoops(busy);
        try {
          if (busy > 0) await sleep(1000);
          const start = sampleLoad().loadAverage1m;
          for (const v of variants) {
            const res = await runExperiment(env, { services, policy: v.policy, policyParams: v.params, rateQps, queries, seed: 1 + r, keepRecords: true });
            const key = `${busy}/${v.label}`;
            results.set(key, [...(results.get(key) ?? []), res]);
            log(`contention: round ${r + 1}, ${busy} busy, ${v.label.padEnd(18)} goodput ${res.overall.goodputQps.toFixed(1)} q/s, violations ${(res.overall.violationRatio * 100).toFixed(1)} %, group size ${res.meanGroupSize.toFixed(2)}, fallback ${(res.fallbackShare * 100).toFixed(0)} %\n`);
          }
          const end = sampleLoad().loadAverage1m;
          loads.set(busy, [...(loads.get(busy) ?? []), [start, end]]);
        } finally {
          loops.stop();
        }
      }
    }
    const out: ContentionLevel[] = levels.map((busy) => {
      const pooled = variants.map((v) => {
        const rs = results.get(`${busy}/${v.label}`)!;
        const p = pool(v.label, rs);
        return { ...outcome(v.label, p), rounds: rs };
      });
      const byLabel = (l: string): (typeof pooled)[number] => pooled.find((p) => p.label === l)!;
      const baseline = fcfsLabels.reduce((b, l) => (byLabel(l).goodputQps > byLabel(b).goodputQps ? l : b), fcfsLabels[0]!);
      const abacus = byLabel('abacus');
      const ratiosOf = (label: string): (number | null)[] =>
        byLabel(label).rounds.map((a, i) => {
          const f = byLabel(baseline).rounds[i]!.overall.goodputQps;
          return f > 0 ? a.overall.goodputQps / f : null;
        });
      const ratios = ratiosOf('abacus');
      const abacusRatios = Object.fromEntries(variants.filter((v) => v.policy === 'abacus').map((v) => [v.label, v.label === 'abacus' ? summarize(ratios) : summarize(ratiosOf(v.label))]));
      const summary = abacusRatios['abacus']!;
      return {
        busy,
        ratios,
        ratioMedian: summary.median,
        ratioMin: summary.min,
        ratioMax: summary.max,
        baseline,
        abacusViolation: abacus.violationRatio,
        fcfsViolation: byLabel(baseline).violationRatio,
        fallbackActiveFraction: abacus.fallbackShare,
        variants: pooled.map(({ rounds: _r, ...rest }) => rest),
        abacusRatios,
        loadAverages1m: loads.get(busy) ?? [],
      };
    });
    return { rateQps, services: info, cores, rounds, queries, predictor: `${source} (${rules.map(formatThreadRule).join(', ')})`, levels: out };
  } finally {
    await env.close();
  }
}
