/** Test helpers for the serving layer: a sim:a100 backend on the wall clock with a fixed predictor. */
import { WallClock } from '../../src/clock/index.ts';
import { SimDevice } from '../../src/device/sim/index.ts';
import { artifactAt } from '../../src/model/artifact.ts';
import { resolveModelSpec } from '../../src/model/catalog.ts';
import { ModelRepository } from '../../src/model/repository.ts';
import type { ModelSpec } from '../../src/model/spec.ts';
import { createController } from '../../src/schedule/index.ts';
import { RuntimeBackend, type ServedModel } from '../../src/serve/backend.ts';
import { ServeMetrics } from '../../src/serve/metrics.ts';
import { fixedPredictor } from '../helpers/fixed-predictor.ts';

export interface SimModel {
  readonly name: string;
  readonly model: string;
  readonly qosTargetMs?: number;
  readonly maxQosMs?: number;
  readonly batchSizes?: readonly number[];
  readonly maxQueueLength?: number;
  /** Serve this spec instead of resolving `model` (a variant of a catalog model: other input shapes or datatypes). */
  readonly spec?: ModelSpec;
}

/** A started RuntimeBackend on `sim:a100` (wall clock), its metrics and device. */
export async function simBackend(models: readonly SimModel[], options: { policy?: string; policyParams?: Record<string, unknown>; start?: boolean } = {}) {
  const repo = new ModelRepository();
  const served: ServedModel[] = [];
  for (const m of models) {
    const spec = m.spec ?? (await resolveModelSpec(repo, m.model));
    const qosTargetMs = m.qosTargetMs ?? 1000;
    served.push({ name: m.name, spec, qosTargetMs, maxQosMs: m.maxQosMs ?? 10 * qosTargetMs, batchSizes: m.batchSizes ?? [1, 2, 4], maxQueueLength: m.maxQueueLength ?? 1000 });
  }
  const clock = new WallClock();
  const device = await SimDevice.create({ clock, id: 'sim:a100', seed: 1 });
  await device.load(served.map((m) => ({ name: m.name, model: artifactAt('/nonexistent', m.spec) })));
  const metrics = new ServeMetrics({ models: served.map((m) => m.name), processMetrics: false, qosTargetsMs: served.map((m) => m.qosTargetMs) });
  const backend = new RuntimeBackend({ models: served, platform: 'abacus_sim', metrics, serverVersion: '0.1.0' });
  const controller = createController(options.policy ?? 'fcfs', options.policyParams ?? {}, fixedPredictor([...new Set(served.map((m) => m.spec.name))], 0.05));
  const engine = { clock, device, controller };
  if (options.start ?? true) await backend.start(engine);
  return { backend, metrics, device, engine, served };
}
