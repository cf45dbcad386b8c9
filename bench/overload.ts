/**
 * Goodput under overload (`npm run bench -- --only overload [--json]`): does `abacus serve` keep
 * answering within QoS at its capacity however much more load arrives?
 *
 * For each config (`examples/serve-demo.yaml` on this CPU with onnxruntime, and
 * `examples/serve-sim4.yaml`, four models on a simulated A100 served in real time), `abacus
 * serve` runs as a child process and the clients run in another (`overload-client.ts`). Per
 * protocol (HTTP JSON, HTTP binary tensor data, gRPC):
 * 1. capacity: answers within QoS per second of closed-loop clients with 1, 2 and 4 requests in
 *    flight (`capacityByInFlight`); `capacityQps` is the best of the three;
 * 2. overload: Poisson arrivals at 2×, 5× and 10× that capacity, open loop, for `durationMs`
 *    each (split over several client processes past `OPEN_LOOP_QPS_PER_CLIENT`): goodput (answers within their service's QoS target per second), goodput ÷ capacity,
 *    p99 of the 200 answers, and every answer by status (`none`: no answer within `timeoutMs`).
 *
 * Requests mix the config's services uniformly, batch 1, all-ones inputs (sequence length 32).
 * QoS is judged at the client, from the intended send time. The clients share this machine's
 * cores with the server: on a small machine the client's own work takes device time from the
 * server, and the load average is reported beside every figure.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { loadServingConfig } from '../src/runtime/config.ts';
import { mergeResults, type ClientResult, type ClientService, type ClientSpec, type OverloadProtocol } from './overload-client.ts';
import { treeCpuDelta, treeCpuMs } from './proc-cpu.ts';
import { pinned, startBenchServer } from './serve-child.ts';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const CLIENT = path.join(HERE, 'overload-client.ts');

export const OVERLOAD_CONFIGS: Readonly<Record<string, string>> = {
  'serve-demo': path.join(HERE, '..', 'examples', 'serve-demo.yaml'),
  'serve-sim4': path.join(HERE, '..', 'examples', 'serve-sim4.yaml'),
};
export const OVERLOAD_PROTOCOLS: readonly OverloadProtocol[] = ['http-json', 'http-binary', 'grpc'];
export const OVERLOAD_FACTORS: readonly number[] = [2, 5, 10];
const IN_FLIGHT: readonly number[] = [1, 2, 4];

export interface OverloadPoint {
  readonly offeredQps: number;
  readonly goodputQps: number;
  /** goodput ÷ capacity. */
  readonly ratio: number;
  /**
   * Goodput per share of the cores the executors had ÷ the same at capacity (the in-flight count
   * that gave `capacityQps`): how much within-QoS work the device did with the CPU it got. On a
   * machine where the clients share the server's cores, `ratio` also falls by the cores the
   * clients and the front end took from the executors; this one does not (NaN without `/proc`).
   */
  readonly ratioPerExecutorCore: number;
  /** p99 of the 200 answers, ms (NaN when none). */
  readonly p99Ms: number;
  /** p99 of the 200 answers' latency ÷ their service's QoS target (≤ 1: the p99 met the targets). */
  readonly p99OverQos: number;
  readonly byStatus: Readonly<Record<string, number>>;
  /** The first error message the client saw for each non-OK gRPC status. */
  readonly detailsByStatus: Readonly<Record<string, string>>;
  readonly sent: number;
  /** Requests that got no answer within the client's timeout. */
  readonly unanswered: number;
  readonly maxSendLagMs: number;
  /** Client processes the arrivals were split over (`OPEN_LOOP_QPS_PER_CLIENT`). */
  readonly clientProcesses: number;
  readonly loadAverage1m: number;
  /**
   * Where the machine's cores went during the phase, as shares of all cores over its wall time
   * (`proc-cpu.ts`; NaN elsewhere than Linux): the client process, the server's main process
   * (front end, runtime, controller) and its executors (on `ort` the device's compute).
   */
  readonly cpuShare: { readonly client: number; readonly server: number; readonly executors: number };
  /**
   * The device's time over the phase, as shares of its wall time, from the server's `/metrics`:
   * `busy` (a group running), `waitingIdle` (idle between groups while queries waited),
   * `overhead` (inside groups, outside their longest segment's operators); and the share of the
   * server's successes it saw complete late (`serverLateShare`); NaN when unread.
   */
  readonly device: DeviceShare;
}

