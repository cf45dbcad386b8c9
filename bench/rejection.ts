/**
 * Rejection on time, on the wall clock: how long after its arrival a query that cannot meet
 * its QoS target behind the running group is answered `qos_violation`. The baseline in the same
 * process is the runtime deciding only when the device is idle (`decideAhead: false`), which
 * answers such a query only when the running group ends.
 *
 * - `sim:a100 ×77, wall clock`: the simulated A100 slowed 77× from the start
 *   (`sim:a100:drift-77x@0ms`) runs on the wall clock, so a resnet50 batch-16 group takes ~500 ms
 *   while the predictor (profiled on the undrifted device, the runtime-speed benchmark's) expects
 *   ~8 ms. 10 ms after it starts, a vgg16 batch-1 query arrives with a 100 ms target: not hopeless
 *   by the prediction on arrival (the group should have ended), hopeless from its latest start
 *   (arrival + 100 ms − its predicted solo latency) while the group overruns: the wake timer
 *   answers it then, ~98 ms after arrival (goal ≤ 105 ms); deciding only when idle, at ~500 ms.
 * - `ort, wall clock` (this CPU, real execution): the demo's models and predictor; a resnet50-demo
 *   batch-2 query runs, and 1 ms after its launch a bert-demo batch-1 query arrives with a target
 *   of 1/5 of the running group's predicted latency (the target's 100 ms behind 500 ms, docs/benchmarks.md "Targets and what was measured"): hopeless
 *   on arrival, answered by the decision made on its arrival; deciding only when idle, when the
 *   group ends.
 */
import os from 'node:os';
import type { Clock } from '../src/clock/clock.ts';
import { WallClock } from '../src/clock/wall.ts';
import { cachedPredictor } from '../src/deployment/predictor-cache.ts';
import { openDemoOrtEnv } from './demo-env.ts';
import type { CliContext } from '../src/cli/context.ts';
import type { Device } from '../src/device/device.ts';
import { SimDevice } from '../src/device/sim/index.ts';
import { artifactAt } from '../src/model/artifact.ts';
import { ModelRepository } from '../src/model/repository.ts';
import type { Predictor } from '../src/predict/predictor.ts';
import { ServingRuntime, type RuntimeService } from '../src/runtime/runtime.ts';
import { createController } from '../src/schedule/index.ts';
import { median } from '../src/stats.ts';

export interface RejectionRow {
  readonly scenario: string;
  readonly decideAhead: boolean;
  readonly trials: number;
  /** The running group's predicted and measured latency (medians), ms. */
  readonly longPredictedMs: number;
  readonly longMeasuredMs: number;
  /** The queued query's QoS target (median), ms. */
  readonly qosTargetMs: number;
  /** Answer − arrival of the queued query, wall ms: median and max over the trials. */
  readonly answeredAfterMedianMs: number;
  readonly answeredAfterMaxMs: number;
  /** Trials whose queued query was answered `qos_violation`. */
  readonly rejected: number;
}

interface Scenario {
  readonly name: string;
  readonly clock: Clock;
  readonly device: Device;
  readonly predictor: Predictor;
  readonly services: readonly RuntimeService[];
  readonly long: { readonly service: string; readonly batch: number; readonly seqLen?: number };
  readonly short: { readonly service: string; readonly batch: number; readonly seqLen?: number };
  /** Wall ms after the long query's launch at which the short one arrives. */
  readonly arriveAfterMs: number;
  readonly qosTargetMs: (longPredictedMs: number) => number;
}

async function trial(s: Scenario, decideAhead: boolean): Promise<{ longPredictedMs: number; longMeasuredMs: number; qosTargetMs: number; answeredAfterMs: number; rejected: boolean }> {
  const runtime = new ServingRuntime({ clock: s.clock, device: s.device, controller: createController('abacus', {}, s.predictor), services: s.services, decideAhead });
  const long = runtime.submit({ service: s.long.service, batch: s.long.batch, ...(s.long.seqLen === undefined ? {} : { seqLen: s.long.seqLen }) });
  await s.clock.sleep(s.arriveAfterMs);
  const g = runtime.groups[0]!;
  const qosTargetMs = s.qosTargetMs(g.predictedMs!);
  const arrivalMs = s.clock.now();
  const short = await runtime.submit({ service: s.short.service, batch: s.short.batch, qosTargetMs, ...(s.short.seqLen === undefined ? {} : { seqLen: s.short.seqLen }) });
  const answeredAfterMs = s.clock.now() - arrivalMs;
  await long;
  return { longPredictedMs: g.predictedMs!, longMeasuredMs: g.measuredMs, qosTargetMs, answeredAfterMs, rejected: !short.ok && short.reason === 'qos_violation' };
}

