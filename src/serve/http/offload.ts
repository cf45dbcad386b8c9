/**
 * Decoding and encoding large HTTP inference bodies off the event loop: a pool of
 * `worker_threads` codec threads (`codec-worker.ts`, jobs in `codec-jobs.ts`), so that a 16 MB
 * JSON request or a large JSON response does not hold up liveness probes, metrics and every
 * other request (docs/overload.md "Limits and timeouts").
 *
 * - A JSON part (a JSON body, or a binary request's JSON header) of `decodeMinBytes` or more
 *   goes to a thread; smaller ones are decoded inline. A JSON body's memory is transferred (not
 *   copied; it is not pooled, `app.ts`); a large JSON header is copied out of its binary body,
 *   whose tensor data stays where it is.
 * - A response whose JSON-encoded outputs hold `encodeMinElements` elements or more is encoded
 *   in a thread; its tensors are copied over (they may be views of a batch's shared buffer).
 * - Threads start on first use (or `start()`); each runs one job at a time, the rest wait in
 *   order. A thread that dies fails its job with `internal` and is replaced on the next job.
 *
 * Threads run the TypeScript sources through tsx's ESM loader, registered inside the thread
 * (workers do not inherit the parent's loader, nor take `--import` from `execArgv` here).
 *
 * Thresholds (2-core development machine): decoding JSON runs at ~180 MB/s (`JSON.parse` then
 * `decodeInputData`, load 2.4) and encoding at ~190 ns an FP32 element (`jsonDataText`), so a
 * 256 KiB JSON part costs ~1.4 ms inline and 32,768 elements ~6 ms. Lower thresholds cost more
 * than they save on a busy machine: with 4,096 elements, the event-loop bench's 8,000-element
 * JSON answers went to a thread and throughput fell from 345–419 to 190 MB/s, event-loop p99
 * from 21–35 to 69 ms (load 6–6.5): each hand-off waits for the thread to be scheduled.
 */
import { availableParallelism } from 'node:os';
import type { Worker } from 'node:worker_threads';
import { startTsWorker } from '../../ts-worker.ts';
import type { Logger } from '../../log.ts';
import { ServeError, type InferResponse, type ModelMetadata } from '../inference.ts';
import type { TensorData } from '../../tensor.ts';
import { decodeInferBody, decodeParsed, encodeInferResponse, jsonPartLength, type DecodedInferBody, type EncodedResponse } from './codec.ts';
import type { CodecJob, CodecResult, EncodedBody } from './codec-jobs.ts';
import { DEFAULT_JSON_LIMITS, type JsonLimits } from './limits.ts';

/** JSON parts from this many bytes on are decoded in a codec thread (see the file docs). */
export const DEFAULT_DECODE_MIN_BYTES = 256 * 1024;

/** Responses with this many JSON-encoded elements or more are encoded in a codec thread (see the file docs). */
export const DEFAULT_ENCODE_MIN_ELEMENTS = 32_768;

/**
 * Default number of codec threads: the cores less one, which the event loop keeps (at least 1,
 * at most 4). Measured on the 2-core development machine, 16 concurrent 60 MB JSON bodies
 * (client in the same process, load 6.6–6.8): the longest event-loop stall was 0.37–0.43 s with
 * two threads and 0.26–0.27 s with one, for the same total time (21–24 s).
 */
export function defaultCodecThreads(): number {
  return Math.max(1, Math.min(4, availableParallelism() - 1));
}

export interface OffloadOptions {
  /** Codec threads [`defaultCodecThreads()`]; 0 decodes and encodes everything on the event loop. */
  readonly threads?: number;
  /** [`DEFAULT_DECODE_MIN_BYTES`] */
  readonly decodeMinBytes?: number;
  /** [`DEFAULT_ENCODE_MIN_ELEMENTS`] */
  readonly encodeMinElements?: number;
  /** JSON structure limits [`DEFAULT_JSON_LIMITS`]. */
  readonly jsonLimits?: JsonLimits;
  readonly logger?: Logger;
}

