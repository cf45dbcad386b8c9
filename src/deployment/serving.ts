/**
 * The assembly of `abacus serve` from a serving config (docs/design.md#deployment-and-cli): the services (with dynamic batching on
 * by default where the model can fuse, logged per service), the runtime backend the HTTP and
 * gRPC front ends call, its Prometheus metrics, and `openEngine` — which finds or makes the
 * predictor (`ensurePredictor`; profiling may take minutes, so the server listens and reports
 * not ready meanwhile), creates the controller and opens the device. Listening is the caller's
 * (`serve/server.ts` `startServer`).
 */
import { readFile, stat } from 'node:fs/promises';
import { expandVersions } from './versions.ts';
import { withDeviceDefaults } from './policy-defaults.ts';
import { describeError, InvalidConfigError, InvalidModelError } from '../errors.ts';
import type { DeviceService } from '../device/device.ts';
import { neighboursBeside } from '../device/neighbours.ts';
import type { ModelArtifact } from '../model/artifact.ts';
import type { Logger } from '../log.ts';
import { importVersion, ModelRepository, repairHintOf } from '../model/repository.ts';
import { maxQosMsOf, parseServiceConfig, type ServingConfig } from '../runtime/config.ts';
import { predictorFromFile, readPredictorFile } from '../predict/file.ts';
import type { Predictor } from '../predict/predictor.ts';
import { calibrationSlots, OpenPredictor } from '../predict/unseen.ts';
import { parseModelRef } from '../model/catalog.ts';
import { RecordFeed } from '../runtime/feed.ts';
import { createController, FUSING_POLICIES, isPolicyName, parseControllerParams, POLICY_NAMES, policyNeedsPredictor } from '../schedule/index.ts';
import { RuntimeBackend, type BackendEngine, type ModelControl, type ServedModel } from '../serve/backend.ts';
import { ServeError } from '../serve/inference.ts';
import { ServeMetrics } from '../serve/metrics.ts';
import { formatArrivalSpec } from '../workload/arrival-spec.ts';
import type { DeploymentContext } from './context.ts';
import { deviceServiceOf, ensurePredictor, openEnv, resolveServices, type Hosted } from './services.ts';
import { measureSoloOnSim } from './solo-measure.ts';

/** Options of `assembleServing`. */
export interface ServingOptions {
  readonly logger: Logger;
  /** `ServerMetadata.version`. */
  readonly serverVersion: string;
  /** Seed of the simulated device's noise (sim devices only). */
  readonly seed: number;
  /** A predictor file (else the config's, else one profiled and cached). */
  readonly predictorFile?: string;
  /** Serve models the predictor file was not trained on (scored by their features). */
  readonly allowUnseen?: boolean;
  /** Groups profiled when no predictor is cached. */
  readonly profileSamples?: number;
  /** onnxruntime intra-op threads per executor (ort). */
  readonly threads?: number;
  /**
   * `explicit`: Triton's explicit model control — the repository extension's load and unload
   * work (`abacus serve --model-control explicit`); `none` (default): they answer 403.
   */
  readonly modelControl?: ModelControlMode;
  /** Server readiness rule (`RuntimeBackendOptions.strictReadiness`) [true]. */
  readonly strictReadiness?: boolean;
}

/** `abacus serve --model-control`: `none` (default) or `explicit` (load/unload at runtime). */
export type ModelControlMode = 'none' | 'explicit';
export const MODEL_CONTROL_MODES: readonly ModelControlMode[] = ['none', 'explicit'];

/** A model name in a load request's `config.model`: a zoo or imported model NAME (`NAME[:N]`), never a path. */
const MODEL_REF_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}(@[0-9]{1,6})?(:[0-9]{1,4})?$/;

/** Where a load request's service settings come from, in error messages. */
const LOAD_CONFIG_SOURCE = 'parameters.config';

/** What `startServer` needs: the backend, its metrics and the engine opener; and the resolved services. */
export interface ServingAssembly {
  readonly hosted: Hosted;
  readonly backend: RuntimeBackend;
  readonly metrics: ServeMetrics;
  /** Every group and query record as it ends (observed by the dashboard; free while unobserved). */
  readonly feed: RecordFeed;
  /** `signal` (the server shutting down) stops profiling and training and rejects; nothing is left running. */
  readonly openEngine: (signal?: AbortSignal) => Promise<BackendEngine>;
}

