/**
 * The simulated H200 against the measured one (`src/device/sim/reference/h200-measured/`): the
 * engine terms added for it computed by hand (device-side launch gaps, kernel floors,
 * element-wise streaming, weighted SM sharing), the contention properties with them, the
 * calibration goals with the shipped constants, the random-overlap comparison, the per-profile
 * constants and `abacus simulate calibrate --device sim:h200:graph`.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { buildProgram, type CliContext } from '../src/cli/main.ts';
import { VirtualClock } from '../src/clock/index.ts';
import type { GroupResult, Segment, SegmentResult } from '../src/device/device.ts';
import {
  A100_SXM4_40GB,
  CALIBRATION_GOALS,
  DEFAULT_SIM_CONSTANTS,
  GRAPH_FIT_PARAMETERS,
  H100_SXM5_80GB,
  H200_GRAPH_SIM_CONSTANTS,
  H200_REFERENCE_PATH,
  H200_SXM_141GB,
  RANDOM_OVERLAP_TOLERANCE,
  Rng,
  SimDevice,
  calibrate,
  compareRandomOverlap,
  fitConstants,
  fitObjective,
  loadRandomOverlap,
  loadReference,
  parseRandomOverlapCsv,
  referenceModels,
  referenceSeqLens,
  scriptPercentile,
  simConstantsFor,
  simModelFingerprint,
  simulateGroupMs,
  simulateRandomOverlap,
  type CalibrationReport,
  type OpCost,
  type RandomOverlapReport,
  type RandomOverlapRow,
  type ReferenceData,
} from '../src/device/sim/index.ts';
import { artifactAt } from '../src/model/artifact.ts';
import { median } from '../src/stats.ts';
import { ModelRepository } from '../src/model/repository.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import { isZooModelName, ZOO_MODEL_NAMES, type ZooModelName } from '../src/model/zoo/index.ts';
import { engineRun } from './helpers/sim-engine.ts';

const target = { profile: H200_SXM_141GB, mode: 'graph' as const };
const shipped = { ...target, constants: H200_GRAPH_SIM_CONSTANTS };
let ref: ReferenceData;
let rows: RandomOverlapRow[];
const specs = new Map<string, ModelSpec>();
let report: CalibrationReport;
let overlap: RandomOverlapReport;

beforeAll(async () => {
  ref = await loadReference(H200_REFERENCE_PATH);
  rows = await loadRandomOverlap();
  const repo = new ModelRepository();
  for (const name of ZOO_MODEL_NAMES) specs.set(name, await repo.zooSpec(name));
  report = calibrate(specs, ref, shipped);
  overlap = compareRandomOverlap(specs, rows, shipped, referenceSeqLens(ref));
});

/** An operator cost for engine tests (times in ms); the new terms 0 unless given. */
const cost = (c: Partial<OpCost> & Pick<OpCost, 'computeMs' | 'smShare'>): OpCost => {
  const memoryMs = c.memoryMs ?? 0;
  const streamMs = c.streamMs ?? 0;
  const floorMs = c.floorMs ?? 0;
  const deviceMs = Math.max(c.computeMs, memoryMs) + streamMs + floorMs;
  return { hostMs: 0, gapMs: 0, memoryMs, streamMs, floorMs, deviceMs, bwShare: (memoryMs + streamMs) / deviceMs, holdWeight: 1, ...c };
};

