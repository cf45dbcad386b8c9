/**
 * Online refinement of an offline predictor (docs/adaptive.md): an affine correction learned from measured group latencies while serving, a
 * change detector that restarts it after a step change of the device, and a guard that inflates
 * predictions while the recent error is high. Measured numbers: `docs/adaptive.md`.
 *
 * ## Formula
 *
 * With `x` the base prediction of a group (ms), `u = 1/x`, and `r = measured / x` (clamped to
 * [1/10, 10]), each key k (below) fits the ratio as an affine function of `u`:
 *
 *   r ≈ b_k + a_k · u       ⇔   measured ≈ a_k + b_k · x      (a_k in ms, b_k unitless)
 *
 * by exponentially weighted least squares in ratio space (so every group weighs by its RELATIVE
 * error, what MAPE measures), with a ridge penalty λ · E[u²] · a² that pulls `a` to 0 when the
 * key has seen too narrow a range of latencies to tell an offset from a scale:
 *
 *   a = (E[u·r] − E[u]·E[r]) / (Var[u] + λ·E[u²]),   b = E[r] − a·E[u]       (λ = 0.01)
 *
 * E[·] are exponentially weighted means over the key's observations since its last restart:
 * m ← m + w · (value − m) with w = max(α, 1/n) for the n-th observation (the first sets m, then a
 * running mean until 1/n falls to α, then an EWMA), α = 1 − 2^(−1/halfLifeGroups), so an
 * observation's weight halves every `halfLifeGroups` observations of its key. All observed
 * ratios equal (any single shape): a = 0 and b = that ratio, a purely multiplicative correction.
 *
 * The refined prediction is x · F with F = clamp(b + a · clamp(u, u_min, u_max), 1/10, 10), where
 * [u_min, u_max] is the range of u the key has observed since its restart: the correction is not
 * extrapolated beyond the latencies it was learned on (outside, the factor at the nearest end
 * holds). Why affine: a device that slows down by a factor f except for a fixed part c of every
 * group (launch and host overheads that do not scale) measures f·x − (f − 1)·c — on the simulated
 * ×1.5 drift exactly 1.5·x − 0.73 ms for every resnet50 and bert shape (`docs/adaptive.md`), so one
 * multiplicative factor per model set mixes ratios from 1.11 (bert, batch 1) to 1.47 (bert, batch
 * 16 × seq 64); a bucketed factor would need a key per latency range and learn each more slowly.
 *
 * ## Key
 *
 * What the error of a group depends on beyond what the base sees well: the SET of models in the
 * group and the group size (slots) — `key = modelMask × 64 + min(slots, 63)`, models numbered
 * once: those of `base.models` at construction by their index, a model the base admits later
 * (a model loaded at runtime, `predict/unseen.ts`) by the next free number when first seen (found
 * by a scan of ≤ 8 names, else a Map; the first 30 numbered; a group with a model past them uses
 * the global fit); batch, sequence length and cut enter through x. A global
 * fit, updated by every observation, serves keys not seen (or not seen since a restart). At most
 * `maxKeys` keys are held (default 256); past the cap a new key is not added and uses the global
 * fit (bounded memory, nothing evicted). Keys of the first 8 models find their row in a flat
 * 64 KiB Int32Array, the others in a Map.
 *
 * ## Change detection (the fast transient)
 *
 * A detector averages the log error of the refined predictions, e = clamp(ln(measured /
 * refined), ±ln 2), with half-life `DETECTOR_HALF_LIFE_GROUPS` (8) groups. When |mean| > ln 1.1 —
 * a sustained bias of 10 %, beyond noise (the simulator's cv 2 % averages to ≈ 0.5 % over 8
 * groups; one clamped outlier moves the mean by at most 0.083 · ln 2 = 0.058) — the fits restart:
 * every key forgets its means (n = 0) and serves the global fit until it is observed again, the
 * global fit restarts from the triggering observation. The running-mean start then learns the new
 * device from the first groups (a ×1.4 step is detected after about 4 groups). Another restart
 * needs `DETECTOR_HALF_LIFE_GROUPS × 2` observations first. A slow drift is followed by the EWMA
 * and never trips it.
 *
 * ## Guard
 *
 * Over the last `guardWindow` (50) observed groups, the MAPE of the refined predictions decides
 * the calibration: above `guardOutMape` (10 %) the predictor is out of calibration, at or below
 * `guardInMape` (5 %) it is calibrated again (hysteresis; at least 10 observations first). While
 * out, the prediction of every OVERLAPPED group (≥ 2 slots) is multiplied by the
 * `guardQuantile` (0.9) quantile of measured ÷ refined over that window, at least 1: the
 * controller plans overlap with a latency the recent groups exceeded only 10 % of the time, so
 * fewer groups overlap, and where none fits the most urgent query runs alone (step 4c of the
 * controller), earliest deadline first — what a one-at-a-time EDF does. One-slot predictions
 * (the drop check, a query alone, its solo memo) stay refined and uninflated: a one-at-a-time
 * policy would use them as they are, and inflating them makes the drop check reject queries that
 * would have finished (measured: with a predictor 0.6 × the device with ±80 % error per shape,
 * inflating every prediction took abacus from 0.8 % to 4.6 % violations, worse than EDF's 4.3 %;
 * inflating only overlapped groups, 1.4 %; docs/adaptive.md). The alternative, falling back to
 * EDF while out of calibration, would also give up the overlap that still fits (abacus with the
 * same bad predictor stayed at 0.8–2.7 % where EDF had 4.3–10.5 %). Sources: 5 % is the project's
 * calibration bound (docs/adaptive.md "The guard"); 10 % is above the paper's offline MLP error (≈ 6 %, docs/predictor.md), so a
 * predictor as good as the paper's never trips the guard. Transitions are logged (`logger`,
 * info) with the window MAPE, the rolling MAPE and the thresholds.
 *
 * ## Parameters
 *
 * `halfLifeGroups` (default 50): measurement noise (the simulator's cv 2 %, a CPU's more) averages
 * over ~70 observations of a key (1/α) — the order of Clockwork's window of 10 measurements per
 * model × batch, but per group shape; a step change does not wait for it (change detection).
 * `mapeWindow` (default 500): the rolling error docs/adaptive.md "Measured" reports.
 *
 * ## Cost
 *
 * `predict`: the base's call plus, per group, O(slots) name comparisons (≤ 8 models; else Map
 * lookups), one row lookup and a multiply-add; no allocation (with `out` given). `observe`: O(slots) plus O(1) amortized for the
 * error windows (sums recomputed once per wrap, so they do not drift); while the guard is on, a
 * sort of the 50 recent ratios in a preallocated array; a restart clears `maxKeys` counters.
 */
