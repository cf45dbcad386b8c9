/**
 * `abacus serve` with abacus without the group barrier and dynamic batching gets ready: its
 * warm-up queries carry a 600 s QoS target (so that no policy drops them), and the streams' hold
 * of a partial batch (`schedule/abacus/stream.ts` step 3b) once kept each of them until its
 * deadline − 12 full batches, so the server was not ready for about ten minutes per batch size.
 * sim:a100 on the wall clock, a fixed predictor (test/serve/helpers.ts).
 */
import { describe, expect, it } from 'vitest';
import { WallClock } from '../../src/clock/index.ts';
import { SimDevice } from '../../src/device/sim/index.ts';
import { artifactAt } from '../../src/model/artifact.ts';
import { resolveModelSpec } from '../../src/model/catalog.ts';
import { ModelRepository } from '../../src/model/repository.ts';
import { createController } from '../../src/schedule/index.ts';
import { RuntimeBackend, type ServedModel } from '../../src/serve/backend.ts';
import { ServeMetrics } from '../../src/serve/metrics.ts';
import { fixedPredictor } from '../helpers/fixed-predictor.ts';

describe('abacus without the barrier, dynamic batching on: the backend warms up and gets ready', () => {
  it('every warm-up query runs (none waits out its 600 s target for samples that never come); then requests are served', async () => {
    const spec = await resolveModelSpec(new ModelRepository(), 'resnet50-small');
    const served: ServedModel[] = [{ name: 'r', spec, qosTargetMs: 1000, maxQosMs: 10_000, batchSizes: [1, 2, 4], maxQueueLength: 100, batching: { maxBatchSize: 16, maxQueueDelayMs: 0, preferredBatchSizes: [] } }];
    const clock = new WallClock();
    const device = await SimDevice.create({ clock, id: 'sim:a100', seed: 1 });
    await device.load([{ name: 'r', model: artifactAt('/nonexistent', spec) }]);
    const metrics = new ServeMetrics({ models: ['r'], processMetrics: false, qosTargetsMs: [1000] });
    const backend = new RuntimeBackend({ models: served, platform: 'abacus_sim', metrics, serverVersion: '0.1.0' });
    const controller = createController('abacus', { barrier: false }, fixedPredictor([spec.name], 0.05));
    try {
      await backend.start({ clock, device, controller });
      expect(backend.isReady()).toBe(true);
      const out = await backend.infer({ modelName: 'r', requestId: 'after-warm-up', inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3, 64, 64], data: { kind: 'raw', bytes: new Uint8Array(3 * 64 * 64 * 4) } }] });
      expect(out.outputs['logits']?.dims[0]).toBe(1);
    } finally {
      await backend.shutdown(1000);
    }
  }, 60_000);
});
