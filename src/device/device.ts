/**
 * The Device contract (DESIGN.md "Pieces and contracts"): run an operator group — segments
 * `[start, end)` of queries of different services launched together — and report how long
 * each segment and the whole group took. Interfaces only; implementations live in
 * `device/ort` (onnxruntime-node, real hardware) and `device/sim` (modeled accelerators).
 *
 * Ownership: the device owns each query's intermediate tensors between segments, keyed by
 * `queryId`, from the first segment until the segment that reaches the last operator
 * (then the outputs are returned and the state is freed) or until `releaseQuery`.
 * Deliberately left out: queueing, QoS and scheduling (those are the runtime's).
 */
import type { ModelArtifact } from '../model/artifact.ts';
import type { AbacusError } from '../errors.ts';
import type { TensorMap } from '../tensor.ts';

/** One service to host: a name and its partitioned model. */
export interface DeviceService {
  readonly name: string;
  readonly model: ModelArtifact;
}

/**
 * Where a segment's input tensors come from.
 * - `tensors`: the query's own inputs (only for `start === 0`), shapes `[batch, …]`.
 * - `resume`: the state the device kept after this query's previous segment (`start > 0`).
 * - `synthetic`: seeded random tensors shaped like boundary `start` (profiling; any start).
 */
export type SegmentInput =
  | { readonly kind: 'tensors'; readonly tensors: TensorMap }
  | { readonly kind: 'resume' }
  | { readonly kind: 'synthetic'; readonly seed: number };

/** One segment of an operator group. */
export interface Segment {
  readonly service: string;
  /** Unique id of the query across the device (state key). */
  readonly queryId: string;
  /** First operator, inclusive (0-based). */
  readonly start: number;
  /** Last operator, exclusive; `end === operators.length` completes the query. */
  readonly end: number;
  /** Samples in the query (dim 0). */
  readonly batchSize: number;
  /** Sequence length for models with a sequence axis; 0 otherwise. */
  readonly seqLen: number;
  readonly input: SegmentInput;
}

/** Outcome of one segment. `latencyMs` is measured on the device side (no messaging). */
export type SegmentResult =
  | {
      readonly ok: true;
      readonly queryId: string;
      readonly service: string;
      readonly latencyMs: number;
      /** Present when the segment ended at the last operator: the model's outputs. */
      readonly outputs?: TensorMap;
    }
  | {
      readonly ok: false;
      readonly queryId: string;
      readonly service: string;
      readonly error: AbacusError;
    };

/** Outcome of an operator group: per segment, in the order given, and the whole group. */
export interface GroupResult {
  /** From launch until the last segment finished, in ms, as seen by the caller. */
  readonly groupLatencyMs: number;
  readonly segments: readonly SegmentResult[];
}

export interface Device {
  /** Stable id used in profiles and predictor files, e.g. `ort:cpu`, `sim:a100`. */
  readonly id: string;
  /**
   * Load the services (create sessions / reserve memory) and warm them up.
   * @throws DeviceUnavailableError when the requested hardware/EP is missing.
   * @throws InvalidModelError when a model cannot be loaded.
   */
  load(services: readonly DeviceService[]): Promise<void>;
  /**
   * Run one operator group; at most one segment per query. Never rejects for a failure of a
   * segment: that segment's result carries the error and the device stays usable.
   * @throws RangeError / TypeError for a malformed group (unknown service, bad range,
   *   duplicate query), before anything runs.
   */
  runGroup(group: readonly Segment[]): Promise<GroupResult>;
  /** Drop the kept state of a query that will not continue (rejected mid-way). Idempotent. */
  releaseQuery(service: string, queryId: string): Promise<void>;
  /** Stop executors and free everything. Idempotent. */
  close(): Promise<void>;
}
