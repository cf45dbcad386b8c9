/**
 * KServe v2 / Open Inference Protocol over HTTP (fastify): the routes of the REST spec plus
 * `GET /metrics`, over any `InferenceBackend`. `createHttpApp` builds the app without
 * listening, so tests drive it with `app.inject`.
 *
 * | route | answer |
 * |---|---|
 * | `GET /v2` | server metadata (`extensions`: `binary_tensor_data`, `model_configuration`, `model_repository`, `statistics`) |
 * | `GET /v2/health/live` | 200 `{"live": true}` while the process serves |
 * | `GET /v2/health/ready` | 200 `{"ready": true}` once every model that can load is warmed up (at least one READY); 400 `{"ready": false}` before, with no READY model, and during shutdown (the spec: "4xx indicates false") |
 * | `GET /v2/models/{m}[/versions/{v}]` | model metadata, plus its `state` and `reason`; 404 unknown model or version |
 * | `GET /v2/models/{m}[/versions/{v}]/ready` | 200 `{"name", "ready": true}` only while the model is READY, else 400; 404 unknown |
 * | `POST /v2/models/{m}[/versions/{v}]/infer` | inference (`codec.ts`: JSON, binary tensor data extension) |
 * | `GET /v2/models` | KServe's model list `{"models": [names]}`: the READY models |
 * | `GET /v2/models/{m}[/versions/{v}]/config` | Triton model configuration (`ModelConfig`); 404 unknown |
 * | `GET /v2/models[/{m}[/versions/{v}]]/stats` | Triton statistics `{"model_stats": [ModelStatistics]}`; 404 unknown. `/v2/models/stats` is every model's statistics, never a model named `stats` (as in Triton) |
 * | `POST /v2/repository/index` | Triton repository index `[{"name", "version", "state", "reason"}]`; body `{"ready": true}` (optional): READY models only |
 * | `POST /v2/repository/models/{m}/load` / `…/unload` | Triton explicit model control (`--model-control explicit`; else 403); body `{"parameters": {"config": "<JSON service entry>"}}` (optional); 200 `{}` once READY / unloaded |
 * | `GET /metrics` | Prometheus text (when `metrics` is given) |
 * | `GET /dashboard[/…]` | the live dashboard and its event stream (when `dashboard` is given; `../dashboard/routes.ts`) |
 *
 * TLS and tokens (docs/tls.md): with `tls` the server is HTTPS
 * (client certificates required when it has a CA); with `authToken` every route but the health
 * probes answers 401 `{"error": ...}` with `WWW-Authenticate: Bearer` unless the request carries
 * `Authorization: Bearer <token>` (`../security.ts`).
 *
 * Request bodies may be compressed (`Content-Encoding: gzip | x-gzip | deflate`; a stream that
 * does not inflate is a 400 saying so, another encoding 415); the body limit counts inflated bytes.
 *
 * Limits and timeouts (docs/overload.md "Limits and timeouts"): a JSON body is held to
 * `maxJsonBodyBytes`, a binary-tensor request to `maxBodyBytes` (`limits.ts`); a body over its
 * limit is read and discarded before its 413, or refused before it is sent when the client asked
 * `Expect: 100-continue`; JSON nesting and keys are counted before parsing; large JSON is decoded
 * and encoded in codec threads (`offload.ts`); header, request and keep-alive timeouts
 * (`timeouts.ts`) close connections that hold still.
 * Responses of 1 KiB or more are compressed when the request's `Accept-Encoding` asks for gzip or
 * deflate (`compress.ts`; `Content-Encoding` and `Vary: Accept-Encoding` set), JSON, binary tensor
 * data, errors and `/metrics` alike; without the header they are sent as they are.
 *
 * Errors: body `{"error": "..."}` (plus the request's `"id"` when it gave one), `Content-Type:
 * application/json` exactly (every JSON answer: no `charset` parameter); status by
 * `ServeError.code` (`STATUS_OF`): bad_request 400, model_not_found 404, qos_violation 504 (not
 * to be retried), overloaded 503 with `Retry-After: 1`, not_ready / device_failure 503, forbidden 403, internal
 * 500 with a generic message (the log has the detail; never a stack trace). fastify's own
 * errors (body too large 413, malformed request 400, bad percent-encoding in the path 400, a
 * model name or version over 100 characters 414, …) keep their 4xx status with the same body
 * shape; unknown routes are 404.
 *
 * Logs: fastify logs through the given pino logger; every line about a request carries its
 * `reqId` (from the `x-request-id` header when the client sends one, else generated; echoed in
 * the `x-request-id` response header), which is also the backend's `InferRequest.requestId`.
 * One `request completed` line per request (info), errors at warn (4xx/503) or error (500).
 *
 * A client that disconnects before its answer aborts `InferRequest.signal`: the backend
 * withdraws a query that has not run.
 */
