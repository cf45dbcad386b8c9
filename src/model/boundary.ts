/**
 * Boundary helpers: which named tensors are live before operator k, and their concrete
 * shapes for a query of `batch` samples of length `seqLen` (ModelSpec docs: boundary 0 is the
 * model's inputs, boundary(k+1) = outputs(k) ∪ passthrough(k), boundary N the outputs).
 *
 * Used by both sides of the executor boundary: the device validates a group with them and
 * the executor builds synthetic inputs with them. Pure functions over plain data.
 */
import { BadRequestError } from '../errors.ts';
import type { ModelSpec, TensorSpec } from './spec.ts';
import type { TensorDataType } from '../tensor.ts';

/** A tensor spec with every dim resolved to a number, e.g. `[2, 3, 224, 224]`. */
export interface ResolvedTensorSpec {
  readonly name: string;
  readonly dataType: TensorDataType;
  readonly dims: readonly number[];
}

/**
 * Every tensor spec the model declares, by name: model inputs and outputs and each operator's
 * inputs and outputs (the first declaration wins; the partitioner declares each value once
 * with one type and shape).
 */
export function tensorSpecIndex(spec: ModelSpec): Map<string, TensorSpec> {
  const index = new Map<string, TensorSpec>();
  const add = (t: TensorSpec): void => {
    if (!index.has(t.name)) index.set(t.name, t);
  };
  spec.inputs.forEach(add);
  for (const op of spec.operators) {
    op.inputs.forEach(add);
    op.outputs.forEach(add);
  }
  spec.outputs.forEach(add);
  return index;
}

/**
 * Specs of the tensors a segment starting at operator `start` needs: the inputs of operator
 * `start` plus what it passes through — boundary `start` as consumed from there on (for
 * `start === 0` these are the model inputs that operators actually read).
 * @throws RangeError when `start` is outside `[0, operators.length)`.
 * @throws BadRequestError when a passthrough name has no declared spec (a broken ModelSpec).
 */
export function boundarySpecs(spec: ModelSpec, start: number, index: Map<string, TensorSpec> = tensorSpecIndex(spec)): TensorSpec[] {
  const op = spec.operators[start];
  if (!op) throw new RangeError(`boundary start ${start} of ${spec.name} must be an integer in [0, ${spec.operators.length - 1}]`);
  const out: TensorSpec[] = [...op.inputs];
  for (const name of op.passthrough) {
    const t = index.get(name);
    if (!t) throw new BadRequestError(`${spec.name}: passthrough tensor '${name}' of operator ${start} (${op.name}) has no declared type/shape in the ModelSpec`);
    if (!out.some((o) => o.name === name)) out.push(t);
  }
  return out;
}

/** The sequence length a query runs with: `seqLen` when given (> 0), else the model's default. */
export function effectiveSeqLen(spec: ModelSpec, seqLen: number): number {
  return seqLen > 0 ? seqLen : spec.defaultSeqLen;
}

/**
 * Concrete dims of `shape` for a query: the batch axis becomes `batch`, the sequence axis
 * `seqLen` (after `effectiveSeqLen`); numeric dims are kept.
 * @throws BadRequestError naming the tensor and the dim when a symbolic dim is neither the
 *   batch nor the sequence axis (its size cannot be known without real inputs), or when the
 *   sequence axis resolves to 0.
 */
export function resolveShape(spec: ModelSpec, tensor: TensorSpec, batch: number, seqLen: number): number[] {
  const seq = effectiveSeqLen(spec, seqLen);
  return tensor.shape.map((d, i) => {
    if (typeof d === 'number') return d;
    if (d === spec.dynamicAxes.batch) return batch;
    if (spec.dynamicAxes.seq !== undefined && d === spec.dynamicAxes.seq) {
      if (seq <= 0) throw new BadRequestError(`${spec.name}: tensor '${tensor.name}' dim ${i} is the sequence axis '${d}' but no seqLen was given and the model has no default`);
      return seq;
    }
    throw new BadRequestError(
      `${spec.name}: tensor '${tensor.name}' dim ${i} is symbolic '${d}', which is neither the batch axis '${spec.dynamicAxes.batch}'` +
        (spec.dynamicAxes.seq !== undefined ? ` nor the sequence axis '${spec.dynamicAxes.seq}'` : '') +
        '; its size is unknown',
    );
  });
}

/** `boundarySpecs` with every shape resolved for a query. @throws as `boundarySpecs`/`resolveShape`. */
export function resolvedBoundary(spec: ModelSpec, start: number, batch: number, seqLen: number, index?: Map<string, TensorSpec>): ResolvedTensorSpec[] {
  return boundarySpecs(spec, start, index).map((t) => ({ name: t.name, dataType: t.dataType, dims: resolveShape(spec, t, batch, seqLen) }));
}
