/**
 * The profiler's deterministic sample sequence (docs/predictor.md): operator groups drawn
 * the way the query controller creates them (docs/scheduling-runtime.md).
 *
 * - **Coverage.** The groups' model combinations are all multisets of size 1..K over the
 *   listed models — a model co-located with itself included — enumerated once
 *   (`combinations`: by size, then lexicographically by model index) and visited round-robin:
 *   sample i uses combination `i mod C`, so any N consecutive samples from 0 cover each
 *   combination ⌊N/C⌋ or ⌈N/C⌉ times. Which of the combination's models is slot 0 is a random
 *   permutation per sample.
 * - **Slots.** Slot 0 is the most urgent query: it runs all its remaining operators (to the
 *   model's end). For every slot, with probability ½ the query is new (start 0), else it
 *   resumes at a start uniform in [1, n−1]; slots other than 0 run to the end with probability
 *   ½, else end uniform in [start+1, n] (n = the model's operators; n = 1 gives [0, 1)).
 * - **Inputs.** Batch uniform over `batchSizes` (a model with a fixed batch, `fixedBatchOf`,
 *   always takes that batch); sequence length uniform over `seqLens` for models with a
 *   sequence axis (the model's `defaultSeqLen` when `seqLens` is empty), 0 for the others.
 *   With `shapes`, a model listed there draws from its own batch sizes and sequence lengths
 *   instead (a served model is profiled only at the shapes its own service allows).
 * - **Threads** (only with `threadRules`): after the slots, one rule is drawn
 *   uniformly from `threadRules` and every slot of the k-slot group gets `threadsFor(rule, k)`
 *   intra-op threads (`threads.ts`; none for the `device` rule; an `adapt` rule gives a
 *   lone slot one of its `loneCandidates`, drawn uniformly). Profiling with the rules the
 *   policies will serve with (e.g. `fixed:1` and `split:2`) covers exactly the thread counts
 *   their groups run at. Without `threadRules` nothing else is drawn: the samples are those of
 *   a sampler without the option, slot for slot.
 * - **Determinism.** Sample i is drawn from its own generator seeded from (`seed`, i), so it
 *   does not depend on which or how many samples were drawn before (resume needs that).
 */
import { fixedBatchOf } from '../model/boundary.ts';
import type { ModelSpec } from '../model/spec.ts';
import type { GroupSlot } from '../predict/predictor.ts';
import { Rng } from '../rng.ts';
import { loneCandidates, threadsFor, type ThreadRule } from '../threads.ts';

/** Most slots in one sampled group. */
export const MAX_GROUP_SIZE = 8;

/** Options of `new ProfileSampler()`. */
export interface SamplerOptions {
  /** Models to co-locate, distinct names, ≥ 1. Their order defines the combination order. */
  readonly models: readonly ModelSpec[];
  /** Largest group K, in [1, 8]; groups of 1..K slots are sampled. */
  readonly maxGroupSize: number;
  /** Batch sizes to draw from (integers ≥ 1, ≥ 1 of them). */
  readonly batchSizes: readonly number[];
  /**
   * Sequence lengths to draw from for models with a sequence axis (integers ≥ 1, each ≤ the
   * model's `maxSeqLen`); empty or absent: each such model's `defaultSeqLen`.
   */
  readonly seqLens?: readonly number[];
  /** Seed, a safe integer ≥ 0 [0]. */
  readonly seed?: number;
  /** Thread rules to draw one from per sample (file comment, "Threads") [none: slots carry no thread count]. */
  readonly threadRules?: readonly ThreadRule[];
  /**
   * Per model name: the batch sizes and sequence lengths that model draws from instead of
   * `batchSizes` / `seqLens` (same rules; an absent or empty list falls back to the shared one)
   * [none: every model draws from the shared lists].
   */
  readonly shapes?: ReadonlyMap<string, ModelShapes>;
}

/** The shapes one model is profiled at (`SamplerOptions.shapes`). */
export interface ModelShapes {
  readonly batchSizes?: readonly number[];
  readonly seqLens?: readonly number[];
}

/** One sample: its index, its model combination (indices into `models`, ascending) and its group. */
export interface Sample {
  readonly index: number;
  /** Index into `ProfileSampler.combinations`. */
  readonly combination: number;
  /** The group, slot 0 first (the urgent query, which runs to its model's end). */
  readonly slots: readonly GroupSlot[];
}

