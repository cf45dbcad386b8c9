/**
 * The paper's cluster experiment (`abacus reproduce cluster`, docs/reproduction.md; Abacus SC'21
 * §7.6, 16-node cluster): N
 * simulated nodes, each a `SimDevice` serving the same services through its own
 * `ServingRuntime`, all on ONE `VirtualClock`, behind a router that replays the offered-load
 * trace (`src/reproduce/reference/cluster-load-trace.csv`: queries/s across the cluster per minute).
 *
 * Two clusters are compared:
 * - `abacus`: every node runs the Abacus controller; the router sends each query at once to
 *   the node with the fewest unanswered queries (shortest queue; ties: round robin);
 * - `clockwork` (the Clockwork-style baseline after Gujarati et al. OSDI'20, as
 *   docs/reproduction.md describes it):
 *   one query per node at a time. Queries wait in one central FIFO (equal QoS targets, so FIFO
 *   is earliest-deadline-first); whenever a node is idle the router pops the head and drops it
 *   (a `qos_violation`, counted as such) when waited + predicted solo latency > QoS target —
 *   a query waits for an idle node at most its headroom — and otherwise sends it to that
 *   node, whose `clockwork` controller runs it whole, alone.
 *
 * Time compression and scale (stated in the report): trace minute m is simulated as
 * `minuteMs` ms of Poisson arrivals at `trace[m] × scale` queries/s over the cluster; rates
 * reported in "trace units" are divided by `scale` again, so they read on the paper's axis.
 */
import { driveUntilSettled } from '../clock/drive.ts';
import { VirtualClock } from '../clock/virtual.ts';
import { SimDevice } from '../device/sim/index.ts';
import { artifactAt } from '../model/artifact.ts';
import type { Predictor } from '../predict/predictor.ts';
import { nearestRank, percentile } from '../runtime/stats.ts';
import { metQos, type QueryRecord } from '../runtime/records.ts';
import { ServingRuntime } from '../runtime/runtime.ts';
import type { ExperimentService } from '../runtime/experiment.ts';
import { createController } from '../schedule/index.ts';
import { traceArrivals } from '../workload/arrivals.ts';
import { LoadGenerator, type GeneratedQuery, type ServiceLoad } from '../workload/generator.ts';

/**
 * The services of every cluster node and of the search experiment: the paper's four-model
 * set (its 3-in-4 / 4-in-4 co-locations, §7.4, use ResNet-101, ResNet-152, VGG-19 and BERT),
 * with the QoS target of the §7.4 set `resnet101+resnet152+vgg19` (100 ms) and the paper's
 * search ways (2) and slack (5 ms). Our choice: the paper does not list the cluster's services.
 */
export const CLUSTER_SET = { models: ['resnet101', 'resnet152', 'vgg19', 'bert'], qosMs: 100, searchWays: 2, slackMs: 5 } as const;

/** The two cluster designs compared. */
export type ClusterPolicy = 'abacus' | 'clockwork';

export interface ClusterOptions {
  /** Sim device id of every node, e.g. `sim:a100`. */
  readonly deviceId: string;
  /** Nodes (integer ≥ 1). Paper: 16. */
  readonly nodes: number;
  /** Services deployed on every node (same QoS target each). */
  readonly services: readonly ExperimentService[];
  /** Trained for `deviceId` and the services' models, with ≥ services.length slots for abacus. */
  readonly predictor: Predictor;
  readonly policy: ClusterPolicy;
  /** Abacus search ways and slack (defaults: the paper's 2 and 5 ms). */
  readonly abacus?: { readonly ways: number; readonly slackMs: number };
  /** Offered load per trace minute over the whole cluster, queries/s, as in the trace file. */
  readonly perMinuteQps: readonly number[];
  /** Multiplier from trace load to simulated load (> 0). */
  readonly scale: number;
  /** Simulated ms per trace minute (> 0): time compression (60,000 = real time). */
  readonly minuteMs: number;
  readonly seed: number;
}

/** One trace minute of a cluster run. Rates in trace units (simulated rate ÷ scale), latencies in simulated ms. */
export interface ClusterMinute {
  readonly minute: number;
  /** The trace's offered load this minute, queries/s. */
  readonly traceQps: number;
  /** Queries that arrived this minute. */
  readonly offered: number;
  /** Queries of this minute completed within QoS, per second, ÷ scale. */
  readonly goodputQps: number;
  /** Queries of this minute completed (late or not), per second, ÷ scale. */
  readonly throughputQps: number;
  /** Over the completed queries of this minute; NaN when none completed. */
  readonly p99Ms: number;
  readonly meanMs: number;
  /** (late + dropped) ÷ offered (0 when none offered). */
  readonly violationRatio: number;
}

