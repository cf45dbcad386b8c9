/**
 * Response compression (serve/http/compress.ts): `Accept-Encoding` negotiation by the RFC 9110
 * rules, and the HTTP app compressing JSON and binary-tensor answers (headers via `inject`,
 * decoding by a real client: Node's fetch, which inflates gzip and deflate itself).
 */
import type { AddressInfo } from 'node:net';
import { gunzipSync, inflateSync } from 'node:zlib';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHttpApp } from '../../src/serve/http/app.ts';
import { negotiateEncoding } from '../../src/serve/http/compress.ts';
import { FakeBackend } from './fake-backend.ts';

describe('negotiateEncoding (RFC 9110 §12.5.3)', () => {
  it.each([
    [undefined, undefined],
    ['', undefined],
    ['identity', undefined],
    ['gzip', 'gzip'],
    ['x-gzip', 'gzip'],
    ['deflate', 'deflate'],
    ['gzip, deflate, br', 'gzip'],
    ['deflate, gzip', 'gzip'],
    ['gzip;q=0.5, deflate', 'deflate'],
    ['GZIP;Q=0.2, DEFLATE;q=0.8', 'deflate'],
    ['gzip;q=0', undefined],
    ['br', undefined],
    ['*', 'gzip'],
    ['*;q=0.3, gzip;q=0', 'deflate'],
    ['gzip;q=2', undefined], // an invalid q-value: the member is ignored
    ['gzip;q=abc, deflate;q=0.1', 'deflate'],
    [' , ;q=1, deflate ', 'deflate'],
  ] as const)('%j → %j', (header, expected) => {
    expect(negotiateEncoding(header)).toBe(expected);
  });
});

/** A request with 300 rows: its JSON answer is several KiB. */
const ROWS = 300;
const x = Array.from({ length: ROWS * 4 }, (_, i) => (i % 17) * 0.5);
const jsonRequest = JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP32', shape: [ROWS, 4], data: x }] });

describe('HTTP responses compressed on Accept-Encoding', () => {
  let app: FastifyInstance;
  let base: string;
  beforeAll(async () => {
    app = createHttpApp(new FakeBackend());
    await app.listen({ host: '127.0.0.1', port: 0 });
    base = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await app.close();
  });

  const infer = (headers: Record<string, string>, payload: string | Buffer = jsonRequest) =>
    app.inject({ method: 'POST', url: '/v2/models/m/infer', headers: { 'content-type': 'application/json', ...headers }, payload });

  it('identity when not asked: same body, no Content-Encoding, Vary names Accept-Encoding', async () => {
    const plain = await infer({});
    expect(plain.statusCode).toBe(200);
    expect(plain.headers['content-encoding']).toBeUndefined();
    expect(plain.headers['vary']).toBe('Accept-Encoding');
    expect(plain.headers['content-type']).toBe('application/json');
    const body = plain.json<{ outputs: { name: string; data: number[] }[] }>();
    expect(body.outputs.find((o) => o.name === 'y')?.data).toEqual(x.map((v) => 2 * v));
    const refused = await infer({ 'accept-encoding': 'br, gzip;q=0, deflate;q=0' });
    expect(refused.headers['content-encoding']).toBeUndefined();
    expect(refused.rawPayload.equals(plain.rawPayload)).toBe(true);
  });

  it('gzip and deflate JSON answers inflate to the identity body and are smaller', async () => {
    const plain = (await infer({})).rawPayload;
    const gz = await infer({ 'accept-encoding': 'gzip' });
    expect([gz.statusCode, gz.headers['content-encoding'], gz.headers['content-type']]).toEqual([200, 'gzip', 'application/json']);
    expect(Number(gz.headers['content-length'])).toBe(gz.rawPayload.byteLength);
    expect(gunzipSync(gz.rawPayload).equals(plain)).toBe(true);
    expect(gz.rawPayload.byteLength).toBeLessThan(plain.byteLength / 2);
    const df = await infer({ 'accept-encoding': 'deflate' });
    expect(df.headers['content-encoding']).toBe('deflate');
    expect(inflateSync(df.rawPayload).equals(plain)).toBe(true);
  });

  it('binary tensor answers: compressed whole, Inference-Header-Content-Length of the inflated body', async () => {
    const header = Buffer.from(JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP32', shape: [ROWS, 4], parameters: { binary_data_size: ROWS * 16 } }], parameters: { binary_data_output: true } }));
    const payload = Buffer.concat([header, Buffer.from(Float32Array.from(x).buffer)]);
    const headers = { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(header.byteLength) };
    const plain = await infer(headers, payload);
    expect(plain.statusCode).toBe(200);
    const gz = await infer({ ...headers, 'accept-encoding': 'gzip' }, payload);
    expect([gz.headers['content-encoding'], gz.headers['content-type']]).toEqual(['gzip', 'application/octet-stream']);
    const inflated = gunzipSync(gz.rawPayload);
    expect(inflated.equals(plain.rawPayload)).toBe(true);
    const jsonLength = Number(gz.headers['inference-header-content-length']);
    expect(jsonLength).toBe(Number(plain.headers['inference-header-content-length']));
    const outputs = (JSON.parse(inflated.subarray(0, jsonLength).toString()) as { outputs: { name: string; parameters: { binary_data_size: number } }[] }).outputs;
    expect(outputs[0]?.name).toBe('y');
    const y = new Float32Array(inflated.buffer.slice(inflated.byteOffset + jsonLength, inflated.byteOffset + jsonLength + outputs[0]!.parameters.binary_data_size));
    expect([...y]).toEqual(x.map((v) => 2 * v));
  });

  it('small answers stay identity; error answers over the threshold are compressed too', async () => {
    const live = await app.inject({ method: 'GET', url: '/v2/health/live', headers: { 'accept-encoding': 'gzip' } });
    expect([live.headers['content-encoding'], live.json()]).toEqual([undefined, { live: true }]);
    const bad = await infer({ 'accept-encoding': 'gzip' }, JSON.stringify({ inputs: [{ name: 'x'.repeat(2000), datatype: 'FP32', shape: [1, 4], data: [1, 2, 3, 4] }] }));
    expect(bad.statusCode).toBe(400);
    expect(bad.headers['content-encoding']).toBe('gzip');
    expect(JSON.parse(gunzipSync(bad.rawPayload).toString()) as unknown).toEqual({ error: expect.stringContaining('input') });
  });

  it('a real HTTP client (fetch) asking for gzip, deflate decodes the answer', async () => {
    for (const encoding of ['gzip', 'deflate']) {
      const response = await fetch(`${base}/v2/models/m/infer`, { method: 'POST', headers: { 'content-type': 'application/json', 'accept-encoding': encoding }, body: jsonRequest });
      expect([response.status, response.headers.get('content-encoding')]).toEqual([200, encoding]);
      const body = (await response.json()) as { outputs: { name: string; data: number[] }[] };
      expect(body.outputs.find((o) => o.name === 'y')?.data).toEqual(x.map((v) => 2 * v));
    }
  });

  it('compression: false sends identity whatever is asked', async () => {
    const off = createHttpApp(new FakeBackend(), { compression: false });
    try {
      const r = await off.inject({ method: 'POST', url: '/v2/models/m/infer', headers: { 'content-type': 'application/json', 'accept-encoding': 'gzip' }, payload: jsonRequest });
      expect([r.statusCode, r.headers['content-encoding']]).toEqual([200, undefined]);
    } finally {
      await off.close();
    }
  });
});
