/**
 * The runtime's query book (docs/design.md#runtime): every pending query, the units it runs in,
 * the served services' queues, and how each query ends.
 *
 * Owns: the services and their queues (`ServiceState`), pending queries by id (`Pending`), the
 * units not ended by unit id (`Unit`), the query records (when kept), the submitted / completed /
 * rejected counters, and the callers waiting for the runtime or a service to drain.
 * Inputs: units and queries the runtime admits (`admit`), and the runtime's verdicts on them
 * (`complete*`, `reject*`). Outputs: each query's single outcome (its `submit` promise resolves
 * exactly once, `onQueryEnd` sees it once), the release of a unit's kept state on the device when
 * its last member leaves it early, and `onEmpty` when no query is pending any more.
 * The loop that decides what runs (`runtime.ts`) never resolves a query itself.
 */
import type { Clock } from '../clock/clock.ts';
import type { Device } from '../device/device.ts';
import { describeError } from '../errors.ts';
import { sliceBatch, type TensorMap } from '../tensor.ts';
import type { QueryRecord, RejectionReason } from './records.ts';
import { refreshView, type Pending, type ServiceState, type Unit } from './units.ts';

export interface QueryBookOptions {
  readonly clock: Clock;
  /** Where a unit's kept state is released (`releaseQuery`; a failure there is ignored: the query has its answer). */
  readonly device: Pick<Device, 'releaseQuery'>;
  /** Keep every query record in `queries`. */
  readonly keepRecords: boolean;
  /** Called once per query when it ends (after its promise resolves). */
  readonly onQueryEnd: ((r: QueryRecord) => void) | undefined;
  /** Called each time a query ends leaving none pending (the runtime disarms its wake timer). */
  readonly onEmpty: () => void;
}

export class QueryBook {
  /** Every query record (when `keepRecords`), in arrival order. */
  readonly queries: QueryRecord[] = [];
  /** Served services by name, in configuration order. */
  readonly services = new Map<string, ServiceState>();
  /** Pending queries by query id. */
  readonly byId = new Map<string, Pending>();
  /** Units not ended, by unit id (a query alone: its query id). */
  readonly units = new Map<string, Unit>();
  private readonly clock: Clock;
  private readonly device: Pick<Device, 'releaseQuery'>;
  private readonly keepRecords: boolean;
  private readonly onQueryEnd: ((r: QueryRecord) => void) | undefined;
  private readonly onEmpty: () => void;
  private submitted = 0;
  private completed = 0;
  private rejected = 0;
  private idleWaiters: (() => void)[] = [];
  /** `serviceDrained` callers, by service. */
  private readonly serviceWaiters = new Map<string, (() => void)[]>();

  constructor(options: QueryBookOptions) {
    this.clock = options.clock;
    this.device = options.device;
    this.keepRecords = options.keepRecords;
    this.onQueryEnd = options.onQueryEnd;
    this.onEmpty = options.onEmpty;
  }

  /** Submitted, completed and rejected queries since creation, and those pending now. */
  get counts(): { readonly submitted: number; readonly completed: number; readonly rejected: number; readonly pending: number } {
    return { submitted: this.submitted, completed: this.completed, rejected: this.rejected, pending: this.byId.size };
  }

  /** Whether `id` names a pending query or a unit not ended (a new query or fused batch may not take it). */
  taken(id: string): boolean {
    return this.byId.has(id) || this.units.has(id);
  }

  /** A new query: count it, keep its record (when records are kept), and hold it pending under its id. */
  open(p: Pending): void {
    if (this.keepRecords) this.queries.push(p.record);
    this.submitted++;
    this.byId.set(p.record.id, p);
  }

  /** An opened query alone in its unit joins the tail of its service's queue. */
  enqueue(u: Unit): void {
    this.units.set(u.id, u);
    u.state.queue.push(u);
    u.state.views.push(u.view);
    u.state.queries++;
  }

  /** Resolves when no query is pending (every submitted query has its outcome). */
  drained(): Promise<void> {
    if (this.byId.size === 0) return Promise.resolve();
    return new Promise<void>((resolve) => this.idleWaiters.push(resolve));
  }

