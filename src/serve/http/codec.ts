/**
 * KServe v2 HTTP/REST bodies ↔ the protocol-neutral contract (`serve/inference.ts`).
 *
 * Requests (`decodeInferBody`): a JSON `$inference_request`, optionally followed by binary
 * tensor data (Triton's binary tensor data extension): when the `Inference-Header-Content-Length`
 * header is present it gives the byte length of the JSON header; each input with
 * `parameters.binary_data_size` takes that many bytes of the data after it, in the order of the
 * inputs in the JSON; every byte must be used. `Inference-Header-Content-Length: 0` is the
 * extension's "raw binary request": the whole body is the data of the model's only input, read
 * as a batch-1 request (at most one other variable dim, deduced from the byte count), and every
 * output is returned as binary data.
 *
 * JSON is parsed with `JSON.parse` unless the text holds a run of 16 or more digits (a number
 * that may exceed 2^53); then with lossless-json, integer literals beyond 2^53 becoming `bigint`
 * (so INT64 inputs and `binary_data_size` keep every digit).
 *
 * Responses (`encodeInferResponse`): JSON `$inference_response` with flat row-major `data`
 * (INT64 as exact integer literals, non-finite floats as `"NaN"` / `"Infinity"` / `"-Infinity"`),
 * or — when an output is asked for with `binary_data: true` or the request has
 * `parameters.binary_data_output: true` — the JSON header followed by those outputs' bytes,
 * `Content-Type: application/octet-stream` and `Inference-Header-Content-Length`.
 *
 * Spec: https://github.com/kserve/open-inference-protocol/blob/main/specification/protocol/inference_rest.md,
 * https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_binary_data.md
 */
import { parse as parseLossless } from 'lossless-json';
import { MAX_REQUEST_ID_LENGTH, ServeError, type InferInput, type InferRequest, type InferRequestedOutput, type InferResponse, type ModelMetadata } from '../inference.ts';
import { describeValue, HOST_DATATYPE_OF, jsonDataText, rawBytes } from '../tensors.ts';
import { BYTES_PER_ELEMENT, elementCount } from '../../tensor.ts';
import { DEFAULT_JSON_LIMITS, scanJson, type JsonLimits } from './limits.ts';

/** The header that gives the JSON part's byte length in a binary request or response. */
export const INFERENCE_HEADER = 'inference-header-content-length';

/** An `InferRequest` without the server-assigned fields, plus what the response encoder needs. */
export interface DecodedInferBody {
  readonly request: Omit<InferRequest, 'requestId' | 'signal' | 'modelName' | 'modelVersion'>;
  /** Outputs to send as binary data: names, or `all`. */
  readonly binaryOutputs: ReadonlySet<string> | 'all';
}

function bad(model: string, detail: string): ServeError {
  return new ServeError('bad_request', `model '${model}': ${detail}`);
}

const INTEGER = /^-?\d+$/;

/** Parse JSON text; integer literals beyond 2^53 become `bigint` (see the file docs). */
export function parseJsonLossless(text: string): unknown {
  if (!/\d{16}/.test(text)) return JSON.parse(text);
  return parseLossless(text, null, {
    parseNumber: (s: string) => {
      if (INTEGER.test(s)) {
        const n = Number(s);
        return Number.isSafeInteger(n) ? n : BigInt(s);
      }
      return Number(s);
    },
    // as JSON.parse: the last of duplicate keys wins
    onDuplicateKey: ({ newValue }) => newValue,
  });
}

export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** A non-negative safe integer from a JSON value (number or bigint), else undefined. */
function byteCount(v: unknown): number | undefined {
  if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) return v;
  if (typeof v === 'bigint' && v >= 0n && v <= BigInt(Number.MAX_SAFE_INTEGER)) return Number(v);
  return undefined;
}

function optionalBool(model: string, v: unknown, field: string): boolean | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'boolean') throw bad(model, `${field} must be true or false, got ${describeValue(v)}`);
  return v;
}

/**
 * Byte length of the JSON part of a body: the whole body without the header, else the
 * `Inference-Header-Content-Length` value (0: the extension's raw binary request).
 * @param headerLength the header as sent (undefined: absent).
 * @throws ServeError bad_request naming the header and the body's length when it is not an integer in [0, body length].
 */
