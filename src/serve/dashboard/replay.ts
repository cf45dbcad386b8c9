/**
 * Replay of a finished run's records on the dashboard (`abacus simulate --dashboard`): the
 * virtual-clock run is over in seconds, so its records are fed to a `DashboardHub` (mode
 * `replay`) paced by the wall clock — `speed` simulated ms per wall ms (1: the run's own pace).
 *
 * Events in virtual-time order: each query's arrival (its service's queue grows), its first
 * launch or its end when it never ran (the queue shrinks), each group at its end
 * (`launchMs + measuredMs`) and each query at its end (`endMs`). Queue depth is therefore exact
 * for the replayed run: the queries arrived and not yet launched (or answered).
 *
 * The replay starts when `start()` is called (the CLI calls it when the first page connects) and
 * calls `hub.finish()` at its end. Wall timers: this runs beside a finished simulation, not in it.
 */
import type { GroupRecord, QueryRecord } from '../../runtime/records.ts';
import type { DashboardService } from './protocol.ts';
import type { DashboardHub, DashboardSource } from './hub.ts';

type ReplayEvent = { readonly atMs: number; readonly order: number; readonly apply: () => void };

/** Wall ms between two steps of the replay. */
const STEP_MS = 50;

export class DashboardReplay implements DashboardSource {
  private readonly services: readonly DashboardService[];
  private readonly events: ReplayEvent[] = [];
  private readonly depth = new Map<string, number>();
  private hub: DashboardHub | undefined;
  private next = 0;
  private nowMs: number | undefined;
  private timer: NodeJS.Timeout | undefined;
  private doneResolve: (() => void) | undefined;
  /** Resolves when the last event was replayed (or `stop` was called). */
  readonly done: Promise<void>;
  readonly refinement = undefined;

  /**
   * @param records the run's records (`runExperiment` with `keepRecords`).
   * @param speed simulated ms per wall ms, > 0.
   * @throws RangeError for a speed that is not a finite number > 0.
   */
  constructor(
    services: readonly DashboardService[],
    records: { readonly queries: readonly QueryRecord[]; readonly groups: readonly GroupRecord[] },
    readonly speed: number,
  ) {
    if (!(Number.isFinite(speed) && speed > 0)) throw new RangeError(`dashboard replay: speed must be a finite number > 0, got ${speed}`);
    this.services = services;
    for (const s of services) this.depth.set(s.name, 0);
    const add = (atMs: number, order: number, apply: () => void): void => {
      if (Number.isFinite(atMs)) this.events.push({ atMs, order, apply });
    };
    const groupsByIndex = new Map(records.groups.map((g) => [g.index, g]));
    for (const q of records.queries) {
      add(q.arrivalMs, 0, () => this.depth.set(q.service, (this.depth.get(q.service) ?? 0) + 1));
      const first = q.groups[0] === undefined ? undefined : groupsByIndex.get(q.groups[0]);
      const leftQueueMs = first?.launchMs ?? q.endMs;
      if (leftQueueMs !== undefined) add(leftQueueMs, 1, () => this.depth.set(q.service, Math.max(0, (this.depth.get(q.service) ?? 0) - 1)));
      if (q.endMs !== undefined) add(q.endMs, 3, () => this.hub?.observe({ kind: 'query', record: q }));
    }
    for (const g of records.groups) add(g.launchMs + g.measuredMs, 2, () => this.hub?.observe({ kind: 'group', record: g, endMs: g.launchMs + g.measuredMs }));
    this.events.sort((a, b) => a.atMs - b.atMs || a.order - b.order);
    this.done = new Promise((resolve) => (this.doneResolve = resolve));
  }

  /** Simulated span of the replay, ms. */
  get spanMs(): number {
    return this.events.length === 0 ? 0 : this.events[this.events.length - 1]!.atMs - this.events[0]!.atMs;
  }

  servedModels(): readonly DashboardService[] {
    return this.services;
  }

  queueLength(service: string): number {
    return this.depth.get(service) ?? 0;
  }

  clockNowMs(): number | undefined {
    return this.nowMs;
  }

  isReady(): boolean {
    return true;
  }

  /** Replay into `hub` from the first event, at `speed`; idempotent. */
  start(hub: DashboardHub): void {
    if (this.hub !== undefined) return;
    this.hub = hub;
    const t0 = this.events[0]?.atMs ?? 0;
    const wall0 = Date.now();
    const step = (): void => {
      const until = t0 + (Date.now() - wall0) * this.speed;
      while (this.next < this.events.length && this.events[this.next]!.atMs <= until) {
        const e = this.events[this.next++]!;
        this.nowMs = e.atMs;
        e.apply();
      }
      if (this.next >= this.events.length) {
        hub.finish();
        this.stop();
        return;
      }
      this.nowMs = until;
      this.timer = setTimeout(step, STEP_MS);
    };
    step();
  }

  /** Stop replaying (resolves `done`). */
  stop(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    this.doneResolve?.();
  }
}
