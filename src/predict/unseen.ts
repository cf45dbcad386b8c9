/**
 * Admitting a model the predictor was not trained on while serving (docs/health.md "Model state and model control": a
 * model loaded at runtime with `abacus serve --model-control explicit`). `OpenPredictor` wraps the
 * serving predictor; `admit(spec)` makes it score one more model, in one of two ways:
 *
 * 1. **`flop` features** (`how: 'flop-predictor'`): the base uses model-agnostic features
 *    (`features.ts` "Feature sets"), so it can score the model itself from its FLOPs, bytes and
 *    kernels, as `--allow-unseen` does at start-up. The caller's `rebuild` makes a predictor from
 *    the same weights over the specs with the new one added (`file.ts` `predictorFromFile` with
 *    `allowUnseen`), which then replaces the base. Groups without the new model are encoded as
 *    before (trained models keep their ranks), so their predictions do not change.
 *
 * 2. **`full` features** (`how: 'cost-fallback'`): the base has one input per trained model and
 *    cannot describe another. The new model's segments are estimated by a cost model,
 *
 *      solo(slot) = s · (c0 + c_k · kernels + c_g · gflop + c_m · mb)       (ms)
 *
 *    with `kernels`, `gflop`, `mb` the segment's costs at its batch and sequence length
 *    (`features.ts` `segmentCosts`) and c ≥ 0 fitted by non-negative least squares on the
 *    relative error (each point weighs 1/y², what MAPE measures; exact: every subset of the 4
 *    coefficients is solved and the best feasible one kept) to the latencies of the segments
 *    `calibrationSlots` lists (whole model, halves and quarters; batch 1–16; sequence lengths
 *    default, 16, 64), taken from one of two sources:
 *    - **measured** (`admit(spec, { measured })`): the new model's own solo runs where running
 *      them disturbs no served query — `abacus serve` on a `sim:` device measures them on a
 *      private copy of the simulated device in simulated time (`deployment/solo-measure.ts`);
 *    - **transferred** (no measurements: a real device, where a run would overlap the served
 *      groups): the BASE predictor's solo predictions of the models it was trained on.
 *    `s` = max(1, the 0.9 quantile of latency ÷ fit over those points): on the points it was
 *    fitted to, the estimate is at least the latency 90 % of the time (a deliberately high one).
 *    Measured (`bench/unseen-fallback.ts`, sim:a100, MLP trained on resnet50-small, bert-small
 *    admitted): fitted to 105 measured solo runs, solo MAPE 2.1 % over 400 fresh groups (≥ the
 *    measured latency in 85.5 % of them); transferred from resnet50-small, 5.4× too high (median).
 *
 *    A group holding such a slot is predicted as the base's prediction of its other slots (0
 *    when none) PLUS the fallback's solo estimate of each fallback slot: as if those segments
 *    ran after the others, never overlapped with them. Under processor sharing a group takes no
 *    longer than its segments one after another, so this over-estimates an overlapped group
 *    when the solo estimates are right: a co-located query is planned with a budget that
 *    includes the whole new segment, and overlap with the new model is only chosen where it
 *    fits even serially. Groups without a fallback slot go to the base unchanged.
 *
 * Online correction: the fallback is a pure function of the group (the controllers' solo memo
 * relies on that, `schedule/heads.ts` `SoloMemo`). Policies that learn from measured groups
 * correct it: abacus with `refine` gives keys with the new model their own fit
 * (`refine.ts`, models numbered in order of first sight) and its guard inflates overlapped
 * groups while the error is high; clockwork schedules from measured latencies once it has seen
 * the model. fcfs/sjf/edf use the estimate as it is.
 *
 * Not reentrant (as every predictor here): one caller at a time on one thread.
 */
import { fixedBatchOf } from '../model/boundary.ts';
import type { ModelSpec } from '../model/spec.ts';
import { segmentCosts } from './features.ts';
import type { Group, GroupSlot, Predictor } from './predictor.ts';

