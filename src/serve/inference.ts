/**
 * The serving contract (docs/design.md#serve, docs/serving.md): what the
 * protocol front ends (KServe v2 over HTTP in `serve/http/`, `inference.GRPCInferenceService`
 * over gRPC in `serve/grpc/`) ask of the inference backend. Interfaces only; the backend
 * (`serve/backend.ts`) owns validation against the served models, the runtime, and the mapping
 * of runtime outcomes to `ServeError` codes. Protocol layers own parsing their wire format into
 * `InferRequest`, encoding `InferResponse`, and mapping `ServeError.code` to a status
 * (HTTP in `serve/http/`, gRPC in `serve/grpc/`; the table is in the README).
 *
 * Spec: Open Inference Protocol / KServe v2
 * https://github.com/kserve/open-inference-protocol/blob/main/specification/protocol/inference_rest.md
 * and `inference_grpc.md`; binary tensor data extension:
 * https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_binary_data.md
 *
 * Triton extensions served: model configuration and statistics (read-only views of the served
 * models). Deliberately left out: sequence batching, model repository control, shared memory.
 */
import type { TensorMap } from '../tensor.ts';

/** Tensor data types of the v2 protocol ("Tensor Data Types" table of the spec). */
export type V2Datatype = 'BOOL' | 'UINT8' | 'UINT16' | 'UINT32' | 'UINT64' | 'INT8' | 'INT16' | 'INT32' | 'INT64' | 'FP16' | 'FP32' | 'FP64' | 'BYTES';

/** Name, datatype and shape of a model input or output; `-1` marks a dynamic axis. */
export interface TensorMetadata {
  readonly name: string;
  readonly datatype: V2Datatype;
  readonly shape: readonly number[];
  /**
   * An input's valid values (`TensorSpec.domain`): `{ values: [...] }` or `{ range: [lo, hi] }`;
   * absent when any value of its type is accepted. An extension of the v2 metadata (HTTP JSON).
   */
  readonly parameters?: Readonly<Record<string, unknown>>;
}

/** `GET /v2` / `ServerMetadata`. */
export interface ServerMetadata {
  readonly name: string;
  readonly version: string;
  /** Protocol extensions supported, e.g. `binary_tensor_data`. */
  readonly extensions: readonly string[];
}

/** `GET /v2/models/{name}` / `ModelMetadata`. */
export interface ModelMetadata {
  readonly name: string;
  /** Served versions, ascending (`"1"` for a model served without versions; docs/serving.md "Model versions"). */
  readonly versions: readonly string[];
  /** e.g. `onnxruntime_onnx` (ort) or `abacus_sim` (simulated device). */
  readonly platform: string;
  readonly inputs: readonly TensorMetadata[];
  readonly outputs: readonly TensorMetadata[];
  /**
   * The model's state now and why (`RepositoryIndexEntry`); additions of this server to the
   * v2 metadata (HTTP only: the gRPC `ModelMetadataResponse` has no such fields).
   */
  readonly state?: ModelState;
  readonly reason?: string;
}

/**
 * A model's state, with the names of Triton's repository index
 * (https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_model_repository.md):
 * `LOADING` (being loaded on the device and warmed up), `READY` (serving), `UNLOADING` (being
 * unloaded: running requests finish, new ones are refused), `UNAVAILABLE` (not serving; the
 * reason says why: it failed to load or warm up, or it was unloaded).
 */
export type ModelState = 'LOADING' | 'READY' | 'UNLOADING' | 'UNAVAILABLE';

/** One entry of the repository index (`POST /v2/repository/index`, gRPC `RepositoryIndex`). */
export interface RepositoryIndexEntry {
  readonly name: string;
  readonly version: string;
  readonly state: ModelState;
  /**
   * Why it is not READY. When READY: empty, or a note on how it is served — a model loaded at
   * runtime that the predictor was not trained on says which fallback predicts its latency
   * (docs/health.md "Which QoS guarantee holds for a model loaded at runtime").
   */
  readonly reason: string;
}

