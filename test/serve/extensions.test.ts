/**
 * Triton's model configuration and statistics extensions and KServe's model list, over HTTP
 * (`app.inject`) and gRPC (a grpc-js client on `grpc_service.proto`).
 *
 * - Fake backend (`fake-backend.ts`): the routes, the gRPC calls, 404 / NOT_FOUND, and that
 *   `GET /v2/models/stats` is every model's statistics, not a model named `stats`. The fake
 *   records fixed times (2 ms latency, 0.25 ms queue, 1.5 ms compute), so ns values are exact.
 * - `RuntimeBackend` on sim:a100: the configuration derived from the model spec (batch dim
 *   dropped, `max_batch_size` the largest served batch size, -1 for the sequence axis,
 *   `dynamic_batching` from the service's limits) and statistics counted by hand from the
 *   requests sent (counts exact; durations only checked > 0 or = 0, never against wall time).
 */
import * as grpc from '@grpc/grpc-js';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resolveModelSpec } from '../../src/model/catalog.ts';
import { ModelRepository } from '../../src/model/repository.ts';
import { RuntimeBackend, SERVER_EXTENSIONS } from '../../src/serve/backend.ts';
import { createGrpcServer, type GrpcInferenceServer } from '../../src/serve/grpc/server.ts';
import { loadInferenceService, type ModelStatisticsResponseMessage } from '../../src/serve/grpc/proto.ts';
import { createHttpApp } from '../../src/serve/http/app.ts';
import type { InferInput, ModelStatistics } from '../../src/serve/inference.ts';
import { FakeBackend } from './fake-backend.ts';
import { simBackend } from './helpers.ts';

type Client = grpc.Client & Record<string, (req: unknown, ...rest: unknown[]) => grpc.ClientUnaryCall>;
type Json = Record<string, unknown>;

function call<T>(client: Client, method: string, request: unknown): Promise<T> {
  return new Promise((resolve, reject) => {
    client[method]!(request, (error: grpc.ServiceError | null, response: T) => (error !== null ? reject(error) : resolve(response)));
  });
}

const ZERO = { count: 0, ns: 0 };

