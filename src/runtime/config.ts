/**
 * The serving config (docs/serving.md#the-config-file: one YAML/JSON file listing
 * device, predictor, policy and services), validated with a zod schema; every error names the
 * file and the field (`services[1].qosTargetMs: …`).
 *
 * ```yaml
 * device: sim:a100            # sim:<gpu>[…] or ort (ort:cpu)
 * predictor: predictor.json   # optional: trained and cached on first use when absent
 * policy: abacus              # or { name: abacus, ways: 2, slackMs: 5, drop: true }
 * executorMemoryLimitMb: 512 # ort only, optional: restart an executor whose RSS exceeds this many MiB
 * arrivals: poisson           # bench / simulate: poisson | constant | bursty[:…] | trace:FILE[,…],
 *                             # or { kind: bursty, onMs: 500, offMs: 1500, offRatio: 0 } (workload/arrival-spec.ts)
 * services:
 *   - name: resnet50          # served name (default: the model name)
 *     model: resnet50         # zoo name, <zoo>-small, or an imported model (NAME[:N])
 *     qosTargetMs: 50
 *     batchSizes: [1, 2, 4, 8]
 *     seqLens: [16, 32]       # sequence models only
 *     maxQueueLength: 1000    # queries waiting beyond this are rejected as `overloaded`
 *     maxQosMs: 500           # abacus serve: largest per-request `qos_ms` (default 10 × qosTargetMs)
 *     labels: labels.txt      # abacus serve, optional: class labels for the classification extension
 *     versionPolicy: { latest: 2 }  # abacus serve, imported models: which versions ({ all: true }, { specific: [1, 3] })
 *     dynamicBatching:        # or false (off), or true (on, these defaults); see below
 *       maxBatchSize: 16
 *       maxQueueDelayMs: 0
 *       preferredBatchSizes: []
 * ```
 * Relative paths (`predictor`, a service's `labels`, a trace file in `arrivals`) are resolved against the config file's folder.
 *
 * Keys are camelCase everywhere. A snake_case key is an unknown field (the error suggests the
 * camelCase one), except policy parameters, whose old snake_case spelling (`slack_ms`) is still
 * accepted with a warning naming the new one (`ServingConfig.warnings`).
 *
 * ## Dynamic batching (`dynamicBatching`, docs/batching.md)
 * Triton's `dynamic_batching` fields in camelCase (`BatchingLimits` in `schedule/controller.ts`):
 * a fusing policy may run up to `maxBatchSize` samples of a service's waiting queries as one
 * batch. `batchSizes` keeps its meaning (the batch sizes a client may send); a fused batch has
 * any size in [1, maxBatchSize], and a client batch of b samples counts b samples (one larger
 * than maxBatchSize runs alone).
 * - absent: in `abacus serve`, on with `DEFAULT_BATCHING` for a model with a dynamic batch axis
 *   that can fuse, off (and logged) for one that cannot; in `bench` / `simulate`, off;
 * - an object, or `true` (= `DEFAULT_BATCHING`): on; for a model that cannot fuse an error
 *   naming the field (`services[1].dynamicBatching: …`, `resolveBatching`);
 * - `false`: off.
 */
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { MAX_BATCH_SIZE, MAX_SEQ_LEN } from '../model/spec.ts';
import { InvalidConfigError } from '../errors.ts';
import { batchFusionBlocker, fixedBatchOf } from '../model/boundary.ts';
import { MODEL_NAME_PATTERN, reservedModelName } from '../model/repository.ts';
import type { InputDomain, ModelSpec } from '../model/spec.ts';
import type { BatchingLimits } from '../schedule/controller.ts';
import { arrivalSpecOf, parseArrivalSpec, type ArrivalSpec } from '../workload/arrival-spec.ts';

const positiveInt = z.number().int().min(1);

/**
 * A service's batching limits when its config gives none: Triton's `dynamic_batching` with no
 * fields but `max_batch_size` 16, Clockwork's `max_batch` (OSDI'20 §5); no queue delay (a
 * batch launches with what is waiting), no preferred sizes.
 */
export const DEFAULT_BATCHING: BatchingLimits = Object.freeze({ maxBatchSize: 16, maxQueueDelayMs: 0, preferredBatchSizes: Object.freeze([]) });

const batchingSchema = z.strictObject({
  maxBatchSize: positiveInt.max(MAX_BATCH_SIZE).default(DEFAULT_BATCHING.maxBatchSize),
  maxQueueDelayMs: z.number().min(0).finite().default(DEFAULT_BATCHING.maxQueueDelayMs),
  preferredBatchSizes: z.array(positiveInt).default([]),
});

