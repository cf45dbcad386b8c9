/**
 * An `haproxy.cfg` for N `abacus serve` nodes behind one HAProxy 2.6 (docs/deploy.md): an HTTP
 * frontend (KServe v2 REST) and a gRPC frontend (HTTP/2 cleartext, `proto h2`), each with a
 * backend of every node, health-checked on `GET /v2/health/ready` (200 ready; 400 while
 * warming up or shutting down, so a node leaves the rotation before it stops listening).
 *
 * Retry semantics (docs/deploy.md "Retries"), decided with the status table of
 * docs/serving.md:
 * - `retry-on conn-failure empty-response 503`: a node that refuses the connection (down),
 *   closes it without answering (killed mid-request), or answers 503 (`overloaded`: its queue
 *   is full; `not_ready`: shutting down; `device_failure`) has the request replayed, and
 *   `option redispatch 1` sends every replay to another node.
 * - 504 (`qos_violation`: no node can meet the deadline any more) is never in the list, nor
 *   `response-timeout` (a slow node is not a failed one; replaying would double the work).
 * - gRPC answers its errors as HTTP 200 with a `grpc-status` trailer, so HAProxy cannot see an
 *   `overloaded` (UNAVAILABLE) there: on the gRPC frontend only connection failures and empty
 *   responses are replayed; clients retry UNAVAILABLE themselves (KServe's client does).
 *
 * The buffer limit: any retry condition other than `conn-failure` needs HAProxy to keep a copy
 * of the whole request in one buffer, and "Requests not fitting in a single buffer will never
 * be retried" (HAProxy 2.6 configuration.txt, `retry-on`); a request must fit in
 * `tune.bufsize − tune.maxrewrite` (headers included; `tune.bufsize`). `option
 * http-buffer-request` makes HAProxy read the body into that buffer before it picks a node.
 * Larger requests are forwarded (never refused by HAProxy) but a 503 or a dropped connection
 * reaches the client as is. The default buffer here, 1 MiB, holds a binary-tensor resnet50
 * request (1×3×224×224 FP32 = 602,112 bytes) with room; HAProxy allocates up to two buffers per
 * connection, so memory ≈ 2 × `bufsizeBytes` × `maxconn` (1 MiB × 256 → 512 MiB at most).
 */

/** One `abacus serve` node. */
export interface HaproxyNode {
  /** Server name in the config and HAProxy's logs: letters, digits, `-`, `_`, `.`. */
  readonly name: string;
  /** Address the node listens on (IPv4 or a host name). */
  readonly host: string;
  /** The node's `--http-port`. */
  readonly httpPort: number;
  /** The node's `--grpc-port`; absent: the node serves HTTP only (`--no-grpc`) and is left out of the gRPC backend. */
  readonly grpcPort?: number;
}

/** Options of `haproxyConfig`. */
export interface HaproxyOptions {
  readonly nodes: readonly HaproxyNode[];
  /** Interface the frontends bind [127.0.0.1]. */
  readonly bindHost?: string;
  /** Port of the HTTP frontend. */
  readonly httpPort: number;
  /** Port of the gRPC (h2c) frontend; absent: no gRPC frontend. */
  readonly grpcPort?: number;
  /** `tune.bufsize`, bytes [1 MiB]: with `maxrewriteBytes`, the largest request that can be replayed. At least 16384 (HTTP/2 needs it). */
  readonly bufsizeBytes?: number;
  /** `tune.maxrewrite`, bytes [1024], kept free in each buffer for header rewrites. */
  readonly maxrewriteBytes?: number;
  /** Global `maxconn` [256]. */
  readonly maxconn?: number;
  /** `retries`: replays after the first attempt [2]. */
  readonly retries?: number;
  /** Health check interval (`inter`), ms [1000]; a node is down after 2 failed checks and up after 2 good ones. */
  readonly checkIntervalMs?: number;
  /** `timeout server`, ms [30000]: longest wait for a node's answer (above every QoS target you serve). */
  readonly serverTimeoutMs?: number;
  /** `timeout connect`, ms [1000]. */
  readonly connectTimeoutMs?: number;
  /** Port of a stats frontend: HAProxy's stats page at `/stats` (`/stats;csv` for scripts) and its Prometheus exporter at `/metrics`; absent: none. */
  readonly statsPort?: number;
  /** Path of a Unix socket for HAProxy's runtime API (`stats socket`, level user: `show info`, …); absent: none. `startLocalCluster` asks it whether HAProxy serves. */
  readonly adminSocket?: string;
}

