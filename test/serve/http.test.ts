/**
 * The KServe v2 HTTP app (serve/http/) through `app.inject`: against a sim:a100 backend with
 * small models (JSON and binary requests, binary outputs, outputs selection, id echo, status
 * codes, metrics) and against a fake backend (INT64 beyond 2^53 both ways, internal errors).
 */
import { deflateSync, gzipSync } from 'node:zlib';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHttpApp } from '../../src/serve/http/app.ts';
import { parseJsonLossless } from '../../src/serve/http/codec.ts';
import { ServeError, type InferenceBackend, type InferRequest, type InferResponse, type ModelConfig, type ModelMetadata, type ModelStatistics } from '../../src/serve/inference.ts';
import type { RuntimeBackend } from '../../src/serve/backend.ts';
import type { Device, DeviceService, GroupResult, Segment } from '../../src/device/device.ts';
import { simBackend } from './helpers.ts';
import { ModelControlOff } from './model-control-off.ts';

let backend: RuntimeBackend;
let app: FastifyInstance;
beforeAll(async () => {
  const b = await simBackend([
    { name: 'resnet', model: 'resnet50-small', qosTargetMs: 500, batchSizes: [1, 2] },
    { name: 'bert', model: 'bert-small', qosTargetMs: 500, batchSizes: [1, 2] },
  ]);
  backend = b.backend;
  app = createHttpApp(backend, { metrics: b.metrics, maxBodyBytes: 1 << 20 });
  await app.ready();
}, 60_000);
afterAll(async () => {
  await app.close();
  await backend.shutdown(2000);
});

const IMAGE = 3 * 64 * 64;
type Json = Record<string, unknown>;

/** A Triton-style binary request body: JSON header then the tensors' bytes. */
function binaryBody(header: unknown, ...tensors: Uint8Array[]): { body: Buffer; headerLength: number } {
  const json = Buffer.from(JSON.stringify(header));
  return { body: Buffer.concat([json, ...tensors]), headerLength: json.byteLength };
}

function floatBytes(values: ArrayLike<number>): Uint8Array {
  return new Uint8Array(Float32Array.from(values).buffer);
}

describe('KServe v2 HTTP: health and metadata', () => {
  it('GET /v2, live, ready, model metadata and readiness (with and without versions)', async () => {
    const meta = await app.inject({ method: 'GET', url: '/v2' });
    expect(meta.statusCode).toBe(200);
    expect(meta.json()).toEqual({ name: 'abacus', version: '0.1.0', extensions: ['binary_tensor_data', 'classification', 'model_configuration', 'model_repository', 'statistics'] });
    expect((await app.inject('/v2/health/live')).json()).toEqual({ live: true });
    const ready = await app.inject('/v2/health/ready');
    expect([ready.statusCode, ready.json()]).toEqual([200, { ready: true }]);
    const model = await app.inject('/v2/models/resnet');
    expect(model.json()).toEqual({ name: 'resnet', versions: ['1'], platform: 'abacus_sim', inputs: [{ name: 'input', datatype: 'FP32', shape: [-1, 3, 64, 64] }], outputs: [{ name: 'logits', datatype: 'FP32', shape: [-1, 1000] }], state: 'READY', reason: '' });
    expect((await app.inject('/v2/models/resnet/versions/1')).json()).toEqual(model.json());
    expect((await app.inject('/v2/models/bert/ready')).json()).toEqual({ name: 'bert', ready: true });
    expect((await app.inject('/v2/models/bert/versions/1/ready')).statusCode).toBe(200);
    const missing = await app.inject('/v2/models/nope');
    expect([missing.statusCode, missing.json()]).toEqual([404, { error: "model 'nope' is not served here (served: resnet, bert)" }]);
    expect((await app.inject('/v2/models/resnet/versions/2/ready')).statusCode).toBe(404);
    const route = await app.inject('/v3/whatever');
    expect(route.statusCode).toBe(404);
    expect(route.json<Json>()['error']).toMatch(/no route GET \/v3\/whatever/);
  });

  it('an unstarted backend is live but not ready: ready 400, infer 503', async () => {
    const b = await simBackend([{ name: 'r', model: 'resnet50-small' }], { start: false });
    const cold = createHttpApp(b.backend);
    try {
      const ready = await cold.inject('/v2/health/ready');
      expect([ready.statusCode, ready.json()]).toEqual([400, { ready: false }]);
      expect((await cold.inject('/v2/models/r/ready')).json()).toEqual({ name: 'r', ready: false });
      const infer = await cold.inject({ method: 'POST', url: '/v2/models/r/infer', payload: { inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3, 64, 64], data: new Array(IMAGE).fill(0) }] } });
      expect(infer.statusCode).toBe(503);
      expect(infer.json<Json>()['error']).toMatch(/not_ready: .*warming up/);
    } finally {
      await cold.close();
      await b.backend.shutdown(500);
    }
  });
});