/**
 * Most entries of a service's `batchSizes` / `seqLens`. Every entry is profiled and warmed up at
 * load (one run per batch size × sequence length), so the list length is paid in start-up time:
 * a load with 5,000 entries of `[1]` warmed up for 45 s. 64 covers every power of two up to
 * `MAX_BATCH_SIZE` (17) several times over.
 */
export const MAX_SHAPE_LIST_LENGTH = 64;

/**
 * A list of distinct positive integers of at most `MAX_SHAPE_LIST_LENGTH` entries, each at most
 * `max`; a repeat is an issue at its index naming the value and where it first appeared.
 */
const distinctSizes = (max: number) =>
  z
    .array(positiveInt.max(max))
    .min(1)
    .max(MAX_SHAPE_LIST_LENGTH, `at most ${MAX_SHAPE_LIST_LENGTH} entries (each is profiled and warmed up at load)`)
    .superRefine((list, ctx) => {
      const first = new Map<number, number>();
      list.forEach((n, j) => {
        const at = first.get(n);
        if (at !== undefined) ctx.addIssue({ code: 'custom', path: [j], message: `${n} is listed twice (also at [${at}]); list each value once` });
        else first.set(n, j);
      });
    });

const serviceSchema = z.strictObject({
  name: z.string().regex(MODEL_NAME_PATTERN, 'must be 1–64 letters, digits, _ . - starting with a letter or digit').optional(),
  model: z.string().min(1),
  qosTargetMs: z.number().positive().finite(),
  batchSizes: distinctSizes(MAX_BATCH_SIZE).default([1]),
  seqLens: distinctSizes(MAX_SEQ_LEN).optional(),
  maxQueueLength: positiveInt.default(10_000),
  maxQosMs: z.number().positive().finite().optional(),
  labels: z.string().min(1).optional(),
  versionPolicy: z
    .union([z.strictObject({ latest: positiveInt }), z.strictObject({ all: z.literal(true) }), z.strictObject({ specific: z.array(positiveInt).min(1) })], {
      error: 'must be { latest: N }, { all: true } or { specific: [V, …] } (which versions of the model to serve)',
    })
    .optional(),
  dynamicBatching: z.union([z.boolean(), batchingSchema], { error: 'must be false (off), true (on with the defaults), or { maxBatchSize, maxQueueDelayMs, preferredBatchSizes }' }).optional(),
  inputs: z
    .record(
      z.string(),
      z.union([z.strictObject({ values: z.array(z.number().finite()).min(1) }), z.strictObject({ range: z.tuple([z.number().finite(), z.number().finite()]).refine(([lo, hi]) => lo <= hi, 'range [lo, hi] needs lo ≤ hi') })], {
        error: 'must be { values: [v, …] } or { range: [lo, hi] }',
      }),
    )
    .optional(),
});

/** `slack_ms` → `slackMs`: config keys are camelCase; the Abacus paper spells the parameters in snake case. */
const camel = (key: string): string => key.replace(/_([a-z])/g, (_m, c: string) => c.toUpperCase());

const policySchema = z.union([
  z.string().min(1).transform((name) => ({ name, params: {} })),
  z.looseObject({ name: z.string().min(1) }).transform(({ name, ...params }) => ({ name, params })),
]);

const arrivalsSchema = z.union([z.string().min(1), z.looseObject({ kind: z.string() })], {
  error: 'must be poisson, constant, bursty[:onMs=MS,offMs=MS,offRatio=R], trace:FILE[,minuteMs=MS], or { kind, … }',
});

const configSchema = z.strictObject({
  device: z.string().min(1),
  predictor: z.string().min(1).optional(),
  policy: policySchema.default({ name: 'abacus', params: {} }),
  arrivals: arrivalsSchema.optional(),
  executorMemoryLimitMb: z.number().positive().max(1_048_576).optional(),
  services: z.array(serviceSchema).min(1),
});

/** Triton's `version_policy` in camelCase: `{ latest: N }`, `{ all: true }` or `{ specific: [V, …] }`. */
export type VersionPolicy = { readonly latest: number } | { readonly all: true } | { readonly specific: readonly number[] };

