/**
 * Concrete tensor shapes of every value of a graph at given (batch, seqLen) points.
 *
 * Two sources, tried in this order:
 * 1. annotations: when `graph.input`/`output`/`value_info` give every value a tensor type whose
 *    dims are numbers or the model's dynamic-axis names (the zoo builders annotate everything
 *    with `batch` and `seq`), the symbolic dims are substituted — no inference engine needed;
 * 2. onnxruntime: otherwise the model is run once per point with onnxruntime-node (CPU, one
 *    thread, graph optimizations off) with the intermediate values added as graph outputs, in
 *    chunks of consecutive nodes that bound the memory (`probeShapes`), and the dims of the
 *    results are read. Inputs are zeros (ids 0, masks false), shapes from
 *    the declared input dims with the batch/seq axes and the other axes (`DimBinding.symbols`)
 *    bound to the point (an anonymous dim 0 is the batch, an anonymous later dim the seq axis
 *    when there is one; other dims: 1). Extra runs — (batch + 1) and (batch + 2 with a further
 *    seq and every other axis at 3/2), or one such run when the batch is fixed; each other
 *    axis alone at 1/2 and 2 times its base; and, optional (left out when onnxruntime refuses
 *    them), odd sizes (+1, +3) that tell a floor from a ceiling — show how each dim depends on
 *    the axes: the symbolic shape of a value writes each dim as a number, an axis name, a
 *    polynomial of batch and seq (`batch*seq`, `12*batch`, `seq+1`) or else a product of one
 *    factor per axis, each an integer polynomial or `a·⌊(x + b)/d⌋ + c` (`(width+7)/8`,
 *    `2*((height+7)/8)*((width+7)/8)`; grammar in `model/spec.ts` `TensorSpec`), fitted to all
 *    the runs, so interface shapes of the operators resolve from the axes alone. A dim of a
 *    value downstream of a data-dependent op (`dataDependentValues`) that the probe saw as 0
 *    or that fits no form is `DATA_DEPENDENT_DIM`.
 *
 * Shapes of initializers come from their `dims`.
 */
import * as ort from 'onnxruntime-node';
import { describeError, InvalidModelError } from '../../errors.ts';
import { elementCount, NOMINAL_STRING_BYTES } from '../../tensor.ts';
import { DATA_DEPENDENT_DIM, evalDimExpression, formatDimExpression } from '../boundary.ts';
import type { DimTerm } from '../boundary.ts';
import type { DynamicAxes } from '../spec.ts';
import { elemTypeOfOrt, ortTypeOf } from './dtypes.ts';
import { dimOf, isTopologicallySorted, toNumber } from './graph.ts';
import type { GraphIndex } from './graph.ts';
import { onnx } from './proto.ts';
import type { OnnxTypes } from './proto.ts';

/** Element type (ONNX `TensorProto.DataType`) and concrete dims of one value. */
export interface TensorShape {
  readonly elemType: number;
  readonly dims: readonly number[];
}

/**
 * onnxruntime refused to run the model at a required probe point (`resolveShapes`): the message
 * says what the probe fed and which flags to give; `failedOp` is the op type onnxruntime names
 * (`running Pad node`) and `failedNode` the node's name (`Name:'pad'`), each undefined when it
 * names none.
 */
export class ProbeRunError extends InvalidModelError {
  constructor(
    message: string,
    readonly failedOp: string | undefined,
    readonly failedNode: string | undefined,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'ProbeRunError';
  }
}

/** Value name → shape at one point. */
export type ShapeTable = ReadonlyMap<string, TensorShape>;

/** Element type and shape with symbolic dims (`batch`, `seq`, or another name) of one value. */
export interface SymbolicShape {
  readonly elemType: number;
  readonly shape: readonly (number | string)[];
}

/**
 * What the user tells the shape probe about inputs it cannot guess (`abacus models import
 * --probe-shape NAME=DxD… --probe-value NAME=V`): `shapes[name]` = a full shape for the input
 * (its batch dim still follows the probe point; a dim bound to the sequence axis must equal the
 * probe's sequence length, which the importer derives from it; every other dim is used as given
 * instead of 1), `values[name]` = the value every element of the input holds (instead of 0).
 */
