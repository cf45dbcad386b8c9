/**
 * What an open dashboard costs the serving path (the project's target, docs/dashboard.md "Tests and cost": throughput with ÷ without ≥ 0.97).
 *
 * Setup: `abacus serve` as a child process (the real CLI) on `sim:a100` with the wall clock, two
 * services (resnet50-small, vgg19-small; batch 1; abacus, drop on), driven closed-loop over HTTP
 * by `clients` concurrent clients (binary tensor data, 49 KB per request, keep-alive). With
 * small models on the simulated device the server's own CPU work (HTTP, validation, runtime,
 * controller) bounds the throughput, so any work the dashboard adds to the serving process shows.
 *
 * Phases of `phaseMs` alternate (ABBA) without and with one open dashboard stream
 * (`/dashboard/events`, read by a plain HTTP client that counts bytes: the page's own work runs
 * in the browser's process, not the server's), `pairs` times, after a warm-up phase; the
 * reported ratios are median(with) ÷ median(without) of the completed requests per second, and
 * the median over the pairs of with ÷ without. Both
 * arms run in the same server process, one after the other, so machine load shifts both.
 */
import fs from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { CliContext } from '../src/cli/context.ts';
import { cachedPredictor } from '../src/deployment/predictor-cache.ts';
import { artifactAt } from '../src/model/artifact.ts';
import { resolveModelSpec } from '../src/model/catalog.ts';
import { ModelRepository } from '../src/model/repository.ts';
import { simEnv } from '../src/reproduce/colocation.ts';
import { runExperiment, type ExperimentService } from '../src/runtime/experiment.ts';
import { RecordFeed } from '../src/runtime/feed.ts';
import { DashboardHub } from '../src/serve/dashboard/hub.ts';
import { median } from '../src/stats.ts';
import { processCpuMs } from './proc-cpu.ts';
import { startBenchServer, type BenchServer } from './serve-child.ts';

const IMAGE_BYTES = 3 * 64 * 64 * 4;

export interface DashboardBenchResult {
  readonly loadAverage1m: number;
  readonly clients: number;
  readonly phaseMs: number;
  /** Completed requests per second of each phase, in order. */
  readonly withoutQps: readonly number[];
  readonly withQps: readonly number[];
  /** median(with) ÷ median(without). */
  readonly ratio: number;
  /** Median over the pairs of with ÷ without (adjacent phases: less sensitive to load drifting over the run). */
  readonly pairRatio: number;
  /** The server process' CPU time per completed request, ms (median over the phases of each arm; 10 ms ticks, so a phase's value is ± 10 ms ÷ its requests). */
  readonly serverCpuMsPerRequest: { readonly without: number; readonly with: number };
  /** SSE bytes and `update` events the dashboard client received over all "with" phases. */
  readonly dashboardBytes: number;
  readonly dashboardUpdates: number;
  /** Non-200 answers, by status, over all phases. */
  readonly otherStatuses: Readonly<Record<string, number>>;
}

export interface DashboardInProcessResult {
  readonly queries: number;
  /** Simulated queries per wall second of each run, in order. */
  readonly withoutQps: readonly number[];
  readonly withQps: readonly number[];
  /** median(with) ÷ median(without). */
  readonly ratio: number;
  /** Updates the hub sent over all "with" runs. */
  readonly updates: number;
}

/**
 * The same question without HTTP and without the machine's noise in the way as much: the whole
 * serving path (load generator, runtime, abacus controller with its MLP predictor, sim:a100) on
 * the virtual clock, as fast as one core runs it, with the record feed unobserved vs observed
 * by a `DashboardHub` with one page (a sink that serializes and counts). The hub's flush runs
 * every 200 ms of wall time, as when serving. A simulation ends far more queries per wall
 * second than a server does, so the hub's per-record share here is an upper bound of its share
 * when serving. Runs alternate ABBA.
 */
