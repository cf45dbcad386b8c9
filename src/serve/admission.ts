/**
 * Admission before the work is done: shed a request that cannot finish within its QoS target
 * as soon as its model is known, before its body is read or decoded (docs/overload.md
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
 * - `drainMs`: the device time per completed query = the time the device had a group running ÷
 *   the queries completed, both as exponentially decaying sums (time constant
 *   `DRAIN_WINDOW_MS`). It is 1 ÷ the throughput at saturation, with the gains of overlap and
 *   dynamic batching in it, and the device time of queries rejected part-way (wasted work) too.
 *   It is learned at any load: a gate that learned only while a backlog existed would stop
 *   learning once it shed everything behind the query running.
 * - `runMs[service]`: the service's time from a query's first launch to its completion
 *   (weighted mean, `RUN_WEIGHT`): what a query takes once the device starts it, batched or
 *   overlapped with others.
 *
 * A request for `service` that finds `ahead` queries waiting or running (all services), or
 * admitted and still being read or decoded by a front end (`ticket`), is expected to finish after
 * `spentMs + ahead × drainMs + runMs[service]`: the queue ahead drains at the measured rate, then
 * it runs (`spentMs`: what it already spent since it arrived). It is shed when that passes its
 * QoS target, or, where the caller asks (`shedReason`'s `budgeted`: HTTP before the body is
 * read), its QoS target × the gate's budget, a share in [`MIN_BUDGET`, 1] learned from the outcomes of the
 * queries it admitted: each one late (or dropped by the controller) lowers it, each one on time
 * raises it a little, so that about `LATE_TARGET` of them end late (the estimate is a mean; the
 * target is a tail). Nothing is shed while nothing is ahead (the device would take it next) or
 * before `MIN_SAMPLES` completions (of any service; `runMs` of a service with none yet is 0: a
 * gate that waited for one would admit every request of a service whose queries were all
 * dropped). Which of the queued queries still misses is the controller's call, with the
 * predictor, when it decides each group (`qos_violation`, on time).
 *
 * The budget sheds at a queue where closed-loop clients would spin on 503s (with 4 requests in
 * flight, at 3 ahead); it became worth having once the HTTP front end paced such clients
 * (`http/shed-pacing.ts`). Measured on this CPU (`examples/serve-demo.yaml`, four rounds
 * alternated with the gate without it, both paced, load 1.5–3.2; docs/overload.md "A learned
 * budget, over HTTP"): goodput at 10× the capacity 58.2 against 47.6 queries/s within QoS on
 * average over HTTP JSON, 49.2 against 48.7 over HTTP binary, and the p99 of the answers
 * 1.13–1.83× the targets against 1.57–2.25×.
 *
 * Measured on this CPU (`examples/serve-demo.yaml`, HTTP binary, 2× the capacity; docs/overload.md
 * "Overload and admission"): against `(ahead + ½) × drainMs` (its own run counted as one drain),
 * this formula cut the admitted requests answered late or dropped from 35 % to 14 % and raised
 * goodput from 0.64 to 0.74 of capacity: a batched or overlapped query runs several drains long.
 * Shedding only past 1.5 × the target let the queue hold queries that then finished late
 * (0.56); a worst-case bound (`(ahead + 1) × run`) made closed-loop clients spin on 503s (four
 * in flight kept a sixth of the goodput of one).
 */

import { ServeError, type AdmissionTicket } from './inference.ts';

/** Shortest time between two log lines about shed requests of one model, ms (one line per request would cost the loop as much as the shedding). */
export const SHED_LOG_INTERVAL_MS = 10_000;

/** Time constant of the decaying sums behind `drainMs`, ms: about the last second of work counts. */
export const DRAIN_WINDOW_MS = 1000;

/** Weight of a new completion in `runMs[service]` (about the last ten count). */
export const RUN_WEIGHT = 0.1;

/**
 * How long a request still being read or decoded by a front end counts as work ahead, ms. A
 * stalled or slow client (an HTTP body trickling in, a gRPC call whose message never comes)
 * would otherwise hold its place ahead of every later arrival and make the gate shed them; a
 * request this late is itself shed when it arrives, its QoS target spent.
 */
export const FRONT_END_AHEAD_MS = 1000;

/** Completions needed before anything is shed (the sums settle first). */
export const MIN_SAMPLES = 5;

/**
 * The share of admitted queries the gate lets finish late or be dropped by the controller: its
 * budget (below) settles where this share of their outcomes is late, so that the p99 of the
 * answered requests stays within their targets.
 */
export const LATE_TARGET = 0.01;

/** How much one late outcome shrinks the budget; an on-time one grows it by this × LATE_TARGET / (1 − LATE_TARGET). */
export const BUDGET_STEP = 0.02;

/** The smallest budget: the gate never sheds a request expected within half its QoS target. */
export const MIN_BUDGET = 0.5;