describe('SimEngine: the H200 terms, timelines computed by hand', () => {
  const close = (got: number, want: number): void => expect(got).toBeCloseTo(want, 12);

  it('device-side gaps add to the work alone (0.3 + 1 ms) and leave the SMs to others', () => {
    const [[, e]] = engineRun([{ ex: 0, costs: [cost({ computeMs: 1, smShare: 1, gapMs: 0.3 }), cost({ computeMs: 1, smShare: 1, gapMs: 0.3 })] }]) as [[number, number]];
    close(e, 2.6);
    // Gap 3 ms + work 1 ms at share 1: A asks f = 1/4 of the SMs over its 4 ms window; beside it
    // B, 1 ms at full share: Lc = 1.25, both slowed by 1.25 — B (rate 0.8) ends at 1.25, A (rate
    // 0.2) has done 0.25 ms by then; alone again at rate f = 0.25 until its window ends at 4 it does
    // 0.6875 more; the 0.0625 ms it fell behind it does at full speed → A ends at 4.0625.
    const r = engineRun([
      { ex: 0, costs: [cost({ computeMs: 1, smShare: 1, gapMs: 3 })] },
      { ex: 1, costs: [cost({ computeMs: 1, smShare: 1 })] },
    ]);
    close(r[1]![1], 1.25);
    close(r[0]![1], 4.0625);
  });

  it('kernel floors hold the SMs: two full-share floor-bound operators take their sum', () => {
    const r = engineRun([
      { ex: 0, costs: [cost({ computeMs: 0.5, smShare: 1, floorMs: 0.5 })] },
      { ex: 1, costs: [cost({ computeMs: 0.5, smShare: 1, floorMs: 0.5 })] },
    ]);
    close(r[0]![1], 2);
    close(r[1]![1], 2);
    // Alone: max(compute, memory) + stream + floor.
    const [[, e]] = engineRun([{ ex: 0, costs: [cost({ computeMs: 0.4, memoryMs: 0.3, smShare: 0.5, streamMs: 0.2, floorMs: 0.1 })] }]) as [[number, number]];
    close(e, 0.7);
  });

  it('element-wise streaming slows with the bandwidth load, not the SM load', () => {
    // A: compute 1 (share 0.5) + stream 1 (bandwidth share 0.5 over its 2 ms); B: memory-bound,
    // 1 ms at full bandwidth, share 0.1. Lc = 0.6 fits; Lm = 1.5 → σm = 1.5. A's rate =
    // 2 / (1 + 1.5) = 0.8, B's = 1 / 1.5. B ends at 1.5 (A has done 1.2 of 2 ms), then A alone: 0.8 ms → 2.3.
    const r = engineRun([
      { ex: 0, costs: [cost({ computeMs: 1, smShare: 0.5, streamMs: 1 })] },
      { ex: 1, costs: [cost({ computeMs: 0, memoryMs: 1, smShare: 0.1 })] },
    ]);
    close(r[1]![1], 1.5);
    close(r[0]![1], 2.3);
  });

  it('weighted sharing: an overloaded device is split by demand × hold weight (3 : 1)', () => {
    // Both share 1, 1 ms: A gets 0.75 of the SMs and ends at 4/3; B has done 1/3, the rest alone → 2.
    const r = engineRun([
      { ex: 0, costs: [cost({ computeMs: 1, smShare: 1, holdWeight: 3 })] },
      { ex: 1, costs: [cost({ computeMs: 1, smShare: 1, holdWeight: 1 })] },
    ]);
    close(r[0]![1], 4 / 3);
    close(r[1]![1], 2);
  });

  it('weighted sharing never grants more than the demand: the rest goes to the others (water-filling)', () => {
    // A: share 0.5, weight 10 (claim 5); B: share 1, weight 1 (claim 1). λ = 1/6 would give A
    // 5/6 > 0.5: A gets its 0.5 and runs at full speed (ends at 1); B gets 0.5 → half speed until 1, then alone → 1.5.
    const r = engineRun([
      { ex: 0, costs: [cost({ computeMs: 1, smShare: 0.5, holdWeight: 10 })] },
      { ex: 1, costs: [cost({ computeMs: 1, smShare: 1, holdWeight: 1 })] },
    ]);
    close(r[0]![1], 1);
    close(r[1]![1], 1.5);
  });

  it('equal hold weights are fair sharing exactly (the A100 arithmetic)', () => {
    const costs = (w: number): OpCost[] => [cost({ computeMs: 1, smShare: 0.6, holdWeight: w })];
    const fair = engineRun([
      { ex: 0, costs: costs(1) },
      { ex: 1, costs: [cost({ computeMs: 2, smShare: 0.6 })] },
    ]);
    const same = engineRun([
      { ex: 0, costs: costs(7) },
      { ex: 1, costs: [cost({ computeMs: 2, smShare: 0.6, holdWeight: 7 })] },
    ]);
    expect(same).toEqual(fair);
    close(fair[0]![1], 1.2);
  });
});

