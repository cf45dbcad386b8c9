/**
 * On-time rejection without the group barrier (docs/scheduling-runtime.md "Abacus without the
 * group barrier"; the barrier mode's scenario is `reproduce adaptive`'s `rejectionLateMs`): a
 * query held behind its own service's running segment is answered `qos_violation` at the first
 * instant it becomes hopeless, even when no arrival or completion comes then. Virtual time on
 * `sim:a100`, nothing timed.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { driveUntilSettled, VirtualClock } from '../src/clock/index.ts';
import { nextInstantAfter } from '../src/clock/instant.ts';
import { SimDevice } from '../src/device/sim/index.ts';
import { artifactAt } from '../src/model/artifact.ts';
import { ModelRepository } from '../src/model/repository.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import type { Predictor } from '../src/predict/predictor.ts';
import { ServingRuntime, type RuntimeService } from '../src/runtime/runtime.ts';
import { createController } from '../src/schedule/index.ts';
import { measuredTablePredictor } from './helpers/sim-table-predictor.ts';

describe('abacus without the barrier rejects a held query on time (virtual clock)', () => {
  let spec: ModelSpec;
  let predictor: Predictor;
  beforeAll(async () => {
    spec = await new ModelRepository().zooSpec('resnet50');
    predictor = await measuredTablePredictor(new Map([[spec.name, spec]]), [1, 16].map((batch) => ({ model: spec.name, batch, seqLen: 0 })));
  }, 60_000);

  /** A batch-16 query of resnet50 launched at 0, then at 1 ms a batch-1 query of the same service with target `qos(P, solo)` (P: the long launch's decided latency). */
  async function scenario(deviceId: string, qos: (longDecidedMs: number, soloMs: number) => number) {
    const clock = new VirtualClock();
    const device = await SimDevice.create({ clock, id: deviceId, seed: 3 });
    const services: RuntimeService[] = [{ name: 'r', spec, qosTargetMs: 10_000, maxQueueLength: 100 }];
    await device.load([{ name: 'r', model: artifactAt('/nonexistent', spec) }]);
    const runtime = new ServingRuntime({ clock, device, controller: createController('abacus', { barrier: false }, predictor), services });
    const long = runtime.submit({ service: 'r', batch: 16, id: 'long' });
    await driveUntilSettled(clock, clock.sleep(1));
    const launched = runtime.groups[0]!;
    const soloMs = predictor.predict([[{ model: spec.name, start: 0, end: spec.operators.length, batch: 1, seqLen: 0 }]])[0]!;
    const arrivalMs = clock.now();
    const qosTargetMs = qos(launched.predictedMs!, soloMs);
    const short = await driveUntilSettled(clock, runtime.submit({ service: 'r', batch: 1, id: 'short', qosTargetMs }));
    await driveUntilSettled(clock, long);
    runtime.close();
    return { short, arrivalMs, qosTargetMs, soloMs, longDecidedMs: launched.predictedMs!, longEndMs: launched.launchMs + launched.measuredMs };
  }

  it('hopeless on arrival (it cannot start before the running segment ends as decided): answered at once', async () => {
    const r = await scenario('sim:a100', (p, solo) => solo + p / 2);
    expect(r.short.ok).toBe(false);
    expect(r.short.ok ? '' : r.short.reason).toBe('qos_violation');
    expect(r.short.record.endMs).toBe(r.arrivalMs);
  });

  it('kept on arrival, hopeless when the running segment overruns past its latest start: answered at that instant, not when the segment ends', async () => {
    // ×2 slower than predicted: the long segment runs 2P; the short one's latest start is 1.25P
    const r = await scenario('sim:a100:drift-2x@0ms', (p, solo) => 1.25 * p + solo - 1);
    const latestStartMs = r.arrivalMs + r.qosTargetMs - r.soloMs;
    expect(r.longEndMs).toBeGreaterThan(latestStartMs); // the overrun the case needs
    expect(r.short.ok).toBe(false);
    expect(r.short.ok ? '' : r.short.reason).toBe('qos_violation');
    expect(r.short.record.endMs).toBe(nextInstantAfter(latestStartMs));
  });
});