export interface ClusterResult {
  readonly policy: ClusterPolicy;
  readonly nodes: number;
  readonly minutes: readonly ClusterMinute[];
  /** Over the whole replay (rates in trace units, over `minutes × minuteMs`). */
  readonly overall: { readonly offered: number; readonly onTime: number; readonly completed: number; readonly goodputQps: number; readonly p99Ms: number; readonly meanMs: number; readonly violationRatio: number };
}

interface MinuteAcc {
  offered: number;
  onTime: number;
  latencies: number[];
}

/**
 * Replay the trace on a simulated cluster under one policy (see the file comment).
 * @throws RangeError for a bad node count, scale, minuteMs or an empty trace; what the device
 *   throws at load (a service that does not fit in memory).
 */
export async function runCluster(o: ClusterOptions): Promise<ClusterResult> {
  if (!Number.isInteger(o.nodes) || o.nodes < 1) throw new RangeError(`cluster nodes must be an integer ≥ 1, got ${o.nodes}`);
  if (!(o.scale > 0 && Number.isFinite(o.scale))) throw new RangeError(`cluster scale must be a finite number > 0, got ${o.scale}`);
  if (!(o.minuteMs > 0 && Number.isFinite(o.minuteMs))) throw new RangeError(`cluster minuteMs must be a finite number > 0, got ${o.minuteMs}`);
  if (o.perMinuteQps.length === 0) throw new RangeError('cluster trace must have at least one minute');
  const clock = new VirtualClock();
  const minutes = o.perMinuteQps.length;
  const acc: MinuteAcc[] = Array.from({ length: minutes }, () => ({ offered: 0, onTime: 0, latencies: [] }));
  const minuteOf = (arrivalMs: number): MinuteAcc => acc[Math.min(minutes - 1, Math.max(0, Math.floor(arrivalMs / o.minuteMs)))]!;
  let open = 0;
  let generatorDone = false;
  let settle: () => void = () => undefined;
  const allAnswered = new Promise<void>((resolve) => (settle = resolve));
  const ended = (arrivalMs: number, onTime: boolean, latencyMs: number | undefined): void => {
    const m = minuteOf(arrivalMs);
    if (onTime) m.onTime++;
    if (latencyMs !== undefined) m.latencies.push(latencyMs);
    open--;
    if (generatorDone && open === 0) settle();
  };
  const onQueryEnd = (q: QueryRecord): void => ended(q.arrivalMs, metQos(q), q.outcome === 'completed' && q.endMs !== undefined ? q.endMs - q.arrivalMs : undefined);

  const devices: SimDevice[] = [];
  const runtimes: ServingRuntime[] = [];
  const qosMs = o.services[0]?.qosTargetMs ?? NaN;
  const specOf = new Map(o.services.map((s) => [s.name, s.spec]));
  // Clockwork-style router state (declared before the runtimes, whose callbacks use it).
  const central: GeneratedQuery[] = [];
  let head = 0;
  const soloMs = new Map<string, number>();
  const estimateMs = (q: GeneratedQuery): number => {
    const spec = specOf.get(q.service)!;
    const key = `${q.service}\u0000${q.batch}\u0000${q.seqLen}`;
    let ms = soloMs.get(key);
    if (ms === undefined) {
      ms = o.predictor.predict([[{ model: spec.name, start: 0, end: spec.operators.length, batch: q.batch, seqLen: q.seqLen }]])[0]!;
      soloMs.set(key, ms);
    }
    return ms;
  };
  let dispatchArmed = false;
  const dispatch = (): void => {
    dispatchArmed = false;
    for (let i = 0; i < runtimes.length && head < central.length; i++) {
      const rt = runtimes[i]!;
      if (rt.counters.pending > 0) continue;
      while (head < central.length) {
        const q = central[head++]!;
        if (clock.now() - q.arrivalMs + estimateMs(q) > qosMs) {
          ended(q.arrivalMs, false, undefined); // dropped: no idle node within its headroom
          continue;
        }
        void rt.submit({ service: q.service, batch: q.batch, seqLen: q.seqLen, arrivalMs: q.arrivalMs });
        break;
      }
    }
    if (head > 4096 && head * 2 > central.length) {
      central.splice(0, head);
      head = 0;
    }
  };
  // After a node's query ends, dispatch on a zero-delay timer: the runtime finishes its own
  // bookkeeping (controller feedback) before the next query is submitted.
  const armDispatch = (): void => {
    if (dispatchArmed) return;
    dispatchArmed = true;
    clock.setTimer(0, dispatch);
  };

  try {
    for (let i = 0; i < o.nodes; i++) {
      const device = await SimDevice.create({ clock, id: o.deviceId, seed: o.seed * 1000 + i });
      devices.push(device);
      await device.load(o.services.map((s) => ({ name: s.name, model: artifactAt('/nonexistent', s.spec) })));
      const controller =
        o.policy === 'abacus' ? createController('abacus', { ways: o.abacus?.ways ?? 2, slackMs: o.abacus?.slackMs ?? 5 }, o.predictor) : createController('clockwork', {}, o.predictor);
      runtimes.push(
        new ServingRuntime({
          clock,
          device,
          controller,
          services: o.services,
          keepRecords: false,
          onQueryEnd: o.policy === 'abacus' ? onQueryEnd : (q) => {
            onQueryEnd(q);
            armDispatch();
          },
        }),
      );
    }
    let next = 0;
    const route = (q: GeneratedQuery): void => {
      open++;
      minuteOf(q.arrivalMs).offered++;
      if (o.policy === 'clockwork') {
        central.push(q);
        dispatch();
        return;
      }
      let best = -1;
      let bestPending = Infinity;
      for (let k = 0; k < runtimes.length; k++) {
        const i = (next + k) % runtimes.length;
        const pending = runtimes[i]!.counters.pending;
        if (pending < bestPending) {
          best = i;
          bestPending = pending;
        }
      }
      next = (best + 1) % runtimes.length;
      void runtimes[best]!.submit({ service: q.service, batch: q.batch, seqLen: q.seqLen, arrivalMs: q.arrivalMs });
    };
    const loads: ServiceLoad[] = o.services.map((s) => ({
      service: s.name,
      weight: s.weight ?? 1,
      batchSizes: { values: s.batchSizes },
      ...(s.seqLens === undefined || s.spec.dynamicAxes.seq === undefined ? {} : { seqLens: { values: s.seqLens } }),
    }));
    const generator = new LoadGenerator({ clock, arrivals: traceArrivals({ perMinuteQps: o.perMinuteQps, scale: o.scale, minuteMs: o.minuteMs }), services: loads, seed: o.seed, durationMs: minutes * o.minuteMs });
    const work = (async (): Promise<void> => {
      await generator.run(route);
      generatorDone = true;
      if (open === 0) settle();
      await allAnswered;
    })();
    await driveUntilSettled(clock, work);
  } finally {
    for (const d of devices) await d.close();
  }

  const seconds = o.minuteMs / 1000;
  const rows: ClusterMinute[] = acc.map((m, minute) => {
    const sorted = Float64Array.from(m.latencies).sort();
    return {
      minute,
      traceQps: o.perMinuteQps[minute]!,
      offered: m.offered,
      goodputQps: m.onTime / seconds / o.scale,
      throughputQps: m.latencies.length / seconds / o.scale,
      p99Ms: nearestRank(sorted, 99),
      meanMs: sorted.length === 0 ? NaN : sorted.reduce((a, b) => a + b, 0) / sorted.length,
      violationRatio: m.offered === 0 ? 0 : (m.offered - m.onTime) / m.offered,
    };
  });
  const all = acc.flatMap((m) => m.latencies);
  const offered = acc.reduce((a, m) => a + m.offered, 0);
  const onTime = acc.reduce((a, m) => a + m.onTime, 0);
  return {
    policy: o.policy,
    nodes: o.nodes,
    minutes: rows,
    overall: {
      offered,
      onTime,
      completed: all.length,
      goodputQps: onTime / (minutes * seconds) / o.scale,
      p99Ms: percentile(all, 99),
      meanMs: all.length === 0 ? NaN : all.reduce((a, b) => a + b, 0) / all.length,
      violationRatio: offered === 0 ? 0 : (offered - onTime) / offered,
    },
  };
}