// ---------------------------------------------------------------------------------------------

const service = (name: ZooModelName): { name: string; model: ReturnType<typeof artifactAt> } => ({ name, model: artifactAt('/nonexistent', specs.get(name)!) });
const ok = (r: SegmentResult | undefined): Extract<SegmentResult, { ok: true }> => {
  if (!r?.ok) throw new Error('segment failed');
  return r;
};
let qn = 0;
const seg = (s: ZooModelName, start: number, end: number, batchSize: number, seqLen: number): Segment => ({ service: s, queryId: `h${++qn}`, start, end, batchSize, seqLen, input: { kind: 'synthetic', seed: qn } });

async function runOn(device: SimDevice, clock: VirtualClock, group: Segment[]): Promise<GroupResult> {
  const p = device.runGroup(group);
  await clock.run();
  return p;
}

function randomSegments(rng: Rng, n: number): Segment[] {
  const names = [...ZOO_MODEL_NAMES];
  const out: Segment[] = [];
  for (let i = 0; i < n; i++) {
    const name = names.splice(rng.nextUint32() % names.length, 1)[0]!;
    const count = specs.get(name)!.operators.length;
    const start = rng.nextUint32() % count;
    const end = start + 1 + (rng.nextUint32() % (count - start));
    out.push(seg(name, start, end, [1, 2, 4, 8, 16][rng.nextUint32() % 5]!, name === 'bert' ? 32 : 0));
  }
  return out;
}
const fresh = (s: Segment): Segment => ({ ...s, queryId: `h${++qn}` });

describe('contention properties on sim:h200:graph (weighted sharing; zero noise, seeded random groups of 2–4 segments)', () => {
  it('a group finishes no earlier than its slowest segment alone and no later than all of them back to back', async () => {
    const clock = new VirtualClock();
    const device = await SimDevice.create({ clock, id: 'sim:h200:graph', noiseCv: 0 });
    await device.load(ZOO_MODEL_NAMES.map(service));
    const rng = new Rng(31);
    for (let trial = 0; trial < 60; trial++) {
      const group = randomSegments(rng, 2 + (rng.nextUint32() % 3));
      const solos: number[] = [];
      for (const s of group) solos.push((await runOn(device, clock, [fresh(s)])).groupLatencyMs);
      const g = (await runOn(device, clock, group.map(fresh))).groupLatencyMs;
      expect(g, `trial ${trial}`).toBeGreaterThanOrEqual(Math.max(...solos) * (1 - 1e-9));
      expect(g, `trial ${trial}`).toBeLessThanOrEqual(solos.reduce((a, b) => a + b, 0) * (1 + 1e-9));
    }
  });

  it('no segment ever runs faster than alone', async () => {
    const clock = new VirtualClock();
    const device = await SimDevice.create({ clock, id: 'sim:h200:graph', noiseCv: 0 });
    await device.load(ZOO_MODEL_NAMES.map(service));
    const rng = new Rng(37);
    for (let trial = 0; trial < 40; trial++) {
      const group = randomSegments(rng, 2 + (rng.nextUint32() % 3));
      const r = await runOn(device, clock, group.map(fresh));
      for (let i = 0; i < group.length; i++) {
        const solo = ok((await runOn(device, clock, [fresh(group[i]!)])).segments[0]).latencyMs;
        expect(ok(r.segments[i]).latencyMs, `trial ${trial} segment ${i}`).toBeGreaterThanOrEqual(solo * (1 - 1e-9));
      }
    }
  });
});

// ---------------------------------------------------------------------------------------------

