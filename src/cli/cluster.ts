/**
 * `abacus cluster` (docs/deploy.md): several `abacus serve` nodes behind HAProxy.
 *
 * - `abacus cluster --config FILE --nodes 3 [--http-port 8000] [--grpc-port 8001 | --no-grpc]
 *   [--stats-port 8404] [--work-dir DIR]`: start the nodes on this machine (loopback, ephemeral
 *   ports) and HAProxy in front (`deployment/cluster.ts`), print the addresses, run until
 *   SIGTERM/SIGINT, then stop them all (nodes gracefully). A config `abacus serve` would refuse
 *   or a frontend port in use is an error before anything starts; a node lost while serving
 *   is a line on stderr (HAProxy routes around it); HAProxy or the last node ending is an
 *   error (exit 1) quoting its log.
 * - `abacus cluster --print-haproxy-config --node HOST:HTTP[:GRPC] …`: print the `haproxy.cfg`
 *   for nodes that run elsewhere (`deployment/haproxy.ts`), start nothing.
 *
 * Retry semantics, the replay buffer and the health checks: docs/deploy.md.
 */
import os from 'node:os';
import path from 'node:path';
import { InvalidArgumentError, type Command } from 'commander';
import { ClusterError, DEFAULT_HAPROXY_BIN, startLocalCluster } from '../deployment/cluster.ts';
import { DEFAULT_HAPROXY_BUFSIZE_BYTES, haproxyConfig, MIN_HAPROXY_BUFSIZE_BYTES, replayableRequestBytes, type HaproxyNode } from '../deployment/haproxy.ts';
import type { CliContext } from './context.ts';
import { positiveInt } from './models.ts';
import { port } from './serve.ts';
import { UsageError } from './usage.ts';

export interface ClusterCliOptions {
  config?: string;
  nodes: number;
  host: string;
  httpPort: number;
  grpcPort: number;
  /** false with --no-grpc. */
  grpc: boolean;
  statsPort?: number;
  workDir?: string;
  haproxy: string;
  bufsizeBytes: number;
  retries: number;
  profileSamples?: number;
  predictor?: string;
  printHaproxyConfig?: boolean;
  node: HaproxyNode[];
}

/** Parse `--node HOST:HTTP[:GRPC]` (repeatable) into the list so far. */
function nodeFlag(value: string, previous: HaproxyNode[]): HaproxyNode[] {
  const m = /^([A-Za-z0-9][A-Za-z0-9.-]*):(\d{1,5})(?::(\d{1,5}))?$/.exec(value);
  if (m === null) throw new InvalidArgumentError(`--node expects HOST:HTTP_PORT[:GRPC_PORT], got '${value}'`);
  const httpPort = Number(m[2]);
  const grpcPort = m[3] === undefined ? undefined : Number(m[3]);
  for (const p of [httpPort, grpcPort]) if (p !== undefined && (p < 1 || p > 65_535)) throw new InvalidArgumentError(`--node '${value}': ports must be in [1, 65535]`);
  return [...previous, { name: `node${previous.length + 1}`, host: m[1]!, httpPort, ...(grpcPort === undefined ? {} : { grpcPort }) }];
}

function nonNegativeInt(flag: string): (value: string) => number {
  return (value: string) => {
    const x = Number(value);
    if (!/^\s*\d+\s*$/.test(value) || !Number.isSafeInteger(x)) throw new InvalidArgumentError(`${flag} expects an integer ≥ 0, got '${value}'`);
    return x;
  };
}

