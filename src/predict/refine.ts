/**
 * Online refinement of an offline predictor (DESIGN.md "Predictions are refined online"; issue 13
 * item 1): a multiplicative correction learned from measured group latencies while serving.
 *
 * ## Formula
 *
 *   refined(g) = base(g) × exp(m[key(g)])
 *
 * where `m[k]` is an exponentially weighted mean of the log error `x = ln(measured / base)` over
 * the groups observed with key k:
 *
 *   m ← m + α · (clamp(x, ±ln 10) − m),   α = 1 − 2^(−1 / halfLifeGroups)
 *
 * so an observation's weight halves every `halfLifeGroups` observations of its key. After k
 * observations of a constant ratio r from m = 0, m = (1 − (1 − α)^k) · ln r, i.e. the factor is
 * r^(1 − 2^(−k / halfLifeGroups)): half of the (log) way after one half-life, within 0.1 % of r
 * after ten (for r = 1.5). The log makes the correction multiplicative and symmetric (×2 and ÷2
 * weigh the same) and keeps a refined prediction > 0; the clamp bounds what one wild
 * measurement can do (it moves the factor by at most 10^α).
 *
 * ## Key
 *
 * What the error of a group depends on beyond what the base sees well: the SET of models in the
 * group and the group size (slots) — `key = modelMask × 64 + min(slots, 63)`, models numbered
 * once by their index in `base.models` (the first 30; a group with a model past them, or not in
 * `base.models`, uses the global factor). A drift of the whole device moves every key; a
 * contention the base mis-learned moves only the pairs it concerns.
 *
 * A global mean `m_g`, updated by every observation, serves keys not seen yet; a new key starts
 * at `m_g` (what is known so far) and then follows its own observations. At most `maxKeys` keys
 * are held (default 256, a Float64Array each for m and the factor); past the cap a new key is not
 * added and uses the global factor (bounded memory, nothing evicted). Keys of the first 8 models
 * find their row in a flat 64 KiB Int32Array, the others in a Map.
 *
 * ## Parameters
 *
 * `halfLifeGroups` (default 50): short enough that a ×1.5 speed step is 99.9 % learned after
 * ~500 observations of a key (the issue asks for ≤ 5 % rolling MAPE within 2000 groups of the
 * change), long enough that measurement noise (the simulator's cv 2 %, a CPU's more) averages over
 * ~70 observations (1/α) — the same order as Clockwork's window of 10 measurements per model ×
 * batch, but per group shape. `mapeWindow` (default 500): the rolling error the issue reports.
 *
 * ## Cost
 *
 * `predict`: the base's call plus, per group, O(slots) Map lookups and one Map lookup of a
 * number key; no allocation (with `out` given). `observe`: O(slots) plus O(1) amortized for the
 * error window (its sums are recomputed once per wrap, so they do not drift).
 */
import type { Group, Predictor, RefiningPredictor } from './predictor.ts';

/** Options of `RefinedPredictor`; every field optional. */
export interface RefineOptions {
  /** Observations of a key after which an observation's weight has halved; a finite number > 0. Default 50. */
  readonly halfLifeGroups?: number;
  /** Most keys held; an integer ≥ 1. Default 256. */
  readonly maxKeys?: number;
  /** Observed groups in the rolling MAPE; an integer ≥ 1. Default 500. */
  readonly mapeWindow?: number;
}

export const DEFAULT_REFINE_OPTIONS: Readonly<Required<RefineOptions>> = Object.freeze({ halfLifeGroups: 50, maxKeys: 256, mapeWindow: 500 });

/** Models that get a bit in the key mask (31-bit integer arithmetic); others use the global factor. */
const MASK_MODELS = 30;
/** Group sizes distinguished in the key (`min(slots, 63)`). */
const SIZE_RADIX = 64;
/** Keys below this (≤ 8 models) find their row in a flat Int32Array (64 KiB) instead of the Map. */
const DIRECT_KEYS = 256 * SIZE_RADIX;
/** |ln(measured / base)| is clamped to ln 10 before it is averaged. */
const MAX_LOG_RATIO = Math.log(10);

