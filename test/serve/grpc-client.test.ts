import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createInferenceClient, GrpcInferenceClient, InferenceClientError } from '../../src/serve/client/index.ts';
import { createGrpcServer, type GrpcInferenceServer } from '../../src/serve/grpc/server.ts';
import type { HostTensor } from '../../src/tensor.ts';
import { BIG_INT64, FAKE_MODELS, FakeBackend } from './fake-backend.ts';

const x: HostTensor = { dataType: 'float32', dims: [2, 4], data: Float32Array.from([1, 2, 3, 4, 5, 6, 7, 8.5]) };

describe.each(['raw', 'typed'] as const)('GrpcInferenceClient against the gRPC server (%s outputs)', (outputContents) => {
  const backend = new FakeBackend();
  let server: GrpcInferenceServer;
  let client: GrpcInferenceClient;
  let port: number;

  beforeAll(async () => {
    server = createGrpcServer(backend, { outputContents });
    port = await server.listen('127.0.0.1', 0);
    client = new GrpcInferenceClient(`grpc://127.0.0.1:${port}`);
  });
  afterAll(async () => {
    await client.close();
    await server.close(1000);
  });

  it('infers with raw inputs, qos_ms as a number, id echoed, server parameters', async () => {
    const result = await client.infer({ model: 'm', inputs: { x }, qosMs: 12.5, id: 'q1' });
    expect(backend.requests.at(-1)!.parameters).toEqual({ qos_ms: 12.5 });
    expect(backend.requests.at(-1)!.inputs[0]!.data.kind).toBe('raw');
    if (!result.ok) throw new Error(result.message);
    expect(result.id).toBe('q1');
    expect(Object.keys(result.outputs)).toEqual(['y', 'idx']);
    expect(result.outputs['y']!.dims).toEqual([2, 4]);
    expect(Array.from(result.outputs['y']!.data as Float32Array)).toEqual([2, 4, 6, 8, 10, 12, 14, 17]);
    expect(Array.from(result.outputs['idx']!.data as BigInt64Array)).toEqual([BIG_INT64, BIG_INT64 + 1n]);
    expect(result.serverParameters).toEqual({ queue_ms: 0.25, compute_ms: 1.5, operator_groups: 2, executed_batch_size: 8 });
    const integerQos = await client.infer({ model: 'm', inputs: { x }, qosMs: 30 });
    expect(integerQos.ok).toBe(true);
    expect(backend.requests.at(-1)!.parameters).toEqual({ qos_ms: 30 });
  });

  it('keeps INT64 beyond 2^53 lossless and honours an outputs selection', async () => {
    const values = [BIG_INT64, -(2n ** 63n), 2n ** 63n - 2n, 7n];
    const result = await client.infer({ model: 'i64', inputs: { a: { dataType: 'int64', dims: [2, 2], data: BigInt64Array.from(values) } } });
    if (!result.ok) throw new Error(result.message);
    expect(Array.from(result.outputs['b']!.data as BigInt64Array)).toEqual([BIG_INT64 + 1n, -(2n ** 63n) + 1n, 2n ** 63n - 1n, 8n]);
    const selected = await client.infer({ model: 'm', inputs: { x }, outputs: ['idx'] });
    expect(selected.ok && Object.keys(selected.outputs)).toEqual(['idx']);
  });

  it('reports each serving error with its status and code', async () => {
    for (const code of ['bad_request', 'model_not_found', 'qos_violation', 'overloaded', 'not_ready', 'device_failure', 'internal'] as const) {
      const result = await client.infer({ model: 'm', inputs: { x }, parameters: { fake_error: code } });
      expect(result.ok).toBe(false);
      if (!result.ok) expect([result.code, result.message]).toEqual([code, code === 'internal' ? 'internal error; see the server log' : expect.stringContaining(`fake ${code}`)]);
    }
    const unknown = await client.infer({ model: 'nope', inputs: { x } });
    expect(unknown).toMatchObject({ ok: false, status: 5, code: 'model_not_found' });
  });

  it('answers ready and model metadata; metadata errors throw', async () => {
    expect(await client.ready()).toBe(true);
    expect(await client.modelMetadata('m')).toEqual(FAKE_MODELS[0]);
    await expect(client.modelMetadata('nope')).rejects.toSatisfy((e) => e instanceof InferenceClientError && e.code === 'model_not_found');
  });

  it('cancels through the request signal', async () => {
    const controller = new AbortController();
    const arrived = backend.nextRequest();
    const pending = client.infer({ model: 'm', inputs: { x }, parameters: { fake_delay_ms: 10_000 }, signal: controller.signal });
    const request = await arrived;
    controller.abort();
    expect(await pending).toMatchObject({ ok: false, code: 'transport', status: 1 });
    await expect.poll(() => request.signal?.aborted).toBe(true);
  });
});

describe('client transport failures and the factory', () => {
  it('reports transport when nothing listens, and ready() is false', async () => {
    const server = createGrpcServer(new FakeBackend());
    const port = await server.listen('127.0.0.1', 0);
    await server.close(0);
    const client = createInferenceClient(`grpc://127.0.0.1:${port}`, { timeoutMs: 2000 });
    const result = await client.infer({ model: 'm', inputs: { x } });
    expect(result).toMatchObject({ ok: false, code: 'transport' });
    expect(await client.ready()).toBe(false);
    await client.close();
  });

  it('picks the protocol from the URL and rejects other schemes', () => {
    expect(createInferenceClient('grpc://127.0.0.1:1').constructor.name).toBe('GrpcInferenceClient');
    expect(createInferenceClient('http://127.0.0.1:1').constructor.name).toBe('HttpInferenceClient');
    expect(() => createInferenceClient('ftp://x:1')).toThrow(TypeError);
    expect(() => createInferenceClient('127.0.0.1:8000')).toThrow(TypeError);
    expect(() => createInferenceClient('grpc://127.0.0.1')).toThrow(TypeError);
  });
});
