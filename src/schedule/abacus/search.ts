/**
 * The multi-way search of the abacus controllers (SC'21 §5.3, generalized to `ways` points per
 * round and to batch sizes, docs/scheduling-runtime.md): the largest point of an integer interval
 * whose group's prediction fits its budget, one batched predictor call per round.
 */
import type { Group, Predictor } from '../../predict/predictor.ts';
import type { StatsCounter } from '../heads.ts';

/**
 * One round's points of the open integer interval (lo, hi): every integer of it when it holds
 * ≤ `ways`, else `lo + round(i·(hi − lo)/(ways + 1))`, i = 1..ways.
 */
export function roundPoints(lo: number, hi: number, ways: number, points: number[]): number[] {
  points.length = 0;
  if (hi - lo - 1 <= ways) {
    for (let x = lo + 1; x < hi; x++) points.push(x);
  } else {
    const step = (hi - lo) / (ways + 1);
    for (let i = 1; i <= ways; i++) points.push(lo + Math.round(i * step));
  }
  return points;
}

/** Where a multi-way search stands: `lo` fits (or is the sentinel below the range), `hi` does not. */
export interface Bracket {
  lo: number;
  /** Prediction at `lo` (NaN for the sentinel). */
  loMs: number;
  /** Budget at `lo` − `loMs`, ms; +Infinity for the sentinel (nothing fits yet). */
  leftMs: number;
  hi: number;
  /** Prediction at `hi` when it was evaluated, else NaN. */
  hiMs: number;
}

/** A round evaluated before the search started (q0's first batch-size round rides with step 4's call). */
export interface FirstRound {
  readonly points: readonly number[];
  readonly out: Float64Array;
  /** Index in `out` of the first point's prediction. */
  readonly offset: number;
}

/**
 * Multi-way search for the largest fitting point of the open interval (b.lo, b.hi), fit being
 * monotone (points below a fitting one fit): each round predicts `groupAt(x)` for the round's
 * points (`roundPoints`) in ONE call; the largest x with prediction ≤ `budgetAt(x)` becomes `lo`,
 * the next evaluated point above it `hi` (none fits: hi = the first point). Runs while the
 * interval holds an integer and b.leftMs ≥ `slackMs`. Mutates and returns `b`.
 */
export function searchLargest(
  predictor: Predictor,
  stats: StatsCounter,
  ways: number,
  slackMs: number,
  b: Bracket,
  groupAt: (x: number) => Group,
  budgetAt: (x: number) => number,
  first?: FirstRound,
): Bracket {
  let pre = first;
  const scratch: number[] = [];
  while (b.hi - b.lo > 1 && b.leftMs >= slackMs) {
    let points: readonly number[];
    let out: Float64Array;
    let offset = 0;
    if (pre !== undefined) {
      ({ points, out, offset } = pre);
      pre = undefined;
    } else {
      points = roundPoints(b.lo, b.hi, ways, scratch);
      const groups: Group[] = points.map(groupAt);
      out = predictor.predict(groups);
      stats.predictorCalls++;
      stats.groupsScored += groups.length;
      stats.searchRounds++;
    }
    let f = -1;
    let fBudgetMs = 0;
    for (let i = points.length - 1; i >= 0; i--) {
      const budgetMs = budgetAt(points[i]!);
      if (out[offset + i]! <= budgetMs) {
        f = i;
        fBudgetMs = budgetMs;
        break;
      }
    }
    if (f >= 0) {
      b.lo = points[f]!;
      b.loMs = out[offset + f]!;
      b.leftMs = fBudgetMs - b.loMs;
    }
    if (f + 1 < points.length) {
      b.hi = points[f + 1]!;
      b.hiMs = out[offset + f + 1]!;
    }
  }
  return b;
}