/**
 * Triton model configuration data types (`DataType` of Triton's `model_config.proto`): the v2
 * datatype with `TYPE_` in front, except BYTES, which is `TYPE_STRING`.
 */
export type ConfigDataType = 'TYPE_BOOL' | 'TYPE_UINT8' | 'TYPE_UINT16' | 'TYPE_UINT32' | 'TYPE_UINT64' | 'TYPE_INT8' | 'TYPE_INT16' | 'TYPE_INT32' | 'TYPE_INT64' | 'TYPE_FP16' | 'TYPE_FP32' | 'TYPE_FP64' | 'TYPE_STRING';

/** `ModelInput` / `ModelOutput` of a model configuration. */
export interface ModelConfigTensor {
  readonly name: string;
  readonly data_type: ConfigDataType;
  /** Without the batch dim when `max_batch_size` > 0; `-1` marks a dynamic axis. */
  readonly dims: readonly number[];
}

/** `ModelDynamicBatching`, present only for a model the service fuses into dynamic batches. */
export interface ModelConfigDynamicBatching {
  /** Batch sizes launched as soon as one can be formed, ascending; empty: none. */
  readonly preferred_batch_size: readonly number[];
  /** How long the batcher may hold the oldest request for a larger batch, µs. */
  readonly max_queue_delay_microseconds: number;
}

/**
 * `GET /v2/models/{m}/config` / gRPC `ModelConfig`: the subset of Triton's `ModelConfig` this
 * server fills (field names of `model_config.proto`). Spec:
 * https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_model_configuration.md
 */
export interface ModelConfig {
  readonly name: string;
  /** As `ModelMetadata.platform`. */
  readonly platform: string;
  /**
   * Largest batch (dim 0) a request may carry; 0 when the model has a fixed batch or no batch
   * axis (then `dims` are the full shapes).
   */
  readonly max_batch_size: number;
  readonly input: readonly ModelConfigTensor[];
  readonly output: readonly ModelConfigTensor[];
  readonly dynamic_batching?: ModelConfigDynamicBatching;
}

/** `StatisticDuration`: how many times something happened and its cumulative duration, ns. */
export interface StatisticDuration {
  readonly count: number;
  readonly ns: number;
}

/** `InferStatistics` (Triton). Which members are measured: `stats.ts`. */
export interface InferStatistics {
  readonly success: StatisticDuration;
  readonly fail: StatisticDuration;
  readonly queue: StatisticDuration;
  readonly compute_input: StatisticDuration;
  readonly compute_infer: StatisticDuration;
  readonly compute_output: StatisticDuration;
  readonly cache_hit: StatisticDuration;
  readonly cache_miss: StatisticDuration;
}

/** `InferBatchStatistics`: executions of one batch size. */
export interface InferBatchStatistics {
  readonly batch_size: number;
  readonly compute_input: StatisticDuration;
  readonly compute_infer: StatisticDuration;
  readonly compute_output: StatisticDuration;
}

/**
 * `ModelStatistics` of Triton's statistics extension, one per model and version. Spec:
 * https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_statistics.md
 */
export interface ModelStatistics {
  readonly name: string;
  readonly version: string;
  /** Last successful inference, ms since the epoch; 0: none yet. */
  readonly last_inference: number;
  /** Samples of successful requests (a request of batch 4 counts 4). */
  readonly inference_count: number;
  /** Successful model executions (a fused dynamic batch counts once). */
  readonly execution_count: number;
  readonly inference_stats: InferStatistics;
  /** By ascending batch size. */
  readonly batch_stats: readonly InferBatchStatistics[];
}

/**
 * The data of one request input as the wire carried it, before validation against the model.
 * - `json`: the JSON `data` member exactly as parsed (flat or nested arrays; for BYTES,
 *   strings). Integers beyond 2^53 arrive here only if the HTTP layer parsed them losslessly
 *   (as `bigint`); the backend rejects an unsafe `number` for INT64/UINT64 with a bad_request.
 * - `raw`: little-endian row-major bytes (binary tensor data extension; gRPC
 *   `raw_input_contents`); for BYTES, each element is a 4-byte little-endian length then bytes.
 * - `typed`: gRPC `InferTensorContents` of the matching field (`fp32_contents`, …), already
 *   flat; int64 values as `bigint` or decimal strings (proto-loader `longs: String`).
 */