/** How `OpenPredictor.admit` lets the predictor score a model (module docs). */
export type AdmissionKind = 'trained' | 'flop-predictor' | 'cost-fallback';

/** The outcome of `OpenPredictor.admit`. */
export interface Admission {
  readonly model: string;
  readonly how: AdmissionKind;
  /** One line for an operator (the repository index's `reason` of a READY model); '' for `trained`. */
  readonly note: string;
  /** `cost-fallback`: MAPE (fraction) of the fitted cost model (before its scale) on the points it was fitted to — the measurements, or the base's predictions when transferred; absent otherwise. */
  readonly calibrationMape?: number;
}

/** Options of `OpenPredictor`. */
export interface OpenPredictorOptions {
  /** Specs of the base's trained models (by model name; a subset is fine): the cost fallback's calibration. */
  readonly specs: ReadonlyMap<string, ModelSpec>;
  /**
   * Only for a base with `flop` features: a predictor from the same weights over `specs` (which
   * holds every model scored so far plus the new one). Absent: every unseen model gets the cost fallback.
   */
  readonly rebuild?: (specs: ReadonlyMap<string, ModelSpec>) => Predictor;
}

/** Batch sizes of the calibration points (a model with a fixed batch uses that one). */
const CALIBRATION_BATCHES = [1, 2, 4, 8, 16] as const;
/** Sequence lengths of the calibration points of a model with a sequence axis (0: its default). */
const CALIBRATION_SEQ_LENS = [0, 16, 64] as const;
/** Quantile of base ÷ fit that scales the fallback up (module docs). */
const CALIBRATION_QUANTILE = 0.9;

/** A model scored by a cost fallback. */
interface FallbackModel {
  readonly spec: ModelSpec;
  readonly operators: number;
  readonly costs: CostFallback;
}

/** Options of `OpenPredictor.admit`. */
export interface AdmitOptions {
  /**
   * Solo latencies of the model measured where measuring disturbs no served query (a private
   * copy of a simulated device); ≥ 4 of them: its cost fallback is fitted to these instead of
   * transferred from the base's models. Ignored for a model the base or its `flop` rebuild scores.
   */
  readonly measured?: readonly SoloMeasurement[];
  /** Where `measured` comes from, for the note (e.g. `a private copy of sim:a100`). */
  readonly measuredOn?: string;
}

/**
 * The cost model of the `full`-feature fallback (module docs), fitted once to a base predictor.
 * Exported for tests.
 */
export class CostFallback {
  /** Coefficients c0 (ms), c_k (ms per kernel), c_g (ms per GFLOP), c_m (ms per MB), scale already applied. */
  readonly coefficients: readonly [number, number, number, number];
  /** The quantile scale s ≥ 1 applied to the fit. */
  readonly scale: number;
  /** MAPE (fraction) of the unscaled fit against the base's predictions on the calibration points. */
  readonly calibrationMape: number;
  /** Calibration points used. */
  readonly points: number;

  private constructor(coefficients: [number, number, number, number], scale: number, calibrationMape: number, points: number) {
    this.coefficients = coefficients;
    this.scale = scale;
    this.calibrationMape = calibrationMape;
    this.points = points;
  }

  /**
   * Fit to `base`'s solo predictions of the models in `specs` that it scores (a transfer: the
   * law learned on other models).
   * @throws RangeError when no calibration point exists (no spec of a model the base scores) or
   *   the fit is degenerate (every coefficient 0, or a non-finite prediction).
   */
  static fit(base: Predictor, specs: ReadonlyMap<string, ModelSpec>): CostFallback {
    const known = [...specs.values()].filter((s) => base.models.includes(s.name));
    if (known.length === 0) throw new RangeError(`no calibration data for a cost fallback: none of the given specs (${[...specs.keys()].join(', ') || 'none'}) is a model the predictor scores (${base.models.join(', ')})`);
    const groups: GroupSlot[][] = [];
    const features: number[][] = [];
    for (const spec of known) {
      for (const slot of calibrationSlots(spec)) {
        groups.push([slot]);
        features.push(costRow(spec, slot.start, slot.end, slot.batch, slot.seqLen));
      }
    }
    const y = base.predict(groups);
    for (let i = 0; i < y.length; i++) {
      if (!(Number.isFinite(y[i]!) && y[i]! > 0)) throw new RangeError(`cannot fit a cost fallback: the predictor's solo prediction of ${JSON.stringify(groups[i]![0])} is ${y[i]} ms`);
    }
    return CostFallback.#fromPoints(features, y);
  }

