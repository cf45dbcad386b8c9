/**
 * Feature encoding of an operator group (docs/design.md#predictor; docs/predictor.md "Training"): what the
 * MLP and the linear baseline see, the same in training (`predict/train.ts`) and serving
 * (`Predictor.predict`).
 *
 * ## Canonical slot order
 * A group is a set of segments; the encoding is a fixed-width vector of `maxSlots` slot
 * blocks, so the slots must be put in one order. `canonicalSlotOrder` sorts them by
 *
 *   1. the model's rank: its index in the predictor's sorted list of trained models; models
 *      admitted as unseen (`--allow-unseen`, `flop` features only) rank after every trained
 *      model, among themselves by name;
 *   2. then `start`, `end`, `batch`, `seqLen`, `intraOpThreads` (absent = 0) ascending, so
 *      equal models are ordered too.
 *
 * Never by urgency or arrival: the original artifact sorts slots by model id when training
 * and by urgency when serving, so at serving time its MLP reads model A's numbers in the
 * place where it learned model B's — a silent, input-dependent error. Here training and
 * serving call the same function, and permuting a group's slots gives identical features.
 *
 * ## Kind of compute (generalization to models not profiled)
 * Every operator is `spatial` or `dense` (`computeKindOf`), read from its metadata: spatial
 * when its largest output (elements at batch 1, default sequence length) has rank 4 — an
 * `[N, C, H, W]` activation: convolutions, pooling —, dense otherwise: GEMMs on
 * `[batch, seq, hidden]` or `[batch, classes]` (BERT's layers, the CNNs' classifiers),
 * element-wise kernels. The two run on different hardware paths: with PyTorch's defaults on
 * Ampere and later, convolutions use TF32 tensor cores and matmuls FP32 cores (8× slower per
 * FLOP on an A100), and their kernels launch through different libraries. A GFLOP total cannot
 * tell them apart, so both feature sets give each slot's GFLOP, MB and kernels per kind.
 *
 * ## Feature sets (units: ms, GFLOP, MB; slot blocks beyond the group's size are zeros)
 * - `full` (default; the paper's features plus costs): one count per trained model (how many
 *   slots of the group run it), then per slot `start, end, batch, seq_len, gflop_spatial,
 *   gflop_dense, mb_spatial, mb_dense, kernels_spatial, kernels_dense`.
 * - `flop` (model-agnostic, for models never profiled): per slot `log1p_batch, seq_len,
 *   log1p_gflop_spatial, log1p_gflop_dense, log1p_mb_spatial, log1p_mb_dense,
 *   log1p_kernels_spatial, log1p_kernels_dense, op_fraction`; no model identity at all.
 *   `log1p_x` is ln(1 + x): an unseen model's costs lie far outside the training range on a
 *   linear scale (BERT's 419 dense kernels against the CNNs' 3–6, 45× their largest dense
 *   GFLOP), which a ReLU network extrapolates wildly (MAPE 10⁵ % and worse, measured); on a log
 *   scale a factor is a distance, and latency is closer to a power law of the costs. Each
 *   slot's spatial and dense columns of one cost also share one standardization
 *   (`tiedColumns`, `encoded.ts` `fitScaling`): otherwise the dense columns, nearly constant
 *   over CNN data, get a tiny std and BERT's rows sit up to 15 stds out (tied: ≤ 2.2).
 *
 * Per slot (kind k: the sums run over the segment's operators of that kind):
 * - `gflop_k`: Σ `gflops` at (batch, seq_len), GFLOP;
 * - `mb_k`: (Σ paramBytes + Σ (inputBytes + outputBytes) at (batch, seq_len)) / 1e6, the bytes
 *   the segment must at least move;
 * - `kernels_k`: Σ nodeCount — per-kernel launch and synchronization cost is a large part of
 *   small-batch latency (hundreds of short kernels for ResNet-152 and BERT, 37 long ones for
 *   VGG-16) and neither FLOPs nor bytes carry it;
 * - `op_fraction`: (end − start) / operators of the model (`flop` only, in place of the
 *   model-specific start/end);
 * - `seq_len` is the effective sequence length (a slot's 0 means the model's default, as on
 *   the devices, `model/boundary.ts` `effectiveSeqLen`); 0 for models without one.
 *
 * ## Thread count (docs/threads.md)
 * A predictor trained on profiles that carry thread counts (`abacus profile --thread-rules`)
 * has one more feature at the end of every slot block: `threads`, the slot's intra-op thread
 * count (`GroupSlot.intraOpThreads`; 0 when absent, "the device's default", which such a
 * predictor never saw in training). Without it (every older file) the encoding is unchanged
 * and the thread count is ignored. On a CPU the count changes a segment's latency as much as
 * its batch (a lone ResNet-50 query at 2 threads against 1), and what overlap costs depends on
 * it (two segments at 1 thread each share 2 cores; at 2 each they oversubscribe them).
 *
 * Measured (`abacus train`, 12k sim:a100 pairs of the seven zoo models, MLP, seed 1), before →
 * after the split: `full` held-out MAPE 2.10% → 1.43%; `flop` 3.22% → 1.98%; `flop
 * --test-model bert` 113% → 27.6% (seeds 2, 3: 29.0%, 19.1%), the six CNNs 3.7–12.6% →
 * 5.2–8.7% (README "Latency predictor"). Log scale for `full`, measured: 1.70% (worse).
 *
 * ## Hot path
 * `FeatureEncoder` precomputes, per model and kind, prefix sums of the PerSampleCost
 * coefficients (c0, c1, c2 of gflops and of input+output bytes), of paramBytes and of
 * nodeCount, so one slot's costs are O(1); `encode` writes into a caller's typed array and
 * allocates nothing.
 */