export type InferInputData =
  | { readonly kind: 'json'; readonly values: unknown }
  | { readonly kind: 'raw'; readonly bytes: Uint8Array }
  | { readonly kind: 'typed'; readonly values: readonly unknown[] };

/** One input of a request. */
export interface InferInput {
  readonly name: string;
  /** As the client wrote it; unknown names are a bad_request naming the input. */
  readonly datatype: string;
  /** As the client wrote it; checked against the model and the element count. */
  readonly shape: readonly number[];
  readonly data: InferInputData;
}

/** A request output; `binaryData` asks the HTTP layer for the binary extension. */
export interface InferRequestedOutput {
  readonly name: string;
  readonly binaryData?: boolean;
  /**
   * `parameters.classification` as the wire carried it (classification extension,
   * `classification.ts`): the number of top classes to return instead of the raw output.
   * Checked by the backend (a positive integer; a numeric output).
   */
  readonly classification?: unknown;
}

/**
 * One inference request, protocol-neutral.
 *
 * Ownership: raw input bytes (`InferInputData` kind `raw`) may be views of the transport's
 * buffers, and tensors decoded from them views too (`serve/tensors.ts`), valid until `infer`
 * settles: the HTTP front end then reuses a large body's memory for the next request
 * (`http/body.ts`). A backend must not keep a reference to request data after that.
 */
export interface InferRequest {
  readonly modelName: string;
  /** A served version of the model; absent or empty: its latest READY version. Any other is model_not_found. */
  readonly modelVersion?: string;
  /** Echoed in the response. */
  readonly id?: string;
  readonly inputs: readonly InferInput[];
  /** Absent: every output. Unknown names are a bad_request. */
  readonly outputs?: readonly InferRequestedOutput[];
  /**
   * Request parameters. Recognised: `qos_ms` (number > 0: this query's QoS target, ms; above
   * the service's configured maximum is a bad_request), `seq_len`; Triton's sequence
   * parameters (`sequence_id` other than 0 or empty, `sequence_start` or `sequence_end` true)
   * are a bad_request (no sequence batcher). Others are ignored.
   */
  readonly parameters?: Readonly<Record<string, unknown>>;
  /** Server-assigned id for logs and metrics (not the client's `id`). */
  readonly requestId: string;
  /** Aborted when the client disconnected: a query that has not started is withdrawn. */
  readonly signal?: AbortSignal;
  /**
   * Its admission (`InferenceBackend.admit`): its QoS target counts from `receivedMs`, so the
   * time spent reading and decoding it is part of its latency. Absent: it arrived when `infer`
   * was called.
   */
  readonly admission?: AdmissionTicket;
}

/**
 * A request admitted by `InferenceBackend.admit`, from its arrival until it is queued: while it is
 * read and decoded it counts as work ahead of later arrivals.
 */
export interface AdmissionTicket {
  /** Arrival on the backend's clock, ms. */
  readonly receivedMs: number;
  /**
   * It no longer waits in the front end (queued, refused, or answered). Idempotent: the backend
   * calls it when it queues the request, and the front end when the request is answered, so a
   * request that never reaches `infer` (a body refused while read) is released too.
   */
  readonly settle: () => void;
}

/** One inference result, protocol-neutral. */
export interface InferResponse {
  readonly modelName: string;
  readonly modelVersion: string;
  readonly id?: string;
  /** The selected outputs, in the model's output order, shapes `[batch, …]`. */
  readonly outputs: TensorMap;
  /** Output datatypes by name (v2 names). */
  readonly outputDatatypes: Readonly<Record<string, V2Datatype>>;
  /**
   * `queue_ms` (arrival until first operator group launched), `compute_ms` (sum of measured
   * group latencies it ran in), `operator_groups` (count), `executed_batch_size` (samples of the
   * batch it ran in: its own batch size alone, the total of a dynamic batch it was fused into).
   */
  readonly parameters: { readonly queue_ms: number; readonly compute_ms: number; readonly operator_groups: number; readonly executed_batch_size: number };
}