export function jsonPartLength(bodyLength: number, headerLength: string | undefined, model: string): number {
  if (headerLength === undefined) return bodyLength;
  const n = /^\d{1,15}$/.test(headerLength.trim()) ? Number(headerLength.trim()) : Number.NaN;
  if (!Number.isSafeInteger(n) || n > bodyLength) {
    throw bad(model, `the Inference-Header-Content-Length header must be an integer in [0, ${bodyLength}] (the body's length in bytes), got '${headerLength.slice(0, 40)}'`);
  }
  return n;
}

/**
 * Parse the JSON part `bytes[0, jsonEnd)` of an infer request body into an object, after the
 * structural limits (`limits.ts` `scanJson`). Pure: runs on the event loop or in a codec thread.
 * @param bodyLength the whole body's length (for messages about the header).
 * @param headerLength the `Inference-Header-Content-Length` header as sent (undefined: absent).
 * @throws ServeError bad_request: a limit passed, not JSON (naming the header when it gave the
 *   JSON part's length), or not an object.
 */
export function parseInferJson(bytes: Uint8Array, jsonEnd: number, bodyLength: number, headerLength: string | undefined, model: string, limits: JsonLimits = DEFAULT_JSON_LIMITS): Record<string, unknown> {
  if (jsonEnd === 0) throw bad(model, 'the request has no body; expected a JSON inference request ({"inputs": [...]})');
  const violation = scanJson(bytes, 0, jsonEnd, limits);
  if (violation !== undefined) throw bad(model, violation);
  const text = Buffer.from(bytes.buffer, bytes.byteOffset, jsonEnd).toString('utf8');
  let raw: unknown;
  try {
    raw = parseJsonLossless(text);
  } catch (err) {
    const why = (err instanceof RangeError ? 'nested too deeply' : err instanceof Error ? err.message : String(err)).slice(0, 200);
    if (headerLength !== undefined) {
      throw bad(model, `the JSON header is not valid JSON (${why}): the Inference-Header-Content-Length header says it is the first ${jsonEnd} bytes of the ${bodyLength}-byte body; check the header's value`);
    }
    const looksBinary = text.includes('\0') || text.includes('\uFFFD');
    throw bad(model, `the request body is not valid JSON${looksBinary ? ' (binary tensor data needs the Inference-Header-Content-Length header)' : ''}: ${why}`);
  }
  if (!isObject(raw)) throw bad(model, `the request must be a JSON object ({"inputs": [...]}), got ${describeValue(raw)}`);
  return raw;
}

/**
 * Decode an infer request body on the calling thread (`offload.ts` decodes large ones in a codec thread).
 * @param body the raw body (empty for none).
 * @param headerLength the `Inference-Header-Content-Length` header as sent (undefined: absent).
 * @param metadata the model's metadata (for the raw binary request and messages).
 * @throws ServeError bad_request naming the model and the field.
 */
export function decodeInferBody(body: Uint8Array, headerLength: string | undefined, metadata: ModelMetadata, limits: JsonLimits = DEFAULT_JSON_LIMITS): DecodedInferBody {
  const model = metadata.name;
  const jsonEnd = jsonPartLength(body.byteLength, headerLength, model);
  if (headerLength !== undefined && jsonEnd === 0) return rawBinaryRequest(body, metadata);
  return decodeParsed(parseInferJson(body, jsonEnd, body.byteLength, headerLength, model, limits), body, headerLength, jsonEnd, model);
}

/**
 * The request of a parsed JSON part (`parseInferJson`); an input's `data` that is a
 * `Uint8Array` (tensor bytes a codec thread made of its JSON data, `offload.ts`) is taken as raw data.
 * @throws ServeError bad_request naming the field, with the request's id when it has one.
 */
export function decodeParsed(raw: Record<string, unknown>, body: Uint8Array, headerLength: string | undefined, jsonEnd: number, model: string): DecodedInferBody {
  const id = raw['id'];
  if (id !== undefined && typeof id !== 'string') throw bad(model, `id must be a string, got ${describeValue(id)}`);
  if (id !== undefined && id.length > MAX_REQUEST_ID_LENGTH) throw bad(model, `id is ${id.length} characters long; at most ${MAX_REQUEST_ID_LENGTH}`);
  try {
    return decodeFields(raw, id, body, headerLength, jsonEnd, model);
  } catch (err) {
    // the error body echoes the request's id (docs/serving.md "Status codes")
    throw id !== undefined && err instanceof ServeError ? err.withId(id) : err;
  }
}

