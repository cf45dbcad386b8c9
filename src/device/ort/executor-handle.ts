/**
 * ExecutorHandle: the parent-side end of one executor child process (one per service).
 *
 * Starts the child (`fork` of `executor-process.ts` under tsx's ESM loader, IPC with V8
 * serialization), loads the service's sessions, dispatches segments and matches results by
 * request id. When the child dies unexpectedly (crash, OOM kill, exit) every segment it was
 * running or had queued resolves with a `DeviceFailureError` naming the service, the query,
 * the exit code or signal and the tail of the child's stderr; the owner is told that the kept
 * states are lost (`onStateLost`), and a fresh child is started at once. If that restart
 * fails, the next `run` tries once more and reports the failure as the segment's error.
 *
 * Ownership: the handle owns the child process; `close()` ends it (SIGTERM, SIGKILL after
 * `CLOSE_GRACE_MS`).
 */
import { fork } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import type { AbacusError } from '../../errors.ts';
import { DeviceFailureError, DeviceUnavailableError, describeError } from '../../errors.ts';
import type { ModelSpec } from '../../model/spec.ts';
import type { TensorMap } from '../../tensor.ts';
import type { ChildMessage, LoadMessage, ParentMessage, RunMessage, SessionConfig } from './protocol.ts';
import { fromWire } from './protocol.ts';

/** Grace period between SIGTERM and SIGKILL when closing, in ms. */
export const CLOSE_GRACE_MS = 2000;
/** Characters of child stdout/stderr kept for error messages. */
const OUTPUT_TAIL_CHARS = 2000;

/** Outcome of one segment as the handle reports it (the device adds query/service). */
export type RunOutcome = { readonly ok: true; readonly latencyMs: number; readonly outputs?: TensorMap } | { readonly ok: false; readonly error: AbacusError };

/** What a segment dispatch carries (a `RunMessage` without protocol fields). */
export type RunRequest = Omit<RunMessage, 't' | 'reqId'>;

/** Fault injection for tests and chaos drills. */
export type ExecutorFault =
  /** The child exits (code 70) after the first operator of the next segment it starts. */
  | 'exit-in-next-segment'
  /** The parent sends SIGKILL to the child now (like an OOM kill); resolves once the death is handled. */
  | 'kill';

export interface ExecutorConfig {
  readonly service: string;
  readonly spec: ModelSpec;
  readonly operatorPaths: readonly string[];
  readonly session: SessionConfig;
  readonly warmupRuns: number;
  readonly syntheticCacheBytes: number;
}

const EXECUTOR_ENTRY = fileURLToPath(new URL('./executor-process.ts', import.meta.url));

/**
 * Fork an executor child. Children do not inherit the parent's TS loader (vitest, tsx's
 * `register()`), so tsx's ESM loader is passed explicitly as `--import <file URL>`.
 */
