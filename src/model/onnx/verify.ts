/**
 * Checking a partition on onnxruntime-node: run the whole model, run the operator sub-models
 * one after the other carrying the boundary tensors (inputs/outputs/passthrough as in
 * `model/spec.ts`), and compare. The one implementation of "sequential operators equal the
 * whole model" (docs/models.md "Operators on disk") used by the partition, import and zoo tests (and, through
 * `test/helpers/run-operators.ts`, the device tests); not a serving path (that is `device/ort`).
 *
 * Models may be given as a ModelProto or as the path of an `.onnx` file (an artifact's
 * `modelPath` / `operatorPaths`); tensors as onnxruntime tensors or `HostTensor`s.
 */
import * as ort from 'onnxruntime-node';
import { isHostTensor, toOrtTensor, type TensorLike } from '../../ort-tensor.ts';
import { halfToNumber } from '../../tensor.ts';

export { toOrtTensor, type TensorLike };
import type { ModelSpec } from '../spec.ts';
import { onnx } from './proto.ts';
import type { OnnxTypes } from './proto.ts';

/** A model to run: a ModelProto, or the path of an `.onnx` file. */
export type ModelSource = OnnxTypes.IModelProto | string;

/** Session options for checks: CPU, one thread (the machine is shared), default optimizations. */
const CHECK_SESSION_OPTIONS: ort.InferenceSession.SessionOptions = { intraOpNumThreads: 1, interOpNumThreads: 1, executionProviders: ['cpu'] };

async function createSession(model: ModelSource, options: ort.InferenceSession.SessionOptions): Promise<ort.InferenceSession> {
  return typeof model === 'string' ? ort.InferenceSession.create(model, options) : ort.InferenceSession.create(onnx.ModelProto.encode(model).finish(), options);
}

/**
 * Run one ONNX model once on the CPU provider with the feeds it declares as inputs (extra feeds
 * are ignored); the session is released before returning.
 * @throws RangeError naming the input when `feeds` lacks one; onnxruntime's error when it fails.
 */
export async function runOnnx(
  model: ModelSource,
  feeds: Readonly<Record<string, TensorLike>>,
  options: ort.InferenceSession.SessionOptions = CHECK_SESSION_OPTIONS,
): Promise<Record<string, ort.Tensor>> {
  const session = await createSession(model, options);
  try {
    const needed: Record<string, ort.Tensor> = {};
    for (const name of session.inputNames) {
      const t = feeds[name];
      if (!t) throw new RangeError(`feeds lack model input '${name}'`);
      needed[name] = toOrtTensor(t);
    }
    const out = await session.run(needed);
    return { ...out };
  } finally {
    await session.release();
  }
}

/** Options of `runOperatorsInSequence`. */
export interface SequenceOptions {
  /** First operator to run (default 0); `feeds` is then boundary `start`. */
  readonly start?: number;
  /** One past the last operator to run (default N). */
  readonly end?: number;
  readonly sessionOptions?: ort.InferenceSession.SessionOptions;
  /** Called with each boundary k from `start` to `end` (inclusive) as it is reached. */
  readonly onBoundary?: (k: number, boundary: Readonly<Record<string, ort.Tensor>>) => void;
}

/**
 * Run operators `[start, end)` in sequence. Boundary `start` = `feeds` (boundary 0 = the model
 * inputs); operator k gets its `inputs` from boundary k, and boundary k+1 = its outputs ∪ the
 * passthrough tensors of boundary k.
 * @returns boundary `end` (for the default end: the model outputs).
 * @throws RangeError for a segment outside `0 ≤ start < end ≤ N` or a missing sub-model.
 * @throws Error naming the operator and tensor when a tensor is missing from a boundary or an
 *   operator does not return one of its declared outputs.
 */
export async function runOperatorsInSequence(
  spec: ModelSpec,
  operatorModels: readonly ModelSource[],
  feeds: Readonly<Record<string, TensorLike>>,
  options: SequenceOptions = {},
): Promise<Record<string, ort.Tensor>> {
  const n = spec.operators.length;
  const start = options.start ?? 0;
  const end = options.end ?? n;
  if (!Number.isInteger(start) || start < 0 || start >= n) throw new RangeError(`start ${start} of ${spec.name} must be an integer in [0, ${n - 1}]`);
  if (!Number.isInteger(end) || end <= start || end > n) throw new RangeError(`end ${end} of ${spec.name} must be an integer in [${start + 1}, ${n}]`);
  const sessionOptions = options.sessionOptions ?? CHECK_SESSION_OPTIONS;
  let boundary: Record<string, ort.Tensor> = {};
  for (const [name, t] of Object.entries(feeds)) boundary[name] = toOrtTensor(t);
  options.onBoundary?.(start, boundary);
  for (let k = start; k < end; k++) {
    const op = spec.operators[k]!;
    const model = operatorModels[k];
    if (model === undefined) throw new RangeError(`no sub-model for operator ${k} of ${spec.name}`);
    const inputs: Record<string, ort.Tensor> = {};
    for (const t of op.inputs) {
      const v = boundary[t.name];
      if (!v) throw new Error(`operator ${k} (${op.name}) of ${spec.name} needs '${t.name}', which is not on boundary ${k}`);
      inputs[t.name] = v;
    }
    const out = await runOnnx(model, inputs, sessionOptions);
    const next: Record<string, ort.Tensor> = {};
    for (const t of op.outputs) {
      const v = out[t.name];
      if (!v) throw new Error(`operator ${k} (${op.name}) of ${spec.name} did not return its output '${t.name}'`);
      next[t.name] = v;
    }
    for (const name of op.passthrough) {
      const v = boundary[name];
      if (!v) throw new Error(`operator ${k} (${op.name}) of ${spec.name} passes '${name}' through, but it is not on boundary ${k}`);
      next[name] = v;
    }
    boundary = next;
    options.onBoundary?.(k + 1, boundary);
  }
  return boundary;
}

