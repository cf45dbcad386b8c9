/**
 * Simulation speed of the whole serving path (the project's target, docs/benchmarks.md "Targets and what was measured": 1,000,000 queries of a 2-way
 * co-location in ≤ 60 s of wall time): ResNet-50 + VGG-16 on `sim:a100` with the virtual
 * clock, Poisson load, the Abacus controller with the trained MLP predictor (profiled and
 * trained first when not cached, as `abacus simulate` does), the runtime, the load generator
 * and the statistics — everything `abacus simulate` runs. The baseline in the same process is
 * the same run with fcfs (one predictor call per decision instead of ~3).
 */
import { artifactAt } from '../src/model/artifact.ts';
import { ModelRepository } from '../src/model/repository.ts';
import { cachedPredictor } from '../src/deployment/predictor-cache.ts';
import type { CliContext } from '../src/cli/context.ts';
import { simEnv } from '../src/reproduce/colocation.ts';
import { runExperiment, type ExperimentService } from '../src/runtime/experiment.ts';

export interface RuntimeSpeedRun {
  readonly policy: string;
  readonly queries: number;
  readonly wallMs: number;
  readonly simulatedMs: number;
  readonly queriesPerSecond: number;
  /** Wall time of 1,000,000 queries at this rate, s (goal ≤ 60). */
  readonly secondsPerMillion: number;
  readonly groups: number;
  readonly violationRatio: number;
}

export async function benchRuntimeSpeed(opts: { queries?: number; rateQps?: number; log?: (s: string) => void } = {}): Promise<{ device: string; services: string[]; runs: RuntimeSpeedRun[] }> {
  const queries = opts.queries ?? 1_000_000;
  const rateQps = opts.rateQps ?? 100;
  const log = opts.log ?? (() => undefined);
  const repo = new ModelRepository();
  const specs = [await repo.zooSpec('resnet50'), await repo.zooSpec('vgg16')];
  const ctx: CliContext = { out: log, err: log, cacheOptions: () => ({}) };
  const batchSizes = [1, 2, 4, 8, 16];
  const { predictor } = await cachedPredictor(ctx, repo, { deviceId: 'sim:a100', models: specs.map((s) => artifactAt('/nonexistent', s)), batchSizes, seqLens: [], maxGroupSize: 2, samples: 4000 });
  const services: ExperimentService[] = specs.map((spec) => ({ name: spec.name, spec, qosTargetMs: 50, maxQueueLength: 10_000, batchSizes }));
  const runs: RuntimeSpeedRun[] = [];
  for (const policy of ['fcfs', 'abacus']) {
    log(`runtime speed: ${queries.toLocaleString('en-US')} queries, ${policy}, ${rateQps} queries/s on sim:a100 …\n`);
    const t0 = performance.now();
    const r = await runExperiment(simEnv('sim:a100', services, predictor, 1), { services, policy, rateQps, queries, seed: 1 });
    const wallMs = performance.now() - t0;
    runs.push({ policy, queries, wallMs, simulatedMs: r.overall.spanMs, queriesPerSecond: (queries * 1000) / wallMs, secondsPerMillion: (wallMs / 1000) * (1_000_000 / queries), groups: r.groups, violationRatio: r.overall.violationRatio });
  }
  return { device: 'sim:a100', services: specs.map((s) => s.name), runs };
}
