/**
 * What the demo command and the contention benchmark share on the CLI side (docs/demo.md,
 * docs/adaptive.md): the help text of the QoS and rate rules, pooling a variant's runs over
 * rounds for the tables and the report, and the progress ticker. Hosting the models, measuring
 * solo latencies and running the rounds are the deployment's (`deployment/demo.ts`).
 */
import cliProgress from 'cli-progress';
import type { ExperimentResult } from '../runtime/experiment.ts';
import type { GroupRecord, QueryRecord } from '../runtime/records.ts';
import { GroupStatsCollector, servingStats } from '../runtime/stats.ts';
import type { RunSummary } from './run-json.ts';
import type { CliContext } from './context.ts';

export const QOS_RULE = (factor: number): string => `QoS target = ${factor} × the service's solo p50 latency over its query mix, rounded up to 1 ms`;
/**
 * The default load is the FCFS capacity itself (`--load 1`): one query at a time just keeps up
 * on average, so Poisson bursts queue and FCFS misses targets, while overlap has spare cores to
 * use. Measured here: at 0.9 × capacity FCFS still meets ~90 % of its queries, which caps
 * any goodput gain near 1.1; at 1.0 the gap is what the demo is about.
 */
export const RATE_RULE = (load: number): string =>
  `rate = ${load} × the FCFS capacity, where capacity = 1 / mean solo latency of a query over the mix (services share the rate equally)`;

/** A variant's runs pooled over the rounds (what the tables, plots and `runs` show). */
export type Pooled = RunSummary & { readonly records: { readonly queries: readonly QueryRecord[]; readonly groups: readonly GroupRecord[] } };

export const threadsLabel = (n: number): string => `${n} thread${n === 1 ? '' : 's'}`;

/**
 * A variant's runs pooled over the rounds: every query and group of every round; rates over
 * the summed spans of the runs (each service's too, as `runExperiment` does per run).
 */
export function pool(label: string, results: readonly ExperimentResult[]): Pooled {
  const queries = results.flatMap((r) => r.records?.queries ?? []);
  const groups = results.flatMap((r) => r.records?.groups ?? []);
  const spanMs = results.reduce((a, r) => a + r.overall.spanMs, 0);
  const g = new GroupStatsCollector();
  for (const x of groups) g.add(x);
  const names = results[0]?.services.map((s) => s.service) ?? [];
  return {
    policy: label,
    rateQps: results[0]?.rateQps ?? 0,
    overall: servingStats(queries, spanMs),
    services: names.map((name) => ({ service: name, ...servingStats(queries.filter((q) => q.service === name), spanMs) })),
    meanGroupSize: g.meanGroupSize,
    meanBatch: g.meanSegmentBatch,
    predictorMape: g.predictorMape,
    fallbackShare: g.fallbackShare,
    records: { queries, groups },
  };
}

/**
 * Progress while a run's load is offered: a bar over the expected duration (queries / rate)
 * on a terminal, else a line every ~25 %. The backlog drains after the last arrival.
 */
export function startTicker(ctx: CliContext, label: string, expectedS: number): { stop(): void } {
  const t0 = performance.now();
  const total = Math.max(1, Math.round(expectedS));
  const elapsed = (): number => Math.min(total, Math.round((performance.now() - t0) / 1000));
  if (process.stderr.isTTY) {
    const bar = new cliProgress.SingleBar({ format: `      ${label} [{bar}] {value}/{total} s of load`, fps: 4, hideCursor: true, stream: process.stderr }, cliProgress.Presets.shades_classic);
    bar.start(total, 0);
    const timer = setInterval(() => bar.update(elapsed()), 500);
    timer.unref();
    return {
      stop: () => {
        clearInterval(timer);
        bar.update(total);
        bar.stop();
      },
    };
  }
  let quarter = 1;
  const timer = setInterval(() => {
    const e = (performance.now() - t0) / 1000;
    if (e >= (quarter * expectedS) / 4 && quarter < 4) {
      ctx.err(`      ${label}: ${Math.round(e)} s of ~${Math.round(expectedS)} s of load\n`);
      quarter++;
    }
  }, 500);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}
