/**
 * What the runtime records (docs/design.md#records, docs/scheduling-runtime.md): per query
 * its arrival, every operator group it ran in, and how it ended; per group what was predicted
 * and measured. Reports, metrics and the predictor's online error all read these records.
 */

/**
 * Why a query was rejected (stable codes, `errors.ts`); `cancelled`: its caller withdrew it
 * (`ServingRuntime.cancel`, e.g. the client disconnected).
 */
export type RejectionReason = 'qos_violation' | 'overloaded' | 'device_failure' | 'bad_request' | 'cancelled';

/** One launched operator group. */
export interface GroupRecord {
  /** 0-based, in launch order. */
  readonly index: number;
  /** Clock time of the launch, ms. */
  readonly launchMs: number;
  /** The controller's prediction, ms; undefined for policies that do not predict. */
  readonly predictedMs: number | undefined;
  /** `GroupResult.groupLatencyMs` as measured (wall or simulated), ms. */
  measuredMs: number;
  /**
   * Whether it was decided while the group before it ran and launched as decided, the moment the
   * device was free (the runtime's decisions ahead; one-group-at-a-time policies). Absent in
   * records made elsewhere.
   */
  readonly decidedAhead?: boolean;
  /** True when abacus's calibration fallback decided it (one query at a time; `schedule/fallback.ts`). Absent otherwise. */
  readonly fallback?: boolean;
  /**
   * One group at a time: how long the device sat idle before this launch while queries waited,
   * ms — from the end of the group before it (when the runtime saw it end with queries in its
   * queues) to this launch: the decision latency and the runtime's own work between two groups
   * (zero in virtual time). Absent when nothing waited at that end, and for policies that launch
   * while busy.
   */
  readonly idleBeforeMs?: number;
  /**
   * The device-measured latency of its longest successful segment (`SegmentResult.latencyMs`),
   * ms: how long operators ran, against `measuredMs` that also counts dispatch and messaging.
   * Set when it ends.
   */
  longestSegmentMs?: number;
  /** Segments in the order launched. */
  readonly segments: readonly {
    /** The device's query id: the query's own, or a fused batch's. */
    readonly queryId: string;
    readonly service: string;
    readonly start: number;
    readonly end: number;
    /** Samples in the segment (a fused batch: all its members'). */
    readonly batch: number;
    readonly seqLen: number;
    /** Intra-op threads the controller gave it (`LaunchSegment.intraOpThreads`); absent: the device's default. */
    readonly intraOpThreads?: number;
    /** Ids of the queries a fused batch carried (in batch order) when it launched; absent for a query alone. */
    readonly members?: readonly string[];
  }[];
}

/** One query, from arrival to its single outcome. */
export interface QueryRecord {
  readonly id: string;
  readonly service: string;
  /** Arrival on the runtime's clock, ms. */
  readonly arrivalMs: number;
  readonly batch: number;
  readonly seqLen: number;
  /** The service's QoS target when it arrived, ms (or the per-request override). */
  readonly qosTargetMs: number;
  /** Indices of the groups it ran in (`GroupRecord.index`). */
  readonly groups: number[];
  /**
   * Samples of the segment(s) it ran in: its own `batch` when it ran alone, the fused batch's
   * total when the controller fused it with other queries; undefined before its first launch.
   */
  runBatch?: number;
  /** `pending` until it ends; then completed (outputs delivered) or rejected with a reason. */
  outcome: 'pending' | 'completed' | 'rejected';
  reason?: RejectionReason;
  /** Human-readable detail of a rejection. */
  detail?: string;
  /** Clock time of the outcome, ms (undefined while pending). */
  endMs?: number;
}

/** Latency of a finished query (end − arrival), ms; undefined while pending. */
export function queryLatencyMs(q: QueryRecord): number | undefined {
  return q.endMs === undefined ? undefined : q.endMs - q.arrivalMs;
}

/** Whether a query completed within its QoS target. */
export function metQos(q: QueryRecord): boolean {
  return q.outcome === 'completed' && q.endMs !== undefined && q.endMs - q.arrivalMs <= q.qosTargetMs;
}