/** The fields of a parsed `$inference_request` object (`decodeInferBody` after `id`). */
function decodeFields(raw: Record<string, unknown>, id: string | undefined, body: Uint8Array, headerLength: string | undefined, jsonEnd: number, model: string): DecodedInferBody {
  // `"parameters": null` is the same as no parameters (clients that serialize every field send it)
  const parameters = raw['parameters'] ?? undefined;
  if (parameters !== undefined && !isObject(parameters)) throw bad(model, `parameters must be an object, got ${describeValue(parameters)}`);
  const allBinary = optionalBool(model, parameters?.['binary_data_output'], 'parameters.binary_data_output') ?? false;

  const rawInputs = raw['inputs'];
  if (!Array.isArray(rawInputs) || rawInputs.length === 0) throw bad(model, `inputs must be a non-empty list, got ${describeValue(rawInputs)}`);
  let offset = jsonEnd;
  const inputs: InferInput[] = [];
  for (const [i, entry] of (rawInputs as unknown[]).entries()) {
    if (!isObject(entry)) throw bad(model, `inputs[${i}] must be an object, got ${describeValue(entry)}`);
    const name = entry['name'];
    if (typeof name !== 'string') throw bad(model, `inputs[${i}].name must be a string, got ${describeValue(name)}`);
    const where = `input '${name}'`;
    const datatype = entry['datatype'];
    if (typeof datatype !== 'string') throw bad(model, `${where}: datatype must be a string, got ${describeValue(datatype)}`);
    const shape = entry['shape'];
    if (!Array.isArray(shape)) throw bad(model, `${where}: shape must be a list of dims, got ${describeValue(shape)}`);
    const params = entry['parameters'] ?? undefined;
    if (params !== undefined && !isObject(params)) throw bad(model, `${where}: parameters must be an object, got ${describeValue(params)}`);
    const binarySize = params?.['binary_data_size'];
    if (binarySize !== undefined) {
      const size = byteCount(binarySize);
      if (size === undefined) throw bad(model, `${where}: parameters.binary_data_size must be a non-negative integer, got ${describeValue(binarySize)}`);
      if (headerLength === undefined) throw bad(model, `${where}: binary_data_size is given but the Inference-Header-Content-Length header is missing`);
      if (entry['data'] !== undefined) throw bad(model, `${where}: give either data or parameters.binary_data_size, not both`);
      if (offset + size > body.byteLength) {
        throw bad(model, `${where}: binary data truncated: binary_data_size ${size} at byte ${offset - jsonEnd} of the binary part, which has only ${body.byteLength - jsonEnd} bytes`);
      }
      inputs.push({ name, datatype, shape: shape as number[], data: { kind: 'raw', bytes: body.subarray(offset, offset + size) } });
      offset += size;
    } else {
      const data = entry['data'];
      if (data === undefined) throw bad(model, `${where}: data is missing (or give parameters.binary_data_size with binary data)`);
      inputs.push({ name, datatype, shape: shape as number[], data: data instanceof Uint8Array ? { kind: 'raw', bytes: data } : { kind: 'json', values: data } });
    }
  }
  if (offset !== body.byteLength) {
    throw bad(model, `the body has ${body.byteLength - offset} bytes after the JSON header and the inputs' binary data (${offset - jsonEnd} bytes declared by binary_data_size); check Inference-Header-Content-Length`);
  }

  let outputs: InferRequestedOutput[] | undefined;
  const binary = new Set<string>();
  const rawOutputs = raw['outputs'];
  if (rawOutputs !== undefined) {
    if (!Array.isArray(rawOutputs)) throw bad(model, `outputs must be a list, got ${describeValue(rawOutputs)}`);
    outputs = [];
    for (const [i, entry] of (rawOutputs as unknown[]).entries()) {
      if (!isObject(entry)) throw bad(model, `outputs[${i}] must be an object, got ${describeValue(entry)}`);
      const name = entry['name'];
      if (typeof name !== 'string') throw bad(model, `outputs[${i}].name must be a string, got ${describeValue(name)}`);
      const params = entry['parameters'] ?? undefined;
      if (params !== undefined && !isObject(params)) throw bad(model, `output '${name}': parameters must be an object, got ${describeValue(params)}`);
      const asBinary = optionalBool(model, params?.['binary_data'], `output '${name}': parameters.binary_data`) ?? allBinary;
      if (asBinary) binary.add(name);
      const classification: unknown = params?.['classification'];
      outputs.push({ name, binaryData: asBinary, ...(classification === undefined ? {} : { classification }) });
    }
  }
  return {
    request: {
      ...(id === undefined ? {} : { id }),
      inputs,
      ...(outputs === undefined ? {} : { outputs }),
      ...(parameters === undefined ? {} : { parameters }),
    },
    binaryOutputs: outputs === undefined && allBinary ? 'all' : binary,
  };
}