  /** Resolves when no query of `service` is waiting or running (at once for an unknown service or an empty queue). */
  serviceDrained(service: string): Promise<void> {
    const state = this.services.get(service);
    if (state === undefined || (state.queries === 0 && state.queue.length === 0)) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const list = this.serviceWaiters.get(service) ?? [];
      list.push(resolve);
      this.serviceWaiters.set(service, list);
    });
  }

  /** Take `u` out of its service's queue (no-op when it is not there). */
  removeFromQueue(u: Unit): void {
    const { queue, views } = u.state;
    const i = queue.indexOf(u);
    if (i === 0) {
      queue.shift();
      views.shift();
    } else if (i > 0) {
      queue.splice(i, 1);
      views.splice(i, 1);
    }
  }

  /** Release `u`'s kept state on the device (it ran part of its operators and will run no more). */
  release(u: Unit): void {
    this.device.releaseQuery(u.state.service.name, u.id).catch(() => undefined);
  }

  /** The unit's last operator ran: every live member gets its rows of `outputs` (a fused batch is split along dim 0). */
  completeUnit(u: Unit, outputs: TensorMap): void {
    this.removeFromQueue(u);
    this.units.delete(u.id);
    for (const p of [...u.members]) {
      let mine: TensorMap;
      try {
        mine = u.fused ? sliceBatch(outputs, p.offset, p.record.batch) : outputs;
      } catch (err) {
        this.reject(p, 'device_failure', `could not split the fused batch's outputs: ${describeError(err)}`);
        continue;
      }
      this.complete(p, mine);
    }
  }

  /** Every live member of `u` ends rejected. */
  rejectUnit(u: Unit, reason: RejectionReason, message: string): void {
    for (const p of [...u.members]) this.reject(p, reason, message);
  }

  /** `p` ends rejected, leaving its unit (no-op when it has ended already). */
  reject(p: Pending, reason: RejectionReason, message: string): void {
    if (p.record.outcome !== 'pending') return;
    this.leaveUnit(p, true);
    this.finish(p, reason, message);
  }

  /**
   * Record and answer `p`'s rejection, without touching its unit: for a query that never joined
   * a queue (refused on arrival), or via `reject`.
   */
  finish(p: Pending, reason: RejectionReason, message: string): void {
    p.record.outcome = 'rejected';
    p.record.reason = reason;
    p.record.detail = message;
    p.record.endMs = this.clock.now();
    this.rejected++;
    this.settle(p);
    p.resolve({ ok: false, record: p.record, reason, message });
  }

  private complete(p: Pending, outputs: TensorMap): void {
    this.leaveUnit(p, false);
    p.record.outcome = 'completed';
    p.record.endMs = this.clock.now();
    this.completed++;
    this.settle(p);
    p.resolve({ ok: true, record: p.record, outputs });
  }

  /**
   * `p` leaves its unit; the last member to leave ends the unit (its queue entry, and with
   * `release` its kept device state — not after the last operator, when none is kept).
   */
  private leaveUnit(p: Pending, release: boolean): void {
    const u = p.unit;
    const i = u.members.indexOf(p);
    if (i < 0) return;
    u.members.splice(i, 1);
    u.state.queries--;
    if (u.inFlight) u.state.runningQueries--;
    if (u.members.length > 0) {
      if (u.fused && !u.inFlight) refreshView(u);
      return;
    }
    this.removeFromQueue(u);
    this.units.delete(u.id);
    if (release && u.nextOperator > 0 && !u.inFlight) this.release(u);
    const waiters = u.state.queries === 0 && u.state.queue.length === 0 ? this.serviceWaiters.get(u.state.service.name) : undefined;
    if (waiters !== undefined) {
      this.serviceWaiters.delete(u.state.service.name);
      for (const w of waiters) queueMicrotask(w);
    }
  }

  private settle(p: Pending): void {
    this.byId.delete(p.record.id);
    this.onQueryEnd?.(p.record);
    if (this.byId.size === 0) this.onEmpty(); // nothing left to wake for (keeps a wall-clock process free to exit)
    if (this.byId.size === 0 && this.idleWaiters.length > 0) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const w of waiters) w();
    }
  }
}
