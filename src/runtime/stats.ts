/**
 * Serving statistics from runtime records (the vocabulary of docs/scheduling-runtime.md):
 * - latency percentiles (nearest rank: the ⌈p·n⌉-th smallest) over **completed** queries, late
 *   ones included; rejected queries have no latency and count as violations instead;
 * - violation ratio = (completed late + rejected for any reason) / offered;
 * - goodput = queries completed within QoS per second of the run's span; throughput = queries
 *   completed (late or not) per second. The span runs from the first arrival to the last
 *   outcome, so a backlog that drains after the load stops lowers both;
 * - predictor MAPE = mean |predicted − measured| / measured over executed groups that had a
 *   prediction.
 */
import type { GroupRecord, QueryRecord } from './records.ts';
import { metQos } from './records.ts';

/**
 * Nearest-rank percentile of a sample: the ⌈p/100·n⌉-th smallest value (p in (0, 100]).
 * @returns NaN for an empty sample.
 * @throws RangeError for p outside (0, 100].
 */
export function percentile(values: readonly number[], p: number): number {
  if (!(p > 0 && p <= 100)) throw new RangeError(`percentile p must be in (0, 100], got ${p}`);
  return nearestRank(Float64Array.from(values).sort(), p);
}

/**
 * `percentile` of a sample already sorted ascending (no copy): the ⌈p/100·n⌉-th smallest; NaN
 * when empty. p is not checked.
 */
export function nearestRank(sorted: ArrayLike<number>, p: number): number {
  return sorted.length === 0 ? Number.NaN : sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)]!;
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
 * Accumulates `ServingStats` one finished query at a time without keeping the records (long
 * simulations): counts, rejection reasons, and the latencies of completed queries in a
 * growable Float64Array (8 bytes per query).
 */
export class StatsCollector {
  private latencies = new Float64Array(1024);
  private completed = 0;
  private onTime = 0;
  private offered = 0;
  private firstMs = Infinity;
  private lastMs = -Infinity;
  private readonly rejectedBy: Record<string, number> = {};

  /** Add a finished query (a pending one is ignored). */
  add(q: QueryRecord): void {
    if (q.outcome === 'pending') return;
    this.offered++;
    if (q.arrivalMs < this.firstMs) this.firstMs = q.arrivalMs;
    const end = q.endMs ?? q.arrivalMs;
    if (end > this.lastMs) this.lastMs = end;
    if (q.outcome === 'completed') {
      if (this.completed === this.latencies.length) {
        const grown = new Float64Array(this.latencies.length * 2);
        grown.set(this.latencies);
        this.latencies = grown;
      }
      this.latencies[this.completed++] = end - q.arrivalMs;
      if (metQos(q)) this.onTime++;
    } else {
      const reason = q.reason ?? 'unknown';
      this.rejectedBy[reason] = (this.rejectedBy[reason] ?? 0) + 1;
    }
  }

  /** First arrival to last outcome of the queries added, ms (0 when none). */
  get spanMs(): number {
    return this.lastMs > this.firstMs ? this.lastMs - this.firstMs : 0;
  }

  /** The statistics so far; `spanMs` overrides the span the rates are computed over. */
  stats(spanMs?: number): ServingStats {
    const sorted = this.latencies.slice(0, this.completed).sort();
    const span = spanMs ?? this.spanMs;
    const perSecond = (n: number): number => (span > 0 ? (n * 1000) / span : 0);
    return {
      offered: this.offered,
      completed: this.completed,
      onTime: this.onTime,
      late: this.completed - this.onTime,
      rejected: this.offered - this.completed,
      rejectedBy: { ...this.rejectedBy },
      p50Ms: nearestRank(sorted, 50),
      p95Ms: nearestRank(sorted, 95),
      p99Ms: nearestRank(sorted, 99),
      violationRatio: this.offered === 0 ? 0 : (this.offered - this.onTime) / this.offered,
      goodputQps: perSecond(this.onTime),
      throughputQps: perSecond(this.completed),
      spanMs: span,
    };
  }
}

