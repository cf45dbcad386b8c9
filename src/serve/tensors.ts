/**
 * Tensor data of the v2 protocol ↔ host tensors (`tensor.ts`): datatype names, decoding a
 * request input's data (`InferInputData`: JSON, raw bytes, typed gRPC contents) into a typed
 * array of exactly the expected element count, and the value rules both protocols share.
 *
 * Spec: Open Inference Protocol "Tensor Data Types" and "Tensor Data" (row-major; JSON data
 * flat or nested in the tensor's natural shape); binary tensor data extension (little-endian,
 * row-major, no padding; BOOL one byte 0/1).
 *
 * ## Value rules (README "Serving": NaN/Inf and INT64)
 * - FP32 / FP64 in JSON or typed contents: numbers, or the strings `"NaN"`, `"Infinity"`,
 *   `"-Infinity"` (JSON has no literal for them); the same strings are written for non-finite
 *   outputs. A finite number outside the FP32 range is a bad request (it would become ±Inf).
 *   In binary data IEEE-754 values pass as they are, NaN and ±Inf included.
 * - INT64: a safe integer (|x| ≤ 2^53 − 1) `number`, a `bigint` in [−2^63, 2^63) (the HTTP
 *   layer parses long integer literals losslessly), or in typed (gRPC) contents a decimal
 *   string. An integer-valued `number` beyond 2^53 is a bad request: its precision may already
 *   be lost. Other integer types: integers in the type's range. BOOL: `true`/`false` (binary: 0/1).
 * - FP16 only as binary data (JSON has no 16-bit float).
 * - UINT64: like INT64 in [0, 2^64). INT16/UINT16/UINT32: integers in the type's range.
 * - BYTES (ONNX STRING tensors): JSON strings; gRPC `bytes_contents` (UTF-8); binary data as
 *   the binary extension defines it — each element a 4-byte little-endian length, then that many
 *   bytes. Bytes that are not valid UTF-8 are a bad request (onnxruntime-node holds strings), and
 *   so is a JSON string with a lone surrogate (`"\ud800"`, not well-formed Unicode).
 *
 * Errors are `ServeError('bad_request')` whose message names the model, the input, and the
 * element index or field.
 */
import type { NumericDataType, TensorData, TensorDataType } from '../tensor.ts';
import { BYTES_PER_ELEMENT, halfToNumber, zeroTensorData } from '../tensor.ts';
import { ServeError, type InferInputData, type V2Datatype } from './inference.ts';

/** Every v2 datatype name, in the spec's table order. */
export const V2_DATATYPES: readonly V2Datatype[] = ['BOOL', 'UINT8', 'UINT16', 'UINT32', 'UINT64', 'INT8', 'INT16', 'INT32', 'INT64', 'FP16', 'FP32', 'FP64', 'BYTES'];

/** v2 datatype of each host tensor type. */
export const V2_DATATYPE_OF: Readonly<Record<TensorDataType, V2Datatype>> = {
  float32: 'FP32',
  float64: 'FP64',
  float16: 'FP16',
  int64: 'INT64',
  int32: 'INT32',
  int8: 'INT8',
  uint8: 'UINT8',
  bool: 'BOOL',
  uint16: 'UINT16',
  int16: 'INT16',
  uint32: 'UINT32',
  uint64: 'UINT64',
  string: 'BYTES',
};

/** Host data type of each v2 datatype a `HostTensor` can hold (`FP32` → `float32`; the inverse of `V2_DATATYPE_OF`). */
export const HOST_DATATYPE_OF = Object.fromEntries(Object.entries(V2_DATATYPE_OF).map(([host, v2]) => [v2, host])) as Readonly<Partial<Record<string, TensorDataType>>>;

/** The v2 name of a host data type (`float32` → `FP32`). */
export function v2Datatype(dataType: TensorDataType): V2Datatype {
  return V2_DATATYPE_OF[dataType];
}

export function isV2Datatype(s: string): s is V2Datatype {
  return (V2_DATATYPES as readonly string[]).includes(s);
}

/** `true` on little-endian hosts (every platform Node ships for but s390x); raw tensor bytes are little-endian. */
export const HOST_IS_LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;
const FP32_MAX = 3.4028234663852886e38;
const INT_RANGE: Readonly<Partial<Record<TensorDataType, readonly [number, number]>>> = {
  int32: [-2_147_483_648, 2_147_483_647],
  int8: [-128, 127],
  uint8: [0, 255],
  int16: [-32_768, 32_767],
  uint16: [0, 65_535],
  uint32: [0, 4_294_967_295],
};
const UINT64_MAX = 2n ** 64n - 1n;
const UTF8 = new TextDecoder('utf-8', { fatal: true });
/** `String.prototype.isWellFormed` (ES2024, Node ≥ 20), which the ES2023 lib does not declare. */
type WellFormedString = string & { isWellFormed(): boolean };
/** A UTF-16 code unit of a surrogate that is not half of a pair (`u` mode reads a pair as one code point). */
const LONE_SURROGATE = /\p{Cs}/u;