/**
 * A `RefiningPredictor` around an offline predictor (see the module docs for the formula).
 * `kind`, `deviceId`, `models` and `maxSlots` are the base's: it scores the same groups.
 */
export class RefinedPredictor implements RefiningPredictor {
  readonly base: Predictor;
  readonly kind: string;
  readonly deviceId: string;
  readonly models: readonly string[];
  readonly maxSlots: number;
  readonly halfLifeGroups: number;
  readonly maxKeys: number;
  readonly mapeWindow: number;
  /** EWMA weight of one observation, 1 − 2^(−1/halfLifeGroups). */
  readonly alpha: number;

  readonly #modelIndex = new Map<string, number>();
  readonly #rows = new Map<number, number>();
  /** `#rows` for keys < DIRECT_KEYS: row, or −1 when not held. */
  readonly #direct = new Int32Array(DIRECT_KEYS).fill(-1);
  readonly #logMean: Float64Array;
  readonly #factor: Float64Array;
  #globalLog = 0;
  #globalFactor = 1;
  readonly #apeRefined: Float64Array;
  readonly #apeBase: Float64Array;
  #ringPos = 0;
  #ringFilled = 0;
  #sumRefined = 0;
  #sumBase = 0;
  #observed = 0;

  /**
   * @throws RangeError naming the option when `halfLifeGroups` is not a finite number > 0, or
   *   `maxKeys` / `mapeWindow` is not an integer ≥ 1.
   */
  constructor(base: Predictor, options: RefineOptions = {}) {
    const d = DEFAULT_REFINE_OPTIONS;
    const o = { halfLifeGroups: options.halfLifeGroups ?? d.halfLifeGroups, maxKeys: options.maxKeys ?? d.maxKeys, mapeWindow: options.mapeWindow ?? d.mapeWindow };
    if (!(Number.isFinite(o.halfLifeGroups) && o.halfLifeGroups > 0)) throw new RangeError(`RefineOptions.halfLifeGroups must be a finite number > 0, got ${o.halfLifeGroups}`);
    if (!(Number.isInteger(o.maxKeys) && o.maxKeys >= 1)) throw new RangeError(`RefineOptions.maxKeys must be an integer ≥ 1, got ${o.maxKeys}`);
    if (!(Number.isInteger(o.mapeWindow) && o.mapeWindow >= 1)) throw new RangeError(`RefineOptions.mapeWindow must be an integer ≥ 1, got ${o.mapeWindow}`);
    this.base = base;
    this.kind = base.kind;
    this.deviceId = base.deviceId;
    this.models = base.models;
    this.maxSlots = base.maxSlots;
    this.halfLifeGroups = o.halfLifeGroups;
    this.maxKeys = o.maxKeys;
    this.mapeWindow = o.mapeWindow;
    this.alpha = 1 - Math.pow(2, -1 / o.halfLifeGroups);
    base.models.forEach((m, i) => {
      if (i < MASK_MODELS) this.#modelIndex.set(m, i);
    });
    this.#logMean = new Float64Array(o.maxKeys);
    this.#factor = new Float64Array(o.maxKeys);
    this.#apeRefined = new Float64Array(o.mapeWindow);
    this.#apeBase = new Float64Array(o.mapeWindow);
  }

  /** The base's predictions times each group's correction factor (module docs). Throws what the base throws. */
  predict(groups: readonly Group[], out?: Float64Array): Float64Array {
    const res = this.base.predict(groups, out);
    for (let i = 0; i < groups.length; i++) res[i] = res[i]! * this.factorOf(groups[i]!);
    return res;
  }

  /** The correction factor `predict` applies to `group` now (> 0; 1 before any observation). */
  factorOf(group: Group): number {
    const row = this.#rowOf(this.keyOf(group));
    return row === undefined ? this.#globalFactor : this.#factor[row]!;
  }

