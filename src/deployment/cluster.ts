/**
 * A local multi-node deployment (docs/deploy.md, `abacus cluster`): N `abacus serve` processes on
 * loopback ports behind one HAProxy, configured by `haproxyConfig` (`haproxy.ts`). For trying
 * the scale-out path on one machine and for the node-loss test; on several hosts, run
 * `abacus serve` on each and `abacus cluster --print-haproxy-config --node …` for the balancer.
 *
 * Start order: the first node alone until it is ready (it profiles and trains the predictor if
 * none is cached, and caches it), then the others at once (they load it from the cache), then
 * HAProxy (`haproxy -db -f FILE`: foreground, so it is our child and ends with us). Nodes bind
 * ephemeral ports (`--http-port 0 --grpc-port 0`) and the ports are read from their
 * `… listening on …` lines; the frontends bind the ports asked for. The config and the frontend
 * ports are checked before any node starts; HAProxy counts as serving once its runtime API
 * (a Unix socket in the work dir) answers with its pid and a node answers ready through it.
 * Failures are `ClusterError`s quoting the process's log (docs/deploy.md has the table).
 *
 * Every process is a child of this one: `stop()` sends SIGTERM to the nodes (graceful: they
 * answer what they hold) and to HAProxy, and SIGKILL to any that has not exited after the
 * grace period. Nodes run with `--exit-with-parent`, so they also shut down if this process
 * dies without stopping them (SIGKILL); HAProxy does not watch its parent and would keep
 * running then (`kill` its pid, on the `haproxy pid …` progress line).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { loadServingConfig } from '../runtime/config.ts';
import { haproxyConfig, type HaproxyNode, type HaproxyOptions } from './haproxy.ts';

/**
 * Stable codes of `ClusterError`: `port_in_use` (a frontend port is taken, found before any node
 * starts), `node_exited` / `node_not_ready` (a node ended or timed out while starting),
 * `haproxy_bind` (HAProxy could not bind a frontend), `haproxy_failed` (HAProxy ended or did not
 * answer before it served), `haproxy_exited` (HAProxy ended while serving), `no_nodes_left`
 * (the last node ended while serving).
 */
export type ClusterErrorCode = 'port_in_use' | 'node_exited' | 'node_not_ready' | 'haproxy_bind' | 'haproxy_failed' | 'haproxy_exited' | 'no_nodes_left';

/** A local cluster that could not start or stopped serving; the message names the process and quotes its log. */
export class ClusterError extends Error {
  readonly code: ClusterErrorCode;
  constructor(code: ClusterErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = 'ClusterError';
  }
}

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
  /**
   * Progress lines (starting, a node ready, HAProxy started) and, once serving, a line for each
   * node that exits: `node node1 exited (signal SIGKILL); 2 of 3 nodes left; HAProxy routes around it`.
   */
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
  /**
   * Resolves (never rejects) with the reason when the cluster stops serving on its own: HAProxy
   * exited (`haproxy_exited`, with its log's last lines) or the last node did (`no_nodes_left`).
   * A node lost while others remain is only reported through `onLine`. Never resolves after `stop()`.
   */
  readonly failure: Promise<ClusterError>;
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

/** How a child ended: its exit code, or the signal that ended it. */
interface ExitStatus {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

interface Child {
  readonly child: ChildProcess;
  readonly exit: Promise<number | null>;
  readonly status: Promise<ExitStatus>;
}

function track(child: ChildProcess): Child {
  const status = new Promise<ExitStatus>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve({ code: child.exitCode, signal: child.signalCode });
    else {
      child.once('exit', (code, signal) => resolve({ code, signal }));
      // a process that could not be spawned (ENOENT) emits 'error' and may never emit 'exit'
      child.once('error', () => resolve({ code: child.exitCode, signal: child.signalCode }));
    }
  });
  return { child, exit: status.then((s) => s.code), status };
}

/** `1`, or `(signal SIGKILL)`. */
function describeExit(status: ExitStatus): string {
  return status.code !== null ? String(status.code) : `(signal ${status.signal ?? 'unknown'})`;
}

/** The last `n` non-empty lines of `text`, each on its own indented line; `no output` when there are none. */
function lastLines(text: string, n = 10): string {
  const lines = text.split('\n').map((l) => l.trimEnd()).filter((l) => l.trim() !== '');
  return lines.length === 0 ? 'no output' : `\n${lines.slice(-n).map((l) => `  ${l}`).join('\n')}`;
}

