/**
 * `decodeInputData` / `rawBytes` / `jsonDataText` for the element types beyond the zoo's
 * (docs/import.md "Element types"): INT16, UINT16, UINT32, UINT64 and BYTES, in JSON, typed (gRPC) and binary form;
 * out-of-range values and malformed BYTES data are bad requests naming the input and element.
 * Goldens by hand from the v2 protocol's binary extension (BYTES: 4-byte little-endian length,
 * then the bytes).
 */
import { describe, expect, it } from 'vitest';
import { decodeInputData, jsonDataText, rawBytes } from '../../src/serve/tensors.ts';

const ctx = { model: 'm', input: 'in' };

describe('element types beyond the zoo', () => {
  it('BYTES: JSON strings, typed UTF-8 bytes and length-prefixed binary decode to the same strings; rawBytes writes the prefix', () => {
    const strings = ['a', '', 'ünï'];
    expect(decodeInputData(ctx, 'string', [3], 3, { kind: 'json', values: strings })).toEqual(strings);
    expect(decodeInputData(ctx, 'string', [3], 3, { kind: 'typed', values: strings.map((s) => Buffer.from(s, 'utf8')) })).toEqual(strings);
    const raw = rawBytes(strings);
    // 'a' = 1 byte, '' = 0, 'ünï' = 5 bytes in UTF-8
    expect([...raw]).toEqual([1, 0, 0, 0, 0x61, 0, 0, 0, 0, 5, 0, 0, 0, ...Buffer.from('ünï', 'utf8')]);
    expect(decodeInputData(ctx, 'string', [3], 3, { kind: 'raw', bytes: raw })).toEqual(strings);
    expect(jsonDataText('string', ['a', 'b"c'])).toBe('["a","b\\"c"]');
  });

  it('BYTES: malformed data is a bad request naming the input', () => {
    const raw = rawBytes(['ab', 'c']);
    expect(() => decodeInputData(ctx, 'string', [3], 3, { kind: 'raw', bytes: raw })).toThrow(/input 'in': binary BYTES data holds 2 elements, but the shape \[3\] has 3/);
    expect(() => decodeInputData(ctx, 'string', [1], 1, { kind: 'raw', bytes: raw })).toThrow(/holds more than the 1 elements/);
    expect(() => decodeInputData(ctx, 'string', [2], 2, { kind: 'raw', bytes: raw.subarray(0, 10) })).toThrow(/element 1 has length 1, past the end/);
    expect(() => decodeInputData(ctx, 'string', [2], 2, { kind: 'raw', bytes: raw.subarray(0, 9) })).toThrow(/ends inside the 4-byte length of element 1/);
    expect(() => decodeInputData(ctx, 'string', [1], 1, { kind: 'raw', bytes: Uint8Array.from([1, 0, 0, 0, 0xff]) })).toThrow(/element 0 of BYTES is not valid UTF-8/);
    expect(() => decodeInputData(ctx, 'string', [2], 2, { kind: 'json', values: ['a', 3] })).toThrow(/input 'in': element 1 is 3, expected a string/);
    // lone surrogates in JSON are refused like invalid UTF-8 in binary data; a pair (an emoji) is fine
    expect(() => decodeInputData(ctx, 'string', [2], 2, { kind: 'json', values: ['ok', 'ab\ud800'] })).toThrow(/input 'in': element 1 of BYTES is not well-formed Unicode: a lone surrogate at character 2/);
    expect(() => decodeInputData(ctx, 'string', [1], 1, { kind: 'json', values: ['\udc00x'] })).toThrow(/element 0 of BYTES is not well-formed Unicode: a lone surrogate at character 0/);
    expect(decodeInputData(ctx, 'string', [1], 1, { kind: 'json', values: ['\ud83d\ude00'] })).toEqual(['😀']);
  });

  it('INT16, UINT16, UINT32, UINT64: values in range decode, the bounds are enforced', () => {
    expect([...(decodeInputData(ctx, 'int16', [2], 2, { kind: 'json', values: [-32768, 32767] }) as Int16Array)]).toEqual([-32768, 32767]);
    expect(() => decodeInputData(ctx, 'int16', [1], 1, { kind: 'json', values: [32768] })).toThrow(/element 0 is 32768, expected an integer in \[-32768, 32767\]/);
    expect([...(decodeInputData(ctx, 'uint16', [1], 1, { kind: 'json', values: [65535] }) as Uint16Array)]).toEqual([65535]);
    expect(() => decodeInputData(ctx, 'uint16', [1], 1, { kind: 'json', values: [-1] })).toThrow(/expected an integer in \[0, 65535\]/);
    expect([...(decodeInputData(ctx, 'uint32', [1], 1, { kind: 'json', values: [4294967295] }) as Uint32Array)]).toEqual([4294967295]);
    expect(() => decodeInputData(ctx, 'uint32', [1], 1, { kind: 'json', values: [4294967296] })).toThrow(/expected an integer in \[0, 4294967295\]/);
    const u64 = decodeInputData(ctx, 'uint64', [2], 2, { kind: 'json', values: [2n ** 64n - 1n, 5] }) as BigUint64Array;
    expect([...u64]).toEqual([2n ** 64n - 1n, 5n]);
    expect(jsonDataText('uint64', u64)).toBe('[18446744073709551615,5]');
    expect([...(decodeInputData(ctx, 'uint64', [1], 1, { kind: 'typed', values: ['18446744073709551615'] }) as BigUint64Array)]).toEqual([2n ** 64n - 1n]);
    expect(() => decodeInputData(ctx, 'uint64', [1], 1, { kind: 'json', values: [-1] })).toThrow(/expected an integer in \[0, 2\^64\)/);
    expect(() => decodeInputData(ctx, 'uint64', [1], 1, { kind: 'json', values: [2n ** 64n] })).toThrow(/expected an integer in \[0, 2\^64\)/);
    const bin = decodeInputData(ctx, 'uint32', [2], 2, { kind: 'raw', bytes: Uint8Array.from([1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]) }) as Uint32Array;
    expect([...bin]).toEqual([1, 4294967295]);
  });
});