  /**
   * Fit to measured solo latencies of `spec` itself (`SoloMeasurement`s, e.g. on a private copy
   * of a simulated device: `deployment/serving.ts`).
   * @throws RangeError for fewer than 4 measurements, one with a latency that is not a finite
   *   number > 0 or a segment outside the model, or a degenerate fit.
   */
  static fromMeasurements(spec: ModelSpec, measured: readonly SoloMeasurement[]): CostFallback {
    if (measured.length < 4) throw new RangeError(`a cost fallback needs at least 4 solo measurements of ${spec.name}, got ${measured.length}`);
    const y = new Float64Array(measured.length);
    const features = measured.map((m, i) => {
      if (!(Number.isFinite(m.latencyMs) && m.latencyMs > 0)) throw new RangeError(`measurement ${i} of ${spec.name}: latencyMs ${m.latencyMs} must be a finite number > 0`);
      y[i] = m.latencyMs;
      return costRow(spec, m.start, m.end, m.batch, m.seqLen);
    });
    return CostFallback.#fromPoints(features, y);
  }

  static #fromPoints(features: readonly number[][], y: Float64Array): CostFallback {
    const c = nnlsRelative(features, y);
    if (c.every((v) => v === 0)) throw new RangeError('cannot fit a cost fallback: every coefficient is 0');
    const ratios: number[] = [];
    let ape = 0;
    for (let i = 0; i < y.length; i++) {
      const fit = dot(c, features[i]!);
      ratios.push(fit > 0 ? y[i]! / fit : Infinity);
      ape += fit > 0 ? Math.abs(fit - y[i]!) / y[i]! : 1;
    }
    ratios.sort((a, b) => a - b);
    const q = ratios[Math.min(ratios.length - 1, Math.floor(CALIBRATION_QUANTILE * ratios.length))]!;
    if (!Number.isFinite(q)) throw new RangeError('cannot fit a cost fallback: the fit predicts 0 ms for most calibration points');
    const scale = Math.max(1, q);
    return new CostFallback([c[0]! * scale, c[1]! * scale, c[2]! * scale, c[3]! * scale], scale, ape / y.length, y.length);
  }

  /** Estimated solo latency (ms, > 0) of operators `[start, end)` of `spec` at `batch` and `seqLen` (0: the model's default). @throws RangeError for a segment outside the model. */
  soloMs(spec: ModelSpec, start: number, end: number, batch: number, seqLen: number): number {
    return Math.max(1e-6, dot(this.coefficients, costRow(spec, start, end, batch, seqLen)));
  }
}

/** One measured solo run of a segment: operators `[start, end)` at `batch` and `seqLen` (0: default), `latencyMs` (ms). */
export interface SoloMeasurement {
  readonly start: number;
  readonly end: number;
  readonly batch: number;
  readonly seqLen: number;
  readonly latencyMs: number;
}

/**
 * The solo segments a cost fallback is calibrated on, for `spec`: the whole model and its
 * halves and quarters ([0, k) and [k, n) for k ≈ n/4, n/2, 3n/4), at batch 1, 2, 4, 8, 16 (or
 * the model's fixed batch), at each of `seqLens` for a model with a sequence axis (default: 0 —
 * its default length —, 16 and 64, those within its `maxSeqLen`). Also what `deployment/serving.ts` measures
 * of a new model on a private simulated device.
 */
