/**
 * Event-loop delay of `abacus serve` while four clients stream ~5 MB binary requests (goal: p99 ≤ 20 ms by `perf_hooks.monitorEventLoopDelay`).
 *
 * Setup: the server is assembled in this process the way `abacus serve` assembles it
 * (`assembleServing` + `startServer`, HTTP only) on `sim:a100` — a simulated device, so the
 * CPU work measured is the front end's and the runtime's (reading, decoding, validating,
 * batching 5 MB tensors), not a model's. One service `resnet` (resnet50, 224², batch 8:
 * [8, 3, 224, 224] FP32 = 4.8 MB per request, binary tensor data), fcfs, dynamic batching on
 * (the serve default), QoS target 60 s (nothing is dropped). The clients run in a worker
 * thread (its own event loop, so their work is not on the server's loop): `clients` keep-alive
 * connections, each sending a request as soon as its previous answer arrived, and a probe
 * that GETs `/v2/health/live` every 20 ms.
 *
 * Measured on the server's loop with `monitorEventLoopDelay({ resolution: 1 })` (values
 * include the 1 ms sampling interval), in three phases: `idleMs` with only the probe; then,
 * as the baseline, `durationMs` of the same four streams sent to a bare `node:http` server in
 * this process that drains each body and answers `{}` (the least any Node server does with
 * these bytes: the machine's share of the delay — CPU contention from other processes, the
 * kernel's socket work, the clients' worker — shows up there too); then `durationMs` against
 * abacus serve. Reported: p50 / p99 / max delay of each phase, abacus ÷ drain p99 (the
 * server's own share), requests answered and MB/s received, the live probe's latency under
 * load, and the load average.
 *
 * Then hostile clients (`event-loop-hostile.ts`: a 3 M-key JSON object, a 60 MB JSON float
 * array, 2 MB of nested brackets, 16 of the float arrays at once, 300 slow-header connections)
 * against the same server with the default limits (`defaults`), and against a second one whose
 * JSON limit is raised to the binary limit, 64 MiB (`jsonLimitRaised`), so that the large JSON
 * bodies are read and go through the key / depth scan and a codec thread instead of being refused
 * by their size. `hostileSize` and `headersTimeoutMs` shrink that part for a smoke run
 * (`--hostile-small`: `SMALL_HOSTILE` and a 1 s header timeout, so the slow-header connections
 * are closed after about a second instead of the default 10 s).
 */
import fs from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Worker } from 'node:worker_threads';
import { pino } from 'pino';
import { assembleServing } from '../src/deployment/serving.ts';
import { parseServingConfig } from '../src/runtime/config.ts';
import { startServer } from '../src/serve/server.ts';
import { DEFAULT_MAX_BODY_BYTES } from '../src/serve/http/limits.ts';
import { FULL_HOSTILE, runHostile, type HostileKindResult, type HostileSize } from './event-loop-hostile.ts';

export interface EventLoopResult {
  readonly loadAverage1m: number;
  readonly clients: number;
  readonly requestBytes: number;
  readonly durationMs: number;
  readonly idleDelayMs: Delay;
  /** The same streams against a bare node:http server that drains the bodies (baseline). */
  readonly drainDelayMs: Delay;
  readonly drainMBps: number;
  readonly loadDelayMs: Delay;
  /** p99 against abacus serve ÷ p99 against the bare drain server. */
  readonly p99Ratio: number;
  readonly requests: number;
  readonly byStatus: Readonly<Record<string, number>>;
  readonly receivedMBps: number;
  readonly liveProbeMs: { readonly p50: number; readonly p99: number; readonly max: number; readonly n: number };
  /** Hostile clients (see the file docs); absent with `hostile: false`. */
  readonly hostile?: { readonly size: HostileSize; readonly defaults: readonly HostileKindResult[]; readonly jsonLimitRaised: readonly HostileKindResult[]; readonly loadAverage1m: number };
}

interface Delay {
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
}

const BATCH = 8;

const NO_DELAY = { p50: Number.NaN, p99: Number.NaN, max: Number.NaN };
/** The steady-load fields when that part is skipped (`steady: false`). */
const EMPTY: EventLoopResult = { loadAverage1m: 0, clients: 0, requestBytes: 0, durationMs: 0, idleDelayMs: NO_DELAY, drainDelayMs: NO_DELAY, drainMBps: 0, loadDelayMs: NO_DELAY, p99Ratio: Number.NaN, requests: 0, byStatus: {}, receivedMBps: 0, liveProbeMs: { ...NO_DELAY, n: 0 } };
const IMAGE = 3 * 224 * 224;

