/**
 * The drift scenario of the fallback tests (`fallback.test.ts`, `fallback-stream.test.ts`):
 * resnet50 + bert on `sim:a100` slowed ×2 at 20 s, QoS 50 ms, 100 queries/s, 4,000 queries, in
 * virtual time; checks that every query was answered exactly once and finds the step.
 */
import { expect } from 'vitest';
import type { ModelSpec } from '../../src/model/spec.ts';
import type { Predictor } from '../../src/predict/predictor.ts';
import { simEnv } from '../../src/reproduce/colocation.ts';
import { runExperiment, type ExperimentResult, type ExperimentService } from '../../src/runtime/experiment.ts';
import type { GroupRecord } from '../../src/runtime/records.ts';

/** Queries of the scenario. */
export const DRIFT_QUERIES = 4000;

/**
 * Run abacus with `policyParams` on `deviceId` (default: the ×2 step at 20 s) with `predictor`.
 * @returns the result, its groups, and the index of the first group launched at or after 20 s
 *   (after asserting that every query was answered exactly once and that the step was reached).
 */
export async function driftRun(specs: ReadonlyMap<string, ModelSpec>, predictor: Predictor, policyParams: Record<string, unknown>, deviceId = 'sim:a100:drift-2x@20000ms'): Promise<{ r: ExperimentResult; groups: readonly GroupRecord[]; firstAfter: number }> {
  const services: ExperimentService[] = ['resnet50', 'bert'].map((name) => ({ name, spec: specs.get(name)!, qosTargetMs: 50, maxQueueLength: 10_000, batchSizes: [1, 2, 4], ...(name === 'bert' ? { seqLens: [16, 32] } : {}) }));
  const r = await runExperiment(simEnv(deviceId, services, predictor, 3), { services, policy: 'abacus', policyParams, rateQps: 100, queries: DRIFT_QUERIES, seed: 3, keepRecords: true });
  const groups = r.records!.groups;
  const qs = r.records!.queries;
  // every query answered exactly once
  expect(qs.length).toBe(DRIFT_QUERIES);
  expect(new Set(qs.map((q) => q.id)).size).toBe(DRIFT_QUERIES);
  for (const q of qs) expect(q.outcome, q.id).toBeDefined();
  const firstAfter = groups.findIndex((g) => g.launchMs >= 20_000);
  if (deviceId.includes('@20000ms')) expect(firstAfter).toBeGreaterThan(0);
  return { r, groups, firstAfter };
}
