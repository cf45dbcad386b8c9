/**
 * How fast `abacus serve` answers `503 overloaded` under a 10× overload: the goal (set when
 * serving was built) is p99 ≤ 5 ms on the server. The end-to-end overload test checks that
 * every request gets exactly one answer and memory stays bounded; this benchmark measures the
 * time, which depends on the machine and has no place in the suite.
 *
 * Setup (the overload test's): `abacus serve` as a child process on `sim:a100` with the wall
 * clock, one service `resnet` (resnet50-small, batch 1, fcfs without drop, queue bounded at
 * 32), driven open-loop over HTTP (binary tensor, 49 KB per request) at 10× the capacity
 * measured from the server's `compute_ms` of solo requests, for `durationMs`.
 *
 * Reported: the server-side response time of every 503 (fastify's `responseTime`, first byte to
 * reply written, from the `request completed` log lines) and the client-side time of the same
 * requests (the client shares the CPUs with the server: its tail measures the machine), p50 /
 * p99 / max, with the load average.
 */
import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { nearestRank } from '../src/runtime/stats.ts';
import { startBenchServer } from './serve-child.ts';

const IMAGE_BYTES = 3 * 64 * 64 * 4;

export interface ServeOverloadResult {
  readonly loadAverage1m: number;
  readonly capacityQps: number;
  readonly offeredQps: number;
  readonly durationMs: number;
  readonly requests: number;
  readonly byStatus: Readonly<Record<string, number>>;
  readonly server503Ms: { readonly p50: number; readonly p99: number; readonly max: number; readonly n: number };
  readonly client503Ms: { readonly p50: number; readonly p99: number; readonly max: number; readonly n: number };
}

const summary = (xs: number[]): ServeOverloadResult['server503Ms'] => {
  const sorted = Float64Array.from(xs).sort();
  return { p50: nearestRank(sorted, 50), p99: nearestRank(sorted, 99), max: nearestRank(sorted, 100), n: sorted.length };
};

export async function benchServeOverload(opts: { log?: (s: string) => void; durationMs?: number } = {}): Promise<ServeOverloadResult> {
  const log = opts.log ?? (() => undefined);
  const durationMs = opts.durationMs ?? 20_000;
  const tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-bench-overload-'));
  const config = path.join(tmp, 'overload.yaml');
  await fs.writeFile(config, ['device: sim:a100', 'policy: { name: fcfs, drop: false }', 'services:', '  - name: resnet', '    model: resnet50-small', '    qosTargetMs: 2000', '    batchSizes: [1]', '    maxQueueLength: 32', ''].join('\n'));
  const logFile = path.join(tmp, 'serve.log');
  log(`serve overload: starting abacus serve (sim:a100, resnet50-small, fcfs, queue 32) …\n`);
  const server = await startBenchServer(config, { logFile, flags: ['--no-grpc', '--profile-samples', '100', '--grace-ms', '2000'], env: { ABACUS_LOG_LEVEL: 'info' }, readyTimeoutMs: 10 * 60_000 });
  try {
    const httpUrl = server.httpUrl;
    const url = new URL(`${httpUrl}/v2/models/resnet/infer`);
    const header = Buffer.from(JSON.stringify({ inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3, 64, 64], parameters: { binary_data_size: IMAGE_BYTES } }] }));
    const body = Buffer.concat([header, Buffer.alloc(IMAGE_BYTES)]);
    const headers = { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(header.byteLength) };
    const solo: number[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await fetch(url, { method: 'POST', headers, body });
      solo.push(((await r.json()) as { parameters: { compute_ms: number } }).parameters.compute_ms);
    }
    solo.sort((a, b) => a - b);
    const capacityQps = 1000 / solo[2]!;
    const offeredQps = 10 * capacityQps;
    log(`serve overload: capacity ${capacityQps.toFixed(0)} q/s; offering ${offeredQps.toFixed(0)} q/s for ${durationMs / 1000} s …\n`);
    const logStart = (await fs.stat(logFile)).size;
    const agent = new http.Agent({ keepAlive: true, maxSockets: 256 });
    const send = (): Promise<{ status: number; ms: number }> =>
      new Promise((resolve) => {
        const t0 = performance.now();
        const req = http.request(url, { method: 'POST', agent, headers: { ...headers, 'content-length': String(body.byteLength) } }, (res) => {
          res.resume();
          res.on('end', () => resolve({ status: res.statusCode ?? 0, ms: performance.now() - t0 }));
          res.on('error', () => resolve({ status: -1, ms: performance.now() - t0 }));
        });
        req.setTimeout(30_000, () => req.destroy(new Error('no answer within 30 s')));
        req.on('error', () => resolve({ status: -1, ms: performance.now() - t0 }));
        req.end(body);
      });
    const answers: Promise<{ status: number; ms: number }>[] = [];
    const start = performance.now();
    await new Promise<void>((resolve) => {
      const tick = (): void => {
        const elapsed = performance.now() - start;
        const due = Math.min(Math.floor((elapsed / 1000) * offeredQps), Math.round((durationMs / 1000) * offeredQps));
        while (answers.length < due) answers.push(send());
        if (elapsed >= durationMs) resolve();
        else setTimeout(tick, 2);
      };
      tick();
    });
    const results = await Promise.all(answers);
    agent.destroy();
    await new Promise((r) => setTimeout(r, 200)); // the last log lines
    const server503: number[] = [];
    for (const line of (await fs.readFile(logFile)).subarray(logStart).toString('utf8').split('\n')) {
      if (!line.includes('"statusCode":503') || !line.includes('request completed')) continue;
      const ms = (JSON.parse(line) as { responseTimeMs?: number }).responseTimeMs;
      if (typeof ms === 'number') server503.push(ms);
    }
    const byStatus: Record<string, number> = {};
    for (const r of results) byStatus[r.status] = (byStatus[r.status] ?? 0) + 1;
    return {
      loadAverage1m: os.loadavg()[0]!,
      capacityQps,
      offeredQps,
      durationMs,
      requests: results.length,
      byStatus,
      server503Ms: summary(server503),
      client503Ms: summary(results.filter((r) => r.status === 503).map((r) => r.ms)),
    };
  } finally {
    await server.stop();
    await fs.rm(tmp, { recursive: true, force: true });
  }
}
