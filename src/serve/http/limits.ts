/**
 * Request size and shape limits of the HTTP front end, checked before the work they bound
 * (docs/overload.md "Limits and timeouts").
 *
 * - **Body bytes, by kind.** A body whose whole content is JSON (no
 *   `Inference-Header-Content-Length` header: an inference request in JSON, a repository
 *   request) may have at most `maxJsonBodyBytes`; a binary-tensor request (the header present)
 *   at most `maxBodyBytes` in all, and its JSON header at most `maxJsonBodyBytes`. JSON costs
 *   about 5.5 ms of CPU per MB to parse and turn into tensors, and 4–5× its size in memory while
 *   it does (`bench/event-loop.ts`); binary tensor data costs a copy. The limit is known from the
 *   headers, so a `Content-Length` over it is refused before any byte of the body is read.
 * - **JSON structure** (`scanJson`): nesting depth and object keys are counted by a byte scan
 *   before `JSON.parse` runs, so a 38 MB object of 3 M keys (13 s in `JSON.parse`) or 2 MB of
 *   `[` (a RangeError after 0.9 s) costs one pass over its bytes. Elements are checked against
 *   the declared shape before any tensor is allocated (`serve/tensors.ts`).
 */
import type { IncomingHttpHeaders } from 'node:http';

/** Default limit of a binary-tensor request body, bytes (64 MiB: a batch of 64 × 3 × 224 × 224 FP32 images is 38.5 MB). */
export const DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024;

/**
 * Default limit of a JSON body (and of a binary request's JSON header), bytes: 16 MiB, about
 * 0.8 M FP32 values as a Python or JavaScript client writes them (~20 bytes each), e.g. a batch
 * of 5 × 3 × 224 × 224 images; ~90 ms of one core to decode (measured 180 MB/s, load 2.4) and
 * ~80 MB of transient memory. Larger tensors belong in binary tensor data.
 */
export const DEFAULT_MAX_JSON_BODY_BYTES = 16 * 1024 * 1024;

/**
 * Default deepest JSON nesting: 64 levels. An inference request is 3 levels above its data
 * (`{"inputs": [{"data": …}]}`), and nested data adds one per tensor dim; no served model has
 * tensors of more than a handful of dims.
 */
export const DEFAULT_JSON_MAX_DEPTH = 64;

/**
 * Default most object keys in one JSON body: 10,000. A request has a few per input plus its
 * `parameters`; 10,000 keys parse in ~2 ms (measured, load 2.4), while V8's `JSON.parse` slows
 * to ~4 µs a key on objects of millions of keys.
 */
export const DEFAULT_JSON_MAX_KEYS = 10_000;

/** The byte limits a request body is held to. */
export interface BodyLimits {
  /** Largest binary-tensor request body, bytes (`--max-body-bytes`). */
  readonly maxBodyBytes: number;
  /** Largest JSON body or JSON header of a binary request, bytes (`--max-json-body-bytes`). */
  readonly maxJsonBodyBytes: number;
}

/** The limit a request's body is held to, and how to say so. */
export interface AppliedLimit {
  /** Most body bytes (inflated bytes for an encoded body). */
  readonly bytes: number;
  /** `JSON` or `binary`: which kind of body the limit is for. */
  readonly kind: 'JSON' | 'binary';
  /** The `abacus serve` flag that sets it. */
  readonly flag: '--max-json-body-bytes' | '--max-body-bytes';
}

/** The limit for a request with these headers: binary when `Inference-Header-Content-Length` is present, else JSON. */
export function appliedLimit(headers: IncomingHttpHeaders, limits: BodyLimits): AppliedLimit {
  return headers['inference-header-content-length'] === undefined
    ? { bytes: limits.maxJsonBodyBytes, kind: 'JSON', flag: '--max-json-body-bytes' }
    : { bytes: limits.maxBodyBytes, kind: 'binary', flag: '--max-body-bytes' };
}

/**
 * Why a request must be refused with 413 from its headers alone, or undefined: a declared
 * `Content-Length` over the applied limit, or an `Inference-Header-Content-Length` over the JSON
 * limit. An unparsable header is left to the decoder (400 naming it).
 */
