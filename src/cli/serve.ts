/**
 * `abacus serve --config FILE [--host 127.0.0.1] [--http-port 8000] [--grpc-port 8001 | --no-grpc]
 * [--grace-ms 10000] [--max-body-bytes N] [--max-json-body-bytes N] [--headers-timeout-ms MS]
 * [--request-timeout-ms MS] [--keep-alive-timeout-ms MS] [--predictor FILE] [--model-control none|explicit] [--no-dashboard]
 * [--tls-cert FILE --tls-key FILE [--tls-ca FILE]] [--auth-token-file FILE]`:
 * serve the config's services over KServe v2 HTTP (and gRPC) with Prometheus metrics at
 * `/metrics` and the live dashboard at `/dashboard` (docs/dashboard.md).
 *
 * The config becomes a device, predictor and services through the assembly layer
 * (`deployment/serving.ts`, on `deployment/services.ts` as `bench` uses it), except that dynamic
 * batching is on by default (`dynamicBatching` in `runtime/config.ts`; the log says per service
 * whether it batches and, when its model cannot, why): `ort` runs the models
 * on this machine's CPU (real outputs); `sim:<gpu>` simulates the accelerator's timing on the
 * wall clock (outputs are zero tensors of the right shape). Without a predictor file one is
 * profiled and trained first (cached) — the server listens meanwhile and reports not ready.
 *
 * stdout gets one line per event (`abacus serve: HTTP listening on http://127.0.0.1:8000`,
 * `… ready: …`, `… stopped`), so scripts and tests can read the bound address; logs (pino JSON)
 * go to stderr, level from `$ABACUS_LOG_LEVEL` (default info).
 *
 * TLS and tokens (docs/tls.md): `--tls-cert` and `--tls-key` serve
 * HTTPS and gRPC over TLS, `--tls-ca` also requires client certificates signed by that CA;
 * `--auth-token-file` requires `Authorization: Bearer <token>` on everything but the health
 * probes. The files are read and checked before anything else starts (`serve/security.ts`).
 *
 * SIGTERM / SIGINT: graceful shutdown within `--grace-ms` (`serve/server.ts`), exit code 0.
 *
 * Launched through npm (`npx abacus serve`, `npm exec`, `npm run`), the server is a grandchild
 * of the launcher (npm → sh → node): `npx abacus serve & kill $!` signals npm, npm ends its
 * shell, and the server would be left running, re-parented to init. So the server also shuts
 * down (gracefully, the same way) when its parent process goes away: `--exit-with-parent`,
 * on by default when npm launched it (`npm_command` in the environment), off otherwise (a server
 * started by hand, by a process manager, or detached with `nohup … &` keeps running when its
 * shell exits); `--no-exit-with-parent` turns it off.
 * How it notices: `process.ppid` is read every second (`LAUNCHER_POLL_MS`) and compared with its
 * value at start. The alternatives do not fit: npm opens no IPC channel (no `disconnect`
 * event), a background job's stdin is /dev/null (stdin EOF would stop it at once), and Linux's
 * `PR_SET_PDEATHSIG` is not reachable from Node. A launcher killed with SIGKILL leaves its
 * shell alive, so the server's parent stays and it keeps running: stop it with SIGTERM.
 */
import { readFileSync } from 'node:fs';
import { InvalidArgumentError, type Command } from 'commander';
import { createLogger } from '../log.ts';
import { loadServingConfig } from '../runtime/config.ts';
import { policyHelpText } from './policies.ts';
import { createGrpcServer } from '../serve/grpc/server.ts';
import { DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_JSON_BODY_BYTES } from '../serve/http/app.ts';
import { DEFAULT_HEADERS_TIMEOUT_MS, DEFAULT_KEEP_ALIVE_TIMEOUT_MS, DEFAULT_REQUEST_TIMEOUT_MS } from '../serve/http/timeouts.ts';
import { DashboardHub } from '../serve/dashboard/hub.ts';
import { startServer, type GrpcServerFactory, type RunningServer } from '../serve/server.ts';
import { loadTlsMaterial, readAuthToken } from '../serve/security.ts';
import { assembleServing, MODEL_CONTROL_MODES, type ModelControlMode } from '../deployment/serving.ts';
import type { CliContext } from './context.ts';
import { positiveInt } from './models.ts';