import { randomBytes } from 'node:crypto';
import { createServer, STATUS_CODES, type IncomingMessage, type Server, type ServerOptions, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { PassThrough, type Duplex, type Readable } from 'node:stream';
import { createGunzip, createInflate } from 'node:zlib';
import { fastify, LogController, type FastifyBaseLogger, type FastifyError, type FastifyInstance, type FastifyReply, type FastifyRequest } from 'fastify';
import type { Logger } from '../../log.ts';
import { MAX_REQUEST_ID_LENGTH, ServeError, type AdmissionTicket, type InferenceBackend, type ServeErrorCode } from '../inference.ts';
import type { DashboardHub } from '../dashboard/hub.ts';
import { registerDashboardRoutes } from '../dashboard/routes.ts';
import type { ServeMetrics } from '../metrics.ts';
import { authChallenge, authFailureMessage, bearerTokenMatches, OPEN_HTTP_ROUTES, type TlsMaterial } from '../security.ts';
import { INFERENCE_HEADER } from './codec.ts';
import { compressionHook, type CompressionOptions } from './compress.ts';
import { BodyPool, readBody, refuseBody } from './body.ts';
import { appliedLimit, declaredTooLarge, DEFAULT_JSON_LIMITS, DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_JSON_BODY_BYTES, scanJson, tooLargeMessage, type BodyLimits, type JsonLimits } from './limits.ts';
import { Offload, type OffloadOptions } from './offload.ts';
import { ShedPacer } from './shed-pacing.ts';
import { httpServerOptions, type HttpTimeouts } from './timeouts.ts';

/**
 * HTTP status of each `ServeErrorCode` (docs/serving.md "Status codes").
 *
 * `qos_violation` is 504 Gateway Timeout, not 503: the request's QoS deadline cannot be met any
 * more, by this node or another, so a balancer configured to retry 503 (the "another node may
 * serve it" status of `overloaded`, `not_ready`, `device_failure`) must not replay it. 504 is the
 * HTTP status google.rpc.Code gives DEADLINE_EXCEEDED, our gRPC code for it (`grpc/codec.ts`).
 * A balancer told to retry every 5xx or "gateway errors" (504 included) would still replay it:
 * retry on 503 only, or on `abacus-error-code: overloaded`.
 */
export const STATUS_OF: Readonly<Record<ServeErrorCode, number>> = {
  bad_request: 400,
  model_not_found: 404,
  qos_violation: 504,
  overloaded: 503,
  not_ready: 503,
  device_failure: 503,
  forbidden: 403,
  internal: 500,
};

/**
 * `Retry-After` of an `overloaded` 503, seconds. RFC 9110 §10.2.3 allows whole seconds only, and
 * 1 is the smallest that asks for a wait: a full queue (`maxQueueLength` queries of QoS targets
 * in the tens of ms) drains well within a second, so any longer wait would idle a node that can
 * serve again. A balancer retries another node at once; this hint is for the client.
 */
export const OVERLOADED_RETRY_AFTER_S = 1;

/** `Content-Encoding`s of request bodies this server decodes (RFC 9110 §8.4.1; `identity` is none). */
export const REQUEST_ENCODINGS = ['gzip', 'x-gzip', 'deflate', 'identity'] as const;

export { DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_JSON_BODY_BYTES };

export interface HttpAppOptions {
  /** pino logger for fastify and request lines; absent: no logs. */
  readonly logger?: Logger;
  readonly metrics?: ServeMetrics;
  /** Largest binary-tensor request body, bytes [`DEFAULT_MAX_BODY_BYTES`]; larger bodies get 413 (`limits.ts`). */
  readonly maxBodyBytes?: number;
  /** Largest JSON body, and JSON header of a binary request, bytes [the smaller of `DEFAULT_MAX_JSON_BODY_BYTES` and `maxBodyBytes`]; larger get 413. */
  readonly maxJsonBodyBytes?: number;
  /** JSON nesting and key limits, checked before parsing [`DEFAULT_JSON_LIMITS`]; past them a 400. */
  readonly jsonLimits?: JsonLimits;
  /**
   * Most bytes of a body over its limit read and discarded before the 413, so that clients that
   * send the whole body first can read it (`body.ts` `refuseBody`) [2 × `maxBodyBytes`]; 0: none.
   */
  readonly drainBytes?: number;
  /** Header, request and keep-alive timeouts of the listening server (`timeouts.ts`) [defaults there]. */
  readonly timeouts?: HttpTimeouts;
  /** Codec threads for large bodies (`offload.ts`) [defaults there]; `start: true` starts them with the app. */
  readonly offload?: OffloadOptions & { readonly start?: boolean };
  /** True while the server shuts down: responses then carry `Connection: close`. */
  readonly closing?: () => boolean;
  /** The live dashboard's hub: serves `/dashboard` and `/dashboard/events`; absent: no dashboard routes. */
  readonly dashboard?: DashboardHub;
  /**
   * Most bytes of request-body memory kept for reuse between requests (`body.ts` `BodyPool`)
   * [`DEFAULT_POOL_BYTES` = 64 MiB]; 0 keeps none (every large body is a fresh allocation).
   */
  readonly bodyPoolBytes?: number;
  /** Response compression on `Accept-Encoding` (`compress.ts`); `false` turns it off [on, defaults there]. */
  readonly compression?: CompressionOptions | false;
  /** Serve HTTPS with this certificate (and, with `ca`, require client certificates signed by it); absent: plain HTTP. */
  readonly tls?: TlsMaterial;
  /**
   * Require `Authorization: Bearer <authToken>` on every route but `OPEN_HTTP_ROUTES` (`../security.ts`):
   * others answer 401 with `WWW-Authenticate: Bearer` and `{"error": ...}`, before admission and before the body is read.
   */
  readonly authToken?: string;
}

interface ModelParams {
  name: string;
  version?: string;
}

const GENERIC_500 = 'internal server error; the server log has the details';

/** The infer routes' path (query string allowed); group 1 is the model name, still percent-encoded. */
const INFER_PATH = /^\/v2\/models\/([^/?]+)(?:\/versions\/[^/?]+)?\/infer(?:\?.*)?$/;

/** fastify's default `maxParamLength`: longer model names or versions in a path are 414. */
const MAX_PARAM_LENGTH = 100;

/** The `x-request-id` header's value (repeated headers joined as node joins them), or undefined when absent. */
function clientRequestId(header: string | string[] | undefined): string | undefined {
  return Array.isArray(header) ? header.join(', ') : header;
}

/** Build the app (not listening). The caller owns `listen` and `close`. */
export function createHttpApp(backend: InferenceBackend, options: HttpAppOptions = {}): FastifyInstance {
  const maxBodyBytes = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
  if (!Number.isSafeInteger(maxBodyBytes) || maxBodyBytes < 1) throw new RangeError(`maxBodyBytes must be an integer ≥ 1, got ${maxBodyBytes}`);
  const maxJsonBodyBytes = options.maxJsonBodyBytes ?? Math.min(DEFAULT_MAX_JSON_BODY_BYTES, maxBodyBytes);
  if (!Number.isSafeInteger(maxJsonBodyBytes) || maxJsonBodyBytes < 1) throw new RangeError(`maxJsonBodyBytes must be an integer ≥ 1, got ${maxJsonBodyBytes}`);
  const limits: BodyLimits = { maxBodyBytes, maxJsonBodyBytes };
  const jsonLimits = options.jsonLimits ?? DEFAULT_JSON_LIMITS;
  const drainBytes = options.drainBytes ?? 2 * maxBodyBytes;
  const offload = new Offload({ ...options.offload, jsonLimits, ...(options.logger === undefined ? {} : { logger: options.logger }) });
  const prefix = randomBytes(3).toString('hex');
  const pool = new BodyPool(options.bodyPoolBytes);
  let nextId = 0;
  const logger: FastifyBaseLogger | undefined = options.logger;
  // Admission before routing and before the body is read (`InferenceBackend.admit`), on node's
  // own request: a shed request is answered 503 `overloaded` with `Retry-After` at once (a resend
  // right after a shed on the same connection after a pause, `shed-pacing.ts`), without
  // fastify's routing, hooks or a log line (the backend logs a summary), and node discards its
  // body unread once the answer is out. Under overload this is most requests, so it must cost
  // next to nothing. An admitted request's ticket travels to `infer` (`InferRequest.admission`).
  const tickets = new WeakMap<IncomingMessage, AdmissionTicket>();
  let shedCount = 0;
  const pacer = new ShedPacer();
  const authToken = options.authToken;
  const admitRaw = (req: IncomingMessage, res: ServerResponse): boolean => {
    if (req.method !== 'POST' || backend.admit === undefined) return false;
    // without the token: no admission ticket; fastify's onRequest hook answers the 401
    if (authToken !== undefined && !bearerTokenMatches(req.headers.authorization, authToken)) return false;
    const m = INFER_PATH.exec(req.url ?? '');
    if (m === null) return false;
    let name: string;
    try {
      name = decodeURIComponent(m[1]!);
    } catch {
      return false; // fastify answers the bad percent-encoding
    }
    try {
      const ticket = backend.admit(name, undefined, 'body');
      if (ticket !== undefined) {
        tickets.set(req, ticket);
        res.once('close', ticket.settle);
      }
      return false;
    } catch (err) {
      if (!(err instanceof ServeError)) {
        // a bug in admission must not take the listener down: serve the request unadmitted
        logger?.error({ err: err instanceof Error ? (err.stack ?? err.message) : String(err) }, 'admission failed; the request goes on without it');
        return false;
      }
      const given = clientRequestId(req.headers['x-request-id']);
      const id = given !== undefined && given !== '' && given.length <= MAX_REQUEST_ID_LENGTH ? given : `${prefix}-s${(shedCount++).toString(36)}`;
      const body = JSON.stringify({ error: err.message });
      const answer = (): void => {
        if (res.destroyed) return;
        pacer.answered(req.socket, performance.now());
        res.writeHead(STATUS_OF[err.code], { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), 'retry-after': String(OVERLOADED_RETRY_AFTER_S), 'x-request-id': id, ...(options.closing?.() === true ? { connection: 'close' } : {}) });
        res.end(body);
      };
      // a resend right after a shed on the same connection waits for about one query's device time (`shed-pacing.ts`)
      const delayMs = pacer.delayMs(req.socket, err.retryInMs, performance.now());
      if (delayMs > 0) {
        options.metrics?.shedPaced(name);
        const timer = setTimeout(answer, delayMs);
        res.once('close', () => clearTimeout(timer));
      } else answer();
      return true;
    }
  };
  const app = fastify({
    serverFactory: (handler, opts) => {
      // what fastify sets on the server it creates itself (its defaults are in `opts`)
      const timeouts = opts as { keepAliveTimeout?: number; requestTimeout?: number; connectionTimeout?: number; http?: ServerOptions };
      const onRequest = (req: IncomingMessage, res: ServerResponse): void => {
        if (!admitRaw(req, res)) handler(req, res);
      };
      const tls = options.tls;
      // node's https.Server is an http.Server over TLS: the same events, timeouts and connection methods
      const server: Server = tls === undefined ? createServer({ ...(timeouts.http ?? {}) }, onRequest) : createHttpsServer({ ...(timeouts.http ?? {}), cert: tls.cert, key: tls.key, ...(tls.ca === undefined ? {} : { ca: tls.ca, requestCert: true, rejectUnauthorized: true }) }, onRequest);
      if (timeouts.keepAliveTimeout !== undefined) server.keepAliveTimeout = timeouts.keepAliveTimeout;
      if (timeouts.requestTimeout !== undefined) server.requestTimeout = timeouts.requestTimeout;
      server.setTimeout(timeouts.connectionTimeout ?? 0);
      return server;
    },
    ...(logger === undefined ? { logger: false } : { loggerInstance: logger }),
    logController: new LogController({ disableRequestLogging: true }),
    bodyLimit: Math.max(maxBodyBytes, maxJsonBodyBytes),
    ...httpServerOptions(options.timeouts),
    // the client's x-request-id when it is 1–MAX_REQUEST_ID_LENGTH characters (a longer one is
    // answered 400 in onRequest, under a generated id), else generated
    requestIdHeader: false,
    genReqId: (raw) => {
      const given = clientRequestId(raw.headers['x-request-id']);
      return given !== undefined && given !== '' && given.length <= MAX_REQUEST_ID_LENGTH ? given : `${prefix}-${(nextId++).toString(36)}`;
    },
    // Requests arriving while closing reach the routes: the backend answers 503 not_ready with our error body.
    return503OnClosing: false,
    forceCloseConnections: 'idle',
    // errors fastify raises before routing (bad percent-encoding, a path parameter over 100
    // characters): our body shape instead of fastify's `{"error": "Bad Request", "code": …}`
    frameworkErrors: (err, request, reply) => {
      const path = JSON.stringify(request.url.slice(0, 120));
      if (err.code === 'FST_ERR_BAD_URL') void sendError(request, reply, 400, `the URL path ${path} is not valid percent-encoding`);
      else if (err.code === 'FST_ERR_MAX_PARAM_LENGTH') void sendError(request, reply, 414, `a model name or version in the URL path is longer than ${MAX_PARAM_LENGTH} characters: ${path}`);
      else {
        request.log.error({ err: err.stack ?? err.message }, 'unexpected framework error');
        void sendError(request, reply, 500, GENERIC_500);
      }
    },
    // bytes that are not HTTP/1.1 (node's parser failed before there was a request): the same
    // `{"error": "..."}` shape as fastify's default handler's statuses (408, 431, 400), naming the parser's reason
    clientErrorHandler: clientError,
  });
  const metrics = options.metrics;

  // Every body is read as bytes: the infer route decodes JSON and binary tensor data itself.
  // A compressed body is inflated first; the body limit applies to the inflated bytes (fastify
  // counts what the preParsing stream yields), so a small bomb is a 413 like a large body.
  app.addHook('preParsing', (request, _reply, payload, done) => {
    try {
      done(null, decodedBody(request.headers['content-encoding'], payload));
    } catch (err) {
      done(err as Error);
    }
  });
  app.removeAllContentTypeParsers();
  // read into one buffer placed for the binary part (`body.ts`): no whole-body concatenation on
  // the loop. The limit by kind (`limits.ts`); a JSON body is not pooled: a large one is
  // transferred to a codec thread (`offload.ts`).
  app.addContentTypeParser('*', (request, payload, done) => {
    const binary = request.headers[INFERENCE_HEADER] !== undefined;
    const read = binary && declaredTooLarge(request.headers, limits) !== undefined ? refuseBody(payload, request.headers, drainBytes) : readBody(payload, request.headers, appliedLimit(request.headers, limits).bytes, binary ? pool : undefined, drainBytes);
    read.then(
      (body) => done(null, body),
      (err: Error) => done(err, undefined),
    );
  });
  // `Expect: 100-continue`: a body over its limit is refused before the client sends it (no
  // `100 Continue`; `readBody` then reads nothing and the connection closes after the 413)
  app.server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    // nor to a client without the token: its 401 comes first (health probes send no body)
    if (declaredTooLarge(req.headers, limits) === undefined && (authToken === undefined || bearerTokenMatches(req.headers.authorization, authToken))) res.writeContinue();
    app.server.emit('request', req, res);
  });
  if (options.offload?.start === true) app.addHook('onListen', (done) => {
    offload.start();
    done();
  });
  app.addHook('onClose', async () => {
    await offload.close();
  });

  const closing = options.closing ?? (() => false);
  app.addHook('onRequest', (request, reply, done) => {
    void reply.header('x-request-id', request.id);
    if (closing()) void reply.header('connection', 'close');
    const given = clientRequestId(request.headers['x-request-id']);
    // answered here, without done(): the route does not run
    if (given !== undefined && given.length > MAX_REQUEST_ID_LENGTH) void sendError(request, reply, 400, `the x-request-id header is ${given.length} characters long; at most ${MAX_REQUEST_ID_LENGTH}`);
    else done();
  });
  if (authToken !== undefined) {
    app.addHook('onRequest', (request, reply, done) => {
      const route = request.routeOptions.url;
      const open = (request.method === 'GET' || request.method === 'HEAD') && route !== undefined && OPEN_HTTP_ROUTES.includes(route);
      const header = request.headers.authorization;
      if (open || bearerTokenMatches(header, authToken)) {
        done();
        return;
      }
      void reply.header('www-authenticate', authChallenge(header));
      void sendError(request, reply, 401, authFailureMessage(header));
    });
  }
  // `application/json` exactly: fastify appends `; charset=utf-8` (JSON is UTF-8 by definition,
  // RFC 8259 §8.1), and KServe's REST client shows an error's text only for exactly `application/json`
  app.addHook('onSend', (_request, reply, payload, done) => {
    const type = reply.getHeader('content-type');
    if (typeof type === 'string' && /^application\/json\s*;\s*charset=utf-8$/i.test(type)) void reply.header('content-type', 'application/json');
    done(null, payload);
  });
  // after the content-type fix above: hooks run in the order they were added
  if (options.compression !== false) app.addHook('onSend', compressionHook(options.compression ?? {}));
  app.addHook('onResponse', (request, reply, done) => {
    request.log.info({ method: request.method, url: request.url, statusCode: reply.statusCode, responseTimeMs: Math.round(reply.elapsedTime * 1000) / 1000 }, 'request completed');
    done();
  });

  /** The error answer: body `{"error": message}` plus `"id"` when the request gave one. */
  const sendError = (request: FastifyRequest, reply: FastifyReply, status: number, message: string, id?: string): FastifyReply => {
    if (status >= 500 && status !== 503 && status !== 504) request.log.error({ statusCode: status, error: message }, 'request failed');
    else request.log.warn({ statusCode: status, error: message }, 'request refused');
    return reply.code(status).type('application/json').send(JSON.stringify(id === undefined ? { error: message } : { error: message, id }));
  };

  app.setErrorHandler((err: FastifyError, request, reply) => {
    if (err instanceof ServeError) {
      if (err.code === 'overloaded') void reply.header('retry-after', String(OVERLOADED_RETRY_AFTER_S));
      return sendError(request, reply, STATUS_OF[err.code] ?? 500, err.code === 'internal' ? err.message || GENERIC_500 : err.message, err.id);
    }
    const status = typeof err.statusCode === 'number' ? err.statusCode : 500;
    if (isInferRoute(request) && metrics !== undefined) metrics.request(modelOf(request), status >= 500 ? 'internal' : 'bad_request');
    if (status >= 400 && status < 500) {
      const message = err.code === 'FST_ERR_CTP_BODY_TOO_LARGE' ? (declaredTooLarge(request.headers, limits) ?? tooLargeMessage(appliedLimit(request.headers, limits), request.headers['content-encoding'] !== undefined)) : err.message;
      return sendError(request, reply, status, message);
    }
    request.log.error({ err: err.stack ?? err.message }, 'unexpected error');
    return sendError(request, reply, 500, GENERIC_500);
  });
  app.setNotFoundHandler((request, reply) => sendError(request, reply, 404, `no route ${request.method} ${request.url.slice(0, 200)} (KServe v2: /v2, /v2/health/{live,ready}, /v2/models, /v2/models/{name}[/versions/{v}][/ready|/infer|/config|/stats], /v2/models/stats, /v2/repository/index, /v2/repository/models/{name}/load|unload; /metrics)`));

  app.get('/v2', () => backend.serverMetadata());
  app.get('/v2/health/live', (_req, reply) => {
    const live = backend.isLive();
    return reply.code(live ? 200 : 503).send({ live });
  });
  app.get('/v2/health/ready', (_req, reply) => {
    const ready = backend.isReady();
    return reply.code(ready ? 200 : 400).send({ ready });
  });
  const metadata = (request: FastifyRequest<{ Params: ModelParams }>) => backend.modelMetadata(request.params.name, request.params.version);
  const modelReady = (request: FastifyRequest<{ Params: ModelParams }>, reply: FastifyReply) => {
    const ready = backend.modelReady(request.params.name, request.params.version);
    return reply.code(ready ? 200 : 400).send({ name: request.params.name, ready });
  };
  const infer = async (request: FastifyRequest<{ Params: ModelParams }>, reply: FastifyReply) => {
    const body = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
    try {
      return await inferBody(request, reply, body);
    } finally {
      // the backend keeps no reference to request data once infer settled (InferRequest docs);
      // the answer is encoded: the body's memory can serve the next request
      pool.give(body);
    }
  };
  const inferBody = async (request: FastifyRequest<{ Params: ModelParams }>, reply: FastifyReply, body: Buffer) => {
    const { name, version } = request.params;
    let decoded;
    try {
      const meta = backend.modelMetadata(name, version);
      const header = request.headers[INFERENCE_HEADER];
      decoded = await offload.decode(body, Array.isArray(header) ? header.join(',') : header, meta);
    } catch (err) {
      if (err instanceof ServeError) metrics?.request(name, err.code === 'model_not_found' ? 'model_not_found' : 'bad_request');
      throw err;
    }
    const abort = new AbortController();
    const onClose = (): void => {
      if (!reply.raw.writableFinished) abort.abort();
    };
    reply.raw.once('close', onClose);
    try {
      const admission = tickets.get(request.raw);
      const response = await backend.infer({ ...decoded.request, modelName: name, ...(version === undefined ? {} : { modelVersion: version }), requestId: request.id, signal: abort.signal, ...(admission === undefined ? {} : { admission }) });
      const encoded = await offload.encode(response, decoded.binaryOutputs);
      if (encoded.headerLength !== undefined) void reply.header('Inference-Header-Content-Length', String(encoded.headerLength));
      return reply.type(encoded.contentType).send(encoded.body);
    } catch (err) {
      const id = decoded.request.id;
      throw id !== undefined && err instanceof ServeError ? err.withId(id) : err;
    } finally {
      reply.raw.off('close', onClose);
    }
  };
  app.get('/v2/models/:name', metadata);
  app.get('/v2/models/:name/versions/:version', metadata);
  app.get('/v2/models/:name/ready', modelReady);
  app.get('/v2/models/:name/versions/:version/ready', modelReady);
  app.post('/v2/models/:name/infer', infer);
  app.post('/v2/models/:name/versions/:version/infer', infer);
  // Triton extensions and KServe's model list; static `/v2/models/stats` wins over `/v2/models/:name`
  app.get('/v2/models', () => ({ models: backend.modelList() }));
  const config = (request: FastifyRequest<{ Params: ModelParams }>) => backend.modelConfig(request.params.name, request.params.version);
  app.get('/v2/models/:name/config', config);
  app.get('/v2/models/:name/versions/:version/config', config);
  const stats = (request: FastifyRequest<{ Params: Partial<ModelParams> }>) => ({ model_stats: backend.modelStatistics(request.params.name, request.params.version) });
  app.get('/v2/models/stats', stats);
  app.get('/v2/models/:name/stats', stats);
  app.get('/v2/models/:name/versions/:version/stats', stats);
  // Triton's model repository extension. Load and unload take the model name from the rest of
  // the path, so that a name with slashes (`../x`, `%2F`-encoded) is a 400 naming it, not a 404.
  app.post('/v2/repository/index', (request) => {
    const body = jsonObjectBody(request, 'the repository index request', jsonLimits);
    // Triton's index request has `repository_name` (one repository here: any value lists it) and `ready`
    const unknown = Object.keys(body ?? {}).filter((k) => k !== 'ready' && k !== 'repository_name');
    if (unknown.length > 0) throw new ServeError('bad_request', `the repository index request: unknown field(s) ${unknown.map((k) => `'${k.slice(0, 40)}'`).join(', ')} (it has only "ready" and "repository_name")`);
    const ready = body?.['ready'];
    if (ready !== undefined && typeof ready !== 'boolean') throw new ServeError('bad_request', `ready must be true or false, got ${JSON.stringify(ready).slice(0, 40)}`);
    return backend.repositoryIndex(ready === true);
  });
  app.post('/v2/repository/models/*', async (request, reply) => {
    const rest = (request.params as Record<string, unknown>)['*'];
    const m = typeof rest === 'string' ? /^(.*)\/(load|unload)$/s.exec(rest) : null;
    if (m === null) return sendError(request, reply, 404, `no route ${request.method} ${request.url.slice(0, 200)} (repository extension: POST /v2/repository/index, /v2/repository/models/{name}/load, /v2/repository/models/{name}/unload)`);
    const name = m[1]!;
    const action = m[2] as 'load' | 'unload';
    const body = jsonObjectBody(request, `the ${action} request`, jsonLimits);
    const unknown = Object.keys(body ?? {}).filter((k) => k !== 'parameters');
    if (unknown.length > 0) throw new ServeError('bad_request', `${action} '${name.slice(0, 80)}': unknown field(s) ${unknown.map((k) => `'${k.slice(0, 40)}'`).join(', ')} (a ${action} request has only "parameters")`);
    const parameters: unknown = body?.['parameters'];
    if (parameters !== undefined && (typeof parameters !== 'object' || parameters === null || Array.isArray(parameters))) throw new ServeError('bad_request', `${action} '${name.slice(0, 80)}': parameters must be an object`);
    const params = parameters as Record<string, unknown> | undefined;
    if (action === 'load') await backend.loadModel(name, params);
    else await backend.unloadModel(name, params);
    return reply.code(200).send({});
  });
  if (metrics !== undefined) {
    app.get('/metrics', async (_req, reply) => reply.type(metrics.contentType).send(await metrics.text()));
  }
  if (options.dashboard !== undefined) registerDashboardRoutes(app, options.dashboard);
  return app;
}

