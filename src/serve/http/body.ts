/**
 * Reading an HTTP request body into one buffer without holding the event loop: every
 * arriving chunk is copied straight to its place in a buffer allocated once from `Content-Length`, so there is no final concatenation of the whole body (a 5 MB
 * synchronous copy per request, with fastify's `parseAs: 'buffer'`) and one large allocation
 * less for the garbage collector.
 *
 * The buffer is placed so that the binary part of a binary-tensor request (the bytes after the
 * `Inference-Header-Content-Length` JSON header) starts at a multiple of 8 bytes in its
 * `ArrayBuffer`: then `decodeInputData` (`serve/tensors.ts`) can take the first input's data
 * (and every following input whose offset stays aligned) as a typed-array view of the body
 * instead of a copy.
 *
 * A body without `Content-Length` (chunked transfer, or an inflated `Content-Encoding` body,
 * whose length is known only at the end) is collected in chunks and copied once at the end.
 *
 * Large bodies (≥ 1 MiB) come from a `BodyPool` when one is given: reused memory, whose pages
 * are already mapped, so a 5 MB body costs a plain memcpy spread over its chunks instead of
 * page faults on fresh memory, and no multi-MB allocation per request that makes V8 run
 * full garbage collections (both measured: `bench/event-loop.ts`). The caller gives a body back
 * (`BodyPool.give`) once nothing refers to it any more — for an inference request, after
 * `InferenceBackend.infer` settled (`InferRequest` documents that the backend keeps no
 * reference to request data after that).
 *
 * Errors (fastify's own codes, so the app's error handler words them as for any body):
 * `FST_ERR_CTP_BODY_TOO_LARGE` (413) when `Content-Length` or the bytes received pass the
 * limit — raised once the rest of the body has been read and discarded (up to `drainBytes` on
 * the wire), so that a client that sends its whole body before it reads the answer (urllib,
 * tritonclient) gets the 413 and not a broken pipe, as nginx does; a body past that
 * bound, or one whose client waits for `100 Continue`, is refused at once (the connection is
 * then closed), `FST_ERR_CTP_INVALID_CONTENT_LENGTH` (400) when the bytes received differ from
 * `Content-Length`, and a stream error (e.g. an invalid gzip stream) as it is, 400 unless it
 * carries a 4xx status.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { Readable } from 'node:stream';
import { errorCodes } from 'fastify';

/** Alignment of the binary part, bytes: the largest element size of a v2 datatype (FP64, INT64, UINT64). */
export const BINARY_PART_ALIGNMENT = 8;

/** Bodies from this size on (bytes, padding included) come from the pool. */
export const POOLED_MIN_BYTES = 1 << 20;

/** Default cap of the memory a pool keeps while idle, bytes (64 MiB: a few dozen 5 MB bodies in flight stay warm). */
export const DEFAULT_POOL_BYTES = 64 * 1024 * 1024;

/**
 * Reusable body memory: free `ArrayBuffer`s by size class (powers of two from
 * `POOLED_MIN_BYTES`), at most `maxIdleBytes` of them kept. Not thread-safe (one event loop).
 */
export class BodyPool {
  private readonly free = new Map<number, ArrayBuffer[]>();
  private idleBytes = 0;
  /** The buffers handed out and not yet given back (a body given back twice is ignored). */
  private readonly lent = new WeakSet<ArrayBuffer>();

  /** @throws RangeError for a negative or non-integer `maxIdleBytes`. */
  constructor(readonly maxIdleBytes: number = DEFAULT_POOL_BYTES) {
    if (!Number.isSafeInteger(maxIdleBytes) || maxIdleBytes < 0) throw new RangeError(`BodyPool maxIdleBytes must be an integer ≥ 0, got ${maxIdleBytes}`);
  }

  /** Bytes kept for reuse now. */
  get idle(): number {
    return this.idleBytes;
  }

  /** A buffer of `length` bytes at offset `pad` of its ArrayBuffer (pooled from `POOLED_MIN_BYTES`; its bytes are not zeroed). */
  take(length: number, pad: number): Buffer {
    const need = pad + length;
    if (need < POOLED_MIN_BYTES) return Buffer.from(new ArrayBuffer(need), pad, length);
    const size = 2 ** Math.ceil(Math.log2(need));
    const ab = this.free.get(size)?.pop();
    if (ab !== undefined) this.idleBytes -= size;
    const buffer = ab ?? new ArrayBuffer(size);
    this.lent.add(buffer);
    return Buffer.from(buffer, pad, length);
  }

  /** Give a body from `take` back for reuse (anything else, or a second give, is ignored). The caller must not use it afterwards. */
  give(body: Uint8Array): void {
    const ab = body.buffer;
    if (!(ab instanceof ArrayBuffer) || !this.lent.has(ab)) return;
    this.lent.delete(ab);
    if (this.idleBytes + ab.byteLength > this.maxIdleBytes) return;
    let list = this.free.get(ab.byteLength);
    if (list === undefined) this.free.set(ab.byteLength, (list = []));
    list.push(ab);
    this.idleBytes += ab.byteLength;
  }
}

/** The stream `readBody` reads: the request, or the inflating stream of an encoded body (`receivedEncodedLength`: the encoded bytes read; `source`: the request under it). */
export type BodyStream = Readable & { receivedEncodedLength?: number; source?: Readable };

