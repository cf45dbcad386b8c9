/**
 * The Predictor contract (DESIGN.md "Pieces and contracts", "Predictor features"): an
 * operator group → its latency in ms on one device. Interfaces only; the implementations
 * (MLP, linear baseline) live in `predict/mlp`, `predict/linear`, the feature encoding in
 * `predict/features.ts`, the file format in `predict/file.ts`.
 *
 * Callers: the query controller on its hot path (`schedule/`, one batched call per search
 * step, DESIGN.md "multi-way search"), SJF / EDF baselines (predicted solo latency), the
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
   * Predicted latency (ms) of each group, `out[i]` for `groups[i]`. Allocation-free when `out`
   * (length ≥ groups.length) is given. Values are clamped to ≥ 0.
   * @throws RangeError when a group is empty, has more than `maxSlots` slots, names a model
   *   the predictor does not know, or has a slot outside `0 ≤ start < end ≤ operators`,
   *   batch < 1 or a negative seqLen; the message names the group index and the slot.
   */
  predict(groups: readonly Group[], out?: Float64Array): Float64Array;
}