import type { Logger } from '../log.ts';
import type { Group, Predictor, RefiningPredictor } from './predictor.ts';

/** Options of `RefinedPredictor`; every field optional. */
export interface RefineOptions {
  /** Observations of a key after which an observation's weight has halved; a finite number > 0. Default 50. */
  readonly halfLifeGroups?: number;
  /** Most keys held; an integer ≥ 1. Default 256. */
  readonly maxKeys?: number;
  /** Observed groups in the rolling MAPE; an integer ≥ 1. Default 500. */
  readonly mapeWindow?: number;
  /** Restart the fits on a sustained bias (module docs, "Change detection"). Default true. */
  readonly detectChanges?: boolean;
  /** Inflate predictions while out of calibration (module docs, "Guard"). Default true. */
  readonly guard?: boolean;
  /** Observed groups whose error decides the calibration; an integer ≥ 10. Default 50. */
  readonly guardWindow?: number;
  /** Out of calibration above this MAPE (fraction, > guardInMape). Default 0.10. */
  readonly guardOutMape?: number;
  /** Calibrated again at or below this MAPE (fraction, > 0). Default 0.05. */
  readonly guardInMape?: number;
  /** Quantile of measured ÷ refined the guard inflates by, in (0, 1]. Default 0.9. */
  readonly guardQuantile?: number;
  /** Where calibration changes and restarts are logged (info); none when absent. */
  readonly logger?: Logger;
}

export const DEFAULT_REFINE_OPTIONS = Object.freeze({
  halfLifeGroups: 50,
  maxKeys: 256,
  mapeWindow: 500,
  detectChanges: true,
  guard: true,
  guardWindow: 50,
  guardOutMape: 0.1,
  guardInMape: 0.05,
  guardQuantile: 0.9,
});