describe('per-profile constants', () => {
  it('h200 and h100 use the H200 fit (graph: as measured; eager: the A100 serving path); the rest the A100 fit', () => {
    expect(simConstantsFor(H200_SXM_141GB, 'graph')).toBe(H200_GRAPH_SIM_CONSTANTS);
    expect(simConstantsFor(H100_SXM5_80GB, 'graph')).toBe(H200_GRAPH_SIM_CONSTANTS);
    const eager = simConstantsFor(H200_SXM_141GB, 'eager');
    expect(eager).toMatchObject({ dispatchMs: DEFAULT_SIM_CONSTANTS.dispatchMs, barrierMs: DEFAULT_SIM_CONSTANTS.barrierMs, kernelGrain: H200_GRAPH_SIM_CONSTANTS.kernelGrain });
    expect(eager.launchUs).toEqual({ eager: DEFAULT_SIM_CONSTANTS.launchUs.eager, graph: H200_GRAPH_SIM_CONSTANTS.launchUs.graph });
    for (const mode of ['eager', 'graph'] as const) expect(simConstantsFor(A100_SXM4_40GB, mode)).toBe(DEFAULT_SIM_CONSTANTS);
    expect(simConstantsFor({ key: 'a100:mig-2g' }, 'graph')).toBe(DEFAULT_SIM_CONSTANTS);
  });

  it('a SimDevice takes its profile’s constants unless given; the fingerprint for caches tells them apart', async () => {
    const clock = new VirtualClock();
    expect((await SimDevice.create({ clock, id: 'sim:h200:graph' })).constants).toBe(H200_GRAPH_SIM_CONSTANTS);
    expect((await SimDevice.create({ clock, id: 'sim:a100' })).constants).toBe(DEFAULT_SIM_CONSTANTS);
    expect(simModelFingerprint('sim:h200:graph')).not.toEqual(simModelFingerprint('sim:a100:graph'));
    expect(simModelFingerprint('sim:a100')).toEqual(simModelFingerprint('sim:a100:mig-2g'));
  });

  it('the A100 constants leave the new terms off', () => {
    expect(DEFAULT_SIM_CONSTANTS).toMatchObject({ kernelGrain: 0, nodeTraffic: 0, kernelFloorUs: { spatial: 0, dense: 0 } });
  });
});

describe('calibration goals with the shipped constants (sim:h200:graph against the measured H200)', () => {
  it('every solo latency at batch 1/4/16 is within ±25 % of the measurement', () => {
    expect(report.solo).toHaveLength(21);
    for (const s of report.solo) expect(Math.abs(s.latencyMs / s.referenceMs - 1), `${s.model} batch ${s.batch}: ${s.latencyMs} vs ${s.referenceMs} ms`).toBeLessThanOrEqual(CALIBRATION_GOALS.soloRelativeError);
  });

  it('at least 17 of the 21 pair overlap ratios at batch 4 are within ±0.15 (all 21 with these constants)', () => {
    expect(report.pairs).toHaveLength(21);
    const within = report.pairs.filter((p) => Math.abs(p.ratio - p.referenceRatio) <= CALIBRATION_GOALS.pairRatioError).length;
    expect(within).toBe(21);
    expect(report.summary).toMatchObject({ soloWithinGoal: 21, pairsWithinGoal: 21, artifacts: 0, met: true });
  });

  it('VGG pairs barely overlap and ResNet pairs partly, as measured (ratio ≥ 0.85 vs 0.75–0.95)', () => {
    const ratio = (a: string, b: string): number => report.pairs.find((p) => p.models[0] === a && p.models[1] === b)!.ratio;
    expect(ratio('vgg16', 'vgg19')).toBeGreaterThanOrEqual(0.85); // measured 0.933
    expect(ratio('resnet152', 'vgg16')).toBeGreaterThanOrEqual(0.85); // measured 0.957
    expect(ratio('resnet101', 'inception_v3')).toBeLessThan(ratio('resnet152', 'vgg16')); // measured 0.757 < 0.957
  });

  it('the measured models are zoo models and the reference has 42 solo rows and 63 pairs (BERT at sequence 32)', () => {
    expect(referenceModels(ref).every(isZooModelName)).toBe(true);
    expect(ref.solo).toHaveLength(42);
    expect(ref.pairs).toHaveLength(63);
    expect(referenceSeqLens(ref)).toEqual(new Map([['bert', 32]]));
  });
});

