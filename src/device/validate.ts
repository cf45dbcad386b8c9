/**
 * Group validation, done before anything runs (Device.runGroup contract), shared by every
 * Device implementation (`device/ort`, `device/sim`): it sees only the loaded specs and the
 * device's book of queries (`QueryBookView`), nothing of how a device runs them.
 *
 * - Malformed group (programming errors of the caller): `TypeError` for a field of the wrong
 *   type, `RangeError` naming the field and its valid range for an unknown service, a bad
 *   `start`/`end`/`batchSize` (≤ `MAX_BATCH_SIZE`)/`seqLen` (≤ `MAX_SEQ_LEN`), or a `queryId`
 *   used twice in the group.
 * - Requests that do not fit the service or the query's state: `BadRequestError` naming the
 *   segment and the input — input kind inconsistent with `start` ('tensors' needs start 0,
 *   'resume' needs kept state at exactly `start`), a `queryId` whose kept or lost state belongs
 *   to another service (whatever the input kind; the message names the owner), tensor
 *   names/dtypes/shapes vs the spec's inputs, a query that already has a segment in flight, unresolvable synthetic shapes, a
 *   `batchSize` other than the fixed batch of a model whose inputs declare a numeric dim 0
 *   (`fixedBatchOf`: such a model runs at that batch only, whatever a segment says), a
 *   `seqLen` above the model's maximum, an `intraOpThreads` that is not an integer in
 *   [1, `maxIntraOpThreads`] (the device's limit; `MAX_INTRA_OP_THREADS` when it has none).
 */
import { BadRequestError } from '../errors.ts';
import { MAX_BATCH_SIZE, MAX_SEQ_LEN, type ModelSpec } from '../model/spec.ts';
import type { HostTensor, TensorDataType, TensorMap } from '../tensor.ts';
import { elementCount } from '../tensor.ts';
import type { Segment } from './device.ts';
import { effectiveSeqLen, fixedBatchOf, resolvedBoundary } from '../model/boundary.ts';

/** Where a query's state stands between segments (kept by the device). */
export interface KeptQuery {
  readonly service: string;
  /** The operator its next segment must start at. */
  readonly next: number;
  readonly batchSize: number;
  readonly seqLen: number;
  /** Its other dynamic axes (`DynamicAxes.symbols`) as its inputs gave them; absent: the defaults. */
  readonly symbols?: Readonly<Record<string, number>>;
}

/** A query whose state was lost (executor died, segment failed, evicted). */
export interface LostQuery {
  readonly service: string;
  /** Why, for the error result of its next resume. */
  readonly reason: string;
}

/** What validation needs to know about the device's queries. */
export interface QueryBookView {
  readonly kept: ReadonlyMap<string, KeptQuery>;
  /** Queries whose state was lost: a resume yields an error result. */
  readonly lost: ReadonlyMap<string, LostQuery>;
  /** Queries with a segment running: queryId → service. */
  readonly inFlight: ReadonlyMap<string, string>;
}

/** Largest `intraOpThreads` a segment may ask for on a device without a limit of its own (the simulator, which ignores it). */
export const MAX_INTRA_OP_THREADS = 1024;

const TYPED_ARRAY: Readonly<Record<TensorDataType, { readonly name: string; readonly is: (d: unknown) => boolean }>> = {
  float32: { name: 'Float32Array', is: (d) => d instanceof Float32Array },
  float64: { name: 'Float64Array', is: (d) => d instanceof Float64Array },
  float16: { name: 'Uint16Array', is: (d) => d instanceof Uint16Array },
  int64: { name: 'BigInt64Array', is: (d) => d instanceof BigInt64Array },
  int32: { name: 'Int32Array', is: (d) => d instanceof Int32Array },
  uint8: { name: 'Uint8Array', is: (d) => d instanceof Uint8Array },
  int8: { name: 'Int8Array', is: (d) => d instanceof Int8Array },
  bool: { name: 'Uint8Array', is: (d) => d instanceof Uint8Array },
  uint16: { name: 'Uint16Array', is: (d) => d instanceof Uint16Array },
  int16: { name: 'Int16Array', is: (d) => d instanceof Int16Array },
  uint32: { name: 'Uint32Array', is: (d) => d instanceof Uint32Array },
  uint64: { name: 'BigUint64Array', is: (d) => d instanceof BigUint64Array },
  string: { name: 'an array of strings', is: (d) => Array.isArray(d) && d.every((s) => typeof s === 'string') },
};

function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null;
}

/**
 * Validate a whole group against the loaded services and the query book.
 * @throws TypeError / RangeError / BadRequestError as described in the module docs; the
 *   message names the segment index, the field and the valid range or the expected value.
 */