/** Models that get a bit in the key mask (31-bit integer arithmetic); others use the global fit. */
const MASK_MODELS = 30;
/** Up to this many models, a model's index is found by scanning the names (`keyOf`). */
const SCAN_MODELS = 8;
/** Group sizes distinguished in the key (`min(slots, 63)`). */
const SIZE_RADIX = 64;
/** Keys below this (≤ 8 models) find their row in a flat Int32Array (64 KiB) instead of the Map. */
const DIRECT_KEYS = 256 * SIZE_RADIX;
/** measured ÷ base is clamped to [1/10, 10] before it is fitted; the factor F as well. */
const MAX_RATIO = 10;
/** Ridge weight of the intercept, relative to E[u²] (module docs, "Formula"). */
export const INTERCEPT_RIDGE = 0.01;
/** Half-life of the change detector's mean log error, observations. */
export const DETECTOR_HALF_LIFE_GROUPS = 8;
/** The detector fires above this |mean log error|: ln 1.1, a 10 % bias. */
export const DETECTOR_THRESHOLD = Math.log(1.1);
/** The detector's log error is clamped to ±ln 2. */
const DETECTOR_CLAMP = Math.log(2);
/** Observations in the guard window before it may judge the calibration. */
const GUARD_MIN_OBSERVATIONS = 10;

/** `f` clamped to [1/MAX_RATIO, MAX_RATIO]. */
function clampF(f: number): number {
  return f < 1 / MAX_RATIO ? 1 / MAX_RATIO : f > MAX_RATIO ? MAX_RATIO : f;
}

/** Row 0 is the global fit; keys use rows 1..maxKeys. */
const GLOBAL = 0;

/**
 * A `RefiningPredictor` around an offline predictor (see the module docs for the formula).
 * `kind`, `deviceId`, `models` and `maxSlots` are the base's: it scores the same groups.
 */
export class RefinedPredictor implements RefiningPredictor {
  readonly base: Predictor;
  readonly kind: string;
  readonly deviceId: string;
  readonly maxSlots: number;
  /** The base predictor's (`Predictor.threadFeature`). */
  readonly threadFeature: boolean;
  readonly halfLifeGroups: number;
  readonly maxKeys: number;
  readonly mapeWindow: number;
  readonly detectChanges: boolean;
  readonly guard: boolean;
  readonly guardWindow: number;
  readonly guardOutMape: number;
  readonly guardInMape: number;
  readonly guardQuantile: number;
  /** EWMA weight of one observation, 1 − 2^(−1/halfLifeGroups). */
  readonly alpha: number;

  readonly #logger: Logger | undefined;
  readonly #modelIndex = new Map<string, number>();
  /** The first `SCAN_MODELS` model names when the base has no more: found by a scan with ===, cheaper than a Map lookup. */
  #scanNames: string[] | undefined;
  readonly #rows = new Map<number, number>();
  /** `#rows` for keys < DIRECT_KEYS: row, or −1 when not held. */
  readonly #direct = new Int32Array(DIRECT_KEYS).fill(-1);
  /** Per row (0 = global): observations since the restart, means of u, r, u², u·r, the fit and the u range. */
  readonly #n: Float64Array;
  readonly #mU: Float64Array;
  readonly #mR: Float64Array;
  readonly #mUU: Float64Array;
  readonly #mUR: Float64Array;
  readonly #a: Float64Array;
  readonly #b: Float64Array;
  readonly #uMin: Float64Array;
  readonly #uMax: Float64Array;
  #heldKeys = 0;
  #observed = 0;
  // rolling MAPE (mapeWindow)
  readonly #apeRefined: Float64Array;
  readonly #apeBase: Float64Array;
  #ringPos = 0;
  #ringFilled = 0;
  #sumRefined = 0;
  #sumBase = 0;
  // change detection
  readonly #detectorAlpha = 1 - Math.pow(2, -1 / DETECTOR_HALF_LIFE_GROUPS);
  #detector = 0;
  #sinceRestart = 0;
  #restarts = 0;
  // guard
  readonly #guardApe: Float64Array;
  readonly #guardRatio: Float64Array;
  readonly #guardScratch: Float64Array;
  #guardPos = 0;
  #guardFilled = 0;
  #guardSum = 0;
  #outOfCalibration = false;
  #guardFactor = 1;
  /** `optimisticFactor`'s last answer, for the observation count and quantile it was computed at. */
  #optimistic = 1;
  #optimisticAt = -1;
  #optimisticQuantile = NaN;

