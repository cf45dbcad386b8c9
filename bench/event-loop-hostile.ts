/**
 * Hostile clients against `abacus serve` (the event-loop bench's second part; docs/benchmarks.md
 * "Event loop"): while each kind of hostile traffic arrives, a probe GETs `/v2/health/live`
 * every 10 ms; reported per kind: the probe's latency p50 / p99 / p100 (goal: p99 ≤ 20 ms,
 * p100 ≤ 100 ms), the server's event-loop delay, its RSS growth (peak during the kind minus the
 * RSS before it, sampled every 20 ms), and the answers the hostile requests got.
 *
 * Kinds at the benchmark's sizes (`FULL_HOSTILE`; `SMALL_HOSTILE` for a smoke run), bodies
 * generated as they are sent, so the client holds none of them in memory:
 * - `keys`: a 38 MB JSON object of 3 M keys (`{"k0":0,"k1":1,…}`);
 * - `floats`: a 60 MB JSON float array as the data of the served input (3.16 M values, more than
 *   its shape holds);
 * - `nested`: 2 MB of `[`;
 * - `floats×16`: 16 of the 60 MB float arrays at once;
 * - `slow-headers`: 300 connections that send a header byte a second and never end the headers
 *   (reported: how many the server closed, with a 408, and when the last closed).
 *
 * The clients run in a separate node process (plain JavaScript, `node -e`), so that neither
 * their memory nor their CPU is the server's; the server runs in this process, whose RSS is the
 * server's. Each kind gets one request at a time except where said, and waits for every answer.
 */
import { spawn } from 'node:child_process';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { createInterface } from 'node:readline';

export interface HostileKindResult {
  readonly kind: string;
  /** Size of one hostile body, MB (0 for slow headers). */
  readonly bodyMB: number;
  readonly wallMs: number;
  /** Answers of the hostile requests by status (`-1`: no answer, the connection broke). */
  readonly byStatus: Readonly<Record<string, number>>;
  /** The first answer's error message, cut at 160 characters. */
  readonly firstError: string;
  readonly liveMs: { readonly p50: number; readonly p99: number; readonly p100: number; readonly n: number };
  readonly loopDelayMs: { readonly p99: number; readonly max: number };
  readonly rssGrowthMB: number;
  /** slow-headers only: connections the server closed, and when the last one closed, ms after they opened. */
  readonly closed?: number;
  readonly lastClosedMs?: number;
}