/** Answer a connection whose bytes node's HTTP parser refused, then close it (after fastify's `defaultClientErrorHandler`). */
function clientError(this: FastifyInstance, err: NodeJS.ErrnoException & { reason?: string }, socket: Duplex): void {
  // a reset connection has nobody to answer
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  const status = err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 408 : err.code === 'HPE_HEADER_OVERFLOW' ? 431 : 400;
  const what = status === 408 ? 'the request did not arrive in time' : status === 431 ? 'the request headers are larger than the limit' : 'the bytes received are not a valid HTTP/1.1 request';
  const body = JSON.stringify({ error: `${what} (${err.code ?? 'parse error'}${typeof err.reason === 'string' ? `: ${err.reason}` : ''})` });
  this.log.debug({ code: err.code }, 'client error');
  if (socket.writable) socket.write(`HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ''}\r\nContent-Length: ${Buffer.byteLength(body)}\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n${body}`);
  socket.destroy(err);
}

/** An HTTP error raised while reading the body: fastify answers it with `statusCode` and our body shape. */
function bodyError(statusCode: number, message: string, cause?: unknown): Error {
  return Object.assign(new Error(message, cause === undefined ? undefined : { cause }), { statusCode });
}

/**
 * The body stream to parse for a request's `Content-Encoding`: `payload` itself when absent or
 * `identity`, an inflating stream for gzip / x-gzip / deflate (zlib format, RFC 9110 §8.4.1.2).
 * The stream reports the encoded bytes read as `receivedEncodedLength` (fastify checks them
 * against `Content-Length`). A stream that does not inflate fails with a 400 naming the encoding
 * and zlib's reason.
 * @throws Error with statusCode 415 for any other encoding, or more than one (RFC 9110 §15.5.16).
 */
