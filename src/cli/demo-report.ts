/**
 * The demo's printed tables and its report.html (docs/demo.md).
 */
import os from 'node:os';
import { renderReportHtml, type ReportTable } from '../report/html.ts';
import { groupedBarSpec, latencyCdfSpec, renderSvg, type BarDatum } from '../report/plots.ts';
import { metQos } from '../runtime/records.ts';
import type { ExperimentService } from '../runtime/experiment.ts';
import type { Hosted } from '../deployment/services.ts';
import { BUSY_LOAD_PER_CORE, MAX_RELATIVE_SPREAD, NO_OVERLAP_RATIO } from './demo-verdict.ts';
import { BATCH_SIZES, DEMO_MODELS, type DemoVariant, type Solo } from '../deployment/demo.ts';
import { QOS_RULE, RATE_RULE, threadsLabel, type Pooled } from './demo-setup.ts';
import type { DemoJson, DemoOptions, DemoRound } from './demo-types.ts';

/** ", profiled under load average X on N cores (…)" for the report, or "" when unknown. */
export function predictorConditionsText(p: DemoJson['conditions']['predictor']): string {
  const when = p.profiledLoadAverage1m === undefined ? ', profiling load not recorded' : `, profiled at load average ${p.profiledLoadAverage1m} on ${p.profiledCores} cores (${p.profiledUnderLoad === true ? 'under load: profiled again on a quiet machine at a later run' : 'quiet'})`;
  return `${when}${p.note === undefined ? '' : `; ${p.note}`}`;
}

export const fmt = (x: number, digits = 1): string => (Number.isFinite(x) ? x.toFixed(digits) : '–');

/** The printed (and reported) tables: per policy variant (pooled over the rounds), per service and variant, per round. */
export function resultTables(results: readonly Pooled[], services: readonly ExperimentService[], variants: readonly DemoVariant[], rounds: readonly DemoRound[]): { overall: ReportTable; perService: ReportTable; rounds: ReportTable } {
  const overall: ReportTable = {
    header: ['policy', 'threads / executor', 'p50 ms', 'p99 ms', 'violations %', 'goodput q/s', 'throughput q/s', 'group size', 'pred. MAPE %'],
    rows: results.map((r, i) => [
      r.policy,
      String(variants[i]!.threads),
      fmt(r.overall.p50Ms, 1),
      fmt(r.overall.p99Ms, 1),
      fmt(r.overall.violationRatio * 100, 2),
      fmt(r.overall.goodputQps),
      fmt(r.overall.throughputQps),
      fmt(r.meanGroupSize, 2),
      fmt(r.predictorMape * 100),
    ]),
  };
  const perService: ReportTable = {
    header: ['service', 'QoS ms', 'policy', 'offered', 'late', 'dropped', 'p50 ms', 'p99 ms', 'violations %', 'goodput q/s'],
    rows: services.flatMap((s) =>
      results.map((r) => {
        const st = r.services.find((x) => x.service === s.name)!;
        return [s.name, String(s.qosTargetMs), r.policy, String(st.offered), String(st.late), String(st.rejected), fmt(st.p50Ms, 1), fmt(st.p99Ms, 1), fmt(st.violationRatio * 100, 2), fmt(st.goodputQps)];
      }),
    ),
  };
  const perRound: ReportTable = {
    header: ['round', 'seed', 'load avg start', 'load avg end', 'overlap ratio', ...variants.map((v) => `${v.label} goodput q/s`), 'abacus ÷ baseline'],
    rows: rounds.map((r) => [
      String(r.round),
      String(r.seed),
      r.loadAverage1mStart.toFixed(2),
      r.loadAverage1mEnd.toFixed(2),
      r.overlapRatio.toFixed(2),
      ...variants.map((v) => fmt(r.runs.find((x) => x.label === v.label)!.goodputQps)),
      r.abacusOverFcfsGoodput === null ? '–' : r.abacusOverFcfsGoodput.toFixed(2),
    ]),
  };
  return { overall, perService, rounds: perRound };
}

