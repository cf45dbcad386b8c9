/**
 * `abacus serve` without the command line: the HTTP front end (and the gRPC one, when a factory
 * is given) over one `RuntimeBackend`, started in the order below (docs/serving.md "Starting"), and a graceful
 * shutdown that loses no request.
 *
 * Start (`startServer`): listen on HTTP (and gRPC) at once — live, not ready, so probes and
 * metadata answer while the slow part runs — then open the engine (predictor, device,
 * controller), load and warm up every model one at a time (`RuntimeBackend.start`: a model that
 * cannot load or warm up is UNAVAILABLE with its reason, the others serve), and only then report
 * ready (`ready` resolves; `/v2/health/ready` turns 200 when at least one model is READY).
 *
 * Shutdown (`shutdown(graceMs)`) in any phase: while the engine opens (profiling, training) its
 * signal is aborted, so profiling stops after the sample in progress, training after the epoch,
 * and the devices they opened are closed before `shutdown` resolves (within the grace period);
 * `ready` then resolves without serving. While serving: not ready at once (new inference requests: 503 `not_ready`;
 * responses carry `Connection: close`); listeners stop accepting; queued requests run for up to
 * half the grace period, the rest are answered, running operator groups finish, the device is
 * closed (`RuntimeBackend.shutdown`); connections still open at the deadline are closed. Every
 * request that reached the backend gets exactly one response.
 */
import type { FastifyInstance } from 'fastify';
import type { Logger } from '../log.ts';
import type { BackendEngine, RuntimeBackend } from './backend.ts';
import { within } from './waits.ts';
import type { DashboardHub } from './dashboard/hub.ts';
import type { GrpcInferenceServer, GrpcServerOptions } from './grpc/server.ts';
import { createHttpApp } from './http/app.ts';
import { DEFAULT_REQUEST_TIMEOUT_MS, type HttpTimeouts } from './http/timeouts.ts';
import type { InferenceBackend } from './inference.ts';
import type { ServeMetrics } from './metrics.ts';
import type { ServeSecurity } from './security.ts';


/**
 * Connections the kernel holds for the HTTP listener until the event loop accepts them (the kernel
 * caps it at `net.core.somaxconn`, 4096 on current Linux). Node's default is 511: under overload
 * with many connections (an HTTP/1.1 client opens one per request in flight) the queue
 * overflowed, the kernel dropped the SYNs and the clients retried them a second or more later,
 * so answers came seconds late (serve-sim4, HTTP binary, 10× capacity: p99 6.5 s with 8,722 SYNs
 * dropped; docs/benchmarks.md "Goodput under overload").
 */
export const HTTP_LISTEN_BACKLOG = 4096;

export type { GrpcInferenceServer };

/** `createGrpcServer` of `serve/grpc/server.ts` (injected, so HTTP-only servers never load grpc-js). */
export type GrpcServerFactory = (backend: InferenceBackend, options: GrpcServerOptions) => GrpcInferenceServer;

export interface ServerOptions {
  /** Constructed, not started: `startServer` starts it on the engine. */
  readonly backend: RuntimeBackend;
  /** Opens the engine: predictor, device, controller, and the per-model load/unload the backend calls (may take minutes: profiling, model builds). */
  readonly openEngine: (signal: AbortSignal) => Promise<BackendEngine>;
  readonly logger: Logger;
  readonly metrics?: ServeMetrics;
  /** Interface to bind (loopback by default in the CLI). */
  readonly host: string;
  /** HTTP port; 0 picks a free one. */
  readonly httpPort: number;
  /** Largest HTTP binary-tensor request body, bytes; also the gRPC message limit both ways. */
  readonly maxBodyBytes?: number;
  /** Largest HTTP JSON body, bytes (`http/limits.ts`). */
  readonly maxJsonBodyBytes?: number;
  /** HTTP header, request and keep-alive timeouts (`http/timeouts.ts`). */
  readonly timeouts?: HttpTimeouts;
  /** gRPC front end: its port (0: a free one) and the factory; absent: HTTP only. */
  readonly grpc?: { readonly port: number; readonly factory: GrpcServerFactory };
  /** The live dashboard (`/dashboard`); absent: none. */
  readonly dashboard?: DashboardHub;
  /** TLS for HTTP and gRPC and the bearer token (`security.ts`); absent: plain text, no token. */
  readonly security?: ServeSecurity;
  /** One line per event for the operator (`abacus serve: …`); the CLI prints them on stdout. */
  readonly announce?: (line: string) => void;
}

export interface RunningServer {
  /** e.g. `http://127.0.0.1:8000` (`https://…` with TLS). */
  readonly httpUrl: string;
  /** Bound gRPC port, when gRPC runs. */
  readonly grpcPort: number | undefined;
  readonly http: FastifyInstance;
  /** Resolves when every service is warmed up (ready); rejects when start-up failed (the server is then shut down). */
  readonly ready: Promise<void>;
  /** Graceful shutdown (see the file docs); idempotent. */
  shutdown(graceMs: number): Promise<void>;
}

/** `host:port` with IPv6 hosts bracketed. */
export function formatHostPort(host: string, port: number): string {
  return `${host.includes(':') ? `[${host}]` : host}:${port}`;
}

/**
 * Listen, then start the backend (see the file docs).
 * @throws what `listen` throws (EADDRINUSE, EACCES, …), after closing what was opened.
 */
