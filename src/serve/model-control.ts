/**
 * Model control: loading, warming up and unloading one served model while the others serve
 * (docs/health.md "Model state and model control"). `RuntimeBackend` owns the models, their
 * states and the runtime; this class runs the steps on them, one load or unload per model at
 * a time (a second waits for the first).
 *
 * - `bringUp`: load on the device (`BackendEngine.loadModel`), add to the runtime, warm up with
 *   one query per batch size: READY; on any failure UNAVAILABLE with the reason and nothing of
 *   it left on the device or in the runtime. Used at start and by `load`.
 * - `load` (Triton's `RepositoryModelLoad`, `--model-control explicit`): a model of the config
 *   with its settings, or a new one from the request's `parameters.config`; a loaded model is
 *   taken down first (re-load).
 * - `unload`: new requests refused at once, the waiting and running ones finish, then the
 *   device frees it.
 */
import { describeError } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { ServingRuntime } from '../runtime/runtime.ts';
import { MODEL_NAME_PATTERN, reservedModelName } from '../model/repository.ts';
import type { BackendEngine, ModelControl } from './engine.ts';
import { ServeError } from './inference.ts';
import type { ServeMetrics } from './metrics.ts';
import type { ModelStates } from './model-states.ts';
import type { Served, ServedModel } from './served-model.ts';
import type { ModelStatsRecorder } from './stats.ts';
import { describeValue } from './tensors.ts';
import { within } from './waits.ts';

/** Largest `parameters.config` of a load request, bytes of UTF-8 (a service entry is well under 1 KiB). */
export const MAX_LOAD_CONFIG_BYTES = 16 * 1024;

/** Parameters a load request may carry (Triton's `config`; never `file:…` contents). */
export const LOAD_PARAMETERS: readonly string[] = ['config'];

/** After this long waiting for an unloading model's requests to finish, `unloadModel` logs a warning (and keeps waiting), ms. */
export const UNLOAD_DRAIN_MS = 30_000;

/** QoS target of warm-up queries, ms: long enough that no policy drops them. */
const WARM_UP_QOS_MS = 600_000;

/** What `ModelLifecycle` reaches of its backend. */
export interface LifecycleHost {
  readonly models: Map<string, Served>;
  readonly states: ModelStates;
  readonly stats: ModelStatsRecorder;
  readonly logger: Logger | undefined;
  readonly metrics: ServeMetrics | undefined;
  readonly modelControl: ModelControl | undefined;
  /** `ServedModel` → `Served` with the backend's platform and batching rule. @throws RangeError for bad settings. */
  prepare(m: ServedModel, configured: boolean): Served;
  engine(): BackendEngine | undefined;
  runtime(): ServingRuntime | undefined;
  /** Start-up is over. */
  ready(): boolean;
  /** Shutdown has begun. */
  closing(): boolean;
}

export class ModelLifecycle {
  /** Load or unload in progress per model: the next one waits for it. */
  private readonly control = new Map<string, Promise<unknown>>();

  constructor(private readonly host: LifecycleHost) {}

  /**
   * Load (or re-load) the model clients call `name`; `keys`: the runtime's service names of its
   * served versions (empty or `[name]`: one version under its own name). A model served in
   * several versions is re-loaded version by version, from the config only.
   */
  async load(name: string, parameters: Readonly<Record<string, unknown>> | undefined, keys: readonly string[] = []): Promise<void> {
    this.checkControl('load', name);
    const reserved = reservedModelName(name);
    if (reserved !== undefined) throw new ServeError('bad_request', `load: model name '${name}' is reserved (${reserved}); load the model under another name`);
    const config = loadConfigParameter(name, parameters);
    if (keys.length > 1 || (keys.length === 1 && keys[0] !== name)) {
      if (config !== undefined) throw new ServeError('bad_request', `load '${name}': parameters.config: '${name}' is served in several versions from the config file; load it without parameters to re-load every version`);
      for (const key of keys) await this.reload(key);
      return;
    }
    const known = this.host.models.get(name);
    if (known === undefined && config === undefined) {
      throw new ServeError('bad_request', `load '${name}': no such model in the config; give its service settings as parameters.config (a JSON string: {"model": "<zoo or imported model name>", "qosTargetMs": …})`);
    }
    if (known !== undefined && known.configured && config !== undefined) {
      throw new ServeError('bad_request', `load '${name}': parameters.config: '${name}' is a model of the config file; its settings come from there (load it without parameters to re-load it)`);
    }
    await this.serialized(name, async () => {
      const engine = this.requireStarted(name);
      let model = this.host.models.get(name);
      if (model === undefined || (!model.configured && config !== undefined)) {
        const resolved = await this.host.modelControl!.resolve(name, config!);
        if (resolved.name !== name) throw new ServeError('bad_request', `load '${name}': parameters.config.name: '${resolved.name}' differs from the model name in the request`);
        try {
          model = this.host.prepare(resolved, false);
        } catch (err) {
          throw new ServeError('bad_request', `load '${name}': parameters.config: ${describeError(err)}`, { cause: err });
        }
      }
      if (this.host.states.isLoaded(name)) await this.takeDown(engine, name, 'being re-loaded');
      this.host.models.set(name, model);
      this.host.stats.add(name);
      this.host.metrics?.addModel(name);
      const reason = await this.bringUp(engine, model);
      if (reason !== undefined) throw new ServeError('device_failure', `load '${name}': the model failed to load and is UNAVAILABLE: ${reason}`);
    });
  }

