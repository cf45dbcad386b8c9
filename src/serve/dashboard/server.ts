/**
 * A server for the dashboard alone (no inference routes): `abacus simulate --dashboard` serves
 * the replay of a finished simulation with it. `abacus serve` mounts the same routes on its
 * KServe app instead (`http/app.ts`).
 */
import { fastify, type FastifyBaseLogger } from 'fastify';
import type { Logger } from '../../log.ts';
import type { DashboardHub } from './hub.ts';
import { registerDashboardRoutes } from './routes.ts';

export interface DashboardServer {
  /** e.g. `http://127.0.0.1:8000` (the page: `${url}/dashboard`). */
  readonly url: string;
  /** Ends the event streams (`bye`) and stops listening. */
  close(): Promise<void>;
}

/**
 * Listen on `host:port` (0: any free port) and serve `hub`'s page and events.
 * @throws what listening throws (EADDRINUSE, EACCES, …).
 */
export async function startDashboardServer(hub: DashboardHub, options: { readonly host: string; readonly port: number; readonly logger?: Logger }): Promise<DashboardServer> {
  const logger: FastifyBaseLogger | undefined = options.logger;
  const app = fastify(logger === undefined ? { logger: false } : { loggerInstance: logger, disableRequestLogging: true });
  registerDashboardRoutes(app, hub);
  await app.listen({ host: options.host, port: options.port });
  const address = app.server.address();
  const port = typeof address === 'object' && address !== null ? address.port : options.port;
  const host = options.host.includes(':') ? `[${options.host}]` : options.host;
  return { url: `http://${host}:${port}`, close: () => app.close() };
}