export async function benchDashboardInProcess(opts: { log?: (s: string) => void; queries?: number; pairs?: number } = {}): Promise<DashboardInProcessResult> {
  const log = opts.log ?? (() => undefined);
  const queries = opts.queries ?? 40_000;
  const pairs = opts.pairs ?? 3;
  const repo = new ModelRepository();
  const specs = [await resolveModelSpec(repo, 'resnet50-small'), await resolveModelSpec(repo, 'vgg19-small')];
  const ctx: CliContext = { out: log, err: log, cacheOptions: () => ({}) };
  const batchSizes = [1];
  const { predictor } = await cachedPredictor(ctx, repo, { deviceId: 'sim:a100', models: specs.map((sp) => artifactAt('/nonexistent', sp)), batchSizes, seqLens: [], maxGroupSize: 2, samples: 1000 });
  const services: ExperimentService[] = specs.map((spec) => ({ name: spec.name, spec, qosTargetMs: 40, maxQueueLength: 10_000, batchSizes }));
  let updates = 0;
  const run = async (observed: boolean): Promise<number> => {
    const feed = new RecordFeed();
    let clockNow = 0;
    const hub = new DashboardHub({ feed, source: { servedModels: () => services.map((x) => ({ name: x.name, qosTargetMs: x.qosTargetMs })), queueLength: () => 0, refinement: undefined, clockNowMs: () => clockNow, isReady: () => true } });
    if (observed) {
      hub.attach({ send: (event, data) => (event === 'update' ? (updates++, data.length) : 0), bufferedBytes: () => 0, end: () => undefined });
      // the hub's own timer cannot fire inside a synchronous simulation: flush on the same wall cadence from the feed
      let last = performance.now();
      feed.subscribe((e) => {
        clockNow = e.kind === 'group' ? e.endMs : (e.record.endMs ?? clockNow);
        const t = performance.now();
        if (t - last >= 200) {
          last = t;
          hub.flush();
        }
      });
    }
    const t0 = performance.now();
    await runExperiment(simEnv('sim:a100', services, predictor, 1), { services, policy: 'abacus', rateQps: 150, queries, seed: 1, feed });
    const qps = (queries * 1000) / (performance.now() - t0);
    hub.close('done');
    return qps;
  };
  log(`dashboard in process: ${queries.toLocaleString('en-US')} simulated queries per run, ${pairs} × (without, with) …\n`);
  await run(false); // warm-up
  const withoutQps: number[] = [];
  const withQps: number[] = [];
  for (let p = 0; p < pairs; p++) {
    if (p % 2 === 0) {
      withoutQps.push(await run(false));
      withQps.push(await run(true));
    } else {
      withQps.push(await run(true));
      withoutQps.push(await run(false));
    }
    log(`  pair ${p + 1}: without ${withoutQps[p]!.toFixed(0)} q/s, with ${withQps[p]!.toFixed(0)} q/s\n`);
  }
  return { queries, withoutQps, withQps, ratio: median(withQps) / median(withoutQps), updates };
}

