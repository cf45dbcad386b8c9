/**
 * The thread side of the reproduce pool (`pool.ts`): an entry module calls `serveUnits` with how
 * to run a unit; every unit posted to the thread runs (one at a time, as the pool sends them) and
 * its value or error goes back under the unit's sequence number.
 */
import { parentPort, workerData } from 'node:worker_threads';
import type { UnitReply } from './pool.ts';

/**
 * Serve the units the pool posts to this thread.
 * @param setup called once with the pool's `workerData` and `say` (sends a progress line to the
 *   pool's `onLog`); returns how to run one unit.
 * @throws Error when not called in a worker thread.
 */
export function serveUnits(setup: (data: unknown, say: (text: string) => void) => (unit: unknown) => Promise<unknown>): void {
  const port = parentPort;
  if (port === null) throw new Error('serveUnits runs in a reproduce pool thread (reproduce/pool.ts)');
  const say = (text: string): void => port.postMessage({ log: text } satisfies UnitReply);
  const run = setup((workerData as { data?: unknown } | null)?.data, say);
  port.on('message', (message: { seq: number; unit: unknown }) => {
    run(message.unit).then(
      (value) => port.postMessage({ seq: message.seq, ok: true, value } satisfies UnitReply),
      (err: unknown) => port.postMessage({ seq: message.seq, ok: false, message: err instanceof Error ? err.message : String(err) } satisfies UnitReply),
    );
  });
}