  /**
   * @throws RangeError naming the option when `halfLifeGroups` is not a finite number > 0,
   *   `maxKeys` / `mapeWindow` is not an integer ≥ 1, `guardWindow` not an integer ≥ 10, the
   *   guard thresholds not 0 < guardInMape < guardOutMape (finite), or `guardQuantile` not in (0, 1].
   */
  constructor(base: Predictor, options: RefineOptions = {}) {
    const o = { ...DEFAULT_REFINE_OPTIONS, ...Object.fromEntries(Object.entries(options).filter(([, v]) => v !== undefined)) } as typeof DEFAULT_REFINE_OPTIONS;
    if (!(Number.isFinite(o.halfLifeGroups) && o.halfLifeGroups > 0)) throw new RangeError(`RefineOptions.halfLifeGroups must be a finite number > 0, got ${o.halfLifeGroups}`);
    if (!(Number.isInteger(o.maxKeys) && o.maxKeys >= 1)) throw new RangeError(`RefineOptions.maxKeys must be an integer ≥ 1, got ${o.maxKeys}`);
    if (!(Number.isInteger(o.mapeWindow) && o.mapeWindow >= 1)) throw new RangeError(`RefineOptions.mapeWindow must be an integer ≥ 1, got ${o.mapeWindow}`);
    if (!(Number.isInteger(o.guardWindow) && o.guardWindow >= GUARD_MIN_OBSERVATIONS)) throw new RangeError(`RefineOptions.guardWindow must be an integer ≥ ${GUARD_MIN_OBSERVATIONS}, got ${o.guardWindow}`);
    if (!(o.guardInMape > 0 && o.guardOutMape > o.guardInMape && Number.isFinite(o.guardOutMape))) {
      throw new RangeError(`RefineOptions.guardInMape and guardOutMape must satisfy 0 < guardInMape < guardOutMape (finite), got ${o.guardInMape} and ${o.guardOutMape}`);
    }
    if (!(o.guardQuantile > 0 && o.guardQuantile <= 1)) throw new RangeError(`RefineOptions.guardQuantile must be in (0, 1], got ${o.guardQuantile}`);
    this.base = base;
    this.kind = base.kind;
    this.deviceId = base.deviceId;
    this.maxSlots = base.maxSlots;
    this.threadFeature = base.threadFeature === true;
    this.halfLifeGroups = o.halfLifeGroups;
    this.maxKeys = o.maxKeys;
    this.mapeWindow = o.mapeWindow;
    this.detectChanges = o.detectChanges;
    this.guard = o.guard;
    this.guardWindow = o.guardWindow;
    this.guardOutMape = o.guardOutMape;
    this.guardInMape = o.guardInMape;
    this.guardQuantile = o.guardQuantile;
    this.alpha = 1 - Math.pow(2, -1 / o.halfLifeGroups);
    this.#logger = options.logger;
    base.models.forEach((m, i) => {
      if (i < MASK_MODELS) this.#modelIndex.set(m, i);
    });
    this.#scanNames = base.models.length <= SCAN_MODELS ? [...base.models] : undefined;
    const rows = o.maxKeys + 1;
    this.#n = new Float64Array(rows);
    this.#mU = new Float64Array(rows);
    this.#mR = new Float64Array(rows);
    this.#mUU = new Float64Array(rows);
    this.#mUR = new Float64Array(rows);
    this.#a = new Float64Array(rows);
    this.#b = new Float64Array(rows).fill(1);
    this.#uMin = new Float64Array(rows);
    this.#uMax = new Float64Array(rows);
    this.#apeRefined = new Float64Array(o.mapeWindow);
    this.#apeBase = new Float64Array(o.mapeWindow);
    this.#guardApe = new Float64Array(o.guardWindow);
    this.#guardRatio = new Float64Array(o.guardWindow);
    this.#guardScratch = new Float64Array(o.guardWindow);
  }

