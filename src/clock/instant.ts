/**
 * Exact instants on a clock's float time line (ms, IEEE-754 doubles), for timers that must fire
 * at the first instant something holds — e.g. a query's rejection just after its latest start
 * (`schedule/heads.ts`, the runtime's wake timer).
 */

const bits = new Float64Array(1);
const asInt = new BigInt64Array(bits.buffer);

/**
 * The smallest double greater than `x`: the first instant `t` with `x < t`.
 * @throws RangeError for a non-finite `x`.
 */
export function nextInstantAfter(x: number): number {
  if (!Number.isFinite(x)) throw new RangeError(`nextInstantAfter: x must be finite, got ${x}`);
  if (x === 0) return Number.MIN_VALUE;
  bits[0] = x;
  asInt[0] = asInt[0]! + (x > 0 ? 1n : -1n);
  return bits[0];
}
