/**
 * The assembly of a deployment from a serving config (docs/design.md#deployment-and-cli; the layer under the CLI, the server, the
 * demo and the benchmarks): resolve the config's models into services (`resolveServices`,
 * building zoo models on first use), find or make the predictor (`ensurePredictor`: a given
 * file, or profiled and trained on the device and cached, `predictor-cache.ts`), and open the
 * device with every service loaded (`openEnv`). `serving.ts` adds the controller, the runtime
 * backend and its metrics for `abacus serve`.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import type { Clock } from '../clock/clock.ts';
import { VirtualClock, WallClock } from '../clock/index.ts';
import type { Device, DeviceService } from '../device/device.ts';
import { OrtDevice } from '../device/ort/index.ts';
import { parseSimDeviceId, SimDevice } from '../device/sim/index.ts';
import { InvalidConfigError } from '../errors.ts';
import { createLogger } from '../log.ts';
import { artifactAt, type ModelArtifact } from '../model/artifact.ts';
import { fixedBatchOf } from '../model/boundary.ts';
import { withInputDomains } from '../model/input-domain.ts';
import { resolveModelArtifact, resolveModelSpec } from '../model/catalog.ts';
import type { ModelRepository } from '../model/repository.ts';
import { MAX_BATCH_SIZE, type ModelSpec } from '../model/spec.ts';
import { loadPredictor } from '../predict/file.ts';
import type { Predictor } from '../predict/predictor.ts';
import { resolveBatching, type BatchingResolution, type ServingConfig } from '../runtime/config.ts';
import type { ExperimentEnv, ExperimentService } from '../runtime/experiment.ts';
import { parseControllerParams } from '../schedule/index.ts';
import { formatThreadRule, parseThreadRule, threadDeviceOptions, type ThreadRule } from '../threads.ts';
import type { DeploymentContext } from './context.ts';
import type { LoadSample, ProfileConditions } from './load-conditions.ts';
import { cachedPredictor } from './predictor-cache.ts';
import type { ModelShapes } from '../profile/sampler.ts';

export { predictorCacheDir } from './predictor-cache.ts';

/** Profiling defaults for an automatic predictor (sim is cheap; real devices take minutes). */
export const AUTO_PROFILE = { simSamples: 10_000, ortSamples: 1_000, repeat: 5, maxGroupSize: 4 } as const;


/** The services of a run with their models resolved (exported for `abacus demo`). */
export interface Hosted {
  readonly config: ServingConfig;
  readonly services: ExperimentService[];
  /** Distinct models by name. */
  readonly specs: Map<string, ModelSpec>;
  readonly artifacts: Map<string, ModelArtifact>;
  readonly isSim: boolean;
  /** How each service batches (`resolveBatching`), by service name; a service with `on` carries `batching`. */
  readonly batching?: ReadonlyMap<string, BatchingResolution>;
}

/**
 * Resolve the config's models (building zoo models when missing) into `Hosted` (exported for
 * `abacus demo`). `options.batchingByDefault`: services that do not mention `dynamicBatching`
 * batch where their model can fuse (`abacus serve`); otherwise only those that ask for it.
 * @throws InvalidConfigError naming the file and field (model, batchSizes, seqLens, dynamicBatching);
 *   for two model references that are one model (`mynet:2` and `mynet:4`, two operator counts of
 *   one import): the profiler and the predictor know a model by its spec name, so one config
 *   serves one count of it.
 */