describe('the shipped H200 constants are the fit (fitGraphConstants; the full rerun: abacus simulate calibrate --device sim:h200:graph --fit)', () => {
  it('every fitted constant lies inside its plausible range', () => {
    for (const p of GRAPH_FIT_PARAMETERS) {
      const v = p.get(H200_GRAPH_SIM_CONSTANTS);
      expect(v, p.name).toBeGreaterThanOrEqual(p.min);
      expect(v, p.name).toBeLessThanOrEqual(p.max);
    }
  });

  it('refitting the group constants from the shipped ones gains under 2 % of the objective (they are at its minimum, rounded)', () => {
    const j = fitObjective(specs, ref, target, H200_GRAPH_SIM_CONSTANTS);
    const refit = fitConstants(specs, ref, target, H200_GRAPH_SIM_CONSTANTS);
    expect(refit.objective).toBeGreaterThan(j * 0.98);
  }, 60_000);

  it('kernelGrain 0.35 beats its neighbours ±0.05 and fair sharing on the random-overlap p50s', () => {
    const mae = (g: number): number => compareRandomOverlap(specs, rows, { ...target, constants: { ...H200_GRAPH_SIM_CONSTANTS, kernelGrain: g } }, referenceSeqLens(ref)).summary.meanAbsErrorAP50;
    const at = overlap.summary.meanAbsErrorAP50;
    expect(at).toBeLessThanOrEqual(mae(0.3));
    expect(at).toBeLessThanOrEqual(mae(0.4));
    expect(mae(0)).toBeGreaterThan(at * 1.5);
  }, 60_000);
});

// ---------------------------------------------------------------------------------------------

describe('random overlap (uncontrolled: B starts at a random moment of A, batch 4)', () => {
  it('parses the measurement: 42 ordered pairs of 120 repetitions', () => {
    expect(rows).toHaveLength(42);
    expect(rows[0]).toEqual({ modelA: 'resnet50', modelB: 'resnet101', batch: 4, soloAMs: 1.246, soloBMs: 2.267, n: 120, aP50Ms: 1.646, aP99Ms: 1.885, bP50Ms: 2.605, bP99Ms: 2.902 });
    expect(() => parseRandomOverlapCsv('a,b\n')).toThrow(/line 1 must be the header/);
    const header = 'model_a,model_b,batch,solo_a_ms,solo_b_ms,n,a_p50_ms,a_p99_ms,a_max_ms,b_p50_ms,b_p99_ms,a_p99_over_solo,b_p99_over_solo';
    expect(() => parseRandomOverlapCsv(`${header}\nresnet50,vgg16,4,1,1,x,1,1,1,1,1,1,1\n`)).toThrow(/line 2: n 'x'/);
    expect(() => parseRandomOverlapCsv(`${header}\nresnet50,vgg16,4\n`)).toThrow(/line 2: expected 13 fields/);
  });

  it('percentiles as the measurement script: median of an even count averages the middle; p99 at rank round(0.99 n + ½), half to even', () => {
    const xs = Array.from({ length: 120 }, (_, i) => 120 - i); // 120 … 1
    expect(median(xs)).toBe(60.5);
    expect(scriptPercentile(xs, 99)).toBe(119); // rank round(119.3) = 119
    const hundred = Array.from({ length: 100 }, (_, i) => i + 1);
    expect(scriptPercentile(hundred, 98)).toBe(98); // rank round(98.5) = 98 (half to even; Math.round would give 99)
    expect(scriptPercentile(hundred, 99)).toBe(100); // rank round(99.5) = 100
    expect(() => scriptPercentile([], 50)).toThrow(RangeError);
  });

  it('A is never faster than alone nor slower than A and B back to back; a later B slows A less', () => {
    const q = (name: string): { spec: ModelSpec; batch: number; seqLen: number } => ({ spec: specs.get(name)!, batch: 4, seqLen: 0 });
    const sim = simulateRandomOverlap(q('resnet50'), q('vgg16'), shipped, 24);
    expect(sim.soloAMs).toBeCloseTo(simulateGroupMs([q('resnet50')], shipped), 9); // no dispatch in graph mode
    for (const a of sim.aMs) {
      expect(a).toBeGreaterThanOrEqual(sim.soloAMs * (1 - 1e-9));
      expect(a).toBeLessThanOrEqual((sim.soloAMs + sim.soloBMs) * (1 + 1e-9));
    }
    expect(sim.aMs[0]!).toBeGreaterThan(sim.aMs[sim.aMs.length - 1]!);
    expect(() => simulateRandomOverlap(q('vgg16'), q('vgg16'), shipped, 4)).toThrow(/different models/);
    expect(() => simulateRandomOverlap(q('vgg16'), q('resnet50'), shipped, 0)).toThrow(/n 0/);
  });

  it(`the shipped constants reproduce A's p50 slowdown within ±${RANDOM_OVERLAP_TOLERANCE} for ≥ 36 of 42 pairs (39 now; mean |error| ≤ 0.1, 0.078 now) and p99 for ≥ 30 (33 now)`, () => {
    const s = overlap.summary;
    expect(s.pairs).toBe(42);
    expect(s.aP50Within).toBeGreaterThanOrEqual(36);
    expect(s.meanAbsErrorAP50).toBeLessThanOrEqual(0.1);
    expect(s.aP99Within).toBeGreaterThanOrEqual(30);
    expect(s.meanAbsErrorAP99).toBeLessThanOrEqual(0.12);
  });

  it('long kernels keep their SMs: ResNet-50 under VGG-16 slows much more than VGG-16 under ResNet-50 (measured 1.89× vs 1.22×)', () => {
    const row = (a: string, b: string): RandomOverlapReport['rows'][number] => overlap.rows.find((r) => r.modelA === a && r.modelB === b)!;
    const r50 = row('resnet50', 'vgg16');
    const v16 = row('vgg16', 'resnet50');
    expect(r50.measured.aP50).toBeCloseTo(1.889, 2);
    expect(r50.simulated.aP50).toBeGreaterThan(1.6);
    expect(v16.simulated.aP50).toBeLessThan(1.3);
    // Fair sharing (kernelGrain 0) cannot tell them apart.
    const fair = compareRandomOverlap(specs, rows.filter((r) => [r.modelA, r.modelB].sort().join() === 'resnet50,vgg16'), { ...target, constants: { ...H200_GRAPH_SIM_CONSTANTS, kernelGrain: 0 } });
    const [x, y] = fair.rows.map((r) => r.simulated.aP50) as [number, number];
    expect(Math.abs(x - y)).toBeLessThan(0.3);
  });
});

