/**
 * The classification extension's top-k (`serve/classification.ts`): Triton's
 * `"<value>:<index>[:<label>]"` strings, highest value first, ties by lower index, per batch
 * row; integer outputs as integers, float outputs as `%f`; the count checked and clamped.
 */
import { describe, expect, it } from 'vitest';
import { classCountOf, classify } from '../../src/serve/classification.ts';
import { ServeError } from '../../src/serve/inference.ts';

/** A top-k computed the plain way: sort (value, index) pairs of one row. */
function topK(row: readonly number[], k: number): [number, number][] {
  return row
    .map((v, i): [number, number] => [v, i])
    .sort((a, b) => b[0] - a[0] || a[1] - b[1])
    .slice(0, k);
}

describe('classify', () => {
  it('ranks each batch row of a float output and writes value:index[:label]', () => {
    const rows = [
      [0.1, 2.5, -1, 2.5, 0.75],
      [3, 1, 4, 1, 5],
    ];
    const t = { dataType: 'float32' as const, dims: [2, 5], data: Float32Array.from(rows.flat()) };
    const out = classify(t, 3, true);
    expect(out.dataType).toBe('string');
    expect(out.dims).toEqual([2, 3]);
    const want = rows.flatMap((r) => topK(r, 3).map(([v, i]) => `${v.toFixed(6)}:${i}`));
    expect(out.data).toEqual(want);
    expect(out.data).toEqual(['2.500000:1', '2.500000:3', '0.750000:4', '5.000000:4', '4.000000:2', '3.000000:0']);
    const labelled = classify(t, 2, true, ['zero', 'one', 'two', '', 'four']);
    expect(labelled.data).toEqual(['2.500000:1:one', '2.500000:3', '5.000000:4:four', '4.000000:2:two']);
  });

  it('clamps the count to the classes of a row, treats an unbatched output as one row, and writes integers as integers', () => {
    const ints = { dataType: 'int64' as const, dims: [4], data: BigInt64Array.from([5n, -2n, 9007199254740993n, 5n]) };
    const out = classify(ints, 10, false);
    expect(out.dims).toEqual([4]);
    expect(out.data).toEqual(['9007199254740993:2', '5:0', '5:3', '-2:1']);
    const u8 = classify({ dataType: 'uint8', dims: [1, 3], data: Uint8Array.from([1, 200, 7]) }, 1, true);
    expect(u8.data).toEqual(['200:1']);
  });

  it('ranks float16 values by their numeric value and puts NaN last', () => {
    const half = { dataType: 'float16' as const, dims: [1, 3], data: Uint16Array.from([0x3800, 0xc200, 0x4000]) /* 0.5, -3, 2 */ };
    expect(classify(half, 3, true).data).toEqual(['2.000000:2', '0.500000:0', '-3.000000:1']);
    const nan = { dataType: 'float32' as const, dims: [3], data: Float32Array.from([Number.NaN, 1, Number.NEGATIVE_INFINITY]) };
    expect(classify(nan, 3, false).data).toEqual(['1.000000:1', '-inf:2', 'nan:0']);
  });

  it('refuses BYTES and BOOL outputs with a bad_request', () => {
    expect(() => classify({ dataType: 'string', dims: [1, 2], data: ['a', 'b'] }, 1, true)).toThrow(ServeError);
    expect(() => classify({ dataType: 'bool', dims: [1, 2], data: Uint8Array.from([0, 1]) }, 1, true)).toThrow(/no classes to rank/);
  });
});

describe('classCountOf', () => {
  it('takes positive integers (numbers, int64 strings) and names the output and parameter otherwise', () => {
    expect(classCountOf('m', 'logits', 3)).toBe(3);
    expect(classCountOf('m', 'logits', '5')).toBe(5);
    for (const bad of [0, -1, 2.5, 'three', true, null, 1e9]) {
      expect(() => classCountOf('m', 'logits', bad)).toThrow(/model 'm': output 'logits': parameters.classification must be an integer/);
    }
  });
});
