/**
 * The serving side of dynamic batching, in-process: a `RuntimeBackend` with `batching` on the
 * `ort` CPU device (the 4-operator `skipnet` fixture: real outputs), driven by a small fusing
 * controller written here (FCFS over the queue heads; the head takes the queries behind it in
 * queue order up to `maxBatchSize` samples) as a stand-in for the batching policies that land
 * on other branches. It checks the wiring every fusing policy relies on:
 *
 * - concurrent requests are fused, and each answer equals that request's unbatched answer;
 * - `executed_batch_size` (response parameter, HTTP and gRPC) is the fused batch's samples, a
 *   client batch of b counting b; `queue_ms` / `compute_ms` / `operator_groups` are reported
 *   for fused requests too;
 * - `/metrics` `abacus_executed_batch_size{model}`: one observation per launched segment, so
 *   `_sum / _count` is the mean executed batch;
 * - a bad request is refused before it is submitted and never joins a batch.
 *
 * Fusion is made deterministic without timing: the device is gated, so the first request's
 * group is held on the device while the others queue behind it; the test releases the gate
 * once the queue holds every request. FIFO fusing then runs exactly 1, 16, 16, 16, 15.
 *
 * Tolerance: max |batched − alone| ≤ 1e-4 on logits of magnitude ~0.15 (the scale is printed in
 * the failure message). A fused batch runs the same ONNX operators on the same rows; only ORT's
 * choice of kernel blocking for a larger batch may change the float32 summation order (a 3×3
 * convolution sums 72 products per output here), which moves a result by a few ulp (~1e-8 at
 * this scale; on this CPU the answers were bit-identical). A row taken from another request,
 * by contrast, differs by 1e-2 or more (checked by mis-slicing the outputs: 0.015–0.034).
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WallClock } from '../../src/clock/index.ts';
import type { Device, GroupResult, Segment } from '../../src/device/device.ts';
import { OrtDevice } from '../../src/device/ort/index.ts';
import { createLogger } from '../../src/log.ts';
import type { ModelSpec } from '../../src/model/spec.ts';
import type { BatchingLimits, Decision, QueryController, ScheduleInput, WaitingQuery } from '../../src/schedule/controller.ts';
import { RuntimeBackend, type BackendEngine } from '../../src/serve/backend.ts';
import { GrpcInferenceClient, HttpInferenceClient, type ClientInferResult } from '../../src/serve/client/index.ts';
import { createGrpcServer } from '../../src/serve/grpc/server.ts';
import type { InferInput, InferResponse } from '../../src/serve/inference.ts';
import { ServeMetrics } from '../../src/serve/metrics.ts';
import { startServer, type RunningServer } from '../../src/serve/server.ts';
import type { HostTensor, TensorMap } from '../../src/tensor.ts';
import { maxAbsDiff, randomInputs } from '../device/conformance.ts';
import { buildSkipNet, makeFixtureDir } from '../fixtures/tiny-models.ts';
import { metricValue } from './child-serve.ts';

/** Max |batched − alone| allowed (see the file docs for why). */
const TOLERANCE = 1e-4;
const LIMITS: BatchingLimits = { maxBatchSize: 16, maxQueueDelayMs: 0, preferredBatchSizes: [] };
const CLIENTS = 64;
const SERVICE = 'skip';

/**
 * FCFS with fusion, whole queries: the earliest head of all queues runs to its last operator,
 * with the queries behind it in its queue that may fuse (waiting at operator 0, same `fuseKey`),
 * in queue order, while the samples stay ≤ `maxBatchSize`. Never rejects, predicts nothing.
 */
function fusingFcfs(): QueryController {
  const stats = { predictorCalls: 0, groupsScored: 0, searchRounds: 0, soloMemoHits: 0 };
  return {
    policy: 'fcfs',
    launchWhileBusy: false,
    decide(input: ScheduleInput): Decision {
      let queue: readonly WaitingQuery[] | undefined;
      for (const q of input.queues) if (q[0] !== undefined && (queue === undefined || q[0].arrivalMs < queue[0]!.arrivalMs)) queue = q;
      const head = queue?.[0];
      if (queue === undefined || head === undefined) return { group: [], rejected: [], stats };
      const fused: string[] = [];
      let samples = head.batch;
      if (head.batching !== undefined && head.nextOperator === 0) {
        for (const q of queue.slice(1)) {
          if (q.batching === undefined || q.nextOperator !== 0 || q.fuseKey !== head.fuseKey) continue;
          if (samples + q.batch > head.batching.maxBatchSize) break;
          samples += q.batch;
          fused.push(q.id);
        }
      }
      return { group: [{ queryId: head.id, service: head.service, start: head.nextOperator, end: head.operators, ...(fused.length > 0 ? { fused } : {}) }], rejected: [], stats };
    },
    observe() {},
  };
}

