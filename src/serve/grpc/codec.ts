/**
 * Wire ↔ contract conversion for `inference.GRPCInferenceService` (pure functions, no I/O):
 * `ModelInferRequest` → `InferRequest`, `InferResponse` → `ModelInferResponse`, and
 * `ServeError` → gRPC status. Spec: Open Inference Protocol gRPC
 * (https://github.com/kserve/open-inference-protocol/blob/main/specification/protocol/inference_grpc.md).
 */
import { status as GrpcStatus, Metadata } from '@grpc/grpc-js';
import type { HostTensor } from '../../tensor.ts';
import { rawBytes } from '../tensors.ts';
import { MAX_REQUEST_ID_LENGTH, SERVE_ERROR_CODE_KEY, ServeError, type InferInput, type InferInputData, type InferRequest, type InferRequestedOutput, type InferResponse, type ServeErrorCode } from '../inference.ts';
import type {
  InferOutputTensorMessage,
  InferParameterMessage,
  InferTensorContentsMessage,
  Int64Wire,
  ModelInferRequestMessage,
  ModelInferResponseMessage,
  ParameterMap,
} from './proto.ts';


/** Which `InferTensorContents` field carries each v2 datatype (spec "Tensor Data"); FP16/BF16 have none. */
export const CONTENTS_FIELD_BY_DATATYPE: Readonly<Record<string, keyof InferTensorContentsMessage>> = {
  BOOL: 'bool_contents',
  INT8: 'int_contents',
  INT16: 'int_contents',
  INT32: 'int_contents',
  INT64: 'int64_contents',
  UINT8: 'uint_contents',
  UINT16: 'uint_contents',
  UINT32: 'uint_contents',
  UINT64: 'uint64_contents',
  FP32: 'fp32_contents',
  FP64: 'fp64_contents',
  BYTES: 'bytes_contents',
};

const CONTENTS_FIELDS: readonly (keyof InferTensorContentsMessage)[] = [
  'bool_contents',
  'int_contents',
  'int64_contents',
  'uint_contents',
  'uint64_contents',
  'fp32_contents',
  'fp64_contents',
  'bytes_contents',
];

/** The non-empty fields of a contents message (empty when absent). */
function setContentsFields(contents: InferTensorContentsMessage | null | undefined): (keyof InferTensorContentsMessage)[] {
  if (contents === null || contents === undefined) return [];
  return CONTENTS_FIELDS.filter((field) => (contents[field]?.length ?? 0) > 0);
}

/**
 * An int64 from the wire (decimal string, `longs: String`) as a JS number when it is a safe
 * integer, else a `bigint`.
 */
export function int64FromWire(value: Int64Wire): number | bigint {
  if (typeof value === 'number') return value;
  const big = BigInt(value);
  return big >= BigInt(Number.MIN_SAFE_INTEGER) && big <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(big) : big;
}

/**
 * `map<string, InferParameter>` → plain values: bool → boolean, string → string, double →
 * number, int64/uint64 → number when safe, else `bigint`. Unset members are skipped.
 */
export function parametersFromWire(parameters: ParameterMap | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, parameter] of Object.entries(parameters ?? {})) {
    const value = parameterValue(parameter);
    if (value !== undefined) out[key] = value;
  }
  return out;
}

function parameterValue(parameter: InferParameterMessage): unknown {
  switch (parameter.parameter_choice) {
    case 'bool_param':
      return parameter.bool_param ?? false;
    case 'string_param':
      return parameter.string_param ?? '';
    case 'double_param':
      return parameter.double_param ?? 0;
    case 'int64_param':
      return int64FromWire(parameter.int64_param ?? 0);
    case 'uint64_param':
      return int64FromWire(parameter.uint64_param ?? 0);
    default:
      return undefined;
  }
}

/**
 * Plain values → `map<string, InferParameter>`: boolean → bool_param, string → string_param,
 * integer number or bigint → int64_param (decimal string), other number → double_param.
 * Other values are skipped.
 */
export function parametersToWire(parameters: Readonly<Record<string, unknown>>): ParameterMap {
  const out: ParameterMap = {};
  for (const [key, value] of Object.entries(parameters)) {
    if (typeof value === 'boolean') out[key] = { bool_param: value };
    else if (typeof value === 'string') out[key] = { string_param: value };
    else if (typeof value === 'bigint') out[key] = { int64_param: value.toString() };
    else if (typeof value === 'number') out[key] = Number.isSafeInteger(value) ? { int64_param: String(value) } : { double_param: value };
  }
  return out;
}

