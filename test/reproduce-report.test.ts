/**
 * reproduce/report.ts: the report has one section per stored experiment, each with its figure
 * and the paper's number beside ours, says what is simulated and what is measured, survives
 * values that JSON stored as null (NaN), and the headline helpers compute by hand-checked rules.
 */
import { describe, expect, it } from 'vitest';
import type { ClusterMinute, ClusterResult } from '../src/reproduce/cluster.ts';
import type { ColocationRow } from '../src/reproduce/colocation.ts';
import type { AdaptiveJson, DriftRunJson, RejectionCaseJson } from '../src/reproduce/adaptive.ts';
import { colocationHeadline, p99CaptionOf, renderReproduceReport, throughputHeadline, type ReproduceResults } from '../src/reproduce/report.ts';

function row(set: string, policy: string, violationRatio: number, p99OverQos: number, peakGoodputQps?: number): ColocationRow {
  return { set, policy, qosMs: 100, rateQps: 50, violationRatio, p99Ms: p99OverQos * 100, p99OverQos, goodputQps: 50, meanGroupSize: 1.2, predictorMape: 0.05, ...(peakGoodputQps === undefined ? {} : { peakGoodputQps }) };
}

const pairs: ColocationRow[] = [
  row('resnet50+vgg16', 'abacus', 0.0, 0.8, 130),
  row('resnet50+vgg16', 'fcfs', 0.02, 1.1, 100),
  row('resnet50+vgg16', 'sjf', 0.03, 1.2, 90),
  row('resnet50+vgg16', 'edf', 0.02, 1.1, 100),
  row('vgg16+bert', 'abacus', 0.01, 0.9, 120),
  row('vgg16+bert', 'fcfs', 0.02, 1.0, 80),
  row('vgg16+bert', 'sjf', 0.04, 1.3, 70),
  row('vgg16+bert', 'edf', 0.02, 1.0, 80),
];

function cluster(policy: 'abacus' | 'clockwork', goodput: number): ClusterResult {
  const minutes: ClusterMinute[] = [0, 1, 2].map((minute) => ({ minute, traceQps: 9000, offered: 100, goodputQps: goodput, throughputQps: goodput, p99Ms: minute === 2 ? NaN : 90, meanMs: 40, violationRatio: 0.1 }));
  return { policy, nodes: 16, minutes, overall: { offered: 300, onTime: 270, completed: 270, goodputQps: goodput, p99Ms: 90, meanMs: 40, violationRatio: 0.1 } };
}

const run = { device: 'sim:a100', quick: true, queries: 300, seed: 1, wallSeconds: 1.5 };
const results: ReproduceResults = {
  qos: { ...run, policies: ['abacus', 'fcfs', 'sjf', 'edf'], rows: pairs },
  throughput: { ...run, policies: ['abacus', 'fcfs', 'sjf', 'edf'], rows: pairs },
  'beyond-pair': { ...run, policies: ['abacus', 'fcfs', 'sjf', 'edf'], rows: pairs.map((r) => ({ ...r, set: `resnet101+${r.set}` })) },
  mig: {
    ...run,
    pairs: ['resnet50+vgg16'],
    policies: ['abacus', 'fcfs'],
    rows: ['1g', 'whole'].flatMap((slice) => [
      { ...row('resnet50+vgg16', 'abacus', 0, 0.9, 60), device: `sim:a100:${slice}`, slice, perGpuPeakQps: 420 },
      { ...row('resnet50+vgg16', 'fcfs', 0, 0.9, 40), device: `sim:a100:${slice}`, slice, perGpuPeakQps: 280 },
    ]),
  },
  cluster: {
    ...run,
    settings: { nodes: 16, services: ['resnet101', 'resnet152', 'vgg19', 'bert'], qosMs: 100, minutes: 3, minuteMs: 500, scale: 0.2, nodePeakQps: 120, traceMeanQps: 9090 },
    abacus: cluster('abacus', 8600),
    clockwork: cluster('clockwork', 7300),
    summary: { throughputRatioVsClockwork: 8600 / 7300, abacusGoodputQps: 8600, clockworkGoodputQps: 7300, abacusPeakMinuteQps: 8600, clockworkPeakMinuteQps: 7300, abacusMinutesOverQos: 0, clockworkMinutesOverQos: 0 },
  },
  search: { ...run, decisions: 100, models: ['resnet101', 'bert'], slackMs: 0, rows: [1, 2, 16].map((ways) => ({ ways, decisions: 100, medianUs: 10 + ways, p99Us: 30, meanUs: 12, predictorCalls: 3, groupsScored: 8, searchRounds: 2 })) },
};

