/**
 * The state of every served model (Triton's repository index names: LOADING, READY, UNLOADING,
 * UNAVAILABLE, each with a reason) and what follows from it: model readiness, server readiness
 * (`isReady`, the rule in docs/health.md "Health and readiness"), the executor health the device
 * reports (`Device.watchHealth`) and reasons that never name a server folder.
 *
 * Executor health: a READY model whose executor goes down (crash, OOM kill, failed restart) is
 * UNAVAILABLE with the reason at once, and READY again (with its earlier note) when the device
 * reports it up. Each new crash is counted (`crashes`, `abacus_executor_restarts_total`), so the
 * backend can tell a query failed by a crash from one failed by its inputs, wait for the executor
 * (`whenUp`) and retry it once.
 */
import type { Logger } from '../log.ts';
import type { ModelState } from './inference.ts';

/**
 * What the device reports about a service's executor (`Device.watchHealth`'s event, repeated
 * here because the front end reaches the device only through the runtime's types).
 */
export interface ServiceHealth {
  readonly service: string;
  readonly up: boolean;
  readonly reason: string;
  readonly restarts: number;
}

/** A folder whose path must not reach clients, and what to show instead. */
export interface PrivatePath {
  readonly path: string;
  readonly label: string;
}

interface Entry {
  state: ModelState;
  reason: string;
  /** UNAVAILABLE because a request unloaded it. */
  unloaded: boolean;
  /** UNAVAILABLE because its executor is down: READY again (with `note`) when it is up. */
  executorDown: boolean;
  /** The READY reason to restore after an executor restart. */
  note: string;
  /** Executor restarts seen since it was (re)loaded (`ServiceHealthEvent.restarts`). */
  restartsSeen: number;
  /** Crashes seen since the server started (never reset): a retry compares two readings. */
  crashes: number;
}

export interface ModelStatesOptions {
  readonly logger?: Logger;
  /** Folders shown by their label in reasons (the model cache): `redact`. */
  readonly privatePaths?: readonly PrivatePath[];
  /**
   * Server readiness rule [true]: true (Triton's `--strict-readiness` default) — not ready while
   * any model that should be served is down (its executor restarting); false — ready while at
   * least one model is READY.
   */
  readonly strictReadiness?: boolean;
  /** Called once per executor crash of a model (for `abacus_executor_restarts_total`). */
  readonly onRestart?: (model: string) => void;
}

/**
 * An absolute filesystem path of at least two segments (not an HTTP route of this server,
 * `/v2/…`), preceded by the start, a space, a quote, a backtick, `(` or `=`.
 */
