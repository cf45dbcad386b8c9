/**
 * HttpInferenceClient against a small node:http stub of the v2 REST protocol (JSON and the
 * binary tensor data extension) over the fake backend; the real HTTP front end is tested
 * against the same client after merge.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HttpInferenceClient, InferenceClientError } from '../../src/serve/client/index.ts';
import { ServeError, type InferInput } from '../../src/serve/inference.ts';
import type { HostTensor } from '../../src/tensor.ts';
import { BIG_INT64, FAKE_MODELS, FakeBackend } from './fake-backend.ts';

const STATUS = { bad_request: 400, model_not_found: 404, qos_violation: 504, overloaded: 503, not_ready: 503, device_failure: 503, forbidden: 403, internal: 500 } as const;

interface Stub {
  server: Server;
  url: string;
  backend: FakeBackend;
  bodies: { headers: IncomingMessage['headers']; body: Buffer }[];
  /** Truncate binary answers (to test an unreadable response). */
  truncate: boolean;
}

interface JsonTensor {
  name: string;
  datatype: string;
  shape: number[];
  data?: unknown;
  parameters?: Record<string, unknown>;
}

async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

function sendJson(res: ServerResponse, status: number, value: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json', ...headers }).end(JSON.stringify(value));
}

async function startStub(sendCodeHeader: boolean): Promise<Stub> {
  const backend = new FakeBackend();
  const stub: Stub = { server: undefined as unknown as Server, url: '', backend, bodies: [], truncate: false };
  const fail = (res: ServerResponse, error: unknown): void => {
    const e = error instanceof ServeError ? error : new ServeError('internal', 'internal error');
    const message = STATUS[e.code] >= 503 ? `${e.code}: ${e.message}` : e.message;
    sendJson(res, STATUS[e.code], { error: message }, sendCodeHeader ? { 'abacus-error-code': e.code } : {});
  };
  stub.server = createServer((req, res) => {
    void (async () => {
      const path = req.url ?? '';
      if (req.method === 'GET' && path === '/v2/health/ready') return void res.writeHead(backend.isReady() ? 200 : 503).end();
      const meta = /^\/v2\/models\/([^/]+)$/.exec(path);
      if (req.method === 'GET' && meta !== null) {
        try {
          return sendJson(res, 200, backend.modelMetadata(decodeURIComponent(meta[1]!)));
        } catch (error) {
          return fail(res, error);
        }
      }
      const infer = /^\/v2\/models\/([^/]+)\/infer$/.exec(path);
      if (req.method !== 'POST' || infer === null) return sendJson(res, 404, { error: 'no route' });
      const body = await readBody(req);
      stub.bodies.push({ headers: req.headers, body });
      const headerLength = req.headers['inference-header-content-length'];
      const jsonEnd = headerLength === undefined ? body.length : Number(headerLength);
      const json = JSON.parse(body.subarray(0, jsonEnd).toString('utf8'));
      let offset = jsonEnd;
      const inputs: InferInput[] = json.inputs.map((i: JsonTensor) => {
        const size = i.parameters?.binary_data_size;
        if (typeof size === 'number') {
          const bytes = body.subarray(offset, offset + size);
          offset += size;
          return { name: i.name, datatype: i.datatype, shape: i.shape, data: { kind: 'raw', bytes } };
        }
        return { name: i.name, datatype: i.datatype, shape: i.shape, data: { kind: 'json', values: i.data } };
      });
      const { binary_data_output: binaryAll, ...parameters } = json.parameters ?? {};
      try {
        const response = await backend.infer({
          modelName: decodeURIComponent(infer[1]!),
          ...(json.id !== undefined ? { id: json.id } : {}),
          inputs,
          ...(json.outputs !== undefined ? { outputs: json.outputs.map((o: JsonTensor) => ({ name: o.name, binaryData: o.parameters?.binary_data === true })) } : {}),
          parameters,
          requestId: 'stub',
        });
        const chunks: Buffer[] = [];
        const outputs = Object.entries(response.outputs).map(([name, t]: [string, HostTensor]) => {
          const base = { name, datatype: response.outputDatatypes[name], shape: t.dims };
          const wantBinary = json.outputs?.find((o: JsonTensor) => o.name === name)?.parameters?.binary_data ?? binaryAll === true;
          if (!wantBinary) return { ...base, data: Array.from(t.data as ArrayLike<number | bigint>, Number) };
          const data = t.data as Exclude<HostTensor['data'], string[]>;
          const bytes = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
          chunks.push(bytes);
          return { ...base, parameters: { binary_data_size: bytes.length } };
        });
        const header = Buffer.from(JSON.stringify({ model_name: response.modelName, model_version: '1', id: response.id, parameters: response.parameters, outputs }));
        if (chunks.length === 0) return void res.writeHead(200, { 'content-type': 'application/json' }).end(header);
        let all = Buffer.concat([header, ...chunks]);
        if (stub.truncate) all = all.subarray(0, all.length - 3);
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(header.length) }).end(all);
      } catch (error) {
        fail(res, error);
      }
    })();
  });
  await new Promise<void>((resolve) => stub.server.listen(0, '127.0.0.1', resolve));
  stub.url = `http://127.0.0.1:${(stub.server.address() as AddressInfo).port}`;
  return stub;
}

