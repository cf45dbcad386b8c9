/**
 * The dashboard's HTTP routes (fastify), registered by `createHttpApp` when it is given a hub:
 *
 * | route | answer |
 * |---|---|
 * | `GET /dashboard` | the page (`assets/index.html`) |
 * | `GET /dashboard/dashboard.js` | its script: the committed esbuild bundle of `dashboard/main.ts` with chart.js (`npm run build:dashboard`) |
 * | `GET /dashboard/events` | Server-Sent Events (`text/event-stream`, `protocol.ts`), from `DashboardHub` |
 *
 * Everything is served from the package: nothing is fetched from elsewhere at run time, so the
 * page works offline. The assets are read once, on the first request. When the app closes, every
 * event stream is ended first (`preClose`), so open pages never hold a graceful shutdown up.
 */
import { readFileSync } from 'node:fs';
import type { FastifyInstance, FastifyReply } from 'fastify';
import type { DashboardHub } from './hub.ts';

/** Files of the page, under `src/serve/dashboard/assets/`. */
export const DASHBOARD_ASSETS = { html: 'index.html', script: 'dashboard.js' } as const;

/** Absolute URL of a dashboard asset in the package. */
export function dashboardAssetUrl(name: string): URL {
  return new URL(`./assets/${name}`, import.meta.url);
}

/** SSE comment sent every this many ms so that proxies keep an idle stream open. */
const KEEPALIVE_MS = 15_000;

export function registerDashboardRoutes(app: FastifyInstance, hub: DashboardHub): void {
  const cache = new Map<string, Buffer>();
  const asset = (name: string): Buffer => {
    let b = cache.get(name);
    if (b === undefined) cache.set(name, (b = readFileSync(dashboardAssetUrl(name))));
    return b;
  };
  const page = (_req: unknown, reply: FastifyReply): FastifyReply => reply.type('text/html; charset=utf-8').header('cache-control', 'no-cache').send(asset(DASHBOARD_ASSETS.html));
  app.get('/dashboard', page);
  app.get('/dashboard/', page);
  app.get('/dashboard/dashboard.js', (_req, reply) => reply.type('text/javascript; charset=utf-8').header('cache-control', 'no-cache').send(asset(DASHBOARD_ASSETS.script)));
  app.get('/dashboard/events', (request, reply) => {
    reply.hijack();
    const res = reply.raw;
    res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache, no-transform', connection: 'keep-alive', 'x-accel-buffering': 'no', 'x-request-id': request.id });
    res.write(': abacus dashboard\n\n');
    const keepalive = setInterval(() => res.write(': keepalive\n\n'), KEEPALIVE_MS);
    keepalive.unref();
    let open = true;
    const detach = hub.attach({
      send: (event, data) => {
        if (open) res.write(`event: ${event}\ndata: ${data}\n\n`);
      },
      bufferedBytes: () => res.writableLength,
      end: () => {
        open = false;
        clearInterval(keepalive);
        res.end();
      },
    });
    res.on('close', () => {
      open = false;
      clearInterval(keepalive);
      detach();
    });
  });
  app.addHook('preClose', (done) => {
    hub.close('the server is shutting down');
    done();
  });
}
