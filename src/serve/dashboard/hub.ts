/**
 * The server side of the live dashboard: it observes the runtime's records (`RecordFeed`) while
 * at least one page is connected, keeps a bounded history, and sends each connected page one
 * `update` (`protocol.ts`) per flush period.
 *
 * ## Bounds
 * - Cost with no page open: none — the hub is not subscribed to the feed and runs no timer.
 * - Memory: rings of the last `keepGroups` groups, `keepRejections` rejections and, per
 *   service, `keepOutcomes` query outcomes (for the sliding-window statistics); a page holds no
 *   queue of its own, only how far it has been sent.
 * - Rate: one update per `flushMs` (250 ms) per page, with at most `maxGroupsPerUpdate` groups
 *   and as many rejections (the newest; the rest is counted in `skippedGroups`).
 * - CPU: the window statistics (a sort of the window's latencies per service) and the
 *   predictor's error are recomputed at most every `statsEveryMs` (1 s); an update between
 *   two reuses them with fresh queue depths.
 * - Slow pages: while a page's connection holds more than `maxBufferedBytes` unsent bytes it is
 *   skipped (it gets the newest groups, and the count it missed, once it catches up); one backed
 *   up for longer than `dropAfterMs` is disconnected.
 *
 * Statistics per service (`DashboardServiceStats`) are over the queries that ended in the last
 * `windowMs` of the runtime clock: p99 of the completed queries' latency (nearest rank), and the
 * violation ratio (late + rejected) ÷ ended (docs/scheduling-runtime.md vocabulary; cancelled queries count in
 * neither). The predictor's error is the online refinement's rolling MAPE when the controller
 * refines, else the mean |predicted − measured| ÷ measured of the kept groups that were predicted.
 */
import type { Logger } from '../../log.ts';
import type { FeedEvent, RecordFeed } from '../../runtime/feed.ts';
import type { GroupRecord, QueryRecord } from '../../runtime/records.ts';
import type { FallbackStatus } from '../../schedule/fallback.ts';
import type { RefinementStatus } from '../../schedule/controller.ts';
import type { DashboardGroup, DashboardHello, DashboardPredictor, DashboardRejection, DashboardService, DashboardServiceStats, DashboardUpdate } from './protocol.ts';

/** What the hub reads from the server besides the feed (`RuntimeBackend` has all of it). */
export interface DashboardSource {
  /** Served services in configuration order. */
  servedModels(): readonly DashboardService[];
  /** Queries waiting in a service's queue now. */
  queueLength(service: string): number;
  /** The online refinement, while the controller refines its predictor. */
  readonly refinement: RefinementStatus | undefined;
  /** abacus's calibration fallback, when the controller has one. */
  readonly fallback?: FallbackStatus | undefined;
  /** The runtime clock now, ms; undefined before it runs. */
  clockNowMs(): number | undefined;
  /** Serving (false while warming up and shutting down). */
  isReady(): boolean;
}

/** Where one page's events go (an HTTP response in `routes.ts`; an array in tests). */
export interface DashboardSink {
  /** Send one SSE event (`event` name, JSON `data`). */
  send(event: 'hello' | 'update' | 'bye', data: string): void;
  /** Bytes written but not yet flushed to the client. */
  bufferedBytes(): number;
  /** Close the connection. */
  end(): void;
}

export interface DashboardHubOptions {
  readonly feed: RecordFeed;
  readonly source: DashboardSource;
  readonly logger?: Logger;
  /** Period of updates, wall ms [250]. */
  readonly flushMs?: number;
  /** The window statistics and predictor error are recomputed at most this often, wall ms [1000] (queue depths: every update). */
  readonly statsEveryMs?: number;
  /** Sliding window of the statistics, runtime-clock ms [10 000]. */
  readonly windowMs?: number;
  /** Groups kept (and sent to a page that connects) [600]. */
  readonly keepGroups?: number;
  /** Rejections kept [200]. */
  readonly keepRejections?: number;
  /** Query outcomes kept per service for the window statistics [8192]. */
  readonly keepOutcomes?: number;
  /** Most groups (and rejections) in one update [200]. */
  readonly maxGroupsPerUpdate?: number;
  /** A page with more unsent bytes than this is skipped [1 MiB]. */
  readonly maxBufferedBytes?: number;
  /** A page skipped for longer than this is disconnected, wall ms [10 000]. */
  readonly dropAfterMs?: number;
  /** `replay`: a simulation replayed at `speed` × wall pace (`replay.ts`, which is then the source) [live, 1]. */
  readonly mode?: 'live' | 'replay';
  readonly speed?: number;
  /** Called after a page connected (and got its history), with the number of pages now. */
  readonly onPage?: (pages: number) => void;
}

