/**
 * The paper's §7.6 cluster experiment in real time (docs/deploy.md "The cluster experiment in real time"): the offered-load trace
 * (`src/reproduce/reference/cluster-load-trace.csv`) replayed open-loop over HTTP through HAProxy
 * (`abacus cluster`'s `startLocalCluster`) to N `abacus serve` nodes on a `sim:` device, once
 * with abacus nodes and once with clockwork-style nodes (`policy: clockwork`, one query at a
 * time), next to the same experiment simulated (`reproduce/cluster.ts` `runCluster`, virtual
 * clock) with the same services, nodes, predictor, trace window, scale and minute length.
 *
 * Rates are in trace units (queries/s ÷ scale), as `abacus reproduce cluster` reports them.
 * What differs between the two (docs/deploy.md "The cluster experiment in real time"): the
 * real run measures latency at the client (HTTP, HAProxy, JSON headers, the load generator's
 * timers on a shared 2-core machine), routes with HAProxy `leastconn` rather than the
 * simulation's shortest-queue / central-queue routers, and its clockwork-style cluster has a
 * queue per node instead of the simulation's central earliest-deadline queue.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { WallClock } from '../src/clock/wall.ts';
import { startLocalCluster } from '../src/deployment/cluster.ts';
import { ensurePredictor, resolveServices } from '../src/deployment/services.ts';
import { parseSimDeviceId } from '../src/device/sim/profiles.ts';
import { ModelRepository } from '../src/model/repository.ts';
import { CLUSTER_SET, runCluster, type ClusterPolicy } from '../src/reproduce/cluster.ts';
import { simEnv } from '../src/reproduce/colocation.ts';
import { CLUSTER_TRACE_PATH } from '../src/reproduce/workloads.ts';
import { loadServingConfig } from '../src/runtime/config.ts';
import { findPeakRate } from '../src/runtime/experiment.ts';
import { HttpInferenceClient } from '../src/serve/client/index.ts';
import { runRemoteBench } from '../src/serve/client/bench.ts';
import { traceArrivals } from '../src/workload/arrivals.ts';
import { readLoadTrace } from '../src/workload/trace-file.ts';

export interface ClusterRealtimeOptions {
  readonly log: (s: string) => void;
  /** Nodes [3]. */
  readonly nodes?: number;
  /** Trace minutes replayed, from the start [20]. */
  readonly minutes?: number;
  /** Wall ms per trace minute [1000]. */
  readonly minuteMs?: number;
  /** Device of every node [sim:a100:mig-2g: 2/7 of an A100's SMs (4 services' profiling needs its 10 GB), so a few nodes saturate nearer to a rate 2 cores can send]. */
  readonly device?: string;
  /** Cap on the offered load per node, queries/s [25]: what the machine can send and serve over HTTP. */
  readonly maxNodeQps?: number;
  readonly seed?: number;
}

export interface ClusterRealtimeRow {
  readonly run: string;
  readonly policy: ClusterPolicy;
  readonly offered: number;
  /** Trace units. */
  readonly goodputQps: number;
  readonly violationRatio: number;
  readonly p99Ms: number;
}

export interface ClusterRealtimeResult {
  readonly settings: { device: string; nodes: number; services: string[]; qosMs: number; minutes: number; minuteMs: number; scale: number; nodePeakQps: number; nodeQps: number };
  readonly rows: readonly ClusterRealtimeRow[];
  /** Real-time abacus ÷ clockwork-style goodput, and the simulated one. */
  readonly ratios: { readonly realtime: number; readonly simulated: number };
}