describe('KServe v2 HTTP: inference', () => {
  it('JSON request → JSON response: id echoed, outputs, parameters; nested data and the version route', async () => {
    const res = await app.inject({
      method: 'POST',
      url: '/v2/models/resnet/infer',
      headers: { 'content-type': 'application/json', 'x-request-id': 'trace-42' },
      payload: { id: 'my-id', inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3, 64, 64], data: new Array(IMAGE).fill(0.5) }] },
    });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.headers['content-type']).toMatch(/application\/json/);
    expect(res.headers['x-request-id']).toBe('trace-42');
    const body = res.json<Json>();
    expect(body).toMatchObject({ model_name: 'resnet', model_version: '1', id: 'my-id' });
    const outputs = body['outputs'] as Json[];
    expect(outputs).toHaveLength(1);
    expect(outputs[0]).toMatchObject({ name: 'logits', datatype: 'FP32', shape: [1, 1000] });
    expect((outputs[0]!['data'] as number[]).length).toBe(1000);
    const params = body['parameters'] as Json;
    expect(Object.keys(params).sort()).toEqual(['compute_ms', 'executed_batch_size', 'operator_groups', 'queue_ms']);
    expect(params['operator_groups']).toBeGreaterThanOrEqual(1);
    expect(params['executed_batch_size']).toBe(1);

    const nested = Array.from({ length: 2 }, () => Array.from({ length: 8 }, (_, j) => j));
    const bert = await app.inject({
      method: 'POST',
      url: '/v2/models/bert/versions/1/infer',
      payload: {
        inputs: [
          { name: 'input_ids', datatype: 'INT64', shape: [2, 8], data: nested },
          { name: 'attention_mask', datatype: 'INT64', shape: [2, 8], data: nested.flat().map(() => 1) },
        ],
        outputs: [{ name: 'last_hidden_state' }],
        parameters: { qos_ms: 1000 },
      },
    });
    expect(bert.statusCode, bert.body).toBe(200);
    const out = (bert.json<Json>()['outputs'] as Json[])[0]!;
    expect(out['shape']).toEqual([2, 8, 256]);
    expect((out['data'] as number[]).length).toBe(2 * 8 * 256);
  });

  it('binary tensor data extension: binary inputs, a binary output, Inference-Header-Content-Length both ways', async () => {
    const { body, headerLength } = binaryBody(
      { inputs: [{ name: 'input', datatype: 'FP32', shape: [2, 3, 64, 64], parameters: { binary_data_size: 2 * IMAGE * 4 } }], outputs: [{ name: 'logits', parameters: { binary_data: true } }] },
      floatBytes(new Array(2 * IMAGE).fill(1)),
    );
    const res = await app.inject({ method: 'POST', url: '/v2/models/resnet/infer', headers: { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(headerLength) }, payload: body });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.headers['content-type']).toBe('application/octet-stream');
    const jsonLength = Number(res.headers['inference-header-content-length']);
    const raw = res.rawPayload;
    const header = JSON.parse(raw.subarray(0, jsonLength).toString('utf8')) as Json;
    expect(header['outputs']).toEqual([{ name: 'logits', datatype: 'FP32', shape: [2, 1000], parameters: { binary_data_size: 8000 } }]);
    expect(raw.byteLength - jsonLength).toBe(8000);
    expect(Number(res.headers['content-length'])).toBe(raw.byteLength);
    // sim outputs are zeros
    expect(new Float32Array(raw.buffer.slice(raw.byteOffset + jsonLength, raw.byteOffset + raw.byteLength)).every((x) => x === 0)).toBe(true);
  });

  it('binary_data_output on the request; mixed JSON and binary inputs; JSON outputs otherwise', async () => {
    const ids = new BigInt64Array(8).fill(5n);
    const { body, headerLength } = binaryBody(
      {
        parameters: { binary_data_output: true },
        inputs: [
          { name: 'input_ids', datatype: 'INT64', shape: [1, 8], parameters: { binary_data_size: 64 } },
          { name: 'attention_mask', datatype: 'INT64', shape: [1, 8], data: [1, 1, 1, 1, 1, 1, 1, 1] },
        ],
      },
      new Uint8Array(ids.buffer),
    );
    const res = await app.inject({ method: 'POST', url: '/v2/models/bert/infer', headers: { 'inference-header-content-length': String(headerLength) }, payload: body });
    expect(res.statusCode, res.body).toBe(200);
    const jsonLength = Number(res.headers['inference-header-content-length']);
    expect(res.rawPayload.byteLength - jsonLength).toBe(8 * 256 * 4);
  });

  it('raw binary request (Inference-Header-Content-Length: 0): batch 1 of the only input, binary outputs', async () => {
    const res = await app.inject({ method: 'POST', url: '/v2/models/resnet/infer', headers: { 'content-type': 'application/octet-stream', 'inference-header-content-length': '0' }, payload: Buffer.from(floatBytes(new Array(IMAGE).fill(0))) });
    expect(res.statusCode, res.body).toBe(200);
    const jsonLength = Number(res.headers['inference-header-content-length']);
    expect(res.rawPayload.byteLength - jsonLength).toBe(4000);
    const two = await app.inject({ method: 'POST', url: '/v2/models/bert/infer', headers: { 'inference-header-content-length': '0' }, payload: Buffer.alloc(64) });
    expect(two.statusCode).toBe(400);
    expect(two.json<Json>()['error']).toMatch(/needs a model with one input; this one has 2/);
  });

  const infer = (url: string, payload: string | Buffer, headers: Record<string, string> = { 'content-type': 'application/json' }) => app.inject({ method: 'POST', url, headers, payload });
  const okImage = JSON.stringify({ inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3, 64, 64], data: new Array(IMAGE).fill(0) }] });
  const errorCases: [string, () => ReturnType<typeof infer>, number, RegExp][] = [
    ['bad JSON', () => infer('/v2/models/resnet/infer', '{"inputs": ['), 400, /model 'resnet': the request body is not valid JSON/],
    ['empty body', () => infer('/v2/models/resnet/infer', ''), 400, /the request has no body/],
    ['not an object', () => infer('/v2/models/resnet/infer', '[1,2]'), 400, /the request must be a JSON object/],
    ['no inputs', () => infer('/v2/models/resnet/infer', '{"inputs": []}'), 400, /inputs must be a non-empty list/],
    ['id not a string', () => infer('/v2/models/resnet/infer', '{"id": 5, "inputs": [{}]}'), 400, /id must be a string, got 5/],
    ['datatype missing', () => infer('/v2/models/resnet/infer', '{"inputs": [{"name": "input", "shape": [1]}]}'), 400, /input 'input': datatype must be a string/],
    ['data missing', () => infer('/v2/models/resnet/infer', '{"inputs": [{"name": "input", "datatype": "FP32", "shape": [1,3,64,64]}]}'), 400, /input 'input': data is missing/],
    ['negative dim', () => infer('/v2/models/resnet/infer', '{"inputs": [{"name": "input", "datatype": "FP32", "shape": [-1,3,64,64], "data": []}]}'), 400, /shape\[0\] must be a non-negative integer, got -1/],
    ['huge dim', () => infer('/v2/models/resnet/infer', '{"inputs": [{"name": "input", "datatype": "FP32", "shape": [99999999999999999999,3,64,64], "data": []}]}'), 400, /shape\[0\] must be a non-negative integer, got 99999999999999999999/],
    ['unknown datatype', () => infer('/v2/models/resnet/infer', '{"inputs": [{"name": "input", "datatype": "FLOAT", "shape": [1,3,64,64], "data": []}]}'), 400, /unknown datatype "FLOAT"/],
    ['count mismatch', () => infer('/v2/models/resnet/infer', '{"inputs": [{"name": "input", "datatype": "FP32", "shape": [1,3,64,64], "data": [1,2,3]}]}'), 400, /data has 3 elements, but the shape \[1, 3, 64, 64\] has 12288/],
    ['truncated binary', () => infer('/v2/models/resnet/infer', Buffer.concat([Buffer.from('{"inputs":[{"name":"input","datatype":"FP32","shape":[1,3,64,64],"parameters":{"binary_data_size":49152}}]}'), Buffer.alloc(100)]), { 'inference-header-content-length': '100' }), 400, /not valid JSON|truncated/],
    [
      'binary shorter than declared',
      () => {
        const { body, headerLength } = binaryBody({ inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3, 64, 64], parameters: { binary_data_size: 49152 } }] }, new Uint8Array(1000));
        return infer('/v2/models/resnet/infer', body, { 'inference-header-content-length': String(headerLength) });
      },
      400,
      /input 'input': binary data truncated: binary_data_size 49152 at byte 0 of the binary part, which has only 1000 bytes/,
    ],
    [
      'trailing bytes',
      () => {
        const { body, headerLength } = binaryBody(JSON.parse(okImage), new Uint8Array(10));
        return infer('/v2/models/resnet/infer', body, { 'inference-header-content-length': String(headerLength) });
      },
      400,
      /the body has 10 bytes after the JSON header/,
    ],
    ['header length beyond body', () => infer('/v2/models/resnet/infer', okImage, { 'inference-header-content-length': '999999999' }), 400, /Inference-Header-Content-Length header must be an integer in \[0, \d+\]/],
    ['binary size without header', () => infer('/v2/models/resnet/infer', '{"inputs":[{"name":"input","datatype":"FP32","shape":[1,3,64,64],"parameters":{"binary_data_size":4}}]}'), 400, /binary_data_size is given but the Inference-Header-Content-Length header is missing/],
    ['unknown output', () => infer('/v2/models/resnet/infer', JSON.stringify({ ...JSON.parse(okImage), outputs: [{ name: 'nope' }] })), 400, /unknown output 'nope'/],
    ['binary_data not a boolean', () => infer('/v2/models/resnet/infer', JSON.stringify({ ...JSON.parse(okImage), outputs: [{ name: 'logits', parameters: { binary_data: 'yes' } }] })), 400, /parameters.binary_data must be true or false/],
    ['qos_ms above maximum', () => infer('/v2/models/resnet/infer', JSON.stringify({ ...JSON.parse(okImage), parameters: { qos_ms: 1e9 } })), 400, /parameters.qos_ms must be a number of ms in \(0, 5000\]/],
    ['unknown model', () => infer('/v2/models/nope/infer', okImage), 404, /model 'nope' is not served here/],
    ['unknown version', () => infer('/v2/models/resnet/versions/3/infer', okImage), 404, /model 'resnet' has no version '3'/],
    ['body too large', () => infer('/v2/models/resnet/infer', Buffer.alloc((1 << 20) + 1, 32)), 413, /the request body is larger than the limit of 1048576 bytes/],
    ['GET on infer', () => app.inject({ method: 'GET', url: '/v2/models/resnet/infer' }), 404, /no route GET/],
  ];
  it.each(errorCases)('%s → {"error"} with the right status', async (_what, send, status, message) => {
    const res = await send();
    expect(res.statusCode, res.body).toBe(status);
    expect(res.headers['content-type']).toMatch(/application\/json/);
    const body = res.json<Json>();
    expect(Object.keys(body)).toEqual(['error']);
    expect(body['error']).toMatch(message);
  });

  it('QoS drops answer 504 (not the retryable 503) with the reason in the message and the request id', async () => {
    const res = await infer('/v2/models/resnet/infer', JSON.stringify({ ...JSON.parse(okImage), id: 'late-1', parameters: { qos_ms: 0.0001 } }));
    expect(res.statusCode).toBe(504);
    expect(res.headers['retry-after']).toBeUndefined();
    expect(res.json<Json>()['error']).toMatch(/^qos_violation: model 'resnet': dropped by the fcfs controller/);
    expect(res.json<Json>()['id']).toBe('late-1');
  });

  it('/metrics: Prometheus text whose counters moved with the requests above', async () => {
    const res = await app.inject('/metrics');
    expect(res.statusCode).toBe(200);
    expect(res.headers['content-type']).toMatch(/text\/plain/);
    const text = res.body;
    const count = (model: string, outcome: string): number => Number(new RegExp(`abacus_requests_total\\{model="${model}",outcome="${outcome}"\\} (\\d+)`).exec(text)?.[1] ?? -1);
    expect(count('resnet', 'success')).toBeGreaterThanOrEqual(3);
    expect(count('bert', 'success')).toBeGreaterThanOrEqual(2);
    expect(count('resnet', 'bad_request')).toBeGreaterThanOrEqual(15);
    expect(count('resnet', 'qos_violation')).toBeGreaterThanOrEqual(1);
    expect(count('resnet', 'model_not_found')).toBeGreaterThanOrEqual(1);
    expect(count('unknown', 'model_not_found')).toBeGreaterThanOrEqual(1);
    expect(text).toMatch(/abacus_queue_depth\{model="resnet"\} 0/);
    expect(text).toMatch(/abacus_request_queue_seconds_bucket\{le="0.001",model="resnet"\} \d+/);
  });
});