async function runCluster(ctx: CliContext, opts: ClusterCliOptions): Promise<void> {
  if (opts.bufsizeBytes < MIN_HAPROXY_BUFSIZE_BYTES) throw new UsageError(`--bufsize-bytes must be ≥ ${MIN_HAPROXY_BUFSIZE_BYTES} (HAProxy needs it for HTTP/2), got ${opts.bufsizeBytes}`);
  const haproxyOptions = { bufsizeBytes: opts.bufsizeBytes, retries: opts.retries };
  if (opts.printHaproxyConfig === true) {
    if (opts.node.length === 0) throw new UsageError('--print-haproxy-config needs at least one --node HOST:HTTP_PORT[:GRPC_PORT]');
    const withGrpc = opts.grpc && opts.node.some((n) => n.grpcPort !== undefined);
    try {
      ctx.out(haproxyConfig({ nodes: opts.node, bindHost: opts.host, httpPort: opts.httpPort, ...(withGrpc ? { grpcPort: opts.grpcPort } : {}), ...(opts.statsPort === undefined ? {} : { statsPort: opts.statsPort }), ...haproxyOptions }));
    } catch (err) {
      if (err instanceof RangeError || err instanceof TypeError) throw new UsageError(err.message);
      throw err;
    }
    return;
  }
  if (opts.node.length > 0) throw new UsageError('--node goes with --print-haproxy-config (abacus cluster starts its own nodes)');
  if (opts.config === undefined) throw new UsageError('--config is required (the serving config every node serves)');
  const workDir = opts.workDir ?? path.join(os.tmpdir(), `abacus-cluster-${process.pid}`);
  const serveFlags = [...(opts.profileSamples === undefined ? [] : ['--profile-samples', String(opts.profileSamples)]), ...(opts.predictor === undefined ? [] : ['--predictor', path.resolve(opts.predictor)])];
  const cacheDir = ctx.cacheOptions().cacheDir;
  const cluster = await startLocalCluster({
    config: path.resolve(opts.config),
    nodes: opts.nodes,
    workDir,
    bindHost: opts.host,
    httpPort: opts.httpPort,
    ...(opts.grpc ? { grpcPort: opts.grpcPort } : {}),
    ...(opts.statsPort === undefined ? {} : { statsPort: opts.statsPort }),
    haproxyBin: opts.haproxy,
    serveFlags,
    env: cacheDir === undefined ? process.env : { ...process.env, ABACUS_CACHE_DIR: path.resolve(cacheDir) },
    haproxy: haproxyOptions,
    onLine: (line) => ctx.err(`abacus cluster: ${line}\n`),
  });
  ctx.out(`abacus cluster: HTTP ${cluster.httpUrl}\n`);
  if (cluster.grpcAddress !== undefined) ctx.out(`abacus cluster: gRPC ${cluster.grpcAddress}\n`);
  if (cluster.statsUrl !== undefined) ctx.out(`abacus cluster: HAProxy stats ${cluster.statsUrl}/stats, Prometheus ${cluster.statsUrl}/metrics\n`);
  for (const n of cluster.nodes) ctx.out(`abacus cluster: ${n.name} pid ${n.pid} ${n.httpUrl}${n.grpcPort === undefined ? '' : ` gRPC 127.0.0.1:${n.grpcPort}`}\n`);
  ctx.out(`abacus cluster: ready: ${cluster.nodes.length} nodes; requests up to ${replayableRequestBytes(haproxyOptions)} bytes are replayed on another node after a 503 or a lost node\n`);
  let onSignal: (signal: NodeJS.Signals) => void = () => undefined;
  const ended = await new Promise<NodeJS.Signals | ClusterError>((resolve) => {
    onSignal = resolve;
    process.once('SIGTERM', onSignal);
    process.once('SIGINT', onSignal);
    void cluster.failure.then(resolve);
  });
  process.off('SIGTERM', onSignal).off('SIGINT', onSignal);
  ctx.out(`abacus cluster: ${typeof ended === 'string' ? ended : 'failed'}: stopping\n`);
  await cluster.stop();
  ctx.out('abacus cluster: stopped\n');
  // HAProxy or the last node ended: `error: …` (with its log's last lines), exit 1
  if (ended instanceof ClusterError) throw ended;
}

export function registerClusterCommand(program: Command, ctx: CliContext): void {
  program
    .command('cluster')
    .description('run N `abacus serve` nodes behind HAProxy on this machine (or print the haproxy.cfg for nodes elsewhere)')
    .option('--config <file>', 'serving config every node serves')
    .option('--nodes <n>', 'number of nodes', positiveInt('--nodes'), 3)
    .option('--host <addr>', "interface HAProxy's frontends bind", '127.0.0.1')
    .option('--http-port <port>', 'HAProxy HTTP frontend port (0: any free port)', port('--http-port'), 8000)
    .option('--grpc-port <port>', 'HAProxy gRPC (h2c) frontend port (0: any free port)', port('--grpc-port'), 8001)
    .option('--no-grpc', 'HTTP only (nodes run --no-grpc)')
    .option('--stats-port <port>', "HAProxy's stats page (/stats) and Prometheus exporter (/metrics)", port('--stats-port'))
    .option('--work-dir <dir>', 'where haproxy.cfg and the logs go (default: a folder under the temp dir)')
    .option('--haproxy <file>', 'HAProxy binary', DEFAULT_HAPROXY_BIN)
    .option('--bufsize-bytes <n>', 'HAProxy tune.bufsize: requests up to this minus 1024 bytes can be replayed', positiveInt('--bufsize-bytes'), DEFAULT_HAPROXY_BUFSIZE_BYTES)
    .option('--retries <n>', 'replays on other nodes after a 503, a refused connection or a lost node', nonNegativeInt('--retries'), 2)
    .option('--profile-samples <n>', 'passed to every node (abacus serve --profile-samples)', positiveInt('--profile-samples'))
    .option('--predictor <file>', 'passed to every node (abacus serve --predictor)')
    .option('--print-haproxy-config', 'print the haproxy.cfg for the --node list and exit')
    .option('--node <host:http[:grpc]>', 'with --print-haproxy-config: a node running abacus serve (repeatable)', nodeFlag, [])
    .action(async (opts: ClusterCliOptions) => {
      await runCluster(ctx, opts);
    });
}
