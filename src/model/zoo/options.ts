/**
 * Zoo model names and options: validation (zod) and defaults.
 *
 * Raw options come from users (CLI flags as strings or numbers, config files); `parseZooOptions`
 * turns them into a complete, normalized option set or throws an error that names the field
 * and its valid range:
 *   - TypeError  when a value is not a number (or a numeric string), or the option does not
 *                exist for that model;
 *   - RangeError when a number is out of range, not an integer where one is required, or
 *                violates a constraint between fields (BERT `heads` must divide `hidden`).
 */
import { z } from 'zod';

/** The seven models served in the Abacus paper (SC'21) and its artifact. */
export type ZooModelName = 'resnet50' | 'resnet101' | 'resnet152' | 'inception_v3' | 'vgg16' | 'vgg19' | 'bert';

export const ZOO_MODEL_NAMES: readonly ZooModelName[] = Object.freeze(['resnet50', 'resnet101', 'resnet152', 'inception_v3', 'vgg16', 'vgg19', 'bert'] as const);

/** Type guard for user-given model names. */
export function isZooModelName(s: string): s is ZooModelName {
  return (ZOO_MODEL_NAMES as readonly string[]).includes(s);
}

/**
 * Suffixes of the zoo's preset variants (`model/catalog.ts`: `resnet50-small`, `bert-demo`):
 * a zoo name with one of them names a variant, so no imported model may take it.
 */
export const ZOO_VARIANT_SUFFIXES: readonly string[] = ['-small', '-demo'];

/** Whether `s` is a zoo name, or a zoo name with a variant suffix (`ZOO_VARIANT_SUFFIXES`). */
export function isReservedZooName(s: string): boolean {
  return isZooModelName(s) || ZOO_VARIANT_SUFFIXES.some((suffix) => s.endsWith(suffix) && isZooModelName(s.slice(0, -suffix.length)));
}

/**
 * Options of a zoo model. Which fields apply depends on the model; `parseZooOptions` fills
 * every applicable field and leaves the others absent.
 */
export interface ZooOptions {
  /** CNNs: input height = width in pixels (default 224; inception_v3 299). */
  readonly resolution?: number;
  /** CNNs: factor on every channel count (and VGG's 4096-wide classifier), each rounded, ≥ 1 (default 1). */
  readonly widthMultiplier?: number;
  /** CNNs: classifier outputs (default 1000, ImageNet). */
  readonly numClasses?: number;
  /** BERT: encoder layers = operators (default 12). */
  readonly layers?: number;
  /** BERT: hidden size (default 768). */
  readonly hidden?: number;
  /** BERT: attention heads; must divide `hidden` (default 12). */
  readonly heads?: number;
  /** BERT: feed-forward size (default 4 × hidden). */
  readonly intermediate?: number;
  /** BERT: vocabulary size (default 30522, bert-base-uncased). */
  readonly vocabSize?: number;
  /** BERT: rows of the position table = longest sequence accepted (default 512). */
  readonly maxPositions?: number;
  /** BERT: sequence length assumed when a query gives none (default min(128, maxPositions)). */
  readonly defaultSeqLen?: number;
  /** All models: PRNG seed of the weights (default 0). */
  readonly seed?: number;
}

export type ZooOptionKey = keyof ZooOptions;

interface FieldSpec {
  readonly int: boolean;
  readonly min: number;
  readonly max: number;
  /** Default; a function of the already-parsed fields when it depends on them. */
  readonly def: number | ((o: Readonly<Record<string, number>>) => number);
}

const MAX_SEED = 2 ** 32 - 1;

const SEED: FieldSpec = { int: true, min: 0, max: MAX_SEED, def: 0 };
const WIDTH: FieldSpec = { int: false, min: 1 / 64, max: 4, def: 1 };
const CLASSES: FieldSpec = { int: true, min: 1, max: 100_000, def: 1000 };

/**
 * Smallest CNN input that keeps every feature map non-empty: ResNet and VGG downsample by 32
 * (final map 1×1 at 32²); torchvision's Inception3 needs 75² (Mixed_7a then emits 1×1).
 */
export const MIN_RESOLUTION: Readonly<Record<Exclude<ZooModelName, 'bert'>, number>> = {
  resnet50: 32,
  resnet101: 32,
  resnet152: 32,
  vgg16: 32,
  vgg19: 32,
  inception_v3: 75,
};

const MAX_RESOLUTION = 1024;

function cnnFields(name: Exclude<ZooModelName, 'bert'>): Record<string, FieldSpec> {
  return {
    resolution: { int: true, min: MIN_RESOLUTION[name], max: MAX_RESOLUTION, def: name === 'inception_v3' ? 299 : 224 },
    widthMultiplier: WIDTH,
    numClasses: CLASSES,
    seed: SEED,
  };
}

