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
 *
 * This module is the entry point (`resolveShapes`, `dataDependentValues`, and re-exports of the
 * parts): the declared shapes and the axis binding live in `shape-binding.ts`, the fitting of
 * symbolic dims to observations in `dim-fit.ts`, the onnxruntime probe in `probe.ts`.
 * Errors: what `probe.ts` throws (`ProbeRunError`, `InvalidModelError`, `RangeError`).
 */
import { DATA_DEPENDENT_DIM } from '../boundary.ts';
import { fitAxisFactor, formatAxisFactor, inferDim, inferDimGeneral } from './dim-fit.ts';
import type { AxisFactor, Factor, FitHints } from './dim-fit.ts';
import type { GraphIndex } from './graph.ts';
import type { OnnxTypes } from './proto.ts';
import { PROBE_CHUNK_BYTES, probeShapes, type ProbeCapture, type ProbeInputs, type ProbeOptions } from './probe.ts';
import { graphStrides, stridedOutputFactor } from './stride-rules.ts';
import { annotation, bindDim, canonicalDim, declaredValueInfos, fixedBatchSize, initializerShapes, valuesOf } from './shape-binding.ts';
import type { DimBinding, ResolvedShapes, ShapePoint, SymbolicShape, TensorShape } from './shape-binding.ts';

// The parts of the shape resolution, re-exported so that callers keep one entry point.
export { checkProbeInputs, PROBE_CHUNK_BYTES, ProbeRunError, probeSeqLen, probeSeqRange } from './probe.ts';
export type { ProbeInputs, ProbeOptions } from './probe.ts';
export { declaredValueInfos, dimBinding, fixedBatchSize } from './shape-binding.ts';
export type { DimBinding, ResolvedShapes, ShapePoint, ShapeTable, SymbolicShape, TensorShape } from './shape-binding.ts';

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
  const capture: ProbeCapture = { names: controlValues(index), values: new Map() };
  const probed = await probeShapes(index, model, binding, [...required, ...optional], infos, what, probe, required.length, options.chunkBytes ?? PROBE_CHUNK_BYTES, capture);
  const controls = new Map<string, number>();
  for (const [name, seen] of capture.values) {
    const first = seen[0];
    if (first !== undefined && Number.isFinite(first) && seen.slice(0, required.length).every((v) => v === first)) controls.set(name, first);
  }
  const all = required.concat(optional.filter((_, j) => probed[required.length + j] !== undefined));
  const tables = probed.filter((t): t is Map<string, TensorShape> => t !== undefined);
  for (const t of tables) for (const [k, v] of inits) t.set(k, v);
  const dataDependent = dataDependentValues(index);
  const symbolic = new Map<string, SymbolicShape>();
  const unresolved = new Map<string, string>();
  // Factors of single-axis dims fitted so far (value → dim → factor), composed through strided
  // ops into exact candidates for their outputs (`stride-rules.ts`), which are then preferred for
  // every later dim of that axis.
  const factors = new Map<string, (AxisFactor | undefined)[]>();
  const derived = new Map<string, Factor[]>();
  const divisors = graphStrides(index);
  const hintsFor =
    (extra: AxisFactor | undefined) =>
    (axis: string): FitHints => ({ factors: [...(extra?.axis === axis ? [extra.factor] : []), ...(derived.get(axis) ?? [])], divisors });
  for (const name of names) {
    const seen = tables.map((t) => t.get(name));
    if (seen.some((s) => s === undefined)) continue;
    const shapes = seen as TensorShape[];
    const rank = shapes[0]!.dims.length;
    if (shapes.some((s) => s.dims.length !== rank)) continue;
    const producer = index.producer.get(name);
    const node = producer === undefined || index.nodes[producer]!.output?.[0] !== name ? undefined : index.nodes[producer];
    const shape: (number | string)[] = [];
    const fitted: (AxisFactor | undefined)[] = [];
    let failure: string | undefined;
    for (let i = 0; i < rank; i++) {
      const values = shapes.map((s) => s.dims[i]!);
      const rule = node === undefined ? undefined : stridedOutputFactor(node, index, i, (input, d) => factors.get(input)?.[d]);
      if (rule !== undefined) derived.set(rule.axis, [...(derived.get(rule.axis) ?? []).filter((f) => f.b !== rule.factor.b || f.d !== rule.factor.d || f.c !== rule.factor.c), rule.factor]);
      const hints = hintsFor(rule);
      const single = fitAxisFactor(values, all, binding, hints);
      fitted.push(single);
      let dim = inferDim(values, all, binding) ?? (single === undefined ? inferDimGeneral(values, all, binding, hints) : formatAxisFactor(single));
      if (dataDependent.has(name) && (dim === undefined || values.some((v) => v === 0))) dim = DATA_DEPENDENT_DIM;
      if (dim === undefined) {
        const observed = values.map((v, j) => `${v} at (${pointText(all[j]!, binding)})`).join(', ');
        failure ??= `dim ${i} of tensor '${name}' is ${observed} (${axesText(binding)}), which is no product of integer polynomials and floor divisions of the axes`;
        dim = DATA_DEPENDENT_DIM;
      }
      shape.push(dim);
    }
    factors.set(name, fitted);
    if (failure !== undefined) unresolved.set(name, failure);
    symbolic.set(name, { elemType: shapes[0]!.elemType, shape });
  }
  return { source: 'onnxruntime', tables: tables.slice(0, points.length), symbolic, unresolved, controls };
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
 * Values that steer control flow: the condition of every If, the trip count and condition of
 * every Loop (ONNX If input 0, Loop inputs 0 and 1), when a node computes them.
 */
function controlValues(index: GraphIndex): Set<string> {
  const out = new Set<string>();
  for (const node of index.nodes) {
    const slots = node.opType === 'If' ? [0] : node.opType === 'Loop' ? [0, 1] : [];
    for (const k of slots) {
      const name = node.input?.[k];
      if (name && index.producer.has(name)) out.add(name);
    }
  }
  return out;
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