  /** The base's predictions, each refined (module docs); a group of ≥ 2 slots also × the guard's factor. Throws what the base throws. */
  predict(groups: readonly Group[], out?: Float64Array): Float64Array {
    const res = this.base.predict(groups, out);
    const g = this.#guardFactor;
    for (let i = 0; i < groups.length; i++) {
      const group = groups[i]!;
      const ms = this.#refine(this.#fitRow(this.keyOf(group)), res[i]!);
      res[i] = group.length > 1 ? g * ms : ms;
    }
    return res;
  }

  refineMs(group: Group, baseMs: number): number {
    const ms = this.#refine(this.#fitRow(this.keyOf(group)), baseMs);
    return group.length > 1 ? this.#guardFactor * ms : ms;
  }

  soloMs(model: string, baseMs: number): number {
    return this.#refine(this.#soloRow(model), baseMs);
  }

  baseSoloMs(model: string, ms: number): number {
    return this.#unrefine(this.#soloRow(model), ms);
  }

  /** `x · F` of the module docs for base prediction `x` with the fit of `row` (no guard). */
  #refine(row: number, x: number): number {
    const a = this.#a[row]!;
    if (a === 0) return x * this.#b[row]!; // multiplicative (and the identity before any observation)
    let u = 1 / x;
    const lo = this.#uMin[row]!;
    const hi = this.#uMax[row]!;
    if (u < lo) u = lo;
    else if (u > hi) u = hi;
    return x * clampF(this.#b[row]! + a * u);
  }

  /**
   * The x with `#refine(row, x) = y` (y > 0): `#refine` is continuous and increasing in x (b > 0
   * is kept by `#solve`), piecewise x · const or a + b·x; each piece is tried in turn.
   */
  #unrefine(row: number, y: number): number {
    const a = this.#a[row]!;
    const b = this.#b[row]!;
    if (a === 0) return y / b;
    const xLo = 1 / this.#uMax[row]!; // below it: u = uMax
    const xHi = 1 / this.#uMin[row]!; // above it: u = uMin
    const fSmall = clampF(b + a * this.#uMax[row]!);
    if (y <= xLo * fSmall) return y / fSmall;
    const fLarge = clampF(b + a * this.#uMin[row]!);
    if (y >= xHi * fLarge) return y / fLarge;
    const x = (y - a) / b; // the unclamped middle piece
    const f = b + a / x;
    if (f >= 1 / MAX_RATIO && f <= MAX_RATIO) return x;
    return y / clampF(f);
  }

  /** The row whose fit serves `key`: its own once observed since the last restart, else the global one. */
  #fitRow(key: number): number {
    const row = this.#rowOf(key);
    return row === undefined || this.#n[row] === 0 ? GLOBAL : row;
  }