function shapeFromWire(shape: readonly Int64Wire[] | undefined, what: string): number[] {
  return (shape ?? []).map((dim) => {
    const value = typeof dim === 'number' ? dim : Number(dim);
    if (!Number.isSafeInteger(value)) throw new ServeError('bad_request', `${what}: shape dimension ${String(dim)} is not an integer in range`);
    return value;
  });
}

/** Typed contents → contract values; int64/uint64 as `bigint`. */
function typedValues(field: keyof InferTensorContentsMessage, contents: InferTensorContentsMessage | null | undefined): readonly unknown[] {
  const values = contents?.[field] ?? [];
  if (field === 'int64_contents' || field === 'uint64_contents') return (values as Int64Wire[]).map((v) => BigInt(v));
  return values;
}

/**
 * Parse a `ModelInferRequest` into the protocol-neutral request.
 * - `raw_input_contents`, when non-empty, must have one entry per input (in the order of
 *   `inputs`) and no input may carry `contents` (spec); each input then gets `{kind:'raw'}`.
 * - Otherwise each input's `contents` field matching its datatype becomes `{kind:'typed'}`
 *   (INT64/UINT64 as `bigint`); a field of another type, or FP16/BF16 without raw contents,
 *   is a bad_request naming the input.
 * - Empty `model_version` and `id` mean absent (proto3 cannot tell them apart).
 * @throws ServeError bad_request naming the field.
 */
export function inferRequestFromWire(message: ModelInferRequestMessage, requestId: string, signal?: AbortSignal): InferRequest {
  const modelName = message.model_name ?? '';
  if (modelName === '') throw new ServeError('bad_request', 'model_name is required');
  if (message.id !== undefined && message.id.length > MAX_REQUEST_ID_LENGTH) throw new ServeError('bad_request', `model ${modelName}: id is ${message.id.length} characters long; at most ${MAX_REQUEST_ID_LENGTH}`);
  const inputsWire = message.inputs ?? [];
  const raw = message.raw_input_contents ?? [];
  if (raw.length > 0 && raw.length !== inputsWire.length) {
    throw new ServeError('bad_request', `model ${modelName}: raw_input_contents has ${raw.length} entries for ${inputsWire.length} inputs (one per input, in order)`);
  }
  const inputs: InferInput[] = inputsWire.map((input, index) => {
    const name = input.name ?? '';
    const what = `model ${modelName}: input ${name === '' ? `#${index}` : name}`;
    if (name === '') throw new ServeError('bad_request', `${what}: name is required`);
    const datatype = input.datatype ?? '';
    const shape = shapeFromWire(input.shape, what);
    const setFields = setContentsFields(input.contents);
    let data: InferInputData;
    const rawBytes = raw[index];
    if (rawBytes !== undefined) {
      if (setFields.length > 0) throw new ServeError('bad_request', `${what}: contents must not be set when raw_input_contents is used`);
      data = { kind: 'raw', bytes: rawBytes };
    } else {
      const field = CONTENTS_FIELD_BY_DATATYPE[datatype];
      if (field === undefined) {
        const reason = datatype === 'FP16' || datatype === 'BF16' ? `${datatype} must be sent in raw_input_contents` : `unknown datatype '${datatype}'`;
        throw new ServeError('bad_request', `${what}: ${reason}`);
      }
      const other = setFields.find((f) => f !== field);
      if (other !== undefined) throw new ServeError('bad_request', `${what}: datatype ${datatype} expects contents.${field}, got contents.${other}`);
      data = { kind: 'typed', values: typedValues(field, input.contents) };
    }
    return { name, datatype, shape, data };
  });
  const outputs: InferRequestedOutput[] | undefined =
    message.outputs !== undefined && message.outputs.length > 0
      ? message.outputs.map((output, index) => {
          const name = output.name ?? '';
          if (name === '') throw new ServeError('bad_request', `model ${modelName}: output #${index}: name is required`);
          const classification: unknown = output.parameters === undefined ? undefined : parametersFromWire(output.parameters)['classification'];
          return { name, ...(classification === undefined ? {} : { classification }) };
        })
      : undefined;
  return {
    modelName,
    ...(message.model_version !== undefined && message.model_version !== '' ? { modelVersion: message.model_version } : {}),
    ...(message.id !== undefined && message.id !== '' ? { id: message.id } : {}),
    inputs,
    ...(outputs !== undefined ? { outputs } : {}),
    parameters: parametersFromWire(message.parameters),
    requestId,
    ...(signal !== undefined ? { signal } : {}),
  };
}

