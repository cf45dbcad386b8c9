/**
 * Request bodies read without a whole-body concatenation (serve/http/body.ts): the binary part
 * of a binary-tensor request lands 8-aligned in its ArrayBuffer, so aligned tensor data is taken
 * as a view of the body (serve/tensors.ts); large bodies come from a BodyPool and go back to it.
 */
import { Readable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { BINARY_PART_ALIGNMENT, BodyPool, POOLED_MIN_BYTES, readBody } from '../../src/serve/http/body.ts';
import { decodeInputData } from '../../src/serve/tensors.ts';

const chunked = (bytes: Buffer, size: number): Readable => Readable.from(Array.from({ length: Math.ceil(bytes.byteLength / size) }, (_, i) => bytes.subarray(i * size, (i + 1) * size)));

describe('readBody', () => {
  it.each([0, 1, 5, 8, 13])('header of %i bytes: same bytes, binary part aligned to 8 in its buffer', async (headerLength) => {
    const bytes = Buffer.from(Array.from({ length: headerLength + 64 }, (_, i) => i % 251));
    const body = await readBody(chunked(bytes, 7), { 'content-length': String(bytes.byteLength), 'inference-header-content-length': String(headerLength) }, 1 << 20);
    expect(body.equals(bytes)).toBe(true);
    if (headerLength > 0) expect((body.byteOffset + headerLength) % BINARY_PART_ALIGNMENT).toBe(0);
  });

  it('without Content-Length (chunked or inflated) the chunks are joined, also aligned', async () => {
    const bytes = Buffer.from('0123456789abcdefghij');
    const body = await readBody(chunked(bytes, 3), { 'inference-header-content-length': '3' }, 1 << 20);
    expect(body.toString()).toBe(bytes.toString());
    expect((body.byteOffset + 3) % 8).toBe(0);
  });

  it('413 past the limit (declared or received), 400 when the bytes differ from Content-Length', async () => {
    await expect(readBody(chunked(Buffer.alloc(10), 5), { 'content-length': '10' }, 9)).rejects.toMatchObject({ code: 'FST_ERR_CTP_BODY_TOO_LARGE', statusCode: 413 });
    await expect(readBody(chunked(Buffer.alloc(10), 5), {}, 9)).rejects.toMatchObject({ code: 'FST_ERR_CTP_BODY_TOO_LARGE', statusCode: 413 });
    await expect(readBody(chunked(Buffer.alloc(10), 5), { 'content-length': '12' }, 100)).rejects.toMatchObject({ code: 'FST_ERR_CTP_INVALID_CONTENT_LENGTH', statusCode: 400 });
    await expect(readBody(chunked(Buffer.alloc(10), 5), { 'content-length': '8' }, 100)).rejects.toMatchObject({ code: 'FST_ERR_CTP_INVALID_CONTENT_LENGTH' });
  });

  it('a body over the limit is read to its end before the 413 (up to drainBytes); past that bound, or waiting for 100-continue, refused at once', async () => {
    const consumed = (stream: Readable): boolean => stream.readableEnded;
    const drained = chunked(Buffer.alloc(100), 10);
    await expect(readBody(drained, { 'content-length': '100' }, 50, undefined, 1000)).rejects.toMatchObject({ statusCode: 413 });
    expect(consumed(drained)).toBe(true);
    const counted = chunked(Buffer.alloc(100), 10);
    await expect(readBody(counted, {}, 50, undefined, 1000)).rejects.toMatchObject({ statusCode: 413 });
    expect(consumed(counted)).toBe(true);
    const huge = chunked(Buffer.alloc(100), 10);
    await expect(readBody(huge, { 'content-length': '100' }, 50, undefined, 99)).rejects.toMatchObject({ statusCode: 413 });
    expect(consumed(huge)).toBe(false);
    const waiting = chunked(Buffer.alloc(100), 10);
    await expect(readBody(waiting, { 'content-length': '100', expect: '100-continue' }, 50, undefined, 1000)).rejects.toMatchObject({ statusCode: 413 });
    expect(consumed(waiting)).toBe(false);
  });

  it('a stream error is a 400 unless it carries a 4xx', async () => {
    const failing = new Readable({ read() { this.destroy(Object.assign(new Error('bad gzip'), { statusCode: 415 })); } });
    await expect(readBody(failing, {}, 100)).rejects.toMatchObject({ message: 'bad gzip', statusCode: 415 });
    const plain = new Readable({ read() { this.destroy(new Error('boom')); } });
    await expect(readBody(plain, {}, 100)).rejects.toMatchObject({ message: 'boom', statusCode: 400 });
  });
});

describe('BodyPool', () => {
  it('reuses the memory of a large body given back; small bodies are not pooled; a second give is ignored', async () => {
    const pool = new BodyPool(16 * POOLED_MIN_BYTES);
    const n = POOLED_MIN_BYTES + 100;
    const a = await readBody(chunked(Buffer.alloc(n, 1), 65536), { 'content-length': String(n) }, 1 << 24, pool);
    pool.give(a);
    pool.give(a);
    expect(pool.idle).toBe(2 * POOLED_MIN_BYTES); // one buffer of the next power of two
    const b = await readBody(chunked(Buffer.alloc(n, 2), 65536), { 'content-length': String(n) }, 1 << 24, pool);
    expect(b.buffer).toBe(a.buffer);
    expect(b.every((x) => x === 2)).toBe(true);
    expect(pool.idle).toBe(0);
    const small = await readBody(chunked(Buffer.alloc(10), 5), { 'content-length': '10' }, 100, pool);
    pool.give(small);
    expect(pool.idle).toBe(0);
  });

  it('keeps at most maxIdleBytes', () => {
    const pool = new BodyPool(POOLED_MIN_BYTES);
    const a = pool.take(POOLED_MIN_BYTES, 0);
    const b = pool.take(POOLED_MIN_BYTES, 0);
    pool.give(a);
    pool.give(b);
    expect(pool.idle).toBe(POOLED_MIN_BYTES);
    expect(() => new BodyPool(-1)).toThrow(RangeError);
  });
});

describe('decodeInputData on raw bytes', () => {
  const ctx = { model: 'm', input: 'x' };
  it('aligned bytes become a view (no copy); unaligned ones a copy with the same values', () => {
    const values = Float32Array.from([1.5, -2, 3.25, 4]);
    const buffer = new ArrayBuffer(40);
    new Uint8Array(buffer, 8, 16).set(new Uint8Array(values.buffer));
    const aligned = decodeInputData(ctx, 'float32', [1, 4], 4, { kind: 'raw', bytes: new Uint8Array(buffer, 8, 16) });
    expect((aligned as Float32Array).buffer).toBe(buffer);
    expect([...aligned]).toEqual([...values]);
    new Uint8Array(buffer, 21, 16).set(new Uint8Array(values.buffer));
    const unaligned = decodeInputData(ctx, 'float32', [1, 4], 4, { kind: 'raw', bytes: new Uint8Array(buffer, 21, 16) });
    expect((unaligned as Float32Array).buffer).not.toBe(buffer);
    expect([...unaligned]).toEqual([...values]);
    const int64 = decodeInputData(ctx, 'int64', [2], 2, { kind: 'raw', bytes: new Uint8Array(new BigInt64Array([2n ** 60n, -3n]).buffer) });
    expect([...int64]).toEqual([2n ** 60n, -3n]);
    expect(() => decodeInputData(ctx, 'bool', [2], 2, { kind: 'raw', bytes: Uint8Array.from([1, 2]) })).toThrow(/BOOL byte 1 is 2, expected 0 or 1/);
  });
});
