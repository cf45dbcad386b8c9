/**
 * ExecutorHandle: the parent-side end of one executor child process (one per service).
 *
 * Starts the child (`fork` of `executor-process.ts` under tsx's ESM loader, IPC with V8
 * serialization), loads the service's sessions, dispatches segments and matches results by
 * request id. Every segment handed to `run` resolves exactly once, whatever happens:
 *
 * - A message the channel refuses (a value structured clone cannot copy, a closed channel)
 *   resolves that segment with a `DeviceFailureError`; the child never saw it and stays up.
 * - When the child dies unexpectedly (crash, OOM kill, exit) every segment it was running or
 *   had queued resolves with a `DeviceFailureError` naming the service, the query, the exit
 *   code or signal and the tail of the child's output; the owner is told that the kept states
 *   are lost (`onStateLost`), and a fresh child is started at once.
 * - Deadlines: spawn + load + warm-up must finish within `loadTimeoutMs` (else the child is
 *   killed and the start fails with a `DeviceFailureError`). With `segmentTimeoutMs > 0`, the
 *   segment at the front of the child's queue must answer within that many ms, counted from
 *   when it reached the front (its dispatch, or the result of the segment before it — the
 *   child runs segments one at a time in order), so its input transfer counts and time spent
 *   queued behind another segment does not. On expiry the child gets SIGKILL, that segment
 *   fails with "exceeded segmentTimeoutMs N ms", the other queued ones fail naming it, and the
 *   restart path above runs.
 * - Memory limit: with `memoryLimitBytes > 0`, the resident set size the child reports with each
 *   result (`rssBytes`) is held against it. Above it, the child gets SIGKILL once that result is
 *   delivered (that segment succeeded), every other segment it was running or had queued fails
 *   with a `DeviceFailureError` naming the limit, kept states are lost (`onStateLost`), and the
 *   restart path below runs: later segments are served by the fresh child. A child already above
 *   the limit right after loading fails its start (a limit below what the model needs).
 * - Restarts: the first restart after an unexpected exit begins at once. A failed restart is
 *   reported as the error of the segments waiting for it, and the next one is tried after a
 *   capped exponential backoff (`restartBackoff`: `initialMs` × 2^(failures − 1), at most
 *   `maxMs`), forever: the executor comes back by itself once it can load again. While it waits
 *   out a backoff, `run` resolves at once with a `DeviceFailureError` saying when the next try
 *   is. A successful restart resets the count.
 * - Health (`onHealth`): `up: false` when a loaded child dies unexpectedly and after each failed
 *   restart (with the reason), `up: true` when a restart succeeds; never for the first load, a
 *   failed first load, or `close()`. Called synchronously, before the segments the death failed
 *   see their results, so an owner can tell a crash from an ordinary failure.
 *
 * Logging (the `logger` of the config): `warn` for every unexpected exit (service, pid, exit
 * code, signal, output tail), segment-timeout kill, restart, and failed restart (with the backoff
 * before the next try); `info` with `loadMs` for each (re)load; `debug` for each spawn.
 *
 * Ownership: the handle owns the child process; `close()` ends it (SIGTERM, SIGKILL after
 * `CLOSE_GRACE_MS`), also while it is starting. The fork itself (and the provider probe) is
 * `executor-spawn.ts`'s; the words for a child's death (segment, load and health errors) are
 * `executor-death.ts`'s. Described in docs/devices.md#executors-deviceort.
 */
