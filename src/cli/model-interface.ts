/**
 * What a client sends to and gets from a model, from its `ModelSpec` alone (no server needed):
 * the inputs and outputs with their v2 datatypes, shapes with symbols, the shapes a server's
 * metadata reports (-1 for a dynamic dim), the shapes at batch 1 and default sizes, the values
 * an input accepts, and each dynamic axis with the sizes a request may give. `abacus models
 * show` prints it (docs/models.md "What a model takes").
 *
 * The rules are the serving backend's (`serve/backend.ts`, "Validation"): the batch axis is the
 * same in every input and one of the service's `batchSizes` (at most `MAX_BATCH_SIZE`); the
 * sequence axis is in [1, the model's `maxSeqLen`] (`MAX_SEQ_LEN` when it has none); every other
 * dynamic axis is ≥ 1 (no upper bound but the request size limits); derived dims (`batch*seq`, `(height+3)/4`) follow from those.
 */
import { DATA_DEPENDENT_DIM, resolveShape } from '../model/boundary.ts';
import { MAX_BATCH_SIZE, MAX_SEQ_LEN, type InputDomain, type ModelSpec, type TensorSpec } from '../model/spec.ts';
import { v2Datatype } from '../serve/tensors.ts';
import type { V2Datatype } from '../serve/inference.ts';
import type { TensorDataType } from '../tensor.ts';
import { formatTable } from './format.ts';

/** One input or output as a client sees it. */
export interface InterfaceTensor {
  readonly name: string;
  /** The KServe v2 datatype a request gives (`FP32`, `INT64`, …). */
  readonly datatype: V2Datatype;
  /** The element type as the model stores it (`float32`, `int64`, …). */
  readonly dataType: TensorDataType;
  /** Dims as the spec has them: numbers, axis names and expressions of them (`batch*seq`), `?data` for a size known only after running. */
  readonly shape: readonly (number | string)[];
  /** The shape a server's model metadata reports: -1 for every dim that is not a number. */
  readonly metadataShape: readonly number[];
  /** The shape at batch 1 and every other axis at its default size (`?data` dims: -1). */
  readonly exampleShape: readonly number[];
  /** Inputs only: the values it accepts (`{values}` or an inclusive `{range}`); absent: any value of its type. */
  readonly values?: InputDomain;
}

/** A dynamic axis: where it appears and the sizes a request may give it. */
export interface InterfaceAxis {
  readonly name: string;
  /** `batch` (dim 0), `sequence` (the sequence axis), or `dynamic` (another dynamic input dim, e.g. an image's height). */
  readonly kind: 'batch' | 'sequence' | 'dynamic';
  /** Smallest size a request may give. */
  readonly min: number;
  /**
   * Largest size the model takes (batch: a service serves only its config's `batchSizes`);
   * absent for a dynamic axis, which the server bounds only through the request size limits.
   */
  readonly max?: number;
  /** Size used when none is given (warm-up, profiling, costs): 1 for the batch, the default sequence length, the shape probe's size of an import. */
  readonly default: number;
  /** Where it appears as a plain dim: `input[dim]`. */
  readonly dims: readonly string[];
}

/** What `abacus models show` says a model takes and gives. */
export interface ModelInterface {
  readonly inputs: readonly InterfaceTensor[];
  readonly outputs: readonly InterfaceTensor[];
  readonly axes: readonly InterfaceAxis[];
}

function exampleShape(spec: ModelSpec, t: TensorSpec): number[] {
  let dims: number[];
  try {
    dims = resolveShape(spec, t, 1, spec.defaultSeqLen);
  } catch {
    // a dim the spec cannot resolve without real inputs: unknown here
    return t.shape.map((d) => (typeof d === 'number' ? d : -1));
  }
  return dims.map((d, i) => (t.shape[i] === DATA_DEPENDENT_DIM ? -1 : d));
}