/**
 * Refuse a body over its limit with 413 (`FST_ERR_CTP_BODY_TOO_LARGE`) once its rest has been
 * read and discarded: from the wire (`payload.source` when the body is inflated: what is past
 * the limit is not inflated), until the body ends or `seen` + the bytes discarded pass
 * `drainBytes`. At once when the client waits for `100 Continue` (nothing was sent), when the
 * declared `Content-Length` is over `drainBytes`, or when the body has already ended.
 * @param seen bytes of the body already read from the wire.
 */
export function refuseBody(payload: BodyStream, headers: IncomingHttpHeaders, drainBytes: number, seen = 0): Promise<never> {
  const tooLarge = new errorCodes.FST_ERR_CTP_BODY_TOO_LARGE();
  const wire = payload.source ?? payload;
  const declared = headers['content-length'] === undefined ? 0 : Number(headers['content-length']);
  const waiting = seen === 0 && /100-continue/i.test(headers.expect ?? '');
  if (waiting || declared > drainBytes || seen > drainBytes || wire.readableEnded) return Promise.reject(tooLarge);
  if (wire !== payload) wire.unpipe();
  return new Promise<never>((_resolve, reject) => {
    let wireBytes = seen;
    const done = (): void => {
      wire.removeListener('data', onData);
      wire.removeListener('end', done);
      wire.removeListener('error', done);
      reject(tooLarge);
    };
    const onData = (chunk: Buffer | string): void => {
      wireBytes += chunk.length;
      if (wireBytes > drainBytes) {
        done();
        return;
      }
      // one chunk per socket per turn of the loop: many bodies drained at once must not read
      // tens of MB in one poll phase while probes and other requests wait
      wire.pause();
      setImmediate(() => wire.resume());
    };
    wire.on('data', onData);
    wire.on('end', done);
    wire.on('error', done);
    wire.resume();
  });
}

/**
 * Read `payload` (the request stream, or the inflating stream of the preParsing hook, which
 * reports the encoded bytes as `receivedEncodedLength`) into one Buffer.
 * @param headers the request headers (`content-length`, `content-encoding`, `inference-header-content-length`).
 * @param limitBytes the body limit, bytes (inflated bytes count for an encoded body).
 * @param drainBytes most bytes of a body over the limit read (on the wire, from its start) and
 *   discarded before the 413 (see the file docs); 0: refuse at once.
 * @returns the body; for a binary-tensor request its byte `h` (the header length) lies at a
 *   multiple of `BINARY_PART_ALIGNMENT` in `body.buffer`.
 */
export function readBody(payload: BodyStream, headers: IncomingHttpHeaders, limitBytes: number, pool?: BodyPool, drainBytes = 0): Promise<Buffer> {
  const encoded = headers['content-encoding'] !== undefined && headers['content-encoding'].trim().toLowerCase() !== 'identity';
  const declared = headers['content-length'] === undefined ? Number.NaN : Number(headers['content-length']);
  if (declared > limitBytes) return refuseBody(payload, headers, drainBytes);
  const headerLength = Number(headers['inference-header-content-length']);
  const pad = Number.isSafeInteger(headerLength) && headerLength > 0 ? (BINARY_PART_ALIGNMENT - (headerLength % BINARY_PART_ALIGNMENT)) % BINARY_PART_ALIGNMENT : 0;
  const placed = (length: number): Buffer => (pool === undefined ? Buffer.from(new ArrayBuffer(pad + length), pad, length) : pool.take(length, pad));
  // Known length (not inflated): one buffer, each chunk copied to its place as it arrives.
  const target = !encoded && Number.isSafeInteger(declared) && declared >= 0 ? placed(declared) : undefined;
  const chunks: Buffer[] = [];
  let received = 0;
  return new Promise<Buffer>((resolve, reject) => {
    const stop = (): void => {
      payload.removeListener('data', onData);
      payload.removeListener('end', onEnd);
      payload.removeListener('error', onError);
    };
    const onData = (raw: Buffer | string): void => {
      const chunk = typeof raw === 'string' ? Buffer.from(raw) : raw;
      const at = received;
      received += chunk.byteLength;
      if (received > limitBytes || (payload.receivedEncodedLength ?? 0) > limitBytes) {
        stop();
        if (target !== undefined) pool?.give(target);
        refuseBody(payload, headers, drainBytes, payload.receivedEncodedLength ?? received).catch(reject);
        return;
      }
      if (target === undefined) chunks.push(chunk);
      else if (received <= target.byteLength) chunk.copy(target, at);
      // more bytes than Content-Length: counted, reported at the end
    };
    const onEnd = (): void => {
      stop();
      if (!Number.isNaN(declared) && (payload.receivedEncodedLength ?? received) !== declared) {
        if (target !== undefined) pool?.give(target);
        reject(new errorCodes.FST_ERR_CTP_INVALID_CONTENT_LENGTH());
        return;
      }
      if (target !== undefined) {
        resolve(target);
        return;
      }
      const body = placed(received);
      let at = 0;
      for (const c of chunks) {
        c.copy(body, at);
        at += c.byteLength;
      }
      resolve(body);
    };
    const onError = (err: Error & { statusCode?: number }): void => {
      stop();
      if (target !== undefined) pool?.give(target);
      if (!(typeof err.statusCode === 'number' && err.statusCode >= 400)) err.statusCode = 400;
      reject(err);
    };
    payload.on('data', onData);
    payload.on('end', onEnd);
    payload.on('error', onError);
    payload.resume();
  });
}
