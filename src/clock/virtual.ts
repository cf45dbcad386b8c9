/**
 * `VirtualClock`: the Clock contract as a discrete-event simulation clock (docs/design.md#two-clocks). The same runtime, controller, load generator and simulated device
 * that serve real traffic on a `WallClock` run hours of simulated traffic in seconds on it.
 *
 * ## How time moves
 * Time never moves by itself. A driver — `run()`, `runUntil(tMs)` or `advance(ms)` — repeats:
 *
 * 1. **settle**: yield to the real Node event loop until nothing is runnable (below);
 * 2. take the earliest pending timer (ties: the one set first), set `now()` to exactly its due
 *    time, remove it and call its callback synchronously;
 *
 * and stops when no timer remains (`run`) or the next one is due after the limit
 * (`runUntil`/`advance`, which then set `now()` to the limit). So `now()` only ever takes
 * due times of timers or a driver's limit, and everything a callback starts — however many
 * `await`s deep — has run before time moves again or the next timer, even one due at the same
 * instant, fires.
 *
 * ## What "runnable" covers
 * *Runnable* is work that will run on this process's event loop without any outside event:
 * - every microtask: promise reactions (`await`, `.then`, `async` functions, `Promise.all`),
 *   `queueMicrotask`, and `process.nextTick` callbacks — any chain length, since Node drains
 *   them completely before the next macrotask;
 * - `setImmediate` callbacks, including ones that schedule further `setImmediate`s, up to
 *   `maxSettleTurns` loop turns per settle. Pending immediates are detected with
 *   `process.getActiveResourcesInfo()`; where that is missing every settle takes
 *   `maxSettleTurns` turns.
 *
 * It does **not** cover anything that waits for the outside world: real I/O (files, sockets,
 * HTTP, child processes such as the ort executors, worker threads) and real `setTimeout` /
 * `setInterval` timers. The clock does not wait for them: it advances as soon as the
 * runnable work is done, and a reply that arrives later is observed at whatever virtual time
 * the clock has reached by then — nondeterministically. A simulated device or load generator
 * must therefore express every delay as a timer on this clock (`setTimer`/`sleep`), never as
 * real waiting. With only such code, the same program gives the same event order, the same
 * `now()` values and the same results on every run.
 *
 * ## Errors and limits
 * - A callback that throws rejects the driving promise with that error; the timer is already
 *   removed and the clock stays usable (drive again to continue).
 * - Only one driver at a time: a second `run`/`runUntil`/`advance` while one is pending
 *   (including from a timer callback) is rejected with an `Error`.
 * - Runaway loops: a driver rejects with `RangeError` when it would fire more than
 *   `maxEvents` timers in one call, or when more than `maxEventsPerInstant` timers fire at
 *   one virtual instant (a zero-delay loop: time would never advance).
 */
import type { Clock, TimerHandle } from './clock.ts';
import { checkCallback, checkDelayMs, TimerQueue } from './timer-queue.ts';

/** Options of `new VirtualClock()`. */
export interface VirtualClockOptions {
  /** `now()` at creation, ms (default 0). Finite. */
  startMs?: number;
  /**
   * Most event-loop turns (`setImmediate` yields) one settle takes while `setImmediate` work is
   * still pending (default 16, ≥ 1). Microtasks need a single turn whatever their depth; each
   * further level of `setImmediate`-scheduled work needs one more.
   */
  maxSettleTurns?: number;
  /** Default `maxEvents` of the drivers (default `Infinity`: no limit). Integer ≥ 1 or Infinity. */
  maxEvents?: number;
  /**
   * Most timers that may fire at one virtual instant before a driver rejects with RangeError
   * (default 1,000,000; integer ≥ 1 or Infinity). Catches zero-delay loops that never let time
   * advance.
   */
  maxEventsPerInstant?: number;
}

/** Options of one driver call. */
export interface DriveOptions {
  /** Most timers this call may fire before rejecting with RangeError (default: the clock's). */
  maxEvents?: number;
  /**
   * Checked after every settle: when it returns true the driver stops right there, before
   * firing the next timer, and leaves `now()` where it is (not at the limit). Lets a caller
   * drive "until this promise settled" with one settle per timer (`driveUntilSettled`).
   */
  stop?: () => boolean;
}

