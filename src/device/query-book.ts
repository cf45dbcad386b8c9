/**
 * A device's book of queries: what it knows about every query between and during segments.
 * Shared by OrtDevice and SimDevice; validate.ts reads it through `QueryBookView`.
 *
 * Ownership: one book per device, owned and mutated only by that device. The book holds no
 * query state itself (tensors live in an executor or nowhere); it records where each query
 * stands, so that the device knows what to validate, what to answer and what to free.
 *
 * A query is in at most one of:
 * - `kept`: a segment of it stopped before the last operator and the device keeps its state
 *   (oldest first; at most `maxKept` — beyond that the oldest is evicted and becomes lost);
 * - `lost`: its state was lost (executor died, segment failed, evicted); its next resume gets
 *   an error result once (oldest first; at most `maxLost` — beyond that the oldest is forgotten,
 *   after which a resume is a "no kept state" BadRequestError);
 * - `inFlight`: a segment of it is running (queryId → service); when released meanwhile it is
 *   also marked released, and its result then keeps nothing.
 */
import type { KeptQuery, LostQuery, QueryBookView } from './validate.ts';

/** What a device must do for `releaseQuery` after the book dropped the query. */
export type ReleaseAction =
  /** The book did not know the query (nothing kept, lost or running). */
  | { readonly kind: 'unknown' }
  /** Free its kept state now in `service`'s executor (it was kept or lost there). */
  | { readonly kind: 'free'; readonly service: string }
  /** A segment of it is running: free whatever its result leaves (the book keeps nothing of it). */
  | { readonly kind: 'defer' };

/** A query evicted by `finishKept` beyond the kept cap (now lost): its state should be freed. */
export interface EvictedQuery {
  readonly queryId: string;
  readonly service: string;
}

export class QueryBook implements QueryBookView {
  private readonly keptMap = new Map<string, KeptQuery>();
  private readonly lostMap = new Map<string, LostQuery>();
  private readonly inFlightMap = new Map<string, string>();
  private readonly releasedInFlight = new Set<string>();

  /**
   * @param maxKept most queries whose state is kept (≥ 1); beyond it the oldest is evicted.
   * @param maxLost most queries remembered as lost (≥ 1); beyond it the oldest is forgotten.
   */
  constructor(
    readonly maxKept: number,
    readonly maxLost: number,
  ) {}

  /** Unfinished queries whose state the device keeps, oldest first. */
  get kept(): ReadonlyMap<string, KeptQuery> {
    return this.keptMap;
  }

  /** Queries whose state was lost, oldest first. */
  get lost(): ReadonlyMap<string, LostQuery> {
    return this.lostMap;
  }

  /** Queries with a segment running: queryId → service. */
  get inFlight(): ReadonlyMap<string, string> {
    return this.inFlightMap;
  }

  /** The service a query is kept, lost or running in; undefined when unknown. */
  ownerOf(queryId: string): string | undefined {
    return this.keptMap.get(queryId)?.service ?? this.lostMap.get(queryId)?.service ?? this.inFlightMap.get(queryId);
  }

  /**
   * A (validated) segment of a query starts: its kept or lost entry is dropped. For a resume of
   * a lost query that entry is returned — the segment must not run; the device answers it with
   * an error result and afterwards the query is unknown. Otherwise the query is now in flight.
   */
  beginSegment(queryId: string, service: string, resume: boolean): LostQuery | undefined {
    const lost = resume ? this.lostMap.get(queryId) : undefined;
    this.lostMap.delete(queryId);
    this.keptMap.delete(queryId);
    if (lost) return lost;
    this.inFlightMap.set(queryId, service);
    return undefined;
  }

  /**
   * A running segment finished ok before the last operator (its state is kept in its service).
   * Unless the query was released meanwhile, it is kept (as newest) and the oldest beyond
   * `maxKept` are evicted (marked lost); those are returned for the device to free.
   * @returns released: true when the caller released the query while it ran (nothing is kept;
   *   the device should free the state the segment left).
   */
  finishKept(queryId: string, k: KeptQuery): { readonly released: boolean; readonly evicted: readonly EvictedQuery[] } {
    if (this.settle(queryId)) return { released: true, evicted: [] };
    this.keptMap.set(queryId, k);
    const evicted: EvictedQuery[] = [];
    for (const [oldId, old] of this.keptMap) {
      if (this.keptMap.size <= this.maxKept) break;
      this.keptMap.delete(oldId);
      this.markLost(oldId, old.service, `evicted: more than maxKeptQueries ${this.maxKept} unfinished queries were kept; release queries that will not continue`);
      evicted.push({ queryId: oldId, service: old.service });
    }
    return { released: false, evicted };
  }

  /** A running segment reached the last operator: the query is forgotten. */
  finishDone(queryId: string): void {
    this.settle(queryId);
  }

  /**
   * A running segment failed. With a `lostReason` (its state is gone) the query is marked lost,
   * unless released meanwhile; without one it is forgotten.
   */
  finishFailed(queryId: string, service: string, lostReason?: string): void {
    const released = this.settle(queryId);
    if (lostReason !== undefined && !released) this.markLost(queryId, service, lostReason);
  }

  /**
   * The caller releases a query of `service`: its kept or lost entry is dropped; a running one
   * keeps nothing when its segment finishes.
   * @throws RangeError when the query belongs to another service (kept, lost or running there;
   *   the message names the owner) — nothing is dropped then.
   */
  release(service: string, queryId: string): ReleaseAction {
    const owner = this.ownerOf(queryId);
    if (owner !== undefined && owner !== service) {
      throw new RangeError(`releaseQuery: query '${queryId}' belongs to service '${owner}', not '${service}'; call releaseQuery('${owner}', '${queryId}')`);
    }
    this.keptMap.delete(queryId);
    this.lostMap.delete(queryId);
    if (this.inFlightMap.has(queryId)) {
      this.releasedInFlight.add(queryId);
      return { kind: 'defer' };
    }
    return owner === undefined ? { kind: 'unknown' } : { kind: 'free', service: owner };
  }

  /** Every query kept in `service` is lost (its executor died or restarted), with `reason`. */
  loseKept(service: string, reason: string): void {
    for (const [queryId, k] of this.keptMap) {
      if (k.service !== service) continue;
      this.keptMap.delete(queryId);
      this.markLost(queryId, service, reason);
    }
  }

  /** Forget everything (device closed). */
  clear(): void {
    this.keptMap.clear();
    this.lostMap.clear();
    this.inFlightMap.clear();
    this.releasedInFlight.clear();
  }

  /** No longer in flight; returns whether it was released meanwhile. */
  private settle(queryId: string): boolean {
    this.inFlightMap.delete(queryId);
    return this.releasedInFlight.delete(queryId);
  }

  /** Remember a lost query (re-inserted as newest); beyond maxLost forget the oldest. */
  private markLost(queryId: string, service: string, reason: string): void {
    this.lostMap.delete(queryId);
    this.lostMap.set(queryId, { service, reason });
    for (const oldId of this.lostMap.keys()) {
      if (this.lostMap.size <= this.maxLost) break;
      this.lostMap.delete(oldId);
    }
  }
}
