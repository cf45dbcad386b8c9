/**
 * `npm run bench [-- --json] [-- --repeat N] [-- --only split|overlap|sim|schedule|predictor|runtime|idle-gap|rejection|serve-overload|dashboard|cluster-realtime|event-loop|warm-up|executor-memory|import-memory|overload|grpc-shed|contention]`: the foundation
 * benchmarks, full-size models, every ratio against a baseline measured in the same process;
 * `--only sim` runs the simulator speed benchmark alone, `--only schedule` the
 * scheduling decision latency alone, `--only predictor [-- --data FILE.csv]` the
 * predictor call latency and training time alone, `--only runtime [-- --queries N]` the
 * simulation speed of the whole serving path alone, `--only idle-gap [-- --queries N]
 * [-- --skip-ort]` the device's idle time between groups at saturation, deciding ahead vs only
 * when idle, on sim:a100 and on this CPU, `--only rejection [-- --skip-ort]` how long after its
 * arrival a hopeless query is answered on the wall clock, deciding ahead vs only when idle,
 * `--only serve-overload` how fast `abacus serve` answers 503 under a 10× overload, `--only dashboard`
 * the serving throughput with and without an open dashboard stream,
 * `--only cluster-realtime` the §7.6 trace through HAProxy to real-time sim nodes,
 * `--only event-loop [-- --duration-ms MS] [-- --hostile-only | --no-hostile] [-- --hostile-small]` the server's
 * event-loop delay while four clients stream 5 MB binary requests, and the liveness latency and
 * RSS growth while hostile bodies and slow-header connections arrive, `--only warm-up` the first 10 requests after ready ÷ the steady
 * median on ort, with and without the warm-up at the serving shapes, `--only executor-memory
 * [-- --queries N]` executor RSS growth over N requests (default 10,000) cycling shapes on ort,
 * `--only import-memory` the peak RSS of `abacus models import` of a 1,000-node, 43 MB model,
 * `--only overload [-- --duration-ms MS] [-- --configs serve-demo,serve-sim4] [-- --server-cpus L -- --client-cpus L]` goodput at 2×, 5×
 * and 10× the measured capacity of `abacus serve` over HTTP JSON, HTTP binary and gRPC,
 * `--only grpc-shed` the server CPU per gRPC call shed on its metadata ÷ shed after its message was read,
 * `--only contention [-- --busy 0,1,2,4] [-- --rounds N] [-- --queries N] [-- --load X] [-- --control]` abacus ÷ the
 * better fcfs on this CPU with N busy-loop processes beside it.
 */
import os from 'node:os';
import { Command, InvalidArgumentError } from 'commander';
import * as ort from 'onnxruntime-node';
import { benchSplitOverhead } from './split-overhead.ts';
import { benchOverlap } from './overlap.ts';
import { benchSimSpeed } from './sim-speed.ts';
import { benchSchedule } from './schedule.ts';
import { benchPredictor } from './predictor.ts';
import { benchRuntimeSpeed } from './runtime-speed.ts';
import { benchIdleGap } from './idle-gap.ts';
import { benchRejection } from './rejection.ts';
import { benchServeOverload } from './serve-overload.ts';
import { benchDashboard, benchDashboardInProcess } from './dashboard.ts';
import { benchClusterRealtime } from './cluster-realtime.ts';
import { benchEventLoop } from './event-loop.ts';
import { SMALL_HOSTILE } from './event-loop-hostile.ts';
import { benchWarmUp } from './warm-up.ts';
import { benchExecutorMemory } from './executor-memory.ts';
import { benchImportMemory } from './import-memory.ts';
import { benchOverload, OVERLOAD_CONFIGS, OVERLOAD_PROTOCOLS } from './overload.ts';
import { benchGrpcShed } from './grpc-shed.ts';
import { benchContention } from './contention.ts';
import type { OverloadProtocol } from './overload-client.ts';
import { formatTable } from '../src/cli/format.ts';

// onnxruntime's usage telemetry off, as `bin/abacus.js` sets it (read at the first session)
process.env['ORT_DISABLE_TELEMETRY'] ??= '1';

