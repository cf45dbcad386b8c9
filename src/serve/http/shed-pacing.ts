/**
 * Pacing of back-to-back shed requests on one HTTP/1.1 connection (docs/overload.md "Overload
 * and admission", "Clients that resend at once").
 *
 * A request the admission gate sheds before its body is read is answered 503 `overloaded` at
 * once. A closed-loop client (a fixed number of requests in flight, as perf_analyzer's
 * `--concurrency-range` or a thread pool of tritonclient.http calls keeps) sends its next request
 * the moment it reads the 503, on the same connection, and that request finds the same queue:
 * nothing has completed in between. It is shed again, and again, thousands of times a second.
 * On a device that is the machine's CPU those sheds are not free — each costs the client and the
 * server's front end a few hundred µs, and the 100–200 KB body the server must read off the
 * connection to keep it alive — and the cores they take are the device's: measured on
 * `examples/serve-demo.yaml` (HTTP, 4 requests in flight), 4,492 503s in 5 s took the client and
 * the front end from 26 % to 47 % of both cores, the executors fell from 40 % to 32 %, and fewer
 * requests were answered within QoS with 4 in flight than with 1.
 *
 * So a shed request that arrives on a connection whose previous request was shed less than
 * `retryInMs` ago is answered `retryInMs` after that previous answer instead of at once:
 * `retryInMs` is the gate's device time per completed query (`AdmissionGate.drainMs`), the
 * time until the next query completes on average, before which a resend cannot find a shorter
 * queue. It is capped at `MAX_SHED_PACE_MS`. While it waits the request holds no place in the
 * queue and its body is not read beyond what node buffers (a few tens of KB; TCP flow control
 * holds the rest in the client); a client that closes the connection meanwhile gets nothing.
 * The first shed on a connection, and a request on a connection whose last shed is older than
 * that, is answered at once, so an open-loop client (new requests at their own times) sees no
 * delay unless one of its requests follows a shed one on the same connection within one query's
 * device time.
 */
import type { Socket } from 'node:net';

/** Longest pause before the 503 of a back-to-back resend, ms: a slow device (a drain of seconds) does not make clients wait that long for an answer they will get anyway. */
export const MAX_SHED_PACE_MS = 100;

/** When each connection's last shed answer was sent (see the file docs). */
export class ShedPacer {
  private readonly lastShedMs = new WeakMap<Socket, number>();

  /**
   * How long to hold the 503 of a request shed now on `socket`, ms (0: answer at once).
   * @param retryInMs the gate's device time per query (`ServeError.retryInMs`); undefined: 0.
   * @param nowMs the front end's clock (`performance.now()`), ms.
   */
  delayMs(socket: Socket, retryInMs: number | undefined, nowMs: number): number {
    const last = this.lastShedMs.get(socket);
    if (last === undefined || retryInMs === undefined || !(retryInMs > 0)) return 0;
    return Math.max(0, last + Math.min(retryInMs, MAX_SHED_PACE_MS) - nowMs);
  }

  /** A shed request's 503 went out on `socket` at `nowMs`. */
  answered(socket: Socket, nowMs: number): void {
    this.lastShedMs.set(socket, nowMs);
  }
}
