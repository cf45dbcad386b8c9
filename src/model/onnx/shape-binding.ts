/**
 * The shapes a graph declares and how their dims bind to the model's axes (part of the shape
 * resolution of `shapes.ts`): the value types (`TensorShape`, `SymbolicShape`, `ShapePoint`,
 * `DimBinding`, `ResolvedShapes`), which symbolic dim names stand for the batch, the sequence and
 * the other dynamic axes (`dimBinding`), the declared annotations of a graph's values and
 * initializers, and the value of a declared dim at a point. Pure: reads the graph, runs nothing.
 * Errors: none thrown here.
 */
import type { DynamicAxes } from '../spec.ts';
import { dimOf, toNumber } from './graph.ts';
import type { GraphIndex } from './graph.ts';
import type { OnnxTypes } from './proto.ts';

/** Element type (ONNX `TensorProto.DataType`) and concrete dims of one value. */
export interface TensorShape {
  readonly elemType: number;
  readonly dims: readonly number[];
}

/** Value name → shape at one point. */
export type ShapeTable = ReadonlyMap<string, TensorShape>;

/** Element type and shape with symbolic dims (`batch`, `seq`, or another name) of one value. */
export interface SymbolicShape {
  readonly elemType: number;
  readonly shape: readonly (number | string)[];
}

/** Where shapes are evaluated: batch size and sequence length (ignored without a seq axis). */
export interface ShapePoint {
  readonly batch: number;
  readonly seqLen: number;
  /** Size of each other dynamic axis (`DimBinding.symbols`) at this point; absent: none. */
  readonly symbols?: Readonly<Record<string, number>>;
}

/** Which symbolic dim names stand for the batch and which for the sequence length. */
export interface DimBinding {
  readonly batch: ReadonlySet<string>;
  readonly seq: ReadonlySet<string>;
  /** Canonical names used when a shape has to be written (DynamicAxes names). */
  readonly batchName: string;
  readonly seqName: string | undefined;
  /** The other dynamic axes (`DynamicAxes.symbols`), each named as in the file, with its base size. */
  readonly symbols: ReadonlyMap<string, number>;
}

/** What `resolveShapes` found. */
export interface ResolvedShapes {
  readonly source: 'annotations' | 'onnxruntime';
  /** `tables[i]` = shapes at `points[i]`. */
  readonly tables: readonly ShapeTable[];
  /**
   * Symbolic shape of every graph input and node output whose type is known and whose dims are
   * numbers, axis names or expressions of them (see the file header).
   */
  readonly symbolic: ReadonlyMap<string, SymbolicShape>;
  /**
   * Values whose type is known but one of whose dims depends on the axes in a way the dim
   * grammar cannot write (see the file header), with a description of the observations; such
   * a value cannot cross an inner operator boundary; as a model output it is served with its
   * actual shape (its `symbolic` shape has `DATA_DEPENDENT_DIM` for each such dim).
   */
  readonly unresolved: ReadonlyMap<string, string>;
  /**
   * The value the probe saw at every required point for each computed If condition and Loop
   * trip count or condition (the branch the probe took); absent from annotations.
   */
  readonly controls?: ReadonlyMap<string, number>;
}

/**
 * The dim names bound to batch and seq: the DynamicAxes names, plus the dim-0 names of every
 * graph input (batch) and, when the model has a seq axis, every other symbolic input dim (seq)
 * — exporters sometimes name the same axis differently on different inputs.
 */
export function dimBinding(index: GraphIndex, axes: DynamicAxes): DimBinding {
  const batch = new Set<string>([axes.batch]);
  const seq = new Set<string>(axes.seq === undefined ? [] : [axes.seq]);
  for (const name of index.inputs) {
    const dims = declaredDims(index, name);
    dims?.forEach((d, i) => {
      if (typeof d !== 'string') return;
      if (i === 0) batch.add(d);
      else if (axes.seq !== undefined && !batch.has(d)) seq.add(d);
    });
  }
  return { batch, seq, batchName: axes.batch, seqName: axes.seq, symbols: new Map(Object.entries(axes.symbols ?? {})) };
}