/** A backend that echoes its first input as output `echo`, or throws what `fail` says. */
class EchoBackend extends ModelControlOff implements InferenceBackend {
  last: InferRequest | undefined;
  fail: Error | undefined;
  private readonly meta: ModelMetadata = { name: 'echo', versions: ['1'], platform: 'fake', inputs: [{ name: 'x', datatype: 'INT64', shape: [-1] }], outputs: [{ name: 'echo', datatype: 'INT64', shape: [-1] }] };
  serverMetadata() {
    return { name: 'fake', version: '0', extensions: ['binary_tensor_data'] };
  }
  isLive() {
    return true;
  }
  isReady() {
    return true;
  }
  modelReady(name: string) {
    this.modelMetadata(name);
    return true;
  }
  modelMetadata(name: string): ModelMetadata {
    if (name !== 'echo') throw new ServeError('model_not_found', `model '${name}' is not served`);
    return this.meta;
  }
  modelList() {
    return ['echo'];
  }
  modelConfig(name: string): ModelConfig {
    this.modelMetadata(name);
    return { name: 'echo', platform: 'fake', max_batch_size: 0, input: [{ name: 'x', data_type: 'TYPE_INT64', dims: [-1] }], output: [{ name: 'echo', data_type: 'TYPE_INT64', dims: [-1] }] };
  }
  modelStatistics(): ModelStatistics[] {
    return [];
  }
  repositoryIndex() {
    return [];
  }
  infer(request: InferRequest): Promise<InferResponse> {
    this.last = request;
    if (this.fail !== undefined) return Promise.reject(this.fail);
    const input = request.inputs[0]!;
    const values = (input.data.kind === 'json' ? (input.data.values as unknown[]) : []).map((v) => BigInt(v as number | bigint));
    return Promise.resolve({ modelName: 'echo', modelVersion: '1', outputs: { echo: { dataType: 'int64', dims: [values.length], data: BigInt64Array.from(values) } }, outputDatatypes: { echo: 'INT64' }, parameters: { queue_ms: 0, compute_ms: 0, operator_groups: 0, executed_batch_size: 1 } });
  }
}