const x: HostTensor = { dataType: 'float32', dims: [2, 4], data: Float32Array.from([1, 2, 3, 4, 5, 6, 7, 8.5]) };
const big: HostTensor = { dataType: 'int64', dims: [2, 2], data: BigInt64Array.from([BIG_INT64, -(2n ** 63n), 2n ** 63n - 2n, 7n]) };

describe('HttpInferenceClient against a v2 REST stub', () => {
  let stub: Stub;
  let plain: Stub;
  beforeAll(async () => {
    stub = await startStub(true);
    plain = await startStub(false);
  });
  afterAll(async () => {
    await new Promise((resolve) => stub.server.close(resolve));
    await new Promise((resolve) => plain.server.close(resolve));
  });

  it('sends binary inputs and reads binary outputs by default (spec headers and sizes)', async () => {
    const client = new HttpInferenceClient(`${stub.url}/`);
    const result = await client.infer({ model: 'm', inputs: { x }, qosMs: 12.5, id: 'q1' });
    const sent = stub.bodies.at(-1)!;
    expect(sent.headers['content-type']).toBe('application/octet-stream');
    const headerLength = Number(sent.headers['inference-header-content-length']);
    expect(sent.body.length).toBe(headerLength + 32);
    expect(JSON.parse(sent.body.subarray(0, headerLength).toString())).toEqual({
      id: 'q1',
      inputs: [{ name: 'x', datatype: 'FP32', shape: [2, 4], parameters: { binary_data_size: 32 } }],
      parameters: { qos_ms: 12.5, binary_data_output: true },
    });
    expect(stub.backend.requests.at(-1)!.parameters).toEqual({ qos_ms: 12.5 });
    if (!result.ok) throw new Error(result.message);
    expect(result.id).toBe('q1');
    expect(Array.from(result.outputs['y']!.data as Float32Array)).toEqual([2, 4, 6, 8, 10, 12, 14, 17]);
    expect(Array.from(result.outputs['idx']!.data as BigInt64Array)).toEqual([BIG_INT64, BIG_INT64 + 1n]);
    expect(result.serverParameters).toEqual({ queue_ms: 0.25, compute_ms: 1.5, operator_groups: 2, executed_batch_size: 8 });
  });

  it('keeps INT64 beyond 2^53 lossless in binary, and writes it as bare JSON integers', async () => {
    const binary = await new HttpInferenceClient(stub.url).infer({ model: 'i64', inputs: { a: big } });
    if (!binary.ok) throw new Error(binary.message);
    expect(Array.from(binary.outputs['b']!.data as BigInt64Array)).toEqual([BIG_INT64 + 1n, -(2n ** 63n) + 1n, 2n ** 63n - 1n, 8n]);
    await new HttpInferenceClient(stub.url, { binary: false }).infer({ model: 'i64', inputs: { a: big } });
    const text = stub.bodies.at(-1)!.body.toString();
    expect(text).toContain('"data":[9007199254740993,-9223372036854775808,9223372036854775806,7]');
  });

  it('uses JSON both ways with binary: false, and an outputs selection', async () => {
    const client = new HttpInferenceClient(stub.url, { binary: false });
    const result = await client.infer({ model: 'm', inputs: { x }, outputs: ['y'] });
    expect(stub.bodies.at(-1)!.headers['content-type']).toBe('application/json');
    expect(JSON.parse(stub.bodies.at(-1)!.body.toString())).toEqual({ inputs: [{ name: 'x', datatype: 'FP32', shape: [2, 4], data: [1, 2, 3, 4, 5, 6, 7, 8.5] }], outputs: [{ name: 'y' }] });
    if (!result.ok) throw new Error(result.message);
    expect(Object.keys(result.outputs)).toEqual(['y']);
    expect(result.outputs['y']!.dims).toEqual([2, 4]);
    expect(Array.from(result.outputs['y']!.data as Float32Array)).toEqual([2, 4, 6, 8, 10, 12, 14, 17]);
  });

  it('sends FP16 inputs binary even in JSON mode (no JSON form)', async () => {
    const half: HostTensor = { dataType: 'float16', dims: [1, 2], data: Uint16Array.from([0x3c00, 0xc000]) };
    const result = await new HttpInferenceClient(stub.url, { binary: false }).infer({ model: 'm', inputs: { x, h: half } });
    expect(result).toMatchObject({ ok: false, status: 400, code: 'bad_request' });
    const sent = stub.bodies.at(-1)!;
    const headerLength = Number(sent.headers['inference-header-content-length']);
    expect(JSON.parse(sent.body.subarray(0, headerLength).toString()).inputs).toEqual([
      { name: 'x', datatype: 'FP32', shape: [2, 4], data: [1, 2, 3, 4, 5, 6, 7, 8.5] },
      { name: 'h', datatype: 'FP16', shape: [1, 2], parameters: { binary_data_size: 4 } },
    ]);
    expect([...sent.body.subarray(headerLength)]).toEqual([0x00, 0x3c, 0x00, 0xc0]);
  });

  it('reports serving errors with status and code, from the header or else from status and message', async () => {
    for (const s of [stub, plain]) {
      const client = new HttpInferenceClient(s.url);
      for (const code of ['bad_request', 'model_not_found', 'qos_violation', 'overloaded', 'not_ready', 'device_failure', 'internal'] as const) {
        const result = await client.infer({ model: 'm', inputs: { x }, parameters: { fake_error: code } });
        expect(result).toEqual({ ok: false, status: STATUS[code], code, message: expect.stringContaining(`fake ${code}`) });
      }
    }
  });

  it('reports transport failures: nothing listening, an unreadable answer', async () => {
    const closed = await startStub(true);
    await new Promise((resolve) => closed.server.close(resolve));
    const gone = await new HttpInferenceClient(closed.url).infer({ model: 'm', inputs: { x } });
    expect(gone).toMatchObject({ ok: false, status: 0, code: 'transport' });
    expect(await new HttpInferenceClient(closed.url).ready()).toBe(false);
    stub.truncate = true;
    try {
      const cut = await new HttpInferenceClient(stub.url).infer({ model: 'm', inputs: { x } });
      expect(cut).toMatchObject({ ok: false, status: 200, code: 'transport', message: expect.stringContaining('unreadable response') });
    } finally {
      stub.truncate = false;
    }
  });

  it('answers ready and model metadata; metadata errors throw', async () => {
    const client = new HttpInferenceClient(stub.url);
    expect(await client.ready()).toBe(true);
    stub.backend.ready = false;
    expect(await client.ready()).toBe(false);
    stub.backend.ready = true;
    expect(await client.modelMetadata('m')).toEqual(FAKE_MODELS[0]);
    await expect(client.modelMetadata('nope')).rejects.toSatisfy((e) => e instanceof InferenceClientError && e.code === 'model_not_found' && e.status === 404);
    expect(() => new HttpInferenceClient('grpc://x:1')).toThrow(TypeError);
  });
});
