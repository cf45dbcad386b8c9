/**
 * Cutting a graph into operators: which tensors cross each cut (boundaries, passthrough), and
 * the standalone ONNX sub-model of each operator.
 *
 * Boundary semantics are those of `model/spec.ts`: boundary 0 = model inputs, boundary N =
 * model outputs; a value lives on boundaries [start, last] where start = 0 for a graph input
 * and p + 1 for a value produced by operator p, and last = N for a graph output, else the
 * last operator reading it. Then
 *   inputs(k)      = values on boundary k that operator k reads,
 *   outputs(k)     = values operator k produces that live on boundary k + 1,
 *   passthrough(k) = values on boundaries k and k + 1 (live across k; k may also read them),
 * and boundary(k + 1) = outputs(k) ∪ passthrough(k) = inputs(k + 1) ∪ passthrough(k + 1).
 * Initializers never cross boundaries: each operator's sub-model holds a copy of those it
 * reads (directly or from a subgraph).
 */
import { InvalidModelError } from '../../errors.ts';
import type { GraphIndex } from './graph.ts';
import { nodeLabel, subgraphsOf, toNumber } from './graph.ts';
import { onnx } from './proto.ts';
import type { OnnxTypes } from './proto.ts';
import { declaredValueInfos } from './shapes.ts';
import type { SymbolicShape } from './shapes.ts';

/** The tensors of one operator. Names are ordered by the boundary order (see `computeCuts`). */
export interface OperatorCut {
  readonly index: number;
  /** Indices into `graph.node`, in topological order. */
  readonly nodes: readonly number[];
  readonly inputs: readonly string[];
  readonly outputs: readonly string[];
  readonly passthrough: readonly string[];
  /** Initializers (dense or sparse) the operator's nodes read. */
  readonly constants: readonly string[];
}

/**
 * Check an assignment of nodes to operators.
 * @param order a topological order of the nodes (indices into `graph.node`).
 * @returns the operator count N.
 * @throws RangeError when `operatorOfNode` has the wrong length, holds non-integers or
 *   negatives, skips an operator index, or puts a node in an earlier operator than a node it
 *   reads from (operators must be contiguous in some topological order).
 */
export function checkAssignment(index: GraphIndex, operatorOfNode: readonly number[], what: string): number {
  const n = index.nodes.length;
  if (operatorOfNode.length !== n) {
    throw new RangeError(`operatorOfNode of ${what} has ${operatorOfNode.length} entries but the graph has ${n} nodes`);
  }
  if (n === 0) throw new RangeError(`${what} has no nodes to partition into operators`);
  let max = -1;
  operatorOfNode.forEach((k, i) => {
    if (!Number.isInteger(k) || k < 0) throw new RangeError(`operatorOfNode[${i}] of ${what} is ${k}; it must be an integer ≥ 0`);
    max = Math.max(max, k);
  });
  const used = new Array<boolean>(max + 1).fill(false);
  for (const k of operatorOfNode) used[k] = true;
  const missing = used.indexOf(false);
  if (missing >= 0) throw new RangeError(`operatorOfNode of ${what} assigns no node to operator ${missing} (operators must be numbered 0..${max} with none empty)`);
  for (let j = 0; j < n; j++) {
    for (const r of index.reads[j]!) {
      const p = index.producer.get(r);
      if (p !== undefined && operatorOfNode[p]! > operatorOfNode[j]!) {
        throw new RangeError(
          `operatorOfNode of ${what} is not contiguous in a topological order: ${nodeLabel(index.nodes[j]!, j)} in operator ${operatorOfNode[j]} reads '${r}' from ${nodeLabel(index.nodes[p]!, p)} in later operator ${operatorOfNode[p]}`,
        );
      }
    }
  }
  return max + 1;
}

/**
 * Boundaries and tensors of every operator, with the invariant boundary(k+1) =
 * outputs(k) ∪ passthrough(k) = inputs(k+1) ∪ passthrough(k+1) asserted.
 * @param order topological order of the nodes.
 * @param operatorOfNode a valid assignment (see `checkAssignment`) with N operators.
 * @throws InvalidModelError when an operator produces nothing that is used later (its nodes
 *   are dead code) — such an operator would be an empty ONNX model.
 * @throws Error when the invariant fails (a bug, not bad input).
 */
