/**
 * Host tensors ↔ v2 wire data for the clients: little-endian row-major bytes (binary tensor
 * data extension, gRPC raw contents), typed gRPC contents and JSON `data`.
 */
import { BYTES_PER_ELEMENT, elementCount, zeroTensorData, type HostTensor } from '../../tensor.ts';
import { decodeBytesElements, HOST_DATATYPE_OF, rawBytes } from '../tensors.ts';

/**
 * A host tensor from little-endian bytes (copied into an aligned buffer).
 * @throws RangeError when the datatype has no host type or the byte count does not match the shape.
 */
export function hostTensorFromBytes(name: string, datatype: string, dims: readonly number[], bytes: Uint8Array): HostTensor {
  const dataType = HOST_DATATYPE_OF[datatype];
  if (dataType === undefined) throw new RangeError(`output ${name}: datatype ${datatype} is not supported by this client`);
  const n = elementCount(dims);
  if (dataType === 'string') {
    try {
      return { dataType, dims: [...dims], data: decodeBytesElements({ model: 'response', input: name }, bytes, dims, n) };
    } catch (err) {
      throw new RangeError(`output ${name}: ${(err as Error).message}`);
    }
  }
  const expected = n * BYTES_PER_ELEMENT[dataType];
  if (bytes.byteLength !== expected) throw new RangeError(`output ${name}: ${bytes.byteLength} bytes for shape [${dims.join(', ')}] of ${datatype} (expected ${expected})`);
  const data = zeroTensorData(dataType, n);
  rawBytes(data).set(bytes);
  return { dataType, dims: [...dims], data };
}

/**
 * A host tensor from a flat list of values (JSON `data` or typed gRPC contents). INT64 values may
 * be numbers, bigints or decimal strings; BOOL values booleans or 0/1; FP16 values are not
 * representable from JSON (raw only).
 * @throws RangeError for an unsupported datatype, a count mismatch or a value of the wrong kind.
 */
export function hostTensorFromValues(name: string, datatype: string, dims: readonly number[], values: readonly unknown[]): HostTensor {
  const dataType = HOST_DATATYPE_OF[datatype];
  if (dataType === undefined || dataType === 'float16') throw new RangeError(`output ${name}: datatype ${datatype} is not supported as values by this client`);
  const n = elementCount(dims);
  if (values.length !== n) throw new RangeError(`output ${name}: ${values.length} values for shape [${dims.join(', ')}]`);
  const data = zeroTensorData(dataType, n);
  if (Array.isArray(data)) {
    for (let i = 0; i < n; i++) {
      const v = values[i];
      if (typeof v === 'string') data[i] = v;
      else if (v instanceof Uint8Array) data[i] = Buffer.from(v.buffer, v.byteOffset, v.byteLength).toString('utf8');
      else throw new RangeError(`output ${name}: element ${i} (${String(v)}) is not a string`);
    }
    return { dataType, dims: [...dims], data };
  }
  for (let i = 0; i < n; i++) {
    const v = values[i];
    if (data instanceof BigInt64Array || data instanceof BigUint64Array) {
      if (typeof v === 'bigint') data[i] = v;
      else if ((typeof v === 'number' && Number.isInteger(v)) || (typeof v === 'string' && /^-?\d+$/.test(v))) data[i] = BigInt(v);
      else throw new RangeError(`output ${name}: element ${i} (${String(v)}) is not an integer`);
    } else if (typeof v === 'number') data[i] = v;
    else if (typeof v === 'boolean') data[i] = v ? 1 : 0;
    else throw new RangeError(`output ${name}: element ${i} (${String(v)}) is not a number`);
  }
  return { dataType, dims: [...dims], data };
}

/** Flat JSON-able values of a host tensor: INT64/UINT64 as bigint (serialize with `jsonStringify`), BOOL as booleans, BYTES as strings. */
export function hostTensorValues(tensor: HostTensor): unknown[] {
  const { data } = tensor;
  if (tensor.dataType === 'bool') return Array.from(data as Uint8Array, (v) => v !== 0);
  if (Array.isArray(data)) return [...data];
  if (data instanceof BigInt64Array || data instanceof BigUint64Array) return Array.from(data as ArrayLike<bigint>);
  return Array.from(data as ArrayLike<number>);
}

/**
 * `JSON.stringify` that writes bigints as bare integers (lossless INT64 in JSON, as the v2
 * spec's JSON `data` expects numbers) and non-finite numbers as `null`.
 */
export function jsonStringify(value: unknown): string {
  const marker = '\u0000bigint:';
  const text = JSON.stringify(value, (_key, v: unknown) => (typeof v === 'bigint' ? `${marker}${v.toString()}` : v));
  return text.replace(/"\\u0000bigint:(-?\d+)"/g, '$1');
}