import { BadRequestError } from '../errors.ts';
import { resolveShape } from '../model/boundary.ts';
import { checkSegment, evalCost } from '../model/cost.ts';
import type { ModelSpec, OperatorSpec } from '../model/spec.ts';
import type { Group, GroupSlot } from './predictor.ts';

/** The two encodings (see the file comment). */
export type FeatureSet = 'full' | 'flop';
export const FEATURE_SETS: readonly FeatureSet[] = ['full', 'flop'];

export function isFeatureSet(x: unknown): x is FeatureSet {
  return x === 'full' || x === 'flop';
}

/** Features per slot block of each set, in order. */
export const SLOT_FEATURES: Readonly<Record<FeatureSet, readonly string[]>> = {
  full: ['start', 'end', 'batch', 'seq_len', 'gflop_spatial', 'gflop_dense', 'mb_spatial', 'mb_dense', 'kernels_spatial', 'kernels_dense'],
  flop: ['log1p_batch', 'seq_len', 'log1p_gflop_spatial', 'log1p_gflop_dense', 'log1p_mb_spatial', 'log1p_mb_dense', 'log1p_kernels_spatial', 'log1p_kernels_dense', 'op_fraction'],
};

/** The per-slot feature a thread-aware encoder appends to each slot block (file comment, "Thread count"). */
export const THREAD_FEATURE = 'threads';

/** Kind of compute of an operator (file comment). */
export type ComputeKind = 'spatial' | 'dense';

/**
 * `spatial` when the operator's largest output (in elements at batch 1 and the model's
 * default sequence length) has rank 4, `dense` otherwise (file comment). An output whose size
 * cannot be resolved counts as empty; an operator without outputs is dense.
 */
export function computeKindOf(spec: ModelSpec, op: OperatorSpec): ComputeKind {
  let largest = -1;
  let rank = 0;
  for (const t of op.outputs) {
    let elements = 1;
    try {
      for (const d of resolveShape(spec, t, 1, spec.defaultSeqLen)) elements *= d;
    } catch (err) {
      if (!(err instanceof BadRequestError)) throw err;
      elements = 0;
    }
    if (elements > largest) {
      largest = elements;
      rank = t.shape.length;
    }
  }
  return rank === 4 ? 'spatial' : 'dense';
}

/**
 * Feature names in order: `count_<model>` for each trained model (`full` only), then
 * `<feature>_<slot>` for slots 0..maxSlots−1 (with `threads`, each slot block ends in `threads_<slot>`).
 */
export function featureNames(featureSet: FeatureSet, trainedModels: readonly string[], maxSlots: number, threads = false): string[] {
  const names: string[] = featureSet === 'full' ? trainedModels.map((m) => `count_${m}`) : [];
  for (let s = 0; s < maxSlots; s++) {
    for (const f of SLOT_FEATURES[featureSet]) names.push(`${f}_${s}`);
    if (threads) names.push(`${THREAD_FEATURE}_${s}`);
  }
  return names;
}