/** HAProxy's default `tune.bufsize` is 16384; this config's default is larger so a resnet50 binary request can be replayed. */
export const DEFAULT_HAPROXY_BUFSIZE_BYTES = 1 << 20;
/** HAProxy's default `tune.maxrewrite`. */
export const DEFAULT_HAPROXY_MAXREWRITE_BYTES = 1024;
/** HTTP/2 needs buffers of at least this size (configuration.txt, `tune.bufsize`). */
export const MIN_HAPROXY_BUFSIZE_BYTES = 16384;
/** Path the backends are health-checked on: 200 when the node is ready (docs/serving.md "Routes"). */
export const READY_PATH = '/v2/health/ready';
/** The conditions an HTTP request is replayed on another node for (`retry-on`); never 504. */
export const HTTP_RETRY_ON = ['conn-failure', 'empty-response', '503'] as const;
/** The conditions a gRPC call is replayed on (its errors travel in trailers, invisible to `retry-on` status codes). */
export const GRPC_RETRY_ON = ['conn-failure', 'empty-response'] as const;

/**
 * The largest request (headers and body, bytes) HAProxy can replay under these options:
 * `bufsizeBytes − maxrewriteBytes` (configuration.txt, `tune.bufsize` and `retry-on`).
 * HAProxy's internal representation of the headers takes some of it, so keep requests
 * that must be replayable a few KB below.
 */
export function replayableRequestBytes(options: Pick<HaproxyOptions, 'bufsizeBytes' | 'maxrewriteBytes'> = {}): number {
  return (options.bufsizeBytes ?? DEFAULT_HAPROXY_BUFSIZE_BYTES) - (options.maxrewriteBytes ?? DEFAULT_HAPROXY_MAXREWRITE_BYTES);
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]*$/;
const HOST = /^[A-Za-z0-9][A-Za-z0-9.:-]*$/;

function checkPort(field: string, value: number): void {
  if (!Number.isInteger(value) || value < 1 || value > 65_535) throw new RangeError(`${field} must be a port in [1, 65535], got ${value}`);
}

function checkPositive(field: string, value: number, min = 1): void {
  if (!Number.isInteger(value) || value < min) throw new RangeError(`${field} must be an integer ≥ ${min}, got ${value}`);
}

/**
 * The text of an `haproxy.cfg` (HAProxy 2.6) for `options.nodes`.
 * @throws RangeError naming the field for no nodes, a bad port, a bufsize under 16384, a
 *   maxrewrite not below half the bufsize, or a non-positive count or time.
 * @throws TypeError for a node name or host HAProxy would misread (spaces, quotes, …) or a repeated name.
 */