function tensor(spec: ModelSpec, t: TensorSpec, input: boolean): InterfaceTensor {
  return {
    name: t.name,
    datatype: v2Datatype(t.dataType),
    dataType: t.dataType,
    shape: [...t.shape],
    metadataShape: t.shape.map((d) => (typeof d === 'number' ? d : -1)),
    exampleShape: exampleShape(spec, t),
    ...(input && t.domain !== undefined ? { values: t.domain } : {}),
  };
}

/** The interface of `spec` (see the file docs). */
export function modelInterface(spec: ModelSpec): ModelInterface {
  const axes = spec.dynamicAxes;
  const where = (axis: string): string[] => spec.inputs.flatMap((t) => t.shape.flatMap((d, i) => (d === axis ? [`${t.name}[${i}]`] : [])));
  const out: InterfaceAxis[] = [];
  const batchDims = where(axes.batch);
  if (batchDims.length > 0) out.push({ name: axes.batch, kind: 'batch', min: 1, max: MAX_BATCH_SIZE, default: 1, dims: batchDims });
  if (axes.seq !== undefined) out.push({ name: axes.seq, kind: 'sequence', min: 1, max: spec.maxSeqLen ?? MAX_SEQ_LEN, default: spec.defaultSeqLen, dims: where(axes.seq) });
  for (const [name, size] of Object.entries(axes.symbols ?? {})) out.push({ name, kind: 'dynamic', min: 1, default: size, dims: where(name) });
  return { inputs: spec.inputs.map((t) => tensor(spec, t, true)), outputs: spec.outputs.map((t) => tensor(spec, t, false)), axes: out };
}

/** `[a, b, c]` for a shape. */
export function shapeText(shape: readonly (number | string)[]): string {
  return `[${shape.join(', ')}]`;
}

/** The values of an input as a short phrase: `0 … 30521`, `one of 16000, 8000`, `any`. */
export function valuesText(values: InputDomain | undefined): string {
  if (values === undefined) return 'any';
  if ('range' in values) return `${values.range[0]} … ${values.range[1]}`;
  return `one of ${values.values.join(', ')}`;
}

/**
 * The interface as text for `abacus models show`: the source, the inputs, the outputs and the
 * dynamic axes, as tables.
 * @param importedOperatorCounts for an import: the operator counts it was imported with (`NAME:N`).
 */
export function interfaceText(spec: ModelSpec, io: ModelInterface, importedOperatorCounts?: readonly number[]): string {
  const lines: string[] = [];
  if (spec.source.kind === 'import') {
    const others = (importedOperatorCounts ?? []).filter((n) => n !== spec.operators.length);
    lines.push(`source: imported from ${spec.source.file}${others.length === 0 ? '' : `; also imported with ${others.join(', ')} operators (${spec.name}:N picks one)`}\n`);
  } else {
    lines.push(`source: the zoo${Object.keys(spec.source.options).length === 0 ? '' : ` (${Object.entries(spec.source.options).map(([k, v]) => `${k} ${v}`).join(', ')})`}\n`);
  }
  lines.push('inputs (a request sends each one; -1 in the server\'s metadata is a dynamic dim):\n');
  lines.push(formatTable(['input', 'datatype', 'shape', 'metadata shape', 'at batch 1', 'values'], io.inputs.map((t) => [t.name, t.datatype, shapeText(t.shape), shapeText(t.metadataShape), shapeText(t.exampleShape), valuesText(t.values)])));
  lines.push('outputs:\n');
  lines.push(formatTable(['output', 'datatype', 'shape', 'metadata shape', 'at batch 1'], io.outputs.map((t) => [t.name, t.datatype, shapeText(t.shape), shapeText(t.metadataShape), shapeText(t.exampleShape)])));
  if (io.axes.length > 0) {
    lines.push('dynamic axes (a request gives each one the same size wherever it appears):\n');
    lines.push(formatTable(['axis', 'kind', 'sizes', 'default', 'in'], io.axes.map((a) => [a.name, a.kind, a.max === undefined ? `≥ ${a.min}` : `${a.min} … ${a.max}`, a.default, a.dims.join(', ')])));
    if (io.axes.some((a) => a.kind === 'batch')) lines.push('batch: a service serves the batch sizes of its config (batchSizes) only\n');
  }
  return lines.join('');
}
