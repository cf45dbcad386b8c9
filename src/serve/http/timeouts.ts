/**
 * Timeouts of the HTTP listener (docs/overload.md "Limits and timeouts"), so that a slow or
 * silent client cannot hold a connection open forever (slowloris: headers sent a byte at a
 * time). Node enforces the header and request timeouts by a sweep over the open connections
 * every `connectionsCheckingInterval` (30 s by default, which let 300 slow-header connections
 * live past 35 s); here it runs every second, or every quarter of the header timeout when that
 * is shorter. A connection past either timeout is answered 408 and closed (`app.ts` `clientError`).
 */
import type { ServerOptions } from 'node:http';

/** Default time for a client to send a request's headers, ms (10 s; nginx's `client_header_timeout` is 60 s, node's 60 s). */
export const DEFAULT_HEADERS_TIMEOUT_MS = 10_000;

/**
 * Default time for a client to send a whole request, headers and body, ms (120 s: a 64 MiB body
 * at 5 Mbit/s; node's default is 300 s). The time to answer is not counted.
 */
export const DEFAULT_REQUEST_TIMEOUT_MS = 120_000;

/** Default idle time of a keep-alive connection between requests, ms (72 s, fastify's: longer than the 60 s idle timeout of common load balancers, so they close first). */
export const DEFAULT_KEEP_ALIVE_TIMEOUT_MS = 72_000;

export interface HttpTimeouts {
  /** [`DEFAULT_HEADERS_TIMEOUT_MS`] must be ≤ `requestTimeoutMs` when both are > 0; 0: none. */
  readonly headersTimeoutMs?: number;
  /** [`DEFAULT_REQUEST_TIMEOUT_MS`]; 0: none. */
  readonly requestTimeoutMs?: number;
  /** [`DEFAULT_KEEP_ALIVE_TIMEOUT_MS`]; 0: none. */
  readonly keepAliveTimeoutMs?: number;
}

/**
 * fastify options that set the timeouts on the node server it creates.
 * @throws RangeError for a negative or non-integer timeout, or a header timeout longer than the request timeout.
 */
export function httpServerOptions(timeouts: HttpTimeouts = {}): { requestTimeout: number; keepAliveTimeout: number; http: ServerOptions } {
  const headers = timeouts.headersTimeoutMs ?? DEFAULT_HEADERS_TIMEOUT_MS;
  const request = timeouts.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
  const keepAlive = timeouts.keepAliveTimeoutMs ?? DEFAULT_KEEP_ALIVE_TIMEOUT_MS;
  for (const [name, v] of [['headersTimeoutMs', headers], ['requestTimeoutMs', request], ['keepAliveTimeoutMs', keepAlive]] as const) {
    if (!Number.isSafeInteger(v) || v < 0) throw new RangeError(`${name} must be an integer ≥ 0, got ${v}`);
  }
  if (headers > 0 && request > 0 && headers > request) throw new RangeError(`the header timeout (${headers} ms) must not be longer than the request timeout (${request} ms)`);
  const shortest = Math.min(...[headers, request].filter((t) => t > 0), 4000);
  return {
    requestTimeout: request,
    // fastify reads 0 as "its default" (72 s); 1 ms is not "none": node has no "off" but a huge value
    keepAliveTimeout: keepAlive === 0 ? 2 ** 31 - 1 : keepAlive,
    http: { headersTimeout: headers, connectionsCheckingInterval: Math.max(50, Math.floor(shortest / 4)) },
  };
}