const DEFAULT_MAX_SETTLE_TURNS = 16;
const DEFAULT_MAX_EVENTS_PER_INSTANT = 1_000_000;

/**
 * A discrete-event clock: `now()` stays put while code runs and jumps to the next timer's due
 * time when nothing is runnable. See the file comment for the exact semantics.
 *
 * ```ts
 * const clock = new VirtualClock();
 * void (async () => { await clock.sleep(5); log.push(clock.now()); })();
 * await clock.run(); // log: [5]; clock.now() === 5
 * ```
 */
export class VirtualClock implements Clock {
  private nowMs: number;
  private readonly timers = new TimerQueue();
  private firedTotal = 0;
  private firedAtInstant = 0;
  private driving: string | undefined;
  private readonly maxSettleTurns: number;
  private readonly maxEvents: number;
  private readonly maxEventsPerInstant: number;

  /** @throws RangeError naming the option when one is out of range. */
  constructor(options: VirtualClockOptions = {}) {
    const startMs = options.startMs ?? 0;
    if (!Number.isFinite(startMs)) throw new RangeError(`VirtualClock: startMs must be finite, got ${String(startMs)}`);
    this.nowMs = startMs;
    this.maxSettleTurns = checkLimit('maxSettleTurns', options.maxSettleTurns ?? DEFAULT_MAX_SETTLE_TURNS, false);
    this.maxEvents = checkLimit('maxEvents', options.maxEvents ?? Infinity, true);
    this.maxEventsPerInstant = checkLimit('maxEventsPerInstant', options.maxEventsPerInstant ?? DEFAULT_MAX_EVENTS_PER_INSTANT, true);
  }

  /** Current virtual time, ms. Changes only while a driver runs; never decreases. */
  now(): number {
    return this.nowMs;
  }

  /**
   * Call `callback` once when virtual time reaches `now() + delayMs`, while a driver runs.
   * Timers due at the same time fire in the order they were set (a zero-delay timer set by a
   * callback fires after every timer already due at that instant).
   * @throws RangeError for a negative, NaN or infinite `delayMs`; TypeError when `callback` is
   *   not a function.
   */
  setTimer(delayMs: number, callback: () => void): TimerHandle {
    checkDelayMs('VirtualClock.setTimer', delayMs);
    checkCallback('VirtualClock.setTimer', callback);
    return this.timers.add(this.nowMs + delayMs, callback);
  }

  /** Cancel a pending timer; a no-op for one that fired, was cleared, or belongs to another clock. */
  clearTimer(handle: TimerHandle): void {
    this.timers.cancel(handle);
  }

  /**
   * Resolves when virtual time reaches `now() + delayMs` (while a driver runs).
   * @returns a promise rejected with RangeError for a negative, NaN or infinite `delayMs`.
   */
  sleep(delayMs: number): Promise<void> {
    return new Promise<void>((resolve) => {
      this.setTimer(delayMs, resolve);
    });
  }

  /** Number of timers set and neither fired nor cleared (0 when none). */
  get pendingTimers(): number {
    return this.timers.size;
  }

  /** Due time (ms) of the earliest pending timer; `undefined` when none is pending. */
  nextTimerMs(): number | undefined {
    return this.timers.peek()?.dueMs;
  }

  /** Timers fired since creation, over all drivers (a simulation's event count). */
  get eventsFired(): number {
    return this.firedTotal;
  }

  /**
   * Run the simulation to completion: settle, fire the next timer, repeat, until no timer is
   * pending once everything runnable has settled. `now()` is then the last timer's due time.
   * Work blocked on anything but this clock (real I/O, a promise nobody resolves) is left as is.
   * @returns the number of timers fired by this call.
   * @throws (rejects) RangeError when a `maxEvents` / `maxEventsPerInstant` limit is hit; Error
   *   when another driver is running; whatever a timer callback throws.
   */
  run(options: DriveOptions = {}): Promise<number> {
    return this.drive('run', Infinity, options);
  }

