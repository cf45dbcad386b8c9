/**
 * The Predictor contract (docs/design.md#predictor, docs/predictor.md): an
 * operator group → its latency in ms on one device. Interfaces only; the implementations
 * (MLP, linear baseline) live in `predict/mlp`, `predict/linear`, the feature encoding in
 * `predict/features.ts`, the file format in `predict/file.ts`.
 *
 * Callers: the query controller on its hot path (`schedule/`, one batched call per search
 * step, docs/scheduling-runtime.md), SJF / EDF baselines (predicted solo latency), the
 * runtime (records predicted next to measured latency), `abacus train` (metrics).
 * Deliberately left out: training (see `predict/train.ts`) and where the model came from.
 */

/**
 * One segment of an operator group as the predictor sees it: which model, which operators
 * `[start, end)`, how many samples and, for models with a sequence axis, how long.
 * Slot order inside a group does not matter: every predictor puts slots in one canonical
 * order (`predict/features.ts` `canonicalSlotOrder`), the same in training and serving.
 */
export interface GroupSlot {
  /** Model name as served and profiled (`resnet50`, or an imported model's name). */
  readonly model: string;
  /** First operator, inclusive (0-based). */
  readonly start: number;
  /** Last operator, exclusive (`end === operators.length` finishes the query). */
  readonly end: number;
  /** Batch size (samples), ≥ 1. */
  readonly batch: number;
  /** Sequence length for models with a sequence axis; 0 otherwise. */
  readonly seqLen: number;
  /**
   * Intra-op threads the segment runs with (`Segment.intraOpThreads`), an integer ≥ 1; absent:
   * the device's default. Only a predictor with `threadFeature` reads it (it then encodes an
   * absent count as 0, a value such a predictor never saw in training: serve it with a thread
   * rule, `schedule/threads.ts`); the others predict the same latency whatever it says.
   */
  readonly intraOpThreads?: number;
}

/** An operator group: 1..`maxSlots` slots. */
export type Group = readonly GroupSlot[];

export interface Predictor {
  /** `ridge` (linear baseline) or `mlp`. */
  readonly kind: string;
  /** Device the training data was measured on, e.g. `sim:a100`, `ort:cpu`. */
  readonly deviceId: string;
  /** Models it can score (sorted by name); the models it was trained on plus any admitted as unseen. */
  readonly models: readonly string[];
  /** Most slots in one group. */
  readonly maxSlots: number;
  /**
   * True when the predictor was trained on profiles with thread counts and its predictions
   * depend on `GroupSlot.intraOpThreads` (docs/threads.md); absent or false: they do not.
   */
  readonly threadFeature?: boolean;
  /**
   * Changes whenever the predictor may answer the same group differently than before (other
   * than through online refinement, which a memo follows through `SoloScale`): an `adapt` thread
   * rule's `ThreadedPredictor`, whose lone groups' counts follow measurements. Absent on a
   * predictor that is a pure function of the group; memos of its answers (`SoloMemo.sync`)
   * forget them when it moves.
   */
  readonly revision?: number | undefined;
  /**
   * Predicted latency (ms) of each group, `out[i]` for `groups[i]`. Allocation-free when `out`
   * (length ≥ groups.length) is given. Values are clamped to ≥ 0.
   * @throws RangeError when a group is empty, has more than `maxSlots` slots, names a model
   *   the predictor does not know, or has a slot outside `0 ≤ start < end ≤ operators`,
   *   batch < 1 or a negative seqLen; the message names the group index and the slot.
   */
  predict(groups: readonly Group[], out?: Float64Array): Float64Array;
}

/**
 * A predictor that corrects itself from measured group latencies while serving (docs/adaptive.md). It wraps an offline `base` predictor;
 * `predict` returns the base prediction corrected by what it learned from `observe`. The
 * implementation lives in `predict/refine.ts`.
 *
 * Ownership: the refiner owns its correction table and error window; its caller (the query
 * controller) feeds it one observation per executed group, on the same thread as `predict`.
 * Deliberately left out: persistence (a correction is learned under the serving conditions of
 * this process and is not trusted by a restart) and any clock (it counts groups, not time).
 */
export interface RefiningPredictor extends Predictor {
  /** The offline predictor whose predictions are corrected. */
  readonly base: Predictor;
  /**
   * Learn from one executed group: `basePredictedMs` is `base`'s prediction for `group` (ms, NOT
   * the refined one, so the correction does not learn from itself), `measuredMs` its measured
   * latency (ms). Observations with a non-finite or ≤ 0 value are ignored. Never throws.
   */
  observe(group: Group, basePredictedMs: number, measuredMs: number): void;
  /** What `predict` answers now for `group` when `base` predicts `baseMs` for it (ms), the guard included. */
  refineMs(group: Group, baseMs: number): number;
  /**
   * `refineMs` for a group of one slot of `model`, without building the group (the controllers'
   * solo memo keeps base predictions and asks this per hit; `schedule/heads.ts` `SoloScale`).
   */
  soloMs(model: string, baseMs: number): number;
  /** The inverse of `soloMs` in its second argument (up to rounding): the base prediction whose refined solo prediction is `ms`. */
  baseSoloMs(model: string, ms: number): number;
  /**
   * Mean absolute percentage error (a fraction) of the refined predictions, each taken just
   * before its own observation, over the last `mapeWindow` observed groups; 0 before the first.
   */
  readonly rollingMape: number;
  /** The same over `base`'s predictions (what the error would be without refinement); 0 before the first. */
  readonly rollingBaseMape: number;
  /** Observations accepted so far. */
  readonly observedGroups: number;
  /** MAPE (a fraction) of the refined predictions over the guard's short window of recent groups; 0 before the first. */
  readonly recentMape: number;
  /**
   * True while the recent error is too high (out of calibration): predictions of overlapped groups
   * (≥ 2 slots) are then inflated by `guardFactor`, one-slot predictions are not (docs/adaptive.md
   * "The guard").
   */
  readonly guardActive: boolean;
  /** The factor (≥ 1) the prediction of an overlapped group carries now for the guard; 1 while calibrated. */
  readonly guardFactor: number;
  /**
   * How much faster than refined a group runs at the `quantile` quantile of measured ÷ refined
   * over the guard's window: min(1, that quantile); 1 before enough groups. A drop rule that
   * multiplies a prediction by it drops only a query that even a run that fast would not finish
   * (`schedule/fallback.ts`, "Drops").
   */
  optimisticFactor(quantile: number): number;
  /** Times the refinement restarted after detecting a change of the device. */
  readonly restarts: number;
}

/**
 * One measured operator group, as the profiler records it and training reads it (a row of a
 * profile CSV; schema in `profile/dataset.ts`). Latencies in ms over `runs` timed runs.
 */
export interface ProfileRow {
  /** Index of the sample in the profiler's deterministic sample sequence (resume key). */
  readonly sample: number;
  /** Device id (`sim:a100`, `ort:cpu`). */
  readonly device: string;
  /** The group's segments, as sampled (the first is the urgent query that runs to its end). */
  readonly slots: readonly GroupSlot[];
  readonly medianMs: number;
  readonly meanMs: number;
  readonly stdMs: number;
  readonly runs: number;
}