/**
 * The batch size of a graph whose batch dim is fixed: dim 0 of its first input of rank ≥ 1
 * when no input has a symbolic or anonymous dim 0 (and a shape); undefined when the batch is
 * dynamic or every input is a scalar. Mirrors `fixedBatchOf` in `model/boundary.ts`.
 */
export function fixedBatchSize(index: GraphIndex): number | undefined {
  let first: number | undefined;
  for (const name of index.inputs) {
    const dims = declaredDims(index, name);
    if (dims === undefined) return undefined;
    if (dims.length === 0) continue;
    const d0 = dims[0];
    if (typeof d0 !== 'number') return undefined; // a name (bound to the batch by dimBinding) or anonymous
    first ??= d0;
  }
  return first;
}

/** Declared value infos by name (graph inputs, outputs, value_info). */
export function declaredValueInfos(graph: OnnxTypes.IGraphProto): Map<string, OnnxTypes.IValueInfoProto> {
  const out = new Map<string, OnnxTypes.IValueInfoProto>();
  for (const list of [graph.valueInfo, graph.output, graph.input]) for (const v of list ?? []) if (v.name) out.set(v.name, v);
  return out;
}

/** Declared dims of a value (number, symbolic name, or undefined for anonymous); undefined without a tensor shape. */
export function declaredDims(index: GraphIndex, name: string): (number | string | undefined)[] | undefined {
  const info = (index.graph.input ?? []).find((v) => v.name === name);
  const dims = info?.type?.tensorType?.shape?.dim;
  return dims ? dims.map(dimOf) : undefined;
}

/** Value info's element type and dims; undefined when it is not a tensor with a shape. */
export function annotation(info: OnnxTypes.IValueInfoProto | undefined): { elemType: number; dims: (number | string | undefined)[] } | undefined {
  const tt = info?.type?.tensorType;
  if (!tt?.elemType || !tt.shape) return undefined;
  return { elemType: tt.elemType, dims: (tt.shape.dim ?? []).map(dimOf) };
}

/**
 * Values whose shapes a partition needs: graph inputs, graph outputs, every value some node
 * reads, and the first output of every node (FLOP rules read output 0 only). Unread secondary
 * outputs (a Dropout mask, an LSTM's Y_h) may stay unannotated.
 */
export function valuesOf(index: GraphIndex): string[] {
  const out = new Set<string>(index.inputs);
  index.writes.forEach((outs, i) => {
    const first = index.nodes[i]!.output?.[0];
    for (const o of outs) if (o === first || index.readers.has(o) || index.outputs.includes(o)) out.add(o);
  });
  return [...out];
}

/** Shapes of initializers (from their dims). */
export function initializerShapes(index: GraphIndex): Map<string, TensorShape> {
  const out = new Map<string, TensorShape>();
  for (const [name, t] of index.initializers) out.set(name, { elemType: t.dataType ?? 0, dims: (t.dims ?? []).map(toNumber) });
  for (const [name, t] of index.sparseInitializers) out.set(name, { elemType: t.values?.dataType ?? 0, dims: (t.dims ?? []).map(toNumber) });
  return out;
}

/** Concrete value of a declared dim at a point; undefined when it is not bound. */
export function bindDim(d: number | string | undefined, binding: DimBinding, point: ShapePoint): number | undefined {
  if (typeof d === 'number') return d;
  if (d === undefined) return undefined;
  if (binding.batch.has(d)) return point.batch;
  if (binding.seq.has(d)) return point.seqLen;
  if (binding.symbols.has(d)) return point.symbols?.[d] ?? binding.symbols.get(d);
  return undefined;
}

/** A declared dim in canonical form: bound names → the DynamicAxes names. */
export function canonicalDim(d: number | string | undefined, binding: DimBinding): number | string {
  if (d === undefined) return '?';
  if (typeof d === 'number') return d;
  if (binding.batch.has(d)) return binding.batchName;
  if (binding.seq.has(d) && binding.seqName !== undefined) return binding.seqName;
  return d;
}