describe('KServe v2 HTTP with a fake backend', () => {
  it('INT64 beyond 2^53 round-trips exactly (lossless parse in, exact literals out)', async () => {
    const fake = new EchoBackend();
    const echo = createHttpApp(fake);
    try {
      const text = '{"inputs":[{"name":"x","datatype":"INT64","shape":[4],"data":[9007199254740993,-9223372036854775808,9223372036854775807,1]}]}';
      const res = await echo.inject({ method: 'POST', url: '/v2/models/echo/infer', headers: { 'content-type': 'application/json' }, payload: text });
      expect(res.statusCode, res.body).toBe(200);
      expect((fake.last!.inputs[0]!.data as { values: unknown[] }).values).toEqual([9_007_199_254_740_993n, -(2n ** 63n), 2n ** 63n - 1n, 1]);
      expect(res.body).toContain('"data":[9007199254740993,-9223372036854775808,9223372036854775807,1]');
      const parsed = parseJsonLossless(res.body) as { outputs: { data: unknown[] }[] };
      expect(parsed.outputs[0]!.data).toEqual([9_007_199_254_740_993n, -(2n ** 63n), 2n ** 63n - 1n, 1]);
      expect(parseJsonLossless('{"a": 1, "a": 12345678901234567890}')).toEqual({ a: 12_345_678_901_234_567_890n });
      expect(parseJsonLossless('[1e400, 0.1, -5, 9007199254740993.0]')).toEqual([Infinity, 0.1, -5, 9_007_199_254_740_992]);
      expect(fake.last!.requestId).toMatch(/^[0-9a-f]{6}-\w+$/);
    } finally {
      await echo.close();
    }
  });

  it('an unexpected error is a 500 with a generic message, never a stack trace', async () => {
    const fake = new EchoBackend();
    fake.fail = new Error('secret detail at /internal/path.ts:12');
    const echo = createHttpApp(fake);
    try {
      const res = await echo.inject({ method: 'POST', url: '/v2/models/echo/infer', payload: { inputs: [{ name: 'x', datatype: 'INT64', shape: [1], data: [1] }] } });
      expect(res.statusCode).toBe(500);
      expect(res.json()).toEqual({ error: 'internal server error; the server log has the details' });
      fake.fail = new ServeError('internal', 'internal error (request r1); the server log has the details');
      const again = await echo.inject({ method: 'POST', url: '/v2/models/echo/infer', payload: { inputs: [{ name: 'x', datatype: 'INT64', shape: [1], data: [1] }] } });
      expect([again.statusCode, again.json()]).toEqual([500, { error: 'internal error (request r1); the server log has the details' }]);
      for (const [code, status] of [['overloaded', 503], ['device_failure', 503], ['not_ready', 503], ['qos_violation', 504], ['bad_request', 400]] as const) {
        fake.fail = new ServeError(code, `${code}: x`);
        const res = await echo.inject({ method: 'POST', url: '/v2/models/echo/infer', payload: { id: 'q7', inputs: [{ name: 'x', datatype: 'INT64', shape: [1], data: [1] }] } });
        expect([code, res.statusCode]).toEqual([code, status]);
        expect(res.json()).toEqual({ error: `${code}: x`, id: 'q7' });
        // overloaded: another node (or this one in a second) may serve it
        expect(res.headers['retry-after']).toBe(code === 'overloaded' ? '1' : undefined);
        expect(res.headers['content-type']).toBe('application/json');
      }
    } finally {
      await echo.close();
    }
  });
});

