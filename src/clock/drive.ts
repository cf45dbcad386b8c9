/**
 * `driveUntilSettled`: the explicit driver a caller needs to wait for work that runs on a
 * `VirtualClock` (the clock's time never moves by itself, `virtual.ts`). It drives the clock
 * until one promise settles, also when that work waits on real I/O in between (a file write,
 * an executor reply): then it yields real event-loop turns until the I/O has completed and
 * the work set new timers or settled.
 */
import type { VirtualClock } from './virtual.ts';

/** Options of `driveUntilSettled`. */
export interface DriveUntilSettledOptions {
  /**
   * Most real time (ms) to wait, with no timer of the clock pending, for `work` to settle or to
   * set a timer, before rejecting with an Error [Infinity: wait as long as it takes]. Catches
   * work blocked on a promise nobody resolves, which would otherwise wait forever.
   */
  readonly idleTimeoutMs?: number;
}

/** Real event-loop turns taken with `setImmediate` before waiting with 1 ms timeouts (less CPU). */
const BUSY_TURNS = 64;

/**
 * Drive `clock` until `work` settles and return its value: `clock.run()` with a stop check
 * after every settle, so it stops as soon as `work` has settled (one settle per timer); when
 * no timer is pending and `work` is still pending (it waits on something outside the clock:
 * real I/O), yield a real macrotask turn and try again.
 *
 * Time only moves through this clock's timers, so with work that only waits on the clock the
 * result is deterministic (`virtual.ts` "How time moves"). Other work on the same clock (a
 * load generator, a second device) advances along with it up to the moment `work` settled;
 * timers not yet fired then stay pending (also ones due at that same instant), and `now()` is
 * that instant.
 *
 * ```ts
 * const result = await driveUntilSettled(clock, device.runGroup(group));
 * ```
 * @returns (resolves) what `work` resolves to.
 * @throws (rejects) what `work` rejects with; what `clock.run()` rejects with (a timer callback
 *   that throws, a runaway loop, another driver already running); an Error when
 *   `idleTimeoutMs` passed without progress; RangeError for a bad `idleTimeoutMs`.
 */
export async function driveUntilSettled<T>(clock: VirtualClock, work: Promise<T>, options: DriveUntilSettledOptions = {}): Promise<T> {
  const idleTimeoutMs = options.idleTimeoutMs ?? Infinity;
  if (typeof idleTimeoutMs !== 'number' || Number.isNaN(idleTimeoutMs) || idleTimeoutMs < 0) {
    throw new RangeError(`driveUntilSettled: idleTimeoutMs must be a number ≥ 0 (ms) or Infinity, got ${String(idleTimeoutMs)}`);
  }
  let settled = false;
  const observed = work.then(
    (value) => {
      settled = true;
      return value;
    },
    (err: unknown) => {
      settled = true;
      throw err;
    },
  );
  // Handle a rejection at once: a rejection while the clock is being driven is not "unhandled".
  observed.catch(() => undefined);
  let idleTurns = 0;
  let idleSinceMs: number | undefined;
  for (;;) {
    // Stops right after the settle in which the work settled: time stays where it settled.
    const fired = await clock.run({ stop: () => settled });
    if (settled) break;
    if (fired > 0 || clock.pendingTimers > 0) {
      idleTurns = 0;
      idleSinceMs = undefined;
      continue;
    }
    idleSinceMs ??= performance.now();
    if (performance.now() - idleSinceMs > idleTimeoutMs) {
      throw new Error(
        `driveUntilSettled: the work is still pending after ${idleTimeoutMs} ms of real time with no timer pending on the clock ` +
          `(virtual time ${clock.now()} ms): it waits on something that never happens?`,
      );
    }
    idleTurns++;
    await (idleTurns <= BUSY_TURNS ? new Promise<void>((resolve) => setImmediate(resolve)) : new Promise<void>((resolve) => setTimeout(resolve, 1)));
  }
  return observed;
}
