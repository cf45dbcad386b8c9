/**
 * What happens to a request shed on arrival by the admission gate (`admission.ts`; docs/overload.md
 * "Overload and admission"): it is counted (`abacus_requests_total{outcome="overloaded"}`, the
 * statistics extension's failures), shown to the dashboard's observers as a rejected query,
 * logged as a summary at most once per `SHED_LOG_INTERVAL_MS` per model (one line per request
 * would cost the event loop as much as the shedding saves), and answered with `shedError`.
 */
import type { Logger } from '../log.ts';
import type { RecordFeed } from '../runtime/feed.ts';
import { shedError, type AdmissionGate } from './admission.ts';
import type { AdmissionTicket, ServeError } from './inference.ts';
import type { ServeMetrics } from './metrics.ts';
import type { ModelStatsRecorder } from './stats.ts';

/** Where a shed request is counted, shown and logged. */
export interface ShedSinks {
  readonly gate: AdmissionGate;
  readonly metrics: ServeMetrics | undefined;
  readonly stats: ModelStatsRecorder;
  readonly feed: RecordFeed | undefined;
  readonly logger: Logger | undefined;
  /** A fresh id for the dashboard's record of a shed request. */
  nextId(): string;
}

/** The served model a request was shed for: its name and QoS target, ms. */
export interface ShedModel {
  readonly name: string;
  readonly qosTargetMs: number;
}

/**
 * A shed request as a rejected query record for the feed's observers (the dashboard counts it),
 * only while someone observes. Times on the runtime's clock, ms.
 */
export function feedShed(sinks: ShedSinks, m: ShedModel, arrivalMs: number, nowMs: number, qosTargetMs: number, batch: number, why: string): void {
  if (sinks.feed?.watched !== true) return;
  sinks.feed.query({ id: `shed-${sinks.nextId()}`, service: m.name, arrivalMs, batch, seqLen: 0, qosTargetMs, groups: [], outcome: 'rejected', reason: 'overloaded', detail: `shed: ${why}`, endMs: nowMs });
}

/**
 * Count, show and log a request shed at `nowMs` before it was read, of model `m`, or of a model
 * not known yet (gRPC: before the message naming it was read; counted as model `unknown`).
 * @param why the gate's reason (`AdmissionGate.shedReason` / `shedReasonForAll`)
 * @param unread what had not been done yet: `body` (HTTP: its body was not read), `message`
 *   (gRPC: its message was not read) or `tensors` (gRPC: its message was read, not decoded)
 * @param arrivalMs when it arrived, when before `nowMs` (gRPC: its metadata) [nowMs]
 * @returns the `overloaded` error to answer with (no stack trace, `shedError`), its `retryInMs`
 *   the gate's device time per query.
 */
export function shedOnArrival(sinks: ShedSinks, m: ShedModel | undefined, nowMs: number, why: string, unread: 'body' | 'message' | 'tensors', arrivalMs = nowMs): ServeError {
  const name = m?.name ?? 'unknown';
  sinks.metrics?.request(name, 'overloaded');
  if (m !== undefined) {
    sinks.stats.fail(m.name, Math.max(0, nowMs - arrivalMs), undefined);
    feedShed(sinks, m, arrivalMs, nowMs, m.qosTargetMs, 1, why);
  }
  const summary = sinks.gate.countShed(name, nowMs);
  if (summary !== undefined) sinks.logger?.warn({ model: name, shed: summary.shed, windowMs: Math.round(summary.windowMs) }, `shedding requests before ${unread === 'message' ? 'reading them' : 'decoding'}: ${why}`);
  const what = unread === 'tensors' ? 'its tensors were decoded' : `its ${unread} was read`;
  return shedError(`overloaded: ${m === undefined ? 'every model' : `model '${m.name}'`}: ${why}; shed before ${what} (retry later or on another replica)`, sinks.gate.drainMs());
}

/**
 * Admit or shed a request of model `m` at `nowMs` (`InferenceBackend.admit`).
 * @param judged false while the model is not READY (or the server closes): admitted, `infer` answers it
 * @param unread what was not read yet; only `body` (the HTTP front end, before it reads the body,
 *   where resends are paced) is judged against the learned budget (`AdmissionGate.shedReason`)
 * @param arrival its earlier ticket (gRPC: from its metadata): it is judged with the time spent
 *   since, and that ticket is settled (it counted as work ahead of others, not of itself)
 * @returns the new ticket, with the arrival of `arrival` when given
 * @throws ServeError overloaded when it is shed (`shedOnArrival`).
 */
export function admitOnArrival(sinks: ShedSinks, m: ShedModel, nowMs: number, judged: boolean, arrival: AdmissionTicket | undefined, unread: 'body' | 'message' | 'tensors' | undefined): AdmissionTicket {
  const receivedMs = arrival?.receivedMs ?? nowMs;
  arrival?.settle();
  // the learned budget only where resends are paced: HTTP before the body is read, which says so
  // (a gRPC stream message comes without `unread` and without an arrival ticket)
  const why = judged ? sinks.gate.shedReason(m.name, m.qosTargetMs, Math.max(0, nowMs - receivedMs), nowMs, unread === 'body') : undefined;
  if (why === undefined) return sinks.gate.ticket(receivedMs);
  throw shedOnArrival(sinks, m, nowMs, why, unread ?? (arrival === undefined ? 'body' : 'tensors'), receivedMs);
}