export function calibrationSlots(spec: ModelSpec, seqLens: readonly number[] = CALIBRATION_SEQ_LENS.filter((l) => l <= (spec.maxSeqLen ?? Infinity))): GroupSlot[] {
  const n = spec.operators.length;
  const cuts = [...new Set([Math.round(n / 4), Math.round(n / 2), Math.round((3 * n) / 4)])].filter((k) => k > 0 && k < n);
  const segments: [number, number][] = [[0, n], ...cuts.flatMap((k): [number, number][] => [[0, k], [k, n]])];
  const fixed = fixedBatchOf(spec);
  const out: GroupSlot[] = [];
  const seqs = spec.dynamicAxes.seq === undefined ? [0] : seqLens;
  for (const seqLen of seqs) for (const batch of fixed !== undefined ? [fixed] : CALIBRATION_BATCHES) for (const [start, end] of segments) out.push({ model: spec.name, start, end, batch, seqLen });
  return out;
}

/** [1, kernels, GFLOP, MB] of a segment. */
function costRow(spec: ModelSpec, start: number, end: number, batch: number, seqLen: number): number[] {
  const c = segmentCosts(spec, start, end, batch, seqLen);
  return [1, c.kernels, c.gflop, c.mb];
}

function dot(c: ArrayLike<number>, x: ArrayLike<number>): number {
  let s = 0;
  for (let j = 0; j < x.length; j++) s += c[j]! * x[j]!;
  return s;
}

/**
 * Non-negative least squares of x·c ≈ y weighted by 1/y² (relative error): every subset of the
 * columns is solved by its normal equations (a 1e-9 relative ridge keeps collinear columns
 * solvable) and the feasible solution (all ≥ 0) of least loss kept. Columns ≤ 4, so ≤ 15 solves.
 */
export function nnlsRelative(x: readonly (readonly number[])[], y: ArrayLike<number>): number[] {
  const p = x[0]?.length ?? 0;
  let best: number[] = new Array<number>(p).fill(0);
  let bestLoss = Infinity;
  for (let mask = 1; mask < 1 << p; mask++) {
    const cols = [...Array(p).keys()].filter((j) => (mask >> j) & 1);
    const k = cols.length;
    const a = Array.from({ length: k }, () => new Array<number>(k + 1).fill(0));
    for (let i = 0; i < x.length; i++) {
      const w = 1 / (y[i]! * y[i]!);
      for (let r = 0; r < k; r++) {
        const xr = x[i]![cols[r]!]!;
        const row = a[r]!;
        for (let s = 0; s < k; s++) row[s] = row[s]! + w * xr * x[i]![cols[s]!]!;
        row[k] = row[k]! + w * xr * y[i]!;
      }
    }
    for (let r = 0; r < k; r++) a[r]![r] = a[r]![r]! + 1e-9 * (a[r]![r]! || 1);
    const sol = solve(a);
    if (sol === undefined || sol.some((v) => !(v >= 0))) continue;
    const c = new Array<number>(p).fill(0);
    cols.forEach((j, r) => (c[j] = sol[r]!));
    let loss = 0;
    for (let i = 0; i < x.length; i++) loss += ((dot(c, x[i]!) - y[i]!) / y[i]!) ** 2;
    if (loss < bestLoss) {
      bestLoss = loss;
      best = c;
    }
  }
  return best;
}

/** Gaussian elimination with partial pivoting of an augmented k × (k+1) matrix (modified); undefined when singular. */
function solve(a: number[][]): number[] | undefined {
  const k = a.length;
  for (let col = 0; col < k; col++) {
    let piv = col;
    for (let r = col + 1; r < k; r++) if (Math.abs(a[r]![col]!) > Math.abs(a[piv]![col]!)) piv = r;
    if (!(Math.abs(a[piv]![col]!) > 0)) return undefined;
    [a[col], a[piv]] = [a[piv]!, a[col]!];
    for (let r = 0; r < k; r++) {
      if (r === col) continue;
      const row = a[r]!;
      const f = row[col]! / a[col]![col]!;
      for (let s = col; s <= k; s++) row[s] = row[s]! - f * a[col]![s]!;
    }
  }
  return a.map((row, r) => row[k]! / row[r]!);
}

