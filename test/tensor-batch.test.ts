/**
 * `concatBatch` / `sliceBatch` (src/tensor.ts): the inputs of a fused batch are concatenated
 * along dim 0 and its outputs split back per member (docs/design.md#dynamic-batching).
 * Goldens are written out by hand (row-major, dim 0 outermost); every check is exact (the
 * functions copy elements, they compute nothing), float16 and NaN compared bit for bit.
 */
import { describe, expect, it } from 'vitest';
import { concatBatch, lazyZeroTensor, sliceBatch, type HostTensor, type TensorData, type TensorDataType, type TensorMap } from '../src/tensor.ts';

/** A typed array of `values` for `dataType` (float16 as raw Uint16 bits, bool as Uint8). */
function arrayOf(dataType: TensorDataType, values: readonly (number | bigint)[]): TensorData {
  const nums = (): number[] => values.map(Number);
  switch (dataType) {
    case 'float32':
      return Float32Array.from(nums());
    case 'float64':
      return Float64Array.from(nums());
    case 'float16':
      return Uint16Array.from(nums());
    case 'int64':
      return BigInt64Array.from(values.map((v) => BigInt(v)));
    case 'int32':
      return Int32Array.from(nums());
    case 'int8':
      return Int8Array.from(nums());
    case 'uint8':
    case 'bool':
      return Uint8Array.from(nums());
    case 'uint16':
      return Uint16Array.from(nums());
    case 'int16':
      return Int16Array.from(nums());
    case 'uint32':
      return Uint32Array.from(nums());
    case 'uint64':
      return BigUint64Array.from(values.map((v) => BigInt(v)));
    case 'string':
      return values.map((v) => `s${String(v)}`);
  }
}

/**
 * Element values per data type for rows of 2×3 elements, chosen to catch narrowing or sign
 * errors: int64 beyond 2^53, float16 bit patterns of −0, +∞, NaN and a subnormal, float32
 * values that are not exact in float16, int8 negatives, uint8 above 127.
 */
const ROWS: Record<TensorDataType, readonly (readonly (number | bigint)[])[]> = {
  float32: [
    [0.1, -2.5, 3e-8, 1e30, -0, 7],
    [1, 2, 3, 4, 5, 6],
    [-1.25, 0.333, 9, 10, 11, 12],
    [NaN, Infinity, -Infinity, 0.5, 0.25, 0.125],
  ],
  float64: [
    [0.1, -2.5, 1e-300, 1e300, -0, Math.PI],
    [1, 2, 3, 4, 5, 6],
    [-1.25, 1 / 3, 9, 10, 11, 12],
    [NaN, Infinity, -Infinity, 2 ** -1074, 0.25, 0.125],
  ],
  float16: [
    [0x3c00, 0x8000, 0x7c00, 0x7e00, 0x0001, 0xfbff],
    [0x0000, 0x3555, 0x4000, 0x4200, 0x4400, 0x4500],
    [0xbc00, 0xc000, 0xc200, 0xfc00, 0x03ff, 0x7bff],
    [0x1111, 0x2222, 0x3333, 0x4444, 0x5555, 0x6666],
  ],
  int64: [
    [2n ** 62n + 1n, -(2n ** 63n), 2n ** 63n - 1n, 0n, -1n, 9007199254740993n],
    [1n, 2n, 3n, 4n, 5n, 6n],
    [-7n, 8n, -9n, 10n, -11n, 12n],
    [101n, 102n, 103n, 104n, 105n, 106n],
  ],
  int32: [
    [2147483647, -2147483648, 0, -1, 65537, 7],
    [1, 2, 3, 4, 5, 6],
    [-7, 8, -9, 10, -11, 12],
    [101, 102, 103, 104, 105, 106],
  ],
  int8: [
    [127, -128, 0, -1, 5, 7],
    [1, 2, 3, 4, 5, 6],
    [-7, 8, -9, 10, -11, 12],
    [101, 102, 103, 104, 105, 106],
  ],
  uint8: [
    [255, 128, 0, 1, 200, 7],
    [1, 2, 3, 4, 5, 6],
    [7, 8, 9, 10, 11, 12],
    [101, 102, 103, 104, 105, 106],
  ],
  bool: [
    [1, 0, 1, 1, 0, 0],
    [0, 0, 0, 0, 0, 1],
    [1, 1, 1, 1, 1, 1],
    [0, 1, 0, 1, 0, 1],
  ],
  uint16: [
    [65535, 32768, 0, 1, 300, 7],
    [1, 2, 3, 4, 5, 6],
    [7, 8, 9, 10, 11, 12],
    [101, 102, 103, 104, 105, 106],
  ],
  int16: [
    [32767, -32768, 0, -1, 300, 7],
    [1, 2, 3, 4, 5, 6],
    [-7, 8, -9, 10, -11, 12],
    [101, 102, 103, 104, 105, 106],
  ],
  uint32: [
    [4294967295, 2147483648, 0, 1, 70000, 7],
    [1, 2, 3, 4, 5, 6],
    [7, 8, 9, 10, 11, 12],
    [101, 102, 103, 104, 105, 106],
  ],
  uint64: [
    [2n ** 64n - 1n, 2n ** 63n, 0n, 1n, 9007199254740993n, 7n],
    [1n, 2n, 3n, 4n, 5n, 6n],
    [7n, 8n, 9n, 10n, 11n, 12n],
    [101n, 102n, 103n, 104n, 105n, 106n],
  ],
  // strings `s<value>`
  string: [
    [0, 1, 2, 3, 4, 5],
    [10, 11, 12, 13, 14, 15],
    [20, 21, 22, 23, 24, 25],
    [30, 31, 32, 33, 34, 35],
  ],
};