export function haproxyConfig(options: HaproxyOptions): string {
  const { nodes } = options;
  if (nodes.length === 0) throw new RangeError('nodes must name at least one node');
  const names = new Set<string>();
  nodes.forEach((n, i) => {
    if (!NAME.test(n.name)) throw new TypeError(`nodes[${i}].name must be letters, digits, '-', '_' or '.', got '${n.name}'`);
    if (names.has(n.name)) throw new TypeError(`nodes[${i}].name '${n.name}' is repeated`);
    names.add(n.name);
    if (!HOST.test(n.host)) throw new TypeError(`nodes[${i}].host must be an address or host name, got '${n.host}'`);
    checkPort(`nodes[${i}].httpPort`, n.httpPort);
    if (n.grpcPort !== undefined) checkPort(`nodes[${i}].grpcPort`, n.grpcPort);
  });
  const bindHost = options.bindHost ?? '127.0.0.1';
  if (!HOST.test(bindHost)) throw new TypeError(`bindHost must be an address, got '${bindHost}'`);
  checkPort('httpPort', options.httpPort);
  if (options.grpcPort !== undefined) checkPort('grpcPort', options.grpcPort);
  if (options.statsPort !== undefined) checkPort('statsPort', options.statsPort);
  if (options.adminSocket !== undefined && !/^\/[^\s"'#\\]+$/.test(options.adminSocket)) throw new TypeError(`adminSocket must be an absolute path without spaces, quotes or '#', got '${options.adminSocket}'`);
  const bufsize = options.bufsizeBytes ?? DEFAULT_HAPROXY_BUFSIZE_BYTES;
  checkPositive('bufsizeBytes', bufsize, MIN_HAPROXY_BUFSIZE_BYTES);
  const maxrewrite = options.maxrewriteBytes ?? DEFAULT_HAPROXY_MAXREWRITE_BYTES;
  if (!Number.isInteger(maxrewrite) || maxrewrite < 0 || maxrewrite >= bufsize / 2) throw new RangeError(`maxrewriteBytes must be an integer in [0, bufsizeBytes / 2), got ${maxrewrite}`);
  const maxconn = options.maxconn ?? 256;
  checkPositive('maxconn', maxconn);
  const retries = options.retries ?? 2;
  checkPositive('retries', retries, 0);
  const inter = options.checkIntervalMs ?? 1000;
  checkPositive('checkIntervalMs', inter);
  const serverTimeout = options.serverTimeoutMs ?? 30_000;
  checkPositive('serverTimeoutMs', serverTimeout);
  const connectTimeout = options.connectTimeoutMs ?? 1000;
  checkPositive('connectTimeoutMs', connectTimeout);
  const grpcNodes = nodes.filter((n) => n.grpcPort !== undefined);
  if (options.grpcPort !== undefined && grpcNodes.length === 0) throw new RangeError('grpcPort is set but no node has a grpcPort');

  const check = `check inter ${inter}ms fall 2 rise 2`;
  const lines = [
    '# generated by abacus (src/deployment/haproxy.ts); HAProxy 2.6. See docs/deploy.md.',
    'global',
    `  maxconn ${maxconn}`,
    `  # requests up to tune.bufsize - tune.maxrewrite = ${bufsize - maxrewrite} bytes (headers included) can be replayed;`,
    '  # larger ones are forwarded but never retried. Memory: up to 2 buffers per connection.',
    `  tune.bufsize ${bufsize}`,
    `  tune.maxrewrite ${maxrewrite}`,
    ...(options.adminSocket === undefined ? [] : [`  stats socket ${options.adminSocket} mode 600 level user`]),
    '',
    'defaults',
    '  mode http',
    '  log stderr format raw local0 notice',
    `  timeout connect ${connectTimeout}ms`,
    '  timeout client 60s',
    `  timeout server ${serverTimeout}ms`,
    '  timeout http-request 30s',
    '  timeout check 2s',
    '  # read the whole body (up to the buffer) before choosing a node, so it can be replayed',
    '  option http-buffer-request',
    '  option forwardfor',
    `  retries ${retries}`,
    '  # every replay goes to another node',
    '  option redispatch 1',
    '',
    'frontend abacus_http',
    `  bind ${bindHost}:${options.httpPort}`,
    '  default_backend abacus_http_nodes',
    '',
    'backend abacus_http_nodes',
    '  balance leastconn',
    `  option httpchk GET ${READY_PATH}`,
    '  http-check expect status 200',
    '  # 503: overloaded (queue full), not_ready, device_failure. Never 504 (qos_violation) or response-timeout.',
    `  retry-on ${HTTP_RETRY_ON.join(' ')}`,
    ...nodes.map((n) => `  server ${n.name} ${n.host}:${n.httpPort} ${check}`),
  ];
  if (options.grpcPort !== undefined) {
    lines.push(
      '',
      'frontend abacus_grpc',
      `  bind ${bindHost}:${options.grpcPort} proto h2`,
      '  default_backend abacus_grpc_nodes',
      '',
      'backend abacus_grpc_nodes',
      '  balance leastconn',
      '  # checked over HTTP/1.1 on the node\'s HTTP port: the gRPC port serves no /v2/health/ready',
      `  option httpchk GET ${READY_PATH}`,
      '  http-check expect status 200',
      '  # gRPC errors are trailers of an HTTP 200: only transport failures are visible here',
      `  retry-on ${GRPC_RETRY_ON.join(' ')}`,
      ...grpcNodes.map((n) => `  server ${n.name} ${n.host}:${n.grpcPort} proto h2 ${check} port ${n.httpPort} check-proto h1`),
    );
  }
  if (options.statsPort !== undefined) {
    lines.push(
      '',
      'frontend abacus_stats',
      `  bind ${bindHost}:${options.statsPort}`,
      '  http-request use-service prometheus-exporter if { path /metrics }',
      '  stats enable',
      '  stats uri /stats',
      '  stats refresh 5s',
    );
  }
  return `${lines.join('\n')}\n`;
}