export async function resolveServices(ctx: DeploymentContext, repo: ModelRepository, config: ServingConfig, options: { batchingByDefault?: boolean } = {}): Promise<Hosted> {
  const isSim = config.device.startsWith('sim');
  if (isSim) parseSimDeviceId(config.device);
  else if (config.device !== 'ort' && config.device !== 'ort:cpu') throw new InvalidConfigError(`device '${config.device}' is not supported here: use ort (CPU) or sim:<gpu>…`);
  const specs = new Map<string, ModelSpec>();
  const artifacts = new Map<string, ModelArtifact>();
  /** The first service of each model (spec name), to refuse a second reference to it. */
  const firstOf = new Map<string, { index: number; ref: string; operators: number }>();
  const modelField = (i: number): string => (config.source === 'flags' ? '--models' : `${config.source}: services[${i}].model`);
  for (const [i, s] of config.services.entries()) {
    if (specs.has(s.model)) continue;
    try {
      if (isSim) {
        const spec = await resolveModelSpec(repo, s.model);
        specs.set(s.model, spec);
        artifacts.set(s.model, artifactAt('/nonexistent', spec));
      } else {
        const { artifact } = await resolveModelArtifact(repo, s.model, (n) => ctx.err(`building ${n} (first run only; cached in ${repo.cacheDir}) …\n`));
        specs.set(s.model, artifact.spec);
        artifacts.set(s.model, artifact);
      }
    } catch (err) {
      if (err instanceof RangeError || err instanceof TypeError) throw new InvalidConfigError(`${config.source}: services[${i}].model: ${err.message}`, { cause: err });
      throw err;
    }
    const spec = specs.get(s.model)!;
    const first = firstOf.get(spec.name);
    if (first !== undefined) {
      const other = config.source === 'flags' ? `'${first.ref}'` : `services[${first.index}].model '${first.ref}'`;
      const counts = first.operators === spec.operators.length ? `the same model as ${other}` : `model ${spec.name} with ${spec.operators.length} operators, and ${other} serves it with ${first.operators}`;
      throw new InvalidConfigError(
        `${modelField(i)}: '${s.model}' is ${counts}; a config serves one operator count per model, because the profiler and the predictor know a model by its name (${spec.name}). Give every service of ${spec.name} the same model (one count), and serve another count from another server (its own config, or loaded at runtime with abacus serve --model-control explicit by a server whose config does not serve ${spec.name})`,
      );
    }
    firstOf.set(spec.name, { index: i, ref: s.model, operators: spec.operators.length });
  }
  const field = (i: number, name: string): string => (config.source === 'flags' ? `--${name === 'seqLens' ? 'seq-lens' : 'batch-sizes'}` : `${config.source}: services[${i}].${name}`);
  for (const [i, s] of config.services.entries()) {
    const spec = specs.get(s.model)!;
    const fixed = fixedBatchOf(spec);
    const tooBig = s.batchSizes.find((b) => b > MAX_BATCH_SIZE || (fixed !== undefined && b !== fixed));
    if (tooBig !== undefined) throw new InvalidConfigError(`${field(i, 'batchSizes')}: batch size ${tooBig} is not accepted by ${s.model} (${fixed !== undefined ? `fixed batch ${fixed}` : `at most ${MAX_BATCH_SIZE}`})`);
    if (spec.dynamicAxes.seq === undefined) {
      if (s.seqLens !== undefined && config.source !== 'flags') throw new InvalidConfigError(`${field(i, 'seqLens')}: ${s.model} has no sequence axis; leave seqLens out`);
    } else if (spec.maxSeqLen !== undefined) {
      const long = (s.seqLens ?? []).find((l) => l > spec.maxSeqLen!);
      if (long !== undefined) throw new InvalidConfigError(`${field(i, 'seqLens')}: sequence length ${long} exceeds ${s.model}'s maximum ${spec.maxSeqLen}`);
    }
  }
  // Declared input domains replace the implied ones; services sharing a model must agree.
  const declared = new Map<string, { index: number; text: string }>();
  for (const [i, s] of config.services.entries()) {
    if (s.inputs === undefined) continue;
    const text = JSON.stringify(Object.entries(s.inputs).sort(([a], [b]) => a.localeCompare(b)));
    const prev = declared.get(s.model);
    if (prev !== undefined) {
      if (prev.text !== text) throw new InvalidConfigError(`${config.source}: services[${i}].inputs: services[${prev.index}] declares other inputs for the same model ${s.model}; give them the same inputs`);
      continue;
    }
    declared.set(s.model, { index: i, text });
    let spec: ModelSpec;
    try {
      spec = withInputDomains(specs.get(s.model)!, s.inputs);
    } catch (err) {
      if (err instanceof RangeError) throw new InvalidConfigError(`${config.source}: services[${i}].inputs: ${err.message}`, { cause: err });
      throw err;
    }
    specs.set(s.model, spec);
    artifacts.set(s.model, artifactAt(artifacts.get(s.model)!.dir, spec));
  }
  const batching = new Map(config.services.map((s, i) => [s.name, resolveBatching(config, i, specs.get(s.model)!, options.batchingByDefault === true)]));
  const services: ExperimentService[] = config.services.map((s) => {
    const spec = specs.get(s.model)!;
    const b = batching.get(s.name)!;
    return {
      name: s.name,
      spec,
      qosTargetMs: s.qosTargetMs,
      maxQueueLength: s.maxQueueLength,
      batchSizes: s.batchSizes,
      ...(spec.dynamicAxes.seq === undefined ? {} : { seqLens: s.seqLens ?? [spec.defaultSeqLen] }),
      ...(b.kind === 'on' ? { batching: b.limits } : {}),
    };
  });
  return { config, services, specs, artifacts, isSim, batching };
}