/** Number of multisets of size 1..k over m items: Σ_{s=1..k} C(m+s−1, s). */
export function multisetCount(m: number, k: number): number {
  let total = 0;
  let c = 1; // C(m+s-1, s) for s = 0
  for (let s = 1; s <= k; s++) {
    c = (c * (m + s - 1)) / s;
    total += c;
  }
  return Math.round(total);
}

/** All multisets of size 1..k over indices 0..m−1, as ascending index lists: by size, then lexicographic. */
function enumerateMultisets(m: number, k: number): number[][] {
  const out: number[][] = [];
  for (let size = 1; size <= k; size++) {
    const walk = (prefix: number[], from: number): void => {
      if (prefix.length === size) {
        out.push([...prefix]);
        return;
      }
      for (let i = from; i < m; i++) {
        prefix.push(i);
        walk(prefix, i);
        prefix.pop();
      }
    };
    walk([], 0);
  }
  return out;
}

/**
 * A well-mixed 32-bit value of (seed, index) (safe integers ≥ 0): the per-sample generator's
 * seed, and (with another `seed`) the profiler's per-sample device seed.
 */
export function sampleSeed(seed: number, index: number): number {
  const mix = (x: number): number => {
    let z = (x + 0x9e3779b9) | 0;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
    return (z ^ (z >>> 16)) >>> 0;
  };
  const hi = (v: number): number => Math.floor(v / 0x100000000) >>> 0;
  let h = mix(seed >>> 0);
  h = mix(h ^ hi(seed));
  h = mix(h ^ (index >>> 0));
  return mix(h ^ hi(index));
}

function checkIntList(name: string, values: readonly number[], min: number): void {
  const list: unknown = values;
  if (!Array.isArray(list)) throw new TypeError(`SamplerOptions.${name} must be an array of integers`);
  for (const v of values) {
    if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) throw new RangeError(`SamplerOptions.${name}: ${String(v)} must be an integer ≥ ${min}`);
  }
}

/**
 * The sample sequence: `sampleAt(i)` for any i ≥ 0, pure and cheap (no state between calls).
 * @see the file comment for the distribution.
 */
export class ProfileSampler {
  readonly models: readonly ModelSpec[];
  readonly maxGroupSize: number;
  readonly batchSizes: readonly number[];
  readonly seqLens: readonly number[];
  readonly seed: number;
  /** The thread rules drawn from (empty: none). */
  readonly threadRules: readonly ThreadRule[];
  /** Every model combination, ascending model indices; sample i uses `combinations[i % length]`. */
  readonly combinations: readonly (readonly number[])[];
  private readonly fixedBatch: readonly (number | undefined)[];
  private readonly batchChoices: readonly (readonly number[])[];
  private readonly seqChoices: readonly (readonly number[])[];