/** The client process: one kind at a time on command (a line of JSON on stdin), one line of JSON per kind on stdout. */
const CLIENT = String.raw`
const http = require('node:http');
const net = require('node:net');
const readline = require('node:readline');
const base = new URL(process.env.BENCH_BASE);
const liveAgent = new http.Agent({ keepAlive: true, maxSockets: 1 });
const q = (xs, p) => { const s = [...xs].sort((a, b) => a - b); return s.length === 0 ? NaN : s[Math.max(0, Math.ceil((p / 100) * s.length) - 1)]; };
const probe = () => {
  const lat = [];
  let on = true;
  const loop = async () => {
    while (on) {
      const t0 = performance.now();
      await new Promise((resolve) => {
        const req = http.get({ host: base.hostname, port: base.port, path: '/v2/health/live', agent: liveAgent }, (res) => { res.resume(); res.on('end', resolve); });
        req.on('error', resolve);
      });
      lat.push(performance.now() - t0);
      await new Promise((r) => setTimeout(r, 10));
    }
  };
  const done = loop();
  return async () => { on = false; await done; return { p50: q(lat, 50), p99: q(lat, 99), p100: q(lat, 100), n: lat.length }; };
};
// a body as a generator of string chunks of about 64 KiB, and its exact length
const key = (i) => '"k' + i.toString(36) + '":' + (i % 1000);
function* keysBody(n) { let s = '{'; for (let i = 0; i < n; i++) { s += (i ? ',' : '') + key(i); if (s.length > 65536) { yield s; s = ''; } } yield s + '}'; }
const keysLength = (n) => { let len = 2 + (n - 1); for (let i = 0; i < n; i++) len += key(i).length; return len; };
const VALUE = '0.5123456789012345';
const floatsHead = (input, shape) => '{"inputs":[{"name":"' + input + '","datatype":"FP32","shape":' + JSON.stringify(shape) + ',"data":[';
function* floatsBody(head, n) { yield head; const row = (VALUE + ',').repeat(3000); let left = n - 1; while (left > 0) { const k = Math.min(3000, left); yield k === 3000 ? row : row.slice(0, k * (VALUE.length + 1)); left -= k; } yield VALUE + ']}]}'; }
const floatsLength = (head, n) => head.length + n * (VALUE.length + 1) - 1 + 4;
function* nestedBody(n) { const c = '['.repeat(65536); for (let left = n; left > 0; left -= 65536) yield left >= 65536 ? c : '['.repeat(left); }
const post = (path, chunks, length) => new Promise((resolve) => {
  const req = http.request({ host: base.hostname, port: base.port, path, method: 'POST', agent: false, headers: { 'content-type': 'application/json', 'content-length': String(length) } }, (res) => {
    let text = ''; res.setEncoding('utf8'); res.on('data', (c) => { if (text.length < 400) text += c; }); res.on('end', () => resolve({ status: res.statusCode, text }));
  });
  let answered = false;
  req.on('response', () => { answered = true; });
  req.on('error', () => { if (!answered) resolve({ status: -1, text: '' }); });
  const it = chunks[Symbol.iterator]();
  const pump = () => { for (;;) { const { value, done } = it.next(); if (done) { req.end(); return; } if (!req.write(value)) { req.once('drain', pump); return; } } };
  pump();
});
const slowHeaders = (n) => new Promise((resolve) => {
  const t0 = performance.now();
  let closed = 0, got408 = 0, last = 0, left = n;
  for (let i = 0; i < n; i++) {
    const s = net.connect(Number(base.port), base.hostname, () => s.write('POST /v2/models/x/infer HTTP/1.1\r\nHost: x\r\nX-Slow: '));
    const drip = setInterval(() => { if (s.writable) s.write('a'); }, 1000);
    let first = '';
    s.on('data', (c) => { if (first.length < 20) first += c.toString('latin1'); });
    s.on('error', () => undefined);
    s.on('close', () => { clearInterval(drip); closed++; last = performance.now() - t0; if (first.startsWith('HTTP/1.1 408')) got408++; if (--left === 0) resolve({ closed, got408, last }); });
  }
  setTimeout(() => resolve({ closed, got408, last: NaN, open: left }), Number(process.env.BENCH_SLOW_CAP_MS));
});
const cfg = JSON.parse(process.env.BENCH_CFG);
const run = async (kind) => {
  const stop = probe();
  await new Promise((r) => setTimeout(r, 300)); // probe baseline before the hostile traffic
  const t0 = performance.now();
  let answers = [], extra = {}, bodyMB = 0;
  const infer = '/v2/models/' + cfg.model + '/infer';
  const h = floatsHead(cfg.input, cfg.shape);
  if (kind === 'keys') { bodyMB = keysLength(cfg.keys) / 1e6; answers = [await post(infer, keysBody(cfg.keys), keysLength(cfg.keys))]; }
  else if (kind === 'floats') { bodyMB = floatsLength(h, cfg.floats) / 1e6; answers = [await post(infer, floatsBody(h, cfg.floats), floatsLength(h, cfg.floats))]; }
  else if (kind === 'nested') { bodyMB = cfg.nestedBytes / 1e6; answers = [await post(infer, nestedBody(cfg.nestedBytes), cfg.nestedBytes)]; }
  else if (kind === 'floats×16') { bodyMB = floatsLength(h, cfg.floats) / 1e6; answers = await Promise.all(Array.from({ length: cfg.concurrent }, () => post(infer, floatsBody(h, cfg.floats), floatsLength(h, cfg.floats)))); }
  else if (kind === 'slow-headers') { const r = await slowHeaders(cfg.slowConnections); answers = Array.from({ length: r.closed }, (_, i) => ({ status: i < r.got408 ? 408 : -1, text: '' })); extra = { closed: r.closed, lastClosedMs: r.last }; }
  const wallMs = performance.now() - t0;
  await new Promise((r) => setTimeout(r, 300));
  const liveMs = await stop();
  const byStatus = {};
  for (const a of answers) byStatus[a.status] = (byStatus[a.status] || 0) + 1;
  let firstError = '';
  try { firstError = JSON.parse(answers.find((a) => a.text)?.text || '{}').error || ''; } catch { firstError = ''; }
  return { kind, bodyMB, wallMs, byStatus, firstError: firstError.slice(0, 160), liveMs, ...extra };
};
readline.createInterface({ input: process.stdin }).on('line', async (line) => {
  const { kind } = JSON.parse(line);
  if (kind === 'exit') { liveAgent.destroy(); process.exit(0); }
  process.stdout.write(JSON.stringify(await run(kind)) + '\n');
});
process.stdout.write('{"ready":true}\n');
`;