/** One service of a validated config. */
export interface ServiceConfig {
  /** Served name, unique in the config. */
  readonly name: string;
  /** Model name as `model/catalog.ts` resolves it. */
  readonly model: string;
  /** QoS target, ms. */
  readonly qosTargetMs: number;
  readonly batchSizes: readonly number[];
  /** Absent for models without a sequence axis. */
  readonly seqLens?: readonly number[];
  /** Most queries waiting in the service's queue; more are rejected `overloaded`. */
  readonly maxQueueLength: number;
  /**
   * Largest QoS target, ms, a request may ask for with `parameters.qos_ms` (`abacus serve`);
   * absent: `DEFAULT_MAX_QOS_FACTOR` × `qosTargetMs`. At least `qosTargetMs`.
   */
  readonly maxQosMs?: number;
  /**
   * Dynamic batching as the config gives it: limits (an object, or `true` = `DEFAULT_BATCHING`),
   * `false` (off), or absent (on with `DEFAULT_BATCHING` where the model can fuse). The model
   * decides the rest: `resolveBatching`.
   */
  readonly dynamicBatching?: BatchingLimits | false;
  /**
   * Class labels for Triton's classification extension (`abacus serve`): an absolute path to a
   * text file with one label per line, line i naming class index i (Triton's `label_filename`
   * format); resolved against the config file's folder. Read when the server starts.
   */
  readonly labels?: string;
  /**
   * Which versions of an imported model the service serves (`abacus serve`; Triton's
   * `version_policy`): the `latest` N, `all`, or `specific` ones; absent: the latest one.
   * Each served version is its own scheduled service (`deployment/versions.ts`).
   */
  readonly versionPolicy?: VersionPolicy;
  /**
   * Valid values per model input (`TensorSpec.domain`), replacing those the graph implies:
   * `inputs: { sr: { values: [16000] }, input_ids: { range: [0, 30521] } }`. Warm-up and
   * profiling feed them; requests outside them are answered 400.
   */
  readonly inputs?: Readonly<Record<string, InputDomain>>;
}

/** `maxQosMs` when a service gives none, as a multiple of its QoS target. */
export const DEFAULT_MAX_QOS_FACTOR = 10;

/** A service's largest per-request QoS target, ms (its `maxQosMs`, else `DEFAULT_MAX_QOS_FACTOR` × `qosTargetMs`). */
export function maxQosMsOf(service: Pick<ServiceConfig, 'qosTargetMs' | 'maxQosMs'>): number {
  return service.maxQosMs ?? DEFAULT_MAX_QOS_FACTOR * service.qosTargetMs;
}

/** A validated config. */
export interface ServingConfig {
  /** Where it came from (a file path, or `flags`), for error messages naming a field. */
  readonly source: string;
  readonly device: string;
  /** Absolute path, when given. */
  readonly predictor?: string;
  /** Policy name and its raw parameters (validated by `schedule/` when the controller is created). */
  readonly policy: { readonly name: string; readonly params: Readonly<Record<string, unknown>> };
  /** The load's arrival process for `bench` / `simulate` (absent: Poisson; `--arrivals` overrides it; `serve` ignores it). */
  readonly arrivals?: ArrivalSpec;
  /**
   * `ort` devices: largest resident memory of one executor process, MiB; above it the executor
   * is restarted and its in-flight queries answered `device_failure` (`OrtDeviceOptions`).
   * Absent: no limit. Simulated devices have no executors and ignore it.
   */
  readonly executorMemoryLimitMb?: number;
  readonly services: readonly ServiceConfig[];
  /** Accepted but deprecated spellings, one sentence each naming the field and its new spelling (commands print them). */
  readonly warnings: readonly string[];
}

function fieldPath(p: readonly PropertyKey[]): string {
  let out = '';
  for (const k of p) out += typeof k === 'number' ? `[${k}]` : out === '' ? String(k) : `.${String(k)}`;
  return out === '' ? '(top level)' : out;
}

/**
 * For a value no member of a union accepted (`dynamicBatching: { maxBatchSize: 2.5 }`): the
 * issue of the member that got inside the value (a field of the object), with the full path,
 * rather than the union's one-line summary; the summary when every member failed at the value
 * itself (`dynamicBatching: yes`).
 */
function innermostIssue(issue: z.core.$ZodIssue): z.core.$ZodIssue {
  if (issue.code !== 'invalid_union') return issue;
  for (const member of issue.errors) {
    const inner = member.find((i) => i.path.length > 0);
    if (inner !== undefined) return innermostIssue({ ...inner, path: [...issue.path, ...inner.path] });
  }
  return issue;
}

/**
 * Validate a parsed config object. `source` names it in errors (a file path or `flags`);
 * `baseDir` resolves a relative predictor path.
 * @throws InvalidConfigError naming the source and the first bad field.
 */
