/**
 * The work a codec thread does (`offload.ts`; the thread's entry is `codec-worker.ts`), as pure
 * functions of plain messages, so that it runs the same on the event loop.
 *
 * - `decodeJob`: parse the JSON part of an infer request (`codec.ts` `parseInferJson`: the
 *   structural limits first) and turn every input's JSON `data` into the tensor's bytes
 *   (`serve/tensors.ts` `decodeInputData`: elements checked against the declared shape before
 *   anything is allocated; values against the datatype), so that what crosses back to the event
 *   loop is a small object plus transferable byte buffers, never millions of JS values to clone.
 *   An input is converted when its name, datatype and rank match one of the model's inputs and
 *   its dims are integers ≥ 0; any other input is refused by the backend on its name, datatype or
 *   shape before its data is read, so its data is dropped (an empty list) instead of cloned.
 *   BYTES data becomes the binary extension's encoding (4-byte length + UTF-8 per element).
 * - `encodeJob`: `codec.ts` `encodeInferResponse` of a response whose tensors were copied over.
 */
import { ServeError, type InferResponse, type ServeErrorCode, type TensorMetadata } from '../inference.ts';
import { decodeInputData, HOST_DATATYPE_OF, rawBytes } from '../tensors.ts';
import { elementCount } from '../../tensor.ts';
import { encodeInferResponse, isObject, parseInferJson } from './codec.ts';
import type { JsonLimits } from './limits.ts';

/** Decode the JSON part of an infer request. `text` is the JSON part only. */
export interface DecodeJob {
  readonly op: 'decode';
  readonly text: Uint8Array;
  /** The whole body's length, bytes (messages). */
  readonly bodyLength: number;
  /** `Inference-Header-Content-Length` as sent; undefined: a JSON body. */
  readonly headerLength: string | undefined;
  readonly model: string;
  readonly inputs: readonly TensorMetadata[];
  readonly limits: JsonLimits;
}

/** Encode a response (`encodeInferResponse`). */
export interface EncodeJob {
  readonly op: 'encode';
  readonly response: InferResponse;
  /** Outputs sent as binary data: names, or `all`. */
  readonly binaryOutputs: readonly string[] | 'all';
}

export type CodecJob = DecodeJob | EncodeJob;

/** A job's answer: the value and the buffers to transfer with it, or the error to raise. */
export type CodecResult =
  | { readonly ok: true; readonly value: Record<string, unknown> | EncodedBody; readonly transfer: ArrayBuffer[] }
  | { readonly ok: false; readonly code: ServeErrorCode; readonly message: string; readonly id?: string };

/** An encoded response as it crosses threads. */
export interface EncodedBody {
  readonly body: Uint8Array;
  readonly contentType: string;
  readonly headerLength?: number;
}

/** The parsed request of a decode job, input data as bytes where the model's input matches (see the file docs). */
export function decodeJob(job: DecodeJob): { value: Record<string, unknown>; transfer: ArrayBuffer[] } {
  const raw = parseInferJson(job.text, job.text.byteLength, job.bodyLength, job.headerLength, job.model, job.limits);
  const transfer: ArrayBuffer[] = [];
  const inputs = raw['inputs'];
  if (!Array.isArray(inputs)) return { value: raw, transfer };
  for (const entry of inputs as unknown[]) {
    if (!isObject(entry) || entry['data'] === undefined) continue;
    const spec = job.inputs.find((i) => i.name === entry['name']);
    const shape: unknown = entry['shape'];
    const dataType = spec === undefined ? undefined : HOST_DATATYPE_OF[spec.datatype];
    const dimsOk = Array.isArray(shape) && spec !== undefined && shape.length === spec.shape.length && shape.every((d) => typeof d === 'number' && Number.isSafeInteger(d) && d >= 0);
    if (spec === undefined || dataType === undefined || entry['datatype'] !== spec.datatype || !dimsOk) {
      entry['data'] = [];
      continue;
    }
    const dims = shape as number[];
    let data;
    try {
      data = decodeInputData({ model: job.model, input: spec.name }, dataType, dims, elementCount(dims), { kind: 'json', values: entry['data'] });
    } catch (err) {
      // as the backend's error would: with the request's id (docs/serving.md "Status codes")
      const id = raw['id'];
      throw typeof id === 'string' && err instanceof ServeError ? err.withId(id) : err;
    }
    const bytes = rawBytes(data);
    // a fresh array (or the BYTES encoding): its own buffer, whole
    entry['data'] = bytes;
    if (bytes.buffer instanceof ArrayBuffer && bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength && !transfer.includes(bytes.buffer)) transfer.push(bytes.buffer);
  }
  return { value: raw, transfer };
}

/** The encoded body of an encode job. */
export function encodeJob(job: EncodeJob): { value: EncodedBody; transfer: ArrayBuffer[] } {
  const encoded = encodeInferResponse(job.response, job.binaryOutputs === 'all' ? 'all' : new Set(job.binaryOutputs));
  // a body from Buffer's shared pool cannot be transferred: copy it out
  const body = encoded.body.byteLength === encoded.body.buffer.byteLength ? new Uint8Array(encoded.body.buffer, encoded.body.byteOffset, encoded.body.byteLength) : Uint8Array.prototype.slice.call(encoded.body);
  return { value: { body, contentType: encoded.contentType, ...(encoded.headerLength === undefined ? {} : { headerLength: encoded.headerLength }) }, transfer: [body.buffer as ArrayBuffer] };
}

/** Run a job; errors become a result (a `ServeError` keeps its code and id, anything else is `internal`). */
export function runJob(job: CodecJob): CodecResult {
  try {
    const { value, transfer } = job.op === 'decode' ? decodeJob(job) : encodeJob(job);
    return { ok: true, value, transfer };
  } catch (err) {
    if (err instanceof ServeError) return { ok: false, code: err.code, message: err.message, ...(err.id === undefined ? {} : { id: err.id }) };
    return { ok: false, code: 'internal', message: err instanceof Error ? err.message : String(err) };
  }
}