export interface ServeCliOptions {
  config: string;
  host: string;
  httpPort: number;
  grpcPort: number;
  /** false with --no-grpc. */
  grpc: boolean;
  graceMs: number;
  maxBodyBytes: number;
  /** Absent: the smaller of `DEFAULT_MAX_JSON_BODY_BYTES` and `maxBodyBytes`. */
  maxJsonBodyBytes?: number;
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  keepAliveTimeoutMs: number;
  predictor?: string;
  allowUnseen?: boolean;
  profileSamples?: number;
  threads?: number;
  seed: number;
  /** Serve the live dashboard at `/dashboard` (false with --no-dashboard). */
  dashboard: boolean;
  /** Stop when the parent process goes (`--exit-with-parent` / `--no-exit-with-parent`); absent: `exitsWithParentByDefault`. */
  exitWithParent?: boolean;
  /** `--model-control none|explicit` (Triton's term): `explicit` lets clients load and unload models. */
  modelControl: ModelControlMode;
  /** `--strict-readiness true|false` (Triton's flag): the server readiness rule of docs/health.md "Health and readiness". */
  strictReadiness: boolean;
  /** `--tls-cert FILE`: PEM certificate (chain) of HTTPS and gRPC TLS; needs `tlsKey`. */
  tlsCert?: string;
  /** `--tls-key FILE`: PEM private key of `tlsCert`. */
  tlsKey?: string;
  /** `--tls-ca FILE`: PEM CA certificates; clients must present a certificate they signed (mutual TLS). */
  tlsCa?: string;
  /** `--auth-token-file FILE`: the bearer token clients must send (the file's content, trimmed). */
  authTokenFile?: string;
}

/** After `stopped`, how long the process may take to exit by itself before it exits anyway, ms (a bound, not a measurement). */
const EXIT_AFTER_STOP_MS = 2000;

/** How often `serve` checks that its parent process is still there, ms. */
export const LAUNCHER_POLL_MS = 1000;

/**
 * Whether `serve` stops when its parent process goes, when no flag says: when npm launched it
 * (npx, `npm exec`, `npm run` set `npm_command` in the child's environment).
 */
export function exitsWithParentByDefault(env: NodeJS.ProcessEnv): boolean {
  return typeof env['npm_command'] === 'string' && env['npm_command'] !== '';
}

/**
 * Call `onGone` once when this process' parent changes (the parent exited and the process was
 * re-parented), checking `process.ppid` every `pollMs` ms; returns a function that stops watching.
 * The timer does not keep the process alive.
 */
export function watchParent(onGone: (parentPid: number) => void, pollMs = LAUNCHER_POLL_MS): () => void {
  const parentPid = process.ppid;
  const timer = setInterval(() => {
    if (process.ppid === parentPid) return;
    clearInterval(timer);
    onGone(parentPid);
  }, pollMs);
  timer.unref();
  return () => clearInterval(timer);
}

/** Parser for a flag taking a decimal integer ≥ 0 (a timeout where 0 means none). */
export function nonNegativeInt(flag: string): (value: string) => number {
  return (value: string) => {
    const x = Number(value);
    if (!/^\s*\d+\s*$/.test(value) || !Number.isSafeInteger(x)) throw new InvalidArgumentError(`${flag} expects an integer ≥ 0, got '${value}'`);
    return x;
  };
}

/** A commander parser for a port flag: an integer in [0, 65535] (0: any free port). */
export function port(flag: string): (value: string) => number {
  return (value: string) => {
    const x = Number(value);
    if (!/^\s*\d+\s*$/.test(value) || x > 65_535) throw new InvalidArgumentError(`${flag} expects a port in [0, 65535] (0: any free port), got '${value}'`);
    return x;
  };
}

function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: string };
  return pkg.version ?? '0.0.0';
}

/**
 * Start serving `opts.config`; resolves with the running server once it listens (not yet
 * ready: await `ready`). Used by the command and by tests.
 * @throws InvalidConfigError for a bad config or policy; what listening throws (port in use).
 */