export function parseServingConfig(raw: unknown, source: string, baseDir = process.cwd()): ServingConfig {
  const parsed = configSchema.safeParse(raw);
  if (!parsed.success) {
    // An unknown field first: a misspelt key (`qos_target_ms`) also makes the real one missing,
    // and "unknown field 'qos_target_ms'" says what is wrong where "qosTargetMs: required" does not.
    const issues = parsed.error.issues.map(innermostIssue);
    const issue = issues.find((i) => i.code === 'unrecognized_keys') ?? issues[0]!;
    const detail =
      issue.code === 'unrecognized_keys'
        ? `unknown field(s) ${issue.keys.map((k) => `'${k}'${camel(k) !== k ? ` (config keys are camelCase: '${camel(k)}'?)` : ''}`).join(', ')}`
        : issue.message;
    throw new InvalidConfigError(`${source}: ${fieldPath(issue.path)}: ${detail}`);
  }
  const c = parsed.data;
  const warnings: string[] = [];
  const params: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(c.policy.params)) {
    const name = camel(key);
    if (name !== key) {
      if (Object.hasOwn(c.policy.params, name)) throw new InvalidConfigError(`${source}: policy.${key}: '${key}' and '${name}' are the same parameter; give only '${name}'`);
      warnings.push(`${source}: policy.${key} is the old spelling of policy.${name} (config keys are camelCase); it still works, but write ${name}`);
    }
    params[name] = value;
  }
  const policy = { name: c.policy.name, params };
  let arrivals: ArrivalSpec | undefined;
  if (c.arrivals !== undefined) {
    try {
      arrivals = typeof c.arrivals === 'string' ? parseArrivalSpec(c.arrivals, 'arrivals', baseDir) : arrivalSpecOf(c.arrivals, 'arrivals', baseDir);
    } catch (err) {
      if (err instanceof RangeError) throw new InvalidConfigError(`${source}: ${err.message}`, { cause: err });
      throw err;
    }
  }
  const names = new Set<string>();
  const services = c.services.map((s, i): ServiceConfig => {
    const name = s.name ?? s.model;
    if (!MODEL_NAME_PATTERN.test(name)) throw new InvalidConfigError(`${source}: services[${i}].name: '${name}' is not a valid service name (give one with name:)`);
    const reserved = reservedModelName(name);
    if (reserved !== undefined) throw new InvalidConfigError(`${source}: services[${i}].name: '${name}' is reserved (${reserved}); give the service another name with name:`);
    if (names.has(name)) throw new InvalidConfigError(`${source}: services[${i}].name: '${name}' is used twice (give the services different names)`);
    names.add(name);
    if (s.maxQosMs !== undefined && s.maxQosMs < s.qosTargetMs) throw new InvalidConfigError(`${source}: services[${i}].maxQosMs: ${s.maxQosMs} is below the service's qosTargetMs ${s.qosTargetMs}`);
    const dynamicBatching = s.dynamicBatching === undefined ? undefined : batchingOf(s.dynamicBatching, `${source}: services[${i}].dynamicBatching`);
    return {
      name,
      model: s.model,
      qosTargetMs: s.qosTargetMs,
      batchSizes: s.batchSizes,
      maxQueueLength: s.maxQueueLength,
      ...(s.seqLens === undefined ? {} : { seqLens: s.seqLens }),
      ...(s.maxQosMs === undefined ? {} : { maxQosMs: s.maxQosMs }),
      ...(dynamicBatching === undefined ? {} : { dynamicBatching }),
      ...(s.inputs === undefined ? {} : { inputs: s.inputs }),
      ...(s.labels === undefined ? {} : { labels: path.resolve(baseDir, s.labels) }),
      ...(s.versionPolicy === undefined ? {} : { versionPolicy: s.versionPolicy }),
    };
  });
  return { source, device: c.device, policy, ...(arrivals === undefined ? {} : { arrivals }), ...(c.executorMemoryLimitMb === undefined ? {} : { executorMemoryLimitMb: c.executorMemoryLimitMb }), services, warnings, ...(c.predictor === undefined ? {} : { predictor: path.resolve(baseDir, c.predictor) }) };
}

/**
 * A parsed `dynamicBatching` value as limits (`true`: the defaults) or `false`.
 * @throws InvalidConfigError at `where` for preferred batch sizes that are not ascending or exceed maxBatchSize.
 */
function batchingOf(raw: boolean | z.infer<typeof batchingSchema>, where: string): BatchingLimits | false {
  if (raw === false) return false;
  if (raw === true) return DEFAULT_BATCHING;
  const { maxBatchSize, maxQueueDelayMs, preferredBatchSizes } = raw;
  preferredBatchSizes.forEach((n, j) => {
    if (n > maxBatchSize) throw new InvalidConfigError(`${where}.preferredBatchSizes[${j}]: ${n} exceeds maxBatchSize ${maxBatchSize}`);
    const before = preferredBatchSizes[j - 1];
    if (before !== undefined && n <= before) throw new InvalidConfigError(`${where}.preferredBatchSizes[${j}]: ${n} is not above ${before} (list the sizes ascending, each once)`);
  });
  return Object.freeze({ maxBatchSize, maxQueueDelayMs, preferredBatchSizes: Object.freeze([...preferredBatchSizes]) });
}

