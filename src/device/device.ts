/**
 * The Device contract (docs/design.md#device): run an operator group — segments
 * `[start, end)` of queries of different services launched together — and report how long
 * each segment and the whole group took. Interfaces only; implementations live in
 * `device/ort` (onnxruntime-node, real hardware) and `device/sim` (modeled accelerators).
 *
 * Ownership: the device owns each query's intermediate tensors between segments, keyed by
 * `queryId`, from the first segment until the segment that reaches the last operator
 * (then the outputs are returned and the state is freed) or until `releaseQuery`. A query
 * belongs to the service of its first segment. Implementations may bound how many unfinished
 * queries they keep and how long they remember lost ones (they document the bound).
 * Deliberately left out: queueing, QoS and scheduling (those are the runtime's).
 */
import type { ModelArtifact } from '../model/artifact.ts';
import type { AbacusError } from '../errors.ts';
import type { TensorMap } from '../tensor.ts';

/** A loaded service went down or came back (`Device.watchHealth`). */
export interface ServiceHealthEvent {
  readonly service: string;
  readonly up: boolean;
  /** Why it is down (exit, failed restart, next try), for operators; '' when up. */
  readonly reason: string;
  /** Automatic restarts of the service since it was loaded. */
  readonly restarts: number;
}

/** One service to host: a name and its partitioned model. */
export interface DeviceService {
  readonly name: string;
  readonly model: ModelArtifact;
  /**
   * Optional: the shapes serving will run (batch size; sequence length, 0 for models without a
   * sequence axis). A device may warm up at them before `load` resolves: `device/ort` runs
   * every operator at each until its latency settles (`OrtDeviceOptions.warmupUntilSteady`).
   */
  readonly warmupShapes?: readonly { readonly batchSize: number; readonly seqLen: number }[];
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
  /**
   * Samples in the query (dim 0). A model with a fixed batch (its inputs declare a numeric
   * dim 0, `fixedBatchOf` in `model/boundary.ts`) takes exactly that batch (else BadRequestError).
   */
  readonly batchSize: number;
  /** Sequence length for models with a sequence axis; 0 otherwise. */
  readonly seqLen: number;
  readonly input: SegmentInput;
  /**
   * Intra-op threads the segment's operators may use, an integer in [1, the device's limit]
   * (cores as a decision, `threads.ts`, docs/threads.md). Absent: the device's default.
   * `device/ort`: a session per (operator, thread count), created on first use and kept
   * (`OrtDeviceOptions.maxIntraOpThreads` bounds the distinct counts); `device/sim` has no
   * thread model and ignores it (validated all the same). A non-integer, a count < 1 or one
   * above the limit is a BadRequestError naming `intraOpThreads`.
   */
  readonly intraOpThreads?: number;
}

/**
 * Outcome of one segment. `latencyMs` (ms) is measured on the device side around the
 * segment's operator runs only: no transport of inputs/outputs, no queueing, no input
 * decoding or synthetic generation. Compare `GroupResult.groupLatencyMs`.
 */
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
  /**
   * From launch until the last segment's result arrived, in ms, as seen by the caller: it
   * includes transport and queueing, so it exceeds the largest segment `latencyMs`. For
   * `device/ort` the transport is an IPC round trip to each executor process, ≈ 0.2 ms plus
   * ≈ 1.3 ms per MB of input and output tensors crossing (measured, `ort-device.ts`); for a
   * simulated device it is whatever the model charges. 0 for an empty group.
   */
  readonly groupLatencyMs: number;
  readonly segments: readonly SegmentResult[];
}

