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
 * `drainMs`, the device time per completed query = the time the device had a group running ÷
 * the queries completed, both as exponentially decaying sums (time constant `DRAIN_WINDOW_MS`).
 * It is 1 ÷ the throughput at saturation, with the gains of overlap and dynamic batching in it
 * and the device time of queries rejected part-way (wasted work) too. It is measured whatever
 * the load: a gate that only learned while a backlog existed would stop learning once it shed
 * everything behind the query running.
 *
 * A request that finds `ahead` queries of all services waiting or running, or admitted and still
 * being read or decoded by a front end (`ticket`), is expected to finish
 * after `spentMs + (ahead + ½) × drainMs`: the one running is half done on average, the others
 * ahead take one each, then it takes one (`spentMs`: what it already spent since it arrived).
 * It is shed when that exceeds `SHED_MARGIN` × its QoS target: hopeless, not merely at risk.
 * Nothing is shed while nothing is ahead (the device would take it next) or before
 * `MIN_SAMPLES` completions. The expectation is the mean and the margin generous on purpose: the
 * gate only has to stop the queue from growing without bound (so that the device always has
 * admitted work, and at most about `SHED_MARGIN × qos ÷ drain` queries wait); which queued
 * query misses is the controller's call, with the predictor, when it decides each group (a
 * `qos_violation` then). A gate that sheds requests at risk sheds work the device could have
 * done, and a closed-loop client, answered at once, spins on 503s: measured on this CPU with
 * four requests in flight, a gate at 1 × the target answered ~1,500 503s a second and kept a
 * sixth of the goodput of one request in flight.
 */

import { ServeError, type AdmissionTicket } from './inference.ts';

/** Shortest time between two log lines about shed requests of one model, ms (one line per request would cost the loop as much as the shedding). */
export const SHED_LOG_INTERVAL_MS = 10_000;

/** Time constant of the decaying sums behind `drainMs`, ms: about the last second of work counts. */
export const DRAIN_WINDOW_MS = 1000;

/** A request is shed when its expected finish passes this many times its QoS target (see the file docs). */
export const SHED_MARGIN = 1.5;

/** Completions needed before anything is shed (the sums settle first). */
export const MIN_SAMPLES = 5;

/** What the gate measures and decides. */
export interface AdmissionEstimate {
  /** Queries of all services waiting or running when it was asked. */
  readonly ahead: number;
  /** Expected time from arrival to completion, ms; undefined while too few completions were measured. */
  readonly finishMs: number | undefined;
  /** Device time per completed query, ms (undefined with `finishMs`). */
  readonly drainMs?: number;
}

export interface AdmissionQueues {
  /** Queries of every service waiting or running now. */
  pendingQueries(): number;
}

export class AdmissionGate {
  /** Admitted requests still read or decoded by a front end (not yet queued): work ahead of later arrivals. */
  private inFrontEnd = 0;
  /** Decaying sums of busy device time (ms) and completed queries, as of `sumsAtMs`. */
  private busyMs = 0;
  private completions = 0;
  private sumsAtMs = 0;
  private total = 0;
  /** End of the latest group interval counted as busy, ms (groups that overlap in time count once). */
  private busyUntilMs = Number.NEGATIVE_INFINITY;
  private readonly shedLog = new Map<string, { sinceMs: number; shed: number }>();

  constructor(private readonly queues: AdmissionQueues) {}

  /** Decay both sums to `nowMs`. */
  private decayTo(nowMs: number): void {
    if (nowMs <= this.sumsAtMs) return;
    const f = Math.exp(-(nowMs - this.sumsAtMs) / DRAIN_WINDOW_MS);
    this.busyMs *= f;
    this.completions *= f;
    this.sumsAtMs = nowMs;
  }

  /** An operator group ran on the device from `launchMs` to `endMs` (clock ms). */
  groupEnded(launchMs: number, endMs: number): void {
    const from = Math.max(launchMs, this.busyUntilMs);
    this.decayTo(endMs);
    if (endMs > from) this.busyMs += endMs - from;
    this.busyUntilMs = Math.max(this.busyUntilMs, endMs);
  }

  /** One query completed (its outputs delivered) at `endMs` (clock ms). */
  completed(endMs: number): void {
    this.decayTo(endMs);
    this.completions++;
    this.total++;
  }

  /** A ticket for a request admitted at `receivedMs`: it counts as ahead of later arrivals until settled (`AdmissionTicket`). */
  ticket(receivedMs: number): AdmissionTicket {
    this.inFrontEnd++;
    let open = true;
    return {
      receivedMs,
      settle: () => {
        if (!open) return;
        open = false;
        this.inFrontEnd--;
      },
    };
  }

  /** The expected finish of a request arriving now (see the file docs). */
  estimate(): AdmissionEstimate {
    const ahead = this.queues.pendingQueries() + this.inFrontEnd;
    if (this.total < MIN_SAMPLES || !(this.completions > 0)) return { ahead, finishMs: undefined };
    const drainMs = this.busyMs / this.completions;
    return { ahead, finishMs: (ahead + 0.5) * drainMs, drainMs };
  }

  /** Why a request with `qosTargetMs` that already spent `spentMs` should be shed, or undefined to admit it. */
  shedReason(qosTargetMs: number, spentMs: number): string | undefined {
    const e = this.estimate();
    if (e.ahead === 0 || e.finishMs === undefined) return undefined;
    const expectedMs = Math.max(0, spentMs) + e.finishMs;
    if (expectedMs <= SHED_MARGIN * qosTargetMs) return undefined;
    const ahead = `${e.ahead} ${e.ahead === 1 ? 'query' : 'queries'} ahead`;
    return `${ahead}; expected to finish in ${expectedMs.toFixed(1)} ms (${spentMs > 0 ? `${spentMs.toFixed(1)} spent + ` : ''}${e.ahead + 0.5} × ${(e.drainMs ?? 0).toFixed(1)} ms of device time per query), past ${SHED_MARGIN} × its QoS target of ${qosTargetMs} ms`;
  }

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