import type { ChildProcess } from 'node:child_process';
import type { AbacusError } from '../../errors.ts';
import { DeviceFailureError, DeviceUnavailableError, describeError } from '../../errors.ts';
import type { Logger } from '../../log.ts';
import type { TensorMap } from '../../tensor.ts';
import type { ChildMessage, LoadMessage, RunMessage } from './protocol.ts';
import { fromWire } from './protocol.ts';
import { exitDescription, isAlive, OutputTail, sendTo } from './child-io.ts';
import { realDeadlineTimer, type DeadlineTimer } from './deadline-timer.ts';
import { deathSummary, loadErrorOf, mb, segmentErrorOf, stateLostReasonOf, statsErrorOf, type ChildDeath } from './executor-death.ts';
import { OUTPUT_TAIL_CHARS, spawnExecutorProcess } from './executor-spawn.ts';
import { DEFAULT_RESTART_BACKOFF, restartDelayMs, type ExecutorHealth, type RestartBackoff } from './restart-backoff.ts';

/** Grace period between SIGTERM and SIGKILL when closing, in ms. */
export const CLOSE_GRACE_MS = 2000;

/** Outcome of one segment as the handle reports it (the device adds query/service). */
export type RunOutcome = { readonly ok: true; readonly latencyMs: number; readonly outputs?: TensorMap } | { readonly ok: false; readonly error: AbacusError };

/** What the child reports about itself (`stats` message). */
interface ExecutorStats {
  readonly keptQueries: readonly string[];
  readonly sessionThreads: readonly (readonly number[])[];
}

/** What a segment dispatch carries (a `RunMessage` without protocol fields). */
export type RunRequest = Omit<RunMessage, 't' | 'reqId'>;

/** Fault injection for tests and chaos drills. */
export type ExecutorFault =
  /** The child exits (code 70) after the first operator of the next segment it starts. */
  | 'exit-in-next-segment'
  /** The child blocks its thread (like a hung kernel) after the first operator of the next segment it starts. */
  | 'stall-in-next-segment'
  /** The parent sends SIGKILL to the child now (like an OOM kill); resolves once the death is handled. */
  | 'kill'
  /** The child allocates and keeps this many bytes (a leak) when the message reaches the front of its queue. */
  | { readonly holdMemoryBytes: number };

/** What one executor is started with: its load message plus the parent-side limits. */
export interface ExecutorConfig extends Omit<LoadMessage, 't'> {
  /** Deadline of spawn + load + warm-up of one start, in ms (> 0). */
  readonly loadTimeoutMs: number;
  /** Deadline of one segment from the moment it reaches the front of the child's queue, in ms; 0 = none. */
  readonly segmentTimeoutMs: number;
  /** Largest resident set size of the child, bytes; above it the child is restarted (see the file docs). 0 = none. */
  readonly memoryLimitBytes: number;
  /** Backoff between failed restarts [`DEFAULT_RESTART_BACKOFF`]. */
  readonly restartBackoff?: RestartBackoff;
  /** How segment deadlines are timed [`realDeadlineTimer`]. */
  readonly deadlineTimer?: DeadlineTimer;
  readonly logger: Logger;
}

interface Pending {
  readonly queryId: string;
  readonly start: number;
  readonly end: number;
  readonly resolve: (outcome: RunOutcome) => void;
}

/** Why the parent killed the current child itself (segment deadline). */
interface DeadlineKill {
  readonly reqId: number;
  readonly queryId: string;
}

export class ExecutorHandle {
  private child: ChildProcess | undefined;
  private state: 'down' | 'starting' | 'ready' | 'closed' = 'down';
  private starting: Promise<void> | undefined;
  private loadWaiter: { resolve: () => void; reject: (err: AbacusError) => void } | undefined;
  private readonly pending = new Map<number, Pending>();
  /** `stats` requests awaiting the child's answer, by request id. */
  private readonly statsWaiters = new Map<number, { readonly resolve: (stats: ExecutorStats) => void; readonly reject: (err: AbacusError) => void }>();
  private nextReqId = 1;
  private tail = new OutputTail(OUTPUT_TAIL_CHARS);
  private restartCount = 0;
  private loadedOnce = false;
  private failedRestarts = 0;
  private lastRestartError = '';
  /** The pending backoff restart, while the handle waits out a backoff. */
  private backoff: { readonly timer: NodeJS.Timeout; readonly at: number } | undefined;
  private deadline: { readonly reqId: number; readonly cancel: () => void } | undefined;
  private killedForDeadline: DeadlineKill | undefined;
  /** The RSS above the memory limit for which the parent killed the current child. */
  private killedForMemory: number | undefined;
  private rss: number | undefined;
  private memoryRestartCount = 0;
  private readonly log: Logger;