  #rowOf(key: number): number | undefined {
    if (key < 0) return undefined;
    if (key < DIRECT_KEYS) {
      const row = this.#direct[key]!;
      return row < 0 ? undefined : row;
    }
    return this.#rows.get(key);
  }

  factorOfSolo(model: string): number {
    const idx = this.#modelIndex.get(model);
    const row = idx === undefined ? undefined : this.#rowOf((1 << idx) * SIZE_RADIX + 1);
    return row === undefined ? this.#globalFactor : this.#factor[row]!;
  }

  /** The global factor (every observation; used for keys not held). */
  get globalFactor(): number {
    return this.#globalFactor;
  }

  /** Keys held now (≤ maxKeys). */
  get keys(): number {
    return this.#rows.size;
  }

  /** `modelMask × 64 + min(slots, 63)`, or −1 when a model has no bit (module docs "Key"). */
  keyOf(group: Group): number {
    let mask = 0;
    for (let j = 0; j < group.length; j++) {
      const idx = this.#modelIndex.get(group[j]!.model);
      if (idx === undefined) return -1;
      mask |= 1 << idx;
    }
    return mask * SIZE_RADIX + Math.min(group.length, SIZE_RADIX - 1);
  }

  observe(group: Group, basePredictedMs: number, measuredMs: number): void {
    if (!(Number.isFinite(basePredictedMs) && basePredictedMs > 0 && Number.isFinite(measuredMs) && measuredMs > 0)) return;
    const key = this.keyOf(group);
    let row = this.#rowOf(key);
    const refinedMs = basePredictedMs * (row === undefined ? this.#globalFactor : this.#factor[row]!);
    this.#record(Math.abs(refinedMs - measuredMs) / measuredMs, Math.abs(basePredictedMs - measuredMs) / measuredMs);
    if (row === undefined && key >= 0 && this.#rows.size < this.maxKeys) {
      row = this.#rows.size;
      this.#rows.set(key, row);
      if (key < DIRECT_KEYS) this.#direct[key] = row;
      this.#logMean[row] = this.#globalLog; // a new key starts from what is known so far
    }
    const x = Math.max(-MAX_LOG_RATIO, Math.min(MAX_LOG_RATIO, Math.log(measuredMs / basePredictedMs)));
    const a = this.alpha;
    this.#globalLog += a * (x - this.#globalLog);
    this.#globalFactor = Math.exp(this.#globalLog);
    if (row !== undefined) {
      const m = this.#logMean[row]! + a * (x - this.#logMean[row]!);
      this.#logMean[row] = m;
      this.#factor[row] = Math.exp(m);
    }
    this.#observed++;
  }

  get rollingMape(): number {
    return this.#ringFilled === 0 ? 0 : this.#sumRefined / this.#ringFilled;
  }

  get rollingBaseMape(): number {
    return this.#ringFilled === 0 ? 0 : this.#sumBase / this.#ringFilled;
  }

  get observedGroups(): number {
    return this.#observed;
  }

  #record(apeRefined: number, apeBase: number): void {
    const i = this.#ringPos;
    if (this.#ringFilled === this.mapeWindow) {
      this.#sumRefined -= this.#apeRefined[i]!;
      this.#sumBase -= this.#apeBase[i]!;
    } else {
      this.#ringFilled++;
    }
    this.#apeRefined[i] = apeRefined;
    this.#apeBase[i] = apeBase;
    this.#sumRefined += apeRefined;
    this.#sumBase += apeBase;
    this.#ringPos = i + 1 === this.mapeWindow ? 0 : i + 1;
    if (this.#ringPos === 0) {
      // once per wrap: exact sums again (running additions and subtractions accumulate rounding)
      let r = 0;
      let b = 0;
      for (let k = 0; k < this.mapeWindow; k++) {
        r += this.#apeRefined[k]!;
        b += this.#apeBase[k]!;
      }
      this.#sumRefined = r;
      this.#sumBase = b;
    }
  }
}