export interface ProbeInputs {
  readonly shapes?: Readonly<Record<string, readonly number[]>>;
  readonly values?: Readonly<Record<string, number>>;
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
   * a value cannot cross an operator boundary.
   */
  readonly unresolved: ReadonlyMap<string, string>;
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
function declaredDims(index: GraphIndex, name: string): (number | string | undefined)[] | undefined {
  const info = (index.graph.input ?? []).find((v) => v.name === name);
  const dims = info?.type?.tensorType?.shape?.dim;
  return dims ? dims.map(dimOf) : undefined;
}

/** Value info's element type and dims; undefined when it is not a tensor with a shape. */
function annotation(info: OnnxTypes.IValueInfoProto | undefined): { elemType: number; dims: (number | string | undefined)[] } | undefined {
  const tt = info?.type?.tensorType;
  if (!tt?.elemType || !tt.shape) return undefined;
  return { elemType: tt.elemType, dims: (tt.shape.dim ?? []).map(dimOf) };
}

/**
 * Values whose shapes a partition needs: graph inputs, graph outputs, every value some node
 * reads, and the first output of every node (FLOP rules read output 0 only). Unread secondary
 * outputs (a Dropout mask, an LSTM's Y_h) may stay unannotated.
 */
function valuesOf(index: GraphIndex): string[] {
  const out = new Set<string>(index.inputs);
  index.writes.forEach((outs, i) => {
    const first = index.nodes[i]!.output?.[0];
    for (const o of outs) if (o === first || index.readers.has(o) || index.outputs.includes(o)) out.add(o);
  });
  return [...out];
}

/** Shapes of initializers (from their dims). */
function initializerShapes(index: GraphIndex): Map<string, TensorShape> {
  const out = new Map<string, TensorShape>();
  for (const [name, t] of index.initializers) out.set(name, { elemType: t.dataType ?? 0, dims: (t.dims ?? []).map(toNumber) });
  for (const [name, t] of index.sparseInitializers) out.set(name, { elemType: t.values?.dataType ?? 0, dims: (t.dims ?? []).map(toNumber) });
  return out;
}

/** Concrete value of a declared dim at a point; undefined when it is not bound. */
function bindDim(d: number | string | undefined, binding: DimBinding, point: ShapePoint): number | undefined {
  if (typeof d === 'number') return d;
  if (d === undefined) return undefined;
  if (binding.batch.has(d)) return point.batch;
  if (binding.seq.has(d)) return point.seqLen;
  if (binding.symbols.has(d)) return point.symbols?.[d] ?? binding.symbols.get(d);
  return undefined;
}

/**
 * Shapes of every value at each point, from annotations when they cover the graph, else by
 * running the model with onnxruntime (see the file header).
 * @param what model label for messages.
 * @param options how the probe is streamed (`ProbeOptions`).
 * @throws InvalidModelError when annotations do not cover the graph and onnxruntime cannot run
 *   the model (e.g. initializers without data, an op the CPU provider lacks).
 */
export async function resolveShapes(index: GraphIndex, model: OnnxTypes.IModelProto, binding: DimBinding, points: readonly ShapePoint[], what: string, probe: ProbeInputs = {}, options: ProbeOptions = {}): Promise<ResolvedShapes> {
  const infos = declaredValueInfos(index.graph);
  const names = valuesOf(index);
  const inits = initializerShapes(index);

  const covered = names.every((name) => {
    const a = annotation(infos.get(name));
    return a !== undefined && a.dims.every((d) => bindDim(d, binding, { batch: 1, seqLen: 1 }) !== undefined);
  });
  if (covered) {
    const tables = points.map((point) => {
      const table = new Map(inits);
      for (const name of names) {
        const a = annotation(infos.get(name))!;
        table.set(name, { elemType: a.elemType, dims: a.dims.map((d) => bindDim(d, binding, point)!) });
      }
      return table;
    });
    const symbolic = new Map<string, SymbolicShape>();
    for (const name of names) {
      const a = annotation(infos.get(name))!;
      symbolic.set(name, { elemType: a.elemType, shape: a.dims.map((d) => canonicalDim(d, binding)) });
    }
    return { source: 'annotations', tables, symbolic, unresolved: new Map() };
  }

  // Probe with onnxruntime: the requested points, plus points that tell how dims depend on the
  // axes: the batch and each other axis varied alone, and a point that moves all of them.
  const first = points[0] ?? { batch: 1, seqLen: 1 };
  const further = binding.seqName === undefined ? undefined : furtherSeqLen(points.filter((p) => p.batch === first.batch).map((p) => p.seqLen));
  const base = first.symbols ?? Object.fromEntries(binding.symbols);
  const at = (f: (v: number) => number): Record<string, number> => Object.fromEntries([...binding.symbols].map(([n, v]) => [n, f(v)]));
  const withSymbols = (p: ShapePoint): ShapePoint => (binding.symbols.size === 0 || p.symbols !== undefined ? p : { ...p, symbols: base });
  const extra: ShapePoint[] =
    fixedBatchSize(index) === undefined
      ? [
          { batch: first.batch + 1, seqLen: first.seqLen },
          { batch: first.batch + 2, seqLen: further ?? first.seqLen, symbols: at((v) => Math.max(1, Math.round((v * 3) / 2))) },
        ]
      : further === undefined && binding.symbols.size === 0
        ? []
        : [{ batch: first.batch, seqLen: further ?? first.seqLen, symbols: at((v) => Math.max(1, Math.round((v * 3) / 2))) }];
  for (const [name, v] of binding.symbols) {
    for (const size of [Math.max(1, Math.round(v / 2)), 2 * v]) extra.push({ batch: first.batch, seqLen: first.seqLen, symbols: { ...base, [name]: size } });
  }
  // Odd sizes tell floor from ceiling (W/8 vs (W+7)/8); a model that only accepts multiples
  // rejects them, and then they are left out.
  const optional: ShapePoint[] = [];
  for (const odd of [1, 3]) {
    for (const [name, v] of binding.symbols) optional.push({ batch: first.batch, seqLen: first.seqLen, symbols: { ...base, [name]: v + odd } });
    if (further !== undefined) optional.push({ batch: first.batch, seqLen: first.seqLen + odd, ...(binding.symbols.size === 0 ? {} : { symbols: base }) });
  }
  const required = [...points, ...extra].map(withSymbols);
  const probed = await probeShapes(index, model, binding, [...required, ...optional], infos, what, probe, required.length, options.chunkBytes ?? PROBE_CHUNK_BYTES);
  const all = required.concat(optional.filter((_, j) => probed[required.length + j] !== undefined));
  const tables = probed.filter((t): t is Map<string, TensorShape> => t !== undefined);
  for (const t of tables) for (const [k, v] of inits) t.set(k, v);
  const dataDependent = dataDependentValues(index);
  const symbolic = new Map<string, SymbolicShape>();
  const unresolved = new Map<string, string>();
  for (const name of names) {
    const seen = tables.map((t) => t.get(name));
    if (seen.some((s) => s === undefined)) continue;
    const shapes = seen as TensorShape[];
    const rank = shapes[0]!.dims.length;
    if (shapes.some((s) => s.dims.length !== rank)) continue;
    const shape: (number | string)[] = [];
    for (let i = 0; i < rank; i++) {
      const values = shapes.map((s) => s.dims[i]!);
      let dim = inferDim(values, all, binding) ?? inferDimGeneral(values, all, binding);
      if (dataDependent.has(name) && (dim === undefined || values.some((v) => v === 0))) dim = DATA_DEPENDENT_DIM;
      if (dim === undefined) {
        const observed = values.map((v, j) => `${v} at (${pointText(all[j]!, binding)})`).join(', ');
        unresolved.set(name, `dim ${i} of tensor '${name}' is ${observed} (${axesText(binding)}), which is no product of integer polynomials and floor divisions of the axes`);
        break;
      }
      shape.push(dim);
    }
    if (!unresolved.has(name)) symbolic.set(name, { elemType: shapes[0]!.elemType, shape });
  }
  return { source: 'onnxruntime', tables: tables.slice(0, points.length), symbolic, unresolved };
}

/** A probe point for messages: its batch, seq length and axis sizes, in `axesText` order. */
function pointText(p: ShapePoint, binding: DimBinding): string {
  return [p.batch, ...(binding.seqName === undefined ? [] : [p.seqLen]), ...[...binding.symbols.keys()].map((n) => p.symbols?.[n] ?? binding.symbols.get(n))].join(', ');
}

/** The names of the axes a probe point gives, for messages. */
function axesText(binding: DimBinding): string {
  return ['batch', ...(binding.seqName === undefined ? [] : [binding.seqName]), ...binding.symbols.keys()].join(', ');
}

/**
 * Ops whose output sizes depend on the input data, not only on input shapes (ONNX operator
 * spec: NonZero, NonMaxSuppression, Unique, Compress; TopK when its k is computed rather than
 * an initializer).
 */
const DATA_DEPENDENT_OPS = new Set(['NonZero', 'NonMaxSuppression', 'Unique', 'Compress']);

/**
 * Values whose shape may depend on the data: outputs of `DATA_DEPENDENT_OPS` (and of a TopK
 * with a computed k) and every value computed from them (conservative).
 */
export function dataDependentValues(index: GraphIndex): Set<string> {
  const out = new Set<string>();
  const stack: number[] = [];
  index.nodes.forEach((node, i) => {
    const op = node.opType ?? '';
    const k = node.input?.[1];
    if (DATA_DEPENDENT_OPS.has(op) || (op === 'TopK' && k !== undefined && k !== '' && !index.initializers.has(k))) stack.push(i);
  });
  const seen = new Set<number>();
  while (stack.length > 0) {
    const i = stack.pop()!;
    if (seen.has(i)) continue;
    seen.add(i);
    for (const o of index.writes[i] ?? []) {
      out.add(o);
      for (const r of index.readers.get(o) ?? []) stack.push(r);
    }
  }
  return out;
}

/** A declared dim in canonical form: bound names → the DynamicAxes names. */
function canonicalDim(d: number | string | undefined, binding: DimBinding): number | string {
  if (d === undefined) return '?';
  if (typeof d === 'number') return d;
  if (binding.batch.has(d)) return binding.batchName;
  if (binding.seq.has(d) && binding.seqName !== undefined) return binding.seqName;
  return d;
}

/**
 * A sequence length not among `seqs` and not above their maximum (a length the model is known
 * to accept): scanning consecutive distinct lengths from the top, the first midpoint strictly
 * between a pair ({32, 64, 128} → 96); the maximum + 1 when there is none.
 */
function furtherSeqLen(seqs: readonly number[]): number {
  const sorted = [...new Set(seqs)].sort((a, b) => b - a);
  for (let i = 0; i + 1 < sorted.length; i++) {
    const m = Math.floor((sorted[i]! + sorted[i + 1]!) / 2);
    if (m !== sorted[i] && m !== sorted[i + 1]) return m;
  }
  return (sorted[0] ?? 0) + 1;
}

/** The integer nearest to x when x is within 1e-6 (relative) of it; undefined otherwise. */
function asInteger(x: number): number | undefined {
  const r = Math.round(x);
  return Number.isSafeInteger(r) && Math.abs(x - r) <= 1e-6 * Math.max(1, Math.abs(r)) ? r : undefined;
}

/**
 * Symbolic form of one dim observed at several points: the number when it is constant, else
 * `batch^a · P(seq)` with a ∈ {0, 1} and P a polynomial of degree ≤ 2 with integer
 * coefficients, fitted through the points at the first point's batch (at most three distinct
 * seq lengths; without a seq axis P is a constant) and checked against every point, written
 * with `formatDimExpression`. Undefined when no such form reproduces every observation.
 */
function inferDim(values: readonly number[], points: readonly ShapePoint[], binding: DimBinding): number | string | undefined {
  const v0 = values[0]!;
  if (values.every((v) => v === v0)) return v0;
  const b0 = points[0]!.batch;
  const seqOf = (p: ShapePoint): number => (binding.seqName === undefined ? 0 : p.seqLen);
  // P through the points at batch b0 (Newton's divided differences, ≤ 3 distinct seq lengths).
  const xs: number[] = [];
  const ys: number[] = [];
  points.forEach((p, j) => {
    if (p.batch !== b0 || xs.includes(seqOf(p)) || xs.length === 3) return;
    xs.push(seqOf(p));
    ys.push(values[j]!);
  });
  let poly: [number, number, number];
  if (xs.length === 1) poly = [ys[0]!, 0, 0];
  else {
    const d1 = (ys[1]! - ys[0]!) / (xs[1]! - xs[0]!);
    if (xs.length === 2) poly = [ys[0]! - d1 * xs[0]!, d1, 0];
    else {
      const d2 = ((ys[2]! - ys[1]!) / (xs[2]! - xs[1]!) - d1) / (xs[2]! - xs[0]!);
      poly = [ys[0]! - d1 * xs[0]! + d2 * xs[0]! * xs[1]!, d1 - d2 * (xs[0]! + xs[1]!), d2];
    }
  }
  for (const batchPower of [0, 1]) {
    const coeffs = poly.map((c) => asInteger(c / b0 ** batchPower));
    if (coeffs.some((c) => c === undefined)) continue;
    const [c0, c1, c2] = coeffs as [number, number, number];
    const fits = points.every((p, j) => p.batch ** batchPower * (c0 + c1 * seqOf(p) + c2 * seqOf(p) ** 2) === values[j]);
    if (!fits) continue;
    const terms: DimTerm[] = [
      { coefficient: c2, batchPower, seqPower: 2 },
      { coefficient: c1, batchPower, seqPower: 1 },
      { coefficient: c0, batchPower, seqPower: 0 },
    ];
    return formatDimExpression(terms, { batch: binding.batchName, seq: binding.seqName });
  }
  return undefined;
}

/** A univariate factor: `a·⌊(x + b)/d⌋ + c` (d = 1: the polynomial c + a·x + q·x², q from `square`). */
interface Factor {
  readonly a: number;
  readonly b: number;
  readonly d: number;
  readonly c: number;
  readonly square: number;
}

function factorAt(f: Factor, x: number): number {
  return f.a * Math.floor((x + f.b) / f.d) + f.c + f.square * x * x;
}

function gcd(a: number, b: number): number {
  a = Math.abs(a);
  b = Math.abs(b);
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

/** Most candidate factors `fitFactors` returns for one axis. */
const MAX_FACTOR_CANDIDATES = 8;

/**
 * The factors through the observations (x, v) with distinct xs, simplest first: an integer
 * polynomial of degree ≤ 2 (alone, when it fits), else `a·⌊(x + b)/d⌋ + c` with integers a, c,
 * 2 ≤ d ≤ 64, 0 ≤ b < d — divisors that are powers of two first (strides of 2 to 64, which
 * few probe sizes cannot tell from a neighbouring divisor: at 256, 512, 768, 1024 (+1, +3)
 * `x/32+1` and `(x+23)/31` agree), then the others; by d, then b (a floor before a ceiling when
 * the sizes cannot tell them apart). At most `MAX_FACTOR_CANDIDATES`; empty when none fits.
 */
function fitFactors(xs: readonly number[], vs: readonly number[]): Factor[] {
  const fits = (f: Factor): boolean => xs.every((x, j) => factorAt(f, x) === vs[j]);
  if (xs.length >= 2) {
    const d1 = (vs[1]! - vs[0]!) / (xs[1]! - xs[0]!);
    let poly: [number, number, number] = [vs[0]! - d1 * xs[0]!, d1, 0];
    if (xs.length >= 3) {
      const d2 = ((vs[2]! - vs[1]!) / (xs[2]! - xs[1]!) - d1) / (xs[2]! - xs[0]!);
      poly = [vs[0]! - d1 * xs[0]! + d2 * xs[0]! * xs[1]!, d1 - d2 * (xs[0]! + xs[1]!), d2];
    }
    const ints = poly.map(asInteger);
    if (ints.every((c) => c !== undefined)) {
      const [c0, c1, c2] = ints as [number, number, number];
      const f = { a: c1, b: 0, d: 1, c: c0, square: c2 };
      if (fits(f)) return [f];
    }
  }
  if (xs.length < 3) return [];
  const divisors = Array.from({ length: 63 }, (_, i) => i + 2);
  const isPowerOfTwo = (d: number): boolean => (d & (d - 1)) === 0;
  divisors.sort((p, q) => Number(isPowerOfTwo(q)) - Number(isPowerOfTwo(p)) || p - q);
  const out: Factor[] = [];
  for (const d of divisors) {
    for (let b = 0; b < d; b++) {
      const q = xs.map((x) => Math.floor((x + b) / d));
      const j = q.findIndex((v) => v !== q[0]);
      if (j < 0) continue;
      const a = (vs[j]! - vs[0]!) / (q[j]! - q[0]!);
      if (!Number.isInteger(a) || a === 0) continue;
      const f = { a, b, d, c: vs[0]! - a * q[0]!, square: 0 };
      if (fits(f)) {
        out.push(f);
        if (out.length === MAX_FACTOR_CANDIDATES) return out;
      }
    }
  }
  return out;
}

/** A factor written in the dim grammar (`TensorSpec`), parenthesized unless it is one name or number. */
function formatFactor(f: Factor, name: string): string {
  const text = bareFactor(f, name);
  return text === name || /^[0-9]+$/.test(text) ? text : `(${text})`;
}

/** A factor written in the dim grammar, unparenthesized. */
function bareFactor(f: Factor, name: string): string {
  const parts: string[] = [];
  const push = (coefficient: number, body: string): void => {
    if (coefficient === 0) return;
    const abs = Math.abs(coefficient);
    const text = body === '' ? String(abs) : abs === 1 ? body : `${abs}*${body}`;
    parts.push(coefficient < 0 ? `-${text}` : parts.length > 0 ? `+${text}` : text);
  };
  push(f.square, `${name}*${name}`);
  const quotient = f.b === 0 ? `${name}/${f.d}` : `(${name}+${f.b})/${f.d}`;
  push(f.a, f.d === 1 ? name : f.a === 1 ? quotient : `(${quotient})`);
  push(f.c, '');
  return parts.length === 0 ? '0' : parts.join('');
}

/**
 * Symbolic form of one dim the polynomial form (`inferDim`) cannot write: a product of one
 * factor per axis it depends on (`fitFactors`, fitted through the points where only that axis
 * moves away from the first point) times an integer, e.g. `64*(height/4)*(width/4)` or
 * `((width+7)/8)`; each combination of the axes' candidate factors, simplest first, is checked
 * against every observation (points where several axes move included) by evaluating the
 * written expression, and the first that reproduces them all is taken. Undefined when none does.
 */
function inferDimGeneral(values: readonly number[], points: readonly ShapePoint[], binding: DimBinding): string | undefined {
  const base = points[0]!;
  const axes: { name: string; of: (p: ShapePoint) => number }[] = [{ name: binding.batchName, of: (p) => p.batch }];
  if (binding.seqName !== undefined) axes.push({ name: binding.seqName, of: (p) => p.seqLen });
  for (const [n, v] of binding.symbols) axes.push({ name: n, of: (p) => p.symbols?.[n] ?? v });
  const v0 = values[0]!;
  const candidates: { name: string; factors: Factor[] }[] = [];
  for (const axis of axes) {
    const xs: number[] = [];
    const vs: number[] = [];
    points.forEach((p, j) => {
      if (axes.some((o) => o !== axis && o.of(p) !== o.of(base))) return;
      const x = axis.of(p);
      if (xs.includes(x)) return;
      xs.push(x);
      vs.push(values[j]!);
    });
    if (vs.every((v) => v === v0)) continue;
    const factors = fitFactors(xs, vs);
    if (factors.length === 0) return undefined;
    candidates.push({ name: axis.name, factors });
  }
  if (candidates.length === 0) return undefined;
  const write = (chosen: readonly Factor[]): string | undefined => {
    if (chosen.length === 1) return bareFactor(chosen[0]!, candidates[0]!.name);
    // v = C · Π primitive(factor): divide each factor by the gcd of its coefficients
    let product = 1;
    const written: string[] = [];
    chosen.forEach((factor, k) => {
      const name = candidates[k]!.name;
      const g = gcd(gcd(factor.a, factor.c), factor.square) || 1;
      const primitive = { ...factor, a: factor.a / g, c: factor.c / g, square: factor.square / g };
      product *= factorAt(primitive, axes.find((x) => x.name === name)!.of(base));
      written.push(formatFactor(primitive, name));
    });
    if (product === 0 || v0 % product !== 0) return undefined;
    const constant = v0 / product;
    return [...(constant === 1 ? [] : [String(constant)]), ...written].join('*');
  };
  const reproduces = (expression: string): boolean =>
    points.every((p, j) => {
      const bindings = new Map(axes.map((a) => [a.name, a.of(p)]));
      return evalDimExpression(expression, bindings) === values[j];
    });
  // combinations in order of the sum of the candidates' ranks (simplest first)
  const sizes = candidates.map((c) => c.factors.length);
  const combos: number[][] = [[]];
  for (const size of sizes) combos.splice(0, combos.length, ...combos.flatMap((c) => Array.from({ length: size }, (_, i) => [...c, i])));
  combos.sort((p, q) => p.reduce((a, b) => a + b, 0) - q.reduce((a, b) => a + b, 0));
  for (const combo of combos) {
    const expression = write(combo.map((i, k) => candidates[k]!.factors[i]!));
    if (expression !== undefined && reproduces(expression)) return expression;
  }
  return undefined;
}

/** How `resolveShapes` streams the onnxruntime probe. */
export interface ProbeOptions {
  /** Bytes of values one chunk aims at (default `PROBE_CHUNK_BYTES`); ≤ 1: one node's values per chunk. */
  readonly chunkBytes?: number;
}

/**
 * Bytes of probe outputs one onnxruntime run may hold (each is copied once into JavaScript):
 * the streamed probe sizes its chunks of values to stay near this (docs/import.md "Memory").
 */
export const PROBE_CHUNK_BYTES = 256 * 1024 * 1024;

/** Nodes in the first chunk of a streamed probe, before any value size is known. */
const FIRST_CHUNK_NODES = 16;

/**
 * Run the model at each point and collect the shapes of the values a partition needs
 * (`valuesOf`); points from `required` on are optional: a point onnxruntime rejects gives
 * undefined.
 *
 * Streamed (docs/import.md "Memory": a run that returns every intermediate holds them all at once, twice —
 * in onnxruntime and copied into JavaScript — 3.5 GB for a 1,000-node CNN): for a topologically
 * sorted graph the values are fetched in chunks of consecutive nodes; chunk k is a model made of
 * the node prefix that ends with the chunk (so onnxruntime frees every value before it that is
 * not an output) with the initializers it reads, whose outputs are the chunk's values, run at every point and released before
 * the next. Chunks are sized so that their values at the largest point take about
 * `chunkBytes` (default `PROBE_CHUNK_BYTES`), from the largest bytes per value seen so far (`FIRST_CHUNK_NODES` nodes
 * first). The price is compute: the prefixes are run again (about (chunks + 1)/2 whole runs per
 * point). An unsorted graph is probed in one chunk.
 */
async function probeShapes(
  index: GraphIndex,
  model: OnnxTypes.IModelProto,
  binding: DimBinding,
  points: readonly ShapePoint[],
  infos: ReadonlyMap<string, OnnxTypes.IValueInfoProto>,
  what: string,
  probe: ProbeInputs,
  required: number,
  chunkBytes: number,
): Promise<(Map<string, TensorShape> | undefined)[]> {
  checkProbeInputs(index, infos, probe, what);
  const graph = index.graph;
  const wanted = new Set(valuesOf(index));
  const nodeCount = index.nodes.length;
  const sorted = isTopologicallySorted(index);
  const feedsAt = points.map((point) => {
    const feeds: Record<string, ort.Tensor> = {};
    for (const name of index.inputs) feeds[name] = zeroTensor(infos.get(name), binding, point, name, what, probe);
    return feeds;
  });
  const tables: (Map<string, TensorShape> | undefined)[] = feedsAt.map((feeds) => {
    const table = new Map<string, TensorShape>();
    for (const [name, t] of Object.entries(feeds)) table.set(name, { elemType: elemTypeOfOrt(t.type) ?? 0, dims: [...t.dims] });
    return table;
  });
  let bytesPerValue: number | undefined;
  let start = 0;
  while (start < nodeCount) {
    let end = start;
    let fetch: string[] = [];
    if (!sorted) end = nodeCount;
    else if (bytesPerValue === undefined) end = Math.min(nodeCount, start + FIRST_CHUNK_NODES);
    else {
      const most = bytesPerValue > 0 ? Math.max(1, Math.floor(chunkBytes / bytesPerValue)) : Infinity;
      let values = 0;
      while (end < nodeCount) {
        const adds = index.writes[end]!.filter((o) => wanted.has(o)).length;
        if (end > start && values + adds > most) break;
        values += adds;
        end += 1;
      }
    }
    for (let i = start; i < end; i++) for (const o of index.writes[i]!) if (wanted.has(o) && !fetch.includes(o)) fetch.push(o);
    fetch = fetch.filter((o) => !index.inputs.includes(o));
    if (fetch.length > 0) {
      const outputs = fetch.map((name) => {
        const info = infos.get(name);
        return info?.type ? { name, type: info.type } : { name };
      });
      // Only the initializers the prefix reads (onnxruntime warns about each unused one).
      const read = new Set<string>();
      for (let i = 0; i < end; i++) for (const r of index.reads[i]!) read.add(r);
      const inputs = new Set(index.inputs);
      const prefix = onnx.ModelProto.create({
        ...model,
        graph: onnx.GraphProto.create({
          ...graph,
          node: graph.node!.slice(0, end),
          input: (graph.input ?? []).filter((v) => inputs.has(v.name ?? '') || read.has(v.name ?? '')),
          initializer: (graph.initializer ?? []).filter((t) => read.has(t.name ?? '')),
          sparseInitializer: (graph.sparseInitializer ?? []).filter((t) => read.has(t.values?.name ?? '')),
          output: outputs,
          valueInfo: [],
        }),
      });
      const largest = await probeChunk(index, prefix, fetch, points, feedsAt, tables, binding, infos, what, probe, required);
      bytesPerValue = Math.max(bytesPerValue ?? 0, largest / fetch.length);
    }
    start = end;
  }
  return tables;
}

/**
 * One chunk of `probeShapes`: load `prefix`, run it at every point whose table is still
 * defined, add the dims of `fetch` to the tables (an optional point that fails: its table
 * becomes undefined), release the session.
 * @returns the bytes of the chunk's values at the point where they were largest.
 * @throws ProbeRunError when a required point fails; InvalidModelError when onnxruntime cannot load it.
 */
async function probeChunk(
  index: GraphIndex,
  prefix: OnnxTypes.ModelProto,
  fetch: readonly string[],
  points: readonly ShapePoint[],
  feedsAt: readonly Record<string, ort.Tensor>[],
  tables: (Map<string, TensorShape> | undefined)[],
  binding: DimBinding,
  infos: ReadonlyMap<string, OnnxTypes.IValueInfoProto>,
  what: string,
  probe: ProbeInputs,
  required: number,
): Promise<number> {
  let session: ort.InferenceSession;
  try {
    session = await ort.InferenceSession.create(onnx.ModelProto.encode(prefix).finish(), {
      intraOpNumThreads: 1,
      interOpNumThreads: 1,
      graphOptimizationLevel: 'disabled',
      executionProviders: ['cpu'],
    });
  } catch (cause) {
    throw new InvalidModelError(`${what}: its value shapes are not fully annotated and onnxruntime cannot load it to infer them: ${describeError(cause)}`, { cause });
  }
  let largest = 0;
  try {
    for (const [j, point] of points.entries()) {
      const table = tables[j];
      if (table === undefined) continue;
      const feeds = feedsAt[j]!;
      const used = new Set((prefix.graph?.input ?? []).map((v) => v.name));
      const given = Object.fromEntries(Object.entries(feeds).filter(([name]) => used.has(name) && session.inputNames.includes(name)));
      let results: ort.InferenceSession.ReturnType;
      try {
        results = await session.run(given, [...fetch]);
      } catch (cause) {
        if (j >= required) {
          tables[j] = undefined;
          continue;
        }
        const fed = Object.entries(feeds)
          .map(([name, t]) => `${name} [${t.dims.join(', ')}] = ${probe.values?.[name] ?? (t.type === 'string' ? "''" : 0)}`)
          .join('; ');
        const example = index.inputs[0] ?? 'NAME';
        const message = describeError(cause);
        throw new ProbeRunError(
          `${what}: onnxruntime failed to run it at batch ${point.batch}${binding.seqName ? `, ${binding.seqName} ${point.seqLen}` : ''} to infer value shapes: ${message}. ` +
            `The probe fed ${fed}. Tell it sizes and values the model accepts: --probe-shape NAME=DxD… (e.g. --probe-shape ${example}=${(feeds[example]?.dims ?? [1]).map((d, i) => (i === 0 ? 1 : d)).join('x')} with your sizes; a sequence-axis dim also sets the probe's sequence length) and --probe-value NAME=V for inputs read as sizes, rates or indices (e.g. a sample rate)${scalarHint(index, infos, probe)}`,
          /running (\w+) node/.exec(message)?.[1],
          /Name:'([^']*)'/.exec(message)?.[1],
          { cause },
        );
      }
      let bytes = 0;
      for (const [name, value] of Object.entries(results)) {
        const elemType = elemTypeOfOrt(value.type);
        if (elemType !== undefined) table.set(name, { elemType, dims: [...value.dims] });
        bytes += value.type === 'string' ? value.size * NOMINAL_STRING_BYTES : (value.data as { byteLength?: number }).byteLength ?? 0;
        value.dispose();
      }
      largest = Math.max(largest, bytes);
    }
    return largest;
  } finally {
    await session.release();
  }
}