/**
 * A predictor that can admit models its base was not trained on (module docs). Until `admit` is
 * called it is its base: same models, same predictions.
 */
export class OpenPredictor implements Predictor {
  #base: Predictor;
  readonly #specs: Map<string, ModelSpec>;
  readonly #rebuild: ((specs: ReadonlyMap<string, ModelSpec>) => Predictor) | undefined;
  readonly #fallbackModels = new Map<string, FallbackModel>();
  readonly #admissions = new Map<string, Admission>();
  /** The transfer fit (on the base's models), made on first use. */
  #transfer: CostFallback | undefined;
  #models: readonly string[];

  constructor(base: Predictor, options: OpenPredictorOptions) {
    this.#base = base;
    this.#specs = new Map(options.specs);
    this.#rebuild = options.rebuild;
    this.#models = base.models;
  }

  /** The predictor that scores groups without a fallback model (the first base, or its `flop` rebuild). */
  get base(): Predictor {
    return this.#base;
  }
  get kind(): string {
    return this.#base.kind;
  }
  get deviceId(): string {
    return this.#base.deviceId;
  }
  /** The base's models plus every admitted one, sorted by name. */
  get models(): readonly string[] {
    return this.#models;
  }
  get maxSlots(): number {
    return this.#base.maxSlots;
  }
  get threadFeature(): boolean {
    return this.#base.threadFeature === true;
  }

  /** True when a model the base does not know is scored by the `flop` rebuild (no cost fallback, nothing to measure). */
  get rebuilds(): boolean {
    return this.#rebuild !== undefined;
  }

  /** The cost fallback that scores `model`, when it is one admitted with `how: 'cost-fallback'`. */
  costFallbackOf(model: string): CostFallback | undefined {
    return this.#fallbackModels.get(model)?.costs;
  }

  /** How `model` was admitted; undefined for a model never passed to `admit`. */
  admission(model: string): Admission | undefined {
    return this.#admissions.get(model);
  }