/**
 * Statistics of finished queries (pending ones are ignored: call after the run drained).
 * `spanMs` overrides the span (e.g. the whole run's, for per-service stats).
 */
export function servingStats(queries: readonly QueryRecord[], spanMs?: number): ServingStats {
  const c = new StatsCollector();
  for (const q of queries) c.add(q);
  return c.stats(spanMs);
}

/** Accumulates group statistics one finished group at a time: count, mean size, predictor MAPE. */
export class GroupStatsCollector {
  private count = 0;
  private segments = 0;
  private samples = 0;
  private apeSum = 0;
  private predicted = 0;
  private busyMs = 0;
  private idleMs = 0;
  private outsideMs = 0;
  private ahead = 0;
  private fallback = 0;

  add(g: GroupRecord): void {
    this.count++;
    if (Number.isFinite(g.measuredMs)) {
      this.busyMs += g.measuredMs;
      if (g.longestSegmentMs !== undefined) this.outsideMs += Math.max(0, g.measuredMs - g.longestSegmentMs);
    }
    this.idleMs += g.idleBeforeMs ?? 0;
    if (g.decidedAhead === true) this.ahead++;
    if (g.fallback === true) this.fallback++;
    this.segments += g.segments.length;
    for (const s of g.segments) this.samples += s.batch;
    if (g.predictedMs !== undefined && g.measuredMs > 0) {
      this.apeSum += Math.abs(g.predictedMs - g.measuredMs) / g.measuredMs;
      this.predicted++;
    }
  }

  get groups(): number {
    return this.count;
  }

  /** Mean segments per group; NaN for no groups. */
  get meanGroupSize(): number {
    return this.count === 0 ? Number.NaN : this.segments / this.count;
  }

  /** Mean samples per launched segment (a fused batch counts all its members' samples); NaN for no groups. */
  get meanSegmentBatch(): number {
    return this.segments === 0 ? Number.NaN : this.samples / this.segments;
  }

  /** MAPE (fraction) over groups with a prediction; NaN when none. */
  get predictorMape(): number {
    return this.predicted === 0 ? Number.NaN : this.apeSum / this.predicted;
  }

  /**
   * The device's idle time between groups while queries waited (Σ `idleBeforeMs`) over its busy
   * time (Σ `measuredMs`), a fraction; NaN for no busy time. One group at a time only (0 for
   * policies that launch while busy, which record no gaps).
   */
  get idleGapRatio(): number {
    return this.busyMs > 0 ? this.idleMs / this.busyMs : Number.NaN;
  }

  /**
   * The part of the groups' measured latency in which their longest segment's operators did
   * not run (dispatch, messaging, input handling: Σ (`measuredMs` − `longestSegmentMs`)) over
   * the busy time, a fraction; NaN for no busy time.
   */
  get outsideOperatorsRatio(): number {
    return this.busyMs > 0 ? this.outsideMs / this.busyMs : Number.NaN;
  }

  /** Share of groups launched as decided while the group before them ran (`decidedAhead`); NaN for no groups. */
  get decidedAheadShare(): number {
    return this.count === 0 ? Number.NaN : this.ahead / this.count;
  }

  /** Share of groups abacus's calibration fallback decided (`GroupRecord.fallback`); NaN for no groups. */
  get fallbackShare(): number {
    return this.count === 0 ? Number.NaN : this.fallback / this.count;
  }
}


/** Mean absolute percentage error of predicted vs measured group latency (fraction); NaN when no group had a prediction. */
export function predictorMape(groups: readonly GroupRecord[]): number {
  return collectGroups(groups).predictorMape;
}

/** Mean number of segments per group (1 = no overlap); NaN for no groups. */
export function meanGroupSize(groups: readonly GroupRecord[]): number {
  return collectGroups(groups).meanGroupSize;
}

function collectGroups(groups: readonly GroupRecord[]): GroupStatsCollector {
  const c = new GroupStatsCollector();
  for (const g of groups) c.add(g);
  return c;
}
