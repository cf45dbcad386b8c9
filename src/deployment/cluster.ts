/**
 * A local multi-node deployment (issue 17, `abacus cluster`): N `abacus serve` processes on
 * loopback ports behind one HAProxy, configured by `haproxyConfig` (`haproxy.ts`). For trying
 * the scale-out path on one machine and for the node-loss test; on several hosts, run
 * `abacus serve` on each and `abacus cluster --print-haproxy-config --node …` for the balancer.
 *
 * Start order: the first node alone until it is ready (it profiles and trains the predictor if
 * none is cached, and caches it), then the others at once (they load it from the cache), then
 * HAProxy (`haproxy -db -f FILE`: foreground, so it is our child and ends with us). Nodes bind
 * ephemeral ports (`--http-port 0 --grpc-port 0`) and the ports are read from their
 * `… listening on …` lines; the frontends bind the ports asked for.
 *
 * Every process is a child of this one: `stop()` sends SIGTERM to the nodes (graceful: they
 * answer what they hold) and to HAProxy, and SIGKILL to any that has not exited after the
 * grace period. Nodes run with `--exit-with-parent`, so they also shut down if this process
 * dies without stopping them (SIGKILL); HAProxy does not watch its parent and would keep
 * running then (`kill` its pid, printed by `abacus cluster`).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { haproxyConfig, type HaproxyNode, type HaproxyOptions } from './haproxy.ts';

/** `bin/abacus.js` of this checkout. */
export const ABACUS_ENTRY = fileURLToPath(new URL('../../bin/abacus.js', import.meta.url));
/** Where Debian's `haproxy` package installs the binary. */
export const DEFAULT_HAPROXY_BIN = '/usr/sbin/haproxy';

/** Options of `startLocalCluster`. */
export interface LocalClusterOptions {
  /** The serving config every node serves (path). */
  readonly config: string;
  /** Number of `abacus serve` nodes, ≥ 1. */
  readonly nodes: number;
  /** Folder for `haproxy.cfg` and the nodes' logs (`node1.log`, …); created if missing. */
  readonly workDir: string;
  /** Port of HAProxy's HTTP frontend (0: a free port is picked). */
  readonly httpPort: number;
  /** Port of HAProxy's gRPC frontend (0: a free port is picked); absent: nodes run `--no-grpc`, no gRPC frontend. */
  readonly grpcPort?: number;
  /** Port of HAProxy's stats page and Prometheus exporter (0: a free port); absent: none. */
  readonly statsPort?: number;
  /** Interface the frontends bind [127.0.0.1]; nodes always bind 127.0.0.1. */
  readonly bindHost?: string;
  /** Extra `abacus serve` flags for every node (e.g. `--profile-samples 300`, `--predictor FILE`). */
  readonly serveFlags?: readonly string[];
  /** HAProxy binary [`/usr/sbin/haproxy`]. */
  readonly haproxyBin?: string;
  /** Environment of the children [process.env] (`ABACUS_CACHE_DIR`, `ABACUS_LOG_LEVEL`, …). */
  readonly env?: NodeJS.ProcessEnv;
  /** How long a node may take to get ready, ms [600000: the first may profile]. */
  readonly readyTimeoutMs?: number;
  /** Buffer, retry and timeout settings passed to `haproxyConfig`. */
  readonly haproxy?: Pick<HaproxyOptions, 'bufsizeBytes' | 'maxrewriteBytes' | 'maxconn' | 'retries' | 'checkIntervalMs' | 'serverTimeoutMs' | 'connectTimeoutMs'>;
  /** Progress lines (a node ready, HAProxy started). */
  readonly onLine?: (line: string) => void;
}

/** One running node. */
export interface ClusterNode {
  readonly name: string;
  readonly pid: number;
  /** `http://127.0.0.1:PORT` of the node itself (not through HAProxy). */
  readonly httpUrl: string;
  readonly httpPort: number;
  /** `127.0.0.1:PORT`; absent without gRPC. */
  readonly grpcPort?: number;
  /** Resolves with the exit code (null after a signal). */
  readonly exit: Promise<number | null>;
  /** Send a signal (SIGKILL simulates a crashed node, SIGTERM a drained one). */
  kill(signal: NodeJS.Signals): void;
}

/** A running local cluster. */
export interface LocalCluster {
  readonly nodes: readonly ClusterNode[];
  /** HAProxy's HTTP frontend, `http://HOST:PORT`. */
  readonly httpUrl: string;
  /** HAProxy's gRPC frontend, `HOST:PORT`; absent without gRPC. */
  readonly grpcAddress?: string;
  /** HAProxy's stats page base, `http://HOST:PORT` (`/stats`, `/stats;csv`, `/metrics`); absent without `statsPort`. */
  readonly statsUrl?: string;
  /** The generated `haproxy.cfg`. */
  readonly haproxyConfigFile: string;
  readonly haproxyPid: number;
  /** Resolves with HAProxy's exit code when it exits. */
  readonly haproxyExit: Promise<number | null>;
  /** SIGTERM every process, SIGKILL after `graceMs` [15000]; resolves when all have exited. */
  stop(graceMs?: number): Promise<void>;
}