/** The extension's raw binary request: the body is the only input's data, batch 1 (see the file docs). */
function rawBinaryRequest(body: Uint8Array, metadata: ModelMetadata): DecodedInferBody {
  const model = metadata.name;
  const input = metadata.inputs[0];
  if (metadata.inputs.length !== 1 || input === undefined) throw bad(model, `a raw binary request (Inference-Header-Content-Length: 0) needs a model with one input; this one has ${metadata.inputs.length} (${metadata.inputs.map((i) => i.name).join(', ')})`);
  const dataType = HOST_DATATYPE_OF[input.datatype];
  if (dataType === undefined || dataType === 'string') throw bad(model, `input '${input.name}': a raw binary request cannot carry ${input.datatype}`);
  const shape = input.shape.map((d, i) => (i === 0 && d === -1 ? 1 : d));
  const variable = shape.filter((d) => d === -1).length;
  if (variable > 1) throw bad(model, `input '${input.name}' has ${variable} variable dims besides the batch; a raw binary request can deduce at most one`);
  const size = BYTES_PER_ELEMENT[dataType];
  const fixed = elementCount(shape.filter((d) => d !== -1)) * size;
  if (variable === 1) {
    if (fixed === 0 || body.byteLength % fixed !== 0) throw bad(model, `input '${input.name}': a raw binary body of ${body.byteLength} bytes is not a whole number of ${fixed}-byte rows`);
    const k = shape.indexOf(-1);
    shape[k] = body.byteLength / fixed;
  }
  return { request: { inputs: [{ name: input.name, datatype: input.datatype, shape, data: { kind: 'raw', bytes: body } }] }, binaryOutputs: 'all' };
}

/** An encoded response body. */
export interface EncodedResponse {
  readonly body: Buffer;
  readonly contentType: string;
  /** Byte length of the JSON header when binary data follows it (`Inference-Header-Content-Length`). */
  readonly headerLength?: number;
}

/** Encode an `InferResponse` (see the file docs); outputs in `binaryOutputs` go as binary data. */
export function encodeInferResponse(response: InferResponse, binaryOutputs: ReadonlySet<string> | 'all'): EncodedResponse {
  const parts: string[] = [];
  const binary: Uint8Array[] = [];
  for (const [name, tensor] of Object.entries(response.outputs)) {
    const head = `{"name":${JSON.stringify(name)},"datatype":${JSON.stringify(response.outputDatatypes[name] ?? 'FP32')},"shape":${JSON.stringify(tensor.dims)}`;
    if (binaryOutputs === 'all' || binaryOutputs.has(name)) {
      const bytes = rawBytes(tensor.data);
      binary.push(bytes);
      parts.push(`${head},"parameters":{"binary_data_size":${bytes.byteLength}}}`);
    } else {
      parts.push(`${head},"data":${jsonDataText(tensor.dataType, tensor.data)}}`);
    }
  }
  const json =
    `{"model_name":${JSON.stringify(response.modelName)},"model_version":${JSON.stringify(response.modelVersion)}` +
    (response.id === undefined ? '' : `,"id":${JSON.stringify(response.id)}`) +
    `,"parameters":${JSON.stringify(response.parameters)},"outputs":[${parts.join(',')}]}`;
  const header = Buffer.from(json, 'utf8');
  if (binary.length === 0) return { body: header, contentType: 'application/json' };
  return { body: Buffer.concat([header, ...binary]), contentType: 'application/octet-stream', headerLength: header.byteLength };
}