export async function benchClusterRealtime(o: ClusterRealtimeOptions): Promise<ClusterRealtimeResult> {
  const nodes = o.nodes ?? 3;
  const minuteMs = o.minuteMs ?? 1000;
  const device = o.device ?? 'sim:a100:mig-2g';
  const seed = o.seed ?? 1;
  const tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-cluster-rt-'));
  const cacheDir = path.join(tmp, 'cache', 'models');
  const ctx = { err: o.log, cacheOptions: () => ({ cacheDir }) };
  try {
    const configFor = async (policy: ClusterPolicy): Promise<string> => {
      const file = path.join(tmp, `${policy}.yaml`);
      const policyLine = policy === 'abacus' ? `policy: { name: abacus, ways: ${CLUSTER_SET.searchWays}, slackMs: ${CLUSTER_SET.slackMs}, drop: true }` : 'policy: { name: clockwork }';
      const services = CLUSTER_SET.models.flatMap((m) => [`  - name: ${m}`, `    model: ${m}`, `    qosTargetMs: ${CLUSTER_SET.qosMs}`, '    batchSizes: [1]', ...(m === 'bert' ? ['    seqLens: [32]'] : []), '    dynamicBatching: false']);
      await fs.writeFile(file, [`device: ${device}`, policyLine, 'services:', ...services].join('\n') + '\n');
      return file;
    };
    const configs = { abacus: await configFor('abacus'), clockwork: await configFor('clockwork') };
    const repo = new ModelRepository({ cacheDir });
    const hosted = await resolveServices(ctx, repo, await loadServingConfig(configs.abacus));
    o.log(`cluster-realtime: predictor for ${device} (${CLUSTER_SET.models.join(', ')}) …\n`);
    const { predictor, source } = await ensurePredictor(ctx, repo, hosted, { quiet: true });
    const deviceId = parseSimDeviceId(device).id;
    const fullTrace = await readLoadTrace(CLUSTER_TRACE_PATH);
    const trace = fullTrace.slice(0, o.minutes ?? 20);
    const peak = await findPeakRate(simEnv(deviceId, hosted.services, predictor, seed), { services: hosted.services, policy: 'abacus', policyParams: { ways: CLUSTER_SET.searchWays, slackMs: CLUSTER_SET.slackMs }, queries: 400, seed, startQps: 10, bisections: 4 });
    const nodePeakQps = peak.peakGoodputQps;
    const nodeQps = Math.min(nodePeakQps, o.maxNodeQps ?? 25);
    const traceMean = trace.reduce((a, b) => a + b, 0) / trace.length;
    const scale = (nodeQps * nodes) / traceMean;
    o.log(`cluster-realtime: predictor ${source}; one simulated node peaks at ${nodePeakQps.toFixed(1)} q/s; offering ${nodeQps.toFixed(1)} q/s per node on average (trace × ${scale.toFixed(5)}), ${trace.length} minutes × ${minuteMs} ms\n`);
    const rows: ClusterRealtimeRow[] = [];
    for (const policy of ['abacus', 'clockwork'] as const) {
      const sim = await runCluster({ deviceId, nodes, services: hosted.services, predictor, policy, abacus: { ways: CLUSTER_SET.searchWays, slackMs: CLUSTER_SET.slackMs }, perMinuteQps: trace, scale, minuteMs, seed });
      rows.push({ run: `simulated, ${nodes} nodes`, policy, offered: sim.overall.offered, goodputQps: sim.overall.goodputQps, violationRatio: sim.overall.violationRatio, p99Ms: sim.overall.p99Ms });
    }
    for (const policy of ['abacus', 'clockwork'] as const) {
      o.log(`cluster-realtime: ${nodes} ${policy} nodes behind HAProxy …\n`);
      const cluster = await startLocalCluster({ config: configs[policy], nodes, workDir: path.join(tmp, `run-${policy}`), httpPort: 0, env: { ...process.env, ABACUS_CACHE_DIR: cacheDir, ABACUS_LOG_LEVEL: 'warn' } });
      const client = new HttpInferenceClient(cluster.httpUrl, { timeoutMs: 10_000 });
      try {
        const arrivals = traceArrivals({ perMinuteQps: trace, scale, minuteMs });
        const r = await runRemoteBench({
          client,
          clock: new WallClock(),
          services: hosted.services.map((s) => ({ name: s.name, spec: s.spec, qosTargetMs: s.qosTargetMs, batchSizes: s.batchSizes, ...(s.seqLens === undefined ? {} : { seqLens: s.seqLens }) })),
          rateQps: arrivals.meanQps,
          queries: 1_000_000,
          seed,
          arrivals: () => arrivals,
        });
        const seconds = (trace.length * minuteMs) / 1000;
        rows.push({ run: `real time via HAProxy, ${nodes} nodes`, policy, offered: r.overall.offered, goodputQps: r.overall.onTime / seconds / scale, violationRatio: r.overall.violationRatio, p99Ms: r.overall.p99Ms });
        o.log(`cluster-realtime: ${policy}: ${r.overall.offered} queries, the generator's send lateness p99 ${r.generator.latenessMs.p99.toFixed(1)} ms\n`);
      } finally {
        await client.close();
        await cluster.stop(5000);
      }
    }
    const ratio = (run: string): number => {
      const a = rows.find((r) => r.run.startsWith(run) && r.policy === 'abacus')!;
      const c = rows.find((r) => r.run.startsWith(run) && r.policy === 'clockwork')!;
      return a.goodputQps / c.goodputQps;
    };
    return {
      settings: { device, nodes, services: hosted.services.map((s) => s.name), qosMs: CLUSTER_SET.qosMs, minutes: trace.length, minuteMs, scale, nodePeakQps, nodeQps },
      rows,
      ratios: { realtime: ratio('real time'), simulated: ratio('simulated') },
    };
  } finally {
    await fs.rm(tmp, { recursive: true, force: true });
  }
}
