/**
 * Arithmetic on ModelSpec costs (see `spec.ts` for the data): evaluate a per-sample cost for a
 * query, sum costs, total a segment, check a segment range.
 */
import type { ModelSpec, PerSampleCost } from './spec.ts';

/** Evaluate a per-sample cost for a query of `batch` samples of length `seqLen`. */
export function evalCost(cost: PerSampleCost, batch: number, seqLen = 0): number {
  return batch * (cost.c0 + cost.c1 * seqLen + cost.c2 * seqLen * seqLen);
}

/** Sum of two per-sample costs. */
export function addCost(a: PerSampleCost, b: PerSampleCost): PerSampleCost {
  return { c0: a.c0 + b.c0, c1: a.c1 + b.c1, c2: a.c2 + b.c2 };
}

export const ZERO_COST: PerSampleCost = { c0: 0, c1: 0, c2: 0 };

/**
 * GFLOP of operators `[start, end)` for one query.
 * @throws RangeError when `start`/`end` are outside `0 ≤ start < end ≤ operators.length`.
 */
export function segmentGflops(spec: ModelSpec, start: number, end: number, batch: number, seqLen = spec.defaultSeqLen): number {
  checkSegment(spec, start, end);
  let total = 0;
  for (let k = start; k < end; k++) total += evalCost(spec.operators[k]!.gflops, batch, seqLen);
  return total;
}

/** @throws RangeError naming `start`/`end` and the valid range. */
export function checkSegment(spec: ModelSpec, start: number, end: number): void {
  const n = spec.operators.length;
  if (!Number.isInteger(start) || start < 0 || start >= n) {
    throw new RangeError(`segment start ${start} of ${spec.name} must be an integer in [0, ${n - 1}]`);
  }
  if (!Number.isInteger(end) || end <= start || end > n) {
    throw new RangeError(`segment end ${end} of ${spec.name} must be an integer in [${start + 1}, ${n}]`);
  }
}
