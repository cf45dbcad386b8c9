/**
 * Checking a partition on onnxruntime-node: run the whole model, run the N operator sub-models
 * one after the other carrying the boundary tensors (inputs/outputs/passthrough as in
 * `model/spec.ts`), and compare. Used by the partition tests (hand-built graphs and zoo models);
 * not a serving path (that is `device/ort`).
 */
import * as ort from 'onnxruntime-node';
import type { ModelSpec } from '../spec.ts';
import { onnx } from './proto.ts';
import type { OnnxTypes } from './proto.ts';

/** Session options for checks: CPU, one thread (the machine is shared), default optimizations. */
const CHECK_SESSION_OPTIONS: ort.InferenceSession.SessionOptions = { intraOpNumThreads: 1, interOpNumThreads: 1, executionProviders: ['cpu'] };

/** Run one ONNX model once on the CPU provider; the session is released before returning. */
export async function runOnnx(model: OnnxTypes.IModelProto, feeds: Readonly<Record<string, ort.Tensor>>, options: ort.InferenceSession.SessionOptions = CHECK_SESSION_OPTIONS): Promise<Record<string, ort.Tensor>> {
  const session = await ort.InferenceSession.create(onnx.ModelProto.encode(model).finish(), options);
  try {
    const needed: Record<string, ort.Tensor> = {};
    for (const name of session.inputNames) {
      const t = feeds[name];
      if (!t) throw new RangeError(`feeds lack model input '${name}'`);
      needed[name] = t;
    }
    const out = await session.run(needed);
    return { ...out };
  } finally {
    await session.release();
  }
}

/**
 * Run operators 0..N−1 in sequence. Boundary 0 = `feeds`; operator k gets its `inputs` from
 * the boundary, and boundary k+1 = its outputs ∪ the passthrough tensors of boundary k.
 * @returns boundary N (the model outputs).
 * @throws Error naming the operator and tensor when a tensor is missing from a boundary or an
 *   operator does not return one of its declared outputs.
 */
export async function runOperatorsInSequence(
  spec: ModelSpec,
  operatorModels: readonly OnnxTypes.IModelProto[],
  feeds: Readonly<Record<string, ort.Tensor>>,
  options: ort.InferenceSession.SessionOptions = CHECK_SESSION_OPTIONS,
): Promise<Record<string, ort.Tensor>> {
  let boundary: Record<string, ort.Tensor> = { ...feeds };
  for (const op of spec.operators) {
    const model = operatorModels[op.index];
    if (!model) throw new RangeError(`no sub-model for operator ${op.index} of ${spec.name}`);
    const inputs: Record<string, ort.Tensor> = {};
    for (const t of op.inputs) {
      const v = boundary[t.name];
      if (!v) throw new Error(`operator ${op.index} (${op.name}) of ${spec.name} needs '${t.name}', which is not on boundary ${op.index}`);
      inputs[t.name] = v;
    }
    const out = await runOnnx(model, inputs, options);
    const next: Record<string, ort.Tensor> = {};
    for (const t of op.outputs) {
      const v = out[t.name];
      if (!v) throw new Error(`operator ${op.index} (${op.name}) of ${spec.name} did not return its output '${t.name}'`);
      next[t.name] = v;
    }
    for (const name of op.passthrough) {
      const v = boundary[name];
      if (!v) throw new Error(`operator ${op.index} (${op.name}) of ${spec.name} passes '${name}' through, but it is not on boundary ${op.index}`);
      next[name] = v;
    }
    boundary = next;
  }
  return boundary;
}

/** Largest |a − b| over two tensors of equal shape (Infinity when shapes or sizes differ). */
export function maxAbsDiff(a: ort.Tensor, b: ort.Tensor): number {
  if (a.dims.length !== b.dims.length || a.dims.some((d, i) => d !== b.dims[i])) return Number.POSITIVE_INFINITY;
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

/** Largest |v| of a tensor. */
export function maxAbs(t: ort.Tensor): number {
  let m = 0;
  for (const v of numbers(t)) m = Math.max(m, Math.abs(v));
  return m;
}

function numbers(t: ort.Tensor): number[] {
  const d = t.data;
  if (typeof d[0] === 'string') throw new TypeError(`cannot compare string tensors`);
  return Array.from(d as ArrayLike<number | bigint>, (v) => Number(v));
}

/** Result of `compareOutputs`, per output: error, scale and whether error ≤ tolerance · max(1, scale). */
export interface OutputComparison {
  readonly name: string;
  readonly maxAbsError: number;
  /** max |expected|. */
  readonly scale: number;
  readonly ok: boolean;
}

/**
 * Compare outputs by name: max abs error ≤ `relTolerance` × max(1, max|expected|) (issue 2 §3
 * uses 1e-4). A missing output counts as an infinite error.
 */
export function compareOutputs(expected: Readonly<Record<string, ort.Tensor>>, actual: Readonly<Record<string, ort.Tensor>>, relTolerance = 1e-4): OutputComparison[] {
  return Object.entries(expected).map(([name, e]) => {
    const a = actual[name];
    const err = a ? maxAbsDiff(e, a) : Number.POSITIVE_INFINITY;
    const scale = maxAbs(e);
    return { name, maxAbsError: err, scale, ok: err <= relTolerance * Math.max(1, scale) };
  });
}