  /**
   * Score `spec` from now on (module docs): a model the base scores already is `trained` (a
   * spec under the same name must be the same variant: compared by operator count); else the
   * `flop` rebuild when given, else a cost fallback: fitted to `options.measured` when given,
   * else transferred from the base's models (fitted on first use). Idempotent per name.
   * @throws RangeError when a model of that name is scored with other operators, or no
   *   fallback can be fitted (`CostFallback.fit`); what `rebuild` throws.
   */
  admit(spec: ModelSpec, options: AdmitOptions = {}): Admission {
    const name = spec.name;
    const prior = this.#admissions.get(name);
    const known = this.#specs.get(name) ?? this.#fallbackModels.get(name)?.spec;
    if (known !== undefined && known.operators.length !== spec.operators.length) {
      throw new RangeError(`model '${name}' is scored with ${known.operators.length} operators, the loaded one has ${spec.operators.length}: another variant under the same name cannot be admitted`);
    }
    if (prior !== undefined) return prior;
    let admission: Admission;
    if (this.#base.models.includes(name)) {
      admission = { model: name, how: 'trained', note: '' };
    } else if (this.#rebuild !== undefined) {
      const specs = new Map(this.#specs);
      for (const [m, f] of this.#fallbackModels) specs.set(m, f.spec);
      specs.set(name, spec);
      const rebuilt = this.#rebuild(specs);
      if (!rebuilt.models.includes(name)) throw new RangeError(`the rebuilt flop-feature predictor does not score '${name}' (it scores ${rebuilt.models.join(', ')})`);
      this.#base = rebuilt;
      this.#specs.set(name, spec);
      admission = { model: name, how: 'flop-predictor', note: `predicted by the flop-feature predictor from the model's FLOPs, bytes and kernels (not trained on it)` };
    } else {
      const measured = options.measured;
      const costs = measured !== undefined ? CostFallback.fromMeasurements(spec, measured) : (this.#transfer ??= CostFallback.fit(this.#base, this.#specs));
      this.#fallbackModels.set(name, { spec, operators: spec.operators.length, costs });
      const mape = `${(costs.calibrationMape * 100).toFixed(1)}% MAPE`;
      const fitted =
        measured !== undefined
          ? `fitted to ${measured.length} solo runs of it measured on ${options.measuredOn ?? 'the device'}, ${mape} on them`
          : `transferred from the predictor's models, ${mape} on them; its error on this model is unknown`;
      admission = {
        model: name,
        how: 'cost-fallback',
        note: `predicted by the cost fallback (FLOPs, bytes and kernels ${fitted}), groups with it as if run after the others, until it is profiled (add it to the config and restart)`,
        calibrationMape: costs.calibrationMape,
      };
    }
    this.#admissions.set(name, admission);
    this.#models = [...new Set([...this.#base.models, ...this.#fallbackModels.keys()])].sort();
    return admission;
  }

  /**
   * See `Predictor.predict`. Groups without a fallback slot: the base's predictions. A group with
   * one: the base's prediction of its other slots (0 when none) + the fallback's solo estimate of
   * each fallback slot.
   * @throws RangeError as `Predictor.predict` (the base's messages for its slots).
   */
  predict(groups: readonly Group[], out?: Float64Array): Float64Array {
    const fallback = this.#fallbackModels;
    if (fallback.size === 0 || !groups.some((g) => g.some((s) => fallback.has(s.model)))) return this.#base.predict(groups, out);
    const res = out ?? new Float64Array(groups.length);
    const extra = new Float64Array(groups.length);
    const baseGroups: Group[] = [];
    const baseIndex: number[] = [];
    groups.forEach((group, gi) => {
      if (group.length < 1 || group.length > this.maxSlots) throw new RangeError(`group ${gi} has ${group.length} slots; a group has 1..${this.maxSlots} (the predictor's maxSlots)`);
      const rest: GroupSlot[] = [];
      group.forEach((slot, si) => {
        const f = fallback.get(slot.model);
        if (f === undefined) {
          rest.push(slot);
          return;
        }
        const { start, end, batch, seqLen } = slot;
        if (!(Number.isInteger(start) && Number.isInteger(end) && start >= 0 && start < end && end <= f.operators)) {
          throw new RangeError(`group ${gi} slot ${si} (${slot.model}): segment [${start}, ${end}) must satisfy 0 ≤ start < end ≤ ${f.operators} (integers)`);
        }
        if (!(Number.isInteger(batch) && batch >= 1)) throw new RangeError(`group ${gi} slot ${si} (${slot.model}): batch ${batch} must be an integer ≥ 1`);
        if (!(Number.isInteger(seqLen) && seqLen >= 0)) throw new RangeError(`group ${gi} slot ${si} (${slot.model}): seqLen ${seqLen} must be an integer ≥ 0`);
        extra[gi] = extra[gi]! + f.costs.soloMs(f.spec, start, end, batch, seqLen);
      });
      if (rest.length > 0) {
        baseGroups.push(rest);
        baseIndex.push(gi);
      }
    });
    res.fill(0, 0, groups.length);
    if (baseGroups.length > 0) {
      let b: Float64Array;
      try {
        b = this.#base.predict(baseGroups);
      } catch (err) {
        throw this.#renamed(err, baseGroups, baseIndex);
      }
      for (let i = 0; i < baseIndex.length; i++) res[baseIndex[i]!] = b[i]!;
    }
    for (let gi = 0; gi < groups.length; gi++) res[gi] = res[gi]! + extra[gi]!;
    return res;
  }

  /** The base's error for the sub-groups, with the caller's group index (found by scoring them one by one). */
  #renamed(err: unknown, baseGroups: readonly Group[], baseIndex: readonly number[]): unknown {
    if (!(err instanceof RangeError)) return err;
    for (let i = 0; i < baseGroups.length; i++) {
      try {
        this.#base.predict([baseGroups[i]!]);
      } catch (one) {
        if (one instanceof RangeError) return new RangeError(`group ${baseIndex[i]} without its fallback slots: ${one.message}`, { cause: one });
      }
    }
    return err;
  }
}