/**
 * A model's identity as far as the features are concerned: operator count and two totals
 * that change when a variant with the same name has other operators (different resolution,
 * width, layers). Stored in predictor files and compared on load.
 */
export interface SpecFingerprint {
  readonly operators: number;
  /** Σ gflops of all operators at batch 1 and the default sequence length, GFLOP. */
  readonly gflopsBatch1: number;
  /** Σ paramBytes / 1e6, MB. */
  readonly paramMb: number;
}

export function specFingerprint(spec: ModelSpec): SpecFingerprint {
  let gflops = 0;
  let paramBytes = 0;
  for (const op of spec.operators) {
    gflops += evalCost(op.gflops, 1, spec.defaultSeqLen);
    paramBytes += op.paramBytes;
  }
  return { operators: spec.operators.length, gflopsBatch1: gflops, paramMb: paramBytes / 1e6 };
}

/** Values per prefix entry and kind: c0, c1, c2 of gflops; of input + output bytes; paramBytes; nodeCount. */
const PER_KIND = 8;
/** Values per prefix entry: spatial block, then dense block. */
const STRIDE = 2 * PER_KIND;
const DENSE = PER_KIND;

/** Per-model prefix sums and what the encoding needs of the model. */
interface ModelTable {
  readonly name: string;
  /** Position in the canonical order (trained models by name, then unseen models by name). */
  readonly rank: number;
  /** Index of the model's count feature (`full`), −1 when it has none. */
  readonly countIndex: number;
  readonly operators: number;
  readonly defaultSeqLen: number;
  /**
   * `(operators + 1) × STRIDE`: entry k holds Σ over operators [0, k) of each value, for the
   * spatial operators at offset 0 and the dense ones at `DENSE` (a kind's sums skip the other
   * kind's operators, so a segment without dense operators has exactly 0 dense costs).
   */
  readonly prefix: Float64Array;
}

function buildTable(spec: ModelSpec, rank: number, countIndex: number): ModelTable {
  const n = spec.operators.length;
  const p = new Float64Array((n + 1) * STRIDE);
  for (let k = 0; k < n; k++) {
    const op = spec.operators[k]!;
    const at = (k + 1) * STRIDE;
    p.copyWithin(at, k * STRIDE, at);
    const o = at + (computeKindOf(spec, op) === 'spatial' ? 0 : DENSE);
    p[o] = p[o]! + op.gflops.c0;
    p[o + 1] = p[o + 1]! + op.gflops.c1;
    p[o + 2] = p[o + 2]! + op.gflops.c2;
    p[o + 3] = p[o + 3]! + op.inputBytes.c0 + op.outputBytes.c0;
    p[o + 4] = p[o + 4]! + op.inputBytes.c1 + op.outputBytes.c1;
    p[o + 5] = p[o + 5]! + op.inputBytes.c2 + op.outputBytes.c2;
    p[o + 6] = p[o + 6]! + op.paramBytes;
    p[o + 7] = p[o + 7]! + op.nodeCount;
  }
  return { name: spec.name, rank, countIndex, operators: n, defaultSeqLen: spec.defaultSeqLen, prefix: p };
}

/** Costs of one segment (see the file comment for units), in total and per kind. */
export interface SegmentCosts {
  readonly gflop: number;
  readonly mb: number;
  readonly kernels: number;
  readonly gflopSpatial: number;
  readonly gflopDense: number;
  readonly mbSpatial: number;
  readonly mbDense: number;
  readonly kernelsSpatial: number;
  readonly kernelsDense: number;
}

/**
 * GFLOP, MB and kernel count of operators `[start, end)` of `spec` for one query, in total and
 * per kind, summed operator by operator (the reference the prefix sums are checked against).
 * @throws RangeError for a segment outside the model.
 */