export function validateGroup(group: readonly Segment[], services: ReadonlyMap<string, ModelSpec>, book: QueryBookView, deviceId: string, maxIntraOpThreads = MAX_INTRA_OP_THREADS): void {
  const list: unknown = group;
  if (!Array.isArray(list)) throw new TypeError(`group must be an array of segments, got ${typeof group}`);
  const seen = new Map<string, number>();
  group.forEach((seg: unknown, i) => {
    const at = `group[${i}]`;
    if (!isObject(seg)) throw new TypeError(`${at} must be a segment object`);
    const s = seg as unknown as Segment;
    if (typeof s.service !== 'string') throw new TypeError(`${at}.service must be a string`);
    const spec = services.get(s.service);
    if (!spec) {
      const loaded = [...services.keys()];
      throw new RangeError(`${at}.service '${s.service}' is not loaded on ${deviceId} (loaded: ${loaded.length ? loaded.join(', ') : 'none'})`);
    }
    if (typeof s.queryId !== 'string' || s.queryId.length === 0) throw new TypeError(`${at}.queryId must be a non-empty string`);
    const n = spec.operators.length;
    if (typeof s.start !== 'number' || !Number.isInteger(s.start) || s.start < 0 || s.start >= n) {
      throw new RangeError(`${at}.start ${String(s.start)} of service ${s.service} must be an integer in [0, ${n - 1}]`);
    }
    if (typeof s.end !== 'number' || !Number.isInteger(s.end) || s.end <= s.start || s.end > n) {
      throw new RangeError(`${at}.end ${String(s.end)} of service ${s.service} must be an integer in [${s.start + 1}, ${n}]`);
    }
    if (typeof s.batchSize !== 'number' || !Number.isInteger(s.batchSize) || s.batchSize < 1 || s.batchSize > MAX_BATCH_SIZE) {
      throw new RangeError(`${at}.batchSize ${String(s.batchSize)} must be an integer in [1, ${MAX_BATCH_SIZE}]`);
    }
    const fixedBatch = fixedBatchOf(spec);
    if (fixedBatch !== undefined && s.batchSize !== fixedBatch) {
      throw new BadRequestError(
        `${at}.batchSize ${s.batchSize}: service ${s.service} has a fixed batch of ${fixedBatch} (model ${spec.name} declares dim 0 of its inputs as ${fixedBatch}), so its segments must use batchSize ${fixedBatch}`,
      );
    }
    if (typeof s.seqLen !== 'number' || !Number.isInteger(s.seqLen) || s.seqLen < 0 || s.seqLen > MAX_SEQ_LEN) {
      throw new RangeError(`${at}.seqLen ${String(s.seqLen)} must be an integer in [0, ${MAX_SEQ_LEN}] (0 = the model's default)`);
    }
    if (spec.maxSeqLen !== undefined && s.seqLen > spec.maxSeqLen) {
      throw new BadRequestError(`${at}.seqLen ${s.seqLen} exceeds ${s.service}'s maximum sequence length ${spec.maxSeqLen}`);
    }
    const threads: unknown = s.intraOpThreads;
    if (threads !== undefined && (typeof threads !== 'number' || !Number.isInteger(threads) || threads < 1 || threads > maxIntraOpThreads)) {
      throw new BadRequestError(`${at}.intraOpThreads ${typeof threads === 'number' ? String(threads) : typeof threads} must be an integer in [1, ${maxIntraOpThreads}] (the intra-op threads of the segment on ${deviceId}; leave it out for the device's default)`);
    }
    const dup = seen.get(s.queryId);
    if (dup !== undefined) throw new RangeError(`${at}.queryId '${s.queryId}' is already used by group[${dup}]; a group holds at most one segment per query`);
    seen.set(s.queryId, i);
    if (book.inFlight.has(s.queryId)) throw new BadRequestError(`${at}: query ${s.queryId} already has a segment running in another group`);
    validateInput(at, s, spec, book);
  });
}

