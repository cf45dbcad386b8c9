/**
 * Host tensors: what crosses thread boundaries (inputs and final outputs of a query).
 * Plain data (typed array + dims) so it can be posted to a worker thread with structured
 * clone; intermediate activations never leave their executor.
 */

/** Element types used by the served models (ONNX names lower-cased as ORT's `Tensor.type`). */
export type TensorDataType = 'float32' | 'int64' | 'int32' | 'bool' | 'float16' | 'uint8' | 'int8' | 'float64';

export type TensorData = Float32Array | BigInt64Array | Int32Array | Uint8Array | Int8Array | Float64Array | Uint16Array;

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

/** Bytes per element of each data type. */
export const BYTES_PER_ELEMENT: Readonly<Record<TensorDataType, number>> = {
  float32: 4,
  int64: 8,
  int32: 4,
  bool: 1,
  float16: 2,
  uint8: 1,
  int8: 1,
  float64: 8,
};

/** A typed array of `n` zeros for `dataType` (float16 as raw Uint16 bits, bool as Uint8). */
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
  }
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