  /**
   * @param onStateLost called (synchronously, before any restart) when the child died and
   *   every kept query state of this service is gone; `reason` names the exit.
   * @param onHealth called when the executor goes down or comes back (see the file docs).
   */
  constructor(
    private readonly cfg: ExecutorConfig,
    private readonly onStateLost: (reason: string) => void,
    private readonly onHealth: (health: ExecutorHealth) => void = () => undefined,
  ) {
    this.log = cfg.logger;
  }

  /** Automatic restarts so far (after unexpected exits and segment-timeout kills). */
  get restarts(): number {
    return this.restartCount;
  }

  /** Restarts so far that the memory limit caused (also counted in `restarts`). */
  get memoryRestarts(): number {
    return this.memoryRestartCount;
  }

  /** Resident set size of the live child, bytes, as it last reported (after load, after each segment); undefined while down or starting. */
  get rssBytes(): number | undefined {
    return this.state === 'ready' ? this.rss : undefined;
  }

  /** Process id of the live child; undefined while down. */
  get pid(): number | undefined {
    return this.child?.pid;
  }

  /** True while the child is down after a failed restart, waiting out the backoff before the next try. */
  get isDown(): boolean {
    return this.backoff !== undefined;
  }

  /**
   * Start the child and load the sessions (idempotent while starting).
   * @throws DeviceUnavailableError (CUDA missing, or the handle is closed), InvalidModelError
   *   (a model that does not load), DeviceFailureError (the child died while loading, or did
   *   not load within `loadTimeoutMs`, or the handle waits out a restart backoff).
   */
  start(): Promise<void> {
    if (this.state === 'closed') return Promise.reject(new DeviceUnavailableError(`executor of service ${this.cfg.service} is closed`));
    if (this.backoff !== undefined) return Promise.reject(this.downError());
    if (this.state === 'ready') return Promise.resolve();
    if (this.starting) return this.starting;
    this.state = 'starting';
    const restart = this.loadedOnce;
    const t0 = performance.now();
    const starting = this.spawnAndLoad().then(
      () => {
        this.starting = undefined;
        if (this.state === 'closed') {
          this.child?.kill('SIGKILL');
          throw new DeviceUnavailableError(`executor of service ${this.cfg.service} was closed while starting`);
        }
        this.state = 'ready';
        this.loadedOnce = true;
        this.failedRestarts = 0;
        this.log.info({ service: this.cfg.service, pid: this.child?.pid, loadMs: performance.now() - t0, restart }, restart ? 'executor restarted' : 'executor loaded');
        if (restart) this.onHealth({ up: true, reason: '', restarts: this.restartCount });
      },
      (err: unknown) => {
        this.starting = undefined;
        // Forget the child first, so its death is not reported as an unexpected exit.
        const child = this.child;
        this.child = undefined;
        if (child && isAlive(child)) child.kill('SIGKILL');
        if (this.state !== 'closed') {
          this.state = 'down';
          if (restart) this.restartFailed(err);
        }
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
    if (this.backoff !== undefined) return Promise.resolve({ ok: false, error: this.downError(req.queryId) });
    return this.start().then(
      () => this.run(req),
      (err: unknown): RunOutcome => {
        if (this.state === 'closed') return { ok: false, error: new DeviceUnavailableError(`device closed: query ${req.queryId} of service ${this.cfg.service} was not run`) };
        return {
          ok: false,
          error: new DeviceFailureError(`executor of service ${this.cfg.service} could not be restarted (${this.failedRestarts} consecutive failures), query ${req.queryId} was not run: ${describeError(err)}`, { cause: err }),
        };
      },
    );
  }

  /**
   * Free a query's kept state in the child (after any segment already sent). Fire and forget.
   * A no-op unless the child is ready: a child that is starting or down keeps no state — but a
   * segment handed to `run` while the child was (re)starting is sent only once it is ready, so
   * a query released before that segment's result must be released again afterwards
   * (`OrtDevice` does so when the result arrives).
   */
  release(queryId: string): void {
    if (this.state === 'ready' && this.child) void sendTo(this.child, { t: 'release', queryId });
  }

  /**
   * Ids of the queries whose state the child keeps, sorted, as of every message sent before
   * this request (tests and leak checks, not serving). Waits for a (re)start in progress first.
   * @throws DeviceFailureError when the executor is down, or dies before answering;
   *   DeviceUnavailableError when it is closed.
   */
  async keptQueries(): Promise<readonly string[]> {
    return (await this.stats()).keptQueries;
  }

  /**
   * Per operator (in order), the intra-op thread counts the child has sessions for, ascending,
   * as of every message sent before (tests and leak checks). Waits for a (re)start in progress.
   * @throws as `keptQueries`.
   */
  async sessionThreads(): Promise<readonly (readonly number[])[]> {
    return (await this.stats()).sessionThreads;
  }

  private async stats(): Promise<ExecutorStats> {
    if (this.state === 'starting') await this.start();
    const child = this.child;
    if (this.state === 'closed') throw new DeviceUnavailableError(`executor of service ${this.cfg.service} is closed`);
    if (this.state !== 'ready' || !child) throw new DeviceFailureError(`executor of service ${this.cfg.service} is not running`);
    const reqId = this.nextReqId++;
    return new Promise<ExecutorStats>((resolve, reject) => {
      this.statsWaiters.set(reqId, { resolve, reject });
      void sendTo(child, { t: 'stats', reqId }).then((failure) => {
        if (failure === undefined || !this.statsWaiters.delete(reqId)) return;
        reject(new DeviceFailureError(`executor of service ${this.cfg.service} did not take the stats message: ${failure}`));
      });
    });
  }

  /**
   * Inject a fault (tests, chaos drills). Waits for a (re)start in progress first.
   * @throws DeviceFailureError when the executor is down or closed.
   */
  async injectFault(fault: ExecutorFault): Promise<void> {
    if (this.state === 'starting') await this.start();
    const child = this.child;
    if (this.state !== 'ready' || !child) throw new DeviceFailureError(`executor of service ${this.cfg.service} is not running`);
    if (typeof fault === 'object') {
      const bytes = fault.holdMemoryBytes;
      if (!Number.isSafeInteger(bytes) || bytes < 0) throw new RangeError(`holdMemoryBytes must be an integer ≥ 0, got ${bytes}`);
      const failure = await sendTo(child, { t: 'fault', fault: 'hold-memory', bytes });
      if (failure !== undefined) throw new DeviceFailureError(`executor of service ${this.cfg.service} did not take the fault message: ${failure}`);
      return;
    }
    if (fault === 'kill') {
      // Resolve once the death has been handled (queries failed, restart begun).
      const gone = new Promise<void>((resolve) => child.once('close', () => resolve()));
      child.kill('SIGKILL');
      await gone;
      return;
    }
    const failure = await sendTo(child, { t: 'fault', fault });
    if (failure !== undefined) throw new DeviceFailureError(`executor of service ${this.cfg.service} did not take the fault message: ${failure}`);
  }

  /** End the child (SIGTERM, then SIGKILL after CLOSE_GRACE_MS), also mid-start; pending segments get errors. Idempotent. */
  async close(): Promise<void> {
    this.state = 'closed';
    this.clearDeadline();
    if (this.backoff !== undefined) clearTimeout(this.backoff.timer);
    this.backoff = undefined;
    const child = this.child;
    if (!child || !isAlive(child)) return;
    await new Promise<void>((resolve) => {
      const timer = setTimeout(() => child.kill('SIGKILL'), CLOSE_GRACE_MS);
      child.once('close', () => {
        clearTimeout(timer);
        resolve();
      });
      child.kill('SIGTERM');
    });
  }

  private downError(queryId?: string): DeviceFailureError {
    const notRun = queryId === undefined ? '' : `; query ${queryId} was not run`;
    return new DeviceFailureError(`${this.downReason()}${notRun}`);
  }

  private downReason(): string {
    const inMs = this.backoff === undefined ? 0 : Math.max(0, Math.round(this.backoff.at - performance.now()));
    return `executor of service ${this.cfg.service} is down: ${this.failedRestarts} consecutive restarts failed (last: ${this.lastRestartError}); the next restart is in ${inMs} ms`;
  }

  /** Count a failed restart and schedule the next one after the backoff (forever, until `close`). */
  private restartFailed(err: unknown): void {
    this.failedRestarts += 1;
    this.lastRestartError = describeError(err);
    const delayMs = restartDelayMs(this.cfg.restartBackoff ?? DEFAULT_RESTART_BACKOFF, this.failedRestarts);
    const timer = setTimeout(() => {
      this.backoff = undefined;
      if (this.state === 'closed') return;
      this.log.info({ service: this.cfg.service, failedRestarts: this.failedRestarts }, 'restarting executor after backoff');
      this.start().catch(() => undefined);
    }, delayMs);
    timer.unref();
    this.backoff = { timer, at: performance.now() + delayMs };
    this.log.warn({ service: this.cfg.service, failedRestarts: this.failedRestarts, nextRestartInMs: delayMs, err: this.lastRestartError }, 'executor restart failed; retrying after backoff');
    this.onHealth({ up: false, reason: this.downReason(), restarts: this.restartCount });
  }

  private spawnAndLoad(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const svc = this.cfg.service;
      let child: ChildProcess;
      try {
        child = spawnExecutorProcess();
      } catch (err) {
        reject(new DeviceFailureError(`executor of service ${svc} could not be started: ${describeError(err)}`, { cause: err }));
        return;
      }
      this.child = child;
      this.log.debug({ service: svc, pid: child.pid }, 'executor spawned');
      this.tail = new OutputTail(OUTPUT_TAIL_CHARS);
      this.tail.attach(child);
      const timer = setTimeout(() => {
        if (this.loadWaiter !== waiter) return;
        this.loadWaiter = undefined;
        this.log.warn({ service: svc, pid: child.pid, loadTimeoutMs: this.cfg.loadTimeoutMs }, 'executor load timed out; killing it');
        reject(new DeviceFailureError(`executor of service ${svc} did not load within ${this.cfg.loadTimeoutMs} ms (loadTimeoutMs)${this.tail.suffix()}`));
      }, this.cfg.loadTimeoutMs);
      const waiter = {
        resolve: (): void => {
          clearTimeout(timer);
          resolve();
        },
        reject: (err: AbacusError): void => {
          clearTimeout(timer);
          reject(err);
        },
      };
      this.loadWaiter = waiter;
      child.on('message', (raw: unknown) => this.onMessage(child, raw as ChildMessage));
      // 'close' (not 'exit'): fires after the IPC channel and stdio are drained, so a result
      // sent just before an exit is delivered before the exit is handled.
      child.once('close', (code, signal) => this.onGone(child, code, signal, exitDescription(code, signal)));
      child.on('error', (err) => {
        if (child.pid === undefined) this.onGone(child, null, null, `spawn failed: ${err.message}`);
      });
      const load: LoadMessage = {
        t: 'load',
        service: svc,
        spec: this.cfg.spec,
        operatorPaths: this.cfg.operatorPaths,
        session: this.cfg.session,
        warmupRuns: this.cfg.warmupRuns,
        warmupShapes: this.cfg.warmupShapes,
        gcEverySegments: this.cfg.gcEverySegments,
        warmupSettle: this.cfg.warmupSettle,
        syntheticCacheBytes: this.cfg.syntheticCacheBytes,
        preloadIntraOpThreads: this.cfg.preloadIntraOpThreads,
      };
      void sendTo(child, load).then((failure) => {
        if (failure === undefined || this.loadWaiter !== waiter) return;
        this.loadWaiter = undefined;
        waiter.reject(new DeviceFailureError(`executor of service ${svc}: the load message could not be sent (${failure})`));
      });
    });
  }