/**
 * A device that hosts several services and runs operator groups of their queries
 *. Lifecycle: `load` (any number of times, adding
 * services) → `runGroup` / `releaseQuery` (/ `unload` of a service) → `close`.
 *
 * Scheduling within a group: segments of different services run concurrently (that overlap
 * is what the runtime schedules for); two segments of the SAME service in one group run one
 * after the other, in the order given (each `latencyMs` covers its own run only,
 * `groupLatencyMs` covers both).
 *
 * Concurrency: concurrent calls are allowed — `runGroup` may be called again before an
 * earlier group resolved, and `load` may run alongside `runGroup` and other `load`s. How
 * concurrent groups share the hardware is the implementation's to document (a simulator may
 * run them one after the other). `device/ort`: segments of one service from concurrent groups
 * queue first come, first served in that service's executor; segments of different services
 * overlap. In every case one query has at most one segment in flight at a time (a second one
 * is a BadRequestError, before anything runs).
 *
 * Failures are results, not exceptions: `runGroup` rejects only for a malformed group (before
 * anything runs) or a closed device; every dispatched segment gets exactly one result.
 */
export interface Device {
  /** Stable id used in profiles and predictor files, e.g. `ort:cpu`, `sim:a100`. */
  readonly id: string;
  /**
   * Load the services (create sessions / reserve memory) and warm them up. May be called
   * again to add services.
   * @throws RangeError for a service name listed twice, already loaded, or being loaded by a
   *   concurrent `load`.
   * @throws DeviceUnavailableError when the requested hardware/EP is missing, or the device
   *   is (being) closed.
   * @throws InvalidModelError when a model cannot be loaded.
   */
  load(services: readonly DeviceService[]): Promise<void>;
  /**
   * Run one operator group; at most one segment per query. Never rejects for a failure of a
   * segment: that segment's result carries the error and the device stays usable. See the
   * interface docs for concurrent calls and for segments of the same service.
   * @throws RangeError / TypeError for a malformed group (unknown service, bad range,
   *   duplicate query), BadRequestError for inputs that do not fit, before anything runs;
   *   DeviceUnavailableError after `close()`.
   */
  runGroup(group: readonly Segment[]): Promise<GroupResult>;
  /**
   * Drop the kept state of a query that will not continue (rejected mid-way). Idempotent: a
   * query the device does not know (never started, finished, already released) is a no-op, as
   * is any call after `close()`. A release while the query's segment runs takes effect when
   * it finishes (its state is not kept).
   * @throws RangeError for a service that is not loaded, or when `queryId` belongs to another
   *   service (its state is kept, lost or running there); the message names the owning
   *   service and nothing is released.
   */
  releaseQuery(service: string, queryId: string): Promise<void>;
  /**
   * Unload one service (Triton's explicit model control, `abacus serve --model-control
   * explicit`): stop its executor and free what it holds; the state its unfinished queries kept
   * is lost (a later `resume` of one is a `device_failure` result). The caller stops sending its
   * segments first; a segment still running gets an error result. The name may be loaded again.
   * Optional so that test doubles need not implement it; `device/ort` and `device/sim` do.
   * @throws RangeError for a service that is not loaded; DeviceUnavailableError after `close()`.
   */
  unload?(service: string): Promise<void>;
  /**
   * Optional: the resident memory, bytes, of the process hosting each loaded service (a
   * service's executor in `device/ort`), as last measured; services with no live process are
   * absent. Devices with no per-service process (`device/sim`) leave it out. For gauges
   * (`abacus_executor_rss_bytes`), not for decisions.
   */
  residentBytes?(): ReadonlyMap<string, number>;
  /**
   * Optional: be told when a loaded service stops being able to run segments and when it can
   * again (`device/ort`: its executor process died and restarts, or came back). Events of one
   * service alternate from `up: false`; a `down` may repeat with a new reason (a failed restart).
   * `close` and `unload` send none. Devices with nothing that can go down (`device/sim`) leave it
   * out. Listeners are called synchronously, before the segments a crash failed see their
   * results. Returns a function that removes the listener.
   */
  watchHealth?(listener: (event: ServiceHealthEvent) => void): () => void;
  /**
   * The pids of the processes that run this device's segments besides the caller's (executors),
   * live now; devices that run none (`device/sim`) leave it out. What runs there is ours, not a
   * neighbour's (`device/neighbours.ts`).
   */
  processIds?(): readonly number[];
  /**
   * Stop executors and free everything, including what a `load` in progress was starting
   * (that `load` rejects with DeviceUnavailableError). Segments still running get
   * `device_unavailable` error results. Idempotent.
   */
  close(): Promise<void>;
}
