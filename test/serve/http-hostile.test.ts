/**
 * Hostile HTTP clients against a listening app (docs/overload.md "Limits and timeouts"): bodies
 * that pass a limit get exactly one clear answer naming it, and the server keeps answering
 * others; a 413 reaches a client that sends its whole body before reading; `Expect:
 * 100-continue` is refused before the body is sent; connections that never finish their headers
 * are closed. Large JSON is decoded and encoded in codec threads with the same results and errors
 * as inline. Limits and timeouts are set small here; behaviour only, no timing asserts.
 */
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHttpApp } from '../../src/serve/http/app.ts';
import { scanJson, DEFAULT_JSON_LIMITS } from '../../src/serve/http/limits.ts';
import { FakeBackend } from './fake-backend.ts';

const MAX_BODY = 1 << 20;
const MAX_JSON = 256 * 1024;

interface Answer {
  readonly status: number;
  readonly body: string;
  readonly continued: boolean;
}

/** One request by a plain node:http client that writes its whole body, then reads the answer. */
function send(port: number, path: string, body: Buffer | string, headers: Record<string, string> = {}, method = 'POST'): Promise<Answer> {
  return new Promise((resolve, reject) => {
    let continued = false;
    const req = http.request({ host: '127.0.0.1', port, path, method, agent: false, headers: { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)), ...headers } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (text += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text, continued }));
    });
    req.on('error', reject);
    if (headers['expect'] === undefined) req.end(body);
    else {
      req.on('continue', () => {
        continued = true;
        req.end(body);
      });
      req.flushHeaders();
    }
  });
}

const live = async (port: number): Promise<number> => (await send(port, '/v2/health/live', '', {}, 'GET')).status;

const floats = (n: number): string => JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP32', shape: [n / 4, 4], data: Array.from({ length: n }, (_, i) => (i % 7) * 0.25) }] });