/**
 * Check the config's policy, resolve its services (building zoo models on first use) and
 * prepare the backend; the predictor and the device are opened by `openEngine`.
 * @throws InvalidConfigError naming the file and field for an unknown policy, bad policy
 *   parameters, or a bad service (model, batch sizes, sequence lengths, dynamic batching).
 */
export async function assembleServing(ctx: DeploymentContext, given: ServingConfig, options: ServingOptions): Promise<ServingAssembly> {
  let config = given;
  const policyName = config.policy.name;
  if (!isPolicyName(policyName)) throw new InvalidConfigError(`${config.source}: policy: unknown policy '${policyName}' (valid: ${POLICY_NAMES.join(', ')})`);
  const fuses = FUSING_POLICIES.has(policyName);
  try {
    parseControllerParams(config.policy.name, config.policy.params);
  } catch (err) {
    if (err instanceof RangeError || err instanceof TypeError) throw new InvalidConfigError(`${config.source}: policy: ${err.message}`, { cause: err });
    throw err;
  }
  const { logger } = options;
  for (const w of config.warnings) logger.warn(w);
  if (config.device.startsWith('sim') && config.executorMemoryLimitMb !== undefined) logger.warn({ executorMemoryLimitMb: config.executorMemoryLimitMb }, 'executorMemoryLimitMb applies to ort executors; a simulated device has none, so it is ignored');
  if (config.arrivals !== undefined) logger.info({ arrivals: formatArrivalSpec(config.arrivals) }, 'arrivals is read by bench and simulate; serve answers the load its clients send');
  const repo = new ModelRepository(ctx.cacheOptions());
  // one service per served version of each model (versionPolicy)
  const versioned = await expandVersions(repo, config);
  config = versioned.config;
  // dynamic batching on by default on a simulated device only: on a CPU it did not pay (docs/batching.md), so there a config asks for it
  const hosted = await resolveServices(ctx, repo, config, { batchingByDefault: config.device.startsWith('sim') });
  for (const [service, b] of hosted.batching ?? []) {
    if (b.kind === 'on' && !fuses) {
      logger.info({ service, policy: config.policy.name }, `dynamic batching off: the policy runs every request alone (fusing policies: ${[...FUSING_POLICIES].join(', ')})`);
    } else if (b.kind === 'on') {
      logger.info({ service, ...b.limits }, 'dynamic batching on');
      const qosTargetMs = hosted.services.find((s) => s.name === service)?.qosTargetMs ?? Infinity;
      if (config.policy.name === 'triton' && b.limits.maxQueueDelayMs >= qosTargetMs) {
        logger.warn({ service, maxQueueDelayMs: b.limits.maxQueueDelayMs, qosTargetMs }, 'maxQueueDelayMs is not below the QoS target: a batch that does not fill waits past every deadline in it');
      }
    } else if (b.by === 'model') logger.info({ service, reason: b.blocker }, 'dynamic batching off: the model cannot batch');
    else logger.info({ service }, b.by === 'config' ? 'dynamic batching off (dynamicBatching: false)' : hosted.isSim ? 'dynamic batching off' : 'dynamic batching off: on a CPU device it is on only when the config sets dynamicBatching');
  }
  const labels = new Map<string, string[]>();
  for (const [i, c] of config.services.entries()) if (c.labels !== undefined) labels.set(c.name, await readLabelsFile(c.labels, `${config.source}: services[${i}].labels`));
  const models: ServedModel[] = hosted.services.map((s) => {
    const c = config.services.find((x) => x.name === s.name)!;
    const l = labels.get(s.name);
    const v = versioned.versions.get(s.name);
    return { name: s.name, spec: s.spec, qosTargetMs: s.qosTargetMs, maxQosMs: maxQosMsOf(c), batchSizes: s.batchSizes, maxQueueLength: s.maxQueueLength, ...(s.batching === undefined ? {} : { batching: s.batching }), ...(l === undefined ? {} : { labels: l }), ...(v === undefined ? {} : { modelName: v.modelName, version: v.version }) };
  });
  const metrics = new ServeMetrics({ models: models.map((m) => m.name), qosTargetsMs: models.map((m) => m.qosTargetMs) });
  // the device service of every model the backend may load, by served name (config models now; loaded ones when resolved)
  const deviceServices = new Map(hosted.services.map((s) => [s.name, deviceServiceOf(hosted, s)]));
  const modelControl: ModelControl | undefined =
    options.modelControl === 'explicit' ? { resolve: (name, text) => resolveLoadedModel(ctx, repo, config, hosted.isSim, name, text, deviceServices) } : undefined;
  const feed = new RecordFeed((err) => logger.error({ err: err instanceof Error ? (err.stack ?? err.message) : String(err) }, 'a record observer failed and was removed'));
  const backend = new RuntimeBackend({ models, platform: hosted.isSim ? 'abacus_sim' : 'onnxruntime_onnx', logger, metrics, serverVersion: options.serverVersion, feed, privatePaths: [{ path: repo.cacheDir, label: '<model cache>' }], strictReadiness: options.strictReadiness ?? true, shedHopeless: shedsHopeless(config.policy), policyFuses: fuses, ...(modelControl === undefined ? {} : { modelControl }) });
  const openEngine = async (signal?: AbortSignal): Promise<BackendEngine> => {
    const file = options.predictorFile ?? config.predictor;
    const predictorFor = async (h: Hosted) =>
      ensurePredictor(ctx, repo, h, {
        ...(file === undefined ? {} : { file, fromConfig: options.predictorFile === undefined }),
        ...(options.allowUnseen === true ? { allowUnseen: true } : {}),
        ...(options.profileSamples === undefined ? {} : { samples: options.profileSamples }),
        ...(options.threads === undefined ? {} : { threads: options.threads }),
        ...(signal === undefined ? {} : { signal }),
      });
    // Services that failed to load while the predictor was profiled: UNAVAILABLE with that reason (below).
    let probeFailures = new Map<string, string>();
    let predictor: Predictor | undefined;
    let open: OpenPredictor | undefined;
    if (policyNeedsPredictor(config.policy.name)) {
      let found;
      try {
        found = await predictorFor(hosted);
      } catch (err) {
        // profiling loads every model at once: find the ones that cannot load alone, profile without them
        if (file !== undefined || signal?.aborted === true) throw err;
        probeFailures = await probeServices(hosted, { seed: options.seed, ...(options.threads === undefined ? {} : { threads: options.threads }) });
        // each loads alone: the profile failed at a shape or in a group, and its error names the service
        if (probeFailures.size === 0) probeFailures = failedServiceOf(hosted, err);
        if (probeFailures.size === 0 || probeFailures.size === hosted.services.length) throw err;
        for (const [service, reason] of probeFailures) logger.error({ service, reason }, 'model cannot load: profiling the predictor without it');
        found = await predictorFor(subsetOf(hosted, (s) => !probeFailures.has(s)));
      }
      predictor = found.predictor;
      // With model control, a model loaded at runtime that the predictor was not trained on is admitted (predict/unseen.ts)
      if (modelControl !== undefined) {
        open = await openPredictor(predictor, found.source, hosted);
        predictor = open;
      }
    }
    signal?.throwIfAborted();
    const beside = neighboursBeside(); // the executors are ours, not neighbours (abacus `interference`)
    const controller = createController(config.policy.name, withDeviceDefaults(config.policy.name, config.policy.params, hosted.isSim), predictor, { logger, neighbours: beside.neighbours });
    const env = await openEnv(hosted, predictor, { virtual: false, seed: options.seed, loadServices: false, ...(options.threads === undefined ? {} : { threads: options.threads }) });
    const opened = await env.open();
    const device = opened.device;
    beside.attach(device);
    return {
      clock: opened.clock,
      device,
      controller,
      // one model at a time: a model that cannot load takes no other down (RuntimeBackend.start)
      loadModel: async (name: string): Promise<string | undefined> => {
        const service = deviceServices.get(name);
        if (service === undefined) throw new Error(`model '${name}' has no device service (not in the config and not resolved)`);
        const model = service.model;
        const failed = probeFailures.get(name);
        if (failed !== undefined && !predictor?.models.includes(model.spec.name)) throw new Error(withRepairHint(failed, model));
        let note: string | undefined;
        if (predictor !== undefined && (!predictor.models.includes(model.spec.name) || open?.admission(model.spec.name) !== undefined)) {
          const cannot = `the predictor does not know model '${model.spec.name}' (it scores ${predictor.models.join(', ')}); policy ${config.policy.name} needs a latency prediction for every query`;
          const remedy = 'serve it with a predictor trained on it (abacus serve --predictor FILE, or add the service to the config so that one is profiled), or use a policy without a predictor (triton, overlap-all)';
          // a config model: profiled with the others (or refused by --predictor at start-up), so only a model loaded at runtime gets here
          if (open === undefined) throw new Error(`${cannot}: ${remedy}`);
          let admission;
          try {
            const spec = model.spec;
            // sim: the cost fallback is fitted to the model's own solo runs on a private copy of the device (simulated time)
            const measure = hosted.isSim && !open.rebuilds && open.admission(spec.name) === undefined;
            const measured = measure ? await measureSoloOnSim(config.device, options.seed, model, calibrationSlots(spec)) : undefined;
            admission = open.admit(spec, measured === undefined ? {} : { measured, measuredOn: `a private copy of ${config.device} in simulated time` });
          } catch (err) {
            throw new Error(`${cannot}, and no fallback can score it (${describeError(err)}): ${remedy}`, { cause: err });
          }
          if (admission.how !== 'trained') {
            note = admission.note;
            logger.warn({ model: name, spec: model.spec.name, how: admission.how, note: admission.note }, 'model loaded at runtime is not in the predictor: served with a fallback prediction');
          }
        }
        try {
          await device.load([service]);
        } catch (err) {
          // an operator file that is missing, does not parse or does not match the spec: a damaged cache entry
          if (err instanceof InvalidModelError) {
            const message = withRepairHint(err.message, model);
            if (message !== err.message) throw new InvalidModelError(message, { cause: err });
          }
          throw err;
        }
        return note;
      },
      unloadModel: async (name: string) => {
        await device.unload?.(name);
      },
      close: async () => {
        await opened.release();
        await env.close();
      },
    };
  };
  return { hosted, backend, metrics, feed, openEngine };
}

