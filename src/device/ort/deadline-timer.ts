/** How an executor times the deadline of the segment at the front of its queue (`segmentTimeoutMs`). */

/** The segment a deadline is armed for. */
export interface DeadlineSegment {
  readonly service: string;
  readonly queryId: string;
}

/**
 * Arms one segment deadline: calls `fire` after `delayMs` ms (an integer in [1, 2147483647])
 * unless the returned function, which cancels it, runs first. `realDeadlineTimer` (Node's
 * `setTimeout`) is the default; a test passes its own to end a stalled segment when it chooses,
 * so that neither the test's outcome nor its length depends on how fast the machine runs the
 * healthy segments.
 */
export type DeadlineTimer = (delayMs: number, fire: () => void, segment: DeadlineSegment) => () => void;

/** The real one: an unref'd `setTimeout` (a pending deadline does not keep the process alive). */
export const realDeadlineTimer: DeadlineTimer = (delayMs, fire) => {
  const timer = setTimeout(fire, delayMs);
  timer.unref();
  return () => clearTimeout(timer);
};