/** A short description of a request value for error messages (strings quoted and cut at 40 characters). */
export function describeValue(v: unknown): string {
  if (typeof v === 'string') return JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}…` : v);
  if (typeof v === 'bigint') return v.toString();
  if (Array.isArray(v)) return 'an array';
  if (v === null) return 'null';
  if (typeof v === 'object') return 'an object';
  if (typeof v === 'number' || typeof v === 'boolean' || v === undefined) return String(v);
  return typeof v;
}

/** Where a value sits, for messages: `model 'm': input 'x'`. */
export interface TensorContext {
  readonly model: string;
  readonly input: string;
}

function bad(ctx: TensorContext, detail: string): ServeError {
  return new ServeError('bad_request', `model '${ctx.model}': input '${ctx.input}': ${detail}`);
}

type Writer = (v: unknown, i: number) => void;

/** A writer storing one JSON/typed element at index i, or throwing a bad_request naming it. */
function writerFor(ctx: TensorContext, dataType: TensorDataType, out: TensorData, typed: boolean): Writer {
  const element = (i: number, v: unknown, expected: string): ServeError => bad(ctx, `element ${i} is ${describeValue(v)}, expected ${expected}`);
  switch (dataType) {
    case 'float32':
    case 'float64': {
      const arr = out as Float32Array | Float64Array;
      const f32 = dataType === 'float32';
      const expected = `a number${f32 ? ' in the FP32 range' : ''} or "NaN", "Infinity", "-Infinity"`;
      return (v, i) => {
        let x: number;
        if (typeof v === 'number') {
          x = v;
          if (!Number.isFinite(x) || (f32 && Math.abs(x) > FP32_MAX)) throw element(i, v, expected);
        } else if (typeof v === 'bigint') {
          x = Number(v);
          if (!Number.isFinite(x) || (f32 && Math.abs(x) > FP32_MAX)) throw element(i, v, expected);
        } else if (v === 'NaN') x = Number.NaN;
        else if (v === 'Infinity') x = Number.POSITIVE_INFINITY;
        else if (v === '-Infinity') x = Number.NEGATIVE_INFINITY;
        else throw element(i, v, expected);
        arr[i] = x;
      };
    }
    case 'int64': {
      const arr = out as BigInt64Array;
      const expected = 'an integer in [-2^63, 2^63)';
      return (v, i) => {
        let x: bigint;
        if (typeof v === 'number') {
          if (!Number.isSafeInteger(v)) {
            if (Number.isInteger(v)) throw bad(ctx, `element ${i} is ${v}, an integer beyond 2^53 whose precision may already be lost; send INT64 values as exact integers (${typed ? 'int64_contents as strings or Longs' : 'JSON integer literals, or binary data'})`);
            throw element(i, v, expected);
          }
          x = BigInt(v);
        } else if (typeof v === 'bigint') x = v;
        else if (typed && typeof v === 'string' && /^-?\d{1,20}$/.test(v)) x = BigInt(v);
        else throw element(i, v, expected);
        if (x < INT64_MIN || x > INT64_MAX) throw element(i, v, expected);
        arr[i] = x;
      };
    }
    case 'uint64': {
      const arr = out as BigUint64Array;
      const expected = 'an integer in [0, 2^64)';
      return (v, i) => {
        let x: bigint;
        if (typeof v === 'number') {
          if (!Number.isSafeInteger(v)) {
            if (Number.isInteger(v) && v > 0) throw bad(ctx, `element ${i} is ${v}, an integer beyond 2^53 whose precision may already be lost; send UINT64 values as exact integers (${typed ? 'uint64_contents as strings or Longs' : 'JSON integer literals, or binary data'})`);
            throw element(i, v, expected);
          }
          x = BigInt(v);
        } else if (typeof v === 'bigint') x = v;
        else if (typed && typeof v === 'string' && /^\d{1,20}$/.test(v)) x = BigInt(v);
        else throw element(i, v, expected);
        if (x < 0n || x > UINT64_MAX) throw element(i, v, expected);
        arr[i] = x;
      };
    }
    case 'string': {
      const arr = out as string[];
      return (v, i) => {
        if (typeof v === 'string') {
          // JSON can spell a lone surrogate ("\ud800"); as UTF-8 it would become U+FFFD silently
          if (!(v as WellFormedString).isWellFormed()) throw bad(ctx, `element ${i} of BYTES is not well-formed Unicode: a lone surrogate at character ${v.search(LONE_SURROGATE)} (the binary data's UTF-8 would be refused the same way)`);
          arr[i] = v;
        } else if (typed && v instanceof Uint8Array) {
          try {
            arr[i] = UTF8.decode(v);
          } catch {
            throw bad(ctx, `element ${i} of BYTES is not valid UTF-8`);
          }
        } else throw element(i, v, typed ? 'bytes (UTF-8)' : 'a string');
      };
    }
    case 'int32':
    case 'int16':
    case 'uint16':
    case 'uint32':
    case 'int8':
    case 'uint8': {
      const arr = out as Int32Array | Int16Array | Uint16Array | Uint32Array | Int8Array | Uint8Array;
      const [lo, hi] = INT_RANGE[dataType]!;
      const expected = `an integer in [${lo}, ${hi}]`;
      return (v, i) => {
        const x = typeof v === 'bigint' ? Number(v) : v;
        if (typeof x !== 'number' || !Number.isInteger(x) || x < lo || x > hi) throw element(i, v, expected);
        arr[i] = x;
      };
    }
    case 'bool': {
      const arr = out as Uint8Array;
      return (v, i) => {
        if (typeof v !== 'boolean') throw element(i, v, 'true or false');
        arr[i] = v ? 1 : 0;
      };
    }
    case 'float16':
      throw bad(ctx, 'FP16 values cannot be written as JSON numbers or typed contents; send them as binary data (binary_data_size / raw_input_contents)');
  }
}