function decodedBody(header: string | undefined, payload: Readable): Readable {
  const encoding = (header ?? '').trim().toLowerCase();
  if (encoding === '' || encoding === 'identity') return payload;
  if (encoding !== 'gzip' && encoding !== 'x-gzip' && encoding !== 'deflate') {
    throw bodyError(415, `Content-Encoding '${encoding.slice(0, 60)}' is not supported for request bodies (supported: ${REQUEST_ENCODINGS.join(', ')}, one at a time)`);
  }
  const inflate = encoding === 'deflate' ? createInflate() : createGunzip();
  const out = new PassThrough() as PassThrough & { receivedEncodedLength: number; source: Readable };
  out.receivedEncodedLength = 0;
  out.source = payload;
  payload.on('data', (chunk: Buffer) => {
    out.receivedEncodedLength += chunk.length;
  });
  payload.on('error', (err) => out.destroy(err));
  inflate.on('error', (err) => {
    payload.unpipe(inflate);
    payload.resume(); // drain the rest, so the connection can carry the answer and the next request
    out.destroy(bodyError(400, `the request body is not a valid ${encoding} stream (Content-Encoding: ${encoding}): ${err.message}`, err));
  });
  payload.pipe(inflate).pipe(out);
  return out;
}

/**
 * A request body that is a JSON object; undefined for an empty body.
 * @throws ServeError bad_request when it is not valid JSON or not an object.
 */
function jsonObjectBody(request: FastifyRequest, what: string, limits: JsonLimits): Record<string, unknown> | undefined {
  const body = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
  if (body.byteLength === 0) return undefined;
  const violation = scanJson(body, 0, body.byteLength, limits);
  if (violation !== undefined) throw new ServeError('bad_request', `${what}: ${violation}`);
  let value: unknown;
  try {
    value = JSON.parse(body.toString('utf8'));
  } catch (err) {
    throw new ServeError('bad_request', `${what}: the body is not valid JSON (${(err as Error).message})`);
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) throw new ServeError('bad_request', `${what}: the body must be a JSON object`);
  return value as Record<string, unknown>;
}

function isInferRoute(request: FastifyRequest): boolean {
  return request.method === 'POST' && (request.routeOptions.url?.endsWith('/infer') ?? false);
}

function modelOf(request: FastifyRequest): string {
  const params = request.params as Partial<ModelParams> | undefined;
  return typeof params?.name === 'string' ? params.name : '';
}