interface Pending {
  readonly job: CodecJob;
  readonly transfer: ArrayBuffer[];
  readonly resolve: (result: CodecResult) => void;
}

interface Slot {
  readonly worker: Worker;
  busy: Pending | undefined;
}

/** The codec thread pool and the decode / encode calls of the infer route (see the file docs). */
export class Offload {
  readonly threads: number;
  readonly decodeMinBytes: number;
  readonly encodeMinElements: number;
  readonly jsonLimits: JsonLimits;
  private readonly slots: Slot[] = [];
  private readonly queue: Pending[] = [];
  private seq = 0;
  private closed = false;
  private readonly logger: Logger | undefined;

  /** @throws RangeError for a negative or non-integer option. */
  constructor(options: OffloadOptions = {}) {
    this.threads = options.threads ?? defaultCodecThreads();
    this.decodeMinBytes = options.decodeMinBytes ?? DEFAULT_DECODE_MIN_BYTES;
    this.encodeMinElements = options.encodeMinElements ?? DEFAULT_ENCODE_MIN_ELEMENTS;
    this.jsonLimits = options.jsonLimits ?? DEFAULT_JSON_LIMITS;
    this.logger = options.logger;
    for (const [name, v] of [['threads', this.threads], ['decodeMinBytes', this.decodeMinBytes], ['encodeMinElements', this.encodeMinElements]] as const) {
      if (!Number.isSafeInteger(v) || v < 0) throw new RangeError(`codec ${name} must be an integer ≥ 0, got ${v}`);
    }
  }

  /** Start every thread now (else on first use): `abacus serve` does, so the first large body does not wait ~0.5 s for one. */
  start(): void {
    while (!this.closed && this.slots.length < this.threads) this.spawn();
  }

  /**
   * Decode an infer request body (`codec.ts` `decodeInferBody`), its JSON part in a codec thread
   * when it is large. A JSON body's buffer is transferred to the thread: `body` is then empty.
   * @throws ServeError bad_request as `decodeInferBody`; internal when a codec thread failed.
   */
  async decode(body: Buffer, headerLength: string | undefined, metadata: ModelMetadata): Promise<DecodedInferBody> {
    const model = metadata.name;
    const jsonEnd = jsonPartLength(body.byteLength, headerLength, model);
    if (this.threads === 0 || jsonEnd < this.decodeMinBytes || (headerLength !== undefined && jsonEnd === 0)) return decodeInferBody(body, headerLength, metadata, this.jsonLimits);
    const bodyLength = body.byteLength;
    let text: Uint8Array;
    let transfer: ArrayBuffer[];
    if (headerLength === undefined && body.buffer instanceof ArrayBuffer) {
      text = new Uint8Array(body.buffer, body.byteOffset, body.byteLength);
      transfer = [body.buffer];
    } else {
      text = Uint8Array.prototype.slice.call(body, 0, jsonEnd);
      transfer = [text.buffer as ArrayBuffer];
    }
    const result = await this.run({ op: 'decode', text, bodyLength, headerLength, model, inputs: metadata.inputs, limits: this.jsonLimits }, transfer);
    if (!result.ok) throw new ServeError(result.code, result.message, result.id === undefined ? undefined : { id: result.id });
    const raw = result.value as Record<string, unknown>;
    // a JSON body (now in the thread's hands) has no binary part: nothing follows its JSON
    return headerLength === undefined ? decodeParsed(raw, new Uint8Array(0), undefined, 0, model) : decodeParsed(raw, body, headerLength, jsonEnd, model);
  }

