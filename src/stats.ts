/** Small order statistics shared by measurements, benchmarks and (later) reports. */

/**
 * Median of a non-empty sample (mean of the two middle values for an even count).
 * @throws RangeError for an empty sample.
 */
export function median(xs: readonly number[]): number {
  if (xs.length === 0) throw new RangeError('median of an empty sample');
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}
