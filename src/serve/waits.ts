/** Small waiting helpers of the serving backend and server (shutdown deadlines, client aborts). */

/**
 * Wait for `promise` at most `ms` of wall time (≤ 0: one timer turn, so an already settled
 * promise still counts); true when it settled in time. The timer never outlives the call.
 * Used by the backend's and the server's shutdown.
 */
export async function within(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), Math.max(0, ms));
  });
  try {
    return await Promise.race([promise.then(() => true), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** Whether the client of a request went away (read anew at each call). */
export function isAborted(signal: AbortSignal | undefined): boolean {
  return signal?.aborted === true;
}