describe('KServe v2 HTTP: bodies and error answers', () => {
  const request = { id: 'r-9', inputs: [{ name: 'x', datatype: 'INT64', shape: [2], data: [5, 6] }] };
  const post = (echo: FastifyInstance, payload: Buffer | string, headers: Record<string, string> = {}) =>
    echo.inject({ method: 'POST', url: '/v2/models/echo/infer', headers: { 'content-type': 'application/json', ...headers }, payload });

  it('a request id (x-request-id header, body id) of more than 256 characters is a 400 naming it; 256 is echoed', async () => {
    const fake = new EchoBackend();
    const echo = createHttpApp(fake);
    try {
      const ok = 'h'.repeat(256);
      const echoed = await post(echo, JSON.stringify({ ...request, id: 'b'.repeat(256) }), { 'x-request-id': ok });
      expect(echoed.statusCode, echoed.body).toBe(200);
      expect(echoed.headers['x-request-id']).toBe(ok);
      expect(fake.last!.requestId).toBe(ok);
      fake.last = undefined;
      // the header: refused before any route runs (health too), answered under a generated id
      const long = await post(echo, JSON.stringify(request), { 'x-request-id': 'h'.repeat(257) });
      expect([long.statusCode, long.json()]).toEqual([400, { error: 'the x-request-id header is 257 characters long; at most 256' }]);
      expect(long.headers['x-request-id']).toMatch(/^[0-9a-f]{6}-\w+$/);
      expect(fake.last).toBeUndefined();
      expect((await echo.inject({ method: 'GET', url: '/v2/health/live', headers: { 'x-request-id': 'h'.repeat(300) } })).statusCode).toBe(400);
      const body = await post(echo, JSON.stringify({ ...request, id: 'b'.repeat(257) }));
      expect([body.statusCode, body.json()]).toEqual([400, { error: "model 'echo': id is 257 characters long; at most 256" }]);
      // an empty header is as none: a generated id
      expect((await post(echo, JSON.stringify(request), { 'x-request-id': '' })).headers['x-request-id']).toMatch(/^[0-9a-f]{6}-\w+$/);
    } finally {
      await echo.close();
    }
  });

  it('Content-Encoding gzip, x-gzip and deflate bodies are inflated; identity and none read as they are', async () => {
    const fake = new EchoBackend();
    const echo = createHttpApp(fake);
    try {
      const json = Buffer.from(JSON.stringify(request));
      for (const [encoding, body] of [['gzip', gzipSync(json)], ['x-gzip', gzipSync(json)], ['deflate', deflateSync(json)], ['identity', json], ['GZIP', gzipSync(json)]] as const) {
        const res = await post(echo, body, { 'content-encoding': encoding });
        expect([encoding, res.statusCode, res.body]).toEqual([encoding, 200, expect.stringContaining('"data":[5,6]')]);
      }
    } finally {
      await echo.close();
    }
  });

  it('a body that does not inflate is a 400 naming the encoding; an unknown encoding is a 415; an inflated body over the limit is a 413', async () => {
    const fake = new EchoBackend();
    const echo = createHttpApp(fake, { maxBodyBytes: 4096 });
    try {
      const json = Buffer.from(JSON.stringify(request));
      const notGzip = await post(echo, json, { 'content-encoding': 'gzip' });
      expect(notGzip.statusCode).toBe(400);
      expect(notGzip.headers['content-type']).toBe('application/json');
      expect(notGzip.json<Json>()['error']).toMatch(/^the request body is not a valid gzip stream \(Content-Encoding: gzip\): /);
      const truncated = await post(echo, gzipSync(json).subarray(0, 20), { 'content-encoding': 'gzip' });
      expect(truncated.statusCode).toBe(400);
      expect(truncated.json<Json>()['error']).toMatch(/not a valid gzip stream/);
      const badDeflate = await post(echo, gzipSync(json), { 'content-encoding': 'deflate' });
      expect([badDeflate.statusCode, badDeflate.json<Json>()['error']]).toEqual([400, expect.stringMatching(/not a valid deflate stream/)]);
      const br = await post(echo, json, { 'content-encoding': 'br' });
      expect([br.statusCode, br.json<Json>()['error']]).toEqual([415, expect.stringMatching(/Content-Encoding 'br' is not supported .*gzip, x-gzip, deflate, identity/)]);
      // 100 kB of spaces compress to a few hundred bytes: the limit applies to the inflated body
      const bomb = gzipSync(Buffer.from(`${' '.repeat(100_000)}${JSON.stringify(request)}`));
      expect(bomb.byteLength).toBeLessThan(4096);
      const tooBig = await post(echo, bomb, { 'content-encoding': 'gzip' });
      expect([tooBig.statusCode, tooBig.json<Json>()['error']]).toEqual([413, expect.stringMatching(/^the request body \(decompressed\) is larger than the limit of 4096 bytes for JSON bodies \(abacus serve --max-json-body-bytes\); larger tensors can be sent as binary tensor data/)]);
      expect(fake.last).toBeUndefined();
    } finally {
      await echo.close();
    }
  });

  it('error answers: Content-Type exactly application/json, the id echoed once read; "parameters": null accepted', async () => {
    const fake = new EchoBackend();
    const echo = createHttpApp(fake);
    try {
      const notJson = await post(echo, '{"inputs": [');
      expect([notJson.statusCode, notJson.headers['content-type']]).toEqual([400, 'application/json']);
      expect(Object.keys(notJson.json<Json>())).toEqual(['error']);
      const badShape = await post(echo, JSON.stringify({ id: 'r-10', inputs: [{ name: 'x', datatype: 'INT64', shape: 'two', data: [1] }] }));
      expect([badShape.statusCode, badShape.json()]).toEqual([400, { error: "model 'echo': input 'x': shape must be a list of dims, got \"two\"", id: 'r-10' }]);
      const missing = await echo.inject('/v2/models/nope');
      expect([missing.statusCode, missing.headers['content-type']]).toEqual([404, 'application/json']);
      const ok = await post(echo, JSON.stringify({ ...request, parameters: null, inputs: [{ ...request.inputs[0], parameters: null }], outputs: [{ name: 'echo', parameters: null }] }));
      expect([ok.statusCode, ok.headers['content-type']]).toEqual([200, 'application/json']);
      expect(fake.last!.parameters).toBeUndefined();
      expect((await echo.inject('/v2/health/ready')).headers['content-type']).toBe('application/json');
    } finally {
      await echo.close();
    }
  });
});