  #soloRow(model: string): number {
    const idx = this.#indexOf(model);
    return idx < 0 ? GLOBAL : this.#fitRow((1 << idx) * SIZE_RADIX + 1);
  }

  #rowOf(key: number): number | undefined {
    if (key < 0) return undefined;
    if (key < DIRECT_KEYS) {
      const row = this.#direct[key]!;
      return row < 0 ? undefined : row;
    }
    return this.#rows.get(key);
  }

  /** The fit `predict` uses for `group` now (without the guard): measured ≈ a + b · base (a in ms). */
  fitOf(group: Group): { readonly a: number; readonly b: number } {
    const row = this.#fitRow(this.keyOf(group));
    return { a: this.#a[row]!, b: this.#b[row]! };
  }

  /** The base predictor's (`Predictor.revision`). */
  get revision(): number | undefined {
    return this.base.revision;
  }

  /** The base's models, read each time (a base may admit models while serving, `predict/unseen.ts`). */
  get models(): readonly string[] {
    return this.base.models;
  }

  /** Keys held now (≤ maxKeys). */
  get keys(): number {
    return this.#heldKeys;
  }

  /** `modelMask × 64 + min(slots, 63)`, or −1 when a model has no bit (module docs "Key"). */
  keyOf(group: Group): number {
    let mask = 0;
    for (let j = 0; j < group.length; j++) {
      const idx = this.#indexOf(group[j]!.model);
      if (idx < 0) return -1;
      mask |= 1 << idx;
    }
    return mask * SIZE_RADIX + Math.min(group.length, SIZE_RADIX - 1);
  }

  /**
   * The model's bit in the key mask, or −1 when it has none. A model not numbered yet (one the
   * base admitted after this refiner was made, `predict/unseen.ts`) gets the next bit while
   * fewer than `MASK_MODELS` are numbered.
   */
  #indexOf(model: string): number {
    const names = this.#scanNames;
    if (names !== undefined) {
      for (let k = 0; k < names.length; k++) if (names[k] === model) return k;
    } else {
      const idx = this.#modelIndex.get(model);
      if (idx !== undefined) return idx;
    }
    const next = this.#modelIndex.size;
    if (next >= MASK_MODELS) return -1;
    this.#modelIndex.set(model, next);
    if (names !== undefined) {
      if (names.length < SCAN_MODELS) names.push(model);
      else this.#scanNames = undefined;
    }
    return next;
  }

  observe(group: Group, basePredictedMs: number, measuredMs: number): void {
    if (!(Number.isFinite(basePredictedMs) && basePredictedMs > 0 && Number.isFinite(measuredMs) && measuredMs > 0)) return;
    const key = this.keyOf(group);
    let row = this.#rowOf(key);
    const refinedMs = this.#refine(row === undefined || this.#n[row] === 0 ? GLOBAL : row, basePredictedMs);
    this.#record(Math.abs(refinedMs - measuredMs) / measuredMs, Math.abs(basePredictedMs - measuredMs) / measuredMs);
    // the window is kept with the guard off too: `optimisticFactor` reads it
    this.#judge(Math.abs(refinedMs - measuredMs) / measuredMs, measuredMs / refinedMs);
    if (this.detectChanges) this.#detect(measuredMs / refinedMs);
    if (row === undefined && key >= 0 && this.#heldKeys < this.maxKeys) {
      row = ++this.#heldKeys;
      this.#rows.set(key, row);
      if (key < DIRECT_KEYS) this.#direct[key] = row;
    }
    const u = 1 / basePredictedMs;
    const r = Math.max(1 / MAX_RATIO, Math.min(MAX_RATIO, measuredMs / basePredictedMs));
    this.#update(GLOBAL, u, r);
    if (row !== undefined) this.#update(row, u, r);
    this.#observed++;
  }

  #update(row: number, u: number, r: number): void {
    const n = this.#n[row]! + 1;
    this.#n[row] = n;
    const w = Math.max(this.alpha, 1 / n);
    this.#mU[row] = this.#mU[row]! + w * (u - this.#mU[row]!);
    this.#mR[row] = this.#mR[row]! + w * (r - this.#mR[row]!);
    this.#mUU[row] = this.#mUU[row]! + w * (u * u - this.#mUU[row]!);
    this.#mUR[row] = this.#mUR[row]! + w * (u * r - this.#mUR[row]!);
    if (n === 1) {
      this.#uMin[row] = u;
      this.#uMax[row] = u;
    } else if (u < this.#uMin[row]!) this.#uMin[row] = u;
    else if (u > this.#uMax[row]!) this.#uMax[row] = u;
    this.#solve(row);
  }

  /** The ridge least-squares fit of the module docs; multiplicative (a = 0) when it would not keep b in [1/10, 10]. */
  #solve(row: number): void {
    const mU = this.#mU[row]!;
    const mR = this.#mR[row]!;
    const cov = this.#mUR[row]! - mU * mR;
    const den = this.#mUU[row]! - mU * mU + INTERCEPT_RIDGE * this.#mUU[row]!;
    let a = den > 0 ? cov / den : 0;
    let b = mR - a * mU;
    if (!(b >= 1 / MAX_RATIO && b <= MAX_RATIO) || !Number.isFinite(a)) {
      a = 0;
      b = mR;
    }
    this.#a[row] = a;
    this.#b[row] = b;
  }

  /** Change detection (module docs): `ratio` = measured ÷ refined of the observation being taken. */
  #detect(ratio: number): void {
    const e = Math.max(-DETECTOR_CLAMP, Math.min(DETECTOR_CLAMP, Math.log(ratio)));
    this.#detector += this.#detectorAlpha * (e - this.#detector);
    this.#sinceRestart++;
    if (Math.abs(this.#detector) <= DETECTOR_THRESHOLD || this.#sinceRestart < 2 * DETECTOR_HALF_LIFE_GROUPS) return;
    const bias = Math.exp(this.#detector);
    this.#n.fill(0);
    this.#detector = 0;
    this.#sinceRestart = 0;
    this.#restarts++;
    this.#logger?.info({ observedGroups: this.#observed, measuredOverRefined: bias, threshold: Math.exp(DETECTOR_THRESHOLD), rollingMape: this.rollingMape }, 'predictor refinement restarted: the device changed');
  }

  /** Guard (module docs): the window's MAPE decides the calibration; while out, the factor is its ratio quantile. */
  #judge(ape: number, ratio: number): void {
    const w = this.guardWindow;
    const i = this.#guardPos;
    if (this.#guardFilled === w) this.#guardSum -= this.#guardApe[i]!;
    else this.#guardFilled++;
    this.#guardApe[i] = ape;
    this.#guardRatio[i] = ratio;
    this.#guardSum += ape;
    this.#guardPos = i + 1 === w ? 0 : i + 1;
    if (this.#guardPos === 0) {
      let s = 0;
      for (let k = 0; k < w; k++) s += this.#guardApe[k]!;
      this.#guardSum = s;
    }
    if (!this.guard || this.#guardFilled < GUARD_MIN_OBSERVATIONS) return;
    const mape = this.#guardSum / this.#guardFilled;
    if (!this.#outOfCalibration && mape > this.guardOutMape) {
      this.#outOfCalibration = true;
      this.#guardFactor = this.#ratioQuantile();
      this.#logger?.info({ recentMape: mape, window: this.#guardFilled, outAbove: this.guardOutMape, inAtOrBelow: this.guardInMape, rollingMape: this.rollingMape, guardFactor: this.#guardFactor }, 'predictor out of calibration: guard on');
    } else if (this.#outOfCalibration && mape <= this.guardInMape) {
      this.#outOfCalibration = false;
      this.#guardFactor = 1;
      this.#logger?.info({ recentMape: mape, window: this.#guardFilled, outAbove: this.guardOutMape, inAtOrBelow: this.guardInMape, rollingMape: this.rollingMape }, 'predictor calibrated again: guard off');
    } else if (this.#outOfCalibration) {
      this.#guardFactor = this.#ratioQuantile();
    }
  }

  /** max(1, the `guardQuantile` quantile (nearest rank) of measured ÷ refined over the guard window). */
  #ratioQuantile(): number {
    const n = this.#guardFilled;
    const s = this.#guardScratch.subarray(0, n);
    s.set(this.#guardRatio.subarray(0, n));
    s.sort();
    const q = s[Math.min(n - 1, Math.ceil(this.guardQuantile * n) - 1)]!;
    return q > 1 ? q : 1;
  }

  get rollingMape(): number {
    return this.#ringFilled === 0 ? 0 : this.#sumRefined / this.#ringFilled;
  }

  get rollingBaseMape(): number {
    return this.#ringFilled === 0 ? 0 : this.#sumBase / this.#ringFilled;
  }

  get recentMape(): number {
    return this.#guardFilled === 0 ? 0 : this.#guardSum / this.#guardFilled;
  }

  get guardActive(): boolean {
    return this.#outOfCalibration;
  }

  get guardFactor(): number {
    return this.#guardFactor;
  }

  /** min(1, the `quantile` quantile (nearest rank) of measured ÷ refined over the guard window); 1 before `GUARD_MIN_OBSERVATIONS`. @throws RangeError for a quantile outside (0, 1]. */
  optimisticFactor(quantile: number): number {
    if (!(quantile > 0 && quantile <= 1)) throw new RangeError(`optimisticFactor: quantile must be in (0, 1], got ${quantile}`);
    const n = this.#guardFilled;
    if (n < GUARD_MIN_OBSERVATIONS) return 1;
    if (this.#optimisticAt !== this.#observed || this.#optimisticQuantile !== quantile) {
      const s = this.#guardScratch.subarray(0, n);
      s.set(this.#guardRatio.subarray(0, n));
      s.sort();
      const q = s[Math.min(n - 1, Math.max(0, Math.ceil(quantile * n) - 1))]!;
      this.#optimistic = q < 1 ? q : 1;
      this.#optimisticAt = this.#observed;
      this.#optimisticQuantile = quantile;
    }
    return this.#optimistic;
  }

  get restarts(): number {
    return this.#restarts;
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