export function segmentCosts(spec: ModelSpec, start: number, end: number, batch: number, seqLen: number): SegmentCosts {
  checkSegment(spec, start, end);
  const seq = seqLen > 0 ? seqLen : spec.defaultSeqLen;
  const sum = { spatial: { gflop: 0, bytes: 0, kernels: 0 }, dense: { gflop: 0, bytes: 0, kernels: 0 } };
  for (let k = start; k < end; k++) {
    const op = spec.operators[k]!;
    const s = sum[computeKindOf(spec, op)];
    s.gflop += evalCost(op.gflops, batch, seq);
    s.bytes += op.paramBytes + evalCost(op.inputBytes, batch, seq) + evalCost(op.outputBytes, batch, seq);
    s.kernels += op.nodeCount;
  }
  const { spatial: sp, dense: de } = sum;
  return {
    gflop: sp.gflop + de.gflop,
    mb: (sp.bytes + de.bytes) / 1e6,
    kernels: sp.kernels + de.kernels,
    gflopSpatial: sp.gflop,
    gflopDense: de.gflop,
    mbSpatial: sp.bytes / 1e6,
    mbDense: de.bytes / 1e6,
    kernelsSpatial: sp.kernels,
    kernelsDense: de.kernels,
  };
}

/**
 * Sort key comparison of the canonical order: model rank, then start, end, batch, seqLen.
 * Negative when slot a (of rank `ra`) comes first.
 */
export function compareSlots(a: GroupSlot, ra: number, b: GroupSlot, rb: number): number {
  return ra - rb || a.start - b.start || a.end - b.end || a.batch - b.batch || a.seqLen - b.seqLen || (a.intraOpThreads ?? 0) - (b.intraOpThreads ?? 0);
}

/**
 * THE canonical slot order (file comment), shared by training and serving: fills
 * `order[0..group.length)` with slot indices of `group` in canonical order and returns
 * `order`. `ranks[i]` is the model rank of slot i (`FeatureEncoder.rankOf`). Insertion sort,
 * stable, allocation-free when `order` is given (groups have a handful of slots).
 */
export function canonicalSlotOrder(group: Group, ranks: ArrayLike<number>, order: Int32Array = new Int32Array(group.length)): Int32Array {
  const n = group.length;
  for (let i = 0; i < n; i++) {
    const slot = group[i]!;
    const rank = ranks[i]!;
    let j = i - 1;
    while (j >= 0) {
      const o = order[j]!;
      if (compareSlots(group[o]!, ranks[o]!, slot, rank) <= 0) break;
      order[j + 1] = o;
      j--;
    }
    order[j + 1] = i;
  }
  return order;
}

/** Options of `FeatureEncoder`. */
export interface FeatureEncoderOptions {
  readonly featureSet: FeatureSet;
  /** Slot blocks in the vector, ≥ 1. */
  readonly maxSlots: number;
  /** Models the predictor was trained on (their ranks and count features), any order. */
  readonly trainedModels: readonly string[];
  /**
   * Specs of every model to encode: trained models (a subset is fine) and, for `flop`, unseen
   * ones (ranked after the trained ones).
   */
  readonly specs: ReadonlyMap<string, ModelSpec>;
  /** Append the `threads` feature to every slot block (file comment, "Thread count") [false]. */
  readonly threads?: boolean;
}

/**
 * Encodes operator groups into feature vectors (file comment). One instance per predictor
 * (or training run); it holds scratch arrays, so it is not reentrant across threads — there
 * are none in Node.
 */
export class FeatureEncoder {
  readonly featureSet: FeatureSet;
  readonly maxSlots: number;
  /** Whether slot blocks end in the `threads` feature. */
  readonly threads: boolean;
  /** Trained models, sorted by name (their count features, in this order, come first in `full`). */
  readonly trainedModels: readonly string[];
  /** Unseen models admitted (sorted by name); always empty for `full`. */
  readonly unseenModels: readonly string[];
  /** Every model that can be encoded, sorted by name. */
  readonly models: readonly string[];
  /** Length of one feature vector. */
  readonly width: number;
  /** Feature names, `width` of them (`featureNames`). */
  readonly names: readonly string[];
  /**
   * Columns standardized together (`encoded.ts` `fitScaling`): for `flop`, each slot's spatial
   * and dense columns of one cost (file comment); none for `full`, which never meets an unseen
   * model (measured: tying costs `full` 0.07–0.2 points of held-out MAPE).
   */
  readonly tiedColumns: readonly (readonly number[])[];
  private readonly tables: Map<string, ModelTable>;
  private readonly slotWidth: number;
  private readonly slotOffset: number;
  private readonly ranks: Int32Array;
  private readonly order: Int32Array;
  private readonly slotTables: (ModelTable | undefined)[];

