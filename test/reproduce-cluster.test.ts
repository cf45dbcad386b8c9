/**
 * reproduce/cluster.ts: several ServingRuntimes over several SimDevices on one VirtualClock
 * behind a router. Two nodes, two services, a few seconds of trace: every offered query is
 * accounted for in its arrival minute, a light load is served entirely on time by both cluster
 * designs, and under overload the one-query-per-node (Clockwork-style) cluster drops queries
 * instead of serving them late while the Abacus cluster serves more within QoS.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { ModelRepository } from '../src/model/repository.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import type { Group, Predictor } from '../src/predict/predictor.ts';
import { runCluster, summarizeCluster, type ClusterOptions } from '../src/reproduce/cluster.ts';
import type { ExperimentService } from '../src/runtime/experiment.ts';

/**
 * Whole-query latencies of resnet50 and vgg16 at batch 1–2 on sim:a100 are ≈ 7.9 and ≈ 8 ms
 * (launch-bound, flat in batch): spread evenly over the operators; a group costs its longest
 * slot × 1.2 (overlap is not free).
 */
function roughPredictor(specs: readonly ModelSpec[]): Predictor {
  const msPerOp = new Map(specs.map((s) => [s.name, 8 / s.operators.length]));
  return {
    kind: 'rough',
    deviceId: 'sim:a100',
    models: specs.map((s) => s.name).sort(),
    maxSlots: 4,
    predict(groups: readonly Group[], out = new Float64Array(groups.length)) {
      groups.forEach((g, i) => {
        let longest = 0;
        for (const s of g) longest = Math.max(longest, (s.end - s.start) * msPerOp.get(s.model)!);
        out[i] = longest * (g.length > 1 ? 1.2 : 1);
      });
      return out;
    },
  };
}

let services: ExperimentService[];
let predictor: Predictor;
beforeAll(async () => {
  const repo = new ModelRepository();
  const specs = [await repo.zooSpec('resnet50'), await repo.zooSpec('vgg16')];
  services = specs.map((spec) => ({ name: spec.name, spec, qosTargetMs: 40, maxQueueLength: 10_000, batchSizes: [1, 2] }));
  predictor = roughPredictor(specs);
}, 60_000);

function options(policy: 'abacus' | 'clockwork', perMinuteQps: number[]): ClusterOptions {
  return { deviceId: 'sim:a100', nodes: 2, services, predictor, policy, perMinuteQps, scale: 0.01, minuteMs: 2000, seed: 7 };
}

describe('runCluster', () => {
  it('accounts for every query in its arrival minute; a light load is served on time by both designs', async () => {
    // 20 and 40 q/s over 2 nodes for 2 s each: ≈ 120 queries, far below capacity
    for (const policy of ['abacus', 'clockwork'] as const) {
      const r = await runCluster(options(policy, [2000, 4000]));
      expect(r.minutes).toHaveLength(2);
      expect(r.overall.offered).toBe(r.minutes.reduce((a, m) => a + m.offered, 0));
      expect(r.overall.offered).toBeGreaterThan(60);
      expect(r.overall.onTime).toBe(r.overall.offered);
      expect(r.overall.violationRatio).toBe(0);
      expect(r.overall.p99Ms).toBeLessThanOrEqual(40);
      for (const m of r.minutes) {
        // goodput in trace units: on-time queries ÷ 2 s ÷ scale 0.01 (all on time here)
        expect(m.goodputQps).toBeCloseTo(m.offered / 2 / 0.01, 6);
        expect(m.meanMs).toBeLessThanOrEqual(m.p99Ms);
      }
    }
  }, 60_000);

  it('under overload the Clockwork-style cluster drops rather than serves late, and Abacus serves more within QoS', async () => {
    // 600 q/s over 2 nodes for 2 s: one query per node at a time (≈ 8 ms each) cannot keep up
    const abacus = await runCluster(options('abacus', [60_000]));
    const clockwork = await runCluster(options('clockwork', [60_000]));
    expect(abacus.overall.offered).toBe(clockwork.overall.offered); // same seed, same arrivals
    expect(clockwork.overall.violationRatio).toBeGreaterThan(0.1);
    // dropped, not late: what completes, completes within QoS (2 % tolerance for estimate error)
    expect(clockwork.overall.completed - clockwork.overall.onTime).toBeLessThanOrEqual(0.02 * clockwork.overall.completed);
    const s = summarizeCluster(abacus, clockwork, 40);
    expect(s.throughputRatioVsClockwork).toBeGreaterThan(1);
    expect(s.abacusGoodputQps).toBeCloseTo(abacus.overall.onTime / 2 / 0.01, 6);
  }, 60_000);

  it('rejects a bad node count, scale or trace', async () => {
    await expect(runCluster({ ...options('abacus', [1000]), nodes: 0 })).rejects.toThrow(/nodes/);
    await expect(runCluster({ ...options('abacus', [1000]), scale: 0 })).rejects.toThrow(/scale/);
    await expect(runCluster(options('abacus', []))).rejects.toThrow(/trace/);
  });
});