/** `OverloadPoint.device`. */
export interface DeviceShare {
  readonly busy: number;
  readonly waitingIdle: number;
  readonly overhead: number;
  /** Of the successful requests the server answered in the phase, those it saw complete after their QoS target (`abacus_late_completions_total`), a fraction. */
  readonly serverLateShare: number;
}

/** The server's device and outcome counters at one instant (`/metrics`); NaN when unreadable. */
interface ServerCounters {
  readonly busyS: number;
  readonly waitingIdleS: number;
  readonly overheadS: number;
  /** Σ over models of `abacus_late_completions_total` and of `abacus_requests_total{outcome="success"}`. */
  readonly late: number;
  readonly success: number;
}

async function serverCounters(httpUrl: string): Promise<ServerCounters> {
  try {
    const text = await (await fetch(`${httpUrl}/metrics`)).text();
    const read = (name: string): number => Number(new RegExp(`^${name} ([0-9.e+-]+)$`, 'm').exec(text)?.[1] ?? NaN);
    const sum = (re: RegExp): number => [...text.matchAll(re)].reduce((acc, m) => acc + Number(m[1]), 0);
    return {
      busyS: read('abacus_device_busy_seconds_total'),
      waitingIdleS: read('abacus_device_waiting_idle_seconds_total'),
      overheadS: read('abacus_group_overhead_seconds_total'),
      late: sum(/^abacus_late_completions_total\{[^}]*\} ([0-9.e+-]+)$/gm),
      success: sum(/^abacus_requests_total\{[^}]*outcome="success"[^}]*\} ([0-9.e+-]+)$/gm),
    };
  } catch {
    return { busyS: NaN, waitingIdleS: NaN, overheadS: NaN, late: NaN, success: NaN };
  }
}

/** `OverloadPoint.device` over a phase of `wallMs` between two readings. */
function deviceShareOf(a: ServerCounters, b: ServerCounters, wallMs: number): DeviceShare {
  const share = (k: 'busyS' | 'waitingIdleS' | 'overheadS'): number => ((b[k] - a[k]) * 1000) / wallMs;
  const success = b.success - a.success;
  return { busy: share('busyS'), waitingIdle: share('waitingIdleS'), overhead: share('overheadS'), serverLateShare: success > 0 ? (b.late - a.late) / success : NaN };
}

export interface OverloadProtocolResult {
  readonly capacityQps: number;
  readonly capacityByInFlight: Readonly<Record<string, number>>;
  /** Where the cores went in each closed-loop capacity phase, by requests in flight (`OverloadPoint.cpuShare`). */
  readonly capacityCpuShare: Readonly<Record<string, OverloadPoint['cpuShare']>>;
  /** The device's time in each closed-loop capacity phase, by requests in flight (`OverloadPoint.device`). */
  readonly capacityDevice: Readonly<Record<string, DeviceShare>>;
  readonly byFactor: Readonly<Record<string, OverloadPoint>>;
}

export interface OverloadOptions {
  readonly log?: (s: string) => void;
  /** Configs by name [both]; `protocols` [all three]; `factors` [2, 5, 10]. */
  readonly configs?: readonly string[];
  readonly protocols?: readonly OverloadProtocol[];
  readonly factors?: readonly number[];
  /** Length of each open-loop phase, ms [10 000]; each closed-loop capacity phase is half of it. */
  readonly durationMs?: number;
  /** Client timeout per request, ms [30 000]. */
  readonly timeoutMs?: number;
  /** `ABACUS_CACHE_DIR` of the servers [the default cache]. */
  readonly cacheDir?: string;
  /**
   * Pin the server (and its executors) and the client processes to these CPU lists (`taskset -c`,
   * `serve-child.ts` `pinned`) [not pinned]: on a machine with cores to spare, clients on cores of
   * their own stand in for clients on other machines, so the figure is the server's.
   */
  readonly serverCpus?: string;
  readonly clientCpus?: string;
}

function runClient(spec: ClientSpec, cpus: string | undefined): Promise<ClientResult> {
  return new Promise((resolve, reject) => {
    const [command, args] = pinned(cpus, ['--import', 'tsx', CLIENT, JSON.stringify(spec)]);
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.once('exit', (code) => {
      const line = out.trim().split('\n').pop() ?? '';
      if (code !== 0 || line === '') reject(new Error(`overload client exited ${code}: ${err.slice(-2000)}`));
      else resolve(JSON.parse(line) as ClientResult);
    });
  });
}