/**
 * Fill `out` from JSON `data`: flat (`n` scalars) or nested in the natural shape `dims`
 * (every level's length equal to its dim). Recursion depth is bounded by `dims.length`.
 */
function fillJson(ctx: TensorContext, data: unknown, dims: readonly number[], n: number, write: Writer): void {
  if (!Array.isArray(data)) throw bad(ctx, `data must be an array (flat, or nested in the shape [${dims.join(', ')}]), got ${describeValue(data)}`);
  if (data.length > 0 && Array.isArray(data[0]) && dims.length > 1) {
    let next = 0;
    const walk = (node: unknown, level: number, path: string): void => {
      if (level === dims.length) {
        if (Array.isArray(node)) throw bad(ctx, `data${path} is an array, but the shape [${dims.join(', ')}] has only ${dims.length} dims`);
        write(node, next++);
        return;
      }
      if (!Array.isArray(node)) throw bad(ctx, `data${path} is ${describeValue(node)}, expected an array of ${dims[level]} (nested data must follow the shape [${dims.join(', ')}])`);
      if (node.length !== dims[level]) throw bad(ctx, `data${path} has ${node.length} elements, expected ${dims[level]} (nested data must follow the shape [${dims.join(', ')}])`);
      for (let j = 0; j < node.length; j++) walk(node[j], level + 1, `${path}[${j}]`);
    };
    walk(data, 0, '');
    return;
  }
  if (data.length !== n) throw bad(ctx, `data has ${data.length} elements, but the shape [${dims.join(', ')}] has ${n}`);
  for (let i = 0; i < n; i++) {
    const v: unknown = data[i];
    if (Array.isArray(v)) throw bad(ctx, `data[${i}] is an array: data must be flat, or nested in the shape [${dims.join(', ')}] throughout`);
    write(v, i);
  }
}

/**
 * Check that JSON `data` holds exactly `n` elements laid out for `dims` before anything is
 * allocated (a shape of 3·10^10 elements with 3 values of data must be a 400, not an
 * allocation that fails or takes gigabytes): flat, its length is `n`; nested, every array above
 * the last level has the length of its dim (then the last level's arrays, checked by
 * `fillJson`, hold exactly `n` values). Visits the arrays, not the values: n / dims[last] steps
 * at most, and never more than the arrays the request holds.
 * @throws ServeError bad_request with the same messages as `fillJson`.
 */