export async function benchDashboard(opts: { log?: (s: string) => void; clients?: number; phaseMs?: number; pairs?: number } = {}): Promise<DashboardBenchResult> {
  const log = opts.log ?? (() => undefined);
  const clients = opts.clients ?? 8;
  const phaseMs = opts.phaseMs ?? 2500;
  const pairs = opts.pairs ?? 8;
  const tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-bench-dashboard-'));
  const config = path.join(tmp, 'dashboard.yaml');
  await fs.writeFile(
    config,
    ['device: sim:a100', 'policy: { name: abacus, ways: 2, slackMs: 2, drop: true }', 'services:', '  - name: resnet', '    model: resnet50-small', '    qosTargetMs: 200', '    batchSizes: [1]', '  - name: vgg', '    model: vgg19-small', '    qosTargetMs: 200', '    batchSizes: [1]', ''].join('\n'),
  );
  const logFile = path.join(tmp, 'serve.log');
  log('dashboard: starting abacus serve (sim:a100, resnet50-small + vgg19-small, abacus) …\n');
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  let server: BenchServer | undefined;
  try {
    server = await startBenchServer(config, { logFile, flags: ['--no-grpc', '--profile-samples', '300', '--grace-ms', '2000'], env: { ABACUS_LOG_LEVEL: 'warn' } });
    const { httpUrl } = server;
    const header = Buffer.from(JSON.stringify({ inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3, 64, 64], parameters: { binary_data_size: IMAGE_BYTES } }] }));
    const body = Buffer.concat([header, Buffer.alloc(IMAGE_BYTES)]);
    const headers = { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(header.byteLength), 'content-length': String(body.byteLength) };
    const otherStatuses: Record<string, number> = {};
    const send = (model: string): Promise<number> =>
      new Promise((resolve) => {
        const req = http.request(`${httpUrl}/v2/models/${model}/infer`, { method: 'POST', agent, headers }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
          res.on('error', () => resolve(-1));
        });
        req.on('error', () => resolve(-1));
        req.end(body);
      });
    const pid = server.child.pid;
    /** The server's CPU time (user + system), ms (`proc-cpu.ts`); NaN elsewhere than Linux. */
    const serverCpuMs = (): Promise<number> => (pid === undefined ? Promise.resolve(NaN) : processCpuMs(pid));
    /** The server's CPU ms per completed request of each phase (pushed by `phase`). */
    const cpuPerRequest: number[] = [];
    /** Closed loop for `ms`: completed (200) requests per second. */
    const phase = async (ms: number): Promise<number> => {
      const until = performance.now() + ms;
      let ok = 0;
      const cpu0 = await serverCpuMs();
      const t0 = performance.now();
      await Promise.all(
        Array.from({ length: clients }, async (_, i) => {
          const model = i % 2 === 0 ? 'resnet' : 'vgg';
          while (performance.now() < until) {
            const status = await send(model);
            if (status === 200) ok++;
            else otherStatuses[status] = (otherStatuses[status] ?? 0) + 1;
          }
        }),
      );
      const seconds = (performance.now() - t0) / 1000;
      cpuPerRequest.push(((await serverCpuMs()) - cpu0) / ok);
      return ok / seconds;
    };
    let dashboardBytes = 0;
    let dashboardUpdates = 0;
    /** Open `/dashboard/events`; returns the function that closes it. */
    const openDashboard = async (): Promise<() => void> => {
      const req = http.get(`${httpUrl}/dashboard/events`);
      const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
        req.once('response', resolve);
        req.once('error', reject);
      });
      if (res.statusCode !== 200) throw new Error(`/dashboard/events answered ${res.statusCode}`);
      res.on('data', (chunk: Buffer) => {
        dashboardBytes += chunk.length;
        for (let i = chunk.indexOf('event: update'); i !== -1; i = chunk.indexOf('event: update', i + 1)) dashboardUpdates++;
      });
      res.on('error', () => undefined);
      return () => req.destroy();
    };
    log(`dashboard: warm-up ${phaseMs / 1000} s, then ${pairs} × (without, with) phases of ${phaseMs / 1000} s, ${clients} clients …\n`);
    await phase(phaseMs);
    const withoutQps: number[] = [];
    const withQps: number[] = [];
    const withoutCpu: number[] = [];
    const withCpu: number[] = [];
    const without = async (): Promise<void> => {
      withoutQps.push(await phase(phaseMs));
      withoutCpu.push(cpuPerRequest.at(-1)!);
    };
    const withDashboard = async (): Promise<void> => {
      const close = await openDashboard();
      await new Promise((r) => setTimeout(r, 300)); // its history update is sent
      withQps.push(await phase(phaseMs));
      withCpu.push(cpuPerRequest.at(-1)!);
      close();
      await new Promise((r) => setTimeout(r, 300));
    };
    for (let p = 0; p < pairs; p++) {
      // ABBA: alternate which arm goes first, so a drift in machine load does not favour one
      if (p % 2 === 0) {
        await without();
        await withDashboard();
      } else {
        await withDashboard();
        await without();
      }
      log(`  pair ${p + 1}: without ${withoutQps[p]!.toFixed(0)} q/s, with ${withQps[p]!.toFixed(0)} q/s\n`);
    }
    if (dashboardUpdates === 0) throw new Error('the dashboard stream sent no update: nothing was measured');
    const pairRatios = withQps.map((w, i) => w / withoutQps[i]!);
    return { loadAverage1m: os.loadavg()[0]!, clients, phaseMs, withoutQps, withQps, ratio: median(withQps) / median(withoutQps), pairRatio: median(pairRatios), serverCpuMsPerRequest: { without: median(withoutCpu), with: median(withCpu) }, dashboardBytes, dashboardUpdates, otherStatuses };
  } finally {
    agent.destroy();
    await server?.stop();
    await fs.rm(tmp, { recursive: true, force: true });
  }
}
