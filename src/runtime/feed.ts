/**
 * A feed of the runtime's records to observers (the live dashboard, `serve/dashboard/`): every
 * operator group as it ends and every query as it ends (completed or rejected, with its reason).
 *
 * It is the runtime's records (docs/design.md#records) as a stream: the producer (`RuntimeBackend`, or a simulation
 * driver) calls `group` / `query` from the runtime's `onGroupEnd` / `onQueryEnd` hooks; observers
 * `subscribe`. Cost when no one subscribes: one `Set.size` read per call — nothing is copied,
 * allocated or queued (`bench/dashboard.ts` measures the serving throughput with and without an
 * observer). Observers are called synchronously on the runtime's path, so they must only copy
 * what they need and return; an observer that throws is removed (and the error handed to
 * `onObserverError`), never propagated into the runtime.
 *
 * Deliberately left out: buffering, rate limiting and history — the observer's business (the
 * dashboard hub keeps a bounded ring).
 */
import type { GroupRecord, QueryRecord } from './records.ts';

/** One record as the feed passes it on. `endMs`: the clock time the group ended, ms. */
export type FeedEvent = { readonly kind: 'group'; readonly record: GroupRecord; readonly endMs: number } | { readonly kind: 'query'; readonly record: QueryRecord };

export type FeedObserver = (event: FeedEvent) => void;

export class RecordFeed {
  private readonly observers = new Set<FeedObserver>();
  private readonly onObserverError: ((err: unknown) => void) | undefined;

  /** @param onObserverError called with what a removed observer threw (e.g. to log it). */
  constructor(onObserverError?: (err: unknown) => void) {
    this.onObserverError = onObserverError;
  }

  /** Whether anyone observes (producers may skip work when not). */
  get watched(): boolean {
    return this.observers.size > 0;
  }

  /** Add an observer; returns the function that removes it (idempotent). */
  subscribe(observer: FeedObserver): () => void {
    this.observers.add(observer);
    return () => {
      this.observers.delete(observer);
    };
  }

  /** A group ended at `endMs` (clock ms). */
  group(record: GroupRecord, endMs: number): void {
    if (this.observers.size === 0) return;
    this.emit({ kind: 'group', record, endMs });
  }

  /** A query ended (`record.outcome` is `completed` or `rejected`). */
  query(record: QueryRecord): void {
    if (this.observers.size === 0) return;
    this.emit({ kind: 'query', record });
  }

  private emit(event: FeedEvent): void {
    for (const o of this.observers) {
      try {
        o(event);
      } catch (err) {
        this.observers.delete(o);
        this.onObserverError?.(err);
      }
    }
  }
}