async function readLog(file: string): Promise<string> {
  return fs.readFile(file, 'utf8').catch(() => '');
}

/**
 * Whether `host:port` is taken (EADDRINUSE); other bind errors (EACCES, EADDRNOTAVAIL) count as
 * free and are left for HAProxy to report. Another process could take the port after the
 * check: HAProxy's own bind failure is reported too (`haproxyExitError`).
 */
async function portInUse(host: string, port: number): Promise<boolean> {
  return new Promise<boolean>((resolve) => {
    const server = net.createServer();
    server.once('error', (err: NodeJS.ErrnoException) => resolve(err.code === 'EADDRINUSE'));
    server.listen({ host, port, exclusive: true }, () => server.close(() => resolve(false)));
  });
}

/**
 * The error for HAProxy ending (`phase`: before it served, or while serving): a bind failure
 * quotes the `cannot bind` lines of its log; anything else quotes the log's last lines (or says `no output`).
 */
async function haproxyExitError(bin: string, status: ExitStatus, logFile: string, phase: 'before it served' | 'while serving'): Promise<ClusterError> {
  const text = await readLog(logFile);
  const bindLines = text.split('\n').filter((l) => /cannot bind/.test(l));
  if (bindLines.length > 0) {
    const addresses = [...text.matchAll(/cannot bind socket \(([^)]*)\)(?: for)? \[([^\]]+)\]/g)].map((m) => `${m[2]!} (${/already in use/i.test(m[1]!) ? 'address in use' : m[1]!.toLowerCase()})`);
    return new ClusterError('haproxy_bind', `haproxy: cannot bind ${addresses.length > 0 ? addresses.join(', ') : 'a frontend'} — see ${logFile}:${lastLines(bindLines.join('\n'))}`);
  }
  return new ClusterError(phase === 'before it served' ? 'haproxy_failed' : 'haproxy_exited', `haproxy (${bin}) exited ${describeExit(status)} ${phase}; its output${quoteOutput(text, logFile)}`);
}

/** `: no output (FILE is empty)`, or ` (last lines of FILE):` and the lines. */
function quoteOutput(text: string, logFile: string): string {
  const output = lastLines(text);
  return output === 'no output' ? `: no output (${logFile} is empty)` : ` (last lines of ${logFile}):${output}`;
}

/** Ask HAProxy's runtime API on `socketFile` for `show info`; the text, or '' when it does not answer. */
async function showInfo(socketFile: string, stop: AbortSignal): Promise<string> {
  return new Promise((resolve) => {
    let text = '';
    const socket = net.connect(socketFile);
    const done = (): void => {
      socket.destroy();
      stop.removeEventListener('abort', done);
      resolve(text);
    };
    stop.addEventListener('abort', done);
    socket.setTimeout(1000, done);
    socket.on('connect', () => socket.end('show info\n'));
    socket.on('data', (d: Buffer) => (text += d.toString()));
    socket.on('error', done);
    socket.on('close', done);
  });
}