  /**
   * @throws RangeError for maxSlots < 1, a trained model listed twice, or (for `full`) a spec
   *   of a model not in `trainedModels`.
   */
  constructor(options: FeatureEncoderOptions) {
    const { featureSet, maxSlots } = options;
    if (!isFeatureSet(featureSet)) throw new RangeError(`featureSet must be 'full' or 'flop', got '${String(featureSet)}'`);
    if (!Number.isInteger(maxSlots) || maxSlots < 1 || maxSlots > 64) throw new RangeError(`maxSlots must be an integer in [1, 64], got ${maxSlots}`);
    const trained = [...options.trainedModels].sort();
    for (let i = 1; i < trained.length; i++) if (trained[i] === trained[i - 1]) throw new RangeError(`trainedModels lists '${trained[i]}' twice`);
    const trainedSet = new Set(trained);
    const unseen = [...options.specs.keys()].filter((m) => !trainedSet.has(m)).sort();
    if (featureSet === 'full' && unseen.length > 0) {
      throw new RangeError(`the 'full' features have a count per trained model, so they cannot encode ${unseen.map((m) => `'${m}'`).join(', ')}: retrain with --features flop to score models not profiled`);
    }
    this.featureSet = featureSet;
    this.maxSlots = maxSlots;
    this.threads = options.threads === true;
    this.trainedModels = trained;
    this.unseenModels = unseen;
    this.models = [...options.specs.keys()].sort();
    this.names = featureNames(featureSet, trained, maxSlots, this.threads);
    this.width = this.names.length;
    this.slotWidth = SLOT_FEATURES[featureSet].length + (this.threads ? 1 : 0);
    this.slotOffset = featureSet === 'full' ? trained.length : 0;
    const tied: number[][] = [];
    if (featureSet === 'flop') {
      for (let slot = 0; slot < maxSlots; slot++) {
        for (const cost of ['gflop', 'mb', 'kernels']) tied.push([this.names.indexOf(`log1p_${cost}_spatial_${slot}`), this.names.indexOf(`log1p_${cost}_dense_${slot}`)]);
      }
    }
    this.tiedColumns = tied;
    this.tables = new Map();
    for (const [name, spec] of options.specs) {
      const t = trained.indexOf(name);
      const rank = t >= 0 ? t : trained.length + unseen.indexOf(name);
      this.tables.set(name, buildTable(spec, rank, featureSet === 'full' ? t : -1));
    }
    this.ranks = new Int32Array(maxSlots);
    this.order = new Int32Array(maxSlots);
    this.slotTables = new Array<ModelTable | undefined>(maxSlots).fill(undefined);
  }

  /** Canonical rank of a model (trained: index by name; unseen: after those), −1 when unknown. */
  rankOf(model: string): number {
    return this.tables.get(model)?.rank ?? -1;
  }

  /** Whether `model` can be encoded. */
  has(model: string): boolean {
    return this.tables.has(model);
  }

  /** Operator count of an encodable model, −1 when unknown. */
  operatorsOf(model: string): number {
    return this.tables.get(model)?.operators ?? -1;
  }

  /**
   * The group's slots in canonical order (a new array; for tests, tools and reports — the hot
   * path uses `encode`).
   * @throws RangeError as `encode`.
   */
  canonical(group: Group): GroupSlot[] {
    this.validate(group, 0);
    const order = canonicalSlotOrder(group, this.ranks, new Int32Array(group.length));
    return Array.from(order, (i) => group[i]!);
  }