/** A free TCP port on `host` (bound and released at once; another process could take it meanwhile). */
export async function freePort(host = '127.0.0.1'): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, host, () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address !== null ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

interface Child {
  readonly child: ChildProcess;
  readonly exit: Promise<number | null>;
}

function track(child: ChildProcess): Child {
  const exit = new Promise<number | null>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve(child.exitCode);
    else {
      child.once('exit', (code) => resolve(code));
      // a process that could not be spawned (ENOENT) emits 'error' and may never emit 'exit'
      child.once('error', () => resolve(child.exitCode));
    }
  });
  return { child, exit };
}

async function stopChild(c: Child, graceMs: number): Promise<void> {
  if (c.child.exitCode !== null || c.child.signalCode !== null || c.child.pid === undefined) return;
  c.child.kill('SIGTERM');
  const timer = setTimeout(() => c.child.kill('SIGKILL'), graceMs);
  try {
    await c.exit;
  } finally {
    clearTimeout(timer);
  }
}

async function startNode(name: string, options: LocalClusterOptions, logFile: string): Promise<ClusterNode & Child> {
  const log = await fs.open(logFile, 'w');
  const grpcFlags = options.grpcPort === undefined ? ['--no-grpc'] : ['--grpc-port', '0'];
  const child = spawn(process.execPath, [ABACUS_ENTRY, 'serve', '--config', options.config, '--host', '127.0.0.1', '--http-port', '0', ...grpcFlags, '--exit-with-parent', ...(options.serveFlags ?? [])], {
    env: options.env ?? process.env,
    // stderr (pino logs) to a file: a pipe nobody drains would stall the node's event loop
    stdio: ['ignore', 'pipe', log.fd],
  });
  const tracked = track(child);
  await log.close();
  let out = '';
  child.stdout?.on('data', (d: Buffer) => (out += d.toString()));
  const deadline = Date.now() + (options.readyTimeoutMs ?? 600_000);
  try {
    while (!/abacus serve: ready: /.test(out)) {
      if (child.exitCode !== null || child.signalCode !== null) throw new Error(`node ${name} exited ${child.exitCode ?? child.signalCode} before it got ready (log: ${logFile}):\n${out}`);
      if (Date.now() > deadline) throw new Error(`node ${name} did not get ready within ${options.readyTimeoutMs ?? 600_000} ms (log: ${logFile}):\n${out}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  } catch (err) {
    await stopChild(tracked, 1000);
    throw err;
  }
  const httpPort = Number(/HTTP listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(out)?.[1]);
  const grpcMatch = /gRPC listening on 127\.0\.0\.1:(\d+)/.exec(out)?.[1];
  if (!(httpPort > 0) || child.pid === undefined) {
    await stopChild(tracked, 1000);
    throw new Error(`node ${name}: no HTTP listening line in its output:\n${out}`);
  }
  return {
    ...tracked,
    name,
    pid: child.pid,
    httpUrl: `http://127.0.0.1:${httpPort}`,
    httpPort,
    ...(grpcMatch === undefined ? {} : { grpcPort: Number(grpcMatch) }),
    kill: (signal) => {
      child.kill(signal);
    },
  };
}

/** Poll `url` until it answers 200, `deadline` (ms since the epoch) passes, or `stop` is aborted. */
async function waitFor200(url: string, deadline: number, what: string, stop: AbortSignal): Promise<void> {
  for (;;) {
    if (stop.aborted) throw new Error(`${what}: stopped waiting for ${url}`);
    try {
      const r = await fetch(url, { signal: AbortSignal.any([AbortSignal.timeout(1000), stop]) });
      await r.arrayBuffer();
      if (r.status === 200) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`${what}: ${url} did not answer 200 in time`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * Start `options.nodes` nodes and HAProxy in front of them; resolves when every node is ready
 * and HAProxy answers ready on its HTTP frontend.
 * @throws RangeError for fewer than one node; Error naming the binary when HAProxy is not an
 *   executable file (before any node starts); Error with the node's output when a node exits
 *   or does not get ready in time, or when HAProxy refuses its config (all children stopped).
 */
export async function startLocalCluster(options: LocalClusterOptions): Promise<LocalCluster> {
  if (!Number.isInteger(options.nodes) || options.nodes < 1) throw new RangeError(`nodes must be an integer ≥ 1, got ${options.nodes}`);
  const haproxyBin = options.haproxyBin ?? DEFAULT_HAPROXY_BIN;
  try {
    await fs.access(haproxyBin, fs.constants.X_OK);
  } catch (err) {
    throw new Error(`haproxy: ${haproxyBin} is not an executable file (${(err as NodeJS.ErrnoException).code ?? String(err)}); install HAProxy (Debian: apt-get install haproxy) or pass its path`, { cause: err });
  }
  await fs.mkdir(options.workDir, { recursive: true });
  const say = options.onLine ?? (() => undefined);
  const started: (ClusterNode & Child)[] = [];
  const children: Child[] = [];
  const stopAll = async (graceMs: number): Promise<void> => {
    await Promise.all(children.map((c) => stopChild(c, graceMs)));
  };
  try {
    const first = await startNode('node1', options, path.join(options.workDir, 'node1.log'));
    started.push(first);
    children.push(first);
    say(`node1 ready at ${first.httpUrl}`);
    const rest = await Promise.allSettled(
      Array.from({ length: options.nodes - 1 }, async (_, i) => {
        const node = await startNode(`node${i + 2}`, options, path.join(options.workDir, `node${i + 2}.log`));
        started.push(node);
        children.push(node);
        say(`${node.name} ready at ${node.httpUrl}`);
        return node;
      }),
    );
    const failed = rest.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed !== undefined) throw failed.reason;
    started.sort((a, b) => a.name.localeCompare(b.name, 'en', { numeric: true }));
    const bindHost = options.bindHost ?? '127.0.0.1';
    const httpPort = options.httpPort === 0 ? await freePort(bindHost) : options.httpPort;
    const grpcPort = options.grpcPort === undefined ? undefined : options.grpcPort === 0 ? await freePort(bindHost) : options.grpcPort;
    const statsPort = options.statsPort === undefined ? undefined : options.statsPort === 0 ? await freePort(bindHost) : options.statsPort;
    const nodes: HaproxyNode[] = started.map((n) => ({ name: n.name, host: '127.0.0.1', httpPort: n.httpPort, ...(n.grpcPort === undefined ? {} : { grpcPort: n.grpcPort }) }));
    const text = haproxyConfig({ nodes, bindHost, httpPort, ...(grpcPort === undefined ? {} : { grpcPort }), ...(statsPort === undefined ? {} : { statsPort }), ...options.haproxy });
    const configFile = path.join(options.workDir, 'haproxy.cfg');
    await fs.writeFile(configFile, text);
    const haproxyLog = await fs.open(path.join(options.workDir, 'haproxy.log'), 'w');
    const hp = spawn(haproxyBin, ['-db', '-f', configFile], { stdio: ['ignore', haproxyLog.fd, haproxyLog.fd] });
    // listen for 'error' before any await: a failed spawn emits it on the next tick
    const haproxy = track(hp);
    children.push(haproxy);
    const spawnError = new Promise<never>((_, reject) => hp.once('error', reject));
    spawnError.catch(() => undefined);
    await haproxyLog.close();
    const host = bindHost === '0.0.0.0' ? '127.0.0.1' : bindHost;
    const exited = haproxy.exit.then(async (code): Promise<never> => {
      throw new Error(`haproxy exited ${code} before it served: ${await fs.readFile(path.join(options.workDir, 'haproxy.log'), 'utf8').catch(() => '')}`);
    });
    exited.catch(() => undefined);
    const giveUp = new AbortController();
    const served = waitFor200(`http://${host}:${httpPort}/v2/health/ready`, Date.now() + 30_000, 'haproxy', giveUp.signal);
    served.catch(() => undefined);
    try {
      await Promise.race([spawnError, exited, served]);
    } finally {
      giveUp.abort();
    }
    if (hp.pid === undefined) throw new Error('haproxy did not start');
    say(`haproxy: HTTP http://${host}:${httpPort}${grpcPort === undefined ? '' : `, gRPC ${host}:${grpcPort}`}${statsPort === undefined ? '' : `, stats http://${host}:${statsPort}/stats`} (config ${configFile})`);
    return {
      nodes: started,
      httpUrl: `http://${host}:${httpPort}`,
      ...(grpcPort === undefined ? {} : { grpcAddress: `${host}:${grpcPort}` }),
      ...(statsPort === undefined ? {} : { statsUrl: `http://${host}:${statsPort}` }),
      haproxyConfigFile: configFile,
      haproxyPid: hp.pid,
      haproxyExit: haproxy.exit,
      stop: (graceMs = 15_000) => stopAll(graceMs),
    };
  } catch (err) {
    await stopAll(1000);
    throw err;
  }
}