const program = new Command('bench')
  .option('--json', 'print results as JSON')
  .option('--repeat <n>', 'timed repetitions per measurement', (v) => Number(v), 10)
  .option('--threads <n>', 'ORT intra-op threads per executor', (v) => Number(v), 1)
  .option('--only <which>', 'split | overlap | sim | schedule | predictor | runtime | idle-gap | rejection | serve-overload | dashboard | cluster-realtime | event-loop | warm-up | executor-memory | import-memory | overload | contention')
  .option('--queries <n>', 'runtime: queries per run (default 1,000,000); idle-gap: per ort run (default 1000); executor-memory: requests (default 10,000)', (v) => Number(v))
  .option('--skip-ort', 'idle-gap, rejection: the sim:a100 rows only')
  .option('--minutes <n>', 'cluster-realtime: trace minutes replayed (default 20)', (v) => Number(v))
  .option('--nodes <n>', 'cluster-realtime: nodes (default 3)', (v) => Number(v))
  .option('--node-qps <x>', 'cluster-realtime: mean offered load per node, queries/s (default 25, at most one node\'s simulated peak)', (v) => Number(v))
  .option('--duration-ms <ms>', 'event-loop: length of the measured phase; overload: of each open-loop phase', (v) => Number(v))
  .option('--hostile-only', 'event-loop: only the hostile clients (no steady-load phases)')
  .option('--no-hostile', 'event-loop: no hostile clients')
  .option('--hostile-small', 'event-loop: hostile bodies of about 1 MB, 4 at once, 20 slow-header connections and a 1 s header timeout (a smoke run)')
  .option('--configs <names>', `overload: configs to run (${Object.keys(OVERLOAD_CONFIGS).join(', ')})`, (v) => v.split(','))
  .option('--protocols <names>', `overload: protocols to run (${OVERLOAD_PROTOCOLS.join(', ')})`, (v) => v.split(','))
  .option('--server-cpus <list>', 'overload: pin abacus serve and its executors to these CPUs (taskset -c list, e.g. 0-3)')
  .option('--client-cpus <list>', 'overload: pin the client processes to these CPUs (taskset -c list, e.g. 4-7)')
  .option('--busy <levels>', 'contention: busy-loop processes per level (default 0,1,2,4)', (v) => {
    const xs = v.split(',').map((x) => Number(x.trim()));
    if (xs.length === 0 || xs.some((x) => !Number.isInteger(x) || x < 0 || x > 64)) throw new InvalidArgumentError(`--busy expects integers in [0, 64], comma-separated, got '${v}'`);
    return xs;
  })
  .option('--rounds <n>', 'contention: interleaved rounds (default 3)', (v) => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`--rounds expects an integer ≥ 1, got '${v}'`);
    return n;
  })
  .option('--control', 'contention: run the headline abacus twice per level and round (the second as "abacus (control)"): how far two runs of one controller differ')
  .option('--load <x>', 'contention: rate as a fraction of the one-thread fcfs capacity (default 1)', (v) => {
    const x = Number(v);
    if (!(x > 0 && x <= 10)) throw new InvalidArgumentError(`--load expects a number in (0, 10], got '${v}'`);
    return x;
  })
  .option('--data <file>', 'predictor: train on this profile CSV instead of 20k simulated groups');
program.parse(process.argv);
const opts = program.opts<{ json?: boolean; repeat: number; threads: number; only?: string; data?: string; queries?: number; skipOrt?: boolean; minutes?: number; nodes?: number; nodeQps?: number; durationMs?: number; hostileOnly?: boolean; hostile: boolean; hostileSmall?: boolean; configs?: string[]; protocols?: string[]; serverCpus?: string; clientCpus?: string; busy?: number[]; rounds?: number; load?: number; control?: boolean }>();
const ONLY = ['split', 'overlap', 'sim', 'schedule', 'predictor', 'runtime', 'idle-gap', 'rejection', 'serve-overload', 'dashboard', 'cluster-realtime', 'event-loop', 'warm-up', 'executor-memory', 'import-memory', 'overload', 'grpc-shed', 'contention'];
if (opts.only !== undefined && !ONLY.includes(opts.only)) program.error(`--only must be one of ${ONLY.join(', ')}, got '${opts.only}'`);
const log = (s: string): void => {
  process.stderr.write(s);
};