/** The messages of `OrtDevice.load` for an operator file that cannot be used (`executor.ts`, `ort-device.ts`). */
const OPERATOR_FILE_FAILURE = /operator \d+ (\(.*?\) at .* (cannot be loaded|does not match its spec)|file .* does not exist or is not readable)/s;

/** `message` ending with how to repair the model's cache entry (`repairHintOf`) when it says an operator file cannot be used; else as it is. */
function withRepairHint(message: string, model: ModelArtifact): string {
  return OPERATOR_FILE_FAILURE.test(message) ? `${message}; ${repairHintOf(model)}` : message;
}

/**
 * The service a model load request describes (`ModelControl.resolve`): `text` is its
 * `parameters.config`, the JSON of one config-file service entry. Validated with the config
 * file's schema (`parseServiceConfig`) and rules (`resolveServices`: batch sizes, sequence
 * lengths, dynamic batching on by default where the model can fuse). The model must be a zoo
 * or imported model NAME already in the model repository (for `ort`: built; nothing is built
 * or written here). Its device service is put in `deviceServices` under `name`.
 * @throws ServeError bad_request naming the field (`parameters.config.model: …`).
 */
async function resolveLoadedModel(ctx: DeploymentContext, repo: ModelRepository, config: ServingConfig, isSim: boolean, name: string, text: string, deviceServices: Map<string, DeviceService>): Promise<ServedModel> {
  const bad = (detail: string, cause?: unknown): ServeError => new ServeError('bad_request', `load '${name}': ${detail}`, cause === undefined ? undefined : { cause });
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw bad(`${LOAD_CONFIG_SOURCE} is not valid JSON (${(err as Error).message})`, err);
  }
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw bad(`${LOAD_CONFIG_SOURCE} must be a JSON object: one service entry as in a config file ({"model": …, "qosTargetMs": …})`);
  const entry = raw as Record<string, unknown>;
  if (entry['name'] !== undefined && entry['name'] !== name) throw bad(`${LOAD_CONFIG_SOURCE}.name: ${JSON.stringify(entry['name'])?.slice(0, 80)} differs from the model name in the request`);
  const model = entry['model'];
  if (entry['versionPolicy'] !== undefined) throw bad(`${LOAD_CONFIG_SOURCE}.versionPolicy: a load request serves one version of a model; name it in model (NAME@V), or give the service a versionPolicy in the config file`);
  if (entry['labels'] !== undefined) throw bad(`${LOAD_CONFIG_SOURCE}.labels: a load request cannot name a file on the server; give the model its labels in the config file`);
  if (typeof model === 'string' && !MODEL_REF_PATTERN.test(model)) {
    throw bad(`${LOAD_CONFIG_SOURCE}.model: ${JSON.stringify(model.slice(0, 80))} is not a model name: a zoo or imported model NAME[:N] (1–64 letters, digits, '_', '.', '-'), never a path`);
  }
  let service;
  try {
    service = parseServiceConfig({ ...entry, name }, LOAD_CONFIG_SOURCE);
  } catch (err) {
    if (err instanceof InvalidConfigError) throw bad(err.message, err);
    throw err;
  }
  if (!isSim) {
    // ort: the model's operator files must be in the repository already (a load never builds or writes)
    let ref;
    try {
      ref = parseModelRef(service.model);
    } catch (err) {
      throw bad(`${LOAD_CONFIG_SOURCE}.model: ${(err as Error).message}`, err);
    }
    if (ref.kind === 'zoo' && !(await repo.isZooCached(ref.zoo, ref.options))) {
      throw bad(`${LOAD_CONFIG_SOURCE}.model: zoo model '${service.model}' is not built in the model repository; a load never builds or writes models: serve it once from a config, or build it with abacus models`);
    }
  }
  let hosted;
  try {
    hosted = await resolveServices(ctx, repo, { ...config, source: LOAD_CONFIG_SOURCE, services: [service] }, { batchingByDefault: isSim });
  } catch (err) {
    if (err instanceof InvalidConfigError) throw bad(err.message.replace(`${LOAD_CONFIG_SOURCE}: services[0].`, `${LOAD_CONFIG_SOURCE}.`), err);
    throw err;
  }
  const s = hosted.services[0]!;
  // one operator count per model in a server, as in a config (`resolveServices`): the predictor scores a model by its name
  for (const [other, d] of deviceServices) {
    const known = d.model.spec;
    if (known.name === s.spec.name && known.operators.length !== s.spec.operators.length) {
      throw bad(`${LOAD_CONFIG_SOURCE}.model: '${service.model}' is model ${s.spec.name} with ${s.spec.operators.length} operators, and model '${other}' of this server has it with ${known.operators.length}; a server serves one operator count per model, because the predictor knows a model by its name: load ${s.spec.name} with ${known.operators.length} operators, or serve this count from another server`);
    }
  }
  deviceServices.set(name, deviceServiceOf(hosted, s));
  return { name, spec: s.spec, qosTargetMs: s.qosTargetMs, maxQosMs: maxQosMsOf(service), batchSizes: s.batchSizes, maxQueueLength: s.maxQueueLength, ...(s.batching === undefined ? {} : { batching: s.batching }), version: String(importVersion(s.spec)) };
}

