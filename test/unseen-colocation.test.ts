/**
 * Co-location with a model the predictor was not trained on (`predict/unseen.ts`,
 * docs/health.md "Model state and model control"), in virtual time on sim:a100: resnet50-small (trained) and bert-small admitted with the
 * cost fallback fitted to its solo runs on a private simulated device (what `abacus serve` does on
 * `sim:`), under abacus with drop (slackMs 0.05: these models run in about a millisecond, the
 * default 5 ms slack would never overlap them). Deterministic (virtual clock, seeded device and
 * arrivals).
 *
 * Checked: groups with bert and another service are predicted as if bert's segment ran after the
 * others, so their prediction is at or above the measured latency (the property that keeps a
 * co-located query's plan safe, docs/health.md); and resnet's violation ratio is no worse than
 * with an "oracle" predictor trained on both models (plus 1 percentage point).
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { measureSoloOnSim } from '../src/deployment/solo-measure.ts';
import { artifactAt } from '../src/model/artifact.ts';
import { resolveModelSpec } from '../src/model/catalog.ts';
import { ModelRepository } from '../src/model/repository.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import type { Predictor } from '../src/predict/predictor.ts';
import { trainPredictor } from '../src/predict/train.ts';
import { calibrationSlots, OpenPredictor } from '../src/predict/unseen.ts';
import { simEnv } from '../src/reproduce/colocation.ts';
import { runExperiment, type ExperimentService } from '../src/runtime/experiment.ts';
import { simulateProfileRows } from '../bench/predictor.ts';

describe('abacus co-locating a trained model with one admitted by the cost fallback (sim:a100, virtual time)', () => {
  let resnet: ModelSpec;
  let bert: ModelSpec;
  beforeAll(async () => {
    const repo = new ModelRepository();
    resnet = await resolveModelSpec(repo, 'resnet50-small');
    bert = await resolveModelSpec(repo, 'bert-small');
  });

  // Whether abacus co-locates bert at all at this slack depends on the margin of the resnet-only
  // MLP under the fallback's sum: training seeds 1, 2, 3 give 0, 51 and 43 mixed groups of 1,500
  // queries (the tfjs trainer before: 19, 0, 10); under each, at least 98 % of the groups that
  // occur are predicted at or above their latency (50 of 51 under seed 2). Seed 3 makes the check
  // non-vacuous.
  const TRAIN_SEED = 3;
  const train = async (specs: ModelSpec[]): Promise<Predictor> => {
    const rows = await simulateProfileRows({ models: specs, samples: 1500, maxGroupSize: 2, batchSizes: [1, 2, 4], seqLens: [16, 32], seed: 7 });
    return (await trainPredictor(rows, { kind: 'mlp', specs: new Map(specs.map((s) => [s.name, s])), holdout: 0, folds: 0, files: [], seed: TRAIN_SEED })).predictor;
  };

  it('groups with the new model are predicted at or above their measured latency; the trained service keeps its QoS', async () => {
    const open = new OpenPredictor(await train([resnet]), { specs: new Map([[resnet.name, resnet]]) });
    const measured = await measureSoloOnSim('sim:a100', 11, artifactAt('/nonexistent', bert), calibrationSlots(bert));
    expect(open.admit(bert, { measured, measuredOn: 'a private sim:a100' }).how).toBe('cost-fallback');
    const oracle = await train([resnet, bert]);

    // QoS targets: 4× each model's solo latency at batch 2 (measured on the simulator)
    const solo = async (spec: ModelSpec, seqLen: number): Promise<number> =>
      (await measureSoloOnSim('sim:a100', 1, artifactAt('/nonexistent', spec), [{ model: spec.name, start: 0, end: spec.operators.length, batch: 2, seqLen }]))[0]!.latencyMs;
    const services: ExperimentService[] = [
      { name: resnet.name, spec: resnet, qosTargetMs: 4 * (await solo(resnet, 0)), maxQueueLength: 10_000, batchSizes: [1, 2] },
      { name: bert.name, spec: bert, qosTargetMs: 4 * (await solo(bert, 32)), maxQueueLength: 10_000, batchSizes: [1, 2], seqLens: [16, 32] },
    ];
    // the rate: about what the device serves one query at a time at batch 2 (a queue forms: overlap pays)
    const rateQps = Math.round(1000 / ((services[0]!.qosTargetMs + services[1]!.qosTargetMs) / 8));
    const run = (predictor: Predictor) => runExperiment(simEnv('sim:a100', services, predictor, 3), { services, policy: 'abacus', policyParams: { drop: true, slackMs: 0.05 }, rateQps, queries: 1500, seed: 3, keepRecords: true });
    const withFallback = await run(open);
    const withOracle = await run(oracle);

    const mixed = withFallback.records!.groups.filter((g) => g.segments.some((s) => s.service === bert.name) && g.segments.some((s) => s.service !== bert.name));
    const over = mixed.filter((g) => g.predictedMs! >= g.measuredMs).length;
    const rn = (r: typeof withFallback) => r.services.find((s) => s.service === resnet.name)!;
    console.log(
      `rate ${rateQps} q/s; groups with bert and resnet: ${mixed.length}, predicted ≥ measured in ${over}; resnet violation ratio ${rn(withFallback).violationRatio.toFixed(4)} (oracle ${rn(withOracle).violationRatio.toFixed(4)}), ` +
        `bert ${withFallback.services.find((s) => s.service === bert.name)!.violationRatio.toFixed(4)} (oracle ${withOracle.services.find((s) => s.service === bert.name)!.violationRatio.toFixed(4)}); mean group size ${withFallback.meanGroupSize.toFixed(2)} (oracle ${withOracle.meanGroupSize.toFixed(2)})`,
    );
    // measured (arrivals seed 3, training seed 3): 43 such groups, all predicted at or above their
    // latency; resnet 10.0 % violations (oracle 11.8 %)
    expect(mixed.length).toBeGreaterThan(10);
    expect(over / mixed.length).toBeGreaterThanOrEqual(0.95);
    expect(rn(withFallback).violationRatio).toBeLessThanOrEqual(rn(withOracle).violationRatio + 0.01);
    expect(withFallback.overall.offered).toBe(1500);
  }, 240_000);
});
