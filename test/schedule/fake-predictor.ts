/**
 * A device-free Predictor for controller tests, with a formula simple enough to compute
 * decisions by hand:
 *
 *   cost(slot)   = msPerOp[model] × (end − start) × batch          (ms; seqLen ignored)
 *   latency(grp) = max cost + alpha × (Σ cost − max cost)          (alpha = 0.5 by default)
 *
 * i.e. the longest segment plus half of the others' work (overlap hides half). Monotone in
 * added work. `overrides` replace the formula for chosen groups (keyed by `groupKey`), to make
 * a non-monotone surface. Every call is recorded. Validates like the contract says (RangeError
 * naming the group and slot), so a controller emitting a bad slot fails loudly.
 */
import type { Group, Predictor } from '../../src/predict/predictor.ts';

/** Operators per model in the test zoo. */
export const OPERATORS: Readonly<Record<string, number>> = { a: 10, b: 10, c: 20, d: 8 };
/** ms per operator at batch 1: whole a = 10 ms, b = 20 ms, c = 10 ms, d = 12 ms. */
export const MS_PER_OP: Readonly<Record<string, number>> = { a: 1, b: 2, c: 0.5, d: 1.5 };

/** `model[start,end)xbatch` slots sorted, joined by `+`: e.g. `a[0,10)x1+b[0,3)x1`. */
export function groupKey(g: Group): string {
  return g
    .map((s) => `${s.model}[${s.start},${s.end})x${s.batch}`)
    .sort()
    .join('+');
}

export class FakePredictor implements Predictor {
  readonly kind = 'fake';
  readonly deviceId = 'test:fake';
  readonly models: readonly string[];
  readonly maxSlots: number;
  readonly alpha: number;
  readonly overrides: Map<string, number>;
  /** Each call's groups, as keys. */
  readonly calls: string[][] = [];

  constructor(opts: { alpha?: number; maxSlots?: number; overrides?: Record<string, number> } = {}) {
    this.alpha = opts.alpha ?? 0.5;
    this.maxSlots = opts.maxSlots ?? 8;
    this.overrides = new Map(Object.entries(opts.overrides ?? {}));
    this.models = Object.keys(MS_PER_OP).sort();
  }

  predict(groups: readonly Group[], out?: Float64Array): Float64Array {
    const res = out ?? new Float64Array(groups.length);
    this.calls.push(groups.map(groupKey));
    groups.forEach((g, i) => {
      if (g.length === 0 || g.length > this.maxSlots) throw new RangeError(`group ${i}: ${g.length} slots, must be 1..${this.maxSlots}`);
      let sum = 0;
      let max = 0;
      g.forEach((s, j) => {
        const per = MS_PER_OP[s.model];
        const n = OPERATORS[s.model];
        if (per === undefined || n === undefined) throw new RangeError(`group ${i} slot ${j}: unknown model '${s.model}'`);
        if (!(Number.isInteger(s.start) && Number.isInteger(s.end) && 0 <= s.start && s.start < s.end && s.end <= n)) {
          throw new RangeError(`group ${i} slot ${j}: [${s.start}, ${s.end}) outside 0 ≤ start < end ≤ ${n}`);
        }
        if (!(s.batch >= 1) || s.seqLen < 0) throw new RangeError(`group ${i} slot ${j}: batch ${s.batch}, seqLen ${s.seqLen}`);
        const c = per * (s.end - s.start) * s.batch;
        sum += c;
        max = Math.max(max, c);
      });
      res[i] = this.overrides.get(groupKey(g)) ?? max + this.alpha * (sum - max);
    });
    return res;
  }
}

/**
 * A crude offline predictor for resnet50 and bert on `sim:a100` (no profiling): 0.05 ms per
 * operator × √batch, the longest slot, × 1.1 for a group of several. Online refinement learns
 * the simulator from it (drift tests in virtual time).
 */
export function crudeSimPredictor(): Predictor {
  return {
    kind: 'crude',
    deviceId: 'sim:a100',
    models: ['bert', 'resnet50'],
    maxSlots: 8,
    predict(groups, out = new Float64Array(groups.length)) {
      groups.forEach((g, i) => {
        let longest = 0;
        for (const s of g) longest = Math.max(longest, (s.end - s.start) * 0.05 * Math.sqrt(s.batch));
        out[i] = longest * (g.length > 1 ? 1.1 : 1);
      });
      return out;
    },
  };
}