/**
 * The serving predictor made able to admit models loaded at runtime (`predict/unseen.ts`): a
 * `flop`-feature predictor file is rebuilt over the specs with the new one (it scores any model
 * by its costs), any other predictor gets the cost fallback calibrated on its trained models.
 * @throws what reading the predictor file throws (it was read once already).
 */
async function openPredictor(predictor: Predictor, source: string, hosted: Hosted): Promise<OpenPredictor> {
  const specs = new Map([...hosted.specs.values()].filter((s) => predictor.models.includes(s.name)).map((s) => [s.name, s]));
  const file = source.endsWith('.json') ? await readPredictorFile(source) : undefined;
  if (file?.features.set !== 'flop') return new OpenPredictor(predictor, { specs });
  return new OpenPredictor(predictor, { specs, rebuild: (all) => predictorFromFile(file, { deviceId: predictor.deviceId, models: all, allowUnseen: true }, source) });
}

/**
 * The services of the one model a profiling error names (`service NAME` in the messages of
 * `device/ort`, by service or model name), with the error as their reason; empty when it names
 * no model or several.
 */
export function failedServiceOf(hosted: Hosted, err: unknown): Map<string, string> {
  const message = describeError(err);
  const names = (name: string): boolean => new RegExp(`\\bservice ${name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\b`).test(message);
  const named = hosted.services.filter((s) => names(s.name) || names(s.spec.name));
  if (new Set(named.map((s) => s.spec.name)).size !== 1) return new Map();
  return new Map(named.map((s) => [s.name, `it failed while the predictor was profiled: ${message}`]));
}