type CpuShare = OverloadPoint['cpuShare'];

/**
 * Open-loop arrivals one client process offers at most, q/s: past about this rate one node process
 * cannot send serve-sim4's 600 KB gRPC messages on time (it fell seconds behind at 1,200/s and
 * never caught up, while the server was 95 % idle), so a faster phase is split over several
 * processes, each with its share of the rate and a seed of its own, as a load generator would.
 */
export const OPEN_LOOP_QPS_PER_CLIENT = 500;

/** Run one client phase (open loop: over as many processes as `OPEN_LOOP_QPS_PER_CLIENT` asks) and measure the CPU of the clients, the server and its executors over it (`OverloadPoint.cpuShare`). */
async function measured(serverPid: number | undefined, spec: ClientSpec, clientCpus: string | undefined): Promise<{ r: ClientResult; cpuShare: CpuShare; device: DeviceShare; clients: number }> {
  const pid = serverPid ?? -1;
  const cpu0 = await treeCpuMs(pid);
  const device0 = await serverCounters(spec.httpUrl);
  const wall0 = performance.now();
  const load = spec.load;
  const n = load.kind === 'open' ? Math.max(1, Math.ceil(load.rateQps / OPEN_LOOP_QPS_PER_CLIENT)) : 1;
  const r = mergeResults(await Promise.all(Array.from({ length: n }, (_, k) => runClient(n === 1 ? spec : { ...spec, seed: spec.seed + k, load: { kind: 'open', rateQps: (load as { rateQps: number }).rateQps / n } }, clientCpus))));
  const cpu = treeCpuDelta(cpu0, await treeCpuMs(pid));
  const wallMs = performance.now() - wall0;
  const device1 = await serverCounters(spec.httpUrl);
  const coreMs = wallMs * os.availableParallelism();
  return { r, cpuShare: { client: r.cpuMs / coreMs, server: cpu.selfMs / coreMs, executors: cpu.childrenMs / coreMs }, device: deviceShareOf(device0, device1, wallMs), clients: n };
}

const pct = (x: number): string => `${(100 * x).toFixed(0)} %`;
const cores = (c: CpuShare): string => `cores: client ${pct(c.client)}, server ${pct(c.server)}, executors ${pct(c.executors)}`;
const deviceText = (d: DeviceShare): string => `device: busy ${pct(d.busy)} (outside the operators ${pct(d.overhead)}), idle while queries waited ${pct(d.waitingIdle)}; late by the server's clock ${pct(d.serverLateShare)} of its successes`;
const loadAverage = (): number => Math.round(os.loadavg()[0]! * 100) / 100;