/** The client worker: plain JavaScript (CommonJS, `eval: true`), no TypeScript loader needed. */
const CLIENT_WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const http = require('node:http');
const { base, headerJson, dataBytes, clients, durationMs } = workerData;
const header = Buffer.from(headerJson);
const body = Buffer.concat([header, Buffer.alloc(dataBytes, 0x3c)]);
const agent = new http.Agent({ keepAlive: true, maxSockets: clients + 1 });
const request = (method, path, payload, headers) => new Promise((resolve) => {
  const t0 = performance.now();
  const req = http.request(base + path, { method, agent, headers }, (res) => {
    res.resume();
    res.on('end', () => resolve({ status: res.statusCode, ms: performance.now() - t0 }));
  });
  req.on('error', () => resolve({ status: -1, ms: performance.now() - t0 }));
  req.end(payload);
});
const end = performance.now() + durationMs;
const results = [];
const probes = [];
const stream = async () => {
  const headers = { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(header.byteLength), 'content-length': String(body.byteLength) };
  while (performance.now() < end) results.push(await request('POST', '/v2/models/resnet/infer', body, headers));
};
const probe = async () => {
  while (performance.now() < end) {
    probes.push((await request('GET', '/v2/health/live')).ms);
    await new Promise((r) => setTimeout(r, 20));
  }
};
const mode = workerData.mode;
Promise.all(mode === 'idle' ? [probe()] : [probe(), ...Array.from({ length: clients }, stream)]).then(() => {
  agent.destroy();
  parentPort.postMessage({ results, probes, bodyBytes: body.byteLength });
});
`;

interface WorkerReport {
  readonly results: { status: number; ms: number }[];
  readonly probes: number[];
  readonly bodyBytes: number;
}

function quantiles(xs: readonly number[]): { p50: number; p99: number; max: number; n: number } {
  const s = Float64Array.from(xs).sort();
  const at = (p: number): number => (s.length === 0 ? Number.NaN : s[Math.max(0, Math.ceil((p / 100) * s.length) - 1)]!);
  return { p50: at(50), p99: at(99), max: at(100), n: s.length };
}

/** A bare node:http server on a free loopback port: drains every body, answers `{}`. */
async function drainServer(): Promise<{ base: string; close: () => Promise<void> }> {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

async function phase(base: string, mode: 'idle' | 'load', clients: number, durationMs: number): Promise<{ delay: Delay; report: WorkerReport }> {
  const headerJson = JSON.stringify({ inputs: [{ name: 'input', datatype: 'FP32', shape: [BATCH, 3, 224, 224], parameters: { binary_data_size: BATCH * IMAGE * 4 } }] });
  const h = monitorEventLoopDelay({ resolution: 1 });
  h.enable();
  const worker = new Worker(CLIENT_WORKER, { eval: true, workerData: { base, headerJson, dataBytes: BATCH * IMAGE * 4, clients, durationMs, mode } });
  const report = await new Promise<WorkerReport>((resolve, reject) => {
    worker.once('message', (m: WorkerReport) => resolve(m));
    worker.once('error', reject);
  });
  h.disable();
  await worker.terminate();
  const ms = (ns: number): number => ns / 1e6;
  return { delay: { p50: ms(h.percentile(50)), p99: ms(h.percentile(99)), max: ms(h.max) }, report };
}

export interface EventLoopOptions {
  readonly log?: (s: string) => void;
  /** Each load phase, ms (15,000). */
  readonly durationMs?: number;
  /** The idle phase, ms (3000). */
  readonly idleMs?: number;
  /** Streaming clients (4). */
  readonly clients?: number;
  /** Run the hostile clients (true). */
  readonly hostile?: boolean;
  /** Sizes of the hostile traffic (`FULL_HOSTILE`). */
  readonly hostileSize?: HostileSize;
  /** The servers' HTTP header timeout, ms (the serve default, 10 s); the slow-header kind waits for it. */
  readonly headersTimeoutMs?: number;
  /** Run the idle / drain / load phases (true). */
  readonly steady?: boolean;
  /** Operator groups profiled for the servers' predictor (200); fcfs schedules without it, so a smoke run may profile fewer. */
  readonly profileSamples?: number;
}

export async function benchEventLoop(opts: EventLoopOptions = {}): Promise<EventLoopResult> {
  const log = opts.log ?? (() => undefined);
  const durationMs = opts.durationMs ?? 15_000;
  const idleMs = opts.idleMs ?? 3000;
  const clients = opts.clients ?? 4;
  const hostileSize = opts.hostileSize ?? FULL_HOSTILE;
  const profileSamples = opts.profileSamples ?? 200;
  const timeouts = opts.headersTimeoutMs === undefined ? {} : { timeouts: { headersTimeoutMs: opts.headersTimeoutMs } };
  const tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-bench-loop-'));
  const logger = pino({ level: 'warn' }, pino.destination(2));
  try {
    const config = parseServingConfig(
      { device: 'sim:a100', policy: 'fcfs', services: [{ name: 'resnet', model: 'resnet50', qosTargetMs: 60_000, batchSizes: [BATCH], maxQueueLength: 64 }] },
      'event-loop bench',
      tmp,
    );
    const ctx = { err: (t: string) => log(t), cacheOptions: () => ({ cacheDir: tmp }) };
    log('event loop: assembling abacus serve (sim:a100, resnet50 batch 8, fcfs; profiling a small predictor) …\n');
    const { backend, metrics, openEngine } = await assembleServing(ctx, config, { logger, serverVersion: 'bench', seed: 1, profileSamples });
    const server = await startServer({ backend, openEngine, logger, metrics, host: '127.0.0.1', httpPort: 0, ...timeouts });
    let hostile: EventLoopResult['hostile'];
    try {
      await server.ready;
      if (opts.hostile ?? true) {
        const target = { model: 'resnet', input: 'input', shape: [BATCH, 3, 224, 224] };
        const defaults = await runHostile(server.httpUrl, target, log, hostileSize);
        log('event loop: hostile clients again, against a server whose JSON limit is raised to 64 MiB …\n');
        const second = await assembleServing(ctx, config, { logger, serverVersion: 'bench', seed: 1, profileSamples });
        const raised = await startServer({ ...second, logger, host: '127.0.0.1', httpPort: 0, maxJsonBodyBytes: DEFAULT_MAX_BODY_BYTES, ...timeouts });
        try {
          await raised.ready;
          hostile = { size: hostileSize, defaults, jsonLimitRaised: await runHostile(raised.httpUrl, target, log, hostileSize), loadAverage1m: os.loadavg()[0]! };
        } finally {
          await raised.shutdown(2000);
        }
      }
      if (opts.steady === false) return { ...EMPTY, loadAverage1m: os.loadavg()[0]!, ...(hostile === undefined ? {} : { hostile }) };
      log(`event loop: idle ${idleMs / 1000} s (probe only), then (to a bare drain server, then to abacus serve) ${clients} clients streaming ${((BATCH * IMAGE * 4) / 1e6).toFixed(1)} MB requests for ${durationMs / 1000} s …\n`);
      const idle = await phase(server.httpUrl, 'idle', clients, idleMs);
      const bare = await drainServer();
      let drain: Awaited<ReturnType<typeof phase>>;
      try {
        drain = await phase(bare.base, 'load', clients, durationMs);
      } finally {
        await bare.close();
      }
      const load = await phase(server.httpUrl, 'load', clients, durationMs);
      const byStatus: Record<string, number> = {};
      for (const r of load.report.results) byStatus[r.status] = (byStatus[r.status] ?? 0) + 1;
      const live = quantiles(load.report.probes);
      return {
        loadAverage1m: os.loadavg()[0]!,
        clients,
        requestBytes: load.report.bodyBytes,
        durationMs,
        idleDelayMs: idle.delay,
        drainDelayMs: drain.delay,
        drainMBps: (drain.report.results.length * drain.report.bodyBytes) / 1e6 / (durationMs / 1000),
        loadDelayMs: load.delay,
        p99Ratio: load.delay.p99 / drain.delay.p99,
        requests: load.report.results.length,
        byStatus,
        receivedMBps: (load.report.results.length * load.report.bodyBytes) / 1e6 / (durationMs / 1000),
        liveProbeMs: live,
        ...(hostile === undefined ? {} : { hostile }),
      };
    } finally {
      await server.shutdown(2000);
    }
  } finally {
    await fs.rm(tmp, { recursive: true, force: true });
  }
}