/** `hosted` with only the services whose name passes `keep` (and their models). */
function subsetOf(hosted: Hosted, keep: (service: string) => boolean): Hosted {
  const services = hosted.services.filter((s) => keep(s.name));
  const configServices = hosted.config.services.filter((s) => keep(s.name));
  const models = new Set(configServices.map((s) => s.model));
  return {
    ...hosted,
    config: { ...hosted.config, services: configServices },
    services,
    specs: new Map([...hosted.specs].filter(([m]) => models.has(m))),
    artifacts: new Map([...hosted.artifacts].filter(([m]) => models.has(m))),
    ...(hosted.batching === undefined ? {} : { batching: new Map([...hosted.batching].filter(([s]) => keep(s))) }),
  };
}

/**
 * Load each service of `hosted` alone on a fresh device (and close it again): the reason of
 * every one that cannot load (a corrupt operator file, an operator failing its warm-up runs),
 * by service name. Only after profiling failed, so the happy path pays nothing.
 */
async function probeServices(hosted: Hosted, opts: { seed: number; threads?: number }): Promise<Map<string, string>> {
  const failures = new Map<string, string>();
  for (const s of hosted.services) {
    const one = subsetOf(hosted, (name) => name === s.name);
    try {
      const env = await openEnv(one, undefined, { virtual: true, seed: opts.seed, ...(opts.threads === undefined ? {} : { threads: opts.threads }) });
      try {
        const opened = await env.open();
        await opened.release();
      } finally {
        await env.close();
      }
    } catch (err) {
      failures.set(s.name, describeError(err));
    }
  }
  return failures;
}

