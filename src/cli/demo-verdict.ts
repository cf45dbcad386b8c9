/**
 * Whether the demo's comparison means anything: the measured ratio is always
 * reported, but it is headlined only when the machine was calm enough and the rounds agree.
 * Pure: the demo measures, this decides.
 */
import { roundSpread, type RoundSpread } from '../report/rounds.ts';

/**
 * 1-minute load average per core above which a round counts as too busy. The demo itself keeps
 * about one runnable thread per core while it serves (fcfs with every core: one thread per
 * core; abacus: one executor per service, one thread each), so ≈ 1 per core is the demo
 * alone; above 2 per core other processes demand every core on top of it, and the OS's time
 * slicing, not the policy, decides the latencies. One busy loop on a 2-core machine during
 * the demo stayed below it (1-minute load average up to 2.8 and 3.8 on 2 cores, docs/demo.md).
 */
export const BUSY_LOAD_PER_CORE = 2;

/**
 * Largest (max − min) ÷ median of the per-round ratios for a meaningful result: wider, and a
 * round-to-round change of the machine moved the ratio by more than a quarter of its value,
 * more than the difference between the policies the demo is about.
 */
export const MAX_RELATIVE_SPREAD = 0.25;

/**
 * Overlap gain counts as absent when one batch-1 query per service run as one group takes at
 * least this fraction of the same queries one after the other (median over the rounds; 1.00 =
 * no gain, 0.50 = perfect on 2 cores): there is then nothing for abacus to win.
 */
export const NO_OVERLAP_RATIO = 0.9;

/** Fewest rounds whose spread can be judged. */
export const MIN_ROUNDS = 2;

/** One round's measured conditions and result. */
export interface RoundOutcome {
  /** abacus goodput ÷ the baseline fcfs goodput in this round; null when the baseline had no goodput. */
  readonly ratio: number | null;
  /** 1-minute load average at the round's start and end. */
  readonly loadAverage1mStart: number;
  readonly loadAverage1mEnd: number;
  /** Group ÷ sequential latency measured just before the round (`device/overlap.ts`). */
  readonly overlapRatio: number;
}

/** The decision. */
export interface DemoVerdict {
  readonly meaningful: boolean;
  /** Why not, one sentence per failed criterion (empty when meaningful). */
  readonly reasons: readonly string[];
  /** Median and range of the per-round ratios (null when some round had no ratio). */
  readonly ratio: RoundSpread | null;
  /** Median group ÷ sequential over the rounds. */
  readonly overlapRatio: number;
  /** Largest 1-minute load average at any round's start or end. */
  readonly maxLoadAverage1m: number;
}

/**
 * Decide whether the rounds give a meaningful abacus ÷ fcfs ratio: at least `MIN_ROUNDS`
 * rounds, each with a ratio; no round's load average (start or end) above
 * `BUSY_LOAD_PER_CORE` × `cores`; spread ≤ `MAX_RELATIVE_SPREAD`; overlap gain present (median
 * overlap ratio < `NO_OVERLAP_RATIO`).
 * @throws RangeError when `rounds` is empty or `cores` < 1.
 */
export function demoVerdict(rounds: readonly RoundOutcome[], cores: number): DemoVerdict {
  if (rounds.length === 0) throw new RangeError('demoVerdict: no rounds');
  if (!Number.isInteger(cores) || cores < 1) throw new RangeError(`demoVerdict: cores must be an integer ≥ 1, got ${cores}`);
  const reasons: string[] = [];
  const ratios = rounds.map((r) => r.ratio);
  const missing = ratios.flatMap((r, i) => (r === null ? [i + 1] : []));
  const ratio = missing.length === 0 ? roundSpread(ratios as number[]) : null;
  const overlap = roundSpread(rounds.map((r) => r.overlapRatio));
  const loads = rounds.map((r) => Math.max(r.loadAverage1mStart, r.loadAverage1mEnd));
  const maxLoad = Math.max(...loads);
  const busy = loads.flatMap((l, i) => (l > BUSY_LOAD_PER_CORE * cores ? [i + 1] : []));
  if (busy.length > 0) {
    reasons.push(`the machine was too busy: 1-minute load average up to ${maxLoad.toFixed(2)} on ${cores} cores (round${busy.length === 1 ? '' : 's'} ${busy.join(', ')}; above ${BUSY_LOAD_PER_CORE} per core other processes take the cores this demo runs on)`);
  }
  if (missing.length > 0) reasons.push(`fcfs had no goodput in round${missing.length === 1 ? '' : 's'} ${missing.join(', ')}: no ratio`);
  if (rounds.length < MIN_ROUNDS) reasons.push(`only ${rounds.length} round: its spread cannot be judged (run --rounds ${MIN_ROUNDS} or more)`);
  else if (ratio !== null && ratio.relativeSpread > MAX_RELATIVE_SPREAD) {
    reasons.push(`the rounds disagree: abacus ÷ fcfs ranged ${ratio.min.toFixed(2)}–${ratio.max.toFixed(2)} (spread ${(ratio.relativeSpread * 100).toFixed(0)} % of the median, above ${MAX_RELATIVE_SPREAD * 100} %)`);
  }
  if (overlap.median >= NO_OVERLAP_RATIO) {
    reasons.push(`no overlap gain: one query per service as one group took ${overlap.median.toFixed(2)} × their time one after the other (median over rounds; ≥ ${NO_OVERLAP_RATIO} counts as none: the cores are taken)`);
  }
  return { meaningful: reasons.length === 0, reasons, ratio, overlapRatio: overlap.median, maxLoadAverage1m: maxLoad };
}
