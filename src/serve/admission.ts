/**
 * Admission before the work is done: shed a request that cannot finish within its QoS target
 * as soon as its model is known, before its body is read or decoded (docs/serving.md
 * "Overload and admission").
 *
 * Why: under overload every request the server decodes and queues costs event-loop and CPU time
 * that the device's queries need, and a request queued behind more work than its QoS target
 * allows is lost anyway. Shedding it first, cheaply, keeps the device busy with requests that can
 * still make it (Clockwork, OSDI'20 §4: admit only what can finish in time; Google SRE book,
 * "Handling Overload": reject early, before the expensive work).
 *
 * The estimate is measured, not predicted, so it holds on a busy machine whatever the predictor
 * says (the controller still decides each group with the predictor; this only bounds the queue):
 * - `drainMs`: exponentially weighted mean of the time between two completions while other
 *   queries were pending (the device's service time per query at saturation, with its overlap
 *   and batching gains);
 * - `runMs[service]`: weighted mean of first launch → completion of the service's queries.
 *
 * A request for `service` that finds `ahead` queries of all services waiting or running is
 * expected to finish after `spentMs + ahead × drainMs + runMs[service]`, where `spentMs` is what
 * it already spent since it arrived. It is shed when that exceeds its QoS target. Nothing is shed
 * while nothing is ahead (the device would take it next) or before `MIN_SAMPLES` completions were
 * measured. The bound is the worst case for one-at-a-time (the running query just started), so
 * the queue keeps about `qos ÷ drain` queries: the device never idles for lack of admitted work.
 */

import { ServeError } from './inference.ts';

/** Shortest time between two log lines about shed requests of one model, ms (one line per request would cost the loop as much as the shedding). */
export const SHED_LOG_INTERVAL_MS = 10_000;

/** Weight of a new sample in the running means (about the last 10 samples count). */
export const ADMISSION_EWMA_WEIGHT = 0.1;

/** Completions a service needs before its requests can be shed (the means settle first). */
export const MIN_SAMPLES = 5;

/** What the gate measures and decides for one service. */
export interface AdmissionEstimate {
  /** Queries of all services waiting or running when it was asked. */
  readonly ahead: number;
  /** Expected time from arrival to completion, ms; undefined while too few completions were measured. */
  readonly finishMs: number | undefined;
}

/** Where the gate reads the queues. */
export interface AdmissionQueues {
  /** Queries of every service waiting or running now. */
  pendingQueries(): number;
}

export class AdmissionGate {
  private drainMs: number | undefined;
  private drainSamples = 0;
  private readonly runMs = new Map<string, { meanMs: number; samples: number }>();
  private lastCompletionMs: number | undefined;
  private backlogAtLast = false;

  private readonly shedLog = new Map<string, { sinceMs: number; shed: number }>();

  constructor(private readonly queues: AdmissionQueues) {}

  /**
   * Count one shed request of `service` at `nowMs`; returns what to log (requests shed since the
   * last line and over how long) at most once per `SHED_LOG_INTERVAL_MS`, else undefined.
   */
  countShed(service: string, nowMs: number): { shed: number; windowMs: number } | undefined {
    const entry = this.shedLog.get(service);
    if (entry === undefined) {
      this.shedLog.set(service, { sinceMs: nowMs, shed: 0 });
      return { shed: 1, windowMs: 0 };
    }
    entry.shed++;
    if (nowMs - entry.sinceMs < SHED_LOG_INTERVAL_MS) return undefined;
    const out = { shed: entry.shed, windowMs: nowMs - entry.sinceMs };
    entry.sinceMs = nowMs;
    entry.shed = 0;
    return out;
  }

  /**
   * One query completed (its outputs delivered).
   * @param service its service
   * @param firstLaunchMs clock time its first operator group launched, ms
   * @param endMs clock time it completed, ms
   */
  completed(service: string, firstLaunchMs: number, endMs: number): void {
    if (this.lastCompletionMs !== undefined && this.backlogAtLast && endMs >= this.lastCompletionMs) {
      const gap = endMs - this.lastCompletionMs;
      this.drainMs = this.drainMs === undefined ? gap : this.drainMs + ADMISSION_EWMA_WEIGHT * (gap - this.drainMs);
      this.drainSamples++;
    }
    this.lastCompletionMs = endMs;
    // called after the query left the runtime: anything still pending was waiting behind it
    this.backlogAtLast = this.queues.pendingQueries() > 0;
    const run = Math.max(0, endMs - firstLaunchMs);
    const s = this.runMs.get(service);
    if (s === undefined) this.runMs.set(service, { meanMs: run, samples: 1 });
    else {
      s.meanMs += ADMISSION_EWMA_WEIGHT * (run - s.meanMs);
      s.samples++;
    }
  }

  /** The expected finish of a request of `service` arriving now (see the file docs). */
  estimate(service: string): AdmissionEstimate {
    const ahead = this.queues.pendingQueries();
    const run = this.runMs.get(service);
    if (run === undefined || run.samples < MIN_SAMPLES) return { ahead, finishMs: undefined };
    const drain = this.drainMs !== undefined && this.drainSamples >= MIN_SAMPLES ? this.drainMs : run.meanMs;
    return { ahead, finishMs: ahead * drain + run.meanMs };
  }

  /**
   * Why a request of `service` with `qosTargetMs` that already spent `spentMs` should be shed, or
   * undefined to admit it.
   */
  shedReason(service: string, qosTargetMs: number, spentMs: number): string | undefined {
    const e = this.estimate(service);
    if (e.ahead === 0 || e.finishMs === undefined) return undefined;
    const expectedMs = Math.max(0, spentMs) + e.finishMs;
    if (expectedMs <= qosTargetMs) return undefined;
    return `${e.ahead} queries ahead; expected to finish in ${expectedMs.toFixed(1)} ms, past the QoS target of ${qosTargetMs} ms`;
  }
}

/**
 * The `overloaded` error of a shed request, built without a stack trace: under overload it is
 * made thousands of times a second, and capturing a stack is most of an error's cost. It goes
 * to the client as a status and a message only.
 */
export function shedError(message: string): ServeError {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    return new ServeError('overloaded', message);
  } finally {
    Error.stackTraceLimit = limit;
  }
}