const DTYPES = Object.keys(ROWS) as TensorDataType[];

/** A `[rows.length, 2, 3]` tensor of the given rows. */
function tensorOf(dataType: TensorDataType, rows: readonly (readonly (number | bigint)[])[]): HostTensor {
  return { dataType, dims: [rows.length, 2, 3], data: arrayOf(dataType, rows.flat()) };
}

/** Elements as comparable strings: bigint exactly, floats by their bits (so NaN and −0 compare). */
function bitsOf(t: HostTensor): string[] {
  if (Array.isArray(t.data)) return [...t.data];
  if (t.data instanceof BigInt64Array || t.data instanceof BigUint64Array) return [...t.data].map(String);
  if (t.data instanceof Float32Array) return [...new Uint32Array(t.data.buffer, t.data.byteOffset, t.data.length)].map(String);
  if (t.data instanceof Float64Array) return [...new BigUint64Array(t.data.buffer, t.data.byteOffset, t.data.length)].map(String);
  return Array.from(t.data as ArrayLike<number>, String);
}

function expectSameTensor(got: HostTensor | undefined, want: HostTensor): void {
  expect(got).toBeDefined();
  expect(got!.dataType).toBe(want.dataType);
  expect(got!.dims).toEqual(want.dims);
  expect(got!.data.constructor).toBe(want.data.constructor);
  expect(got!.data.length).toBe(want.data.length);
  expect(bitsOf(got!)).toEqual(bitsOf(want));
}