/** The kinds in the order they are sent; `floats×16` sends `HostileSize.concurrent` float arrays at once (16 at full size). */
export const HOSTILE_KINDS = ['keys', 'floats', 'nested', 'floats×16', 'slow-headers'] as const;

/** Sizes of the hostile traffic. */
export interface HostileSize {
  /** Keys of the `keys` JSON object. */
  readonly keys: number;
  /** Size of one float-array body, MB (10^6 bytes). */
  readonly floatsMB: number;
  /** Bytes of `[` of the `nested` body. */
  readonly nestedBytes: number;
  /** Float-array bodies sent at once by `floats×16`. */
  readonly concurrent: number;
  /** Slow-header connections. */
  readonly slowConnections: number;
  /** How long the slow-header kind waits for the server to close them, ms. */
  readonly slowCapMs: number;
}

/** The benchmark's sizes (the ones docs/benchmarks.md "Hostile clients" reports). */
export const FULL_HOSTILE: HostileSize = { keys: 3e6, floatsMB: 60, nestedBytes: 2e6, concurrent: 16, slowConnections: 300, slowCapMs: 40_000 };

/**
 * Small sizes that run every kind's code path in a few seconds (`--hostile-small`, the bench
 * smoke test): bodies of about 1 MB, 4 at once, 20 slow-header connections. The cap on the slow
 * headers is generous so that a busy machine's late sweep still counts them closed.
 */
export const SMALL_HOSTILE: HostileSize = { keys: 50_000, floatsMB: 1, nestedBytes: 100_000, concurrent: 4, slowConnections: 20, slowCapMs: 40_000 };

/**
 * Run every hostile kind against the server at `base` (in this process).
 * @param target the served model, its input and shape (the float arrays are its `data`).
 * @param size the sizes of the hostile traffic ([`FULL_HOSTILE`]).
 */
export async function runHostile(base: string, target: { model: string; input: string; shape: readonly number[] }, log: (s: string) => void, size: HostileSize = FULL_HOSTILE): Promise<HostileKindResult[]> {
  const floats = Math.floor((size.floatsMB * 1e6) / ('0.5123456789012345'.length + 1));
  const cfg = { ...target, floats, keys: size.keys, nestedBytes: size.nestedBytes, concurrent: size.concurrent, slowConnections: size.slowConnections };
  const child = spawn(process.execPath, ['-e', CLIENT], { env: { ...process.env, BENCH_BASE: base, BENCH_SLOW_CAP_MS: String(size.slowCapMs), BENCH_CFG: JSON.stringify(cfg) }, stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const next = async (): Promise<Record<string, unknown>> => {
    const { value, done } = await lines.next();
    if (done === true) throw new Error('the hostile client process ended early');
    return JSON.parse(value) as Record<string, unknown>;
  };
  const results: HostileKindResult[] = [];
  try {
    await next(); // ready
    for (const kind of HOSTILE_KINDS) {
      log(`event loop: hostile ${kind} …\n`);
      const rss0 = process.memoryUsage.rss();
      let peak = rss0;
      const sampler = setInterval(() => {
        peak = Math.max(peak, process.memoryUsage.rss());
      }, 20);
      const h = monitorEventLoopDelay({ resolution: 1 });
      h.enable();
      child.stdin.write(JSON.stringify({ kind }) + '\n');
      const r = await next();
      h.disable();
      clearInterval(sampler);
      results.push({ ...(r as unknown as Omit<HostileKindResult, 'loopDelayMs' | 'rssGrowthMB'>), loopDelayMs: { p99: h.percentile(99) / 1e6, max: h.max / 1e6 }, rssGrowthMB: (peak - rss0) / 1e6 });
    }
  } finally {
    child.stdin.write('{"kind":"exit"}\n');
    child.stdin.end();
  }
  return results;
}