export function computeCuts(index: GraphIndex, order: readonly number[], operatorOfNode: readonly number[], operatorCount: number, what: string): OperatorCut[] {
  const N = operatorCount;
  const start = new Map<string, number>();
  const last = new Map<string, number>();
  const key = new Map<string, number>();
  for (const v of index.inputs) {
    key.set(v, key.size);
    start.set(v, 0);
    last.set(v, -1);
  }
  for (const i of order) {
    for (const o of index.writes[i]!) {
      key.set(o, key.size);
      start.set(o, operatorOfNode[i]! + 1);
      last.set(o, -1);
    }
  }
  for (let j = 0; j < index.nodes.length; j++) {
    const k = operatorOfNode[j]!;
    for (const r of index.reads[j]!) {
      const s = start.get(r);
      if (s !== undefined && k >= s) last.set(r, Math.max(last.get(r)!, k));
    }
  }
  for (const o of index.outputs) last.set(o, N);
  const byKey = (a: string, b: string): number => key.get(a)! - key.get(b)!;
  const values = [...key.keys()];

  const nodesOf: number[][] = Array.from({ length: N }, () => []);
  for (const i of order) nodesOf[operatorOfNode[i]!]!.push(i);

  const cuts: OperatorCut[] = [];
  for (let k = 0; k < N; k++) {
    const reads = new Set<string>();
    const constants = new Set<string>();
    for (const i of nodesOf[k]!) {
      for (const r of index.reads[i]!) {
        if (index.initializers.has(r) || index.sparseInitializers.has(r)) constants.add(r);
        else if (start.get(r)! <= k) reads.add(r);
      }
    }
    const inputs = [...reads].sort(byKey);
    const outputs: string[] = [];
    const passthrough: string[] = [];
    for (const v of values) {
      const s = start.get(v)!;
      const l = last.get(v)!;
      if (s === k + 1 && l >= k + 1) outputs.push(v);
      else if (s <= k && l >= k + 1) passthrough.push(v);
    }
    if (outputs.length === 0) {
      const labels = nodesOf[k]!.slice(0, 3).map((i) => nodeLabel(index.nodes[i]!, i));
      throw new InvalidModelError(`${what}: operator ${k} (${labels.join(', ')}${nodesOf[k]!.length > 3 ? ', …' : ''}) produces no tensor that a later operator or a graph output uses`);
    }
    cuts.push({ index: k, nodes: nodesOf[k]!, inputs, outputs, passthrough, constants: [...constants].sort() });
  }
  assertBoundaries(cuts, index, last, what);
  return cuts;
}

/** The invariant of `computeCuts`, checked from the operators' own reads. */
function assertBoundaries(cuts: readonly OperatorCut[], index: GraphIndex, last: ReadonlyMap<string, number>, what: string): void {
  const fail = (msg: string): never => {
    throw new Error(`partition invariant violated for ${what}: ${msg}`);
  };
  const sameSet = (a: Iterable<string>, b: Iterable<string>): boolean => {
    const sa = new Set(a);
    const sb = new Set(b);
    return sa.size === sb.size && [...sa].every((x) => sb.has(x));
  };
  // boundary 0: the model inputs that something reads or that are outputs.
  let boundary = new Set(index.inputs.filter((v) => last.get(v)! >= 0));
  for (const cut of cuts) {
    for (const v of cut.inputs) if (!boundary.has(v)) fail(`operator ${cut.index} reads '${v}', which is not on boundary ${cut.index}`);
    for (const v of cut.passthrough) if (!boundary.has(v)) fail(`operator ${cut.index} passes '${v}' through, but it is not on boundary ${cut.index}`);
    if (!sameSet(boundary, [...cut.inputs, ...cut.passthrough])) {
      fail(`boundary ${cut.index} {${[...boundary].join(', ')}} ≠ inputs ∪ passthrough of operator ${cut.index} {${[...cut.inputs, ...cut.passthrough].join(', ')}}`);
    }
    const produced = new Set(cut.nodes.flatMap((i) => index.writes[i]!));
    for (const v of cut.outputs) if (!produced.has(v)) fail(`operator ${cut.index} outputs '${v}', which it does not produce`);
    for (const v of cut.passthrough) if (produced.has(v) || cut.outputs.includes(v)) fail(`operator ${cut.index} both produces and passes through '${v}'`);
    // every read of every node is satisfied inside the sub-model
    const available = new Set([...cut.inputs, ...cut.constants, ...produced]);
    for (const i of cut.nodes) for (const r of index.reads[i]!) if (!available.has(r)) fail(`node #${i} of operator ${cut.index} reads '${r}', which its sub-model lacks`);
    boundary = new Set([...cut.outputs, ...cut.passthrough]);
  }
  if (!sameSet(boundary, index.outputs)) fail(`the last boundary {${[...boundary].join(', ')}} ≠ the graph outputs {${index.outputs.join(', ')}}`);
}

/** Options of `buildOperatorModel`. */
export interface SubModelOptions {
  /** Name of operator (used for the sub-graph name). */
  readonly operatorName: string;
  /** Model name and operator count, recorded in `metadata_props`. */
  readonly modelName: string;
  readonly operatorCount: number;
  /** Symbolic shapes of values whose declared value info lacks a tensor type/shape. */
  readonly symbolic: ReadonlyMap<string, SymbolicShape>;
}