/** A device whose `runGroup` waits while the gate is held (the group then runs as usual). */
function gatedDevice(inner: Device): { device: Device; hold(): void; release(): void } {
  let gate: Promise<void> | undefined;
  let open: () => void = () => undefined;
  const device: Device = {
    id: inner.id,
    load: (services) => inner.load(services),
    runGroup: async (group: readonly Segment[]): Promise<GroupResult> => {
      if (gate !== undefined) await gate;
      return inner.runGroup(group);
    },
    releaseQuery: (service, queryId) => inner.releaseQuery(service, queryId),
    close: () => inner.close(),
  };
  return {
    device,
    hold: () => {
      gate ??= new Promise<void>((resolve) => (open = resolve));
    },
    release: () => {
      gate = undefined;
      open();
    },
  };
}

let cleanup: () => Promise<void>;
let spec: ModelSpec;
let ort: Device;
let gated: ReturnType<typeof gatedDevice>;
let metrics: ServeMetrics;
let backend: RuntimeBackend;
let server: RunningServer;

beforeAll(async () => {
  const fixture = await makeFixtureDir('abacus-batching-');
  cleanup = fixture.cleanup;
  const artifact = await buildSkipNet(path.join(fixture.dir, 'skipnet'));
  spec = artifact.spec;
  ort = await OrtDevice.create({ intraOpNumThreads: 1, spinning: false });
  await ort.load([{ name: SERVICE, model: artifact }]);
  gated = gatedDevice(ort);
  metrics = new ServeMetrics({ models: [SERVICE], processMetrics: false });
  backend = new RuntimeBackend({
    models: [{ name: SERVICE, spec, qosTargetMs: 60_000, maxQosMs: 600_000, batchSizes: [1, 2], maxQueueLength: 1000, batching: LIMITS }],
    platform: 'onnxruntime_onnx',
    metrics,
  });
  const engine: BackendEngine = { clock: new WallClock(), device: gated.device, controller: fusingFcfs() };
  server = await startServer({ backend, openEngine: () => Promise.resolve(engine), logger: createLogger({ defaultLevel: 'silent' }), metrics, host: '127.0.0.1', httpPort: 0, grpc: { port: 0, factory: createGrpcServer } });
  await server.ready;
}, 120_000);

afterAll(async () => {
  gated?.release();
  await server?.shutdown(2000);
  await cleanup?.();
});

/** `x` of `batch` random samples (seeded: distinct per seed). */
const inputsOf = (batch: number, seed: number): TensorMap => randomInputs(spec, batch, 0, seed);

function v2Input(x: HostTensor): InferInput {
  const data = x.data as Float32Array;
  const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  return { name: 'x', datatype: 'FP32', shape: [...x.dims], data: { kind: 'raw', bytes } };
}

const inferDirect = (x: HostTensor, id: string): Promise<InferResponse> => backend.infer({ modelName: SERVICE, requestId: id, id, inputs: [v2Input(x)] });

/** `_sum` and `_count` of the service's executed-batch histogram now. */
async function batchHistogram(): Promise<{ sum: number; count: number }> {
  const text = await metrics.text();
  return { sum: metricValue(text, `abacus_executed_batch_size_sum{model="${SERVICE}"}`), count: metricValue(text, `abacus_executed_batch_size_count{model="${SERVICE}"}`) };
}

