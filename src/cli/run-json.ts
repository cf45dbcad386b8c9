/**
 * The `--json` output of `abacus bench` and `abacus simulate` (docs/benchmarks.md): a run's
 * summary as printed, shared with `abacus demo`.
 */
import type { ExperimentResult } from '../runtime/experiment.ts';

/** One run of the `--json` output (docs/benchmarks.md). */
export interface RunJson {
  readonly policy: string;
  /** Real devices: the policy and its intra-op threads per executor when a policy ran with two thread counts, e.g. `fcfs (2 threads)`; a policy variant of `--policy` (`abacus-no-barrier`); else absent. */
  readonly label?: string;
  /** Real devices: onnxruntime intra-op threads per executor of this run. */
  readonly threadsPerExecutor?: number;
  /** The policy's thread rule (`threads` parameter) when it is not 'device' (docs/threads.md). */
  readonly threads?: string;
  readonly rateQps: number;
  readonly violationRatio: number;
  readonly goodputQps: number;
  readonly throughputQps: number;
  readonly p99Ms: number;
  readonly peakGoodputQps?: number;
  readonly peakRateQps?: number;
  readonly meanGroupSize: number;
  /** Mean samples per launched segment (above the mean request batch when queries were fused); null when nothing ran. */
  readonly meanBatch: number | null;
  readonly predictorMape: number | null;
  /** Share of the groups abacus's calibration fallback decided (one query at a time; docs/adaptive.md); present when > 0. */
  readonly fallbackShare?: number;
  /** Queries offered, completed late, and rejected (by reason: qos_violation, overloaded, device_failure, bad_request). */
  readonly offered: number;
  readonly late: number;
  readonly rejectedBy: Readonly<Record<string, number>>;
  readonly services: readonly { service: string; p50Ms: number; p99Ms: number; violationRatio: number; goodputQps: number }[];
}

export interface ExperimentJson {
  readonly device: string;
  readonly predictor: string;
  readonly queries: number;
  /** The arrival process with every parameter spelled out (`formatArrivalSpec`): `poisson`, `bursty:onMs=500,offMs=1500,offRatio=0`, … */
  readonly arrivals: string;
  readonly runs: readonly RunJson[];
  /**
   * `bench --target` only: how late the load generator sent its queries behind their intended
   * times, ms (mean, p99, max), and the offered rate it achieved, queries/s. A p99 near the
   * latencies measured means the client machine, not the server, shaped the result.
   */
  readonly generator?: { readonly sendLatenessMs: { readonly mean: number; readonly p99: number; readonly max: number }; readonly offeredQps: number };
}


const nullable = (x: number): number | null => (Number.isFinite(x) ? x : null);

/** What `runJson` reads of a run (a pooled set of runs fits too: `abacus demo`). */
export type RunSummary = Pick<ExperimentResult, 'policy' | 'rateQps' | 'overall' | 'services' | 'meanGroupSize' | 'meanBatch' | 'predictorMape'> & Partial<Pick<ExperimentResult, 'fallbackShare'>>;

/** One run as `--json` prints it (exported for `abacus demo`). */
export function runJson(r: RunSummary, peak?: { peakGoodputQps: number; peakRateQps: number }): RunJson {
  return {
    policy: r.policy,
    rateQps: r.rateQps,
    violationRatio: r.overall.violationRatio,
    goodputQps: r.overall.goodputQps,
    throughputQps: r.overall.throughputQps,
    p99Ms: r.overall.p99Ms,
    ...(peak === undefined ? {} : peak),
    meanGroupSize: r.meanGroupSize,
    meanBatch: nullable(r.meanBatch),
    predictorMape: nullable(r.predictorMape),
    ...(r.fallbackShare !== undefined && r.fallbackShare > 0 ? { fallbackShare: r.fallbackShare } : {}),
    offered: r.overall.offered,
    late: r.overall.late,
    rejectedBy: r.overall.rejectedBy,
    services: r.services.map((s) => ({ service: s.service, p50Ms: s.p50Ms, p99Ms: s.p99Ms, violationRatio: s.violationRatio, goodputQps: s.goodputQps })),
  };
}
