/**
 * Overload (docs/overload.md "Overload and admission"): `abacus serve` as a child process on `sim:a100`
 * (wall clock), one service `resnet` (resnet50-small, batch 1, fcfs: one operator group at a
 * time, queue bounded at 32), driven open-loop over HTTP at 10× its served capacity for 8 s.
 *
 * Capacity is measured, not assumed: the server's own `compute_ms` of a few solo requests is the
 * simulated device time per query, and fcfs runs one query at a time, so capacity = 1000 /
 * compute_ms queries/s (≈ 130 q/s; the sim's resnet50-small at batch 1 is ≈ 7.6 ms).
 *
 * Requirements checked:
 * - responses == requests: every request sent gets exactly one HTTP response (no socket error,
 *   no hang), each 200 or 503 `overloaded` (nothing else);
 * - server RSS bounded: VmRSS of the server process (sampled from /proc every 250 ms) never
 *   exceeds its RSS before the load + 300 MB (the bounded queue holds at most 32 × 49 KB inputs;
 *   the rest is V8 heap churn from ~10 000 bodies of 49 KB; a body kept per request would pass
 *   the bound after about 6 400 requests, well inside the storm);
 * - every 503 has its server-side response time in the log (fastify's `responseTime`, from the
 *   request's first byte to the reply written, read from the per-request `request completed`
 *   lines). How fast rejections are answered is a measurement, printed with the client-side
 *   times, not asserted: wall-clock bounds do not belong in a suite that must pass on a loaded
 *   machine (measured here at load 6–8: server p99 3.8–4.7 ms against a 5 ms goal; client p50
 *   16–38 ms, p99 0.6–1.7 s, where every stall of the client or the server holds up the ~1300
 *   requests/s sent meanwhile);
 * - the server keeps serving: some requests succeed, `/metrics` counts every answer, and it is
 *   ready after the storm. Its throughput under the storm is printed (it depends on the CPU
 *   share the server gets).
 */
import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cpuMs, metricValue, rssBytes, startChildServer, writeConfig, type ChildServer } from './child-serve.ts';

const IMAGE_BYTES = 3 * 64 * 64 * 4;
const DURATION_MS = 8000;
const RSS_SLACK_BYTES = 300 * 1024 * 1024;

let tmp: string;
let server: ChildServer;

beforeAll(async () => {
  tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-overload-'));
  const config = await writeConfig(tmp, 'overload.yaml', [
    'device: sim:a100',
    'policy: { name: fcfs, drop: false }',
    'services:',
    '  - name: resnet',
    '    model: resnet50-small',
    '    qosTargetMs: 2000',
    '    batchSizes: [1]',
    '    maxQueueLength: 32',
  ]);
  // info level: one `request completed` line per request with the server-side response time
  server = await startChildServer(config, { cacheDir: path.join(tmp, 'models'), flags: ['--profile-samples', '100', '--grace-ms', '2000'], logLevel: 'info', stderrFile: path.join(tmp, 'serve.log') });
}, 180_000);

afterAll(async () => {
  await server?.stop(5000);
  await fs.rm(tmp, { recursive: true, force: true });
});

function quantile(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  return sorted[Math.min(sorted.length - 1, Math.ceil(q * sorted.length) - 1)]!;
}

interface Answer {
  readonly status: number;
  readonly ms: number;
  readonly error?: string;
}