const ABSOLUTE_PATH = /(^|[\s'"`(=])(\/(?!v2\/)[^\s'"`/:;,()]+(?:\/[^\s'"`/:;,()]+)+)/g;

/**
 * `text` with each private folder shown as its label, then every other absolute path shown as
 * `<…>/` and its last segment (an import's source file, a temporary folder), so no reason a client
 * sees names a server folder. The log keeps the full text.
 */
export function redactPaths(text: string, privatePaths: readonly PrivatePath[]): string {
  const labelled = privatePaths.reduce((t, p) => (p.path === '' ? t : t.replaceAll(p.path, p.label)), text);
  return labelled.replace(ABSOLUTE_PATH, (_m, lead: string, p: string) => `${lead}<…>/${p.slice(p.lastIndexOf('/') + 1)}`);
}

export class ModelStates {
  private readonly entries = new Map<string, Entry>();
  private readonly logger: Logger | undefined;
  private readonly privatePaths: readonly PrivatePath[];
  private readonly onRestart: (model: string) => void;
  /** `whenUp` callers per model, resolved when its executor is back (or by `release`). */
  private readonly waiters = new Map<string, Set<(up: boolean) => void>>();
  /** See `ModelStatesOptions.strictReadiness`. */
  readonly strictReadiness: boolean;

  constructor(options: ModelStatesOptions = {}) {
    this.logger = options.logger;
    this.privatePaths = options.privatePaths ?? [];
    this.strictReadiness = options.strictReadiness ?? true;
    this.onRestart = options.onRestart ?? (() => undefined);
  }

  /** State and reason of a model (undefined for an unknown name). */
  get(name: string): { readonly state: ModelState; readonly reason: string; readonly unloaded: boolean } | undefined {
    return this.entries.get(name);
  }

  /** `state` of a model (LOADING resets its executor bookkeeping: a fresh load). Logged unless LOADING/UNLOADING. */
  set(name: string, state: ModelState, reason: string, unloaded = false): void {
    const old = this.entries.get(name);
    const restartsSeen = state === 'LOADING' || old === undefined ? 0 : old.restartsSeen;
    this.entries.set(name, { state, reason, unloaded, executorDown: false, note: state === 'READY' ? reason : '', restartsSeen, crashes: old?.crashes ?? 0 });
    // taken down or loaded anew while queries waited for its executor: they are not retried
    for (const done of [...(this.waiters.get(name) ?? [])]) done(false);
    if (state !== 'LOADING' && state !== 'UNLOADING') this.logger?.info({ model: name, state, reason }, 'model state');
  }

  /** `text` without server folders (`redactPaths` with the private paths). */
  redact(text: string): string {
    return redactPaths(text, this.privatePaths);
  }

  /** Known models with their state, in insertion order. */
  states(): ReadonlyMap<string, ModelState> {
    return new Map([...this.entries].map(([name, e]) => [name, e.state]));
  }

  isModelReady(name: string): boolean {
    return this.entries.get(name)?.state === 'READY';
  }

  /** READY, or UNAVAILABLE only while its executor restarts: the model is on the device and in the runtime (an unload or re-load takes it down first). */
  isLoaded(name: string): boolean {
    const e = this.entries.get(name);
    return e !== undefined && (e.state === 'READY' || e.executorDown);
  }

  /** Executor crashes of `name` since the server started (0 for an unknown name). */
  crashes(name: string): number {
    return this.entries.get(name)?.crashes ?? 0;
  }

  /**
   * Resolves true once `name` is not down because of its executor (at once when it is not),
   * false after `timeoutMs`, when its state is set otherwise (unload, re-load), or at `release`
   * (shutdown).
   */
  whenUp(name: string, timeoutMs: number): Promise<boolean> {
    if (this.entries.get(name)?.executorDown !== true) return Promise.resolve(true);
    if (!(timeoutMs > 0)) return Promise.resolve(false);
    return new Promise((resolve) => {
      const set = this.waiters.get(name) ?? new Set<(up: boolean) => void>();
      this.waiters.set(name, set);
      const done = (up: boolean): void => {
        clearTimeout(timer);
        set.delete(done);
        resolve(up);
      };
      const timer = setTimeout(() => done(false), timeoutMs);
      set.add(done);
    });
  }

  /** Resolve every `whenUp` with false (the server shuts down). */
  release(): void {
    for (const set of this.waiters.values()) for (const done of [...set]) done(false);
  }

  /**
   * Whether the server is ready once started (the caller checks start-up and shutdown): at
   * least one model READY and, with strict readiness, no model down because of its executor.
   */
  isReady(): boolean {
    let ready = false;
    for (const e of this.entries.values()) {
      if (e.executorDown && this.strictReadiness) return false;
      if (e.state === 'READY') ready = true;
    }
    return ready;
  }

  /** A device health event (`Device.watchHealth`): READY ⇄ UNAVAILABLE for the model it names. */
  onHealth(event: ServiceHealth): void {
    const e = this.entries.get(event.service);
    if (e === undefined) return;
    if (event.restarts > e.restartsSeen) {
      e.crashes += event.restarts - e.restartsSeen;
      for (let i = e.restartsSeen; i < event.restarts; i++) this.onRestart(event.service);
      e.restartsSeen = event.restarts;
    }
    if (!event.up && (e.state === 'READY' || e.executorDown)) {
      const reason = `its executor is down and restarting by itself: ${this.redact(event.reason)}`;
      if (!e.executorDown) this.logger?.warn({ model: event.service, state: 'UNAVAILABLE', reason }, 'model state');
      e.state = 'UNAVAILABLE';
      e.reason = reason;
      e.executorDown = true;
    } else if (event.up && e.executorDown) {
      e.state = 'READY';
      e.reason = e.note;
      e.executorDown = false;
      this.logger?.info({ model: event.service, state: 'READY', restarts: event.restarts }, 'model state: executor back');
      for (const done of [...(this.waiters.get(event.service) ?? [])]) done(true);
    }
  }
}