function checkJsonLayout(ctx: TensorContext, data: unknown, dims: readonly number[], n: number): void {
  if (!Array.isArray(data)) throw bad(ctx, `data must be an array (flat, or nested in the shape [${dims.join(', ')}]), got ${describeValue(data)}`);
  if (data.length > 0 && Array.isArray(data[0]) && dims.length > 1) {
    const walk = (node: unknown, level: number, path: string): void => {
      if (!Array.isArray(node)) throw bad(ctx, `data${path} is ${describeValue(node)}, expected an array of ${dims[level]} (nested data must follow the shape [${dims.join(', ')}])`);
      if (node.length !== dims[level]) throw bad(ctx, `data${path} has ${node.length} elements, expected ${dims[level]} (nested data must follow the shape [${dims.join(', ')}])`);
      if (level + 1 < dims.length - 1) for (let j = 0; j < node.length; j++) walk(node[j], level + 1, `${path}[${j}]`);
      else if (level + 1 === dims.length - 1) {
        // the last level's arrays: their lengths only (fillJson checks their values)
        for (let j = 0; j < node.length; j++) {
          const leaf: unknown = node[j];
          if (!Array.isArray(leaf)) throw bad(ctx, `data${path}[${j}] is ${describeValue(leaf)}, expected an array of ${dims[level + 1]} (nested data must follow the shape [${dims.join(', ')}])`);
          if (leaf.length !== dims[level + 1]) throw bad(ctx, `data${path}[${j}] has ${leaf.length} elements, expected ${dims[level + 1]} (nested data must follow the shape [${dims.join(', ')}])`);
        }
      }
    };
    walk(data, 0, '');
    return;
  }
  if (data.length !== n) throw bad(ctx, `data has ${data.length} elements, but the shape [${dims.join(', ')}] has ${countText(n)}`);
}

/** An element count for a message: exact digits while safe, else "more than 2^53". */
function countText(n: number): string {
  return Number.isSafeInteger(n) ? String(n) : 'more than 2^53 elements';
}

/** A typed array of `n` elements of `dataType` over `bytes` (whose offset is a multiple of the element size). */
function viewOf(dataType: NumericDataType, bytes: Uint8Array, n: number): Exclude<TensorData, string[]> {
  const { buffer, byteOffset } = bytes;
  switch (dataType) {
    case 'float32':
      return new Float32Array(buffer, byteOffset, n);
    case 'float64':
      return new Float64Array(buffer, byteOffset, n);
    case 'float16':
      return new Uint16Array(buffer, byteOffset, n);
    case 'int64':
      return new BigInt64Array(buffer, byteOffset, n);
    case 'int32':
      return new Int32Array(buffer, byteOffset, n);
    case 'int8':
      return new Int8Array(buffer, byteOffset, n);
    case 'uint8':
    case 'bool':
      return new Uint8Array(buffer, byteOffset, n);
    case 'uint16':
      return new Uint16Array(buffer, byteOffset, n);
    case 'int16':
      return new Int16Array(buffer, byteOffset, n);
    case 'uint32':
      return new Uint32Array(buffer, byteOffset, n);
    case 'uint64':
      return new BigUint64Array(buffer, byteOffset, n);
  }
}

/**
 * Decode one input's data into a typed array of `n` elements of `dataType`, laid out
 * row-major for `dims` (already validated against the model, `n` = their product). Raw bytes
 * whose offset in their buffer is a multiple of the element size are not copied: the result
 * is a view of them (the caller must not write into it, nor reuse the bytes while it lives);
 * other data is copied into a fresh array.
 * @throws ServeError bad_request naming the model, the input and the element / byte count.
 */
export function decodeInputData(ctx: TensorContext, dataType: TensorDataType, dims: readonly number[], n: number, data: InferInputData): TensorData {
  switch (data.kind) {
    case 'raw': {
      const bytes = data.bytes;
      if (!(bytes instanceof Uint8Array)) throw bad(ctx, 'raw data must be bytes');
      if (dataType === 'string') return decodeBytesElements(ctx, bytes, dims, n);
      const size = BYTES_PER_ELEMENT[dataType];
      if (bytes.byteLength !== n * size) {
        throw bad(ctx, `binary data has ${bytes.byteLength} bytes, but the shape [${dims.join(', ')}] of ${v2Datatype(dataType)} needs ${Number.isSafeInteger(n * size) ? `${n} × ${size} = ${n * size}` : `${countText(n)} × ${size} bytes`}`);
      }
      if (!HOST_IS_LITTLE_ENDIAN && size > 1) throw bad(ctx, 'binary tensor data is little-endian and this host is big-endian: send JSON data');
      // aligned bytes are taken as they are (a view, no copy: the event loop stays free of
      // multi-MB copies; `http/body.ts` aligns the binary part of a request); else copied
      const out = bytes.byteOffset % size === 0 ? viewOf(dataType, bytes, n) : (zeroTensorData(dataType, n) as Exclude<TensorData, string[]>);
      if (out.buffer !== bytes.buffer) rawBytes(out).set(bytes);
      if (dataType === 'bool') {
        const b = out as Uint8Array;
        for (let i = 0; i < n; i++) if (b[i]! > 1) throw bad(ctx, `BOOL byte ${i} is ${b[i]}, expected 0 or 1`);
      }
      return out;
    }
    case 'json': {
      checkJsonLayout(ctx, data.values, dims, n);
      const out = zeroTensorData(dataType, n);
      fillJson(ctx, data.values, dims, n, writerFor(ctx, dataType, out, false));
      return out;
    }
    case 'typed': {
      const values = data.values;
      if (!Array.isArray(values)) throw bad(ctx, 'typed contents must be a list');
      if (values.length !== n) throw bad(ctx, `contents have ${values.length} elements, but the shape [${dims.join(', ')}] has ${countText(n)}`);
      const out = zeroTensorData(dataType, n);
      const write = writerFor(ctx, dataType, out, true);
      for (let i = 0; i < n; i++) write(values[i], i);
      return out;
    }
    default:
      throw bad(ctx, `unknown data kind '${String((data as { kind?: unknown }).kind)}'`);
  }
}