describe('abacus simulate calibrate --device sim:h200:graph', () => {
  const runCli = async (...args: string[]): Promise<string> => {
    let out = '';
    const ctx: CliContext = { out: (s) => (out += s), err: () => undefined, cacheOptions: () => ({}) };
    await buildProgram(ctx).parseAsync(['node', 'abacus', ...args]);
    return out;
  };

  it('uses the bundled measurement and its random-overlap data: goals met, the comparison in the JSON', async () => {
    const json = JSON.parse(await runCli('simulate', 'calibrate', '--device', 'sim:h200:graph', '--json')) as {
      reference: string;
      summary: { met: boolean };
      constants: { dispatchMs: number };
      randomOverlap: { rows: unknown[]; summary: { pairs: number; aP50Within: number } };
    };
    expect(json.reference).toBe(H200_REFERENCE_PATH);
    expect(json.summary.met).toBe(true);
    expect(json.constants.dispatchMs).toBe(0);
    expect(json.randomOverlap.rows).toHaveLength(42);
    expect(json.randomOverlap.summary).toMatchObject({ pairs: 42, aP50Within: overlap.summary.aP50Within });
  });

  it('prints the uncontrolled-overlap table and its summary line', async () => {
    const text = await runCli('simulate', 'calibrate', '--device', 'sim:h200:graph');
    expect(text).toMatch(/solo: 21\/21 within ±25%.*pairs: 21\/21 within ±0\.15.*goals met/);
    expect(text).toMatch(/Uncontrolled overlap/);
    expect(text).toMatch(/random overlap: A p50 slowdown \d+\/42 within ±0\.15/);
  });

  it('the A100 has no random-overlap data unless given one', async () => {
    const json = JSON.parse(await runCli('simulate', 'calibrate', '--json')) as Record<string, unknown>;
    expect(json['randomOverlap']).toBeUndefined();
  });
});