export function declaredTooLarge(headers: IncomingHttpHeaders, limits: BodyLimits): string | undefined {
  const limit = appliedLimit(headers, limits);
  const declared = headers['content-length'] === undefined ? Number.NaN : Number(headers['content-length']);
  if (declared > limit.bytes) return tooLargeMessage(limit, headers['content-encoding'] !== undefined, declared);
  const header = headers['inference-header-content-length'];
  const jsonLength = typeof header === 'string' && /^\s*\d{1,15}\s*$/.test(header) ? Number(header) : Number.NaN;
  // a header past the body's end is a bad header (the decoder's 400 names it), not a large body
  if (jsonLength > limits.maxJsonBodyBytes && !(jsonLength > declared)) {
    return `the JSON header of the binary request (Inference-Header-Content-Length: ${jsonLength}) is larger than the limit of ${limits.maxJsonBodyBytes} bytes for JSON (abacus serve --max-json-body-bytes); send tensor data as binary data`;
  }
  return undefined;
}

/** The 413 message: which limit, of what kind, set by which flag. */
export function tooLargeMessage(limit: AppliedLimit, encoded: boolean, declared?: number): string {
  const size = declared === undefined || Number.isNaN(declared) ? '' : `; Content-Length: ${declared}`;
  const advice = limit.kind === 'JSON' ? '; larger tensors can be sent as binary tensor data (Inference-Header-Content-Length), up to --max-body-bytes' : '';
  return `the request body${encoded ? ' (decompressed)' : ''} is larger than the limit of ${limit.bytes} bytes for ${limit.kind} bodies (abacus serve ${limit.flag})${size}${advice}`;
}

/** The structural limits `scanJson` enforces. */
export interface JsonLimits {
  /** Deepest nesting of arrays and objects [`DEFAULT_JSON_MAX_DEPTH`]. */
  readonly maxDepth: number;
  /** Most object keys in the whole text [`DEFAULT_JSON_MAX_KEYS`]. */
  readonly maxKeys: number;
}

export const DEFAULT_JSON_LIMITS: JsonLimits = { maxDepth: DEFAULT_JSON_MAX_DEPTH, maxKeys: DEFAULT_JSON_MAX_KEYS };

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const COLON = 0x3a;
const OPEN_BRACE = 0x7b;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACE = 0x7d;
const CLOSE_BRACKET = 0x5d;

/**
 * One pass over JSON text `bytes[start, end)` (UTF-8) counting nesting depth and object keys
 * outside strings; stops at the first limit passed. Does not validate the JSON (`JSON.parse`
 * does that next): on malformed text the counts are those of its brackets and colons.
 * Cost: ~1–3 ns a byte (a byte loop; strings are skipped with `indexOf`).
 * @returns undefined within the limits, else a message naming the limit (for a 400).
 */
export function scanJson(bytes: Uint8Array, start: number, end: number, limits: JsonLimits): string | undefined {
  let depth = 0;
  let keys = 0;
  for (let i = start; i < end; i++) {
    const c = bytes[i];
    if (c === QUOTE) {
      // skip the string: the next quote not escaped by an odd run of backslashes
      let j = i;
      for (;;) {
        j = bytes.indexOf(QUOTE, j + 1);
        if (j < 0 || j >= end) return undefined; // unterminated: JSON.parse reports it
        let k = j - 1;
        while (k > i && bytes[k] === BACKSLASH) k--;
        if ((j - 1 - k) % 2 === 0) break;
      }
      i = j;
    } else if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      if (++depth > limits.maxDepth) return `the JSON body nests arrays and objects deeper than ${limits.maxDepth} levels (at byte ${i - start})`;
    } else if (c === CLOSE_BRACE || c === CLOSE_BRACKET) depth--;
    else if (c === COLON) {
      if (++keys > limits.maxKeys) return `the JSON body has more than ${limits.maxKeys} object keys (at byte ${i - start}); an inference request has a few per input`;
    }
  }
  return undefined;
}