/**
 * Little-endian row-major bytes of a host tensor (a view, no copy; the platform is
 * little-endian); BYTES (strings) length-prefixed as the binary extension defines (`rawBytes`).
 */
export function tensorBytes(tensor: HostTensor): Buffer {
  const bytes = rawBytes(tensor.data);
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** A host tensor as the `InferTensorContents` field of `datatype`; INT64/UINT64 as decimal strings. */
export function tensorContents(tensor: HostTensor, datatype: string): InferTensorContentsMessage {
  const field = CONTENTS_FIELD_BY_DATATYPE[datatype];
  if (field === undefined) throw new ServeError('internal', `output datatype ${datatype} has no typed contents`);
  const { data } = tensor;
  if (Array.isArray(data)) {
    if (field !== 'bytes_contents') throw new ServeError('internal', `output datatype ${datatype} does not hold strings`);
    return { bytes_contents: data.map((s) => Buffer.from(s, 'utf8')) };
  }
  if (field === 'bytes_contents') throw new ServeError('internal', `output datatype ${datatype} holds no strings`);
  if (data instanceof BigUint64Array) return { [field]: Array.from(data, (v) => v.toString()) };
  if (data instanceof BigInt64Array) return { [field]: Array.from(data, (v) => v.toString()) };
  if (field === 'bool_contents') return { bool_contents: Array.from(data as ArrayLike<number>, (v) => v !== 0) };
  if (field === 'int64_contents' || field === 'uint64_contents') return { [field]: Array.from(data as ArrayLike<number>, (v) => String(v)) };
  return { [field]: Array.from(data as ArrayLike<number>) };
}

/**
 * Encode a response. `contents: 'raw'` (default, as Triton does) puts each output's bytes in
 * `raw_output_contents` (one entry per output, in order); `'typed'` fills each output's
 * `contents` instead (BYTES as `bytes_contents`), unless an output's datatype has no typed field (FP16, BF16), in
 * which case the whole response goes raw (the spec forbids mixing the two).
 * Response parameters: `queue_ms`, `compute_ms` (double_param), `operator_groups`,
 * `executed_batch_size` (int64_param).
 * @throws ServeError internal when an output has no datatype in `outputDatatypes`.
 */
export function inferResponseToWire(response: InferResponse, requested: 'raw' | 'typed' = 'raw'): ModelInferResponseMessage {
  const typedPossible = Object.values(response.outputDatatypes).every((d) => CONTENTS_FIELD_BY_DATATYPE[d] !== undefined);
  const contents = requested === 'typed' && typedPossible ? 'typed' : 'raw';
  const outputs: InferOutputTensorMessage[] = [];
  const rawOutputs: Buffer[] = [];
  for (const [name, tensor] of Object.entries(response.outputs)) {
    const datatype = response.outputDatatypes[name];
    if (datatype === undefined) throw new ServeError('internal', `output ${name} has no datatype`);
    const output: InferOutputTensorMessage = { name, datatype, shape: [...tensor.dims] };
    if (contents === 'raw') rawOutputs.push(tensorBytes(tensor));
    else output.contents = tensorContents(tensor, datatype);
    outputs.push(output);
  }
  const { queue_ms, compute_ms, operator_groups, executed_batch_size } = response.parameters;
  return {
    model_name: response.modelName,
    model_version: response.modelVersion,
    id: response.id ?? '',
    parameters: {
      queue_ms: { double_param: queue_ms },
      compute_ms: { double_param: compute_ms },
      operator_groups: { int64_param: String(operator_groups) },
      executed_batch_size: { int64_param: String(executed_batch_size) },
    },
    outputs,
    raw_output_contents: rawOutputs,
  };
}

/** A gRPC status for a failed call (`ServiceError`-shaped for the unary callback). */
export interface GrpcErrorStatus {
  readonly code: GrpcStatus;
  readonly details: string;
  readonly metadata: Metadata;
}

/**
 * gRPC status of each `ServeErrorCode` (docs/serving.md "Status codes"; `inference.ts`).
 *
 * - `overloaded` is UNAVAILABLE: this node's queue is full and another node (or this one a
 *   moment later) may serve the request, so it is meant to be retried. UNAVAILABLE is the code
 *   gRPC documents as "most likely a transient condition … corrected by retrying with a
 *   backoff" (grpc.io "Status codes"), the one Triton answers for a full queue
 *   ("exceeds maximum queue size"), and the one gRPC retry policies (gRFC A6) and KServe's
 *   `InferenceGRPCClient` default policy retry. RESOURCE_EXHAUSTED is not used: grpc-js already
 *   answers it for a message over the size limit, which no retry fixes.
 * - `qos_violation` is DEADLINE_EXCEEDED: the request's QoS deadline cannot be met any more,
 *   so no node can serve it in time and a replay only adds load. google.rpc.Code maps
 *   DEADLINE_EXCEEDED to HTTP 504 (our HTTP status for it); KServe's default client retry
 *   policy retries UNAVAILABLE only, so it does not replay it. Such answers also carry the
 *   trailing metadata `grpc-retry-pushback-ms: -1` (`NO_RETRY_PUSHBACK`), by which gRFC A6
 *   tells a client whose own policy lists DEADLINE_EXCEEDED not to retry.
 * - `not_ready` and `device_failure` stay UNAVAILABLE (another replica may serve it).
 * - `forbidden` (model load/unload while model control is off) is PERMISSION_DENIED.
 */
export const GRPC_STATUS_BY_CODE: Readonly<Record<ServeErrorCode, GrpcStatus>> = {
  bad_request: GrpcStatus.INVALID_ARGUMENT,
  model_not_found: GrpcStatus.NOT_FOUND,
  qos_violation: GrpcStatus.DEADLINE_EXCEEDED,
  overloaded: GrpcStatus.UNAVAILABLE,
  not_ready: GrpcStatus.UNAVAILABLE,
  device_failure: GrpcStatus.UNAVAILABLE,
  forbidden: GrpcStatus.PERMISSION_DENIED,
  internal: GrpcStatus.INTERNAL,
};

/** gRFC A6 server pushback key: a negative value asks the client's retry policy not to retry. */
export const RETRY_PUSHBACK_KEY = 'grpc-retry-pushback-ms';
/** The pushback value sent with `qos_violation` (never retry). */
export const NO_RETRY_PUSHBACK = '-1';

/** The generic message of every INTERNAL status (the log has the detail). */
export const INTERNAL_MESSAGE = 'internal error; see the server log';

/**
 * The gRPC status for an error: a `ServeError` maps by code (`GRPC_STATUS_BY_CODE`); the
 * details of the statuses several codes share (UNAVAILABLE, DEADLINE_EXCEEDED) start with the
 * code once (`qos_violation: …`; a message that already starts with it is not prefixed again),
 * so the reason survives the shared status; anything else, and `internal`, is INTERNAL with a
 * generic message. The code also travels as trailing metadata `abacus-error-code`. An error
 * carrying the request's `id` (`ServeError.withId`) ends with ` (request id "…")`.
 */
export function grpcStatusOf(error: unknown): GrpcErrorStatus {
  const code: ServeErrorCode = error instanceof ServeError ? error.code : 'internal';
  const metadata = new Metadata();
  metadata.set(SERVE_ERROR_CODE_KEY, code);
  if (code === 'qos_violation') metadata.set(RETRY_PUSHBACK_KEY, NO_RETRY_PUSHBACK);
  const grpcCode = GRPC_STATUS_BY_CODE[code];
  let details: string;
  if (code === 'internal' || !(error instanceof ServeError)) details = INTERNAL_MESSAGE;
  else if (grpcCode === GrpcStatus.UNAVAILABLE || grpcCode === GrpcStatus.DEADLINE_EXCEEDED) details = error.message.startsWith(`${code}:`) ? error.message : `${code}: ${error.message}`;
  else details = error.message;
  // the request's own `id`, as the HTTP error body carries it
  if (error instanceof ServeError && error.id !== undefined) details = `${details} (request id ${JSON.stringify(error.id.slice(0, 200))})`;
  return { code: grpcCode, details: details.length > MAX_DETAILS_CHARS ? `${details.slice(0, MAX_DETAILS_CHARS)}…` : details, metadata };
}

/**
 * Longest `grpc-message` sent, characters; longer details are cut with an ellipsis. The details
 * can quote what the client sent (a model name); a trailer of 100 KB left a grpc-js client's
 * whole connection unable to receive anything, its other calls included (node's HTTP/2 header
 * list limit), while the server went on.
 */
export const MAX_DETAILS_CHARS = 2048;
