/**
 * The measured ÷ estimated correction of abacus without the group barrier (docs/scheduling-runtime.md
 * "Abacus without the group barrier", "Correction"), kept apart for the two kinds of launch whose
 * estimates err differently:
 * - `alone`: a segment launched with nothing running, estimated by its solo latency;
 * - `joining`: a segment launched beside running ones, estimated from the predicted group of it
 *   and their remainders (`memberFinishesMs`).
 * One factor for both let the many joining launches set the factor of the few alone ones: on
 * sim:a100, resnet50 + vgg16 at 2× their batch-1 latency and 400 queries/s, joining launches'
 * raw estimates ran 12 % over the measured latency while alone ones were right, so the shared
 * median (0.89) made every alone estimate 12 % short, and heads waited behind running segments
 * for a turn the prediction said they would still make, and were then dropped.
 *
 * A launch that another launch joins while it runs is not counted: its estimate could not know
 * the later co-runner (the joiner's decision predicted that slowdown for it).
 */

/** Launches a kind's median is taken over, and how many it needs before it applies. */
export const CORRECTION_WINDOW = 64;
export const CORRECTION_MIN = 16;
/** The correction stays within [0.5, 2]: a predictor off by more needs retraining, not a factor. */
export const CORRECTION_MIN_FACTOR = 0.5;
export const CORRECTION_MAX = 2;
/**
 * Drops judge a fast run: the 0.1 quantile of the window's measured ÷ estimated (at most 1). A
 * query dropped counts as a violation for sure, one launched may still make it, so only a query
 * that a run as fast as the fastest tenth of recent launches would not finish is dropped (the
 * calibration fallback drops by the same rule, `schedule/fallback.ts`).
 */
export const DROP_QUANTILE = 0.1;

/** The kind of a launch (file docs). */
export type LaunchKind = 'alone' | 'joining';

/** One kind's window of measured ÷ estimated ratios, its median `factor` and its `fast` quantile. */
export class CorrectionWindow {
  readonly #ratios = new Float64Array(CORRECTION_WINDOW);
  #count = 0;
  /** The median of the window (1 before `CORRECTION_MIN` ratios), within [0.5, 2]: every estimate of this kind is multiplied by it. */
  factor = 1;
  /** The `DROP_QUANTILE` of the window, ≤ 1 (1 before `CORRECTION_MIN`): drops judge a run this fast. */
  fast = 1;

  /** Add one launch's measured ÷ estimated latency ratio (ignored unless finite and positive). */
  add(ratio: number): void {
    if (!(ratio > 0) || !Number.isFinite(ratio)) return;
    this.#ratios[this.#count++ % CORRECTION_WINDOW] = ratio;
    if (this.#count < CORRECTION_MIN) return;
    const window = this.#ratios.slice(0, Math.min(this.#count, CORRECTION_WINDOW)).sort();
    this.factor = Math.min(CORRECTION_MAX, Math.max(CORRECTION_MIN_FACTOR, window[window.length >> 1]!));
    this.fast = Math.min(1, Math.max(CORRECTION_MIN_FACTOR, window[Math.floor(DROP_QUANTILE * (window.length - 1))]!));
  }
}
