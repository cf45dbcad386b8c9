/**
 * Inference clients for a KServe v2 / Open Inference Protocol server (this project's
 * `abacus serve` or any other): one method shape over HTTP (`http-client.ts`) and gRPC
 * (`grpc-client.ts`), used by the load driver `abacus bench --target URL`.
 *
 * Failures of `infer` are values, not exceptions, so a load driver can count them:
 * `{ ok: false, status, code, message }` where `status` is the HTTP status (0 when no response
 * arrived) or the gRPC status code, and `code` the server's `ServeErrorCode` (from the
 * `abacus-error-code` header / trailing metadata when present, else from the status) or
 * `'transport'` (no answer, an unusable answer, or a status with no serving meaning).
 * Metadata calls (`modelMetadata`) throw `InferenceClientError` instead.
 */
import type { TensorMap } from '../../tensor.ts';
import type { ModelMetadata, ServeErrorCode } from '../inference.ts';

/** One request. */
export interface ClientInferRequest {
  /** Model (service) name. */
  readonly model: string;
  /** Input tensors by name, `[batch, …]`. */
  readonly inputs: TensorMap;
  /** Per-request QoS target in ms (sent as parameter `qos_ms`). */
  readonly qosMs?: number;
  /** Client request id, echoed by the server. */
  readonly id?: string;
  /** Outputs to return; absent: all. */
  readonly outputs?: readonly string[];
  /** Extra request parameters (booleans, strings, numbers, bigints). */
  readonly parameters?: Readonly<Record<string, boolean | string | number | bigint>>;
  /** Abort the call (the client reports `transport`). */
  readonly signal?: AbortSignal;
}

/** A successful answer. */
export interface ClientInferSuccess {
  readonly ok: true;
  /** Echoed request id (undefined when the server sent none). */
  readonly id?: string;
  /** Outputs by name, in the server's order. */
  readonly outputs: TensorMap;
  /** Response parameters, e.g. `queue_ms`, `compute_ms` (ms), `operator_groups`, `executed_batch_size`. */
  readonly serverParameters: Readonly<Record<string, unknown>>;
}

/** A failed call. */
export interface ClientInferFailure {
  readonly ok: false;
  /** HTTP status (0: no response) or gRPC status code. */
  readonly status: number;
  readonly code: ServeErrorCode | 'transport';
  readonly message: string;
}

export type ClientInferResult = ClientInferSuccess | ClientInferFailure;

/** The shape both clients share. */
export interface InferenceClient {
  /** Run one inference; never rejects (failures are `{ ok: false }`). */
  infer(request: ClientInferRequest): Promise<ClientInferResult>;
  /** Whether the server reports ready; false when it does not answer. */
  ready(): Promise<boolean>;
  /** @throws InferenceClientError when the server answers with an error or not at all. */
  modelMetadata(name: string): Promise<ModelMetadata>;
  /** Release connections. */
  close(): Promise<void>;
}

/** A failed metadata call. */
export class InferenceClientError extends Error {
  readonly status: number;
  readonly code: ServeErrorCode | 'transport';
  constructor(failure: Omit<ClientInferFailure, 'ok'>, options?: { cause?: unknown }) {
    super(failure.message, options);
    this.name = 'InferenceClientError';
    this.status = failure.status;
    this.code = failure.code;
  }
}

const SERVE_CODES: readonly ServeErrorCode[] = ['bad_request', 'model_not_found', 'qos_violation', 'overloaded', 'not_ready', 'device_failure', 'internal'];

function asServeErrorCode(text: unknown): ServeErrorCode | undefined {
  return SERVE_CODES.find((c) => c === text);
}

/**
 * The `ServeErrorCode` a failure names, the first step of both clients' mapping: `tag` (the
 * `SERVE_ERROR_CODE_KEY` header / trailing metadata) when it is a code, else the code the
 * message starts with (`qos_violation: …`); undefined when neither (the caller then maps its
 * protocol's status).
 */
export function serveErrorCodeOf(tag: unknown, message: string): ServeErrorCode | undefined {
  return asServeErrorCode(tag) ?? asServeErrorCode(/^([a-z_]+):/.exec(message)?.[1]);
}