/**
 * The numeric scalar (0-d) inputs the user gave no `--probe-value` for, which zeros cannot
 * stand in for when the model reads them as a rate, a size or an index: `; input 'sr' is a
 * scalar (0-d int64) and may be one: give --probe-value sr=V`; '' when there is none.
 */
function scalarHint(index: GraphIndex, infos: ReadonlyMap<string, OnnxTypes.IValueInfoProto>, probe: ProbeInputs): string {
  const scalars = index.inputs.filter((name) => {
    const a = annotation(infos.get(name));
    const type = ortTypeOf(a?.elemType ?? 0);
    return a !== undefined && a.dims.length === 0 && type !== undefined && type !== 'string' && type !== 'bool' && probe.values?.[name] === undefined;
  });
  if (scalars.length === 0) return '';
  const text = scalars.map((name) => `'${name}' (${ortTypeOf(annotation(infos.get(name))!.elemType)})`).join(', ');
  return `; the scalar (0-d) input${scalars.length > 1 ? 's' : ''} ${text} may be read so, which zeros cannot guess: give --probe-value ${scalars[0]}=V${scalars.length > 1 ? ' (and the others)' : ''}`;
}

/**
 * Check the user's probe inputs against the graph.
 * @throws RangeError naming the option and the input when a name is not a graph input, a shape
 *   has another rank than declared or differs from a fixed declared dim, or a value is given
 *   for a string input.
 */
