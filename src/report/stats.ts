/**
 * Serving statistics from runtime records (DESIGN.md vocabulary):
 * - latency percentiles (nearest rank: the ⌈p·n⌉-th smallest) over **completed** queries, late
 *   ones included; rejected queries have no latency and count as violations instead;
 * - violation ratio = (completed late + rejected for any reason) / offered;
 * - goodput = queries completed within QoS per second of the run's span; throughput = queries
 *   completed (late or not) per second. The span runs from the first arrival to the last
 *   outcome, so a backlog that drains after the load stops lowers both;
 * - predictor MAPE = mean |predicted − measured| / measured over executed groups that had a
 *   prediction.
 */
import type { GroupRecord, QueryRecord } from '../runtime/records.ts';
import { metQos } from '../runtime/records.ts';

/**
 * Nearest-rank percentile of a sample: the ⌈p/100·n⌉-th smallest value (p in (0, 100]).
 * @returns NaN for an empty sample.
 * @throws RangeError for p outside (0, 100].
 */
export function percentile(values: readonly number[], p: number): number {
  if (!(p > 0 && p <= 100)) throw new RangeError(`percentile p must be in (0, 100], got ${p}`);
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/** Statistics of a set of queries. */
export interface ServingStats {
  readonly offered: number;
  readonly completed: number;
  readonly onTime: number;
  readonly late: number;
  readonly rejected: number;
  /** Rejections by reason. */
  readonly rejectedBy: Readonly<Record<string, number>>;
  readonly p50Ms: number;
  readonly p95Ms: number;
  readonly p99Ms: number;
  readonly violationRatio: number;
  readonly goodputQps: number;
  readonly throughputQps: number;
  /** Span the rates are computed over, ms. */
  readonly spanMs: number;
}

/**
 * Statistics of finished queries (pending ones are ignored: call after the run drained).
 * `spanMs` overrides the span (e.g. the whole run's, for per-service stats).
 */
export function servingStats(queries: readonly QueryRecord[], spanMs?: number): ServingStats {
  const done = queries.filter((q) => q.outcome !== 'pending');
  const latencies: number[] = [];
  const rejectedBy: Record<string, number> = {};
  let onTime = 0;
  let completed = 0;
  let first = Infinity;
  let last = -Infinity;
  for (const q of done) {
    first = Math.min(first, q.arrivalMs);
    last = Math.max(last, q.endMs ?? q.arrivalMs);
    if (q.outcome === 'completed') {
      completed++;
      latencies.push(q.endMs! - q.arrivalMs);
      if (metQos(q)) onTime++;
    } else {
      const reason = q.reason ?? 'unknown';
      rejectedBy[reason] = (rejectedBy[reason] ?? 0) + 1;
    }
  }
  const span = spanMs ?? (done.length === 0 ? 0 : last - first);
  const perSecond = (n: number): number => (span > 0 ? (n * 1000) / span : 0);
  const offered = done.length;
  return {
    offered,
    completed,
    onTime,
    late: completed - onTime,
    rejected: offered - completed,
    rejectedBy,
    p50Ms: percentile(latencies, 50),
    p95Ms: percentile(latencies, 95),
    p99Ms: percentile(latencies, 99),
    violationRatio: offered === 0 ? 0 : (offered - onTime) / offered,
    goodputQps: perSecond(onTime),
    throughputQps: perSecond(completed),
    spanMs: span,
  };
}

/** The run's span: first arrival to last outcome, ms (0 when nothing finished). */
export function runSpanMs(queries: readonly QueryRecord[]): number {
  let first = Infinity;
  let last = -Infinity;
  for (const q of queries) {
    if (q.outcome === 'pending') continue;
    first = Math.min(first, q.arrivalMs);
    last = Math.max(last, q.endMs ?? q.arrivalMs);
  }
  return last > first ? last - first : 0;
}

/** Mean absolute percentage error of predicted vs measured group latency (fraction); NaN when no group had a prediction. */
export function predictorMape(groups: readonly GroupRecord[]): number {
  let sum = 0;
  let n = 0;
  for (const g of groups) {
    if (g.predictedMs === undefined || !(g.measuredMs > 0)) continue;
    sum += Math.abs(g.predictedMs - g.measuredMs) / g.measuredMs;
    n++;
  }
  return n === 0 ? Number.NaN : sum / n;
}

/** Mean number of segments per group (1 = no overlap); NaN for no groups. */
export function meanGroupSize(groups: readonly GroupRecord[]): number {
  return groups.length === 0 ? Number.NaN : groups.reduce((a, g) => a + g.segments.length, 0) / groups.length;
}