const machine = `${os.cpus()[0]?.model ?? 'cpu'} × ${os.cpus().length}, onnxruntime-node ${ort.env.versions.node}, node ${process.version}`;
const out: Record<string, unknown> = { machine };
if (opts.only === undefined || opts.only === 'split') out['splitOverhead'] = await benchSplitOverhead({ repeat: opts.repeat, threads: opts.threads, log });
if (opts.only === 'sim') out['simSpeed'] = await benchSimSpeed({ log });
if (opts.only === 'schedule') out['schedule'] = await benchSchedule({ log });
if (opts.only === 'runtime') out['runtimeSpeed'] = await benchRuntimeSpeed({ log, ...(opts.queries === undefined ? {} : { queries: opts.queries }) });
if (opts.only === 'idle-gap') out['idleGap'] = await benchIdleGap({ log, ...(opts.queries === undefined ? {} : { ortQueries: opts.queries }), ...(opts.skipOrt === true ? { skipOrt: true } : {}) });
if (opts.only === 'rejection') out['rejection'] = await benchRejection({ log, ...(opts.skipOrt === true ? { skipOrt: true } : {}) });
if (opts.only === 'serve-overload') out['serveOverload'] = await benchServeOverload({ log });
if (opts.only === 'dashboard') {
  out['dashboardInProcess'] = await benchDashboardInProcess({ log });
  out['dashboard'] = await benchDashboard({ log });
}
if (opts.only === 'cluster-realtime') out['clusterRealtime'] = await benchClusterRealtime({ log, ...(opts.minutes === undefined ? {} : { minutes: opts.minutes }), ...(opts.nodes === undefined ? {} : { nodes: opts.nodes }), ...(opts.nodeQps === undefined ? {} : { maxNodeQps: opts.nodeQps }) });
if (opts.only === 'warm-up') out['warmUp'] = await benchWarmUp({ log });
if (opts.only === 'executor-memory') out['executorMemory'] = await benchExecutorMemory({ log, ...(opts.queries === undefined ? {} : { requests: opts.queries }) });
if (opts.only === 'import-memory') out['importMemory'] = await benchImportMemory({ log });
if (opts.only === 'event-loop') out['eventLoop'] = await benchEventLoop({ log, ...(opts.durationMs === undefined ? {} : { durationMs: opts.durationMs }), hostile: opts.hostile, steady: opts.hostileOnly !== true, ...(opts.hostileSmall === true ? { hostileSize: SMALL_HOSTILE, headersTimeoutMs: 1000 } : {}) });
if (opts.only === 'overload') out['overload'] = await benchOverload({ log, ...(opts.durationMs === undefined ? {} : { durationMs: opts.durationMs }), ...(opts.configs === undefined ? {} : { configs: opts.configs }), ...(opts.protocols === undefined ? {} : { protocols: opts.protocols as OverloadProtocol[] }), ...(opts.serverCpus === undefined ? {} : { serverCpus: opts.serverCpus }), ...(opts.clientCpus === undefined ? {} : { clientCpus: opts.clientCpus }) });
if (opts.only === 'grpc-shed') out['grpcShed'] = await benchGrpcShed({ log });
if (opts.only === 'contention') out['contention'] = await benchContention({ log, ...(opts.busy === undefined ? {} : { busy: opts.busy }), ...(opts.rounds === undefined ? {} : { rounds: opts.rounds }), ...(opts.queries === undefined ? {} : { queries: opts.queries }), ...(opts.load === undefined ? {} : { load: opts.load }), ...(opts.control === true ? { control: true } : {}) });
if (opts.only === 'predictor') out['predictor'] = await benchPredictor({ log, ...(opts.data === undefined ? {} : { data: opts.data }) });
if (opts.only === undefined || opts.only === 'overlap') {
  out['overlap'] = await benchOverlap({
    pairs: [
      ['resnet50', 'bert'],
      ['vgg16', 'resnet50'],
      ['resnet50', 'resnet50'],
    ],
    batches: [1, 4],
    seqLen: 32,
    threads: opts.threads,
    repeat: opts.repeat,
    log,
  });
}
if (opts.json) {
  process.stdout.write(JSON.stringify(out, null, 2) + '\n');
} else {
  process.stdout.write(`machine: ${machine}\n\n`);
  const so = out['splitOverhead'] as Awaited<ReturnType<typeof benchSplitOverhead>> | undefined;
  if (so) {
    process.stdout.write(`Split overhead, ${so.model} 224² batch ${so.batch}, ${so.threads} intra-op thread(s), median of ${so.repeat}:\n`);
    process.stdout.write(
      formatTable(
        ['path', 'whole model ms', '18 operators ms', 'ratio operators/whole'],
        [
          ['in-process ORT sessions', so.inProcess.wholeMs, so.inProcess.operatorsMs, so.inProcess.ratio],
          ['through executor (OrtDevice)', so.executor.wholeMs, so.executor.operatorsMs, so.executor.ratio],
        ],
      ) + '\n',
    );
  }
  const sim = out['simSpeed'] as Awaited<ReturnType<typeof benchSimSpeed>> | undefined;
  if (sim) {
    process.stdout.write(
      `Simulator speed, ${sim.device}, 4-way uncontrolled overlap (${sim.services.join(', ')}), one core: ` +
        `${Math.round(sim.operators).toLocaleString('en-US')} operator executions in ${(sim.wallMs / 1000).toFixed(2)} s of wall time for ${(sim.simulatedMs / 1000).toFixed(0)} s simulated (${sim.queries.toLocaleString('en-US')} queries)\n` +
        `  ${Math.round(sim.operatorsPerSecond).toLocaleString('en-US')} operator executions per second = ${Math.round(sim.operatorsPer10s).toLocaleString('en-US')} per 10 s (goal ≥ 1,000,000); simulated/wall time ${sim.speedup.toFixed(1)}×\n`,
    );
  }
  const rs = out['runtimeSpeed'] as Awaited<ReturnType<typeof benchRuntimeSpeed>> | undefined;
  if (rs) {
    process.stdout.write(`Simulation speed of the serving path, ${rs.device}, ${rs.services.join(' + ')}, one core (goal: 1,000,000 queries in ≤ 60 s):\n`);
    process.stdout.write(
      formatTable(
        ['policy', 'queries', 'wall s', 'simulated s', 'queries per wall s', 's per 1M queries', 'groups', 'violations %'],
        rs.runs.map((r) => [r.policy, r.queries, (r.wallMs / 1000).toFixed(1), (r.simulatedMs / 1000).toFixed(0), Math.round(r.queriesPerSecond), r.secondsPerMillion.toFixed(1), r.groups, (r.violationRatio * 100).toFixed(2)]),
      ) + '\n',
    );
  }
  const gap = out['idleGap'] as Awaited<ReturnType<typeof benchIdleGap>> | undefined;
  if (gap) {
    process.stdout.write(
      `Device idle gap between groups at saturation (goal: ≤ 1 % of busy time on sim, ≤ 3 % on ort), load average ${gap.loadAverage1m.toFixed(2)} at start; ` +
        `'when idle': the runtime decides only when the device is idle (the baseline), 'ahead': it decides the next group while one runs:\n`,
    );
    const pct = (x: number): string => (Number.isFinite(x) ? (x * 100).toFixed(3) : '–');
    process.stdout.write(
      formatTable(
        ['device', 'policy', 'decides', 'queries', 'groups', 'idle gap % of busy', 'outside operators % of busy', 'launched as decided ahead %', 'violations %', 'goodput q/s'],
        gap.rows.map((r) => [r.device, r.policy, r.decideAhead ? 'ahead' : 'when idle', r.queries, r.groups, pct(r.idleGapRatio), pct(r.outsideOperatorsRatio), pct(r.decidedAheadShare), pct(r.violationRatio), r.goodputQps.toFixed(1)]),
      ) + '\n',
    );
  }
  const rej = out['rejection'] as Awaited<ReturnType<typeof benchRejection>> | undefined;
  if (rej) {
    process.stdout.write(`Rejection on time, wall clock (goal: a query with a 100 ms target behind a 500 ms group answered within 105 ms), load average ${rej.loadAverage1m.toFixed(2)} at start:\n`);
    process.stdout.write(
      formatTable(
        ['scenario', 'decides', 'trials', 'running group predicted ms', 'measured ms', 'target ms', 'answered after (median) ms', '(max) ms', 'rejected'],
        rej.rows.map((r) => [r.scenario, r.decideAhead ? 'ahead' : 'when idle', r.trials, r.longPredictedMs.toFixed(2), r.longMeasuredMs.toFixed(1), r.qosTargetMs.toFixed(2), r.answeredAfterMedianMs.toFixed(2), r.answeredAfterMaxMs.toFixed(2), r.rejected]),
      ) + '\n',
    );
  }
  const so503 = out['serveOverload'] as Awaited<ReturnType<typeof benchServeOverload>> | undefined;
  if (so503) {
    const f = (x: { p50: number; p99: number; max: number; n: number }): string => `p50 ${x.p50.toFixed(2)} ms, p99 ${x.p99.toFixed(2)} ms, max ${x.max.toFixed(2)} ms (${x.n})`;
    process.stdout.write(
      `abacus serve under 10× overload (sim:a100, wall clock; goal: 503s answered in p99 ≤ 5 ms on the server), load average ${so503.loadAverage1m.toFixed(2)} at the end:\n` +
        `  capacity ${so503.capacityQps.toFixed(0)} q/s, offered ${so503.offeredQps.toFixed(0)} q/s for ${so503.durationMs / 1000} s: ${so503.requests} requests, by status ${JSON.stringify(so503.byStatus)}\n` +
        `  503 on the server: ${f(so503.server503Ms)}\n  503 at the client:  ${f(so503.client503Ms)}\n`,
    );
  }
  const dip = out['dashboardInProcess'] as Awaited<ReturnType<typeof benchDashboardInProcess>> | undefined;
  if (dip) {
    process.stdout.write(
      `Serving path in process (sim:a100 virtual clock, abacus, resnet50-small + vgg19-small, ${dip.queries.toLocaleString('en-US')} queries per run) with the record feed unobserved vs observed by a dashboard hub with one page (goal: ratio ≥ 0.97):\n` +
        `  without: ${dip.withoutQps.map((x) => x.toFixed(0)).join(', ')} simulated q/s\n  with:    ${dip.withQps.map((x) => x.toFixed(0)).join(', ')} simulated q/s (${dip.updates} updates sent)\n` +
        `  ratio median(with) / median(without): ${dip.ratio.toFixed(3)}, load average ${os.loadavg()[0]!.toFixed(2)}\n`,
    );
  }
  const dash = out['dashboard'] as Awaited<ReturnType<typeof benchDashboard>> | undefined;
  if (dash) {
    const qps = (xs: readonly number[]): string => xs.map((x) => x.toFixed(0)).join(', ');
    process.stdout.write(
      `abacus serve with and without an open dashboard stream (sim:a100, 2 services, ${dash.clients} closed-loop HTTP clients, phases of ${dash.phaseMs / 1000} s; goal: ratio ≥ 0.97), load average ${dash.loadAverage1m.toFixed(2)} at the end:\n` +
        `  without: ${qps(dash.withoutQps)} q/s\n  with:    ${qps(dash.withQps)} q/s (the stream sent ${dash.dashboardUpdates} updates, ${(dash.dashboardBytes / 1024).toFixed(0)} KiB)\n` +
        `  ratio median(with) / median(without): ${dash.ratio.toFixed(3)}; median of the pairs' with / without: ${dash.pairRatio.toFixed(3)}${Object.keys(dash.otherStatuses).length > 0 ? `; other statuses ${JSON.stringify(dash.otherStatuses)}` : ''}\n` +
        `  server CPU per completed request: without ${dash.serverCpuMsPerRequest.without.toFixed(3)} ms, with ${dash.serverCpuMsPerRequest.with.toFixed(3)} ms (ratio ${(dash.serverCpuMsPerRequest.with / dash.serverCpuMsPerRequest.without).toFixed(3)})\n`,
    );
  }
  const crt = out['clusterRealtime'] as Awaited<ReturnType<typeof benchClusterRealtime>> | undefined;
  if (crt) {
    const st = crt.settings;
    process.stdout.write(
      `§7.6 cluster trace, ${st.nodes} nodes × ${st.services.join(', ')} on ${st.device} (QoS ${st.qosMs} ms), ${st.minutes} trace minutes × ${st.minuteMs} ms, load × ${st.scale.toFixed(5)} (${st.nodeQps.toFixed(1)} q/s per node on average; one simulated node peaks at ${st.nodePeakQps.toFixed(1)}); goodput in trace units:\n` +
        formatTable(['run', 'nodes', 'offered', 'goodput q/s', 'violations %', 'p99 ms'], crt.rows.map((r) => [r.run, r.policy, r.offered, r.goodputQps.toFixed(0), (r.violationRatio * 100).toFixed(2), r.p99Ms.toFixed(1)])) +
        `\nabacus ÷ clockwork-style goodput: real time ${crt.ratios.realtime.toFixed(3)}, simulated ${crt.ratios.simulated.toFixed(3)} (16 simulated nodes, whole trace, abacus reproduce cluster: 1.281, docs/reproduction.md)\n`,
    );
  }
  const overload = out['overload'] as Awaited<ReturnType<typeof benchOverload>> | undefined;
  if (overload) {
    process.stdout.write('Goodput under overload: answers within QoS per second at the client, open-loop Poisson at a multiple of the measured capacity (best of 1, 2, 4 in flight):\n');
    const rows: (string | number)[][] = [];
    for (const [config, byProtocol] of Object.entries(overload)) {
      for (const [protocol, r] of Object.entries(byProtocol)) {
        for (const [factor, p] of Object.entries(r.byFactor)) rows.push([config, protocol, r.capacityQps, `${factor}×`, p.goodputQps, p.ratio, p.ratioPerExecutorCore, p.p99Ms, p.p99OverQos, p.unanswered, JSON.stringify(p.byStatus), p.loadAverage1m]);
      }
    }
    process.stdout.write(formatTable(['config', 'protocol', 'capacity q/s', 'offered', 'goodput q/s', 'goodput ÷ capacity', 'per executor core', 'p99 ms (200s)', 'p99 ÷ QoS', 'unanswered', 'answers by status', 'load avg'], rows) + '\n\n');
  }
  const contention = out['contention'] as Awaited<ReturnType<typeof benchContention>> | undefined;
  if (contention) {
    const f = (x: number | null, d = 2): string => (x === null || !Number.isFinite(x) ? '–' : x.toFixed(d));
    process.stdout.write(`Goodput on a busy machine: ${contention.services.map((s) => `${s.service} QoS ${s.qosTargetMs} ms`).join(', ')}, ${contention.rateQps} queries/s, ${contention.rounds} rounds × ${contention.queries} queries per variant; abacus ÷ the better fcfs per round:\n`);
    process.stdout.write(
      formatTable(
        ['busy loops', 'abacus ÷ fcfs median', 'range', 'baseline', 'abacus viol. %', 'fcfs viol. %', 'fallback %', ...contention.levels[0]!.variants.map((v) => `${v.label} q/s`), 'load avg'],
        contention.levels.map((l) => [l.busy, f(l.ratioMedian), `${f(l.ratioMin)}–${f(l.ratioMax)}`, l.baseline, f(l.abacusViolation * 100, 1), f(l.fcfsViolation * 100, 1), f(l.fallbackActiveFraction * 100, 0), ...l.variants.map((v) => f(v.goodputQps, 1)), l.loadAverages1m.map(([a, b]) => `${a}–${b}`).join(', ')]),
      ) + '\n\n',
    );
    process.stdout.write('Every abacus variant ÷ the same better fcfs, per round (median, range):\n');
    process.stdout.write(
      formatTable(
        ['busy loops', ...Object.keys(contention.levels[0]!.abacusRatios)],
        contention.levels.map((l) => [l.busy, ...Object.values(l.abacusRatios).map((r) => `${f(r.median)} (${f(r.min)}–${f(r.max)})`)]),
      ) + '\n\n',
    );
    process.stdout.write('Per variant (pooled over the rounds): where the violations come from, and how the predictions held (overrun: measured > 1.25 × the latency the group was decided with):\n');
    process.stdout.write(
      formatTable(
        ['busy', 'variant', 'goodput q/s', 'viol. %', 'dropped %', 'late %', 'group size', 'overlapped %', 'MAPE %', 'measured ÷ predicted p50', 'overrun overlapped %', 'overrun solo %', 'solo at 1 thread %', 'fallback %'],
        contention.levels.flatMap((l) => l.variants.map((v) => [l.busy, v.label, f(v.goodputQps, 1), f(v.violationRatio * 100, 1), f(v.droppedShare * 100, 1), f(v.lateShare * 100, 1), f(v.meanGroupSize), f(v.overlappedShare * 100, 0), f(v.predictorMape * 100, 0), f(v.measuredOverPredictedMedian), f(v.overlappedOverrunShare * 100, 0), f(v.soloOverrunShare * 100, 0), f(v.soloOneThreadShare * 100, 0), f(v.fallbackShare * 100, 0)])),
      ) + '\n\n',
    );
  }
  const loop = out['eventLoop'] as Awaited<ReturnType<typeof benchEventLoop>> | undefined;
  if (loop?.hostile) {
    const size = loop.hostile.size;
    const rows = (which: string, results: NonNullable<typeof loop.hostile>['defaults']) =>
      results.map((r) => [
        which,
        r.kind === 'slow-headers' ? `${size.slowConnections} conns` : `${r.kind === 'floats×16' ? `${size.concurrent} × ` : ''}${r.bodyMB.toFixed(1)}`,
        r.kind,
        `${r.liveMs.p50.toFixed(1)} / ${r.liveMs.p99.toFixed(1)} / ${r.liveMs.p100.toFixed(1)} (${r.liveMs.n})`,
        `${r.loopDelayMs.p99.toFixed(1)} / ${r.loopDelayMs.max.toFixed(1)}`,
        r.rssGrowthMB.toFixed(0),
        (r.wallMs / 1000).toFixed(1),
        `${JSON.stringify(r.byStatus)}${r.closed === undefined ? '' : `, closed ${r.closed}, last at ${(r.lastClosedMs! / 1000).toFixed(1)} s`}`,
      ]);
    process.stdout.write(
      `abacus serve under hostile clients (sim:a100; goal: live p99 ≤ 20 ms, p100 ≤ 100 ms), load average ${loop.hostile.loadAverage1m.toFixed(2)} at the end:\n` +
        formatTable(['limits', 'body MB', 'kind', 'GET live p50/p99/p100 ms (n)', 'loop delay p99/max ms', 'RSS growth MB', 'wall s', 'answers'], [...rows('defaults', loop.hostile.defaults), ...rows('JSON 64 MiB', loop.hostile.jsonLimitRaised)]) +
        '\n' +
        [...loop.hostile.defaults, ...loop.hostile.jsonLimitRaised].filter((r) => r.firstError !== '').map((r) => `  ${r.kind}: ${r.firstError}`).join('\n') +
        '\n\n',
    );
  }
  if (loop && loop.requests > 0) {
    const d = (x: { p50: number; p99: number; max: number }): string => `p50 ${x.p50.toFixed(2)} ms, p99 ${x.p99.toFixed(2)} ms, max ${x.max.toFixed(2)} ms`;
    process.stdout.write(
      `abacus serve event-loop delay (sim:a100, monitorEventLoopDelay at 1 ms; goal: p99 ≤ 20 ms under load), load average ${loop.loadAverage1m.toFixed(2)} at the end:\n` +
        `  idle (probe only):                         ${d(loop.idleDelayMs)}\n` +
        `  ${loop.clients} clients × ${(loop.requestBytes / 1e6).toFixed(1)} MB to a bare node:http drain (baseline), ${loop.durationMs / 1000} s: ${d(loop.drainDelayMs)}, ${loop.drainMBps.toFixed(0)} MB/s in\n` +
        `  the same to abacus serve, ${loop.durationMs / 1000} s: ${d(loop.loadDelayMs)} (p99 ${loop.p99Ratio.toFixed(2)}× the drain's)\n` +
        `  ${loop.requests} requests (${JSON.stringify(loop.byStatus)}), ${loop.receivedMBps.toFixed(0)} MB/s in; GET /v2/health/live under load: p50 ${loop.liveProbeMs.p50.toFixed(2)} ms, p99 ${loop.liveProbeMs.p99.toFixed(2)} ms, max ${loop.liveProbeMs.max.toFixed(2)} ms (${loop.liveProbeMs.n})\n`,
    );
  }
  const warm = out['warmUp'] as Awaited<ReturnType<typeof benchWarmUp>> | undefined;
  if (warm) {
    process.stdout.write(`First 10 requests after ready ÷ steady median at their batch size, ${warm.model} on ort (goal: all ≤ 1.5), load average ${warm.loadAverage1m.toFixed(2)}:\n`);
    process.stdout.write(
      formatTable(
        ['warm-up', 'load → ready s', 'max ratio', 'median ratio', 'compute_ms max ratio', 'compute_ms median ratio', 'first 10 (batch: ratio)'],
        warm.modes.map((m) => [m.mode === 'baseline' ? 'baseline (batch 1 once)' : 'until steady at every shape', (m.startMs / 1000).toFixed(1), m.maxRatio.toFixed(2), m.medianRatio.toFixed(2), m.maxComputeRatio.toFixed(2), m.medianComputeRatio.toFixed(2), m.first.map((f) => `${f.batch}: ${f.ratio.toFixed(2)}`).join(', ')]),
      ) + '\n',
    );
  }
  const mem = out['executorMemory'] as Awaited<ReturnType<typeof benchExecutorMemory>> | undefined;
  if (mem) {
    process.stdout.write(`Executor RSS over requests cycling 9 shapes after warm-up, ${mem.model} on ort (goal: growth ≤ 10 %), load average ${mem.loadAverage1m.toFixed(2)}:\n`);
    for (const r of mem.runs) {
      process.stdout.write(
        `  ${r.settings}, ${r.requests} requests: after warm-up ${r.afterWarmUpMiB.toFixed(1)} MiB, end ${r.endMiB.toFixed(1)} MiB, max ${r.maxMiB.toFixed(1)} MiB: growth ${(r.growth * 100).toFixed(1)} %; median request ${r.medianMs.toFixed(2)} ms${r.failed > 0 ? ` (${r.failed} requests failed)` : ''}\n` +
          `    samples (requests: MiB): ${r.samples.map(([n, m]) => `${n}: ${m.toFixed(1)}`).join(', ')}\n`,
      );
    }
  }
  const pred = out['predictor'] as Awaited<ReturnType<typeof benchPredictor>> | undefined;
  if (pred) {
    process.stdout.write(`Predictor, ${pred.device}: one predict call scoring 4 candidate groups of 4 slots (goal: median ≤ 5 µs, p99 ≤ 20 µs), one core:\n`);
    process.stdout.write(formatTable(['kind', 'median µs', 'p99 µs', 'calls'], pred.calls.map((c) => [c.kind, c.medianUs, c.p99Us, c.calls])) + '\n');
    process.stdout.write(`Training time (goal ≤ 60 s for 20k samples on 2 cores) and held-out error; data: ${pred.data}:\n`);
    process.stdout.write(
      formatTable(
        ['kind', 'training samples', 'train s', 'held-out MAPE %', 'held-out MAE ms'],
        pred.training.map((t) => [t.kind, t.samples, t.trainSeconds, t.holdoutMape === null ? '-' : (t.holdoutMape * 100).toFixed(2), t.holdoutMaeMs === null ? '-' : t.holdoutMaeMs.toFixed(3)]),
      ),
    );
  }
  const sched = out['schedule'] as Awaited<ReturnType<typeof benchSchedule>> | undefined;
  if (sched) {
    process.stdout.write(
      `Scheduling decision latency, ${sched.services.length} services (${sched.services.join(', ')}), abacus ways ${sched.ways}, slack ${sched.slackMs} ms; ` +
        `per decision, timer overhead ${sched.timerOverheadUs.toFixed(2)} µs included (goal for abacus: median ≤ 10 µs, p99 ≤ 50 µs):\n`,
    );
    process.stdout.write(
      formatTable(
        ['predictor', 'policy', 'solo memo', 'median µs', 'p99 µs', 'mean µs', 'predictor calls', 'groups scored', 'search rounds', 'memo hits', 'median / fcfs'],
        sched.rows.map((r) => [r.predictor, r.policy, r.memo, r.medianUs, r.p99Us, r.meanUs, r.predictorCalls, r.groupsScored, r.searchRounds, r.soloMemoHits, r.ratioToFcfs]),
      ) + '\n',
    );
    const refineRatios = sched.rows
      .filter((r) => r.policy.endsWith(' refine'))
      .map((r) => {
        const plain = sched.rows.find((x) => x.predictor === r.predictor && x.memo === r.memo && x.policy === r.policy.slice(0, -' refine'.length));
        return `${r.predictor} memo ${r.memo} ${plain === undefined ? '–' : (r.medianUs / plain.medianUs).toFixed(3)}`;
      });
    process.stdout.write(`Online refinement (abacus refine ÷ abacus, median; goal ≤ 1.10): ${refineRatios.join(', ')}\n\n`);
    process.stdout.write(
      `Dynamic batching: the same services, queues of 10..40 single-sample queries, maxBatchSize ${sched.batching.maxBatchSize}; ` +
        `'batching off': abacus on the same queues without batching (goal for abacus with batching: median ≤ 20 µs):\n`,
    );
    process.stdout.write(
      formatTable(
        ['predictor', 'policy', 'solo memo', 'median µs', 'p99 µs', 'mean µs', 'predictor calls', 'groups scored', 'search rounds', 'memo hits', 'samples / segment', 'median / fcfs'],
        sched.batching.rows.map((r) => [r.predictor, r.policy, r.memo, r.medianUs, r.p99Us, r.meanUs, r.predictorCalls, r.groupsScored, r.searchRounds, r.soloMemoHits, r.samplesPerSegment, r.ratioToFcfs]),
      ) + '\n',
    );
  }
  const ov = out['overlap'] as Awaited<ReturnType<typeof benchOverlap>> | undefined;
  if (ov) {
    process.stdout.write(
      `Overlap opportunity, OrtDevice, no spinning, BERT seq 32, median of ${opts.repeat}. Group: ${opts.threads} intra-op thread(s) per executor; ` +
        `sequential: the same executors one query at a time; sequential (all cores): executors with ${os.cpus().length} threads, one query at a time:\n`,
    );
    process.stdout.write(
      formatTable(
        ['pair', 'batch', 'A alone ms', 'B alone ms', 'sequential ms', 'sequential (all cores) ms', 'group ms', 'group/sequential', 'group/sequential (all cores)'],
        ov.map((r) => [r.pair, r.batch, r.soloMs[0]!, r.soloMs[1]!, r.sequentialMs, r.sequentialAllCoresMs, r.groupMs, r.ratio, r.ratioVsAllCores]),
      ),
    );
  }
}
