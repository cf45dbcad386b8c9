/** Restart backoff and health reports of an executor (`ExecutorHandle`). */

/**
 * Default restart backoff: the wait before the next restart after n consecutive failed ones is
 * `initialMs` × 2^(n − 1), at most `maxMs`. Chosen, not measured: 250 ms lets a transient fault
 * (a file being replaced) pass quickly; 30 s bounds what a persistent fault costs in spawns.
 */
export const DEFAULT_RESTART_BACKOFF: RestartBackoff = { initialMs: 250, maxMs: 30_000 };

/** Capped exponential backoff between failed restarts, ms. */
export interface RestartBackoff {
  readonly initialMs: number;
  readonly maxMs: number;
}

/** The wait before the next restart after `failures` (≥ 1) consecutive failed ones, ms. */
export function restartDelayMs(backoff: RestartBackoff, failures: number): number {
  return Math.min(backoff.maxMs, backoff.initialMs * 2 ** Math.min(Math.max(failures - 1, 0), 30));
}

/** What `onHealth` reports: whether the executor is up, and why not. */
export interface ExecutorHealth {
  readonly up: boolean;
  /** Why it is down (exit, failed restart and the next try); '' when up. */
  readonly reason: string;
  /** Automatic restarts so far (the handle's `restarts`). */
  readonly restarts: number;
}