  private dispatch(child: ChildProcess, req: RunRequest): Promise<RunOutcome> {
    const reqId = this.nextReqId++;
    return new Promise<RunOutcome>((resolve) => {
      this.pending.set(reqId, { queryId: req.queryId, start: req.start, end: req.end, resolve });
      this.armDeadline();
      void sendTo(child, { t: 'run', reqId, ...req }).then((failure) => {
        if (failure === undefined || !this.pending.delete(reqId)) return;
        this.armDeadline();
        resolve({
          ok: false,
          error: new DeviceFailureError(`service ${this.cfg.service}, query ${req.queryId}: segment [${req.start}, ${req.end}) could not be sent to its executor, nothing ran: ${failure}`),
        });
      });
    });
  }

  /** Keep one deadline timer on the segment at the front of the child's queue (segmentTimeoutMs > 0). */
  private armDeadline(): void {
    const ms = this.cfg.segmentTimeoutMs;
    if (ms <= 0) return;
    const head = this.pending.entries().next();
    const headId = head.done ? undefined : head.value[0];
    if (this.deadline !== undefined && this.deadline.reqId === headId) return;
    this.clearDeadline();
    const child = this.child;
    if (head.done || !child) return;
    const [reqId, p] = head.value;
    const cancel = (this.cfg.deadlineTimer ?? realDeadlineTimer)(ms, () => this.onDeadline(child, reqId, p), { service: this.cfg.service, queryId: p.queryId });
    this.deadline = { reqId, cancel };
  }

