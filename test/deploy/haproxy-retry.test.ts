/**
 * HAProxy 2.6 with the generated config (`src/deployment/haproxy.ts`) in front of two nodes that
 * run the project's real HTTP front end (`createHttpApp`, so the status mapping is the real
 * one) over stub backends: node `a` answers every request `overloaded` (503 + Retry-After) or,
 * for requests whose id starts with `qos`, `qos_violation` (504); node `b` answers success.
 *
 * Checks the retry semantics of docs/deploy.md: a 503 is replayed on the other node, a 504 never
 * is, and only a request that fits the replay buffer (`tune.bufsize − tune.maxrewrite`) is
 * replayed; a larger one gets node a's 503 as is. Every request gets exactly one answer.
 * Skipped, with the reason, where /usr/sbin/haproxy is missing (`.ci/run` installs it).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_HAPROXY_BIN, freePort } from '../../src/deployment/cluster.ts';
import { haproxyConfig, replayableRequestBytes } from '../../src/deployment/haproxy.ts';
import { createHttpApp } from '../../src/serve/http/app.ts';
import { ServeError, type InferenceBackend, type InferRequest, type InferResponse, type ModelConfig, type ModelMetadata, type ModelStatistics } from '../../src/serve/inference.ts';
import { ModelControlOff } from '../serve/model-control-off.ts';

const HAVE_HAPROXY = existsSync(DEFAULT_HAPROXY_BIN);
const BUFSIZE = 65_536;

/** Serves model `m` (one FP32 input `x`, any length); `mode` decides every answer. */
class StubBackend extends ModelControlOff implements InferenceBackend {
  readonly ids: string[] = [];
  constructor(private readonly mode: 'refuse' | 'serve') {
    super();
  }
  serverMetadata() {
    return { name: 'stub', version: '0', extensions: [] };
  }
  isLive() {
    return true;
  }
  isReady() {
    return true;
  }
  modelReady(name: string) {
    return this.modelMetadata(name).name === name;
  }
  modelMetadata(name: string): ModelMetadata {
    if (name !== 'm') throw new ServeError('model_not_found', `model ${name} is not served`);
    return { name, versions: ['1'], platform: 'stub', inputs: [{ name: 'x', datatype: 'FP32', shape: [-1] }], outputs: [{ name: 'y', datatype: 'FP32', shape: [-1] }] };
  }
  modelList() {
    return ['m'];
  }
  modelConfig(name: string): ModelConfig {
    return { name: this.modelMetadata(name).name, platform: 'stub', max_batch_size: 0, input: [], output: [] };
  }
  modelStatistics(): ModelStatistics[] {
    return [];
  }
  repositoryIndex() {
    return [];
  }
  async infer(request: InferRequest): Promise<InferResponse> {
    this.ids.push(request.id ?? '');
    await Promise.resolve();
    if (this.mode === 'refuse') {
      if (request.id?.startsWith('qos') === true) throw new ServeError('qos_violation', 'model m: dropped: deadline cannot be met');
      throw new ServeError('overloaded', 'model m: queue full');
    }
    return { modelName: 'm', modelVersion: '1', ...(request.id === undefined ? {} : { id: request.id }), outputs: { y: { dataType: 'float32', dims: [1], data: new Float32Array([1]) } }, outputDatatypes: { y: 'FP32' }, parameters: { queue_ms: 0, compute_ms: 0, operator_groups: 1, executed_batch_size: 1 } };
  }
}

let tmp: string;
let apps: FastifyInstance[] = [];
let a: StubBackend;
let b: StubBackend;
let haproxy: ChildProcess | undefined;
let url: string;

