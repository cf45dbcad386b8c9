/**
 * reproduce/report.ts: the report has one section per stored experiment, each with its figure
 * and the paper's number beside ours, says what is simulated and what is measured, survives
 * values that JSON stored as null (NaN), and the headline helpers compute by hand-checked rules.
 */
import { describe, expect, it } from 'vitest';
import type { ClusterMinute, ClusterResult } from '../src/reproduce/cluster.ts';
import type { ColocationRow } from '../src/reproduce/colocation.ts';
import { colocationHeadline, renderReproduceReport, throughputHeadline, type ReproduceResults } from '../src/reproduce/report.ts';

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