/** What the gate measures and decides. */
export interface AdmissionEstimate {
  /** Queries of all services waiting or running, plus admitted ones not yet queued, when it was asked. */
  readonly ahead: number;
  /** Expected time from arrival to completion, ms; undefined while too few completions were measured. */
  readonly finishMs: number | undefined;
  /** Device time per completed query, ms (undefined with `finishMs`). */
  readonly drainMs?: number;
  /** The service's first launch → completion, ms (undefined with `finishMs`). */
  readonly runMs?: number;
}

/** Where the gate reads the queues. */
export interface AdmissionQueues {
  /** Queries of every service waiting or running now. */
  pendingQueries(): number;
}

/**
 * The measurements and the shedding decision of the file docs, for one serving backend. It
 * keeps no reference to requests: the backend reports groups and completions, front ends hold
 * tickets. All times are on the runtime's clock, ms.
 */
export class AdmissionGate {
  /** Admitted requests still read or decoded by a front end (not yet queued), by arrival: work ahead of later arrivals. */
  private readonly inFrontEnd = new Set<{ readonly receivedMs: number }>();
  /** The latest time the gate was told of (arrivals judged or admitted, group ends, completions), ms. */
  private latestMs = Number.NEGATIVE_INFINITY;
  /** Decaying sums of busy device time (ms) and completed queries, as of `sumsAtMs`. */
  private busyMs = 0;
  private completions = 0;
  private sumsAtMs = 0;
  private total = 0;
  /** End of the latest group interval counted as busy, ms (groups that overlap in time count once). */
  private busyUntilMs = Number.NEGATIVE_INFINITY;
  /** `runMs[service]` (file docs). */
  private readonly runMs = new Map<string, number>();
  /** Per service, the share of its QoS target a request may be expected to take and still be admitted (file docs); 1 until an outcome. */
  private readonly budgets = new Map<string, number>();
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
    this.latestMs = Math.max(this.latestMs, endMs);
    const from = Math.max(launchMs, this.busyUntilMs);
    this.decayTo(endMs);
    if (endMs > from) this.busyMs += endMs - from;
    this.busyUntilMs = Math.max(this.busyUntilMs, endMs);
  }

  /**
   * One query of `service` completed (its outputs delivered) at `endMs`, `runMs` after its first
   * group launched (clock ms).
   */
  completed(service: string, endMs: number, runMs: number, late = false): void {
    this.outcome(service, late);
    this.latestMs = Math.max(this.latestMs, endMs);
    this.decayTo(endMs);
    this.completions++;
    this.total++;
    const prev = this.runMs.get(service);
    this.runMs.set(service, prev === undefined ? runMs : prev + RUN_WEIGHT * (runMs - prev));
  }

  /**
   * An admitted query of `service` ended on time or not (late, or dropped by the controller as
   * hopeless): the service's budget moves by `BUDGET_STEP` down for a late one and by a
   * `LATE_TARGET`-weighted step up for one on time, so it settles where `LATE_TARGET` of the
   * outcomes are late (a stochastic approximation of that quantile, as in Robbins–Monro), within
   * [`MIN_BUDGET`, 1]. Per service: one whose queries all miss (a target the device cannot meet
   * under the load) must not make the gate shed the others early (on `examples/serve-sim4.yaml`
   * the controller drops every vgg19 query under overload; with one budget for all, HTTP JSON at
   * 2× kept 0.50 of the capacity with the device busy 17 % of the time, against 0.79 and 52 %).
   */
  outcome(service: string, late: boolean): void {
    const share = this.budget(service);
    const next = late ? share - BUDGET_STEP : share + (BUDGET_STEP * LATE_TARGET) / (1 - LATE_TARGET);
    this.budgets.set(service, Math.min(1, Math.max(MIN_BUDGET, next)));
  }

  /** The share of its QoS target a request of `service` may be expected to take and be admitted, in [`MIN_BUDGET`, 1]. */
  budget(service: string): number {
    return this.budgets.get(service) ?? 1;
  }

  /** A ticket for a request admitted at `receivedMs`: it counts as ahead of later arrivals until settled, or for `FRONT_END_AHEAD_MS` (`AdmissionTicket`). */
  ticket(receivedMs: number): AdmissionTicket {
    this.latestMs = Math.max(this.latestMs, receivedMs);
    const entry = { receivedMs };
    this.inFrontEnd.add(entry);
    return { receivedMs, settle: () => void this.inFrontEnd.delete(entry) };
  }

  /** Requests in the front ends that count as ahead now (younger than `FRONT_END_AHEAD_MS`); older ones are let go. */
  private frontEndAhead(): number {
    const since = this.latestMs - FRONT_END_AHEAD_MS;
    let n = 0;
    for (const entry of this.inFrontEnd) {
      if (entry.receivedMs >= since) n++;
      else this.inFrontEnd.delete(entry);
    }
    return n;
  }

  /**
   * The gate's clock moves on to `nowMs` (an arrival being judged): requests in the front ends
   * older than `FRONT_END_AHEAD_MS` stop counting as ahead even while every arrival is shed (a
   * shed arrival takes no ticket; without this the gate would judge on the time of the last
   * admitted one, and a few stalled requests would keep everyone shed for good).
   */
  private advanceTo(nowMs: number | undefined): void {
    if (nowMs !== undefined && nowMs > this.latestMs) this.latestMs = nowMs;
  }

  /** The device time per completed query, ms (`drainMs` of the file docs); undefined before `MIN_SAMPLES` completions. */
  drainMs(): number | undefined {
    return this.total < MIN_SAMPLES || !(this.completions > 0) ? undefined : this.busyMs / this.completions;
  }

  /** The expected finish of a request of `service` arriving now, at `nowMs` when given (see the file docs). */
  estimate(service: string, nowMs?: number): AdmissionEstimate {
    this.advanceTo(nowMs);
    return this.estimateBehind(service, this.queues.pendingQueries() + this.frontEndAhead());
  }

  /** `estimate` with the queries ahead already counted (one count for several services). */
  private estimateBehind(service: string, ahead: number): AdmissionEstimate {
    const drainMs = this.drainMs();
    if (drainMs === undefined) return { ahead, finishMs: undefined };
    // a service none of whose queries completed yet (under overload from the start the controller
    // may drop every one): the queue ahead alone, which still bounds its wait
    const runMs = this.runMs.get(service) ?? 0;
    return { ahead, finishMs: ahead * drainMs + runMs, drainMs, runMs };
  }

  /**
   * Why a request of `service` with `qosTargetMs` that already spent `spentMs` should be shed at
   * `nowMs` (the front end's clock: pass it), or undefined to admit it.
   * @param budgeted judge against the QoS target × the learned budget (`budget`) instead of the
   *   target: only where a client that resends at once is paced (`http/shed-pacing.ts`, the HTTP
   *   front end's check before the body is read); elsewhere such clients would spin on the
   *   earlier sheds (gRPC, 4 calls in flight on serve-demo: 21 answers within QoS per second
   *   with the budget against 48 without).
   */
  shedReason(service: string, qosTargetMs: number, spentMs: number, nowMs?: number, budgeted = false): string | undefined {
    const e = this.estimate(service, nowMs);
    if (e.ahead === 0 || e.finishMs === undefined) return undefined;
    const expectedMs = Math.max(0, spentMs) + e.finishMs;
    const share = budgeted ? this.budget(service) : 1;
    if (expectedMs <= share * qosTargetMs) return undefined;
    const ahead = `${e.ahead} ${e.ahead === 1 ? 'query' : 'queries'} ahead`;
    const past = share < 1 ? `past ${(100 * share).toFixed(0)} % of its QoS target of ${qosTargetMs} ms (the share that kept admitted queries on time)` : `past its QoS target of ${qosTargetMs} ms`;
    return `${ahead}; expected to finish in ${expectedMs.toFixed(1)} ms (${spentMs > 0 ? `${spentMs.toFixed(1)} spent + ` : ''}${e.ahead} × ${(e.drainMs ?? 0).toFixed(1)} ms of device time per query + ${(e.runMs ?? 0).toFixed(1)} ms to run), ${past}`;
  }

  /**
   * Why a request of a model not known yet (gRPC: its message, which names the model, is not
   * read yet) should be shed: when a request of every one of `models` (with its QoS target, ms)
   * would be shed now (`shedReason` with nothing spent, against the plain targets: gRPC calls
   * are not paced), the reason of the one closest to
   * making it; undefined as soon as one of them would be admitted, or for no models. `nowMs`:
   * the front end's clock (pass it, as to `shedReason`).
   */
  shedReasonForAll(models: readonly { readonly name: string; readonly qosTargetMs: number }[], nowMs?: number): string | undefined {
    this.advanceTo(nowMs);
    let closest: { readonly name: string; readonly qosTargetMs: number } | undefined;
    let closestOverMs = Number.POSITIVE_INFINITY;
    const ahead = this.queues.pendingQueries() + this.frontEndAhead();
    for (const m of models) {
      const e = this.estimateBehind(m.name, ahead);
      if (e.ahead === 0 || e.finishMs === undefined || e.finishMs <= m.qosTargetMs) return undefined;
      if (e.finishMs - m.qosTargetMs < closestOverMs) {
        closest = m;
        closestOverMs = e.finishMs - m.qosTargetMs;
      }
    }
    return closest === undefined ? undefined : this.shedReason(closest.name, closest.qosTargetMs, 0, nowMs);
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
 * to the client as a status and a message only, with `retryInMs` when given (`ServeError.retryInMs`).
 */
export function shedError(message: string, retryInMs?: number): ServeError {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    return new ServeError('overloaded', message, retryInMs === undefined ? undefined : { retryInMs });
  } finally {
    Error.stackTraceLimit = limit;
  }
}