export async function startServer(options: ServerOptions): Promise<RunningServer> {
  const { backend, logger } = options;
  const announce = options.announce ?? (() => undefined);
  let closing = false;
  const tls = options.security?.tls;
  const authToken = options.security?.authToken;
  const http = createHttpApp(backend, {
    logger,
    ...(options.metrics === undefined ? {} : { metrics: options.metrics }),
    ...(options.maxBodyBytes === undefined ? {} : { maxBodyBytes: options.maxBodyBytes }),
    ...(options.maxJsonBodyBytes === undefined ? {} : { maxJsonBodyBytes: options.maxJsonBodyBytes }),
    ...(options.timeouts === undefined ? {} : { timeouts: options.timeouts }),
    // codec threads start with the listener, so the first large body does not wait for one
    offload: { start: true },
    closing: () => closing,
    ...(options.dashboard === undefined ? {} : { dashboard: options.dashboard }),
    ...(tls === undefined ? {} : { tls }),
    ...(authToken === undefined ? {} : { authToken }),
  });
  let grpc: GrpcInferenceServer | undefined;
  let grpcPort: number | undefined;
  let httpUrl: string;
  try {
    await http.listen({ host: options.host, port: options.httpPort, backlog: HTTP_LISTEN_BACKLOG });
    const address = http.server.address();
    const port = typeof address === 'object' && address !== null ? address.port : options.httpPort;
    httpUrl = `${tls === undefined ? 'http' : 'https'}://${formatHostPort(options.host, port)}`;
    announce(`HTTP listening on ${httpUrl}${tls?.ca === undefined ? '' : ' (client certificates required)'}`);
    if (options.grpc !== undefined) {
      const limit = options.maxBodyBytes;
      grpc = options.grpc.factory(backend, { logger, requestTimeoutMs: options.timeouts?.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS, ...(limit === undefined ? {} : { maxReceiveMessageBytes: limit, maxSendMessageBytes: limit }), ...(tls === undefined ? {} : { tls }), ...(authToken === undefined ? {} : { authToken }) });
      grpcPort = await grpc.listen(options.host, options.grpc.port);
      announce(`gRPC listening on ${formatHostPort(options.host, grpcPort)}${tls === undefined ? '' : tls.ca === undefined ? ' (TLS)' : ' (TLS, client certificates required)'}`);
    }
    if (authToken !== undefined) announce('a bearer token is required on every request but the health probes (/v2/health/live, /v2/health/ready, ServerLive, ServerReady)');
  } catch (err) {
    await http.close();
    await grpc?.close(0);
    throw err;
  }

  let shutdownDone: Promise<void> | undefined;
  const abort = new AbortController();
  /** The engine being opened, closed again when the server shut down meanwhile; undefined then. */
  let opening: Promise<BackendEngine | undefined> = Promise.resolve(undefined);
  const shutdown = (graceMs: number): Promise<void> => {
    shutdownDone ??= (async () => {
      closing = true;
      abort.abort();
      const t0 = performance.now();
      logger.info({ graceMs }, 'shutting down');
      // an engine still opening (profiling, training) stops and closes what it opened
      if (!(await within(opening.catch(() => undefined), graceMs * 0.9))) logger.warn('the engine was still opening at the grace deadline');
      const backendDone = backend.shutdown(graceMs * 0.9);
      const httpDone = http.close();
      const grpcDone = grpc?.close(graceMs * 0.9) ?? Promise.resolve();
      await backendDone;
      const left = (): number => graceMs - (performance.now() - t0);
      if (!(await within(httpDone, left()))) {
        logger.warn('HTTP connections still open at the grace deadline: closing them');
        http.server.closeAllConnections();
        await within(httpDone, 1000);
      }
      await within(grpcDone, Math.max(left(), 100));
      logger.info({ shutdownMs: Math.round(performance.now() - t0) }, 'stopped');
    })();
    return shutdownDone;
  };

  const ready = (async () => {
    const t0 = performance.now();
    try {
      opening = options.openEngine(abort.signal).then(async (engine) => {
        if (!closing) return engine;
        await (engine.close?.() ?? engine.device.close());
        return undefined;
      });
      const engine = await opening;
      if (engine === undefined) return;
      await backend.start(engine);
      if (closing) return; // shut down while loading and warming up: not a start-up to announce
      const down = backend.repositoryIndex().filter((m) => m.state !== 'READY');
      const unavailable = down.length === 0 ? '' : `; UNAVAILABLE: ${down.map((m) => `${m.name} (${m.reason})`).join('; ')}`;
      const ms = Math.round(performance.now() - t0);
      if (backend.isReady()) announce(`ready: ${backend.modelList().join(', ')} (${ms} ms to load and warm up)${unavailable}`);
      else announce(`started, not ready: no model could be loaded${unavailable}`);
    } catch (err) {
      if (closing) {
        logger.info({ err: err instanceof Error ? err.message : String(err) }, 'start-up stopped by the shutdown');
        return;
      }
      logger.error({ err: err instanceof Error ? (err.stack ?? err.message) : String(err) }, 'start-up failed');
      await shutdown(1000);
      throw err;
    }
  })();
  // The caller awaits `ready`; this keeps an unobserved rejection from crashing the process first.
  ready.catch(() => undefined);
  return { httpUrl, grpcPort, http, ready, shutdown };
}
