/**
 * Shared setup of the warm-up and executor-memory benchmarks: one zoo model served by the
 * runtime backend on a real `ort` device (onnxruntime-node, this CPU), policy `triton` without
 * batching (no predictor to profile: every request runs alone, so its latency is the model's
 * at its shape plus the serving path), and synthetic requests built like a client's.
 */
import { performance } from 'node:perf_hooks';
import { WallClock } from '../src/clock/index.ts';
import { OrtDevice, type OrtDeviceOptions } from '../src/device/ort/index.ts';
import { resolveModelArtifact } from '../src/model/catalog.ts';
import { resolvedBoundary } from '../src/model/boundary.ts';
import { ModelRepository } from '../src/model/repository.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import { syntheticTensors } from '../src/model/synthetic.ts';
import { createController } from '../src/schedule/index.ts';
import { RuntimeBackend } from '../src/serve/backend.ts';
import type { InferRequest } from '../src/serve/inference.ts';
import { rawBytes, v2Datatype } from '../src/serve/tensors.ts';

export interface OrtServing {
  readonly backend: RuntimeBackend;
  readonly device: OrtDevice;
  readonly spec: ModelSpec;
  /** Time from `load` to ready (device warm-up + the backend's one query per batch size), ms. */
  readonly startMs: number;
  close(): Promise<void>;
}

/** Serve `model` (a zoo name, e.g. `resnet50-small`) as service `m` on a fresh OrtDevice. */
export async function openOrtServing(model: string, batchSizes: readonly number[], seqLens: readonly number[] | undefined, deviceOptions: OrtDeviceOptions): Promise<OrtServing> {
  const { artifact } = await resolveModelArtifact(new ModelRepository(), model);
  const spec = artifact.spec;
  const device = await OrtDevice.create(deviceOptions);
  const t0 = performance.now();
  await device.load([{ name: 'm', model: artifact, warmupShapes: batchSizes.flatMap((batchSize) => (seqLens ?? [0]).map((seqLen) => ({ batchSize, seqLen }))) }]);
  const backend = new RuntimeBackend({ models: [{ name: 'm', spec, qosTargetMs: 600_000, maxQosMs: 600_000, batchSizes, maxQueueLength: 1000 }], platform: 'onnxruntime_onnx' });
  await backend.start({ clock: new WallClock(), device, controller: createController('triton') });
  const startMs = performance.now() - t0;
  return {
    backend,
    device,
    spec,
    startMs,
    close: () => backend.shutdown(5000),
  };
}

let nextId = 0;

/** A request with seeded synthetic inputs at `batch` (and `seqLen` for a sequence model), as raw binary data. */
export function syntheticRequest(spec: ModelSpec, batch: number, seqLen: number, seed: number): InferRequest {
  const tensors = syntheticTensors(resolvedBoundary(spec, 0, batch, seqLen), seed);
  return {
    modelName: 'm',
    requestId: `bench-${nextId++}`,
    inputs: Object.entries(tensors).map(([name, t]) => ({ name, datatype: v2Datatype(t.dataType), shape: t.dims, data: { kind: 'raw' as const, bytes: rawBytes(t.data) } })),
    ...(seqLen > 0 ? { parameters: { seq_len: seqLen } } : {}),
  };
}