  private clearDeadline(): void {
    this.deadline?.cancel();
    this.deadline = undefined;
  }

  private onDeadline(child: ChildProcess, reqId: number, p: Pending): void {
    if (child !== this.child || !this.pending.has(reqId) || !isAlive(child)) return;
    this.deadline = undefined;
    this.killedForDeadline = { reqId, queryId: p.queryId };
    this.log.warn(
      { service: this.cfg.service, pid: child.pid, queryId: p.queryId, segment: [p.start, p.end], segmentTimeoutMs: this.cfg.segmentTimeoutMs },
      'segment exceeded segmentTimeoutMs; killing its executor (SIGKILL)',
    );
    child.kill('SIGKILL');
  }

  private onMessage(child: ChildProcess, m: ChildMessage): void {
    if (child !== this.child) return;
    switch (m.t) {
      case 'loaded': {
        this.rss = m.rssBytes;
        if (m.warmup !== undefined && m.warmup.shapes > 0) {
          const w = m.warmup;
          const fields = { service: this.cfg.service, shapes: w.shapes, runs: w.runs, unsettled: w.unsettled, skipped: w.skipped, warmupMs: Math.round(w.ms) };
          if (w.skipped > 0) this.log.warn(fields, 'warm-up budget ran out before every operator was warmed at every serving shape (first requests at those shapes may be slow)');
          else this.log.info(fields, 'executor warmed up at the serving shapes');
        }
        const limit = this.cfg.memoryLimitBytes;
        if (limit > 0 && m.rssBytes !== undefined && m.rssBytes > limit) {
          this.loadWaiter?.reject(
            new DeviceFailureError(`executor of service ${this.cfg.service} uses ${mb(m.rssBytes)} right after loading, above its memory limit of ${mb(limit)} (executorMemoryLimitMb): raise the limit`),
          );
        } else this.loadWaiter?.resolve();
        this.loadWaiter = undefined;
        break;
      }
      case 'load-failed':
        this.loadWaiter?.reject(fromWire(m.error));
        this.loadWaiter = undefined;
        break;
      case 'result': {
        const p = this.pending.get(m.reqId);
        if (!p) break;
        this.pending.delete(m.reqId);
        this.armDeadline();
        p.resolve(m.ok ? (m.outputs ? { ok: true, latencyMs: m.latencyMs, outputs: m.outputs } : { ok: true, latencyMs: m.latencyMs }) : { ok: false, error: fromWire(m.error) });
        if (m.rssBytes !== undefined) this.checkMemory(child, m.rssBytes);
        break;
      }
      case 'stats': {
        const w = this.statsWaiters.get(m.reqId);
        this.statsWaiters.delete(m.reqId);
        w?.resolve({ keptQueries: m.keptQueries, sessionThreads: m.sessionThreads });
        break;
      }
      case 'probe-result':
        break;
    }
  }