function validateInput(at: string, s: Segment, spec: ModelSpec, book: QueryBookView): void {
  const input: unknown = s.input;
  if (!isObject(input) || typeof input.kind !== 'string') throw new TypeError(`${at}.input must be { kind: 'tensors' | 'resume' | 'synthetic', … }`);
  if (input.kind === 'tensors' || input.kind === 'synthetic') {
    // A fresh start replaces the query's kept (or lost) state — only its own service's.
    const owner = book.kept.get(s.queryId)?.service ?? book.lost.get(s.queryId)?.service;
    if (owner !== undefined && owner !== s.service) {
      throw new BadRequestError(`${at}: query ${s.queryId} belongs to service ${owner}, not ${s.service} (its state is kept there); release it with releaseQuery('${owner}', '${s.queryId}') or use another queryId`);
    }
  }
  switch (input.kind) {
    case 'tensors': {
      if (s.start !== 0) throw new BadRequestError(`${at}.input.kind 'tensors' needs start 0 (got start ${s.start}); continue a query with 'resume' or profile with 'synthetic'`);
      if (!isObject(input.tensors)) throw new TypeError(`${at}.input.tensors must be an object of tensors by input name`);
      checkInputTensors(at, spec, input.tensors as TensorMap, s.batchSize, s.seqLen);
      return;
    }
    case 'resume': {
      const lost = book.lost.get(s.queryId);
      if (lost) {
        if (lost.service !== s.service) throw new BadRequestError(`${at}: query ${s.queryId} belongs to service ${lost.service}, not ${s.service}`);
        return; // answered with an error result, not thrown
      }
      const kept = book.kept.get(s.queryId);
      if (!kept) {
        throw new BadRequestError(`${at}.input.kind 'resume': query ${s.queryId} has no kept state (never started, finished, or released); its first segment needs 'tensors' or 'synthetic'`);
      }
      if (kept.service !== s.service) throw new BadRequestError(`${at}: query ${s.queryId} belongs to service ${kept.service}, not ${s.service}`);
      if (kept.next !== s.start) throw new BadRequestError(`${at}.start ${s.start}: query ${s.queryId} stopped before operator ${kept.next}, so it must resume at start ${kept.next}`);
      if (kept.batchSize !== s.batchSize) throw new BadRequestError(`${at}.batchSize ${s.batchSize}: query ${s.queryId} was started with batchSize ${kept.batchSize}`);
      if (effectiveSeqLen(spec, kept.seqLen) !== effectiveSeqLen(spec, s.seqLen)) {
        throw new BadRequestError(`${at}.seqLen ${s.seqLen}: query ${s.queryId} was started with seqLen ${kept.seqLen}`);
      }
      return;
    }
    case 'synthetic': {
      if (typeof input.seed !== 'number' || !Number.isFinite(input.seed)) throw new TypeError(`${at}.input.seed must be a finite number`);
      resolvedBoundary(spec, s.start, s.batchSize, s.seqLen); // throws BadRequestError for unresolvable dims
      return;
    }
    default:
      throw new TypeError(`${at}.input.kind '${input.kind}' is not one of 'tensors', 'resume', 'synthetic'`);
  }
}

/**
 * Check a query's own input tensors against the spec's inputs: every input present, no
 * unknown names, dtype and typed array class, rank and dims (batch axis = batchSize,
 * sequence axis = seqLen or the default, other symbolic dims consistent across inputs),
 * element count = product of dims.
 * @throws BadRequestError naming the input.
 */
export function checkInputTensors(at: string, spec: ModelSpec, tensors: TensorMap, batchSize: number, seqLen: number): void {
  const names = spec.inputs.map((t) => t.name);
  for (const name of Object.keys(tensors)) {
    if (!names.includes(name)) throw new BadRequestError(`${at}: unknown input '${name}' for ${spec.name} (inputs: ${names.join(', ')})`);
  }
  const seq = effectiveSeqLen(spec, seqLen);
  const symbols = new Map<string, number>();
  for (const want of spec.inputs) {
    const t: HostTensor | undefined = tensors[want.name];
    const label = `${at}: input '${want.name}' of ${spec.name}`;
    if (!t) throw new BadRequestError(`${label} is missing (inputs: ${names.join(', ')})`);
    if (t.dataType !== want.dataType) throw new BadRequestError(`${label} must be ${want.dataType}, got ${String(t.dataType)}`);
    const ta = TYPED_ARRAY[want.dataType];
    if (!ta.is(t.data)) throw new BadRequestError(`${label} (${want.dataType}) needs its data in a ${ta.name}`);
    if (!Array.isArray(t.dims) || t.dims.length !== want.shape.length) {
      throw new BadRequestError(`${label} must have rank ${want.shape.length} [${want.shape.join(', ')}], got dims [${String(t.dims)}]`);
    }
    want.shape.forEach((d, i) => {
      const got = t.dims[i];
      if (typeof got !== 'number' || !Number.isInteger(got) || got < 0) throw new BadRequestError(`${label} dim ${i} must be a non-negative integer, got ${String(got)}`);
      let expected: number | undefined;
      if (typeof d === 'number') expected = d;
      else if (d === spec.dynamicAxes.batch) expected = batchSize;
      else if (d === spec.dynamicAxes.seq && seq > 0) expected = seq;
      else {
        expected = symbols.get(d);
        if (expected === undefined) symbols.set(d, got);
      }
      if (expected !== undefined && got !== expected) {
        const why = typeof d === 'number' ? '' : d === spec.dynamicAxes.batch ? ' (batchSize)' : d === spec.dynamicAxes.seq ? ' (seqLen)' : ` (symbolic '${d}' as in the other inputs)`;
        throw new BadRequestError(`${label} dim ${i} must be ${expected}${why}, got ${got} (shape [${want.shape.join(', ')}])`);
      }
    });
    if (t.data.length !== elementCount(t.dims)) throw new BadRequestError(`${label} has ${t.data.length} elements but dims [${t.dims.join(', ')}] need ${elementCount(t.dims)}`);
  }
}