/** BERT-base defaults (Devlin et al. 2019, §3: L=12, H=768, A=12; vocabulary of bert-base-uncased). */
const BERT_FIELDS: Record<string, FieldSpec> = {
  layers: { int: true, min: 1, max: 48, def: 12 },
  hidden: { int: true, min: 1, max: 8192, def: 768 },
  heads: { int: true, min: 1, max: 128, def: 12 },
  intermediate: { int: true, min: 1, max: 32_768, def: (o) => 4 * (o['hidden'] ?? 768) },
  vocabSize: { int: true, min: 2, max: 1_000_000, def: 30_522 },
  maxPositions: { int: true, min: 1, max: 8192, def: 512 },
  defaultSeqLen: { int: true, min: 1, max: 8192, def: (o) => Math.min(128, o['maxPositions'] ?? 512) },
  seed: SEED,
};

function fieldsOf(name: ZooModelName): Record<string, FieldSpec> {
  return name === 'bert' ? BERT_FIELDS : cnnFields(name);
}

/** The strict object schema of a model's options, each coerced from a string, bounded and optional. */
function optionsSchema(fields: Readonly<Record<string, FieldSpec>>): z.ZodType {
  const shape: Record<string, z.ZodType> = {};
  for (const [key, spec] of Object.entries(fields)) {
    const num = spec.int ? z.number().int() : z.number();
    shape[key] = z.preprocess(coerce, num.min(spec.min).max(spec.max).optional());
  }
  return z.strictObject(shape);
}

/** Each zoo model's options schema, built once (zod compiles a schema on its first parse, about 0.8 ms: `schedule/index.ts`). */
const SCHEMAS: ReadonlyMap<ZooModelName, z.ZodType> = new Map(ZOO_MODEL_NAMES.map((name) => [name, optionsSchema(fieldsOf(name))]));

function rangeText(f: FieldSpec): string {
  return f.int ? `an integer in [${f.min}, ${f.max}]` : `a number in [${f.min}, ${f.max}]`;
}

/** Numeric strings (CLI flags) become numbers; anything else is left for zod to reject. */
function coerce(v: unknown): unknown {
  if (typeof v === 'string' && v.trim() !== '') {
    const n = Number(v);
    return Number.isNaN(n) ? v : n;
  }
  return v;
}

function describe(v: unknown): string {
  if (typeof v === 'string') return `'${v}'`;
  if (typeof v === 'number' || typeof v === 'boolean' || typeof v === 'bigint' || v === null || v === undefined) return String(v);
  return typeof v;
}

/**
 * Validate raw options for `name` and fill defaults.
 * @param raw e.g. `{ resolution: '32', widthMultiplier: 0.125 }`; absent/undefined fields get defaults.
 * @returns every option that applies to `name` (see `ZooOptions`), numbers only.
 * @throws TypeError naming the field when a value is not numeric or the option does not apply
 *   to the model; RangeError naming the field and its valid range otherwise.
 */
export function parseZooOptions(name: ZooModelName, raw: Readonly<Record<string, unknown>> | ZooOptions): ZooOptions {
  if (!isZooModelName(name)) throw new TypeError(`unknown zoo model '${String(name)}' (valid: ${ZOO_MODEL_NAMES.join(', ')})`);
  const fields = fieldsOf(name);
  const parsed = (SCHEMAS.get(name) ?? optionsSchema(fields)).safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    if (issue?.code === 'unrecognized_keys') {
      throw new TypeError(`option '${issue.keys.join("', '")}' does not apply to ${name} (valid options: ${Object.keys(fields).join(', ')})`);
    }
    const key = String(issue?.path[0] ?? '?');
    const spec = fields[key];
    const value = (raw as Readonly<Record<string, unknown>>)[key];
    const message = `${name} option '${key}' must be ${spec ? rangeText(spec) : 'valid'}, got ${describe(value)}`;
    // Not a number at all -> TypeError; a number that is non-integral, non-finite or out of range -> RangeError.
    throw typeof coerce(value) === 'number' ? new RangeError(message) : new TypeError(message);
  }
  const values = parsed.data as Record<string, number | undefined>;
  const out: Record<string, number> = {};
  // Fields are declared so that a default only depends on fields before it.
  for (const [key, spec] of Object.entries(fields)) {
    const given = values[key];
    out[key] = given ?? (typeof spec.def === 'function' ? spec.def(out) : spec.def);
  }
  if (name === 'bert') {
    const hidden = out['hidden']!;
    const heads = out['heads']!;
    if (hidden % heads !== 0) throw new RangeError(`bert option 'heads' (${heads}) must divide 'hidden' (${hidden})`);
    if (out['defaultSeqLen']! > out['maxPositions']!) {
      throw new RangeError(`bert option 'defaultSeqLen' must be an integer in [1, maxPositions = ${out['maxPositions']}], got ${out['defaultSeqLen']}`);
    }
  }
  return out;
}