describe('concatBatch / sliceBatch', () => {
  it.each(DTYPES)('%s: rows of three maps (1, 2 and 1 rows) concatenate in order along dim 0 and split back exactly', (dataType) => {
    const rows = ROWS[dataType];
    // members: row 0 | rows 1, 2 | row 3
    const maps: TensorMap[] = [{ t: tensorOf(dataType, [rows[0]!]) }, { t: tensorOf(dataType, [rows[1]!, rows[2]!]) }, { t: tensorOf(dataType, [rows[3]!]) }];
    const fused = concatBatch(maps);
    // golden: the four rows, in member order
    expectSameTensor(fused['t'], tensorOf(dataType, rows));
    expect(Object.keys(fused)).toEqual(['t']);
    let offset = 0;
    for (const m of maps) {
      const count = m['t']!.dims[0]!;
      expectSameTensor(sliceBatch(fused, offset, count)['t'], m['t']!);
      offset += count;
    }
    // the row-by-row split of the golden, hand-indexed
    expectSameTensor(sliceBatch(fused, 2, 1)['t'], tensorOf(dataType, [rows[2]!]));
    expectSameTensor(sliceBatch(fused, 1, 3)['t'], tensorOf(dataType, [rows[1]!, rows[2]!, rows[3]!]));
  });

  it('concatenates several named tensors of different types (BERT-like ids + mask + a float input) whatever the key order of each map', () => {
    const ids = (a: bigint[]): HostTensor => ({ dataType: 'int64', dims: [1, a.length], data: BigInt64Array.from(a) });
    const mask = (a: bigint[]): HostTensor => ({ dataType: 'int64', dims: [1, a.length], data: BigInt64Array.from(a) });
    const x = (a: number[]): HostTensor => ({ dataType: 'float32', dims: [1, 1, a.length], data: Float32Array.from(a) });
    const fused = concatBatch([
      { input_ids: ids([5n, 6n, 7n]), attention_mask: mask([1n, 1n, 0n]), x: x([0.5, 1.5]) },
      { x: x([2.5, 3.5]), attention_mask: mask([1n, 0n, 0n]), input_ids: ids([8n, 9n, 10n]) },
    ]);
    expect(Object.keys(fused).sort()).toEqual(['attention_mask', 'input_ids', 'x']);
    expectSameTensor(fused['input_ids'], { dataType: 'int64', dims: [2, 3], data: BigInt64Array.from([5n, 6n, 7n, 8n, 9n, 10n]) });
    expectSameTensor(fused['attention_mask'], { dataType: 'int64', dims: [2, 3], data: BigInt64Array.from([1n, 1n, 0n, 1n, 0n, 0n]) });
    expectSameTensor(fused['x'], { dataType: 'float32', dims: [2, 1, 2], data: Float32Array.from([0.5, 1.5, 2.5, 3.5]) });
    const second = sliceBatch(fused, 1, 1);
    expectSameTensor(second['input_ids'], ids([8n, 9n, 10n]));
    expectSameTensor(second['attention_mask'], mask([1n, 0n, 0n]));
    expectSameTensor(second['x'], x([2.5, 3.5]));
  });

  it('concatenates copies: the fused tensors and the slices share no buffer with their sources', () => {
    const a: TensorMap = { t: { dataType: 'float32', dims: [1, 2], data: Float32Array.from([1, 2]) } };
    const b: TensorMap = { t: { dataType: 'float32', dims: [1, 2], data: Float32Array.from([3, 4]) } };
    const fused = concatBatch([a, b]);
    const slice = sliceBatch(fused, 1, 1);
    (fused['t']!.data as Float32Array)[2] = 99;
    (slice['t']!.data as Float32Array)[0] = -1;
    expect([...(a['t']!.data as Float32Array), ...(b['t']!.data as Float32Array)]).toEqual([1, 2, 3, 4]);
    expect([...(fused['t']!.data as Float32Array)]).toEqual([1, 2, 99, 4]);
  });

  it('one map is returned as it is; zero-row members and zero-row slices are allowed', () => {
    const one: TensorMap = { t: { dataType: 'int32', dims: [2, 1], data: Int32Array.from([1, 2]) } };
    expect(concatBatch([one])).toBe(one);
    const empty: TensorMap = { t: { dataType: 'int32', dims: [0, 1], data: new Int32Array(0) } };
    const fused = concatBatch([empty, one, empty]);
    expectSameTensor(fused['t'], one['t']!);
    expectSameTensor(sliceBatch(fused, 2, 0)['t'], { dataType: 'int32', dims: [0, 1], data: new Int32Array(0) });
    expectSameTensor(sliceBatch(empty, 0, 0)['t'], empty['t']!);
  });

  it('refuses mismatched members with a RangeError naming the tensor and the map', () => {
    const f = (dims: number[], dataType: TensorDataType = 'float32'): HostTensor => ({ dataType, dims, data: arrayOf(dataType, new Array<number>(dims.reduce((p, d) => p * d, 1)).fill(0)) });
    expect(() => concatBatch([])).toThrow(RangeError);
    expect(() => concatBatch([])).toThrow(/no tensors/);
    // a missing tensor in a later map
    expect(() => concatBatch([{ x: f([1, 2]), y: f([1, 3]) }, { x: f([1, 2]) }])).toThrow(/map 1 lacks tensor 'y'/);
    // an extra tensor in a later map
    expect(() => concatBatch([{ x: f([1, 2]) }, { x: f([1, 2]) }, { x: f([1, 2]), z: f([1, 1]) }])).toThrow(/map 2 has tensor 'z' that map 0 lacks/);
    // a data type mismatch
    expect(() => concatBatch([{ ids: f([1, 4], 'int64') }, { ids: f([1, 4], 'int32') }])).toThrow(/tensor 'ids' of map 1 is int32 \[1, 4\], map 0's is int64 \[1, 4\]; only dim 0 may differ/);
    // float16 vs uint8 (both raw Uint16/Uint8 bits, different types)
    expect(() => concatBatch([{ h: f([1, 2], 'float16') }, { h: f([1, 2], 'float16') }, { h: f([1, 2], 'uint8') }])).toThrow(/tensor 'h' of map 2 is uint8/);
    // a non-batch dim mismatch (e.g. two sequence lengths)
    expect(() => concatBatch([{ input_ids: f([1, 16], 'int64') }, { input_ids: f([1, 9], 'int64') }])).toThrow(/tensor 'input_ids' of map 1 is int64 \[1, 9\], map 0's is int64 \[1, 16\]/);
    // a rank mismatch
    expect(() => concatBatch([{ img: f([1, 3, 4, 4]) }, { img: f([1, 3, 16]) }])).toThrow(/tensor 'img' of map 1 is float32 \[1, 3, 16\]/);
    // a scalar has no batch axis, in the first map or a later one
    expect(() => concatBatch([{ s: f([]) }, { s: f([]) }])).toThrow(/tensor 's' is a scalar/);
    expect(() => concatBatch([{ s: f([1]) }, { s: f([]) }])).toThrow(/tensor 's' of map 1 is float32 \[\]/);
    for (const bad of [() => concatBatch([{ x: f([1, 2]) }, {}]), () => concatBatch([{ s: f([]) }, { s: f([]) }])]) expect(bad).toThrow(RangeError);
  });

  it('sliceBatch refuses rows outside dim 0, a scalar, and negative or fractional offsets/counts, naming the tensor', () => {
    const map: TensorMap = { logits: { dataType: 'float32', dims: [3, 2], data: Float32Array.from([1, 2, 3, 4, 5, 6]) } };
    expect(() => sliceBatch(map, 2, 2)).toThrow(/sliceBatch: tensor 'logits' \[3, 2\] has no rows \[2, 4\) on dim 0/);
    expect(() => sliceBatch(map, 3, 1)).toThrow(RangeError);
    expect(() => sliceBatch({ s: { dataType: 'float32', dims: [], data: Float32Array.from([1]) } }, 0, 1)).toThrow(/tensor 's' \[\] has no rows/);
    expect(() => sliceBatch(map, -1, 1)).toThrow(/tensor 'logits' \[3, 2\] has no rows \[-1, 0\)/);
    expect(() => sliceBatch(map, 1, -1)).toThrow(RangeError);
    expect(() => sliceBatch(map, 0.5, 1)).toThrow(RangeError);
    expect(() => sliceBatch(map, 0, 1.5)).toThrow(RangeError);
    expectSameTensor(sliceBatch(map, 1, 2)['logits'], { dataType: 'float32', dims: [2, 2], data: Float32Array.from([3, 4, 5, 6]) });
  });

  it('a lazy zero tensor (a simulated output) is sliced without allocating: the slice is zeros of the slice dims; once read, it is copied like any tensor', () => {
    const lazy = lazyZeroTensor('float32', [4, 3]);
    const slice = sliceBatch({ y: lazy }, 1, 2)['y']!;
    expect(slice.dims).toEqual([2, 3]);
    // the slice is lazy too (a getter, not an array copied out of the source)
    expect(typeof Object.getOwnPropertyDescriptor(slice, 'data')?.get).toBe('function');
    expectSameTensor(slice, { dataType: 'float32', dims: [2, 3], data: new Float32Array(6) });
    expect(Object.keys(slice)).toEqual(['dataType', 'dims', 'data']);
    // read and written to: no longer known to be zeros, so the slice copies the rows
    const read = lazyZeroTensor('int32', [3, 1]);
    (read.data as Int32Array)[2] = 7;
    expectSameTensor(sliceBatch({ t: read }, 1, 2)['t'], { dataType: 'int32', dims: [2, 1], data: Int32Array.from([0, 7]) });
    expect(() => sliceBatch({ y: lazyZeroTensor('float32', [2, 3]) }, 1, 2)).toThrow(/tensor 'y' \[2, 3\] has no rows \[1, 3\)/);
  });
});