export function spawnExecutorProcess(): ChildProcess {
  const loader = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
  return fork(EXECUTOR_ENTRY, [], {
    execArgv: ['--import', loader],
    serialization: 'advanced',
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
}

/** Keeps the last `limit` characters a child wrote to stdout/stderr. */
class OutputTail {
  private text = '';
  constructor(private readonly limit: number) {}
  attach(child: ChildProcess): void {
    const push = (chunk: Buffer): void => {
      this.text = (this.text + chunk.toString('utf8')).slice(-this.limit);
    };
    child.stdout?.on('data', push);
    child.stderr?.on('data', push);
  }
  suffix(): string {
    const t = this.text.trim();
    return t ? `; executor output (tail): ${t}` : '';
  }
}

function exitDescription(code: number | null, signal: NodeJS.Signals | null): string {
  return signal ? `signal ${signal}` : `exit code ${String(code)}`;
}

/** Send a message; resolves false when the channel refused it (child gone). */
function sendTo(child: ChildProcess, msg: ParentMessage): Promise<boolean> {
  return new Promise((resolve) => {
    if (!child.connected) {
      resolve(false);
      return;
    }
    child.send(msg, (err) => resolve(err === null || err === undefined));
  });
}

/**
 * Ask a throwaway child whether an execution provider works here: lists the backends of the
 * onnxruntime-node build and creates one session on `model` (ONNX bytes) with `session`.
 * Done in a child so a provider that crashes natively cannot take the caller down.
 * @returns `error` set (ORT's message) when the provider is unusable.
 */
export async function probeExecutionProvider(session: SessionConfig, model: Uint8Array): Promise<{ backends: readonly string[]; error?: string }> {
  const child = spawnExecutorProcess();
  const tail = new OutputTail(OUTPUT_TAIL_CHARS);
  tail.attach(child);
  try {
    return await new Promise((resolve) => {
      child.on('message', (raw: unknown) => {
        const m = raw as ChildMessage;
        if (m.t === 'probe-result') resolve(m.error === undefined ? { backends: m.backends } : { backends: m.backends, error: m.error });
      });
      child.once('close', (code, signal) => resolve({ backends: [], error: `probe process ended (${exitDescription(code, signal)})${tail.suffix()}` }));
      child.once('error', (err) => resolve({ backends: [], error: `probe process failed: ${err.message}` }));
      void sendTo(child, { t: 'probe', session, model });
    });
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
}

interface Pending {
  readonly queryId: string;
  readonly resolve: (outcome: RunOutcome) => void;
}

export class ExecutorHandle {
  private child: ChildProcess | undefined;
  private state: 'down' | 'starting' | 'ready' | 'closed' = 'down';
  private starting: Promise<void> | undefined;
  private loadWaiter: { resolve: () => void; reject: (err: AbacusError) => void } | undefined;
  private readonly pending = new Map<number, Pending>();
  private nextReqId = 1;
  private tail = new OutputTail(OUTPUT_TAIL_CHARS);
  private restartCount = 0;

  /**
   * @param onStateLost called (synchronously, before any restart) when the child died and
   *   every kept query state of this service is gone; `reason` names the exit.
   */
  constructor(
    private readonly cfg: ExecutorConfig,
    private readonly onStateLost: (reason: string) => void,
  ) {}

  /** Automatic restarts so far (after unexpected exits). */
  get restarts(): number {
    return this.restartCount;
  }

  /** Process id of the live child; undefined while down. */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  /**
   * Start the child and load the sessions (idempotent while starting).
   * @throws DeviceUnavailableError (CUDA missing, or the handle is closed), InvalidModelError
   *   (a model that does not load), DeviceFailureError (the child died while loading).
   */
  start(): Promise<void> {
    if (this.state === 'closed') return Promise.reject(new DeviceUnavailableError(`executor of service ${this.cfg.service} is closed`));
    if (this.state === 'ready') return Promise.resolve();
    if (this.starting) return this.starting;
    this.state = 'starting';
    const starting = this.spawnAndLoad().then(
      () => {
        this.starting = undefined;
        if (this.state === 'closed') {
          this.child?.kill('SIGKILL');
          throw new DeviceUnavailableError(`executor of service ${this.cfg.service} was closed while starting`);
        }
        this.state = 'ready';
      },
      (err: unknown) => {
        this.starting = undefined;
        if (this.state !== 'closed') this.state = 'down';
        const child = this.child;
        if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
        throw err;
      },
    );
    this.starting = starting;
    return starting;
  }

  /**
   * Run one segment. Sends at once when the child is ready (so a group's segments leave
   * together); otherwise waits for the (re)start. Never rejects.
   */
  run(req: RunRequest): Promise<RunOutcome> {
    if (this.state === 'ready' && this.child) return this.dispatch(this.child, req);
    if (this.state === 'closed') return Promise.resolve({ ok: false, error: new DeviceUnavailableError(`device closed: query ${req.queryId} of service ${this.cfg.service} was not run`) });
    return this.start().then(
      () => (this.child ? this.dispatch(this.child, req) : this.run(req)),
      (err: unknown) => ({
        ok: false as const,
        error: new DeviceFailureError(`executor of service ${this.cfg.service} is down and could not be restarted, query ${req.queryId} was not run: ${describeError(err)}`, { cause: err }),
      }),
    );
  }

  /** Free a query's kept state in the child (after any segment already sent). Fire and forget. */
  release(queryId: string): void {
    if (this.state === 'ready' && this.child) void sendTo(this.child, { t: 'release', queryId });
  }

  /**
   * Inject a fault (tests, chaos drills). Waits for a (re)start in progress first.
   * @throws DeviceFailureError when the executor is down or closed.
   */
  async injectFault(fault: ExecutorFault): Promise<void> {
    if (this.state === 'starting') await this.start();
    const child = this.child;
    if (this.state !== 'ready' || !child) throw new DeviceFailureError(`executor of service ${this.cfg.service} is not running`);
    if (fault === 'kill') {
      // Resolve once the death has been handled (queries failed, restart begun).
      const gone = new Promise<void>((resolve) => child.once('close', () => resolve()));
      child.kill('SIGKILL');
      await gone;
      return;
    }
    if (!(await sendTo(child, { t: 'fault', fault }))) throw new DeviceFailureError(`executor of service ${this.cfg.service} did not take the fault message`);
  }

  /** End the child (SIGTERM, then SIGKILL after CLOSE_GRACE_MS); pending segments get errors. Idempotent. */
  async close(): Promise<void> {
    this.state = 'closed';
    const child = this.child;
    if (!child) return;
    if (child.exitCode !== null || child.signalCode !== null) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => child.kill('SIGKILL'), CLOSE_GRACE_MS);
      child.once('close', () => {
        clearTimeout(timer);
        resolve();
      });
      child.kill('SIGTERM');
    });
  }

  private spawnAndLoad(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      let child: ChildProcess;
      try {
        child = spawnExecutorProcess();
      } catch (err) {
        reject(new DeviceFailureError(`executor of service ${this.cfg.service} could not be started: ${describeError(err)}`, { cause: err }));
        return;
      }
      this.child = child;
      this.tail = new OutputTail(OUTPUT_TAIL_CHARS);
      this.tail.attach(child);
      this.loadWaiter = { resolve, reject };
      child.on('message', (raw: unknown) => this.onMessage(child, raw as ChildMessage));
      // 'close' (not 'exit'): fires after the IPC channel and stdio are drained, so a result
      // sent just before an exit is delivered before the exit is handled.
      child.once('close', (code, signal) => this.onGone(child, exitDescription(code, signal)));
      child.on('error', (err) => {
        if (child.pid === undefined) this.onGone(child, `spawn failed: ${err.message}`);
      });
      const load: LoadMessage = {
        t: 'load',
        service: this.cfg.service,
        spec: this.cfg.spec,
        operatorPaths: this.cfg.operatorPaths,
        session: this.cfg.session,
        warmupRuns: this.cfg.warmupRuns,
        syntheticCacheBytes: this.cfg.syntheticCacheBytes,
      };
      void sendTo(child, load);
    });
  }

  private dispatch(child: ChildProcess, req: RunRequest): Promise<RunOutcome> {
    const reqId = this.nextReqId++;
    return new Promise<RunOutcome>((resolve) => {
      this.pending.set(reqId, { queryId: req.queryId, resolve });
      void sendTo(child, { t: 'run', reqId, ...req }).then((sent) => {
        if (!sent && this.pending.delete(reqId)) {
          resolve({ ok: false, error: new DeviceFailureError(`executor of service ${this.cfg.service} did not take query ${req.queryId} (channel closed)`) });
        }
      });
    });
  }

  private onMessage(child: ChildProcess, m: ChildMessage): void {
    if (child !== this.child) return;
    switch (m.t) {
      case 'loaded':
        this.loadWaiter?.resolve();
        this.loadWaiter = undefined;
        break;
      case 'load-failed':
        this.loadWaiter?.reject(fromWire(m.error));
        this.loadWaiter = undefined;
        break;
      case 'result': {
        const p = this.pending.get(m.reqId);
        if (!p) break;
        this.pending.delete(m.reqId);
        p.resolve(m.ok ? (m.outputs ? { ok: true, latencyMs: m.latencyMs, outputs: m.outputs } : { ok: true, latencyMs: m.latencyMs }) : { ok: false, error: fromWire(m.error) });
        break;
      }
      case 'probe-result':
        break;
    }
  }

  private onGone(child: ChildProcess, how: string): void {
    if (child !== this.child) return;
    this.child = undefined;
    const closed = this.state === 'closed';
    const wasReady = this.state === 'ready';
    const svc = this.cfg.service;
    const suffix = this.tail.suffix();
    if (this.loadWaiter) {
      this.loadWaiter.reject(
        closed ? new DeviceUnavailableError(`executor of service ${svc} was closed while loading`) : new DeviceFailureError(`executor of service ${svc} ended (${how}) while loading${suffix}`),
      );
      this.loadWaiter = undefined;
    }
    for (const p of this.pending.values()) {
      p.resolve({
        ok: false,
        error: closed
          ? new DeviceUnavailableError(`device closed while query ${p.queryId} of service ${svc} was running`)
          : new DeviceFailureError(`executor of service ${svc} ended (${how}) while running query ${p.queryId}; the query's state is lost${suffix}`),
      });
    }
    this.pending.clear();
    if (closed) return;
    this.onStateLost(`executor of service ${svc} ended (${how})`);
    if (wasReady) {
      this.state = 'down';
      this.restartCount += 1;
      // A failed restart is not lost: the next run() retries and reports it as the segment's error.
      this.start().catch(() => undefined);
    }
  }
}