export async function buildReport(input: {
  results: readonly Pooled[];
  services: readonly ExperimentService[];
  solos: readonly Solo[];
  rateQps: number;
  opts: DemoOptions;
  machine: DemoJson['machine'];
  source: string;
  tables: { overall: ReportTable; perService: ReportTable; rounds: ReportTable };
  headline: readonly string[];
  models: Hosted;
  json: DemoJson;
}): Promise<string> {
  const { results, services, solos, opts, machine } = input;
  const order = results.map((r) => r.policy);
  const cdfs: { svg: string; caption: string }[] = [];
  const cdfData: Record<string, Record<string, { offered: number; latenciesMs: number[] }>> = {};
  for (const s of services) {
    const series = results.map((r) => {
      const qs = r.records.queries.filter((q) => q.service === s.name);
      const latenciesMs = qs.filter((q) => q.outcome === 'completed' && q.endMs !== undefined).map((q) => q.endMs! - q.arrivalMs);
      (cdfData[s.name] ??= {})[r.policy] = { offered: qs.length, latenciesMs: latenciesMs.map((x) => Math.round(x * 1000) / 1000) };
      return { label: r.policy, latenciesMs, offered: qs.length, onTime: qs.filter(metQos).length };
    });
    const p99s = results.map((r) => r.services.find((x) => x.service === s.name)?.p99Ms ?? 0).filter(Number.isFinite);
    const xMaxMs = Math.max(1.5 * s.qosTargetMs, Math.min(3 * s.qosTargetMs, Math.max(0, ...p99s) * 1.1));
    cdfs.push({
      svg: await renderSvg(latencyCdfSpec({ title: `${s.name}: latency CDF`, series, qosMs: s.qosTargetMs, xMaxMs, seriesOrder: order })),
      caption: `${s.name}: ${series.map((x) => `${x.label} ${x.onTime}/${x.offered} on time`).join(', ')}. A curve ends below 1 by the share of queries dropped.`,
    });
  }
  const groups = [...services.map((s) => s.name), 'all'];
  const violations: BarDatum[] = results.flatMap((r) => groups.map((g) => ({ group: g, series: r.policy, value: 100 * (g === 'all' ? r.overall.violationRatio : r.services.find((x) => x.service === g)!.violationRatio) })));
  const goodput: BarDatum[] = results.flatMap((r) => groups.map((g) => ({ group: g, series: r.policy, value: g === 'all' ? r.overall.goodputQps : r.services.find((x) => x.service === g)!.goodputQps })));
  const bars = [
    { svg: await renderSvg(groupedBarSpec({ title: 'QoS violations (late + dropped) ÷ offered', yTitle: 'violation ratio (%)', data: violations, seriesOrder: order })), caption: 'Lower is better.' },
    { svg: await renderSvg(groupedBarSpec({ title: 'Goodput: queries done within QoS per second', yTitle: 'goodput (queries/s)', data: goodput, seriesOrder: order })), caption: 'Higher is better.' },
  ];
  const soloTable: ReportTable = {
    header: ['service', 'model', 'operators', 'batch', 'seq len', 'solo median ms'],
    rows: services.flatMap((s, i) => solos[i]!.byShape.map((b) => [s.name, s.spec.name, String(s.spec.operators.length), String(b.batch), b.seqLen > 0 ? String(b.seqLen) : '–', fmt(b.medianMs, 2)])),
  };
  const settings: [string, string][] = [
    ['date', new Date().toISOString().replace('T', ' ').slice(0, 16) + ' UTC'],
    ['machine', `${machine.cpus} CPU cores (${machine.cpuModel}), ${(os.totalmem() / 2 ** 30).toFixed(0)} GiB memory, ${os.platform()} ${os.arch()}`],
    ['software', `onnxruntime-node ${machine.onnxruntime} (CPU execution provider), Node ${machine.node}`],
    ['load average', `${input.json.rounds.map((r) => `round ${r.round}: ${r.loadAverage1mStart.toFixed(2)} → ${r.loadAverage1mEnd.toFixed(2)}`).join('; ')} (1 min, at each round's start and end; the demo itself keeps about one thread per core busy; above ${BUSY_LOAD_PER_CORE} per core the result is not meaningful)`],
    ['overlap gain', `one batch-1 query per service as one group took ${input.json.rounds.map((r) => r.overlapRatio.toFixed(2)).join(', ')} × the time of the same queries one after the other, per round (1.00 = no gain; ≥ ${NO_OVERLAP_RATIO} counts as none)`],
    ['executors', `one process per service on one device; a segment's intra-op threads are decided per group: fcfs (${threadsLabel(machine.threadsPerExecutor)}) runs every query at ${threadsLabel(machine.threadsPerExecutor)}${machine.allCoresThreads !== machine.threadsPerExecutor ? `, fcfs (${threadsLabel(machine.allCoresThreads)}) gives the running query every core (the strong one-at-a-time baseline)` : ''}, ${input.json.abacusBarrier ? `abacus gives a lone query every core and splits them among an overlapped group (thread rule split:${machine.allCoresThreads}, docs/threads.md)` : `abacus runs each service's queries at ${threadsLabel(machine.threadsPerExecutor)} on its own stream, overlapping the services, and a query every core when its fallback runs one at a time (one thread while other processes leave about one core; docs/threads.md, docs/interference.md)`}`],
    ['rounds', `${input.json.rounds.length} rounds; in each, every policy serves the same arrivals (round k: seed ${opts.seed} + k − 1), one after the other in the order of the tables; the ratio is the median over the rounds of abacus ÷ the better fcfs (${input.json.baseline}: higher goodput over all rounds) in the same round`],
    ['verdict', input.json.meaningful ? `meaningful: every round's load average ≤ ${BUSY_LOAD_PER_CORE} per core, spread ≤ ${MAX_RELATIVE_SPREAD * 100} % of the median, overlap gain present` : `not meaningful: ${input.json.reasons.join('; ')}`],
    ['models', services.map((s) => `${s.name}: ${DEMO_MODELS[s.spec.name]?.about ?? s.spec.name}, ${s.spec.operators.length} operators`).join('; ')],
    ['query mix', `batch sizes ${BATCH_SIZES.join(', ')}${services.some((s) => s.seqLens !== undefined) ? `; sequence lengths ${[...new Set(services.flatMap((s) => s.seqLens ?? []))].join(', ')}` : ''}, drawn uniformly per query; services share the rate equally`],
    ['QoS targets', `${services.map((s, i) => `${s.name} ${s.qosTargetMs} ms (solo p50 ${solos[i]!.p50Ms.toFixed(1)} ms)`).join(', ')} — ${opts.qosMs === undefined ? QOS_RULE(opts.qosFactor) : 'given with --qos-ms'}`],
    ['load', `${input.rateQps} queries/s, Poisson, ${opts.queries} queries per policy per round — ${opts.rate === undefined ? RATE_RULE(opts.load) : 'given with --rate'}`],
    [
      'policies',
      `fcfs: one query at a time in arrival order; abacus: ${
        input.json.abacusBarrier
          ? `operator groups chosen with the predictor behind the group barrier (ways 2, slack 5 ms)${opts.refine ? ', refined online from the measured group latencies, with the guard' : ', offline predictor only (--no-refine)'}`
          : 'without the group barrier (--barrier: with it): each service on its own stream, each launch predicted against the segments running, the estimates corrected by their measured ratios'
      }, and its calibration fallback: one query at a time while its measured launches overrun their predictions or other processes crowd the cores (${(input.json.abacusFallbackShare * 100).toFixed(0)} % of its launches here; docs/adaptive.md, docs/interference.md); both drop a query that can no longer meet its QoS target`,
    ],
    ['predictor', `MLP trained on ${opts.profileSamples} operator groups profiled on this device with the thread rules fixed:${machine.threadsPerExecutor} and split:${machine.allCoresThreads} (one predictor for every variant), cached: ${input.source}${predictorConditionsText(input.json.conditions.predictor)}`],
  ];
  return renderReportHtml({
    title: 'Abacus-TS demo: fcfs vs abacus on this CPU',
    intro: [
      `Measured on this machine's CPU (${machine.cpus} cores) with onnxruntime-node ${machine.onnxruntime}: every latency below is a real execution of the models, not a simulation. The models carry seeded random weights (their compute is that of the real architectures; the outputs are not meaningful predictions).`,
      'The policies ran in interleaved rounds: in each round every policy served the same Poisson arrivals (one seed per round), one after the other, so a change in the machine\'s load hits them alike; the tables pool every round, the rounds table shows each. Numbers vary with what else the machine is doing: the headline says when it was too busy for them to mean anything.',
    ],
    headline: input.headline.join(' '),
    settings,
    sections: [
      { title: 'Results', tables: [{ caption: 'Per policy', table: input.tables.overall }, { caption: 'Per service', table: input.tables.perService }, { caption: 'Per round', table: input.tables.rounds }] },
      { title: 'Latency CDFs', paragraphs: ['Fraction of the offered queries completed within a latency; the dashed line is the QoS target.'], figures: cdfs },
      { title: 'Violations and goodput', figures: bars },
      { title: 'Solo latencies', paragraphs: ['Each query shape alone on the device (median of the timed runs after a warm-up); the QoS targets and the rate come from these.'], tables: [{ table: soloTable }] },
    ],
    data: { ...input.json, latencies: cdfData },
  });
}
