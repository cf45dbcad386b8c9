/**
 * Reading an HTTP request body into one buffer without holding the event loop (issue 14
 * item 5): every arriving chunk is copied straight to its place in a buffer allocated once
 * from `Content-Length`, so there is no final concatenation of the whole body (a 5 MB
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
 * Errors (fastify's own codes, so the app's error handler words them as for any body):
 * `FST_ERR_CTP_BODY_TOO_LARGE` (413) when `Content-Length` or the bytes received pass the
 * limit, `FST_ERR_CTP_INVALID_CONTENT_LENGTH` (400) when the bytes received differ from
 * `Content-Length`, and a stream error (e.g. an invalid gzip stream) as it is, 400 unless it
 * carries a 4xx status.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { Readable } from 'node:stream';
import { errorCodes } from 'fastify';

/** Alignment of the binary part, bytes: the largest element size of a v2 datatype (FP64, INT64, UINT64). */
export const BINARY_PART_ALIGNMENT = 8;

/**
 * Read `payload` (the request stream, or the inflating stream of the preParsing hook, which
 * reports the encoded bytes as `receivedEncodedLength`) into one Buffer.
 * @param headers the request headers (`content-length`, `content-encoding`, `inference-header-content-length`).
 * @param limitBytes the body limit, bytes (inflated bytes count for an encoded body).
 * @returns the body; for a binary-tensor request its byte `h` (the header length) lies at a
 *   multiple of `BINARY_PART_ALIGNMENT` in `body.buffer`.
 */
export function readBody(payload: Readable & { receivedEncodedLength?: number }, headers: IncomingHttpHeaders, limitBytes: number): Promise<Buffer> {
  const encoded = headers['content-encoding'] !== undefined && headers['content-encoding'].trim().toLowerCase() !== 'identity';
  const declared = headers['content-length'] === undefined ? Number.NaN : Number(headers['content-length']);
  if (declared > limitBytes) return Promise.reject(new errorCodes.FST_ERR_CTP_BODY_TOO_LARGE());
  const headerLength = Number(headers['inference-header-content-length']);
  const pad = Number.isSafeInteger(headerLength) && headerLength > 0 ? (BINARY_PART_ALIGNMENT - (headerLength % BINARY_PART_ALIGNMENT)) % BINARY_PART_ALIGNMENT : 0;
  const placed = (length: number): Buffer => Buffer.from(new ArrayBuffer(pad + length), pad, length);
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
        reject(new errorCodes.FST_ERR_CTP_BODY_TOO_LARGE());
        return;
      }
      if (target === undefined) chunks.push(chunk);
      else if (received <= target.byteLength) chunk.copy(target, at);
      // more bytes than Content-Length: counted, reported at the end
    };
    const onEnd = (): void => {
      stop();
      if (!Number.isNaN(declared) && (payload.receivedEncodedLength ?? received) !== declared) {
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
      if (!(typeof err.statusCode === 'number' && err.statusCode >= 400)) err.statusCode = 400;
      reject(err);
    };
    payload.on('data', onData);
    payload.on('end', onEnd);
    payload.on('error', onError);
    payload.resume();
  });
}