/** Poll HAProxy's runtime API until process `pid` answers (its frontends are bound then), `deadline` passes or `stop` is aborted. */
async function waitForHaproxyInfo(socketFile: string, pid: number, deadline: number, stop: AbortSignal): Promise<void> {
  for (;;) {
    if (stop.aborted) throw new Error(`haproxy: stopped waiting for ${socketFile}`);
    if (new RegExp(`^Pid: ${pid}$`, 'm').test(await showInfo(socketFile, stop))) return;
    if (Date.now() > deadline) throw new Error(`haproxy: its runtime socket ${socketFile} did not answer in time`);
    await new Promise((r) => setTimeout(r, 100));
  }
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
      if (child.exitCode !== null || child.signalCode !== null) {
        const status = await tracked.status;
        throw new ClusterError('node_exited', `node ${name} exited ${describeExit(status)} before it got ready; its output (last lines of its stdout and ${logFile}):${lastLines(`${out}\n${await readLog(logFile)}`)}`);
      }
      if (Date.now() > deadline) throw new ClusterError('node_not_ready', `node ${name} did not get ready within ${options.readyTimeoutMs ?? 600_000} ms; its output (last lines of its stdout and ${logFile}):${lastLines(`${out}\n${await readLog(logFile)}`)}`);
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
 * Start `options.nodes` nodes and HAProxy in front of them; resolves when every node is ready,
 * HAProxy answers on its runtime socket (so it, not some other listener, holds the frontend
 * ports) and answers ready on its HTTP frontend.
 * @throws InvalidConfigError for a config `abacus serve` would refuse (before anything starts);
 *   RangeError for fewer than one node; Error naming the binary when HAProxy is not an
 *   executable file (before any node starts); `ClusterError` when a frontend port is in use
 *   (before any node starts), a node exits or does not get ready in time (quoting its log), or
 *   HAProxy cannot bind, exits or does not answer before it serves (quoting its output). All
 *   children are stopped before it throws.
 */
export async function startLocalCluster(options: LocalClusterOptions): Promise<LocalCluster> {
  if (!Number.isInteger(options.nodes) || options.nodes < 1) throw new RangeError(`nodes must be an integer ≥ 1, got ${options.nodes}`);
  await loadServingConfig(options.config);
  const haproxyBin = options.haproxyBin ?? DEFAULT_HAPROXY_BIN;
  try {
    await fs.access(haproxyBin, fs.constants.X_OK);
  } catch (err) {
    throw new Error(`haproxy: ${haproxyBin} is not an executable file (${(err as NodeJS.ErrnoException).code ?? String(err)}); install HAProxy (Debian: apt-get install haproxy) or pass its path`, { cause: err });
  }
  const bindHost = options.bindHost ?? '127.0.0.1';
  const frontends: [number | undefined, string][] = [
    [options.httpPort, 'HTTP frontend'],
    [options.grpcPort, 'gRPC frontend'],
    [options.statsPort, 'stats frontend'],
  ];
  const inUse: string[] = [];
  for (const [port, what] of frontends) if (port !== undefined && port !== 0 && (await portInUse(bindHost, port))) inUse.push(`${bindHost}:${port} for the ${what}`);
  if (inUse.length > 0) throw new ClusterError('port_in_use', `haproxy: cannot bind ${inUse.join(', ')} (address in use); stop what listens there or pick another port (0: any free port)`);
  const workDir = path.resolve(options.workDir);
  await fs.mkdir(workDir, { recursive: true });
  const say = options.onLine ?? (() => undefined);
  say(`starting ${options.nodes} nodes of ${options.config} (logs in ${workDir}) …`);
  const started: (ClusterNode & Child)[] = [];
  const children: Child[] = [];
  let stopping = false;
  let socketDir: string | undefined;
  const stopAll = async (graceMs: number): Promise<void> => {
    stopping = true;
    await Promise.all(children.map((c) => stopChild(c, graceMs)));
    if (socketDir !== undefined) await fs.rm(socketDir, { recursive: true, force: true });
  };
  try {
    const first = await startNode('node1', options, path.join(workDir, 'node1.log'));
    started.push(first);
    children.push(first);
    say(`node1 ready at ${first.httpUrl}`);
    const rest = await Promise.allSettled(
      Array.from({ length: options.nodes - 1 }, async (_, i) => {
        const node = await startNode(`node${i + 2}`, options, path.join(workDir, `node${i + 2}.log`));
        started.push(node);
        children.push(node);
        say(`${node.name} ready at ${node.httpUrl}`);
        return node;
      }),
    );
    const failed = rest.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed !== undefined) throw failed.reason;
    started.sort((a, b) => a.name.localeCompare(b.name, 'en', { numeric: true }));
    const httpPort = options.httpPort === 0 ? await freePort(bindHost) : options.httpPort;
    const grpcPort = options.grpcPort === undefined ? undefined : options.grpcPort === 0 ? await freePort(bindHost) : options.grpcPort;
    const statsPort = options.statsPort === undefined ? undefined : options.statsPort === 0 ? await freePort(bindHost) : options.statsPort;
    // a Unix socket path holds at most 107 bytes: a long work dir gets a short folder of its own
    let adminSocket = path.join(workDir, 'haproxy.sock');
    if (adminSocket.length > 100) {
      socketDir = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-haproxy-'));
      adminSocket = path.join(socketDir, 'haproxy.sock');
    }
    await fs.rm(adminSocket, { force: true });
    const nodes: HaproxyNode[] = started.map((n) => ({ name: n.name, host: '127.0.0.1', httpPort: n.httpPort, ...(n.grpcPort === undefined ? {} : { grpcPort: n.grpcPort }) }));
    const text = haproxyConfig({ nodes, bindHost, httpPort, ...(grpcPort === undefined ? {} : { grpcPort }), ...(statsPort === undefined ? {} : { statsPort }), adminSocket, ...options.haproxy });
    const configFile = path.join(workDir, 'haproxy.cfg');
    await fs.writeFile(configFile, text);
    const haproxyLogFile = path.join(workDir, 'haproxy.log');
    const haproxyLog = await fs.open(haproxyLogFile, 'w');
    const hp = spawn(haproxyBin, ['-db', '-f', configFile], { stdio: ['ignore', haproxyLog.fd, haproxyLog.fd] });
    // listen for 'error' before any await: a failed spawn emits it on the next tick
    const haproxy = track(hp);
    children.push(haproxy);
    const spawnError = new Promise<never>((_, reject) => hp.once('error', reject));
    spawnError.catch(() => undefined);
    await haproxyLog.close();
    const host = bindHost === '0.0.0.0' ? '127.0.0.1' : bindHost;
    const exited = haproxy.status.then(async (status): Promise<never> => {
      throw await haproxyExitError(haproxyBin, status, haproxyLogFile, 'before it served');
    });
    exited.catch(() => undefined);
    const giveUp = new AbortController();
    const deadline = Date.now() + 30_000;
    const served = (async () => {
      if (hp.pid === undefined) return;
      // first HAProxy itself (its runtime API answers only once every frontend is bound), then
      // the route to a node: a 200 on the frontend port alone could come from another listener
      await waitForHaproxyInfo(adminSocket, hp.pid, deadline, giveUp.signal);
      await waitFor200(`http://${host}:${httpPort}/v2/health/ready`, deadline, 'haproxy', giveUp.signal);
    })();
    served.catch(() => undefined);
    try {
      await Promise.race([spawnError, exited, served]).catch(async (err: unknown) => {
        if (err instanceof ClusterError) throw err;
        // did not answer in time (or the spawn failed): say so with what HAProxy printed
        throw new ClusterError('haproxy_failed', `haproxy (${haproxyBin}) did not serve: ${(err as Error).message}; its output${quoteOutput(await readLog(haproxyLogFile), haproxyLogFile)}`, { cause: err });
      });
    } finally {
      giveUp.abort();
    }
    if (hp.pid === undefined) throw new Error('haproxy did not start');
    say(`haproxy pid ${hp.pid}: HTTP http://${host}:${httpPort}${grpcPort === undefined ? '' : `, gRPC ${host}:${grpcPort}`}${statsPort === undefined ? '' : `, stats http://${host}:${statsPort}/stats`} (config ${configFile}, log ${haproxyLogFile})`);

    // while serving: a lost node is reported, the last one or HAProxy ending is a failure
    let fail: (err: ClusterError) => void = () => undefined;
    const failure = new Promise<ClusterError>((resolve) => (fail = resolve));
    let alive = started.length;
    for (const node of started) {
      void node.status.then(async (status) => {
        if (stopping) return;
        alive -= 1;
        say(`node ${node.name} exited ${describeExit(status)}; ${alive} of ${started.length} nodes left; ${alive > 0 ? 'HAProxy routes around it' : 'none left to serve'}`);
        const logFile = path.join(workDir, `${node.name}.log`);
        if (alive === 0) fail(new ClusterError('no_nodes_left', `no node left: the last, ${node.name}, exited ${describeExit(status)}; its output${quoteOutput(await readLog(logFile), logFile)}`));
      });
    }
    void haproxy.status.then(async (status) => {
      if (!stopping) fail(await haproxyExitError(haproxyBin, status, haproxyLogFile, 'while serving'));
    });
    return {
      nodes: started,
      httpUrl: `http://${host}:${httpPort}`,
      ...(grpcPort === undefined ? {} : { grpcAddress: `${host}:${grpcPort}` }),
      ...(statsPort === undefined ? {} : { statsUrl: `http://${host}:${statsPort}` }),
      haproxyConfigFile: configFile,
      haproxyPid: hp.pid,
      haproxyExit: haproxy.exit,
      failure,
      stop: (graceMs = 15_000) => stopAll(graceMs),
    };
  } catch (err) {
    await stopAll(1000);
    throw err;
  }
}