/**
 * A tensor's elements as JSON value text, flat and row-major (the spec's response form):
 * INT64 as exact integer literals (`BigInt64Array` → decimal digits, never via `number`),
 * non-finite floats as `"NaN"` / `"Infinity"` / `"-Infinity"`, BOOL as `true`/`false`,
 * FP16 decoded to numbers.
 */
export function jsonDataText(dataType: TensorDataType, data: TensorData): string {
  const n = data.length;
  const parts = new Array<string>(n);
  switch (dataType) {
    case 'string':
      for (let i = 0; i < n; i++) parts[i] = JSON.stringify(data[i]);
      break;
    case 'bool':
      for (let i = 0; i < n; i++) parts[i] = data[i] ? 'true' : 'false';
      break;
    case 'float16':
      for (let i = 0; i < n; i++) parts[i] = floatText(halfToNumber(Number(data[i])));
      break;
    case 'float32':
    case 'float64':
      for (let i = 0; i < n; i++) parts[i] = floatText(data[i] as number);
      break;
    default:
      // integers: number or bigint; String() of either is an exact integer literal
      for (let i = 0; i < n; i++) parts[i] = String(data[i]);
  }
  return `[${parts.join(',')}]`;
}

function floatText(x: number): string {
  if (Number.isFinite(x)) return String(x);
  return Number.isNaN(x) ? '"NaN"' : x > 0 ? '"Infinity"' : '"-Infinity"';
}

/**
 * A tensor's bytes as the binary extension sends them (little-endian, row-major); a view, no
 * copy on little-endian hosts. Strings (BYTES): each element's UTF-8 bytes after its 4-byte
 * little-endian length (a new buffer).
 */
export function rawBytes(data: TensorData): Uint8Array {
  if (!Array.isArray(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  const encoded = data.map((s) => Buffer.from(s, 'utf8'));
  const out = new Uint8Array(encoded.reduce((a, b) => a + 4 + b.byteLength, 0));
  const view = new DataView(out.buffer);
  let at = 0;
  for (const b of encoded) {
    view.setUint32(at, b.byteLength, true);
    out.set(b, at + 4);
    at += 4 + b.byteLength;
  }
  return out;
}

/**
 * Decode BYTES binary data (each element: 4-byte little-endian length, then the bytes) into
 * exactly `n` strings.
 * @throws ServeError bad_request naming the element when the data is cut short, holds more or
 *   fewer than `n` elements, or an element is not valid UTF-8.
 */
export function decodeBytesElements(ctx: TensorContext, bytes: Uint8Array, dims: readonly number[], n: number): string[] {
  const out: string[] = [];
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = 0;
  while (at < bytes.byteLength) {
    if (out.length >= n) throw bad(ctx, `binary BYTES data holds more than the ${countText(n)} elements of the shape [${dims.join(', ')}]`);
    if (at + 4 > bytes.byteLength) throw bad(ctx, `binary BYTES data ends inside the 4-byte length of element ${out.length}`);
    const len = view.getUint32(at, true);
    if (at + 4 + len > bytes.byteLength) throw bad(ctx, `binary BYTES element ${out.length} has length ${len}, past the end of the data`);
    try {
      out.push(UTF8.decode(bytes.subarray(at + 4, at + 4 + len)));
    } catch {
      throw bad(ctx, `element ${out.length} of BYTES is not valid UTF-8`);
    }
    at += 4 + len;
  }
  if (out.length !== n) throw bad(ctx, `binary BYTES data holds ${out.length} elements, but the shape [${dims.join(', ')}] has ${countText(n)}`);
  return out;
}