/**
 * The batch sizes a service's segments may run at, for profiling its predictor: its
 * `batchSizes`, and with dynamic batching also every size up to min(`maxBatchSize`, 16), the
 * powers of two beyond, the maximum itself and the preferred sizes (a fused batch has any size
 * up to the maximum; these span the range the predictor must score).
 */
export function profiledBatchSizes(service: Pick<ExperimentService, 'batchSizes' | 'batching'>): number[] {
  const sizes = new Set(service.batchSizes);
  const limits = service.batching;
  if (limits !== undefined) {
    for (let b = 1; b <= Math.min(limits.maxBatchSize, 16); b++) sizes.add(b);
    for (let b = 32; b < limits.maxBatchSize; b *= 2) sizes.add(b);
    sizes.add(limits.maxBatchSize);
    for (const b of limits.preferredBatchSizes) sizes.add(b);
  }
  return [...sizes].sort((a, b) => a - b);
}

/**
 * The predictor for `hosted`: the given file, or one profiled and trained now (cached by
 * device, models, batch sizes and sequence lengths; a second call loads it). `maxGroupSize`
 * (default min(4, services)): 1 profiles solo runs only, enough for one-at-a-time policies.
 * On a real device a cached one also carries the load it was profiled under
 * (`predictor-cache.ts`).
 */
export async function ensurePredictor(
  ctx: DeploymentContext,
  repo: ModelRepository,
  hosted: Hosted,
  opts: { file?: string; fromConfig?: boolean; allowUnseen?: boolean; samples?: number; threads?: number; threadRules?: readonly ThreadRule[]; maxGroupSize?: number; quiet?: boolean; loadBefore?: LoadSample; signal?: AbortSignal },
): Promise<{ predictor: Predictor; source: string; conditions?: ProfileConditions; note?: string }> {
  const deviceId = hosted.isSim ? parseSimDeviceId(hosted.config.device).id : 'ort:cpu';
  if (opts.file !== undefined) {
    const byModelName = new Map([...hosted.specs.values()].map((s) => [s.name, s]));
    try {
      await fs.access(opts.file);
    } catch (err) {
      const where = opts.fromConfig === true ? `${hosted.config.source}: predictor` : '--predictor';
      throw new InvalidConfigError(`${where}: cannot read ${opts.file}: ${(err as Error).message}`, { cause: err });
    }
    return { predictor: await loadPredictor(opts.file, { deviceId, models: byModelName, ...(opts.allowUnseen ? { allowUnseen: true } : {}) }), source: opts.file };
  }
  const batchSizes = hosted.services.flatMap((s) => profiledBatchSizes(s));
  const seqLens = hosted.services.flatMap((s) => s.seqLens ?? []);
  const shapes = ownShapes(hosted.services, batchSizes, seqLens);
  return cachedPredictor(ctx, repo, {
    deviceId,
    models: [...hosted.artifacts.values()],
    batchSizes,
    seqLens,
    ...(shapes === undefined ? {} : { shapes }),
    ...(opts.signal === undefined ? {} : { signal: opts.signal }),
    maxGroupSize: opts.maxGroupSize ?? Math.min(AUTO_PROFILE.maxGroupSize, hosted.services.length),
    samples: opts.samples ?? (hosted.isSim ? AUTO_PROFILE.simSamples : AUTO_PROFILE.ortSamples),
    repeat: AUTO_PROFILE.repeat,
    ...(opts.threads === undefined ? {} : { threads: opts.threads }),
    ...(opts.threadRules === undefined || opts.threadRules.length === 0 || hosted.isSim ? {} : { threadRules: opts.threadRules }),
    ...(opts.quiet === true ? { quiet: true } : {}),
    ...(opts.loadBefore === undefined ? {} : { loadBefore: opts.loadBefore }),
  });
}

