/**
 * A measurement repeated in rounds (the demo's interleaved policy runs, docs/demo.md): its
 * median and spread. Pure; no clock.
 */
import { median } from '../stats.ts';

/** Median and range of one value measured once per round. */
export interface RoundSpread {
  /** Median over the rounds (mean of the two middle values for an even count). */
  readonly median: number;
  readonly min: number;
  readonly max: number;
  /** (max − min) ÷ median: 0 when every round agrees; a fraction, not %. Infinity when the median is 0 and the range is not. */
  readonly relativeSpread: number;
  readonly rounds: number;
}

/**
 * Median and spread of `values` (one per round, any order).
 * @throws RangeError when `values` is empty or holds a non-finite number (naming its index).
 */
export function roundSpread(values: readonly number[]): RoundSpread {
  if (values.length === 0) throw new RangeError('roundSpread: no rounds');
  const bad = values.findIndex((x) => !Number.isFinite(x));
  if (bad >= 0) throw new RangeError(`roundSpread: round ${bad} is ${values[bad]}, expected a finite number`);
  const m = median(values);
  const min = Math.min(...values);
  const max = Math.max(...values);
  const range = max - min;
  return { median: m, min, max, relativeSpread: range === 0 ? 0 : m === 0 ? Infinity : range / Math.abs(m), rounds: values.length };
}