describe('abacus serve under 10× overload (child process, sim:a100, wall clock)', () => {
  it('answers every request (200 or 503 overloaded) and keeps RSS bounded; prints how fast it rejects', { timeout: 120_000 }, async () => {
    const logStartBytes = (await fs.stat(path.join(tmp, 'serve.log'))).size;
    const url = new URL(`${server.httpUrl}/v2/models/resnet/infer`);
    const header = Buffer.from(JSON.stringify({ inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3, 64, 64], parameters: { binary_data_size: IMAGE_BYTES } }] }));
    const body = Buffer.concat([header, Buffer.alloc(IMAGE_BYTES, 1)]);
    const agent = new http.Agent({ keepAlive: true, maxSockets: 128 });
    const send = (): Promise<Answer> =>
      new Promise((resolve) => {
        const t0 = performance.now();
        const req = http.request(
          url,
          { method: 'POST', agent, headers: { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(header.byteLength), 'content-length': String(body.byteLength) } },
          (res) => {
            const chunks: Buffer[] = [];
            res.on('data', (c: Buffer) => chunks.push(c));
            res.on('end', () => {
              const ms = performance.now() - t0;
              const status = res.statusCode ?? 0;
              if (status === 200 || (status === 503 && /"error":"overloaded: model 'resnet'/.test(Buffer.concat(chunks).toString()))) resolve({ status, ms });
              else resolve({ status, ms, error: Buffer.concat(chunks).toString().slice(0, 300) });
            });
            res.on('error', (e) => resolve({ status: -1, ms: performance.now() - t0, error: String(e) }));
          },
        );
        req.setTimeout(30_000, () => req.destroy(new Error('no answer within 30 s')));
        req.on('error', (e) => resolve({ status: -1, ms: performance.now() - t0, error: String(e) }));
        req.end(body);
      });

    try {
      // capacity from the simulated device time of solo requests (one at a time)
      const solo: number[] = [];
      for (let i = 0; i < 5; i++) {
        const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(header.byteLength) }, body });
        expect(r.status).toBe(200);
        const json = (await r.json()) as { parameters: { compute_ms: number } }; // outputs as JSON: no binary output asked for
        solo.push(json.parameters.compute_ms);
      }
      solo.sort((a, b) => a - b);
      const capacityQps = 1000 / solo[2]!;
      const rateQps = 10 * capacityQps;
      const before = await (await fetch(`${server.httpUrl}/metrics`)).text();
      const rssStart = (await rssBytes(server.pid)) ?? Number.NaN;
      let rssMax = rssStart;
      const serverCpu0 = (await cpuMs(server.pid)) ?? Number.NaN;
      const clientCpu0 = process.cpuUsage();
      const sampler = setInterval(() => {
        void rssBytes(server.pid).then((r) => {
          if (r !== undefined) rssMax = Math.max(rssMax, r);
        });
      }, 250);

      // open loop: every tick, send what the schedule says is due by now
      const answers: Promise<Answer>[] = [];
      const start = performance.now();
      await new Promise<void>((resolve) => {
        const tick = (): void => {
          const elapsed = performance.now() - start;
          const due = Math.min(Math.floor((elapsed / 1000) * rateQps), Math.round((DURATION_MS / 1000) * rateQps));
          while (answers.length < due) answers.push(send());
          if (elapsed >= DURATION_MS) resolve();
          else setTimeout(tick, 2);
        };
        tick();
      });
      const sentMs = performance.now() - start;
      const results = await Promise.all(answers);
      const serverCpu = ((await cpuMs(server.pid)) ?? Number.NaN) - serverCpu0;
      const clientCpuUs = process.cpuUsage(clientCpu0);
      const clientCpu = (clientCpuUs.user + clientCpuUs.system) / 1000;
      clearInterval(sampler);
      rssMax = Math.max(rssMax, (await rssBytes(server.pid)) ?? 0);
      const rssEnd = (await rssBytes(server.pid)) ?? Number.NaN;
      agent.destroy();

      const byStatus: Record<string, number> = {};
      for (const a of results) byStatus[a.status] = (byStatus[a.status] ?? 0) + 1;
      const failures = results.filter((a) => a.error !== undefined);
      const rejectedMs = results.filter((a) => a.status === 503).map((a) => a.ms).sort((a, b) => a - b);
      const after = await (await fetch(`${server.httpUrl}/metrics`)).text();
      const counted = (outcome: string): number => metricValue(after, `abacus_requests_total{model="resnet",outcome="${outcome}"}`) - metricValue(before, `abacus_requests_total{model="resnet",outcome="${outcome}"}`);

      // server-side response times of the 503s, from the request log lines; the child writes them
      // when it gets to it (later on a busy machine): read until every 503 has its line (giving up
      // after a generous 30 s, so that a missing line fails the count below rather than a timeout)
      const readRejectedMs = async (): Promise<number[]> => {
        const out: number[] = [];
        for (const line of (await fs.readFile(path.join(tmp, 'serve.log'))).subarray(logStartBytes).toString('utf8').split('\n')) {
          if (!line.includes('"statusCode":503') || !line.includes('request completed')) continue;
          const ms = (JSON.parse(line) as { responseTimeMs?: number }).responseTimeMs;
          if (typeof ms === 'number') out.push(ms);
        }
        return out;
      };
      let serverRejectedMs = await readRejectedMs();
      const giveUpAt = Date.now() + 30_000;
      while (serverRejectedMs.length < (byStatus['503'] ?? 0) && Date.now() < giveUpAt) {
        await new Promise((r) => setTimeout(r, 50));
        serverRejectedMs = await readRejectedMs();
      }
      serverRejectedMs.sort((a, b) => a - b);

      const mb = (b: number): string => (b / 1024 / 1024).toFixed(0);
      console.log(
        `overload: solo compute ${solo[2]!.toFixed(2)} ms → capacity ${capacityQps.toFixed(0)} q/s; offered ${rateQps.toFixed(0)} q/s for ${(sentMs / 1000).toFixed(1)} s: ` +
          `${answers.length} requests, ${results.length} responses, by status ${JSON.stringify(byStatus)}; ` +
          `RSS start ${mb(rssStart)} MB, max ${mb(rssMax)} MB, end ${mb(rssEnd)} MB; CPU server ${((100 * serverCpu) / sentMs).toFixed(0)} %, client ${((100 * clientCpu) / sentMs).toFixed(0)} %; ` +
          `503 latency client p50 ${quantile(rejectedMs, 0.5).toFixed(2)} ms p99 ${quantile(rejectedMs, 0.99).toFixed(2)} ms, ` +
          `server p50 ${quantile(serverRejectedMs, 0.5).toFixed(2)} ms p99 ${quantile(serverRejectedMs, 0.99).toFixed(2)} ms p99.9 ${quantile(serverRejectedMs, 0.999).toFixed(2)} ms max ${quantile(serverRejectedMs, 1).toFixed(2)} ms (${serverRejectedMs.length} lines)`,
      );

      // every request answered exactly once, with 200 or 503 overloaded
      expect(results).toHaveLength(answers.length);
      expect(failures.slice(0, 3), `${failures.length} requests failed`).toEqual([]);
      expect((byStatus['200'] ?? 0) + (byStatus['503'] ?? 0)).toBe(answers.length);
      expect(counted('success')).toBe(byStatus['200'] ?? 0);
      expect(counted('overloaded')).toBe(byStatus['503'] ?? 0);
      // it was an overload (some requests rejected as overloaded) and the server kept serving
      expect(byStatus['503'] ?? 0).toBeGreaterThan(0);
      expect(byStatus['200'] ?? 0).toBeGreaterThan(0);
      // memory bounded
      expect(rssMax).toBeLessThan(rssStart + RSS_SLACK_BYTES);
      // every rejection logged with its server-side response time (printed above; a measurement, not asserted)
      expect(serverRejectedMs.length).toBe(byStatus['503']);
      // still healthy and serving after the storm
      expect((await fetch(`${server.httpUrl}/v2/health/ready`)).status).toBe(200);
    } finally {
      agent.destroy();
    }
  });
});