describe('reproduction report', () => {
  it('has a section with a figure and the paper number for every experiment', async () => {
    // stored results come back from JSON: NaN as null
    const stored = JSON.parse(JSON.stringify(results)) as ReproduceResults;
    const html = await renderReproduceReport(stored);
    for (const title of ['§7.2 Ensuring QoS', '§7.3 Improving peak throughput', '§7.4 Beyond pair-wise', '§7.5 Integrating with MIG', '§7.6 A 16-node cluster', '§7.7 Decision time']) expect(html).toContain(title);
    expect(html.match(/<svg/g)?.length).toBeGreaterThanOrEqual(10);
    for (const paper of ['−51.3 %', '1.298', '8.6k vs 7.3k', '0.07–0.09 ms', 'Figs. 18, 19']) expect(html).toContain(paper);
    expect(html).toContain('is SIMULATED');
    expect(html).toContain('overlap-all');
    expect(html).toContain('--quick');
    // the cluster's scaling is stated, with the numbers used
    expect(html).toContain('multiplied by 0.2000');
    expect(html).toContain('×1.178');
    // the plotted series are in the figures
    expect(html).toContain('series: clockwork-style');
    expect(html).toContain('series: abacus');
  });

  it('renders only the experiments present', async () => {
    const html = await renderReproduceReport({ search: results.search! });
    expect(html).toContain('§7.7');
    expect(html).not.toContain('§7.2 Ensuring QoS');
  });
});

/** The qos chart captions and the violation chart of a report with `rows` as its §7.2 results. */
async function qosFigures(rows: readonly ColocationRow[]): Promise<{ html: string; captions: string[]; svgs: string[] }> {
  const html = await renderReproduceReport({ qos: { ...run, policies: ['abacus', 'fcfs', 'sjf', 'edf'], rows } });
  return { html, captions: [...html.matchAll(/<figcaption>([\s\S]*?)<\/figcaption>/g)].map((m) => m[1]!), svgs: html.match(/<svg[\s\S]*?<\/svg>/g) ?? [] };
}

describe('§7.2 figures follow the data', () => {
  it('Fig. 13 caption: which policies exceed the target, and where, as the rows say', async () => {
    // fcfs exceeds 1 in both pairs (1.1, 1.0 is not above), sjf in both (1.2, 1.3), edf in one (1.1)
    expect(p99CaptionOf(pairs, ['abacus', 'fcfs', 'sjf', 'edf'])).toBe(
      'Paper Fig. 13: Abacus stays below 1 in every pair, FCFS/SJF/EDF exceed it in several. Here: abacus stays below 1 in every pair (worst 0.90, V16+BERT); fcfs exceeds 1 in 1 of 2 pairs (worst 1.10, R50+V16); sjf exceeds 1 in 2 of 2 pairs (worst 1.30, V16+BERT); edf exceeds 1 in 1 of 2 pairs (worst 1.10, R50+V16).',
    );
    const calm = pairs.map((r) => ({ ...r, p99OverQos: r.p99OverQos / 2 }));
    const { captions } = await qosFigures(calm);
    expect(captions[0]).toContain('fcfs stays below 1 in every pair (worst 0.55, R50+V16)');
    expect(captions[0]).toContain('At this load no other policy exceeds the target either');
    expect(captions[0]).not.toMatch(/exceeds 1 in/);
  });

  it('Fig. 14: only the pairs with violations, fractions on a percent axis with the values on the bars', async () => {
    const rows = [...pairs.map((r) => (r.set === 'vgg16+bert' ? { ...r, violationRatio: 0 } : r)), row('resnet101+bert', 'abacus', 0, 0.5), row('resnet101+bert', 'fcfs', 0, 0.6)];
    const { captions, svgs } = await qosFigures(rows);
    expect(captions[1]).toBe('Paper Fig. 14: violations −51.3 % on average vs the best baseline. Shown: the 1 of 3 pairs where some policy violated QoS; in the other 2 no policy did.');
    const chart = svgs[1]!;
    expect(chart).toContain('violations (% of offered queries)');
    // fcfs 0.02, sjf 0.03, edf 0.02 in R50+V16: labelled in percent, on a percent axis
    for (const text of ['>2%<', '>3%<', '>0%<']) expect(chart).toContain(text);
    expect(chart).toContain('>R50+V16<');
    expect(chart).not.toContain('>V16+BERT<');
    expect(chart.match(/aria-roledescription="bar"/g) ?? []).toHaveLength(4);
  });

  it('no violations at all: no empty chart, a sentence saying so', async () => {
    const { html, svgs } = await qosFigures(pairs.map((r) => ({ ...r, violationRatio: 0 })));
    expect(svgs).toHaveLength(1);
    expect(html).toContain('No policy violated QoS in any pair, so the violation chart (paper Fig. 14) has nothing to show and is left out.');
  });
});