/** A fixed-capacity ring; items carry their sequence number (1-based, increasing). */
class Ring<T> {
  private readonly items: (T | undefined)[];
  /** Sequence number of the newest item (0: none yet). */
  seq = 0;

  constructor(readonly capacity: number) {
    this.items = new Array<T | undefined>(capacity);
  }

  push(item: T): void {
    this.seq++;
    this.items[this.seq % this.capacity] = item;
  }

  /** Oldest sequence number still held. */
  get first(): number {
    return Math.max(1, this.seq - this.capacity + 1);
  }

  /** Items with sequence numbers in (after, seq], oldest first, at most `max` (the newest). */
  since(after: number, max: number): { items: T[]; skipped: number } {
    const from = Math.max(after + 1, this.first, this.seq - max + 1);
    const items: T[] = [];
    for (let s = from; s <= this.seq; s++) items.push(this.items[s % this.capacity]!);
    return { items, skipped: Math.max(0, from - after - 1) };
  }

  /** Call `f` on every item held, oldest first. */
  forEach(f: (item: T) => void): void {
    for (let s = this.first; s <= this.seq; s++) f(this.items[s % this.capacity]!);
  }
}

interface Outcome {
  readonly endMs: number;
  /** Latency of a completed query, ms; undefined: rejected. */
  readonly latencyMs: number | undefined;
  readonly late: boolean;
}

interface Page {
  readonly sink: DashboardSink;
  sentGroups: number;
  sentRejections: number;
  /** Wall ms since which it has been backed up; undefined while it keeps up. */
  backedUpSince: number | undefined;
}

const DEFAULTS = { flushMs: 250, statsEveryMs: 1000, windowMs: 10_000, keepGroups: 600, keepRejections: 200, keepOutcomes: 8192, maxGroupsPerUpdate: 200, maxBufferedBytes: 1 << 20, dropAfterMs: 10_000 };

/** Nearest-rank percentile `p` ∈ (0, 1] of `xs` (sorted in place, numerically); undefined when empty. */
export function nearestRank(xs: number[] | Float64Array, p: number): number | undefined {
  if (xs.length === 0) return undefined;
  if (xs instanceof Float64Array) xs.sort();
  else xs.sort((a, b) => a - b);
  return xs[Math.min(xs.length - 1, Math.max(0, Math.ceil(p * xs.length) - 1))];
}

export class DashboardHub {
  private readonly feed: RecordFeed;
  private readonly source: DashboardSource;
  private readonly logger: Logger | undefined;
  private readonly o: typeof DEFAULTS;
  private readonly mode: 'live' | 'replay';
  private readonly speed: number;
  private readonly onPage: ((pages: number) => void) | undefined;
  private readonly groups: Ring<DashboardGroup>;
  private readonly rejections: Ring<DashboardRejection>;
  private readonly outcomes = new Map<string, Ring<Outcome>>();
  private readonly pages = new Set<Page>();
  private unsubscribe: (() => void) | undefined;
  private timer: NodeJS.Timeout | undefined;
  private lastEventMs: number | undefined;
  private finished = false;
  /** Latencies of one service's window, for its p99 (reused by every flush). */
  private scratch: Float64Array | undefined;
  /** The last window statistics, and when (wall ms) they were computed. */
  private cached: { atWallMs: number; services: DashboardServiceStats[]; predictor: DashboardPredictor } | undefined;
  private closed = false;

  /** @throws RangeError for a non-positive or non-integer bound. */
  constructor(options: DashboardHubOptions) {
    this.feed = options.feed;
    this.source = options.source;
    this.logger = options.logger;
    this.o = { ...DEFAULTS };
    for (const key of Object.keys(DEFAULTS) as (keyof typeof DEFAULTS)[]) {
      const v = options[key];
      if (v === undefined) continue;
      if (!(Number.isInteger(v) && v > 0)) throw new RangeError(`DashboardHub: ${key} must be an integer > 0, got ${v}`);
      this.o[key] = v;
    }
    this.mode = options.mode ?? 'live';
    this.speed = options.speed ?? 1;
    this.onPage = options.onPage;
    if (!(this.speed > 0)) throw new RangeError(`DashboardHub: speed must be > 0, got ${this.speed}`);
    this.groups = new Ring(this.o.keepGroups);
    this.rejections = new Ring(this.o.keepRejections);
  }