  /** Re-load one version of a model of the config (the runtime's service `key`). */
  private async reload(key: string): Promise<void> {
    await this.serialized(key, async () => {
      const engine = this.requireStarted(key);
      const model = this.host.models.get(key)!;
      if (this.host.states.isLoaded(key)) await this.takeDown(engine, key, 'being re-loaded');
      const reason = await this.bringUp(engine, model);
      if (reason !== undefined) throw new ServeError('device_failure', `load '${model.modelName}' version ${model.version}: the model failed to load and is UNAVAILABLE: ${reason}`);
    });
  }

  /** Unload the model clients call `name`: every served version of it (`keys`, as for `load`). */
  async unload(name: string, parameters: Readonly<Record<string, unknown>> | undefined, keys: readonly string[] = []): Promise<void> {
    this.checkControl('unload', name);
    for (const [key, value] of Object.entries(parameters ?? {})) {
      if (key !== 'unload_dependents') throw new ServeError('bad_request', `unload '${name}': parameters.${key.slice(0, 80)}: unknown parameter (accepted: unload_dependents, which changes nothing here: models have no dependents)`);
      if (typeof value !== 'boolean') throw new ServeError('bad_request', `unload '${name}': parameters.unload_dependents must be true or false, got ${describeValue(value)}`);
    }
    const targets = keys.length === 0 ? [name] : keys;
    if (!targets.every((k) => this.host.models.has(k))) throw new ServeError('model_not_found', `unload '${name}': no such model (known: ${[...new Set([...this.host.models.values()].map((m) => m.modelName))].join(', ')})`);
    // refuse new requests at once (not after a turn of the event loop) when nothing else is in progress for it
    for (const k of targets) if (!this.control.has(k) && this.host.ready() && !this.host.closing() && this.host.states.isModelReady(k)) this.host.states.set(k, 'UNLOADING', 'unloaded');
    for (const k of targets) {
      await this.serialized(k, async () => {
        const engine = this.requireStarted(name);
        const s = this.host.states.get(k)!;
        if (this.host.states.isLoaded(k) || s.state === 'UNLOADING') await this.takeDown(engine, k, 'unloaded');
        this.host.states.set(k, 'UNAVAILABLE', 'unloaded', true);
      });
    }
  }

  /** Bad name or model control off: throw before anything happens. */
  private checkControl(what: 'load' | 'unload', name: string): void {
    if (typeof name !== 'string' || !MODEL_NAME_PATTERN.test(name)) {
      throw new ServeError('bad_request', `${what}: model name ${describeValue(name)} is not a model name: 1–64 letters, digits, '_', '.', '-', starting with a letter or digit (never a path)`);
    }
    if (this.host.modelControl === undefined) {
      throw new ServeError('forbidden', `${what} '${name}': model control is off; start the server with --model-control explicit to load and unload models (the repository index is always available)`);
    }
  }

  private requireStarted(name: string): BackendEngine {
    const engine = this.host.engine();
    if (engine === undefined || this.host.runtime() === undefined || !this.host.ready() || this.host.closing()) {
      throw new ServeError('not_ready', `not_ready: model '${name}': the server is ${this.host.closing() ? 'shutting down' : 'starting'}; retry ${this.host.closing() ? 'on another replica' : 'shortly'}`);
    }
    return engine;
  }

  /** Run `fn` after any load or unload of `name` in progress. */
  private async serialized(name: string, fn: () => Promise<void>): Promise<void> {
    const before = this.control.get(name) ?? Promise.resolve();
    const mine = before.catch(() => undefined).then(fn);
    this.control.set(name, mine);
    try {
      await mine;
    } finally {
      if (this.control.get(name) === mine) this.control.delete(name);
    }
  }

