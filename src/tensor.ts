/**
 * Host tensors: what crosses thread boundaries (inputs and final outputs of a query).
 * Plain data (typed array + dims) so it can be posted to a worker thread with structured
 * clone; intermediate activations never leave their executor.
 */

/**
 * Element types a tensor may have: every ONNX element type onnxruntime-node can hold, named as
 * ORT's `Tensor.type` (ONNX FLOAT → `float32`, STRING → `string`, …). BFLOAT16 and the complex
 * types are absent: onnxruntime-node's JS API has no tensor type for them.
 */
export type TensorDataType = 'float32' | 'int64' | 'int32' | 'bool' | 'float16' | 'uint8' | 'int8' | 'float64' | 'uint16' | 'int16' | 'uint32' | 'uint64' | 'string';

/** The element types with a fixed size (all but `string`). */
export type NumericDataType = Exclude<TensorDataType, 'string'>;

/**
 * Data of a tensor: a typed array (float16 as raw Uint16 bits, bool as Uint8 0/1), or for
 * `string` an array of strings (what onnxruntime-node's string tensors hold).
 */
export type TensorData = Float32Array | BigInt64Array | BigUint64Array | Int32Array | Uint32Array | Int16Array | Uint8Array | Int8Array | Float64Array | Uint16Array | string[];

/** Typed-array data (every type but `string`). */
export type NumericTensorData = Exclude<TensorData, string[]>;

/** A dense tensor in host memory, row-major. `data.length` equals the product of `dims`. */
export interface HostTensor {
  readonly dataType: TensorDataType;
  readonly dims: readonly number[];
  readonly data: TensorData;
}

/** Tensors by ONNX value name. */
export type TensorMap = Record<string, HostTensor>;

/** Number of elements of a shape (1 for a scalar `[]`). */
export function elementCount(dims: readonly number[]): number {
  let n = 1;
  for (const d of dims) n *= d;
  return n;
}

/** Bytes per element of each fixed-size data type (`string` has none: see `tensorBytes`). */
export const BYTES_PER_ELEMENT: Readonly<Record<NumericDataType, number>> = {
  float32: 4,
  int64: 8,
  int32: 4,
  bool: 1,
  float16: 2,
  uint8: 1,
  int8: 1,
  float64: 8,
  uint16: 2,
  int16: 2,
  uint32: 4,
  uint64: 8,
};

/**
 * Nominal bytes per element of a string tensor where its size must be known before its data is
 * (cost metadata, cache budgets): a pointer's worth. Real string data is measured (`tensorBytes`).
 */
export const NOMINAL_STRING_BYTES = 8;

/** Bytes per element of a data type; `NOMINAL_STRING_BYTES` for `string`. */
export function bytesPerElement(dataType: TensorDataType): number {
  return dataType === 'string' ? NOMINAL_STRING_BYTES : BYTES_PER_ELEMENT[dataType];
}

/** True for `string`. */
export function isStringType(dataType: TensorDataType): dataType is 'string' {
  return dataType === 'string';
}

/** Bytes a tensor's data holds: the typed array's length in bytes, or for strings their UTF-8 bytes. */
export function tensorBytes(t: HostTensor): number {
  if (Array.isArray(t.data)) {
    let n = 0;
    for (const s of t.data) n += Buffer.byteLength(s, 'utf8');
    return n;
  }
  return t.data.byteLength;
}

/** A typed array of `n` zeros for `dataType` (float16 as raw Uint16 bits, bool as Uint8; `n` empty strings for `string`). */
export function zeroTensorData(dataType: TensorDataType, n: number): TensorData {
  switch (dataType) {
    case 'float32':
      return new Float32Array(n);
    case 'float64':
      return new Float64Array(n);
    case 'float16':
      return new Uint16Array(n);
    case 'int64':
      return new BigInt64Array(n);
    case 'int32':
      return new Int32Array(n);
    case 'int8':
      return new Int8Array(n);
    case 'uint8':
    case 'bool':
      return new Uint8Array(n);
    case 'uint16':
      return new Uint16Array(n);
    case 'int16':
      return new Int16Array(n);
    case 'uint32':
      return new Uint32Array(n);
    case 'uint64':
      return new BigUint64Array(n);
    case 'string':
      return new Array<string>(n).fill('');
  }
}

/** Where a tensor from `lazyZeroTensor` caches its data once read (a symbol key: not in `Object.keys`, JSON or structured clones). */
const LAZY_DATA = Symbol('lazy zero tensor data');

/** A tensor from `lazyZeroTensor`: `data` is an own enumerable getter caching its array under `LAZY_DATA`. */
interface LazyZeroTensor extends HostTensor {
  [LAZY_DATA]: TensorData | undefined;
}

/**
 * A zero tensor of `dataType` and `dims` whose data is allocated on first access (`data` is an
 * own enumerable getter caching its array): a simulation that never reads outputs allocates none,
 * and `sliceBatch` of it is another such tensor (no copy). An object literal with a getter, not
 * `Object.defineProperties` with closures: about 6× cheaper to create (2 M tensors: 0.74 s
 * against 4.7 s under tsx), which the simulator does for every output of every query.
 */