export function checkProbeInputs(index: GraphIndex, infos: ReadonlyMap<string, OnnxTypes.IValueInfoProto>, probe: ProbeInputs, what: string): void {
  const inputs = new Set(index.inputs);
  const unknown = (flag: string, name: string): RangeError => new RangeError(`${flag} ${name}=…: '${name}' is not an input of ${what} (its inputs: ${index.inputs.join(', ')})`);
  for (const [name, dims] of Object.entries(probe.shapes ?? {})) {
    if (!inputs.has(name)) throw unknown('--probe-shape', name);
    const declared = annotation(infos.get(name))?.dims;
    if (declared === undefined) continue;
    if (declared.length !== dims.length) throw new RangeError(`--probe-shape ${name}=${dims.join('x')}: '${name}' has rank ${declared.length} ([${declared.map((d) => d ?? '?').join(', ')}]), not ${dims.length}`);
    declared.forEach((d, i) => {
      if (typeof d === 'number' && d !== dims[i]) throw new RangeError(`--probe-shape ${name}=${dims.join('x')}: dim ${i} of '${name}' is fixed at ${d}`);
    });
  }
  for (const name of Object.keys(probe.values ?? {})) {
    if (!inputs.has(name)) throw unknown('--probe-value', name);
    const elemType = infos.get(name)?.type?.tensorType?.elemType;
    if (elemType === (onnx.TensorProto.DataType.STRING as number) || elemType === (onnx.TensorProto.DataType.FLOAT16 as number)) {
      throw new RangeError(`--probe-value ${name}=…: '${name}' is a ${elemType === (onnx.TensorProto.DataType.STRING as number) ? 'string' : 'float16'} input; probe values apply to the other numeric types`);
    }
  }
}