  /**
   * @throws RangeError for no models or a name listed twice, `maxGroupSize` outside [1, 8],
   *   no batch sizes or one < 1, a sequence length < 1 or above a model's `maxSeqLen`
   *   (naming the model), a model without operators, or a seed that is not a safe integer ≥ 0.
   */
  constructor(options: SamplerOptions) {
    const { models, maxGroupSize, batchSizes } = options;
    const seqLens = options.seqLens ?? [];
    const seed = options.seed ?? 0;
    const list: unknown = models;
    if (!Array.isArray(list) || models.length === 0) throw new RangeError('SamplerOptions.models must list at least one model');
    const names = new Set<string>();
    for (const spec of models) {
      if (names.has(spec.name)) throw new RangeError(`SamplerOptions.models lists '${spec.name}' twice; list each model once (self-pairs are sampled anyway)`);
      names.add(spec.name);
      if (spec.operators.length === 0) throw new RangeError(`SamplerOptions.models: ${spec.name} has no operators`);
    }
    if (!Number.isInteger(maxGroupSize) || maxGroupSize < 1 || maxGroupSize > MAX_GROUP_SIZE) {
      throw new RangeError(`SamplerOptions.maxGroupSize ${String(maxGroupSize)} must be an integer in [1, ${MAX_GROUP_SIZE}]`);
    }
    checkIntList('batchSizes', batchSizes, 1);
    if (batchSizes.length === 0) throw new RangeError('SamplerOptions.batchSizes must list at least one batch size');
    checkIntList('seqLens', seqLens, 1);
    if (typeof seed !== 'number' || !Number.isSafeInteger(seed) || seed < 0) throw new RangeError(`SamplerOptions.seed ${String(seed)} must be a safe integer ≥ 0`);
    const own = (spec: ModelSpec, key: keyof ModelShapes): readonly number[] | undefined => {
      const list = options.shapes?.get(spec.name)?.[key];
      if (list === undefined || list.length === 0) return undefined;
      checkIntList(`shapes.${spec.name}.${key}`, list, 1);
      return list;
    };
    this.batchChoices = models.map((spec) => [...(own(spec, 'batchSizes') ?? batchSizes)]);
    this.seqChoices = models.map((spec) => {
      if (spec.dynamicAxes.seq === undefined) return [0];
      const lens = own(spec, 'seqLens') ?? seqLens;
      if (lens.length === 0) return [spec.defaultSeqLen];
      const max = spec.maxSeqLen;
      const over = max === undefined ? undefined : lens.find((s) => s > max);
      if (over !== undefined) throw new RangeError(`SamplerOptions.seqLens: ${over} exceeds ${spec.name}'s maximum sequence length ${String(max)}`);
      return [...lens];
    });
    this.models = [...models];
    this.maxGroupSize = maxGroupSize;
    this.batchSizes = [...batchSizes];
    this.seqLens = [...seqLens];
    this.seed = seed;
    const rules: unknown = options.threadRules ?? [];
    if (!Array.isArray(rules)) throw new TypeError('SamplerOptions.threadRules must be an array of thread rules');
    this.threadRules = (rules as ThreadRule[]).map((r) => ({ ...r }));
    this.fixedBatch = models.map((spec) => fixedBatchOf(spec));
    this.combinations = enumerateMultisets(models.length, maxGroupSize);
  }

  /**
   * Sample `index` (a safe integer ≥ 0): the same result for the same options, whatever was
   * drawn before.
   * @throws RangeError for a bad index.
   */
  sampleAt(index: number): Sample {
    if (!Number.isSafeInteger(index) || index < 0) throw new RangeError(`sample index ${String(index)} must be a safe integer ≥ 0`);
    const combination = index % this.combinations.length;
    const members = [...this.combinations[combination]!];
    const rng = new Rng(sampleSeed(this.seed, index));
    const below = (n: number): number => Math.floor(rng.nextUnit() * n); // uniform in [0, n)
    // Fisher–Yates: which member is slot 0 (the urgent one), which slot 1, …
    for (let i = members.length - 1; i > 0; i--) {
      const j = below(i + 1);
      [members[i], members[j]] = [members[j]!, members[i]!];
    }
    const slots = members.map((m, slot): GroupSlot => {
      const spec = this.models[m]!;
      const n = spec.operators.length;
      const isNew = below(2) === 0;
      const toEnd = slot === 0 || below(2) === 0;
      const start = isNew || n === 1 ? 0 : 1 + below(n - 1);
      const end = toEnd ? n : start + 1 + below(n - start);
      const batches = this.batchChoices[m]!;
      const batch = this.fixedBatch[m] ?? batches[below(batches.length)]!;
      const choices = this.seqChoices[m]!;
      const seqLen = choices[below(choices.length)]!;
      return { model: spec.name, start, end, batch, seqLen };
    });
    if (this.threadRules.length > 0) {
      const rule = this.threadRules[below(this.threadRules.length)]!;
      const lone = rule.kind === 'adapt' && slots.length === 1 ? loneCandidates(rule) : undefined;
      const threads = lone === undefined ? threadsFor(rule, slots.length) : lone[below(lone.length)]!;
      if (threads !== undefined) return { index, combination, slots: slots.map((s) => ({ ...s, intraOpThreads: threads })) };
    }
    return { index, combination, slots };
  }

  /** Samples `from`, `from + 1`, … `to − 1`. */
  *samples(from: number, to: number): Generator<Sample> {
    for (let i = from; i < to; i++) yield this.sampleAt(i);
  }
}

/** Whether two groups are the same, slot by slot. */
export function sameSlots(a: readonly GroupSlot[], b: readonly GroupSlot[]): boolean {
  return a.length === b.length && a.every((s, i) => {
    const t = b[i]!;
    return s.model === t.model && s.start === t.start && s.end === t.end && s.batch === t.batch && s.seqLen === t.seqLen && s.intraOpThreads === t.intraOpThreads;
  });
}
