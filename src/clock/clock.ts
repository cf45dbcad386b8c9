/**
 * The Clock contract (docs/design.md#two-clocks): everything time-dependent —
 * queues, headroom, timeouts, load generators, the simulated device — reads time and sets
 * timers through a Clock, never through `Date.now()`, `performance.now()` or `setTimeout`.
 * With the wall clock the runtime serves real traffic; with the virtual clock the same code is
 * a discrete-event simulation. Interfaces only; implementations in `wall.ts`, `virtual.ts`.
 */

/** Opaque handle of a pending timer. */
export interface TimerHandle {
  readonly id: number;
}

export interface Clock {
  /** Current time in ms since this clock's origin (monotonic, never decreases). */
  now(): number;
  /**
   * Call `callback` once when `delayMs` (≥ 0) ms of this clock's time have passed. Timers due at
   * the same time fire in the order they were set.
   * @throws RangeError for a negative or non-finite delay.
   */
  setTimer(delayMs: number, callback: () => void): TimerHandle;
  /** Cancel a pending timer; a no-op for one that fired or was cleared. */
  clearTimer(handle: TimerHandle): void;
  /** Resolves after `delayMs` ms of this clock's time. */
  sleep(delayMs: number): Promise<void>;
}