  /**
   * Fire every timer due at or before `tMs` (including ones set meanwhile), settling after each,
   * then set `now()` to `tMs`. `runUntil(now())` only settles and fires timers already due.
   * @param tMs absolute virtual time, ms; finite and ≥ `now()`.
   * @returns the number of timers fired by this call.
   * @throws (rejects) RangeError for a `tMs` that is not finite or lies before `now()`, and as
   *   `run()` does.
   */
  runUntil(tMs: number, options: DriveOptions = {}): Promise<number> {
    if (typeof tMs !== 'number' || !Number.isFinite(tMs) || tMs < this.nowMs) {
      return Promise.reject(new RangeError(`VirtualClock.runUntil: tMs must be finite and ≥ now() = ${this.nowMs} ms, got ${String(tMs)}`));
    }
    return this.drive('runUntil', tMs, options);
  }

  /**
   * `runUntil(now() + ms)`: let `ms` of virtual time pass, firing what falls due.
   * @param ms finite, ≥ 0.
   * @throws (rejects) RangeError for a negative, NaN or infinite `ms`, and as `run()` does.
   */
  advance(ms: number, options: DriveOptions = {}): Promise<number> {
    if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) {
      return Promise.reject(new RangeError(`VirtualClock.advance: ms must be a finite number ≥ 0, got ${String(ms)}`));
    }
    return this.drive('advance', this.nowMs + ms, options);
  }

  private async drive(name: string, limitMs: number, options: DriveOptions): Promise<number> {
    const maxEvents = checkLimit(`${name}: maxEvents`, options.maxEvents ?? this.maxEvents, true);
    if (this.driving !== undefined) {
      throw new Error(`VirtualClock.${name}: ${this.driving}() is already driving this clock; await it first (one driver at a time)`);
    }
    this.driving = name;
    try {
      let fired = 0;
      const stop = options.stop;
      await this.settle();
      for (;;) {
        if (stop?.() === true) return fired;
        const next = this.timers.peek();
        if (next === undefined || next.dueMs > limitMs) break;
        if (fired >= maxEvents) {
          throw new RangeError(
            `VirtualClock.${name}: fired maxEvents = ${maxEvents} timers and more are due (next at ${next.dueMs} ms, ` +
              `${this.timers.size} pending); a runaway loop, or raise maxEvents`,
          );
        }
        if (next.dueMs > this.nowMs) {
          this.nowMs = next.dueMs;
          this.firedAtInstant = 0;
        }
        if (this.firedAtInstant >= this.maxEventsPerInstant) {
          throw new RangeError(
            `VirtualClock.${name}: more than maxEventsPerInstant = ${this.maxEventsPerInstant} timers fired at ${this.nowMs} ms ` +
              'without time advancing; a zero-delay timer loop?',
          );
        }
        this.timers.take();
        this.firedAtInstant++;
        this.firedTotal++;
        fired++;
        next.callback();
        await this.settle();
      }
      if (limitMs !== Infinity && limitMs > this.nowMs) {
        this.nowMs = limitMs;
        this.firedAtInstant = 0;
      }
      return fired;
    } finally {
      this.driving = undefined;
    }
  }

  /** Yield to the real event loop until microtasks and pending `setImmediate` work have run. */
  private async settle(): Promise<void> {
    for (let turn = 1; turn <= this.maxSettleTurns; turn++) {
      await new Promise<void>((resolve) => setImmediate(resolve));
      if (!immediatePending()) return;
    }
  }
}

/** Whether a ref'ed `setImmediate` callback is queued; `true` when the runtime cannot tell. */
function immediatePending(): boolean {
  if (typeof process.getActiveResourcesInfo !== 'function') return true;
  return process.getActiveResourcesInfo().includes('Immediate');
}

function checkLimit(name: string, value: number, allowInfinity: boolean): number {
  const ok = typeof value === 'number' && value >= 1 && (Number.isInteger(value) || (allowInfinity && value === Infinity));
  if (!ok) throw new RangeError(`VirtualClock: ${name} must be an integer ≥ 1${allowInfinity ? ' or Infinity' : ''}, got ${String(value)}`);
  return value;
}
