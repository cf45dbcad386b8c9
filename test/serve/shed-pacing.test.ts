/**
 * Pacing of back-to-back shed requests on one HTTP/1.1 connection (`serve/http/shed-pacing.ts`):
 * the rule by hand, then a listening app whose backend sheds every request, driven by a client
 * that resends at once on one keep-alive connection, as a closed-loop load generator does.
 */
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHttpApp } from '../../src/serve/http/app.ts';
import { MAX_SHED_PACE_MS, ShedPacer } from '../../src/serve/http/shed-pacing.ts';
import { shedError } from '../../src/serve/admission.ts';
import type { AdmissionTicket } from '../../src/serve/inference.ts';
import { ServeMetrics } from '../../src/serve/metrics.ts';
import { FakeBackend } from './fake-backend.ts';

describe('ShedPacer', () => {
  const a = {} as Socket;
  const b = {} as Socket;

  it('answers the first shed on a connection at once, and a resend within retryInMs of it at retryInMs after it', () => {
    const p = new ShedPacer();
    expect(p.delayMs(a, 20, 1000)).toBe(0);
    p.answered(a, 1000);
    expect(p.delayMs(a, 20, 1001)).toBe(19);
    expect(p.delayMs(a, 20, 1020)).toBe(0);
    expect(p.delayMs(a, 20, 1500)).toBe(0);
    // connections are paced apart
    expect(p.delayMs(b, 20, 1001)).toBe(0);
  });

  it('holds a resend at most MAX_SHED_PACE_MS, and not at all without a measured retryInMs', () => {
    const p = new ShedPacer();
    p.answered(a, 0);
    expect(p.delayMs(a, 10 * MAX_SHED_PACE_MS, 1)).toBe(MAX_SHED_PACE_MS - 1);
    expect(p.delayMs(a, undefined, 1)).toBe(0);
    expect(p.delayMs(a, 0, 1)).toBe(0);
    expect(p.delayMs(a, Number.NaN, 1)).toBe(0);
  });
});

/** A backend whose gate sheds every infer request while `shedding` (device time per query `RETRY_IN_MS`). */
class SheddingBackend extends FakeBackend {
  shedding = true;
  admitted = 0;
  admit(): AdmissionTicket | undefined {
    if (this.shedding) throw shedError("overloaded: model 'm': test", RETRY_IN_MS);
    this.admitted++;
    return undefined;
  }
}

/** As long as the pacing goes (`MAX_SHED_PACE_MS`), so that a slow machine still resends within it. */
const RETRY_IN_MS = MAX_SHED_PACE_MS;
const BODY = JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 4], data: [1, 2, 3, 4] }] });

let backend: SheddingBackend;
let app: FastifyInstance;
let port: number;
const metrics = new ServeMetrics({ models: ['m', 'i64'] });
/** `abacus_shed_paced_total{model="m"}` now. */
async function pacedCount(): Promise<number> {
  const m = /^abacus_shed_paced_total\{model="m"\} (\d+)$/m.exec(await metrics.text());
  return m === null ? 0 : Number(m[1]);
}
beforeAll(async () => {
  backend = new SheddingBackend();
  app = createHttpApp(backend, { metrics });
  await app.listen({ host: '127.0.0.1', port: 0 });
  port = (app.server.address() as AddressInfo).port;
});
afterAll(async () => {
  await app.close();
});

/** POST an infer request through `agent`; resolves with the status, headers, body, the socket it went on and when its answer ended. */
function post(agent: http.Agent): Promise<{ status: number; retryAfter: string | undefined; body: string; socket: Socket; endMs: number }> {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: '127.0.0.1', port, path: '/v2/models/m/infer', method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(BODY) } }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, retryAfter: res.headers['retry-after'], body, socket: req.socket!, endMs: performance.now() }));
    });
    req.on('error', reject);
    req.end(BODY);
  });
}

describe('abacus serve paces a client that resends shed requests at once', () => {
  it('every resend on one keep-alive connection gets its own 503 with Retry-After, held and counted in abacus_shed_paced_total; the connection stays usable', async () => {
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      const answers = [];
      for (let i = 0; i < 4; i++) answers.push(await post(agent));
      for (const r of answers) {
        expect(r.status).toBe(503);
        expect(r.retryAfter).toBe('1');
        expect(JSON.parse(r.body)).toEqual({ error: "overloaded: model 'm': test" });
      }
      // one connection throughout (keep-alive), so every resend after the first is paced
      expect(new Set(answers.map((r) => r.socket)).size).toBe(1);
      // held: each resend arrived within RETRY_IN_MS of the previous 503 unless the machine took
      // longer than that to carry a 100-byte answer and a request over loopback, three times over
      const paced = await pacedCount();
      expect(paced).toBeGreaterThanOrEqual(1);
      expect(paced).toBeLessThanOrEqual(3);
      // once the gate admits again the same connection is served
      backend.shedding = false;
      const ok = await post(agent);
      expect(ok.status).toBe(200);
      expect(backend.admitted).toBe(1);
    } finally {
      backend.shedding = true;
      agent.destroy();
    }
  });

  it('a client that goes away while its 503 is held gets nothing and takes nothing down', async () => {
    const before = await pacedCount();
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    try {
      expect((await post(agent)).status).toBe(503);
      // the resend is held (unless the machine took ~100 ms to send it): abort it on the client
      // 5 ms after sending, long before a held answer could come
      const got = await new Promise<'error' | 'response'>((resolve) => {
        const req = http.request({ host: '127.0.0.1', port, path: '/v2/models/m/infer', method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(BODY) } });
        req.on('error', () => resolve('error'));
        req.on('response', () => resolve('response'));
        req.end(BODY, () => setTimeout(() => req.destroy(), 5));
      });
      const held = (await pacedCount()) - before;
      expect(held).toBeLessThanOrEqual(1);
      // held: nothing reached the client; not held: answered at once, before the abort
      expect(got).toBe(held === 1 ? 'error' : 'response');
    } finally {
      agent.destroy();
    }
    // the server answers the next client as before
    const fresh = new http.Agent({ keepAlive: false });
    try {
      const r = await post(fresh);
      expect(r.status).toBe(503);
      const live = await app.inject('/v2/health/live');
      expect(live.statusCode).toBe(200);
    } finally {
      fresh.destroy();
    }
  });
});