  /**
   * Write the features of `group` to `out[offset .. offset + width)`. Allocation-free.
   * @throws RangeError (naming `groupIndex` and the slot) for an empty group, more than
   *   `maxSlots` slots, an unknown model, a segment outside `0 ≤ start < end ≤ operators`,
   *   batch < 1, a negative / non-integer seqLen, or an intraOpThreads that is present and not
   *   an integer ≥ 1.
   */
  encode(group: Group, out: Float32Array | Float64Array, offset = 0, groupIndex = 0): void {
    this.validate(group, groupIndex);
    const n = group.length;
    const order = canonicalSlotOrder(group, this.ranks, this.order);
    out.fill(0, offset, offset + this.width);
    const full = this.featureSet === 'full';
    for (let s = 0; s < n; s++) {
      const i = order[s]!;
      const slot = group[i]!;
      const t = this.slotTables[i]!;
      const seq = slot.seqLen > 0 ? slot.seqLen : t.defaultSeqLen;
      const a = slot.start;
      const b = slot.end;
      const batch = slot.batch;
      const p = t.prefix;
      const pa = a * STRIDE;
      const pb = b * STRIDE;
      const seq2 = seq * seq;
      // spatial (offset 0) and dense (offset DENSE) costs of the segment
      const gs = batch * (p[pb]! - p[pa]! + (p[pb + 1]! - p[pa + 1]!) * seq + (p[pb + 2]! - p[pa + 2]!) * seq2);
      const ms = (p[pb + 6]! - p[pa + 6]! + batch * (p[pb + 3]! - p[pa + 3]! + (p[pb + 4]! - p[pa + 4]!) * seq + (p[pb + 5]! - p[pa + 5]!) * seq2)) / 1e6;
      const ks = p[pb + 7]! - p[pa + 7]!;
      const qa = pa + DENSE;
      const qb = pb + DENSE;
      const gd = batch * (p[qb]! - p[qa]! + (p[qb + 1]! - p[qa + 1]!) * seq + (p[qb + 2]! - p[qa + 2]!) * seq2);
      const md = (p[qb + 6]! - p[qa + 6]! + batch * (p[qb + 3]! - p[qa + 3]! + (p[qb + 4]! - p[qa + 4]!) * seq + (p[qb + 5]! - p[qa + 5]!) * seq2)) / 1e6;
      const kd = p[qb + 7]! - p[qa + 7]!;
      const base = offset + this.slotOffset + s * this.slotWidth;
      if (full) {
        out[offset + t.countIndex] = out[offset + t.countIndex]! + 1;
        out[base] = a;
        out[base + 1] = b;
        out[base + 2] = batch;
        out[base + 3] = seq;
        out[base + 4] = gs;
        out[base + 5] = gd;
        out[base + 6] = ms;
        out[base + 7] = md;
        out[base + 8] = ks;
        out[base + 9] = kd;
      } else {
        out[base] = Math.log1p(batch);
        out[base + 1] = seq;
        out[base + 2] = Math.log1p(gs);
        out[base + 3] = Math.log1p(gd);
        out[base + 4] = Math.log1p(ms);
        out[base + 5] = Math.log1p(md);
        out[base + 6] = Math.log1p(ks);
        out[base + 7] = Math.log1p(kd);
        out[base + 8] = (b - a) / t.operators;
      }
      if (this.threads) out[base + this.slotWidth - 1] = slot.intraOpThreads ?? 0;
    }
  }

  /** Checks a group and fills `slotTables` / `ranks`; messages are built only on failure. */
  private validate(group: Group, groupIndex: number): void {
    const n = group.length;
    if (n < 1 || n > this.maxSlots) throw new RangeError(`group ${groupIndex} has ${n} slots; a group has 1..${this.maxSlots} (the predictor's maxSlots)`);
    for (let i = 0; i < n; i++) {
      const slot = group[i]!;
      const t = this.tables.get(slot.model);
      if (t === undefined) throw new RangeError(`group ${groupIndex} slot ${i}: model '${slot.model}' is not known to the predictor (it scores ${this.models.join(', ')})`);
      const { start, end, batch, seqLen } = slot;
      if (!(Number.isInteger(start) && Number.isInteger(end) && start >= 0 && start < end && end <= t.operators)) {
        throw new RangeError(`group ${groupIndex} slot ${i} (${slot.model}): segment [${start}, ${end}) must satisfy 0 ≤ start < end ≤ ${t.operators} (integers)`);
      }
      if (!(Number.isInteger(batch) && batch >= 1)) throw new RangeError(`group ${groupIndex} slot ${i} (${slot.model}): batch ${batch} must be an integer ≥ 1`);
      if (!(Number.isInteger(seqLen) && seqLen >= 0)) throw new RangeError(`group ${groupIndex} slot ${i} (${slot.model}): seqLen ${seqLen} must be an integer ≥ 0`);
      const threads = slot.intraOpThreads;
      if (threads !== undefined && !(Number.isInteger(threads) && threads >= 1)) throw new RangeError(`group ${groupIndex} slot ${i} (${slot.model}): intraOpThreads ${threads} must be an integer ≥ 1`);
      this.slotTables[i] = t;
      this.ranks[i] = t.rank;
    }
  }
}