  /**
   * Encode a response (`codec.ts` `encodeInferResponse`), in a codec thread when its JSON outputs are large.
   * @throws ServeError internal when a codec thread failed.
   */
  async encode(response: InferResponse, binaryOutputs: ReadonlySet<string> | 'all'): Promise<EncodedResponse> {
    let elements = 0;
    for (const [name, tensor] of Object.entries(response.outputs)) if (binaryOutputs !== 'all' && !binaryOutputs.has(name)) elements += tensor.data.length;
    if (this.threads === 0 || elements < this.encodeMinElements) return encodeInferResponse(response, binaryOutputs);
    const transfer: ArrayBuffer[] = [];
    const outputs: InferResponse['outputs'] = Object.fromEntries(
      Object.entries(response.outputs).map(([name, tensor]) => {
        const data = copied(tensor.data);
        if (!Array.isArray(data)) transfer.push(data.buffer as ArrayBuffer);
        return [name, { ...tensor, data }];
      }),
    );
    const result = await this.run({ op: 'encode', response: { ...response, outputs }, binaryOutputs: binaryOutputs === 'all' ? 'all' : [...binaryOutputs] }, transfer);
    if (!result.ok) throw new ServeError(result.code, result.message);
    const encoded = result.value as EncodedBody;
    return { body: Buffer.from(encoded.body.buffer, encoded.body.byteOffset, encoded.body.byteLength), contentType: encoded.contentType, ...(encoded.headerLength === undefined ? {} : { headerLength: encoded.headerLength }) };
  }

  /** Stop every thread; jobs still waiting fail with `internal`. Idempotent. */
  async close(): Promise<void> {
    this.closed = true;
    for (const p of this.queue.splice(0)) p.resolve(gone('the server is closing'));
    const slots = this.slots.splice(0);
    await Promise.all(slots.map((s) => s.worker.terminate()));
    for (const s of slots) s.busy?.resolve(gone('the server is closing'));
  }

  private run(job: CodecJob, transfer: ArrayBuffer[]): Promise<CodecResult> {
    if (this.closed) return Promise.resolve(gone('the server is closing'));
    return new Promise<CodecResult>((resolve) => {
      // an encode finishes a request that was served: it goes before every decode waiting (FIFO
      // among encodes), so that answers are not held up behind bodies that may yet be shed
      const at = job.op === 'encode' ? this.queue.findIndex((p) => p.job.op !== 'encode') : -1;
      if (at < 0) this.queue.push({ job, transfer, resolve });
      else this.queue.splice(at, 0, { job, transfer, resolve });
      this.dispatch();
    });
  }

  private dispatch(): void {
    while (this.queue.length > 0) {
      let slot = this.slots.find((s) => s.busy === undefined);
      if (slot === undefined && this.slots.length < this.threads) slot = this.spawn();
      if (slot === undefined) return;
      const pending = this.queue.shift()!;
      try {
        slot.worker.postMessage({ seq: ++this.seq, job: pending.job }, pending.transfer);
        slot.busy = pending;
      } catch (err) {
        // a job that cannot be sent (a buffer that cannot be transferred): its own failure only
        pending.resolve(gone(err instanceof Error ? err.message : String(err)));
      }
    }
  }

  private spawn(): Slot {
    const worker = startTsWorker(new URL('./codec-worker.ts', import.meta.url));
    worker.unref();
    const slot: Slot = { worker, busy: undefined };
    this.slots.push(slot);
    worker.on('message', (message: { seq: number; result: CodecResult }) => {
      const pending = slot.busy;
      slot.busy = undefined;
      pending?.resolve(message.result);
      this.dispatch();
    });
    const lost = (why: string): void => {
      const at = this.slots.indexOf(slot);
      if (at < 0) return;
      this.slots.splice(at, 1);
      if (!this.closed) this.logger?.error({ why }, 'a codec thread failed; it is replaced on the next large body');
      slot.busy?.resolve(gone(why));
      slot.busy = undefined;
      if (!this.closed) this.dispatch();
    };
    worker.on('error', (err) => lost(err.stack ?? err.message));
    worker.on('exit', (code) => lost(`exited with code ${code}`));
    return slot;
  }
}

/** The result of a job whose thread is gone. */
function gone(why: string): CodecResult {
  return { ok: false, code: 'internal', message: `a codec thread failed (${why.slice(0, 200)})` };
}

/** A copy of tensor data in its own buffer (typed arrays may view a larger shared buffer). */
function copied(data: TensorData): TensorData {
  return Array.isArray(data) ? data : (data.slice() as TensorData);
}