describe('report text', () => {
  it('speaks of the project and the paper, never of issue numbers (every section present)', async () => {
    const drift: DriftRunJson = { mapeAfterRecovery: 0.03, groupsToRecover: 800, violationRatioAfterRecovery: 0.005, violationRatioBeforeChange: 0.002, violationRatioAfterChange: 0.01, mapeOverall: 0.05, groups: 5000, groupsAfterChange: 2500 };
    const rejection: RejectionCaseJson = { deviceId: 'sim:a100', longPredictedMs: 30, longMeasuredMs: 31, shortArrivalMs: 1, shortQosTargetMs: 20, shortSoloMs: 5, hopelessAtMs: 1, answeredAtMs: 1, outcome: 'qos_violation', lateMs: 0, lateMsDecidingWhenIdle: 29 } as RejectionCaseJson;
    const adaptive: AdaptiveJson = { ...drift, withoutRefinement: { ...drift, groupsToRecover: null }, rejectionLateMs: 0, rejection: { atArrival: rejection, duringOverrun: rejection }, deviceId: 'sim:a100:drift-1.5x@1000ms', rateQps: 100, peakBeforeQps: 150, literalRateQps: 120, literal: { withRefinement: drift, withoutRefinement: drift }, changeAtMs: 1000, recoveredAtMs: 2000, queries: 4000 };
    const html = await renderReproduceReport({
      ...(JSON.parse(JSON.stringify(results)) as ReproduceResults),
      batching: { ...run, devices: ['sim:a100'], variants: ['abacus', 'triton'], skipped: [], minSpanQos: 10, samples: 100, holdoutSamples: 10, rows: [], solo: [], holdout: [] },
      adaptive: { ...run, adaptive },
    });
    expect(html).toContain('Dynamic batching of single-sample requests');
    expect(html).toContain('Adaptive runtime');
    expect(html).not.toMatch(/\bissues?\s*#?\d/i);
  });

  it('§7.7: the search-ways axis starts at the fewest ways measured, not at 0', async () => {
    const html = await renderReproduceReport({ search: results.search! });
    const svg = html.match(/<svg[\s\S]*?<\/svg>/)![0];
    const xLabels = [...svg.matchAll(/role-axis-label[\s\S]*?<\/g><\/g>/g)].map((m) => [...m[0].matchAll(/>([^<]+)<\/text>/g)].map((t) => t[1]!))[0]!;
    expect(xLabels[0]).toBe('1');
    expect(xLabels).not.toContain('0');
  });
});

describe('headlines', () => {
  it('qos: worst Abacus ratios; summed violations vs the best baseline per set', () => {
    // abacus 0 + 0.01; best baselines 0.02 + 0.02 → 1 − 0.01/0.04 = 0.75
    const h = colocationHeadline(pairs);
    expect(h).toEqual({ abacusMaxViolationRatio: 0.01, abacusMaxP99OverQos: 0.9, violationReductionVsBest: expect.closeTo(0.75, 12) as number, sets: 2 });
  });

  it('throughput: mean and min of abacus ÷ best baseline', () => {
    // 130/100 = 1.3, 120/80 = 1.5
    expect(throughputHeadline(pairs)).toEqual({ meanPeakRatioVsBest: expect.closeTo(1.4, 12) as number, minPeakRatioVsBest: expect.closeTo(1.3, 12) as number, sets: 2 });
  });
});