describe('model configuration, statistics and model list over a fake backend', () => {
  const backend = new FakeBackend();
  let app: FastifyInstance;
  let server: GrpcInferenceServer;
  let client: Client;

  beforeAll(async () => {
    app = createHttpApp(backend);
    server = createGrpcServer(backend);
    const port = await server.listen('127.0.0.1', 0);
    const { Client } = loadInferenceService();
    client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure()) as unknown as Client;
  });
  afterAll(async () => {
    client.close();
    await server.close(1000);
    await app.close();
  });

  it('GET /v2/models lists the served models', async () => {
    const r = await app.inject({ method: 'GET', url: '/v2/models' });
    expect(r.statusCode).toBe(200);
    expect(r.json()).toEqual({ models: ['m', 'i64'] });
  });

  it('answers the model configuration over HTTP (with and without a version) and gRPC', async () => {
    const want = {
      name: 'm',
      platform: 'abacus_fake',
      max_batch_size: 8,
      input: [{ name: 'x', data_type: 'TYPE_FP32', dims: [4] }],
      output: [
        { name: 'y', data_type: 'TYPE_FP32', dims: [4] },
        { name: 'idx', data_type: 'TYPE_INT64', dims: [1] },
      ],
    };
    for (const url of ['/v2/models/m/config', '/v2/models/m/versions/1/config']) {
      const r = await app.inject({ method: 'GET', url });
      expect(r.statusCode, url).toBe(200);
      expect(r.json(), url).toEqual(want);
    }
    const g = await call<{ config: Json }>(client, 'ModelConfig', { name: 'm' });
    // int64 dims decode as decimal strings (proto.ts: longs: String); no dynamic batching (an unset oneof member is left out)
    expect(g.config).toEqual({ ...want, input: [{ name: 'x', data_type: 'TYPE_FP32', dims: ['4'] }], output: [{ name: 'y', data_type: 'TYPE_FP32', dims: ['4'] }, { name: 'idx', data_type: 'TYPE_INT64', dims: ['1'] }] });
  });

  it('answers 404 / NOT_FOUND for an unknown model or version', async () => {
    for (const url of ['/v2/models/nope/config', '/v2/models/m/versions/2/config', '/v2/models/nope/stats', '/v2/models/m/versions/2/stats']) {
      const r = await app.inject({ method: 'GET', url });
      expect(r.statusCode, url).toBe(404);
      expect(r.json<Json>()['error'], url).toMatch(/not served/);
    }
    for (const [method, request] of [['ModelConfig', { name: 'nope' }], ['ModelConfig', { name: 'm', version: '2' }], ['ModelStatistics', { name: 'nope' }], ['ModelStatistics', { version: '7' }]] as const) {
      const err = await call(client, method, request).then(() => undefined, (e: unknown) => e as grpc.ServiceError);
      expect(err?.code, `${method} ${JSON.stringify(request)}`).toBe(grpc.status.NOT_FOUND);
    }
  });

  it('counts requests in the statistics: HTTP /v2/models/stats is every model, not a model named "stats"; gRPC decodes the same numbers', async () => {
    const before = await app.inject({ method: 'GET', url: '/v2/models/stats' });
    expect(before.statusCode).toBe(200);
    expect(before.json<{ model_stats: ModelStatistics[] }>().model_stats.map((s) => [s.name, s.version, s.inference_count])).toEqual([['m', '1', 0], ['i64', '1', 0]]);

    const x = (batch: number): InferInput => ({ name: 'x', datatype: 'FP32', shape: [batch, 4], data: { kind: 'json', values: new Array(batch * 4).fill(1) } });
    await backend.infer({ modelName: 'm', requestId: 'a', inputs: [x(2)] });
    await backend.infer({ modelName: 'm', requestId: 'b', inputs: [x(3)] });
    await backend.infer({ modelName: 'm', requestId: 'c', inputs: [x(2)] });
    await expect(backend.infer({ modelName: 'm', requestId: 'd', inputs: [x(1)], parameters: { fake_error: 'qos_violation' } })).rejects.toThrow(/fake qos_violation/);

    const want: ModelStatistics = {
      name: 'm',
      version: '1',
      last_inference: 1000,
      inference_count: 7,
      execution_count: 3,
      inference_stats: { success: { count: 3, ns: 6_000_000 }, fail: { count: 1, ns: 2_000_000 }, queue: { count: 3, ns: 750_000 }, compute_input: ZERO, compute_infer: { count: 3, ns: 4_500_000 }, compute_output: ZERO, cache_hit: ZERO, cache_miss: ZERO },
      batch_stats: [
        { batch_size: 2, compute_input: ZERO, compute_infer: { count: 2, ns: 3_000_000 }, compute_output: ZERO },
        { batch_size: 3, compute_input: ZERO, compute_infer: { count: 1, ns: 1_500_000 }, compute_output: ZERO },
      ],
    };
    for (const url of ['/v2/models/m/stats', '/v2/models/m/versions/1/stats']) {
      const r = await app.inject({ method: 'GET', url });
      expect(r.statusCode, url).toBe(200);
      expect(r.json(), url).toEqual({ model_stats: [want] });
    }
    const all = (await app.inject({ method: 'GET', url: '/v2/models/stats' })).json<{ model_stats: ModelStatistics[] }>().model_stats;
    expect(all.map((s) => s.name)).toEqual(['m', 'i64']);
    expect(all[0]).toEqual(want);

    const g = await call<ModelStatisticsResponseMessage>(client, 'ModelStatistics', { name: 'm' });
    // uint64 decodes as decimal strings
    const str = (d: { count: number; ns: number }) => ({ count: String(d.count), ns: String(d.ns) });
    expect(g.model_stats).toEqual([
      {
        name: 'm',
        version: '1',
        last_inference: '1000',
        inference_count: '7',
        execution_count: '3',
        inference_stats: Object.fromEntries(Object.entries(want.inference_stats).map(([k, v]) => [k, str(v)])),
        batch_stats: want.batch_stats.map((b) => ({ batch_size: String(b.batch_size), compute_input: str(b.compute_input), compute_infer: str(b.compute_infer), compute_output: str(b.compute_output) })),
      },
    ]);
    const gAll = await call<ModelStatisticsResponseMessage>(client, 'ModelStatistics', {});
    expect(gAll.model_stats?.map((s) => s.name)).toEqual(['m', 'i64']);
  });

  it('lists model_configuration and statistics among the extensions of the real backend', () => {
    expect(SERVER_EXTENSIONS).toEqual(['binary_tensor_data', 'classification', 'model_configuration', 'model_repository', 'statistics']);
  });
});