beforeAll(async () => {
  if (!HAVE_HAPROXY) return;
  tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-haproxy-retry-'));
  a = new StubBackend('refuse');
  b = new StubBackend('serve');
  apps = [createHttpApp(a), createHttpApp(b)];
  const ports: number[] = [];
  for (const app of apps) {
    await app.listen({ host: '127.0.0.1', port: 0 });
    ports.push((app.server.address() as AddressInfo).port);
  }
  const port = await freePort();
  const cfg = path.join(tmp, 'haproxy.cfg');
  await fs.writeFile(cfg, haproxyConfig({ nodes: [{ name: 'a', host: '127.0.0.1', httpPort: ports[0]! }, { name: 'b', host: '127.0.0.1', httpPort: ports[1]! }], httpPort: port, bufsizeBytes: BUFSIZE, checkIntervalMs: 200 }));
  const log = await fs.open(path.join(tmp, 'haproxy.log'), 'w');
  haproxy = spawn(DEFAULT_HAPROXY_BIN, ['-db', '-f', cfg], { stdio: ['ignore', log.fd, log.fd] });
  await log.close();
  url = `http://127.0.0.1:${port}`;
  // both nodes up (rise 2 × 200 ms): node b's success proves only that one is; wait for HAProxy's checks
  for (let i = 0; ; i++) {
    const ok = await fetch(`${url}/v2/health/ready`).then((r) => r.status === 200, () => false);
    if (ok && i >= 10) break;
    if (i > 200) throw new Error(`haproxy not serving: ${await fs.readFile(path.join(tmp, 'haproxy.log'), 'utf8')}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}, 60_000);

afterAll(async () => {
  if (haproxy !== undefined && haproxy.exitCode === null) {
    const exited = new Promise((r) => haproxy!.once('exit', r));
    haproxy.kill('SIGTERM');
    await exited;
  }
  await Promise.all(apps.map((app) => app.close()));
  if (tmp !== undefined) await fs.rm(tmp, { recursive: true, force: true });
});

/** A JSON infer request for model m whose body is about `bytes` long. */
function body(id: string, bytes: number): string {
  const n = Math.max(1, Math.floor(bytes / 4)); // "0.5," is 4 characters
  return JSON.stringify({ id, inputs: [{ name: 'x', datatype: 'FP32', shape: [n], data: new Array<number>(n).fill(0.5) }] });
}

async function post(id: string, bytes: number): Promise<{ status: number; id: unknown; retryAfter: string | null }> {
  const r = await fetch(`${url}/v2/models/m/infer`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: body(id, bytes) });
  const json = (await r.json()) as { id?: unknown };
  return { status: r.status, id: json.id, retryAfter: r.headers.get('retry-after') };
}

describe.skipIf(!HAVE_HAPROXY)(`HAProxy retry semantics (${HAVE_HAPROXY ? DEFAULT_HAPROXY_BIN : `skipped: ${DEFAULT_HAPROXY_BIN} is missing; apt-get install haproxy`})`, () => {
  const limit = replayableRequestBytes({ bufsizeBytes: BUFSIZE });

  it('replays a small request that node a refused as overloaded (503) on node b: all succeed', async () => {
    const small = Math.floor(limit / 4);
    expect(body('s', small).length).toBeLessThan(limit / 2);
    a.ids.length = 0;
    b.ids.length = 0;
    const results = [];
    for (let i = 0; i < 8; i++) results.push(await post(`small-${i}`, small));
    expect(results.map((r) => r.status)).toEqual(new Array(8).fill(200));
    expect(results.map((r) => r.id)).toEqual(results.map((_, i) => `small-${i}`));
    // leastconn alternates between idle nodes: some went to a first and were replayed on b
    expect(a.ids.length).toBeGreaterThanOrEqual(1);
    expect(b.ids.filter((id) => id.startsWith('small-')).sort()).toEqual(results.map((_, i) => `small-${i}`).sort());
  });

  it('never replays a qos_violation (504): the client gets it, node b never sees it', async () => {
    a.ids.length = 0;
    b.ids.length = 0;
    const results = [];
    for (let i = 0; i < 8; i++) results.push(await post(`qos-${i}`, 100));
    const to504 = results.filter((r) => r.status === 504);
    // each request reached a exactly once (answered 504) or b once (200): no request twice
    expect(to504.length).toBe(a.ids.length);
    expect(results.filter((r) => r.status === 200).length).toBe(b.ids.length);
    expect(to504.length + b.ids.length).toBe(8);
    expect(a.ids.length).toBeGreaterThanOrEqual(1);
    expect(new Set([...a.ids, ...b.ids]).size).toBe(8);
  });

  it('forwards a request larger than the replay buffer but does not replay it: node a\'s 503 reaches the client, with Retry-After', async () => {
    const large = limit * 4;
    a.ids.length = 0;
    b.ids.length = 0;
    const results = [];
    for (let i = 0; i < 8; i++) results.push(await post(`large-${i}`, large));
    const refused = results.filter((r) => r.status === 503);
    expect(refused.length).toBe(a.ids.length);
    expect(refused.length).toBeGreaterThanOrEqual(1);
    expect(refused.every((r) => r.retryAfter === '1')).toBe(true);
    expect(results.filter((r) => r.status === 200).length).toBe(b.ids.length);
    expect(a.ids.length + b.ids.length).toBe(8);
  });
});