/** Value info of a boundary tensor: the declared one when it has a tensor type with a shape, else one from the inferred symbolic shape. */
function interfaceInfo(name: string, declared: ReadonlyMap<string, OnnxTypes.IValueInfoProto>, symbolic: ReadonlyMap<string, SymbolicShape>, what: string): OnnxTypes.IValueInfoProto {
  const d = declared.get(name);
  if (d?.type?.tensorType?.elemType && d.type.tensorType.shape) return d;
  const s = symbolic.get(name);
  if (!s) {
    if (d?.type?.tensorType?.elemType) return d;
    throw new InvalidModelError(`${what}: the type of tensor '${name}' is unknown, so it cannot become an operator input or output`);
  }
  return {
    name,
    ...(d?.docString ? { docString: d.docString } : {}),
    type: {
      tensorType: {
        elemType: s.elemType,
        shape: { dim: s.shape.map((x) => (typeof x === 'number' ? { dimValue: x } : { dimParam: x })) },
      },
    },
  };
}

/**
 * The standalone ONNX model of one operator: its nodes (shared with `model`, not copied), the
 * initializers they read (shared tensor objects and data buffers), graph inputs = `cut.inputs`,
 * graph outputs = `cut.outputs`, the `value_info` entries of its internal values, the
 * quantization annotations of its tensors; `ir_version`, opset imports, producer, domain,
 * model version, doc string, local functions and metadata copied from `model`, plus metadata
 * `abacus.model`, `abacus.operator`, `abacus.operators`.
 * @throws InvalidModelError when the type of an interface tensor is unknown.
 */
export function buildOperatorModel(model: OnnxTypes.IModelProto, index: GraphIndex, cut: OperatorCut, options: SubModelOptions, what: string): OnnxTypes.ModelProto {
  const graph = index.graph;
  const declared = declaredValueInfos(graph);

  const nodes = cut.nodes.map((i) => index.nodes[i]!);
  const produced = new Set(cut.nodes.flatMap((i) => index.writes[i]!));
  const outputs = new Set(cut.outputs);
  const constants = new Set(cut.constants);
  const internal = (name: string | null | undefined): boolean => !!name && produced.has(name) && !outputs.has(name);
  const touched = new Set([...cut.inputs, ...produced, ...constants]);

  const initializers = (graph.initializer ?? []).filter((t) => t.name && constants.has(t.name));
  // IR < 4 requires every initializer to be listed among the graph inputs as well.
  const legacyInputs = toNumber(model.irVersion) < 4 ? initializers.map((t) => declared.get(t.name ?? '') ?? initializerInfo(t)) : [];
  const subGraph = onnx.GraphProto.create({
    name: `${graph.name || options.modelName}/${options.operatorName}`,
    node: nodes,
    input: [...cut.inputs.map((v) => interfaceInfo(v, declared, options.symbolic, what)), ...legacyInputs],
    output: cut.outputs.map((v) => interfaceInfo(v, declared, options.symbolic, what)),
    initializer: initializers,
    sparseInitializer: (graph.sparseInitializer ?? []).filter((t) => t.values?.name && constants.has(t.values.name)),
    valueInfo: (graph.valueInfo ?? []).filter((v) => internal(v.name)),
    quantizationAnnotation: (graph.quantizationAnnotation ?? []).filter((a) => a.tensorName && touched.has(a.tensorName)),
    ...(graph.docString ? { docString: graph.docString } : {}),
  });
  return onnx.ModelProto.create({
    irVersion: toNumber(model.irVersion),
    opsetImport: model.opsetImport ?? [],
    producerName: model.producerName ?? '',
    producerVersion: model.producerVersion ?? '',
    domain: model.domain ?? '',
    modelVersion: toNumber(model.modelVersion),
    docString: model.docString ?? '',
    functions: model.functions ?? [],
    metadataProps: [
      ...(model.metadataProps ?? []),
      { key: 'abacus.model', value: options.modelName },
      { key: 'abacus.operator', value: String(cut.index) },
      { key: 'abacus.operators', value: String(options.operatorCount) },
    ],
    graph: subGraph,
  });
}

/** Value info of an initializer (type and dims from the tensor). */
function initializerInfo(t: OnnxTypes.ITensorProto): OnnxTypes.IValueInfoProto {
  return { name: t.name ?? '', type: { tensorType: { elemType: t.dataType ?? 0, shape: { dim: (t.dims ?? []).map((d) => ({ dimValue: toNumber(d) })) } } } };
}

/** Initializer tensors held inside the subgraphs of some nodes (If/Loop bodies), recursively. */
export function subgraphInitializers(nodes: readonly OnnxTypes.INodeProto[]): OnnxTypes.ITensorProto[] {
  const out: OnnxTypes.ITensorProto[] = [];
  const visit = (g: OnnxTypes.IGraphProto): void => {
    out.push(...(g.initializer ?? []));
    for (const n of g.node ?? []) for (const s of subgraphsOf(n)) visit(s);
  };
  for (const n of nodes) for (const g of subgraphsOf(n)) visit(g);
  return out;
}