/**
 * Whether the serving backend sheds requests that cannot finish within their QoS target before
 * decoding them (`serve/admission.ts`): for every policy that drops late queries itself, not for
 * `drop: false` or overlap-all, which run every query however late.
 */
export function shedsHopeless(policy: { readonly name: string; readonly params: Readonly<Record<string, unknown>> }): boolean {
  return policy.name !== 'overlap-all' && policy.params['drop'] !== false;
}

/** Largest labels file, bytes (a label per class; ImageNet's 1,000 labels take 22 KB). */
export const MAX_LABELS_FILE_BYTES = 16 * 1024 * 1024;

/**
 * A service's labels file (config `labels`): one label per line, line i for class index i
 * (Triton's `label_filename` format); a final empty line is not a label.
 * @throws InvalidConfigError naming `field` when the file cannot be read or is too large.
 */
export async function readLabelsFile(file: string, field: string): Promise<string[]> {
  let text: string;
  try {
    const info = await stat(file);
    if (info.size > MAX_LABELS_FILE_BYTES) throw new Error(`${info.size} bytes; at most ${MAX_LABELS_FILE_BYTES}`);
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new InvalidConfigError(`${field}: cannot read the labels file ${file}: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  const lines = text.split(/\r?\n/);
  if (lines.at(-1) === '') lines.pop();
  return lines;
}