  /** Pages connected now. */
  get pageCount(): number {
    return this.pages.size;
  }

  /** Whether the hub observes the feed (only while a page is connected). */
  get observing(): boolean {
    return this.unsubscribe !== undefined;
  }

  /**
   * Connect a page: it gets `hello`, then an update with the kept history, then one per flush.
   * Returns the function that disconnects it (call it when the client goes).
   */
  attach(sink: DashboardSink): () => void {
    if (this.closed) {
      sink.send('bye', JSON.stringify({ reason: 'the server is shutting down' }));
      sink.end();
      return () => undefined;
    }
    const history = Math.min(this.o.maxGroupsPerUpdate, this.o.keepGroups);
    const page: Page = { sink, sentGroups: Math.max(0, this.groups.seq - history), sentRejections: Math.max(0, this.rejections.seq - this.o.maxGroupsPerUpdate), backedUpSince: undefined };
    this.pages.add(page);
    const hello: DashboardHello = { mode: this.mode, speed: this.speed, services: this.source.servedModels(), windowMs: this.o.windowMs, flushMs: this.o.flushMs };
    sink.send('hello', JSON.stringify(hello));
    this.sendUpdate(page, this.stats());
    this.unsubscribe ??= this.feed.subscribe((e) => this.observe(e));
    this.timer ??= setInterval(() => this.send(false), this.o.flushMs);
    this.onPage?.(this.pages.size);
    return () => this.detach(page);
  }

  /**
   * Feed one event directly (a replay drives the hub this way without a `RecordFeed` producer);
   * the feed's observer calls the same.
   */
  observe(e: FeedEvent): void {
    if (e.kind === 'group') this.addGroup(e.record, e.endMs);
    else this.addQuery(e.record);
  }

  /** A replay reached its end: pages are told (`status: done`) and keep what they have. */
  finish(): void {
    this.finished = true;
    this.flush();
  }

  /** Say `bye` to every page and close their streams; no page can connect afterwards. Idempotent. */
  close(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    if (this.pages.size > 0) this.flush();
    for (const page of [...this.pages]) {
      page.sink.send('bye', JSON.stringify({ reason }));
      page.sink.end();
      this.detach(page);
    }
  }

  /** Send every page its update now, with fresh statistics (the timer sends one every `flushMs`). */
  flush(): void {
    this.send(true);
  }

  private send(freshStats: boolean): void {
    if (this.pages.size === 0) return;
    const stats = this.stats(freshStats);
    const wallNow = Date.now();
    for (const page of [...this.pages]) {
      if (page.sink.bufferedBytes() > this.o.maxBufferedBytes) {
        page.backedUpSince ??= wallNow;
        if (wallNow - page.backedUpSince > this.o.dropAfterMs) {
          this.logger?.info({ bufferedBytes: page.sink.bufferedBytes() }, 'dashboard page too slow: disconnected');
          page.sink.end();
          this.detach(page);
        }
        continue;
      }
      page.backedUpSince = undefined;
      this.sendUpdate(page, stats);
    }
  }

  private detach(page: Page): void {
    if (!this.pages.delete(page)) return;
    if (this.pages.size > 0) return;
    this.unsubscribe?.();
    this.unsubscribe = undefined;
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
  }

  private sendUpdate(page: Page, stats: Pick<DashboardUpdate, 'nowMs' | 'status' | 'services' | 'predictor'>): void {
    const g = this.groups.since(page.sentGroups, this.o.maxGroupsPerUpdate);
    const r = this.rejections.since(page.sentRejections, this.o.maxGroupsPerUpdate);
    page.sentGroups = this.groups.seq;
    page.sentRejections = this.rejections.seq;
    const update: DashboardUpdate = { ...stats, groups: g.items, skippedGroups: g.skipped, rejections: r.items };
    page.sink.send('update', JSON.stringify(update));
  }