export async function startServeCommand(ctx: CliContext, opts: ServeCliOptions): Promise<RunningServer> {
  const config = await loadServingConfig(opts.config);
  // before the models are built: a wrong certificate or token file fails the command at once
  const tls = loadTlsMaterial({ ...(opts.tlsCert === undefined ? {} : { cert: opts.tlsCert }), ...(opts.tlsKey === undefined ? {} : { key: opts.tlsKey }), ...(opts.tlsCa === undefined ? {} : { ca: opts.tlsCa }) });
  const authToken = opts.authTokenFile === undefined ? undefined : readAuthToken(opts.authTokenFile);
  const logger = createLogger({ defaultLevel: 'info' });
  const { backend, metrics, feed, openEngine } = await assembleServing(ctx, config, {
    logger,
    serverVersion: packageVersion(),
    seed: opts.seed,
    ...(opts.predictor === undefined ? {} : { predictorFile: opts.predictor }),
    ...(opts.allowUnseen === true ? { allowUnseen: true } : {}),
    ...(opts.profileSamples === undefined ? {} : { profileSamples: opts.profileSamples }),
    ...(opts.threads === undefined ? {} : { threads: opts.threads }),
    modelControl: opts.modelControl,
    strictReadiness: opts.strictReadiness,
  });
  const dashboard = opts.dashboard ? new DashboardHub({ feed, source: backend, logger }) : undefined;
  const grpc: { port: number; factory: GrpcServerFactory } | undefined = opts.grpc ? { port: opts.grpcPort, factory: createGrpcServer } : undefined;
  return startServer({
    backend,
    openEngine,
    logger,
    metrics,
    host: opts.host,
    httpPort: opts.httpPort,
    maxBodyBytes: opts.maxBodyBytes,
    ...(opts.maxJsonBodyBytes === undefined ? {} : { maxJsonBodyBytes: opts.maxJsonBodyBytes }),
    timeouts: { headersTimeoutMs: opts.headersTimeoutMs, requestTimeoutMs: opts.requestTimeoutMs, keepAliveTimeoutMs: opts.keepAliveTimeoutMs },
    ...(grpc === undefined ? {} : { grpc }),
    ...(dashboard === undefined ? {} : { dashboard }),
    security: { ...(tls === undefined ? {} : { tls }), ...(authToken === undefined ? {} : { authToken }) },
    announce: (line) => ctx.out(`abacus serve: ${line}\n`),
  });
}

/**
 * Run until SIGTERM / SIGINT (or, with `exitWithParent`, until the parent process goes), then shut
 * down gracefully (exit code 0). A signal before the server listens (the config is read and models
 * are built; no child process runs yet, and a model build writes its cache entry atomically)
 * exits 0 at once.
 */
async function serveUntilSignalled(ctx: CliContext, opts: ServeCliOptions): Promise<void> {
  let stop: ((signal: string) => void) | undefined;
  const stopped = new Promise<string>((resolve) => {
    stop = resolve;
  });
  const onSignal = (signal: NodeJS.Signals): void => stop?.(signal);
  const beforeListening = (signal: NodeJS.Signals): void => {
    ctx.out(`abacus serve: ${signal} while starting (building models): exiting\n`);
    process.exit(0);
  };
  process.once('SIGTERM', beforeListening);
  process.once('SIGINT', beforeListening);
  let server: RunningServer;
  try {
    server = await startServeCommand(ctx, opts);
  } finally {
    process.off('SIGTERM', beforeListening);
    process.off('SIGINT', beforeListening);
  }
  // kept during the shutdown: a second signal does not kill the process half-way (executors left behind)
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  const unwatch = (opts.exitWithParent ?? exitsWithParentByDefault(process.env)) ? watchParent((pid) => stop?.(`parent process ${pid} (the launcher) exited`)) : undefined;
  try {
    // a failed start-up rejects `ready` (the server has shut itself down): that error is the command's
    await Promise.race([server.ready, stopped]);
    const signal = await stopped;
    ctx.out(`abacus serve: ${signal}: shutting down (grace ${opts.graceMs} ms)\n`);
    // A last resort: the shutdown is bounded by the grace period; if something still hangs, do not hang with it.
    const guard = setTimeout(() => {
      ctx.err(`abacus serve: shutdown did not finish within ${opts.graceMs} ms + 5 s; exiting\n`);
      process.exit(1);
    }, opts.graceMs + 5000);
    guard.unref();
    await server.shutdown(opts.graceMs);
    clearTimeout(guard);
    ctx.out('abacus serve: stopped\n');
    // Everything is answered and closed; should a handle still hold the process (a start-up step
    // that did not stop in the grace period), do not wait for it: executors end with their parent.
    setTimeout(() => {
      ctx.err('abacus serve: work still open after the shutdown; exiting\n');
      process.exit(0);
    }, EXIT_AFTER_STOP_MS).unref();
  } finally {
    unwatch?.();
    process.off('SIGTERM', onSignal);
    process.off('SIGINT', onSignal);
  }
}