  /**
   * Load `model` on the device, add it to the runtime and warm it up: READY. On any failure it
   * is UNAVAILABLE with the reason (returned), and nothing of it is left on the device or in
   * the runtime.
   */
  async bringUp(engine: BackendEngine, model: Served): Promise<string | undefined> {
    const runtime = this.host.runtime();
    if (runtime === undefined) throw new Error('ModelLifecycle: the runtime is not started');
    this.host.states.set(model.name, 'LOADING', 'loading on the device');
    let loaded = false;
    let added = false;
    try {
      const note = (await engine.loadModel?.(model.name)) ?? '';
      loaded = true;
      runtime.addService({ name: model.name, spec: model.spec, qosTargetMs: model.qosTargetMs, maxQueueLength: model.maxQueueLength, ...(model.batching === undefined ? {} : { batching: model.batching }) });
      added = true;
      this.host.states.set(model.name, 'LOADING', 'warming up');
      for (const batch of model.fixedBatch !== undefined ? [model.fixedBatch] : model.batchSizes) {
        const o = await runtime.submit({ service: model.name, batch, qosTargetMs: WARM_UP_QOS_MS });
        if (this.host.closing()) {
          this.host.states.set(model.name, 'UNAVAILABLE', 'the server is shutting down');
          return 'the server is shutting down';
        }
        if (!o.ok) throw new Error(`warm-up at batch ${batch} failed (${o.reason}): ${o.message}`);
      }
      this.host.states.set(model.name, 'READY', note);
      return undefined;
    } catch (err) {
      // clients see the reason without server folders (`redactPaths`); the log has it whole
      const reason = this.host.states.redact(describeError(err));
      this.host.logger?.error({ model: model.name, err: err instanceof Error ? (err.stack ?? err.message) : String(err) }, 'model failed to load');
      if (added) {
        await within(runtime.serviceDrained(model.name), UNLOAD_DRAIN_MS);
        try {
          runtime.removeService(model.name);
        } catch (e) {
          this.host.logger?.warn({ model: model.name, err: describeError(e) }, 'could not take the failed model out of the runtime');
        }
      }
      if (loaded) await this.unloadFromDevice(engine, model.name);
      this.host.states.set(model.name, 'UNAVAILABLE', reason);
      return reason;
    }
  }

  /**
   * READY → UNLOADING: refuse new requests, let the waiting and running ones finish (each ends:
   * completed, or rejected by the controller at its QoS deadline; a warning is logged when that
   * takes longer than `UNLOAD_DRAIN_MS`), then free the device.
   */
  private async takeDown(engine: BackendEngine, name: string, why: string): Promise<void> {
    const runtime = this.host.runtime();
    if (runtime === undefined) throw new Error('ModelLifecycle: the runtime is not started');
    this.host.states.set(name, 'UNLOADING', why);
    const drained = runtime.serviceDrained(name);
    if (!(await within(drained, UNLOAD_DRAIN_MS))) {
      this.host.logger?.warn({ model: name, pending: runtime.queueLength(name), afterMs: UNLOAD_DRAIN_MS }, 'unload: still waiting for the model\'s requests to finish');
      await drained;
    }
    runtime.removeService(name);
    await this.unloadFromDevice(engine, name);
  }

  private async unloadFromDevice(engine: BackendEngine, name: string): Promise<void> {
    try {
      await (engine.unloadModel !== undefined ? engine.unloadModel(name) : (engine.device.unload?.(name) ?? Promise.resolve()));
    } catch (err) {
      this.host.logger?.warn({ model: name, err: describeError(err) }, 'unloading from the device failed');
    }
  }
}

/**
 * The `config` of a load request's parameters (undefined when none), after the security checks:
 * only `config` is accepted (a `file:…` parameter — Triton's model files sent in the request —
 * and anything else is refused), a string of at most `MAX_LOAD_CONFIG_BYTES`.
 * @throws ServeError bad_request naming the parameter.
 */
export function loadConfigParameter(name: string, parameters: Readonly<Record<string, unknown>> | undefined): string | undefined {
  if (parameters === undefined || parameters === null) return undefined;
  if (typeof parameters !== 'object' || Array.isArray(parameters)) throw new ServeError('bad_request', `load '${name}': parameters must be an object`);
  for (const key of Object.keys(parameters)) {
    if (key.startsWith('file:')) throw new ServeError('bad_request', `load '${name}': parameters.${key.slice(0, 80)}: model files are never accepted in a load request; a load names a zoo or imported model already in the server's model repository (parameters.config.model)`);
    if (!LOAD_PARAMETERS.includes(key)) throw new ServeError('bad_request', `load '${name}': parameters.${key.slice(0, 80)}: unknown parameter (accepted: ${LOAD_PARAMETERS.join(', ')})`);
  }
  const config: unknown = parameters['config'];
  if (config === undefined) return undefined;
  if (typeof config !== 'string') throw new ServeError('bad_request', `load '${name}': parameters.config must be a string (JSON text of one service entry), got ${describeValue(config)}`);
  const bytes = Buffer.byteLength(config, 'utf8');
  if (bytes > MAX_LOAD_CONFIG_BYTES) throw new ServeError('bad_request', `load '${name}': parameters.config is ${bytes} bytes; at most ${MAX_LOAD_CONFIG_BYTES}`);
  return config;
}