  private addGroup(record: GroupRecord, endMs: number): void {
    this.lastEventMs = endMs;
    const measured = Number.isFinite(record.measuredMs) ? record.measuredMs : null;
    this.groups.push({
      index: record.index,
      launchMs: record.launchMs,
      measuredMs: measured,
      predictedMs: record.predictedMs === undefined || !Number.isFinite(record.predictedMs) ? null : record.predictedMs,
      segments: record.segments.map((s) => ({ queryId: s.queryId, service: s.service, start: s.start, end: s.end, batch: s.batch, members: s.members?.length ?? 1 })),
    });
  }

  private addQuery(q: QueryRecord): void {
    if (q.endMs === undefined || q.outcome === 'pending' || q.reason === 'cancelled') return;
    this.lastEventMs = q.endMs;
    let ring = this.outcomes.get(q.service);
    if (ring === undefined) this.outcomes.set(q.service, (ring = new Ring(this.o.keepOutcomes)));
    const latencyMs = q.endMs - q.arrivalMs;
    if (q.outcome === 'completed') ring.push({ endMs: q.endMs, latencyMs, late: latencyMs > q.qosTargetMs });
    else {
      ring.push({ endMs: q.endMs, latencyMs: undefined, late: false });
      this.rejections.push({ queryId: q.id, service: q.service, reason: q.reason ?? 'unknown', detail: q.detail ?? '', atMs: q.endMs, waitedMs: latencyMs });
    }
  }

  /**
   * The update's statistics. Queue depths, time and status are read fresh; the window statistics
   * and the predictor's error are recomputed when `fresh`, else at most every `statsEveryMs`
   * (they move slowly: a 10-second window; this keeps the hub's cost per update to the groups).
   */
  private stats(fresh = true): Pick<DashboardUpdate, 'nowMs' | 'status' | 'services' | 'predictor'> {
    const nowMs = this.source.clockNowMs() ?? this.lastEventMs ?? null;
    const status: DashboardUpdate['status'] = this.finished ? 'done' : this.closed ? 'closing' : this.source.isReady() ? 'ready' : 'not_ready';
    const wallNow = Date.now();
    if (fresh || this.cached === undefined || wallNow - this.cached.atWallMs >= this.o.statsEveryMs) this.cached = { atWallMs: wallNow, ...this.windowStats(nowMs) };
    const { services, predictor } = this.cached;
    return { nowMs, status, services: services.map((s) => ({ ...s, queueDepth: this.source.queueLength(s.service) })), predictor };
  }

  private windowStats(nowMs: number | null): { services: DashboardServiceStats[]; predictor: DashboardPredictor } {
    this.scratch ??= new Float64Array(this.o.keepOutcomes);
    const scratch = this.scratch;
    const services: DashboardServiceStats[] = this.source.servedModels().map((s) => {
      let completed = 0;
      let ended = 0;
      let late = 0;
      let rejected = 0;
      const from = (nowMs ?? Infinity) - this.o.windowMs;
      this.outcomes.get(s.name)?.forEach((o) => {
        if (o.endMs < from) return;
        ended++;
        if (o.latencyMs === undefined) rejected++;
        else {
          scratch[completed++] = o.latencyMs;
          if (o.late) late++;
        }
      });
      return {
        service: s.name,
        qosTargetMs: s.qosTargetMs,
        ended,
        completed,
        late,
        rejected,
        p99Ms: nearestRank(scratch.subarray(0, completed), 0.99) ?? null,
        violationRatio: ended === 0 ? null : (late + rejected) / ended,
        queueDepth: 0,
      };
    });
    return { services, predictor: this.predictor() };
  }

  private predictor(): DashboardPredictor {
    const r = this.source.refinement;
    const f = this.source.fallback;
    const fallback = f === undefined ? {} : { fallbackActive: f.active };
    if (r !== undefined) return { source: 'refinement', rollingMapePct: r.observedGroups === 0 ? null : r.rollingMape * 100, groups: r.observedGroups, guardActive: r.guardActive, guardFactor: r.guardFactor, ...fallback };
    let n = 0;
    let sum = 0;
    this.groups.forEach((g) => {
      if (g.predictedMs === null || g.measuredMs === null || !(g.measuredMs > 0)) return;
      n++;
      sum += Math.abs(g.predictedMs - g.measuredMs) / g.measuredMs;
    });
    return n === 0 ? { source: null, rollingMapePct: null, groups: 0, ...fallback } : { source: 'records', rollingMapePct: (sum / n) * 100, groups: n, ...fallback };
  }
}