/**
 * Why the queries of `spec` cannot be fused into one batch: a fixed batch (dim 0 of its inputs
 * is a number, `fixedBatchOf`), or an input or output whose batch axis is not dim 0 alone
 * (`batchFusionBlocker`). Undefined when they can.
 */
export function batchingBlockerOf(spec: ModelSpec): string | undefined {
  const fixed = fixedBatchOf(spec);
  if (fixed !== undefined) return `${spec.name} has a fixed batch of ${fixed} (dim 0 of its inputs), so its queries cannot be fused`;
  const blocker = batchFusionBlocker(spec);
  return blocker === undefined ? undefined : `${blocker}, so its queries cannot be fused`;
}

/**
 * How one service batches, once its model is known:
 * - `on`: `limits` are the config's, or `DEFAULT_BATCHING` when the config gave none, batching is
 *   on by default (`abacus serve`) and the model can fuse;
 * - `off` by the config (`dynamicBatching: false`), or `by: 'default'` when the config gave
 *   none and the command does not batch by default (`bench`, `simulate`);
 * - `off` because the model cannot fuse (`batchingBlockerOf`) and the config did not ask for
 *   batching: `blocker` says why (for the start-up log).
 */
export type BatchingResolution =
  | { readonly kind: 'on'; readonly limits: BatchingLimits }
  | { readonly kind: 'off'; readonly by: 'config' | 'default' }
  | { readonly kind: 'off'; readonly by: 'model'; readonly blocker: string };

/**
 * Resolve `config.services[index].dynamicBatching` against the service's model `spec`;
 * `onByDefault`: whether a service that does not mention it batches (where its model can fuse).
 * @throws InvalidConfigError naming the file and `services[index].dynamicBatching` when batching
 *   is asked for explicitly on a model that cannot fuse; RangeError for an index out of range.
 */
export function resolveBatching(config: Pick<ServingConfig, 'source' | 'services'>, index: number, spec: ModelSpec, onByDefault: boolean): BatchingResolution {
  const service = config.services[index];
  if (service === undefined) throw new RangeError(`resolveBatching: ${config.source} has no services[${index}]`);
  const given = service.dynamicBatching;
  if (given === false) return { kind: 'off', by: 'config' };
  if (given === undefined && !onByDefault) return { kind: 'off', by: 'default' };
  const blocker = batchingBlockerOf(spec);
  if (blocker !== undefined) {
    if (given !== undefined) throw new InvalidConfigError(`${config.source}: services[${index}].dynamicBatching: model ${service.model}: ${blocker} (leave dynamicBatching out or set it to false)`);
    return { kind: 'off', by: 'model', blocker };
  }
  return { kind: 'on', limits: given ?? DEFAULT_BATCHING };
}

/**
 * One service entry validated with the config file's schema and rules (a `services[i]` of
 * `parseServingConfig`), e.g. the `config` of a model load request (`abacus serve
 * --model-control explicit`). Error messages name `source` and the field: `parameters.config.qosTargetMs: …`.
 * @throws InvalidConfigError naming the field.
 */
export function parseServiceConfig(raw: unknown, source: string): ServiceConfig {
  try {
    return parseServingConfig({ device: 'ort', services: [raw] }, source).services[0]!;
  } catch (err) {
    if (err instanceof InvalidConfigError) throw new InvalidConfigError(err.message.replace(`${source}: services[0].`, `${source}.`).replace(`${source}: services[0]: `, `${source}: `), { cause: err });
    throw err;
  }
}

/**
 * Read and validate a YAML or JSON config file (JSON is YAML; one parser reads both).
 * @throws InvalidConfigError naming the file (and line for syntax errors, field otherwise).
 */
export async function loadServingConfig(file: string): Promise<ServingConfig> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new InvalidConfigError(`${file}: cannot read the config: ${(err as Error).message}`, { cause: err });
  }
  let raw: unknown;
  try {
    raw = parseYaml(text, { prettyErrors: true });
  } catch (err) {
    throw new InvalidConfigError(`${file}: not valid YAML/JSON: ${(err as Error).message}`, { cause: err });
  }
  if (raw === null || raw === undefined) throw new InvalidConfigError(`${file}: the config is empty (expected device, services, …)`);
  return parseServingConfig(raw, file, path.dirname(path.resolve(file)));
}