/**
 * The sequence length `probe.shapes` implies: the size given for a dim bound to the sequence
 * axis (or an anonymous later dim, which the probe treats as that axis); undefined when none.
 * @throws RangeError when two given shapes imply different lengths.
 */
export function probeSeqLen(index: GraphIndex, binding: DimBinding, probe: ProbeInputs): number | undefined {
  if (binding.seqName === undefined) return undefined;
  let found: { value: number; from: string } | undefined;
  for (const [name, dims] of Object.entries(probe.shapes ?? {})) {
    const declared = declaredDims(index, name) ?? [];
    declared.forEach((d, i) => {
      if (i === 0 || dims[i] === undefined) return;
      const isSeq = d === undefined || (typeof d === 'string' && binding.seq.has(d));
      if (!isSeq) return;
      if (found !== undefined && found.value !== dims[i]) throw new RangeError(`--probe-shape: ${found.from} and ${name} give the sequence axis '${binding.seqName}' different sizes (${found.value}, ${dims[i]})`);
      found = { value: dims[i], from: name };
    });
  }
  return found?.value;
}

/** A probe input tensor: zeros (or `probe.values[name]`), shaped by the point and `probe.shapes[name]`. */
function zeroTensor(info: OnnxTypes.IValueInfoProto | undefined, binding: DimBinding, point: ShapePoint, name: string, what: string, probe: ProbeInputs = {}): ort.Tensor {
  const a = annotation(info);
  const elemType = info?.type?.tensorType?.elemType ?? 0;
  const type = ortTypeOf(elemType);
  if (!a || type === undefined) throw new InvalidModelError(`${what}: graph input '${name}' is not a tensor of a type onnxruntime-node can feed`);
  // Unbound dims: dim 0 is the batch; an anonymous later dim is the seq axis when the model has
  // one (detectDynamicAxes names it so); anything else is 1.
  const given = probe.shapes?.[name];
  const dims = a.dims.map((d, i) => bindDim(d, binding, point) ?? (i === 0 ? point.batch : d === undefined && binding.seqName !== undefined ? point.seqLen : (given?.[i] ?? 1)));
  const n = elementCount(dims);
  const value = probe.values?.[name];
  if (value !== undefined && type !== 'string') {
    const t = zeroTensor(info, binding, point, name, what, { shapes: probe.shapes ?? {} });
    const data = t.data as unknown as { fill(v: number | bigint): void };
    data.fill(type === 'int64' || type === 'uint64' ? BigInt(Math.trunc(value)) : type === 'bool' ? (value ? 1 : 0) : value);
    return t;
  }
  switch (type) {
    case 'float32':
      return new ort.Tensor('float32', new Float32Array(n), dims);
    case 'float64':
      return new ort.Tensor('float64', new Float64Array(n), dims);
    case 'int64':
      return new ort.Tensor('int64', new BigInt64Array(n), dims);
    case 'uint64':
      return new ort.Tensor('uint64', new BigUint64Array(n), dims);
    case 'int32':
      return new ort.Tensor('int32', new Int32Array(n), dims);
    case 'uint32':
      return new ort.Tensor('uint32', new Uint32Array(n), dims);
    case 'int16':
      return new ort.Tensor('int16', new Int16Array(n), dims);
    case 'uint16':
      return new ort.Tensor('uint16', new Uint16Array(n), dims);
    case 'float16':
      return new ort.Tensor('float16', new Uint16Array(n), dims);
    case 'int8':
      return new ort.Tensor('int8', new Int8Array(n), dims);
    case 'uint8':
      return new ort.Tensor('uint8', new Uint8Array(n), dims);
    case 'bool':
      return new ort.Tensor('bool', new Uint8Array(n), dims);
    default:
      return new ort.Tensor('string', new Array<string>(n).fill(''), dims);
  }
}