describe('model configuration and statistics of RuntimeBackend (sim:a100)', () => {
  let b: Awaited<ReturnType<typeof simBackend>>;
  beforeAll(async () => {
    b = await simBackend([
      { name: 'resnet', model: 'resnet50-small', qosTargetMs: 60_000, batchSizes: [1, 2, 4] },
      { name: 'bert', model: 'bert-small', qosTargetMs: 60_000, batchSizes: [1, 2] },
    ]);
  }, 60_000);
  afterAll(async () => {
    await b.backend.shutdown(2000);
  });

  const image = (batch: number): InferInput => ({ name: 'input', datatype: 'FP32', shape: [batch, 3, 64, 64], data: { kind: 'raw', bytes: new Uint8Array(batch * 3 * 64 * 64 * 4) } });

  it('derives the configuration from the model: no batch dim, max_batch_size the largest batch size, -1 for the sequence axis', () => {
    const backend = b.backend;
    expect(backend.serverMetadata().extensions).toEqual(['binary_tensor_data', 'classification', 'model_configuration', 'model_repository', 'statistics']);
    expect(backend.modelList()).toEqual(['resnet', 'bert']);
    const resnet = backend.modelConfig('resnet');
    expect(resnet).toMatchObject({ name: 'resnet', platform: 'abacus_sim', max_batch_size: 4, input: [{ name: 'input', data_type: 'TYPE_FP32', dims: [3, 64, 64] }] });
    expect(resnet.output.map((o) => o.data_type)).toEqual(['TYPE_FP32']);
    expect(resnet.dynamic_batching).toBeUndefined();
    const bert = backend.modelConfig('bert', '1');
    expect(bert.max_batch_size).toBe(2);
    expect(bert.input).toEqual([
      { name: 'input_ids', data_type: 'TYPE_INT64', dims: [-1] },
      { name: 'attention_mask', data_type: 'TYPE_INT64', dims: [-1] },
    ]);
    expect(() => backend.modelConfig('resnet', '3')).toThrow(/no version '3'/);
  });

  it('reports dynamic_batching with the delay in µs when the service batches, and max_batch_size as the largest batch executed', async () => {
    const spec = await resolveModelSpec(new ModelRepository(), 'resnet50-small');
    const backend = new RuntimeBackend({
      models: [{ name: 'r', spec, qosTargetMs: 100, maxQosMs: 1000, batchSizes: [1, 2], maxQueueLength: 10, batching: { maxBatchSize: 8, maxQueueDelayMs: 0.5, preferredBatchSizes: [4, 8] } }],
      platform: 'abacus_sim',
    });
    expect(backend.modelConfig('r').dynamic_batching).toEqual({ preferred_batch_size: [4, 8], max_queue_delay_microseconds: 500 });
    // requests carry 1 or 2 samples; fused batches up to 8 run
    expect(backend.modelConfig('r').max_batch_size).toBe(8);
    expect(backend.modelConfig('r').input[0]!.dims).toEqual([3, 64, 64]); // without the batch dim, as Triton's
    const server = createGrpcServer(backend);
    const port = await server.listen('127.0.0.1', 0);
    const { Client } = loadInferenceService();
    const client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure()) as unknown as Client;
    try {
      const g = await call<{ config: Json }>(client, 'ModelConfig', { name: 'r', version: '1' });
      expect(g.config).toMatchObject({ name: 'r', max_batch_size: 8, scheduling_choice: 'dynamic_batching', dynamic_batching: { preferred_batch_size: [4, 8], max_queue_delay_microseconds: '500' } });
    } finally {
      client.close();
      await server.close(1000);
    }
  });

  it('reports no dynamic_batching and the request batch sizes when the policy runs every request alone', async () => {
    const spec = await resolveModelSpec(new ModelRepository(), 'resnet50-small');
    const backend = new RuntimeBackend({
      models: [{ name: 'r', spec, qosTargetMs: 100, maxQosMs: 1000, batchSizes: [1, 2], maxQueueLength: 10, batching: { maxBatchSize: 8, maxQueueDelayMs: 0.5, preferredBatchSizes: [4, 8] } }],
      platform: 'abacus_sim',
      policyFuses: false,
    });
    expect(backend.modelConfig('r').dynamic_batching).toBeUndefined();
    expect(backend.modelConfig('r').max_batch_size).toBe(2);
  });

  it('counts samples, executions per batch size, successes and failures; unmeasured fields are 0', async () => {
    const backend = b.backend;
    const [zero] = backend.modelStatistics('resnet');
    expect(zero).toMatchObject({ inference_count: 0, execution_count: 0, last_inference: 0, batch_stats: [] });
    for (const batch of [1, 4, 4, 2]) await backend.infer({ modelName: 'resnet', requestId: `r${batch}`, inputs: [image(batch)] });
    await expect(backend.infer({ modelName: 'resnet', requestId: 'bad', inputs: [image(3)] })).rejects.toThrow(/batch size 3/);
    await expect(backend.infer({ modelName: 'nope', requestId: 'gone', inputs: [] })).rejects.toThrow(/not served/);

    const [s] = backend.modelStatistics('resnet');
    expect(s).toBeDefined();
    expect(s!.inference_count).toBe(11);
    expect(s!.execution_count).toBe(4);
    expect(s!.last_inference).toBeGreaterThan(0);
    const st = s!.inference_stats;
    expect([st.success.count, st.fail.count, st.queue.count, st.compute_infer.count]).toEqual([4, 1, 4, 4]);
    expect(st.success.ns).toBeGreaterThan(0);
    expect(st.compute_infer.ns).toBeGreaterThan(0);
    expect(Number.isInteger(st.success.ns) && Number.isInteger(st.queue.ns)).toBe(true);
    for (const k of ['compute_input', 'compute_output', 'cache_hit', 'cache_miss'] as const) expect(st[k], k).toEqual(ZERO);
    expect(s!.batch_stats.map((x) => [x.batch_size, x.compute_infer.count])).toEqual([[1, 1], [2, 1], [4, 2]]);
    for (const x of s!.batch_stats) expect([x.compute_input, x.compute_output, x.compute_infer.ns > 0]).toEqual([ZERO, ZERO, true]);
    // warm-up queries are not counted; the other model is untouched
    expect(backend.modelStatistics('bert')[0]).toMatchObject({ inference_count: 0, execution_count: 0 });
    expect(backend.modelStatistics().map((m) => m.name)).toEqual(['resnet', 'bert']);
  });
});
