/**
 * What `/dashboard/events` sends (Server-Sent Events; types only, shared by the server,
 * `hub.ts`, and the page, `dashboard/main.ts`). Every time is on the runtime's clock, ms (the
 * time base of the records: wall time since the engine started for `serve`, virtual time for a
 * replayed simulation); every latency in ms.
 *
 * Events, in order on one connection:
 * - `hello` (`DashboardHello`), once, first;
 * - `update` (`DashboardUpdate`), the first one carrying the kept history, then one per flush
 *   period (250 ms);
 * - `bye` (`{ reason }`), when the server shuts down or a replay ended and the stream closes.
 */

/** One served service. Colours on the page follow this order (stable for a config). */
export interface DashboardService {
  readonly name: string;
  /** Its default QoS target, ms. */
  readonly qosTargetMs: number;
}

export interface DashboardHello {
  /** `live`: a serving process; `replay`: a simulation replayed at `speed` × wall-clock pace. */
  readonly mode: 'live' | 'replay';
  /** Replay speed (simulated ms per wall ms); 1 when live. */
  readonly speed: number;
  readonly services: readonly DashboardService[];
  /** Sliding window of the per-service statistics, ms of the runtime clock. */
  readonly windowMs: number;
  /** Period of `update` events, ms (wall). */
  readonly flushMs: number;
}

/** One segment of a group: operators `[start, end)` of query `queryId` of `service` at batch `batch`. */
export interface DashboardSegment {
  readonly queryId: string;
  readonly service: string;
  readonly start: number;
  readonly end: number;
  readonly batch: number;
  /** Queries fused into it (1 for a query alone). */
  readonly members: number;
}

/** One operator group (`GroupRecord`). */
export interface DashboardGroup {
  readonly index: number;
  readonly launchMs: number;
  /** Measured group latency, ms (NaN sent as null: the group failed). */
  readonly measuredMs: number | null;
  /** The controller's prediction, ms; null for policies that do not predict. */
  readonly predictedMs: number | null;
  readonly segments: readonly DashboardSegment[];
}

/** One rejected query. */
export interface DashboardRejection {
  readonly queryId: string;
  readonly service: string;
  /** `RejectionReason` (`qos_violation`, `overloaded`, `device_failure`, `bad_request`, `cancelled`). */
  readonly reason: string;
  readonly detail: string;
  /** When it was rejected, ms. */
  readonly atMs: number;
  /** Time it had spent when rejected, ms. */
  readonly waitedMs: number;
}

/** Per service, over the queries that ended in the last `windowMs`. */
export interface DashboardServiceStats {
  readonly service: string;
  readonly qosTargetMs: number;
  /** Queries that ended (completed or rejected) in the window. */
  readonly ended: number;
  readonly completed: number;
  /** Completed after their QoS target. */
  readonly late: number;
  /** Rejected (any reason but `cancelled`). */
  readonly rejected: number;
  /** 99th percentile (nearest rank) of the completed queries' latency, ms; null when none completed. */
  readonly p99Ms: number | null;
  /** (late + rejected) ÷ ended (docs/scheduling-runtime.md "violation ratio"); null when none ended. */
  readonly violationRatio: number | null;
  /** Queries waiting in its queue now. */
  readonly queueDepth: number;
}

/** The predictor's error over recent groups. */
export interface DashboardPredictor {
  /** `refinement`: the online refinement's rolling MAPE (`abacus_predictor_rolling_mape`); `records`: computed here from the kept groups' predicted vs measured latency; null: no predictions. */
  readonly source: 'refinement' | 'records' | null;
  /** Mean absolute percentage error, percent; null when nothing was predicted. */
  readonly rollingMapePct: number | null;
  /** Groups it is computed over. */
  readonly groups: number;
  /** The guard of the online refinement (`predict/refine.ts`); absent without refinement. */
  readonly guardActive?: boolean;
  readonly guardFactor?: number;
  /** abacus's calibration fallback (`schedule/fallback.ts`): true while it serves one query at a time; absent without the fallback. */
  readonly fallbackActive?: boolean;
}

export interface DashboardUpdate {
  /** The runtime clock now, ms (null before the engine started). */
  readonly nowMs: number | null;
  /** `ready`: serving; `not_ready`: warming up; `closing`: shutting down; `done`: a replay reached its end. */
  readonly status: 'ready' | 'not_ready' | 'closing' | 'done';
  /** Groups that ended since the last update (oldest first; at most the hub's per-update cap). */
  readonly groups: readonly DashboardGroup[];
  /** Groups that ended since the last update and were not sent (rate bound or a slow client). */
  readonly skippedGroups: number;
  /** Rejections since the last update (oldest first, capped like `groups`). */
  readonly rejections: readonly DashboardRejection[];
  readonly services: readonly DashboardServiceStats[];
  readonly predictor: DashboardPredictor;
}

export interface DashboardBye {
  readonly reason: string;
}