/**
 * Stable codes of serving errors (STYLE.md §5). HTTP/gRPC mapping (README "Status codes"):
 * bad_request 400 / INVALID_ARGUMENT; model_not_found 404 / NOT_FOUND; qos_violation 504 /
 * DEADLINE_EXCEEDED (no node can meet the deadline any more: not to be retried); overloaded
 * (with `Retry-After`), not_ready, device_failure 503 / UNAVAILABLE (retryable, the device is
 * still usable); forbidden 403 / PERMISSION_DENIED (model load/unload while model control is
 * off); internal 500 / INTERNAL (a bug; the message is generic, the log has the detail).
 */
export type ServeErrorCode = 'bad_request' | 'model_not_found' | 'qos_violation' | 'overloaded' | 'not_ready' | 'device_failure' | 'forbidden' | 'internal';

/**
 * Header (HTTP, `abacus-error-code: qos_violation`) and trailing-metadata key (gRPC) by which a
 * front end names the `ServeErrorCode` of a failed request, so clients can tell the causes that
 * share one status (503 / UNAVAILABLE) apart without parsing messages. Optional for front ends;
 * the clients in `serve/client/` read it when present.
 */
export const SERVE_ERROR_CODE_KEY = 'abacus-error-code';

/**
 * Longest request id, characters: an inference request's `id` (HTTP body, gRPC message) and the
 * HTTP `x-request-id` header, which are echoed in the response and written to every log line
 * of the request. Longer is a 400 naming the field rather than a truncation, because clients
 * (Triton's and KServe's) match an answer to its request by comparing the echoed id with the
 * one they sent, which a cut id would silently fail. 256 fits a UUID, a W3C trace id, or an
 * id of several of them joined.
 */
export const MAX_REQUEST_ID_LENGTH = 256;

/** An error for one request; `message` names the model, input or field. */
export class ServeError extends Error {
  readonly code: ServeErrorCode;
  /**
   * The request's own `id` (the v2 request field), which the HTTP front end echoes in the error
   * body; undefined when the request gave none or failed before its `id` was read.
   */
  readonly id: string | undefined;
  /**
   * An `overloaded` shed only: about how long until the queue it was shed from has a query
   * fewer, ms (the admission gate's device time per query); the HTTP front end holds the 503
   * of a client that resends at once by it (`http/shed-pacing.ts`). Undefined otherwise.
   */
  readonly retryInMs: number | undefined;
  constructor(code: ServeErrorCode, message: string, options?: { cause?: unknown; id?: string; retryInMs?: number }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.code = code;
    this.id = options?.id;
    this.retryInMs = options?.retryInMs;
    this.name = 'ServeError';
  }

  /** The same error (code, message, cause, `retryInMs`) carrying the request's `id`. */
  withId(id: string): ServeError {
    return new ServeError(this.code, this.message, { ...(this.cause === undefined ? {} : { cause: this.cause }), id, ...(this.retryInMs === undefined ? {} : { retryInMs: this.retryInMs }) });
  }
}

/**
 * What the protocol front ends call. Every method is safe to call at any time, including
 * before ready and during shutdown.
 */