/**
 * Per model (spec name): the batch sizes and sequence lengths of its own services, so a model
 * is profiled only at shapes it is served at, never at another service's (an onnxruntime model
 * may refuse those). Undefined when every model's shapes are the shared lists (`batchSizes`,
 * `seqLens`), which keeps the predictor cache key of such configs as it was.
 */
export function ownShapes(services: readonly ExperimentService[], batchSizes: readonly number[], seqLens: readonly number[]): ReadonlyMap<string, ModelShapes> | undefined {
  const byModel = new Map<string, { batchSizes: Set<number>; seqLens: Set<number>; spec: ModelSpec }>();
  for (const s of services) {
    let m = byModel.get(s.spec.name);
    if (m === undefined) byModel.set(s.spec.name, (m = { batchSizes: new Set(), seqLens: new Set(), spec: s.spec }));
    for (const b of profiledBatchSizes(s)) m.batchSizes.add(b);
    for (const l of s.seqLens ?? []) m.seqLens.add(l);
  }
  // a sequence model none of whose services lists seqLens is served (and warmed up) at its default
  for (const m of byModel.values()) if (m.spec.dynamicAxes.seq !== undefined && m.seqLens.size === 0) m.seqLens.add(m.spec.defaultSeqLen);
  const same = (a: ReadonlySet<number>, b: readonly number[]): boolean => a.size === new Set(b).size && b.every((x) => a.has(x));
  // what the sampler draws for a model without shapes: the shared lists (its default sequence length when none is shared)
  const shared = (m: { spec: ModelSpec }): readonly number[] => (seqLens.length > 0 ? seqLens : [m.spec.defaultSeqLen]);
  const differs = [...byModel.values()].some((m) => !same(m.batchSizes, batchSizes) || (m.spec.dynamicAxes.seq !== undefined && !same(m.seqLens, shared(m))));
  if (!differs) return undefined;
  return new Map([...byModel].map(([model, m]) => [model, { batchSizes: [...m.batchSizes], seqLens: [...m.seqLens] }]));
}

/**
 * The thread rules the runs' policies use (their `threads` parameter), without `device`.
 * @throws what `parseControllerParams` throws for a bad parameter.
 */
export function runThreadRules(runs: readonly { policy: string; params: Readonly<Record<string, unknown>> }[]): ThreadRule[] {
  const rules = new Map<string, ThreadRule>();
  for (const r of runs) {
    const text = parseControllerParams(r.policy, r.params)['threads'];
    if (typeof text !== 'string') continue;
    const rule = parseThreadRule(text);
    if (rule.kind !== 'device') rules.set(formatThreadRule(rule), rule);
  }
  return [...rules.values()];
}