export function lazyZeroTensor(dataType: TensorDataType, dims: readonly number[]): HostTensor {
  const t: LazyZeroTensor = {
    dataType,
    dims,
    [LAZY_DATA]: undefined,
    get data(): TensorData {
      return (this[LAZY_DATA] ??= zeroTensorData(this.dataType, elementCount(this.dims)));
    },
  };
  return t;
}

/** Whether `t` came from `lazyZeroTensor` and its data was never read (so it is still all zeros). */
function isUnreadZero(t: HostTensor): boolean {
  return LAZY_DATA in t && (t as LazyZeroTensor)[LAZY_DATA] === undefined;
}

/** The value of IEEE-754 half-precision bits (float16 data holds them as Uint16). */
export function halfToNumber(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const e = (h >> 10) & 0x1f;
  const m = h & 0x3ff;
  if (e === 0) return sign * m * 2 ** -24;
  if (e === 0x1f) return m ? Number.NaN : sign * Number.POSITIVE_INFINITY;
  return sign * (1 + m / 1024) * 2 ** (e - 15);
}

/**
 * Concatenate the same-named tensors of several queries along dim 0 (the batch axis), in the
 * order given: the inputs of a fused batch (docs/design.md#dynamic-batching). Every map
 * must have the same names, and each name the same data type and the same dims after dim 0.
 * @throws RangeError naming the tensor and the map for an empty list, a missing or extra name,
 *   a rank-0 tensor, or a mismatch of data type or non-batch dims.
 */
export function concatBatch(maps: readonly TensorMap[]): TensorMap {
  const first = maps[0];
  if (first === undefined) throw new RangeError('concatBatch: no tensors to concatenate');
  if (maps.length === 1) return first;
  const names = Object.keys(first);
  const out: TensorMap = {};
  for (const name of names) {
    const head = first[name]!;
    if (head.dims.length === 0) throw new RangeError(`concatBatch: tensor '${name}' is a scalar; it has no batch axis`);
    let rows = 0;
    let length = 0;
    maps.forEach((m, i) => {
      const t = m[name];
      if (t === undefined) throw new RangeError(`concatBatch: map ${i} lacks tensor '${name}'`);
      if (t.dataType !== head.dataType || t.dims.length !== head.dims.length || t.dims.some((d, k) => k > 0 && d !== head.dims[k])) {
        throw new RangeError(`concatBatch: tensor '${name}' of map ${i} is ${t.dataType} [${t.dims.join(', ')}], map 0's is ${head.dataType} [${head.dims.join(', ')}]; only dim 0 may differ`);
      }
      rows += t.dims[0]!;
      length += t.data.length;
    });
    const data = zeroTensorData(head.dataType, length);
    let at = 0;
    for (const m of maps) {
      const src = m[name]!.data;
      if (Array.isArray(data)) for (let i = 0; i < src.length; i++) data[at + i] = (src as string[])[i]!;
      else (data as { set(a: ArrayLike<number | bigint>, offset: number): void }).set(src as ArrayLike<number | bigint>, at);
      at += src.length;
    }
    out[name] = { dataType: head.dataType, dims: [rows, ...head.dims.slice(1)], data };
  }
  maps.forEach((m, i) => {
    const extra = Object.keys(m).find((n) => !(n in first));
    if (extra !== undefined) throw new RangeError(`concatBatch: map ${i} has tensor '${extra}' that map 0 lacks`);
  });
  return out;
}

/**
 * Rows `[offset, offset + count)` of dim 0 of every tensor: one query's share of a fused
 * batch's outputs. The data is copied (the slice owns its buffer); the slice of a
 * `lazyZeroTensor` whose data was never read is a `lazyZeroTensor` of the slice's dims.
 * @throws RangeError naming the tensor when it is a scalar or has fewer than offset + count rows,
 *   or when offset or count is not an integer ≥ 0.
 */
export function sliceBatch(map: TensorMap, offset: number, count: number): TensorMap {
  const out: TensorMap = {};
  for (const [name, t] of Object.entries(map)) {
    const rows = t.dims[0];
    if (rows === undefined || !Number.isInteger(offset) || !Number.isInteger(count) || offset < 0 || count < 0 || offset + count > rows) throw new RangeError(`sliceBatch: tensor '${name}' [${t.dims.join(', ')}] has no rows [${offset}, ${offset + count}) on dim 0`);
    const dims = [count, ...t.dims.slice(1)];
    if (isUnreadZero(t)) {
      out[name] = lazyZeroTensor(t.dataType, dims);
      continue;
    }
    const per = rows === 0 ? 0 : t.data.length / rows;
    out[name] = { dataType: t.dataType, dims, data: t.data.slice(offset * per, (offset + count) * per) };
  }
  return out;
}