/** Wait (polling, no time limit of its own: vitest's test timeout bounds it) until `n` queries wait or run. */
async function queueHolds(n: number): Promise<void> {
  for (;;) {
    if (metricValue(await metrics.text(), `abacus_queue_depth{model="${SERVICE}"}`) >= n) return;
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Each request's answer alone: one at a time, so nothing can fuse (checked: executed_batch_size = its batch). */
async function unbatched(inputs: readonly TensorMap[]): Promise<TensorMap[]> {
  const out: TensorMap[] = [];
  for (const [i, x] of inputs.entries()) {
    const r = await inferDirect(x['x']!, `alone-${i}`);
    expect(r.parameters.executed_batch_size).toBe(x['x']!.dims[0]);
    out.push(r.outputs);
  }
  return out;
}

function expectClose(got: TensorMap, want: TensorMap, what: string): void {
  const { diff, scale } = maxAbsDiff(got, want);
  expect(diff, `${what}: max |batched − alone| ${diff} (output scale ${scale})`).toBeLessThanOrEqual(TOLERANCE);
}

describe('dynamic batching through RuntimeBackend (ort skipnet, a fusing FCFS)', () => {
  it(`${CLIENTS} concurrent single-sample requests run as 1 + 16 + 16 + 16 + 15; each answer equals its unbatched answer`, async () => {
    const inputs = Array.from({ length: CLIENTS }, (_, i) => inputsOf(1, 1000 + i));
    const reference = await unbatched(inputs);
    const before = await batchHistogram();
    const statsBefore = backend.modelStatistics(SERVICE)[0]!;
    gated.hold();
    const answers = inputs.map((x, i) => inferDirect(x['x']!, `q${i}`));
    await queueHolds(CLIENTS);
    gated.release();
    const responses = await Promise.all(answers);
    const after = await batchHistogram();
    // one observation per launched segment: 5 segments carrying 64 samples
    expect({ sum: after.sum - before.sum, count: after.count - before.count }).toEqual({ sum: CLIENTS, count: 5 });
    expect(responses.map((r) => r.parameters.executed_batch_size)).toEqual([1, ...new Array<number>(CLIENTS - 1).fill(16).map((v, i) => (i >= 48 ? 15 : v))]);
    // Triton statistics: each fused batch is one execution, each request its own samples
    const stats = backend.modelStatistics(SERVICE)[0]!;
    expect({ inferences: stats.inference_count - statsBefore.inference_count, executions: stats.execution_count - statsBefore.execution_count }).toEqual({ inferences: CLIENTS, executions: 5 });
    const executionsOf = (size: number, s: typeof stats) => s.batch_stats.find((b) => b.batch_size === size)?.compute_infer.count ?? 0;
    expect([1, 15, 16].map((size) => executionsOf(size, stats) - executionsOf(size, statsBefore))).toEqual([1, 1, 3]);
    for (const [i, r] of responses.entries()) {
      expect(r.id).toBe(`q${i}`);
      expect(r.outputs['logits']!.dims).toEqual([1, 10]);
      expect(r.parameters.operator_groups).toBe(1);
      expect(r.parameters.compute_ms).toBeGreaterThan(0);
      expect(r.parameters.queue_ms).toBeGreaterThanOrEqual(0);
      expectClose(r.outputs, reference[i]!, `request ${i}`);
    }
  }, 120_000);

  it('a client batch of b samples counts b, gets its own b rows; a bad request is refused before it can join a batch', async () => {
    const inputs = [inputsOf(1, 1), inputsOf(2, 2), inputsOf(1, 3), inputsOf(2, 4)];
    const reference = await unbatched(inputs);
    const before = await batchHistogram();
    gated.hold();
    const first = inferDirect(inputsOf(1, 5)['x']!, 'first'); // launched alone and held on the device
    const answers = inputs.map((x, i) => inferDirect(x['x']!, `b${i}`));
    const bad = backend.infer({ modelName: SERVICE, requestId: 'bad', inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 4, 8, 9], data: { kind: 'raw', bytes: new Uint8Array(4 * 8 * 9 * 4) } }] });
    await expect(bad).rejects.toThrow(/model 'skip': input 'x': shape\[3\] is 9, the model needs 8/);
    await queueHolds(1 + inputs.length);
    gated.release();
    await first;
    const responses = await Promise.all(answers);
    expect(responses.map((r) => r.parameters.executed_batch_size)).toEqual([6, 6, 6, 6]);
    for (const [i, r] of responses.entries()) {
      expect(r.outputs['logits']!.dims).toEqual([inputs[i]!['x']!.dims[0], 10]);
      expectClose(r.outputs, reference[i]!, `request b${i}`);
    }
    const after = await batchHistogram();
    expect({ sum: after.sum - before.sum, count: after.count - before.count }).toEqual({ sum: 1 + 6, count: 2 });
  }, 120_000);

  it('over HTTP and gRPC: concurrent requests are fused and carry executed_batch_size; answers equal the unbatched ones', async () => {
    const http = new HttpInferenceClient(server.httpUrl, { binary: true });
    const grpc = new GrpcInferenceClient(`127.0.0.1:${server.grpcPort!}`);
    try {
      const n = 32;
      const inputs = Array.from({ length: n }, (_, i) => inputsOf(1, 2000 + i));
      const reference = await unbatched(inputs);
      const before = await batchHistogram();
      gated.hold();
      // even requests over HTTP, odd over gRPC
      const answers = inputs.map((x, i): Promise<ClientInferResult> => (i % 2 === 0 ? http : grpc).infer({ model: SERVICE, inputs: x, id: `c${i}` }));
      await queueHolds(n);
      gated.release();
      const results = await Promise.all(answers);
      const sizes: number[] = [];
      for (const [i, r] of results.entries()) {
        if (!r.ok) throw new Error(`request c${i} failed: ${r.code} ${r.message}`);
        expect(r.id).toBe(`c${i}`);
        const size = Number(r.serverParameters['executed_batch_size']);
        sizes.push(size);
        expectClose(r.outputs, reference[i]!, `${i % 2 === 0 ? 'HTTP' : 'gRPC'} request c${i}`);
      }
      // the first to arrive runs alone (held on the device); the other 31 queue behind it: 16 + 15
      expect(sizes.filter((s) => s === 1)).toHaveLength(1);
      expect(sizes.filter((s) => s === 16)).toHaveLength(16);
      expect(sizes.filter((s) => s === 15)).toHaveLength(15);
      expect(sizes.filter((_, i) => i % 2 === 1).some((s) => s > 1)).toBe(true); // gRPC requests were fused too
      const after = await batchHistogram();
      expect({ sum: after.sum - before.sum, count: after.count - before.count }).toEqual({ sum: n, count: 3 });
      const text = await (await fetch(`${server.httpUrl}/metrics`)).text();
      expect(text).toMatch(/# TYPE abacus_executed_batch_size histogram/);
      expect(text).toMatch(/abacus_executed_batch_size_bucket\{le="16",model="skip"\} \d+/);
    } finally {
      await http.close();
      await grpc.close();
    }
  }, 120_000);
});