async function rows(s: Scenario, trials: number, log: (line: string) => void): Promise<RejectionRow[]> {
  const runs = { false: [] as Awaited<ReturnType<typeof trial>>[], true: [] as Awaited<ReturnType<typeof trial>>[] };
  log(`rejection: ${s.name}, ${trials} trials each, interleaved …\n`);
  for (let i = 0; i < trials; i++) {
    for (const ahead of [false, true]) runs[`${ahead}`].push(await trial(s, ahead));
  }
  return [false, true].map((decideAhead) => {
    const r = runs[`${decideAhead}`];
    return {
      scenario: s.name,
      decideAhead,
      trials,
      longPredictedMs: median(r.map((x) => x.longPredictedMs)),
      longMeasuredMs: median(r.map((x) => x.longMeasuredMs)),
      qosTargetMs: median(r.map((x) => x.qosTargetMs)),
      answeredAfterMedianMs: median(r.map((x) => x.answeredAfterMs)),
      answeredAfterMaxMs: Math.max(...r.map((x) => x.answeredAfterMs)),
      rejected: r.filter((x) => x.rejected).length,
    };
  });
}

export async function benchRejection(opts: { log?: (s: string) => void; trials?: number; skipOrt?: boolean } = {}): Promise<{ loadAverage1m: number; rows: RejectionRow[] }> {
  const log = opts.log ?? (() => undefined);
  const trials = opts.trials ?? 10;
  const ctx: CliContext = { out: log, err: log, cacheOptions: () => ({}) };
  const repo = new ModelRepository();
  const loadAverage1m = os.loadavg()[0]!;
  const out: RejectionRow[] = [];

  const specs = [await repo.zooSpec('resnet50'), await repo.zooSpec('vgg16')];
  const { predictor } = await cachedPredictor(ctx, repo, { deviceId: 'sim:a100', models: specs.map((s) => artifactAt('/nonexistent', s)), batchSizes: [1, 2, 4, 8, 16], seqLens: [], maxGroupSize: 2, samples: 4000 });
  const clock = new WallClock();
  const device = await SimDevice.create({ clock, id: 'sim:a100:drift-77x@0ms', seed: 1 });
  const services: RuntimeService[] = specs.map((spec) => ({ name: spec.name, spec, qosTargetMs: 1000, maxQueueLength: 10 }));
  await device.load(services.map((s) => ({ name: s.name, model: artifactAt('/nonexistent', s.spec) })));
  try {
    out.push(...(await rows({ name: 'sim:a100 ×77, wall clock: 100 ms target, hopeless during a ~500 ms overrun', clock, device, predictor, services, long: { service: 'resnet50', batch: 16 }, short: { service: 'vgg16', batch: 1 }, arriveAfterMs: 10, qosTargetMs: () => 100 }, trials, log)));
  } finally {
    await device.close();
  }

  if (opts.skipOrt !== true) {
    const { hosted, predictor: ortPredictor, env } = await openDemoOrtEnv(ctx, repo, 'bench rejection');
    try {
      const opened = await env.open();
      out.push(
        ...(await rows(
          { name: 'ort, wall clock: target 1/5 of the running group, hopeless on arrival', clock: opened.clock, device: opened.device, predictor: ortPredictor, services: hosted.services, long: { service: 'resnet50-demo', batch: 2 }, short: { service: 'bert-demo', batch: 1, seqLen: 32 }, arriveAfterMs: 1, qosTargetMs: (p) => p / 5 },
          trials,
          log,
        )),
      );
    } finally {
      await env.close();
    }
  }
  return { loadAverage1m, rows: out };
}