export interface InferenceBackend {
  serverMetadata(): ServerMetadata;
  /** The process is up (true until closed). */
  isLive(): boolean;
  /**
   * Start-up is over (every model that can load is loaded and warmed up; the others are
   * UNAVAILABLE), at least one model is READY, and the server is not shutting down.
   */
  isReady(): boolean;
  /** @throws ServeError model_not_found for an unknown model or version. */
  modelReady(name: string, version?: string): boolean;
  /** @throws ServeError model_not_found for an unknown model or version. */
  modelMetadata(name: string, version?: string): ModelMetadata;
  /** Names of the models that are READY now, in configuration then load order (KServe's `GET /v2/models`). */
  modelList(): string[];
  /**
   * Every model this server knows (configured, or loaded at runtime) with its state and reason
   * (Triton's repository index); `readyOnly`: the READY ones only.
   */
  repositoryIndex(readyOnly?: boolean): RepositoryIndexEntry[];
  /**
   * Load (or re-load) a model (Triton's `RepositoryModelLoad`). A model of the config is loaded
   * with its config settings; a new one takes them from `parameters.config` (a JSON string: one
   * config-file service entry). Resolves once it is READY.
   * @throws ServeError forbidden when model control is off; bad_request naming the field for a
   *   bad name or parameters (a path, `file:` contents, an oversized or invalid config);
   *   device_failure when the model fails to load or warm up (it is then UNAVAILABLE with the
   *   reason); not_ready during start-up or shutdown.
   */
  loadModel(name: string, parameters: Readonly<Record<string, unknown>> | undefined): Promise<void>;
  /**
   * Unload a model (Triton's `RepositoryModelUnload`): new requests are refused at once, the
   * ones waiting or running finish, then the device frees it. Resolves once it is UNAVAILABLE.
   * @throws ServeError forbidden when model control is off; bad_request for a bad name or
   *   parameters; model_not_found for a model this server does not know; not_ready during
   *   start-up or shutdown.
   */
  unloadModel(name: string, parameters: Readonly<Record<string, unknown>> | undefined): Promise<void>;
  /** @throws ServeError model_not_found for an unknown model or version. */
  modelConfig(name: string, version?: string): ModelConfig;
  /**
   * Statistics of one model (`name` given) or of every model (`name` absent or empty), of one
   * version (`version` given) or of all.
   * @throws ServeError model_not_found for an unknown model or version.
   */
  modelStatistics(name?: string, version?: string): ModelStatistics[];
  /**
   * Validate, queue and run one request. Resolves with the outputs, or rejects with a
   * `ServeError` (never anything else): bad_request before anything is queued, not_ready,
   * overloaded, qos_violation, device_failure. Exactly one settlement per call.
   */
  infer(request: InferRequest): Promise<InferResponse>;
  /**
   * Admission as soon as the model is known, before the request's body is read or decoded
   * (`admission.ts`): a request that cannot finish within the model's QoS target behind the
   * queries already waiting is shed here, at the cost of no decoding.
   * @param arrival the ticket `shedUnread` (or an earlier `admit`) gave the request when it
   *   arrived, before its model was known: the request is judged with the time it spent since
   *   (reading it); that ticket is settled and one with the same arrival returned
   * @param unread what of it was not read yet when shed, for the message and the log: `body` (HTTP,
   *   the default without `arrival`), `message` (gRPC, from the message's first bytes) or
   *   `tensors` (gRPC, the message read; the default with `arrival`)
   * @returns its ticket, to pass as `InferRequest.admission` and to settle once it is answered;
   *   undefined before start or for an unknown model (`infer` answers those; `arrival` is the
   *   front end's to settle then).
   * @throws ServeError overloaded when the request is shed.
   */
  admit?(modelName: string, arrival?: AdmissionTicket, unread?: 'body' | 'message' | 'tensors'): AdmissionTicket | undefined;
  /**
   * Admission before the model is known (gRPC: on a `ModelInfer` call's metadata, before its
   * message, which names the model, is read): sheds the request when one of every READY model
   * would be shed by `admit` now, so that reading and decoding it cannot help. Such a request
   * is counted as model `unknown`.
   * @returns when it may go on, its arrival as a ticket (pass it to `admit`, which decides again
   *   on its model, counting the time since, and settle it once the call ends); it counts as work
   *   ahead of later arrivals only once `admit` took it, so that calls that send their metadata
   *   and never a message cannot make others shed; undefined while nothing is shed (before
   *   start, no admission gate).
   * @throws ServeError overloaded when it is shed.
   */
  shedUnread?(): AdmissionTicket | undefined;
}