/** Element values as numbers (float16 bits decoded, bigints converted). @throws TypeError for string tensors. */
function numbers(t: TensorLike): number[] {
  const type = isHostTensor(t) ? t.dataType : t.type;
  const d = t.data;
  if (type === 'string' || typeof (d as ArrayLike<unknown>)[0] === 'string') throw new TypeError('cannot compare string tensors');
  if (type === 'float16' && d instanceof Uint16Array) return Array.from(d, halfToNumber);
  return Array.from(d as ArrayLike<number | bigint>, (v) => Number(v));
}

/** True for a string tensor. */
function isStringTensor(t: TensorLike): boolean {
  return (isHostTensor(t) ? t.dataType : t.type) === 'string';
}

/**
 * Largest |a − b| over two tensors of equal shape (Infinity when shapes or sizes differ, or a
 * value is NaN). String tensors: 0 when every element is equal, else Infinity.
 */
export function maxAbsDiff(a: TensorLike, b: TensorLike): number {
  if (a.dims.length !== b.dims.length || a.dims.some((d, i) => d !== b.dims[i])) return Number.POSITIVE_INFINITY;
  if (isStringTensor(a) || isStringTensor(b)) {
    if (!isStringTensor(a) || !isStringTensor(b)) return Number.POSITIVE_INFINITY;
    const x = a.data as readonly string[];
    const y = b.data as readonly string[];
    return x.length === y.length && x.every((s, i) => s === y[i]) ? 0 : Number.POSITIVE_INFINITY;
  }
  const x = numbers(a);
  const y = numbers(b);
  if (x.length !== y.length) return Number.POSITIVE_INFINITY;
  let m = 0;
  for (let i = 0; i < x.length; i++) {
    const d = Math.abs(x[i]! - y[i]!);
    if (Number.isNaN(d)) return Number.POSITIVE_INFINITY;
    if (d > m) m = d;
  }
  return m;
}

/** Largest |v| of a tensor (NaN when a value is NaN, 0 for an empty tensor or a string tensor). */
export function maxAbs(t: TensorLike): number {
  if (isStringTensor(t)) return 0;
  let m = 0;
  for (const v of numbers(t)) {
    if (Number.isNaN(v)) return Number.NaN;
    m = Math.max(m, Math.abs(v));
  }
  return m;
}

/** Per output of `compareOutputs`. */
export interface OutputComparison {
  readonly name: string;
  /** max |actual − expected| (Infinity when the output is missing or its shape differs). */
  readonly maxAbsError: number;
  /** The output scale, max |expected|. */
  readonly scale: number;
  /** maxAbsError === 0, or maxAbsError ≤ relTolerance · scale with a finite scale > 0. */
  readonly ok: boolean;
}

/**
 * Compare outputs by name: each passes when its max abs error ≤ `relTolerance` × max|expected|
 * (the project's partition check: max abs error ≤ 1e-4 relative to the output scale). An output fails when it is
 * missing from `actual`, has another shape, holds NaN, or when its scale is 0 or not finite —
 * an all-zero (or infinite) expected output gives no scale to be relative to, and a check that
 * passes on it would hide a broken graph.
 * @throws RangeError when `relTolerance` is negative or not finite.
 */
export function compareOutputs(
  expected: Readonly<Record<string, TensorLike>>,
  actual: Readonly<Record<string, TensorLike>>,
  relTolerance = 1e-4,
): OutputComparison[] {
  if (!Number.isFinite(relTolerance) || relTolerance < 0) throw new RangeError(`relTolerance must be a finite number ≥ 0, got ${relTolerance}`);
  return Object.entries(expected).map(([name, e]) => {
    const a = actual[name];
    const maxAbsError = a ? maxAbsDiff(e, a) : Number.POSITIVE_INFINITY;
    const scale = maxAbs(e);
    // Exactly equal always passes (an all-zero integer output, say); otherwise relative to a non-zero scale.
    const ok = maxAbsError === 0 || (Number.isFinite(scale) && scale > 0 && Number.isFinite(maxAbsError) && maxAbsError <= relTolerance * scale);
    return { name, maxAbsError, scale, ok };
  });
}

/**
 * Relative error of one output: max|actual − expected| / max|expected|; Infinity when the
 * scale is 0 or not finite, or the shapes differ (see `compareOutputs`).
 */
export function relativeError(expected: TensorLike, actual: TensorLike): number {
  const scale = maxAbs(expected);
  if (!Number.isFinite(scale) || scale <= 0) return Number.POSITIVE_INFINITY;
  return maxAbsDiff(expected, actual) / scale;
}