export async function benchOverload(options: OverloadOptions = {}): Promise<Record<string, Record<string, OverloadProtocolResult>>> {
  const log = options.log ?? (() => undefined);
  const durationMs = options.durationMs ?? 10_000;
  const timeoutMs = options.timeoutMs ?? 30_000;
  const out: Record<string, Record<string, OverloadProtocolResult>> = {};
  // a bad CPU list fails here, before a server starts
  pinned(options.clientCpus, []);
  pinned(options.serverCpus, []);
  const tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-bench-overload-'));
  try {
    for (const name of options.configs ?? Object.keys(OVERLOAD_CONFIGS)) {
      const file = OVERLOAD_CONFIGS[name];
      if (file === undefined) throw new RangeError(`overload: unknown config '${name}' (known: ${Object.keys(OVERLOAD_CONFIGS).join(', ')})`);
      const config = await loadServingConfig(file);
      log(`overload ${name}: starting abacus serve (a first start builds and profiles the models: minutes) …\n`);
      const server = await startBenchServer(file, { ...(options.serverCpus === undefined ? {} : { cpus: options.serverCpus }), logFile: path.join(tmp, `${name}.log`), env: { ABACUS_LOG_LEVEL: 'warn', ...(options.cacheDir === undefined ? {} : { ABACUS_CACHE_DIR: options.cacheDir }) } });
      try {
        const services: ClientService[] = [];
        for (const s of config.services) {
          const meta = (await (await fetch(`${server.httpUrl}/v2/models/${encodeURIComponent(s.name)}`)).json()) as { inputs: { name: string; datatype: string; shape: number[] }[] };
          services.push({ name: s.name, qosTargetMs: s.qosTargetMs, inputs: meta.inputs });
        }
        const base = { httpUrl: server.httpUrl, grpcAddress: server.grpcAddress ?? '', services, timeoutMs, seed: 1 };
        out[name] = {};
        for (const protocol of options.protocols ?? OVERLOAD_PROTOCOLS) {
          if (!OVERLOAD_PROTOCOLS.includes(protocol)) throw new RangeError(`overload: unknown protocol '${protocol}' (known: ${OVERLOAD_PROTOCOLS.join(', ')})`);
          const capacityByInFlight: Record<string, number> = {};
          const capacityCpuShare: Record<string, CpuShare> = {};
          const capacityDevice: Record<string, DeviceShare> = {};
          for (const inFlight of IN_FLIGHT) {
            const { r, cpuShare, device } = await measured(server.child.pid, { ...base, protocol, load: { kind: 'closed', inFlight }, durationMs: durationMs / 2 }, options.clientCpus);
            capacityByInFlight[String(inFlight)] = r.withinQos / (durationMs / 2 / 1000);
            capacityCpuShare[String(inFlight)] = cpuShare;
            capacityDevice[String(inFlight)] = device;
            log(`overload ${name} ${protocol}: ${inFlight} in flight: ${capacityByInFlight[String(inFlight)]!.toFixed(1)} answers within QoS/s, ${JSON.stringify(r.byStatus)}; ${cores(cpuShare)}; ${deviceText(device)} (load ${loadAverage()})\n`);
          }
          const capacityQps = Math.max(...Object.values(capacityByInFlight));
          const best = Object.keys(capacityByInFlight).find((k) => capacityByInFlight[k] === capacityQps)!;
          const capacityPerExecutorCore = capacityQps / capacityCpuShare[best]!.executors;
          const byFactor: Record<string, OverloadPoint> = {};
          for (const factor of options.factors ?? OVERLOAD_FACTORS) {
            const offeredQps = factor * capacityQps;
            if (!(offeredQps > 0)) continue;
            const { r, cpuShare, device, clients } = await measured(server.child.pid, { ...base, protocol, load: { kind: 'open', rateQps: offeredQps }, durationMs }, options.clientCpus);
            const goodputQps = r.withinQos / (durationMs / 1000);
            const point: OverloadPoint = {
              offeredQps,
              goodputQps,
              ratio: goodputQps / capacityQps,
              ratioPerExecutorCore: goodputQps / cpuShare.executors / capacityPerExecutorCore,
              // no 200s: NaN, which the client's JSON line carries as null
              p99Ms: r.okLatencyMs.p99 ?? NaN,
              p99OverQos: r.okLatencyOverQos.p99 ?? NaN,
              byStatus: r.byStatus,
              detailsByStatus: r.detailsByStatus,
              sent: r.sent,
              unanswered: r.byStatus['none'] ?? 0,
              maxSendLagMs: r.maxSendLagMs,
              clientProcesses: clients,
              loadAverage1m: loadAverage(),
              cpuShare,
              device,
            };
            byFactor[String(factor)] = point;
            log(`overload ${name} ${protocol}: ${factor}× (${offeredQps.toFixed(0)} q/s): goodput ${goodputQps.toFixed(1)} q/s = ${point.ratio.toFixed(2)} × capacity (${point.ratioPerExecutorCore.toFixed(2)} per executor core), p99 ${point.p99Ms.toFixed(1)} ms (${point.p99OverQos.toFixed(2)} × QoS), ${JSON.stringify(r.byStatus)}${Object.keys(r.detailsByStatus).length > 0 ? ` (${JSON.stringify(r.detailsByStatus)})` : ''}; ${cores(cpuShare)}; ${deviceText(device)}; ${clients} client${clients === 1 ? '' : 's'} ${point.maxSendLagMs.toFixed(0)} ms behind at most (load ${point.loadAverage1m})\n`);
          }
          out[name][protocol] = { capacityQps, capacityByInFlight, capacityCpuShare, capacityDevice, byFactor };
        }
      } finally {
        await server.stop();
      }
    }
  } finally {
    await fs.rm(tmp, { recursive: true, force: true });
  }
  return out;
}