/** Headline numbers of an abacus and a clockwork run of the same trace. */
export interface ClusterSummary {
  /** Goodput over the whole replay (trace units), Abacus ÷ Clockwork-style. */
  readonly throughputRatioVsClockwork: number;
  readonly abacusGoodputQps: number;
  readonly clockworkGoodputQps: number;
  /** Highest per-minute goodput among minutes whose p99 ≤ QoS, trace units (0 when none). */
  readonly abacusPeakMinuteQps: number;
  readonly clockworkPeakMinuteQps: number;
  /** Minutes whose p99 exceeded the QoS target, per policy. */
  readonly abacusMinutesOverQos: number;
  readonly clockworkMinutesOverQos: number;
}

/** Compare the two runs (same trace, same scale). */
export function summarizeCluster(abacus: ClusterResult, clockwork: ClusterResult, qosMs: number): ClusterSummary {
  const peak = (r: ClusterResult): number => Math.max(0, ...r.minutes.filter((m) => !(m.p99Ms > qosMs)).map((m) => m.goodputQps));
  const over = (r: ClusterResult): number => r.minutes.filter((m) => m.p99Ms > qosMs).length;
  return {
    throughputRatioVsClockwork: abacus.overall.goodputQps / clockwork.overall.goodputQps,
    abacusGoodputQps: abacus.overall.goodputQps,
    clockworkGoodputQps: clockwork.overall.goodputQps,
    abacusPeakMinuteQps: peak(abacus),
    clockworkPeakMinuteQps: peak(clockwork),
    abacusMinutesOverQos: over(abacus),
    clockworkMinutesOverQos: over(clockwork),
  };
}
