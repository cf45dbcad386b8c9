/**
 * Response compression of the HTTP front end: `Accept-Encoding` negotiation (RFC 9110 §12.5.3)
 * and a fastify `onSend` hook that compresses JSON and binary-tensor bodies with Node's zlib
 * (no compression plugin is installed in this project; `@fastify/compress` would be the
 * library otherwise).
 *
 * - Codings served: `gzip` (also under its alias `x-gzip`) and `deflate` (zlib format, RFC 9110
 *   §8.4.1.2), the two tritonclient asks for with `response_compression_algorithm`. The one
 *   with the highest q-value wins; on a tie gzip. `*` stands for every coding not listed;
 *   `q=0` refuses one. No header, no acceptable coding, or a body under `minBytes`: the body is
 *   sent as it is (identity), never a 406.
 * - Compression runs on libuv's thread pool (`zlib.gzip` / `zlib.deflate`, async), so a large
 *   body does not hold the event loop.
 * - Level `Z_BEST_SPEED` (1) by default: the server answers against latency targets, and on
 *   JSON tensor text level 1 already keeps most of the ratio of the default level 6 at a
 *   fraction of its time (zlib manual: levels trade speed for ratio).
 * - A binary-tensor response keeps `Inference-Header-Content-Length` as the byte length of the
 *   JSON header in the *uncompressed* body, as Triton does: the client inflates, then splits.
 * - Compressible answers carry `Vary: Accept-Encoding` (RFC 9110 §12.5.5) so caches keep the
 *   encodings apart.
 */
import { promisify } from 'node:util';
import { constants, deflate, gzip } from 'node:zlib';
import type { FastifyReply, FastifyRequest } from 'fastify';

/** Response codings this server can produce, in preference order on equal q. */
export const RESPONSE_ENCODINGS = ['gzip', 'deflate'] as const;
export type ResponseEncoding = (typeof RESPONSE_ENCODINGS)[number];

/** Bodies smaller than this (bytes) are sent uncompressed [1024, as @fastify/compress's `threshold`]: a header costs more than it saves. */
export const DEFAULT_COMPRESS_MIN_BYTES = 1024;

export interface CompressionOptions {
  /** Smallest body compressed, bytes [`DEFAULT_COMPRESS_MIN_BYTES`]. */
  readonly minBytes?: number;
  /** zlib level, 0 (store) … 9 (smallest) [1 = `Z_BEST_SPEED`]. */
  readonly level?: number;
}

const gzipAsync = promisify(gzip);
const deflateAsync = promisify(deflate);

/**
 * The coding to answer with for an `Accept-Encoding` header value, or undefined for identity.
 * Malformed members are skipped (a q-value that is not a number in [0, 1] counts as absent,
 * i.e. the member is ignored) — a client's odd header never fails its request.
 * @param header the header as received (several headers joined with `,`); undefined: absent.
 */
export function negotiateEncoding(header: string | undefined): ResponseEncoding | undefined {
  if (header === undefined) return undefined;
  const q = new Map<string, number>();
  for (const member of header.split(',')) {
    const [rawName, ...params] = member.split(';');
    const name = rawName?.trim().toLowerCase() ?? '';
    if (name === '') continue;
    let weight = 1;
    for (const p of params) {
      const m = /^\s*q\s*=\s*(.*?)\s*$/i.exec(p);
      if (m === null) continue;
      const v = /^[0-9.]+$/.test(m[1] ?? '') ? Number(m[1]) : Number.NaN;
      weight = Number.isFinite(v) && v >= 0 && v <= 1 ? v : Number.NaN;
    }
    if (Number.isNaN(weight)) continue;
    const coding = name === 'x-gzip' ? 'gzip' : name;
    q.set(coding, Math.max(q.get(coding) ?? 0, weight));
  }
  const star = q.get('*');
  let best: ResponseEncoding | undefined;
  let bestQ = 0;
  for (const coding of RESPONSE_ENCODINGS) {
    const w = q.get(coding) ?? star ?? 0;
    if (w > bestQ) {
      best = coding;
      bestQ = w;
    }
  }
  return best;
}

/**
 * A fastify `onSend` hook compressing string and Buffer bodies (see the file docs). Bodies
 * that already carry a `Content-Encoding`, streams and empty bodies pass unchanged.
 * @throws RangeError for a `level` outside [0, 9] or a negative / non-integer `minBytes`.
 */
export function compressionHook(options: CompressionOptions = {}): (request: FastifyRequest, reply: FastifyReply, payload: unknown, done: (err: Error | null, payload?: unknown) => void) => void {
  const minBytes = options.minBytes ?? DEFAULT_COMPRESS_MIN_BYTES;
  const level = options.level ?? constants.Z_BEST_SPEED;
  if (!Number.isSafeInteger(minBytes) || minBytes < 0) throw new RangeError(`compression minBytes must be an integer ≥ 0, got ${minBytes}`);
  if (!Number.isInteger(level) || level < 0 || level > 9) throw new RangeError(`compression level must be an integer in [0, 9], got ${level}`);
  // A callback hook, answered synchronously when nothing is compressed: an async hook would
  // defer every answer by a tick (and let a pipelined request's parse error overtake it).
  return (request, reply, payload, done) => {
    if ((typeof payload !== 'string' && !Buffer.isBuffer(payload)) || reply.getHeader('content-encoding') !== undefined) {
      done(null, payload);
      return;
    }
    const size = typeof payload === 'string' ? Buffer.byteLength(payload, 'utf8') : payload.byteLength;
    if (size < Math.max(minBytes, 1)) {
      done(null, payload);
      return;
    }
    void reply.header('vary', varyWith(reply.getHeader('vary')));
    const accept = request.headers['accept-encoding'];
    const encoding = negotiateEncoding(Array.isArray(accept) ? accept.join(',') : accept);
    if (encoding === undefined) {
      done(null, payload);
      return;
    }
    const body = typeof payload === 'string' ? Buffer.from(payload, 'utf8') : payload;
    (encoding === 'gzip' ? gzipAsync(body, { level }) : deflateAsync(body, { level })).then(
      (compressed) => {
        void reply.header('content-encoding', encoding);
        void reply.removeHeader('content-length');
        done(null, compressed);
      },
      (err: Error) => done(err),
    );
  };
}

function varyWith(current: unknown): string {
  const text = Array.isArray(current) ? current.join(', ') : typeof current === 'string' ? current : '';
  if (text === '') return 'Accept-Encoding';
  return /(^|,)\s*(accept-encoding|\*)\s*(,|$)/i.test(text) ? text : `${text}, Accept-Encoding`;
}