/**
 * The rules an automatic predictor is profiled with when runs use `used` (non-empty): those,
 * plus `fixed:1` and `split:<cores>` — so that every run that uses a rule on this machine
 * (one thread per segment, or the cores split) shares one cached predictor, and it has seen a
 * lone query at 1 thread and at every core. Empty when `used` is.
 */
export function profileThreadRules(used: readonly ThreadRule[], cores: number): ThreadRule[] {
  if (used.length === 0) return [];
  const all = new Map<string, ThreadRule>();
  for (const r of [{ kind: 'fixed', threads: 1 } as const, { kind: 'split', cores } as const, ...used]) all.set(formatThreadRule(r), r);
  return [...all.values()];
}

/** Warn when the predictor and the runs' thread rules do not go together (docs/threads.md). */
export function warnThreadMismatch(ctx: DeploymentContext, predictor: Predictor | undefined, source: string, used: readonly ThreadRule[], anyDeviceRule: boolean): void {
  if (predictor === undefined) return;
  if (used.length > 0 && predictor.threadFeature !== true) {
    ctx.err(`warning: ${source} was trained without thread counts: it predicts the same latency at every thread count, so ${used.map(formatThreadRule).join(', ')} decide${used.length === 1 ? 's' : ''} with predictions for the device's default (profile with --thread-rules, or let bench profile one)\n`);
  }
  if (anyDeviceRule && predictor.threadFeature === true) {
    ctx.err(`warning: ${source} was trained with thread counts, but some runs use threads 'device', which it sees as thread count 0 (never profiled): give those runs --thread-rule fixed:N (N = --threads)\n`);
  }
}

/**
 * The device service of hosted service `s`: its name, its model's artifact, and every shape it
 * serves (batch sizes × sequence lengths; `seqLen` 0 for models without a sequence axis), which
 * `ort` warms up until steady before the service is ready (docs/serving.md "Warm-up").
 */
export function deviceServiceOf(hosted: Hosted, s: ExperimentService): DeviceService {
  return {
    name: s.name,
    model: hosted.artifacts.get(hosted.config.services.find((c) => c.name === s.name)!.model)!,
    warmupShapes: s.batchSizes.flatMap((batchSize) => (s.seqLens ?? [0]).map((seqLen) => ({ batchSize, seqLen }))),
  };
}

/** An environment for `runExperiment`: a fresh simulated device per run, or one real device for all (exported for `abacus demo`). */
export async function openEnv(
  hosted: Hosted,
  predictor: Predictor | undefined,
  opts: { virtual: boolean; seed: number; threads?: number; threadRules?: readonly ThreadRule[]; loadServices?: boolean },
): Promise<ExperimentEnv & { close(): Promise<void> }> {
  // `loadServices: false` (abacus serve): the caller loads each service alone, so that one that fails takes no other down
  const load = opts.loadServices !== false;
  const deviceServices = hosted.services.map((s) => deviceServiceOf(hosted, s));
  if (hosted.isSim) {
    return {
      predictor,
      open: async () => {
        const clock: Clock = opts.virtual ? new VirtualClock() : new WallClock();
        const device = await SimDevice.create({ clock, id: hosted.config.device, seed: opts.seed });
        if (load) await device.load(deviceServices);
        return { clock, device, release: () => device.close() };
      },
      close: () => Promise.resolve(),
    };
  }
  const device: Device = await OrtDevice.create({
    intraOpNumThreads: opts.threads ?? 1,
    ...(hosted.config.executorMemoryLimitMb === undefined ? {} : { executorMemoryLimitMb: hosted.config.executorMemoryLimitMb }),
    // Sessions for every thread count the rules give groups of up to all services, created at load.
    ...threadDeviceOptions(opts.threadRules ?? [], hosted.services.length, os.availableParallelism()),
    logger: createLogger({ defaultLevel: 'warn' }),
  });
  if (load) await device.load(deviceServices);
  const clock = new WallClock();
  return { predictor, open: () => Promise.resolve({ clock, device, release: () => Promise.resolve() }), close: () => device.close() };
}

