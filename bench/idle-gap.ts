/**
 * The device's idle gap between groups at saturation: how long the device sits idle between
 * two groups while queries wait (`GroupRecord.idleBeforeMs`: the decision latency and the
 * runtime's own work between the end of one group and the launch of the next), over its busy
 * time. The baseline in the same process is the runtime deciding only when the device is idle
 * (`decideAhead: false`); the measured rows decide the next group while one runs and launch it
 * the moment the device is free (the default).
 *
 * - `sim:a100`, virtual time: ResNet-50 + VGG-16 (the runtime-speed benchmark's pair and cached
 *   predictor), QoS 50 ms, Poisson at 200 queries/s (past what one group at a time serves: the
 *   queues stay non-empty). A decision takes no virtual time, so the gap is 0 with and without
 *   deciding ahead; the row shows that the simulated device is never left idle by the runtime.
 * - `ort` (this CPU, wall clock): the demo's two models (ResNet-50 at 128 px half width, an
 *   8-layer BERT) at batch 1–2, seq 32–64, QoS 43 / 49 ms, 1 intra-op thread per executor, at
 *   55 queries/s (about the FCFS capacity here, the demo's load), with the demo's predictor
 *   (profiled and cached on first use, as `abacus bench --device ort` does).
 *
 * Also reported: `outsideOperatorsRatio`, the part of each group's measured latency in which its
 * longest segment's operators did not run (dispatch to the executor processes, messaging, input
 * decoding) — device time that is not idle between groups but not computing either.
 */
import os from 'node:os';
import { cachedPredictor } from '../src/deployment/predictor-cache.ts';
import { openDemoOrtEnv } from './demo-env.ts';
import type { CliContext } from '../src/cli/context.ts';
import { artifactAt } from '../src/model/artifact.ts';
import { ModelRepository } from '../src/model/repository.ts';
import { simEnv } from '../src/reproduce/colocation.ts';
import { runExperiment, type ExperimentEnv, type ExperimentService } from '../src/runtime/experiment.ts';

export interface IdleGapRow {
  readonly device: string;
  readonly policy: string;
  /** Whether the runtime decided the next group while one ran (false: the baseline). */
  readonly decideAhead: boolean;
  readonly queries: number;
  readonly groups: number;
  /** Σ idle time between groups while queries waited ÷ Σ group latency (fraction). */
  readonly idleGapRatio: number;
  /** Σ (group latency − longest segment's operator time) ÷ Σ group latency (fraction). */
  readonly outsideOperatorsRatio: number;
  /** Groups launched as decided ahead ÷ groups. */
  readonly decidedAheadShare: number;
  readonly violationRatio: number;
  readonly goodputQps: number;
}

async function rows(device: string, env: ExperimentEnv, services: readonly ExperimentService[], rateQps: number, queries: number, log: (s: string) => void): Promise<IdleGapRow[]> {
  const out: IdleGapRow[] = [];
  for (const policy of ['fcfs', 'abacus']) {
    // Interleaved, baseline first, so a change in the machine's load hits both alike.
    for (const decideAhead of [false, true]) {
      log(`idle gap: ${device}, ${policy}, ${decideAhead ? 'deciding ahead' : 'deciding when idle'}, ${queries} queries at ${rateQps} queries/s …\n`);
      const r = await runExperiment(env, { services, policy, rateQps, queries, seed: 5, decideAhead });
      out.push({ device, policy, decideAhead, queries, groups: r.groups, ...r.between, violationRatio: r.overall.violationRatio, goodputQps: r.overall.goodputQps });
    }
  }
  return out;
}

export async function benchIdleGap(opts: { log?: (s: string) => void; simQueries?: number; ortQueries?: number; skipOrt?: boolean } = {}): Promise<{ loadAverage1m: number; rows: IdleGapRow[] }> {
  const log = opts.log ?? (() => undefined);
  const ctx: CliContext = { out: log, err: log, cacheOptions: () => ({}) };
  const repo = new ModelRepository();
  const loadAverage1m = os.loadavg()[0]!;

  const specs = [await repo.zooSpec('resnet50'), await repo.zooSpec('vgg16')];
  const batchSizes = [1, 2, 4, 8, 16];
  const { predictor } = await cachedPredictor(ctx, repo, { deviceId: 'sim:a100', models: specs.map((s) => artifactAt('/nonexistent', s)), batchSizes, seqLens: [], maxGroupSize: 2, samples: 4000 });
  const simServices: ExperimentService[] = specs.map((spec) => ({ name: spec.name, spec, qosTargetMs: 50, maxQueueLength: 10_000, batchSizes }));
  const out = await rows('sim:a100', simEnv('sim:a100', simServices, predictor, 1), simServices, 200, opts.simQueries ?? 20_000, log);

  if (opts.skipOrt !== true) {
    const { hosted, env } = await openDemoOrtEnv(ctx, repo, 'bench idle-gap');
    try {
      out.push(...(await rows('ort', env, hosted.services, 55, opts.ortQueries ?? 1000, log)));
    } finally {
      await env.close();
    }
  }
  return { loadAverage1m, rows: out };
}