/** Holds every group until `open()` while closed (so requests queue up deterministically). */
class GatedDevice implements Device {
  readonly id: string;
  private gate: Promise<void> = Promise.resolve();
  private release: () => void = () => undefined;
  constructor(private readonly inner: Device) {
    this.id = inner.id;
  }
  close_(): void {
    this.gate = new Promise((resolve) => (this.release = resolve));
  }
  open(): void {
    this.release();
  }
  load(services: readonly DeviceService[]): Promise<void> {
    return this.inner.load(services);
  }
  async runGroup(group: readonly Segment[]): Promise<GroupResult> {
    await this.gate;
    return this.inner.runGroup(group);
  }
  releaseQuery(service: string, queryId: string): Promise<void> {
    return this.inner.releaseQuery(service, queryId);
  }
  close(): Promise<void> {
    this.open();
    return this.inner.close();
  }
}

describe('KServe v2 HTTP over a socket', () => {
  it('a client that disconnects while its request waits in the queue: the query is withdrawn (cancelled), the others complete', async () => {
    const b = await simBackend([{ name: 'r', model: 'resnet50-small', qosTargetMs: 60_000, batchSizes: [1] }], { start: false });
    const device = new GatedDevice(b.engine.device);
    await b.backend.start({ ...b.engine, device });
    const server = createHttpApp(b.backend, { metrics: b.metrics });
    try {
      await server.listen({ host: '127.0.0.1', port: 0 });
      const address = server.server.address();
      const url = `http://127.0.0.1:${typeof address === 'object' && address !== null ? address.port : 0}/v2/models/r/infer`;
      const header = Buffer.from(JSON.stringify({ inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3, 64, 64], parameters: { binary_data_size: IMAGE * 4 } }] }));
      const body = Buffer.concat([header, Buffer.alloc(IMAGE * 4)]);
      const headers = { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(header.byteLength) };
      const depth = async (): Promise<number> => Number(/abacus_queue_depth\{model="r"\} (\d+)/.exec(await b.metrics.text())?.[1] ?? 0);
      const until = async (n: number): Promise<void> => {
        for (let i = 0; i < 10_000 && (await depth()) < n; i++) await new Promise((r) => setTimeout(r, 2));
      };
      device.close_();
      const others = Array.from({ length: 5 }, () => fetch(url, { method: 'POST', headers, body }).then((r) => r.status));
      await until(5);
      const abort = new AbortController();
      const gone = fetch(url, { method: 'POST', headers, body, signal: abort.signal }).then(() => 'answered', () => 'aborted');
      await until(6);
      expect(await depth()).toBe(6);
      abort.abort();
      expect(await gone).toBe('aborted');
      for (let i = 0; i < 1000 && (await depth()) > 5; i++) await new Promise((r) => setTimeout(r, 2));
      expect(await depth()).toBe(5);
      device.open();
      expect(await Promise.all(others)).toEqual(new Array(5).fill(200));
      const text = await b.metrics.text();
      expect(text).toMatch(/abacus_requests_total\{model="r",outcome="cancelled"\} 1/);
      expect(text).toMatch(/abacus_requests_total\{model="r",outcome="success"\} 5/);
      // warm-up (1 group) + the 5 others: the withdrawn query never ran
      expect(text).toMatch(/abacus_operator_group_size_count 6\n/);
    } finally {
      await server.close();
      await b.backend.shutdown(1000);
    }
  }, 60_000);
});