describe('hostile bodies and clients', () => {
  let app: FastifyInstance;
  let port: number;
  beforeAll(async () => {
    app = createHttpApp(new FakeBackend(), { maxBodyBytes: MAX_BODY, maxJsonBodyBytes: MAX_JSON, timeouts: { headersTimeoutMs: 300, requestTimeoutMs: 2000, keepAliveTimeoutMs: 1000 }, offload: { threads: 1, decodeMinBytes: 1024, encodeMinElements: 64 } });
    await app.listen({ host: '127.0.0.1', port: 0 });
    port = (app.server.address() as AddressInfo).port;
  });
  afterAll(async () => {
    await app.close();
  });

  it.each([
    ['an object of 12,000 keys', `{${Array.from({ length: 12_000 }, (_, i) => `"k${i}":${i}`).join(',')}}`, 400, /more than 10000 object keys/],
    ['100 kB of nested brackets', '['.repeat(100_000), 400, /nests arrays and objects deeper than 64 levels/],
    ['a JSON float array over the JSON limit', floats(100_000), 413, /larger than the limit of 262144 bytes for JSON bodies \(abacus serve --max-json-body-bytes\)/],
  ])('%s: one answer naming the limit; the server still answers', async (_what, body, status, message) => {
    const [answer, alive] = await Promise.all([send(port, '/v2/models/m/infer', body), live(port)]);
    expect(answer.status).toBe(status);
    expect(JSON.parse(answer.body)).toEqual({ error: expect.stringMatching(message) });
    expect(alive).toBe(200);
    expect(await live(port)).toBe(200);
  });

  it('binary bodies: over the binary limit, and a JSON header over the JSON limit, are 413s naming which', async () => {
    const binary = await send(port, '/v2/models/m/infer', Buffer.alloc(MAX_BODY + 1), { 'content-type': 'application/octet-stream', 'inference-header-content-length': '16' });
    expect([binary.status, JSON.parse(binary.body)]).toEqual([413, { error: expect.stringMatching(/larger than the limit of 1048576 bytes for binary bodies \(abacus serve --max-body-bytes\)/) }]);
    const header = await send(port, '/v2/models/m/infer', Buffer.alloc(MAX_JSON + 100), { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(MAX_JSON + 50) });
    expect([header.status, JSON.parse(header.body)]).toEqual([413, { error: expect.stringMatching(/JSON header .*Inference-Header-Content-Length: 262194.* limit of 262144 bytes for JSON \(abacus serve --max-json-body-bytes\)/) }]);
  });

  it('16 concurrent bodies over the limit each get their 413 (read to the end, so the plain client sees it); live answers meanwhile', async () => {
    const big = Buffer.alloc(MAX_BODY + 200_000, 0x20);
    const [answers, alive] = await Promise.all([Promise.all(Array.from({ length: 16 }, () => send(port, '/v2/models/m/infer', big))), live(port)]);
    expect(answers.map((a) => a.status)).toEqual(new Array<number>(16).fill(413));
    expect(alive).toBe(200);
  });

  it('Expect: 100-continue over the limit: 413 before the body is sent; under the limit: 100, then the answer', async () => {
    const refused = await send(port, '/v2/models/m/infer', Buffer.alloc(MAX_JSON + 1, 0x20), { expect: '100-continue' });
    expect([refused.status, refused.continued]).toEqual([413, false]);
    expect(refused.body).toMatch(/--max-json-body-bytes/);
    const ok = await send(port, '/v2/models/m/infer', floats(8), { expect: '100-continue' });
    expect([ok.status, ok.continued]).toEqual([200, true]);
  });

  it('connections that never finish their headers are answered 408 and closed', async () => {
    const sockets = await Promise.all(
      Array.from({ length: 20 }, () =>
        new Promise<{ closed: Promise<string> }>((resolve) => {
          const socket = net.connect(port, '127.0.0.1', () => {
            socket.write('POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nX-Slow: ');
            // a byte now and then, never the end of the headers
            const drip = setInterval(() => socket.write('a'), 100);
            let received = '';
            socket.on('data', (c: Buffer) => (received += c.toString('latin1')));
            const closed = new Promise<string>((done) => socket.on('close', () => {
              clearInterval(drip);
              done(received);
            }));
            socket.on('error', () => undefined);
            resolve({ closed });
          });
        }),
      ),
    );
    const received = await Promise.all(sockets.map((s) => s.closed));
    for (const r of received) expect(r).toMatch(/^HTTP\/1\.1 408 /);
    expect(await live(port)).toBe(200);
  });

  it('large JSON decoded and encoded in a codec thread: the same answer as inline, the same errors', async () => {
    const inline = createHttpApp(new FakeBackend(), { offload: { threads: 0 } });
    try {
      const body = floats(4000);
      const viaThread = await send(port, '/v2/models/m/infer', body);
      const res = await inline.inject({ method: 'POST', url: '/v2/models/m/infer', payload: body, headers: { 'content-type': 'application/json' } });
      expect(viaThread.status).toBe(200);
      expect(JSON.parse(viaThread.body)).toEqual(res.json());
      // a bad element, with the request id: the same 400 either way
      const bad = JSON.stringify({ id: 'r1', inputs: [{ name: 'x', datatype: 'FP32', shape: [500, 4], data: [...Array.from({ length: 1999 }, () => 1), 'x'] }] });
      const badThread = await send(port, '/v2/models/m/infer', bad);
      const badInline = await inline.inject({ method: 'POST', url: '/v2/models/m/infer', payload: bad, headers: { 'content-type': 'application/json' } });
      expect(badThread.status).toBe(400);
      expect(JSON.parse(badThread.body)).toEqual({ error: expect.stringMatching(/element 1999 is "x"/), id: 'r1' });
      expect(badInline.statusCode).toBe(400);
      expect(badInline.json()).toEqual({ error: expect.stringMatching(/x/), id: 'r1' });
      // INT64 beyond 2^53 through the thread: exact
      const ints = JSON.stringify({ inputs: [{ name: 'a', datatype: 'INT64', shape: [300, 2], data: Array.from({ length: 600 }, () => '__BIG__') }] }).replaceAll('"__BIG__"', '9007199254740993');
      const i64 = await send(port, '/v2/models/i64/infer', ints);
      expect(i64.status).toBe(200);
      expect(i64.body).toContain('9007199254740994');
    } finally {
      await inline.close();
    }
  });

  it('an Inference-Header-Content-Length that does not end the JSON is a 400 naming the header and the body length', async () => {
    const header = JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 4], parameters: { binary_data_size: 16 } }] });
    const body = Buffer.concat([Buffer.from(header), Buffer.alloc(16)]);
    for (const length of [header.length + 8, header.length - 3]) {
      const answer = await send(port, '/v2/models/m/infer', body, { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(length) });
      expect(answer.status).toBe(400);
      expect(JSON.parse(answer.body).error).toMatch(new RegExp(`Inference-Header-Content-Length header says it is the first ${length} bytes of the ${body.byteLength}-byte body`));
    }
  });
});

describe('scanJson', () => {
  it('counts depth and keys outside strings only (escaped quotes included)', () => {
    const scan = (s: string, maxDepth = 3, maxKeys = 2): string | undefined => scanJson(Buffer.from(s), 0, Buffer.byteLength(s), { maxDepth, maxKeys });
    expect(scan('{"a":[[1]],"b":"[[[[:::"}')).toBeUndefined();
    expect(scan('{"a\\":[[[[":1,"b":"\\\\"}')).toBeUndefined();
    expect(scan('[[[[1]]]]')).toMatch(/deeper than 3 levels/);
    expect(scan('{"a":1,"b":2,"c":3}')).toMatch(/more than 2 object keys/);
    expect(scanJson(Buffer.from('{"a":1}'), 0, 7, DEFAULT_JSON_LIMITS)).toBeUndefined();
  });
});
