/**
 * `WallClock`: the Clock contract on real time, for serving real traffic on a real device.
 * This file and `virtual.ts` are the only places time-dependent code reaches real time
 * through; `schedule/`, `runtime/`, `workload/` and `device/sim/` are linted and tested
 * against direct use (eslint.config.js, test/clock-guard.test.ts).
 */
import type { Clock, TimerHandle } from './clock.ts';
import { checkCallback, checkDelayMs, TimerQueue } from './timer-queue.ts';

/** Largest delay Node's `setTimeout` honours (2^31 − 1 ms); longer waits are re-armed in pieces. */
const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/**
 * Real time: `now()` is `performance.now()` (monotonic, fractional ms) relative to this clock's
 * creation. Pending timers sit in one queue ordered by due time, then by order of setting; one
 * Node timer is armed for the earliest (a `setTimeout`, or a `setImmediate` once it is due), so
 * while any timer is pending the process stays alive, and none keeps it alive after it fired or
 * was cleared.
 *
 * Guarantees beyond plain `setTimeout`:
 * - a callback never runs early as this clock measures it: inside it
 *   `now() ≥ (now() when set) + delayMs` holds exactly (Node counts whole ms from a cached loop
 *   time and may fire up to about 1 ms early; such a wake-up just re-arms);
 * - callbacks run in due-time order, FIFO among equal due times, one per macrotask, so the
 *   microtasks a callback starts run before the next callback (as with Node's own timers);
 * - lateness is unbounded, as with any timer: a busy event loop delays every callback.
 *
 * A callback that throws raises an uncaught exception, as `setTimeout` would; the remaining
 * timers stay armed.
 */
export class WallClock implements Clock {
  private readonly originMs = performance.now();
  private readonly timers = new TimerQueue();
  /** The Node timer armed for the queue head, and the due time it was armed for. */
  private armed: { readonly dueMs: number; readonly cancel: () => void } | undefined;

  /** Ms since this clock was created (monotonic, fractional). */
  now(): number {
    return performance.now() - this.originMs;
  }

  /**
   * Call `callback` once after `delayMs` ms of real time (≥ 0, fractional allowed).
   * @throws RangeError for a negative, NaN or infinite `delayMs`; TypeError when `callback` is
   *   not a function.
   */
  setTimer(delayMs: number, callback: () => void): TimerHandle {
    checkDelayMs('WallClock.setTimer', delayMs);
    checkCallback('WallClock.setTimer', callback);
    const handle = this.timers.add(this.now() + delayMs, callback);
    this.arm();
    return handle;
  }

  /** Cancel a pending timer; a no-op for one that fired, was cleared, or belongs to another clock. */
  clearTimer(handle: TimerHandle): void {
    if (this.timers.cancel(handle)) this.arm();
  }

  /**
   * Resolves after `delayMs` ms of real time.
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

  /** Make exactly one Node timer target the queue head (none when the queue is empty). */
  private arm(): void {
    const head = this.timers.peek();
    if (this.armed !== undefined && head !== undefined && this.armed.dueMs === head.dueMs) return;
    this.armed?.cancel();
    this.armed = undefined;
    if (head === undefined) return;
    const waitMs = head.dueMs - this.now();
    if (waitMs <= 0) {
      const immediate = setImmediate(this.wake);
      this.armed = { dueMs: head.dueMs, cancel: () => clearImmediate(immediate) };
    } else {
      const timeout = setTimeout(this.wake, Math.min(Math.ceil(waitMs), MAX_TIMEOUT_MS));
      this.armed = { dueMs: head.dueMs, cancel: () => clearTimeout(timeout) };
    }
  }

  /** The Node timer fired: run the head if it is due (else re-arm), then arm for the next. */
  private readonly wake = (): void => {
    this.armed = undefined;
    const head = this.timers.peek();
    if (head === undefined) return;
    if (head.dueMs > this.now()) {
      this.arm();
      return;
    }
    this.timers.take();
    try {
      head.callback();
    } finally {
      this.arm();
    }
  };
}