export function registerServeCommand(program: Command, ctx: CliContext): void {
  program
    .command('serve')
    .description('serve the config\'s models over KServe v2 HTTP (and gRPC) with Prometheus /metrics, until SIGTERM/SIGINT')
    .requiredOption('--config <file>', 'serving config (YAML or JSON): device, predictor, policy, services')
    .option('--host <addr>', 'interface to bind (loopback by default; 0.0.0.0 for all)', '127.0.0.1')
    .option('--http-port <port>', 'HTTP port (0: any free port; the bound address is printed)', port('--http-port'), 8000)
    .option('--grpc-port <port>', 'gRPC port (0: any free port)', port('--grpc-port'), 8001)
    .option('--no-grpc', 'serve HTTP only')
    .option('--no-dashboard', 'do not serve the live dashboard at /dashboard (docs/dashboard.md)')
    .option('--grace-ms <ms>', 'on SIGTERM/SIGINT: finish or answer every request within this many ms, then exit 0', positiveInt('--grace-ms'), 10_000)
    .option('--max-body-bytes <n>', 'largest HTTP binary-tensor request body / gRPC message, bytes', positiveInt('--max-body-bytes'), DEFAULT_MAX_BODY_BYTES)
    .option('--max-json-body-bytes <n>', `largest HTTP JSON body (and JSON header of a binary request), bytes [the smaller of ${DEFAULT_MAX_JSON_BODY_BYTES} and --max-body-bytes]`, positiveInt('--max-json-body-bytes'))
    .option('--headers-timeout-ms <ms>', 'HTTP: time a client has to send a request\'s headers (then 408 and closed; 0: none)', nonNegativeInt('--headers-timeout-ms'), DEFAULT_HEADERS_TIMEOUT_MS)
    .option('--request-timeout-ms <ms>', 'time a client has to send a whole request: HTTP, body included (408); gRPC ModelInfer, from its metadata to its whole message (DEADLINE_EXCEEDED) (0: none)', nonNegativeInt('--request-timeout-ms'), DEFAULT_REQUEST_TIMEOUT_MS)
    .option('--keep-alive-timeout-ms <ms>', 'HTTP: idle time of a keep-alive connection between requests (0: none)', nonNegativeInt('--keep-alive-timeout-ms'), DEFAULT_KEEP_ALIVE_TIMEOUT_MS)
    .option('--predictor <file>', "predictor.json (abacus train); default: the config's, else profile and train one (cached)")
    .option('--allow-unseen', 'let a flop-feature predictor score models it was not trained on')
    .option('--profile-samples <n>', 'samples when a predictor has to be trained first', positiveInt('--profile-samples'))
    .option('--threads <n>', 'ort: intra-op threads per executor', positiveInt('--threads'))
    .option('--seed <n>', 'seed of the simulated device', positiveInt('--seed'), 1)
    .option(
      '--model-control <mode>',
      "Triton's model control: none (load/unload requests answer 403) or explicit (POST /v2/repository/models/{name}/load|unload and gRPC RepositoryModelLoad/Unload load and unload models at runtime; anyone who reaches the port can then do so; a model the predictor was not trained on is predicted by a fallback, see docs/health.md)",
      (value: string): ModelControlMode => {
        if (!(MODEL_CONTROL_MODES as readonly string[]).includes(value)) throw new InvalidArgumentError(`--model-control expects ${MODEL_CONTROL_MODES.join(' or ')}, got '${value}'`);
        return value as ModelControlMode;
      },
      'none',
    )
    .option(
      '--strict-readiness <bool>',
      "Triton's readiness rule: true: /v2/health/ready is 503 while any loaded model is down (its executor restarting); false: ready while at least one model is READY (docs/health.md)",
      (value: string): boolean => {
        if (value !== 'true' && value !== 'false') throw new InvalidArgumentError(`--strict-readiness expects true or false, got '${value}'`);
        return value === 'true';
      },
      true,
    )
    .option('--tls-cert <file>', 'serve HTTPS and gRPC over TLS with this PEM certificate (chain); needs --tls-key (docs/tls.md)')
    .option('--tls-key <file>', 'PEM private key of --tls-cert')
    .option('--tls-ca <file>', 'PEM CA certificate(s): clients must present a certificate signed by one of them (mutual TLS); needs --tls-cert and --tls-key')
    .option('--auth-token-file <file>', 'require "Authorization: Bearer <token>" (gRPC: authorization metadata) on every request but the health probes; the token is the file\'s content, trimmed')
    .option('--exit-with-parent', 'shut down (gracefully) when the parent process exits, e.g. when `npx abacus serve` is killed (default: on when launched through npm/npx)')
    .option('--no-exit-with-parent', 'keep running when the parent process exits, even when launched through npm/npx')
    .addHelpText('after', policyHelpText())
    .action(async (opts: ServeCliOptions) => {
      await serveUntilSignalled(ctx, opts);
    });
}