  /** Hold a reported RSS against the memory limit; above it, kill the child (see the file docs). */
  private checkMemory(child: ChildProcess, rssBytes: number): void {
    this.rss = rssBytes;
    const limit = this.cfg.memoryLimitBytes;
    if (limit <= 0 || rssBytes <= limit || this.killedForMemory !== undefined || this.killedForDeadline !== undefined || !isAlive(child)) return;
    this.killedForMemory = rssBytes;
    this.log.warn({ service: this.cfg.service, pid: child.pid, rssBytes, memoryLimitBytes: limit, pendingSegments: this.pending.size }, 'executor exceeded its memory limit; killing it (SIGKILL) to restart it');
    child.kill('SIGKILL');
  }

  private onGone(child: ChildProcess, code: number | null, signal: NodeJS.Signals | null, how: string): void {
    if (child !== this.child) return;
    this.child = undefined;
    this.rss = undefined;
    this.clearDeadline();
    const death: ChildDeath = {
      service: this.cfg.service,
      how,
      closed: this.state === 'closed',
      deadline: this.killedForDeadline,
      segmentTimeoutMs: this.cfg.segmentTimeoutMs,
      rssOverLimitBytes: this.killedForMemory,
      memoryLimitBytes: this.cfg.memoryLimitBytes,
      outputSuffix: this.tail.suffix(),
    };
    this.killedForDeadline = undefined;
    this.killedForMemory = undefined;
    const wasReady = this.state === 'ready';
    if (!death.closed) {
      this.log.warn(
        { service: death.service, pid: child.pid, code, signal, pendingSegments: this.pending.size, segmentTimeout: death.deadline !== undefined, outputTail: this.tail.text() },
        deathSummary(death),
      );
    }
    if (this.loadWaiter) {
      this.loadWaiter.reject(loadErrorOf(death));
      this.loadWaiter = undefined;
    }
    for (const [reqId, p] of this.pending) p.resolve({ ok: false, error: segmentErrorOf(death, reqId, p) });
    this.pending.clear();
    for (const w of this.statsWaiters.values()) w.reject(statsErrorOf(death));
    this.statsWaiters.clear();
    if (death.closed || !wasReady) return; // a death while starting fails that start (see start())
    this.onStateLost(stateLostReasonOf(death));
    this.state = 'down';
    this.restartCount += 1;
    if (death.rssOverLimitBytes !== undefined) this.memoryRestartCount += 1;
    this.onHealth({ up: false, reason: `${deathSummary(death)}; restarting`, restarts: this.restartCount });
    this.log.warn({ service: death.service, restarts: this.restartCount }, 'restarting executor');
    // A failed restart is not lost: the next run() retries and reports it as the segment's error.
    this.start().catch(() => undefined);
  }
}
