/**
 * Structural analysis of an ONNX graph: who produces and who reads every value, topological
 * order (with cycle detection), dead-node pruning and dynamic-axis detection.
 *
 * Value scoping follows the ONNX IR spec (onnx/docs/IR.md, "Names Within a Graph" and
 * "Nested graphs"): a node with subgraph attributes (If, Loop, Scan) implicitly reads every
 * outer-scope value its subgraphs reference; those reads count as reads of the node itself, so
 * a partition never separates an If from the values its branches use.
 *
 * Everything here is pure: models are never mutated, new protos share the inputs' node and
 * tensor objects (and their data buffers).
 */
import { InvalidModelError } from '../../errors.ts';
import type { DynamicAxes } from '../spec.ts';
import { onnx } from './proto.ts';
import type { OnnxTypes } from './proto.ts';

/**
 * protobufjs decodes int64 fields (dims, ir_version, ints attributes) as Long objects; models
 * built in memory hold numbers. Normalize either to a number (0 for null/undefined). Takes
 * `unknown` because onnx-proto types these fields as `number | Long`.
 */
export function toNumber(v: unknown): number {
  if (typeof v === 'number') return v;
  if (v === null || v === undefined) return 0;
  if (typeof v === 'object' && 'toNumber' in v && typeof v.toNumber === 'function') return Number((v as { toNumber(): unknown }).toNumber());
  return Number(v);
}

/** Human label of a node for error messages: `'name' (OpType, node #i)`. */
export function nodeLabel(node: OnnxTypes.INodeProto, index: number): string {
  const name = node.name ? `'${node.name}' ` : '';
  return `${name}(${node.opType ?? '?'}, node #${index})`;
}

/** Subgraphs held by a node's attributes (If branches, Loop/Scan bodies). */
export function subgraphsOf(node: OnnxTypes.INodeProto): OnnxTypes.IGraphProto[] {
  const out: OnnxTypes.IGraphProto[] = [];
  for (const a of node.attribute ?? []) {
    if (a.g) out.push(a.g);
    for (const g of a.graphs ?? []) out.push(g);
  }
  return out;
}

/** The nodes and, recursively, the nodes of their subgraphs (If branches, Loop and Scan bodies), depth first. */
export function* nodesWithSubgraphs(nodes: readonly OnnxTypes.INodeProto[]): Generator<OnnxTypes.INodeProto> {
  for (const node of nodes) {
    yield node;
    for (const g of subgraphsOf(node)) yield* nodesWithSubgraphs(g.node ?? []);
  }
}

/**
 * Names a graph references from its enclosing scopes: every name read by its nodes (and,
 * recursively, by their subgraphs) that the graph does not define itself (inputs,
 * initializers, node outputs). Empty names (omitted optional inputs) are skipped.
 */
export function outerScopeReads(graph: OnnxTypes.IGraphProto): Set<string> {
  const defined = new Set<string>();
  for (const v of graph.input ?? []) if (v.name) defined.add(v.name);
  for (const t of graph.initializer ?? []) if (t.name) defined.add(t.name);
  for (const t of graph.sparseInitializer ?? []) if (t.values?.name) defined.add(t.values.name);
  for (const n of graph.node ?? []) for (const o of n.output ?? []) if (o) defined.add(o);
  const refs = new Set<string>();
  for (const n of graph.node ?? []) {
    for (const i of n.input ?? []) if (i && !defined.has(i)) refs.add(i);
    for (const g of subgraphsOf(n)) for (const r of outerScopeReads(g)) if (!defined.has(r)) refs.add(r);
  }
  return refs;
}

/** Per-graph index of values and their producers/readers. Indices refer to `graph.node`. */
export interface GraphIndex {
  readonly graph: OnnxTypes.IGraphProto;
  readonly nodes: readonly OnnxTypes.INodeProto[];
  /** Per node: distinct non-empty names it reads, explicit inputs first, then subgraph reads. */
  readonly reads: readonly (readonly string[])[];
  /** Per node: its non-empty output names. */
  readonly writes: readonly (readonly string[])[];
  /** Value name → index of the node producing it. */
  readonly producer: ReadonlyMap<string, number>;
  /** Value name → indices of the nodes reading it (ascending, each once). */
  readonly readers: ReadonlyMap<string, readonly number[]>;
  /** Graph inputs that are real inputs (not initializers), in declaration order. */
  readonly inputs: readonly string[];
  /** Graph outputs in declaration order, each once. */
  readonly outputs: readonly string[];
  /** Dense initializers by name (including any listed as graph inputs: those are constants here). */
  readonly initializers: ReadonlyMap<string, OnnxTypes.ITensorProto>;
  /** Sparse initializers by name. */
  readonly sparseInitializers: ReadonlyMap<string, OnnxTypes.ISparseTensorProto>;
}

/**
 * Index a graph and check that it is well formed (SSA, every read defined).
 * @param what label of the model for messages (file name or model name).
 * @throws InvalidModelError when a value is produced twice, a node reads an undefined value, a
 *   graph output is undefined or is a bare initializer, or a node has no op type.
 */
export function indexGraph(graph: OnnxTypes.IGraphProto, what: string): GraphIndex {
  const nodes = graph.node ?? [];
  const initializers = new Map<string, OnnxTypes.ITensorProto>();
  for (const t of graph.initializer ?? []) if (t.name) initializers.set(t.name, t);
  const sparseInitializers = new Map<string, OnnxTypes.ISparseTensorProto>();
  for (const t of graph.sparseInitializer ?? []) if (t.values?.name) sparseInitializers.set(t.values.name, t);
  const isConstant = (n: string): boolean => initializers.has(n) || sparseInitializers.has(n);

  const inputs: string[] = [];
  const inputSet = new Set<string>();
  for (const v of graph.input ?? []) {
    if (!v.name) throw new InvalidModelError(`${what}: a graph input has no name`);
    if (inputSet.has(v.name)) throw new InvalidModelError(`${what}: graph input '${v.name}' is declared twice`);
    inputSet.add(v.name);
    if (!isConstant(v.name)) inputs.push(v.name);
  }

  const producer = new Map<string, number>();
  const writes: string[][] = [];
  nodes.forEach((node, i) => {
    if (!node.opType) throw new InvalidModelError(`${what}: node #${i} has no op_type`);
    const outs: string[] = [];
    for (const o of node.output ?? []) {
      if (!o) continue;
      const prev = producer.get(o);
      if (prev !== undefined) {
        throw new InvalidModelError(`${what}: value '${o}' is produced by both ${nodeLabel(nodes[prev]!, prev)} and ${nodeLabel(node, i)}`);
      }
      if (inputSet.has(o) || isConstant(o)) {
        throw new InvalidModelError(`${what}: ${nodeLabel(node, i)} writes '${o}', which is already a graph input or initializer`);
      }
      producer.set(o, i);
      outs.push(o);
    }
    writes.push(outs);
  });

  const reads: string[][] = [];
  const readers = new Map<string, number[]>();
  nodes.forEach((node, i) => {
    const seen = new Set<string>();
    const list: string[] = [];
    const add = (name: string): void => {
      if (!name || seen.has(name)) return;
      if (!producer.has(name) && !inputSet.has(name) && !isConstant(name)) {
        throw new InvalidModelError(`${what}: ${nodeLabel(node, i)} reads '${name}', which no node, graph input or initializer provides`);
      }
      seen.add(name);
      list.push(name);
      let r = readers.get(name);
      if (!r) readers.set(name, (r = []));
      r.push(i);
    };
    for (const name of node.input ?? []) add(name);
    for (const g of subgraphsOf(node)) for (const name of outerScopeReads(g)) add(name);
    reads.push(list);
  });

  const outputs: string[] = [];
  for (const v of graph.output ?? []) {
    if (!v.name) throw new InvalidModelError(`${what}: a graph output has no name`);
    if (outputs.includes(v.name)) continue;
    if (!producer.has(v.name) && !inputSet.has(v.name)) {
      const why = isConstant(v.name) ? 'is an initializer (a constant graph output is not supported)' : 'is not produced by any node nor a graph input';
      throw new InvalidModelError(`${what}: graph output '${v.name}' ${why}`);
    }
    outputs.push(v.name);
  }

  return { graph, nodes, reads, writes, producer, readers, inputs, outputs, initializers, sparseInitializers };
}

/** Indices of the nodes a node depends on (producers of what it reads), each once. */
export function predecessors(index: GraphIndex, node: number): number[] {
  const out = new Set<number>();
  for (const r of index.reads[node]!) {
    const p = index.producer.get(r);
    if (p !== undefined) out.add(p);
  }
  return [...out];
}

/**
 * A topological order of the nodes (Kahn's algorithm). Stable: among ready nodes the one that
 * comes first in `graph.node` goes first, so an already sorted graph keeps its order.
 * @returns node indices in order.
 * @throws InvalidModelError naming the nodes of one cycle when the graph has a cycle.
 */
export function topologicalOrder(index: GraphIndex, what: string): number[] {
  const n = index.nodes.length;
  const indegree = new Array<number>(n).fill(0);
  const succ: number[][] = Array.from({ length: n }, () => []);
  for (let j = 0; j < n; j++) {
    for (const i of predecessors(index, j)) {
      indegree[j]! += 1;
      succ[i]!.push(j);
    }
  }
  const heap = new MinHeap();
  for (let j = 0; j < n; j++) if (indegree[j] === 0) heap.push(j);
  const order: number[] = [];
  while (heap.size > 0) {
    const i = heap.pop();
    order.push(i);
    for (const j of succ[i]!) {
      indegree[j]! -= 1;
      if (indegree[j] === 0) heap.push(j);
    }
  }
  if (order.length < n) {
    const cycle = findCycle(index, new Set(order));
    const names = cycle.map((i) => nodeLabel(index.nodes[i]!, i));
    throw new InvalidModelError(`${what}: the graph has a cycle through ${names.join(' → ')} → ${names[0] ?? ''}; an ONNX graph must be acyclic`);
  }
  return order;
}

/** Nodes of one cycle among the nodes not in `done` (each of them lies on or behind a cycle). */
function findCycle(index: GraphIndex, done: ReadonlySet<number>): number[] {
  let start = 0;
  while (done.has(start)) start++;
  // Walk backwards through unsorted predecessors: every unsorted node has one, so the walk
  // must revisit a node; the part of the walk from that node on is a cycle.
  const seenAt = new Map<number, number>();
  const path: number[] = [];
  let cur = start;
  while (!seenAt.has(cur)) {
    seenAt.set(cur, path.length);
    path.push(cur);
    const next = predecessors(index, cur).find((p) => !done.has(p));
    if (next === undefined) break; // cannot happen for an unsorted node; stay defensive
    cur = next;
  }
  const from = seenAt.get(cur) ?? 0;
  return path.slice(from).reverse();
}

/** True when every node comes after the producers of all values it reads. */
export function isTopologicallySorted(index: GraphIndex): boolean {
  for (let j = 0; j < index.nodes.length; j++) {
    for (const r of index.reads[j]!) {
      const p = index.producer.get(r);
      if (p !== undefined && p >= j) return false;
    }
  }
  return true;
}

/** A copy of `model` whose graph has the given nodes (other fields shared). */
export function withNodes(model: OnnxTypes.IModelProto, nodes: OnnxTypes.INodeProto[]): OnnxTypes.ModelProto {
  const graph = onnx.GraphProto.create({ ...(model.graph ?? {}), node: nodes });
  return onnx.ModelProto.create({ ...model, graph });
}

/**
 * The model with its nodes in a (stable) topological order; the model itself if already sorted.
 * @throws InvalidModelError as `indexGraph` and `topologicalOrder`.
 */
export function sortModelTopologically(model: OnnxTypes.ModelProto, what: string): OnnxTypes.ModelProto {
  const index = indexGraph(requireGraph(model, what), what);
  const order = topologicalOrder(index, what);
  if (order.every((v, i) => v === i)) return model;
  return withNodes(model, order.map((i) => index.nodes[i]!));
}

/**
 * Nodes that contribute to some graph output (reverse reachability over reads), as a boolean
 * mask over `graph.node`.
 */
export function liveNodes(index: GraphIndex): boolean[] {
  const live = new Array<boolean>(index.nodes.length).fill(false);
  const stack: number[] = [];
  const need = (name: string): void => {
    const p = index.producer.get(name);
    if (p !== undefined && !live[p]) {
      live[p] = true;
      stack.push(p);
    }
  };
  for (const o of index.outputs) need(o);
  while (stack.length > 0) {
    const i = stack.pop()!;
    for (const r of index.reads[i]!) need(r);
  }
  return live;
}

/**
 * The model without nodes whose results never reach a graph output (onnxruntime drops them
 * too, so outputs are unchanged), and without initializers nothing reads any more.
 * Returns the model itself when nothing is dead.
 */
export function pruneDeadNodes(model: OnnxTypes.ModelProto, what: string): OnnxTypes.ModelProto {
  const graph = requireGraph(model, what);
  const index = indexGraph(graph, what);
  const live = liveNodes(index);
  if (live.every(Boolean)) return model;
  const nodes = index.nodes.filter((_, i) => live[i]);
  const used = new Set<string>();
  index.nodes.forEach((_, i) => {
    if (live[i]) for (const r of index.reads[i]!) used.add(r);
  });
  for (const o of index.outputs) used.add(o);
  const produced = new Set(nodes.flatMap((n) => n.output ?? []));
  const keepValue = (name: string | null | undefined): boolean => !!name && (used.has(name) || produced.has(name));
  const newGraph = onnx.GraphProto.create({
    ...graph,
    node: nodes,
    initializer: (graph.initializer ?? []).filter((t) => keepValue(t.name) || (graph.input ?? []).some((v) => v.name === t.name)),
    valueInfo: (graph.valueInfo ?? []).filter((v) => keepValue(v.name)),
  });
  return onnx.ModelProto.create({ ...model, graph: newGraph });
}

/** The model's graph. @throws InvalidModelError when there is none. */
export function requireGraph(model: OnnxTypes.IModelProto, what: string): OnnxTypes.IGraphProto {
  if (!model.graph) throw new InvalidModelError(`${what}: the model has no graph`);
  return model.graph;
}

/** Version of the default (`ai.onnx`) opset the model imports; 0 when it imports none. */
export function defaultOpsetVersion(model: OnnxTypes.IModelProto): number {
  for (const o of model.opsetImport ?? []) if (!o.domain || o.domain === 'ai.onnx') return toNumber(o.version);
  return 0;
}

/** Size a dynamic input dim other than batch and seq takes in the shape probe unless `--probe-shape` gives one (a multiple of 32, as strided detectors need). */
export const DEFAULT_SYMBOL_SIZE = 64;

/**
 * Dynamic axes of a model from its inputs' declared shapes: `batch` = the symbolic name of dim 0
 * of the first input whose dim 0 is symbolic (`batch` when that dim is anonymous, and also when
 * no input has a symbolic dim 0, in which case the model has a fixed batch); `seq` = the first
 * other symbolic dim of any input (`seq` when anonymous), absent when there is none — unless
 * the inputs' other dims carry two or more distinct names (a detector's `height` and `width`):
 * then there is no `seq` and each name is its own symbol (`DynamicAxes.symbols`), at
 * `DEFAULT_SYMBOL_SIZE` until the importer sets the probe's sizes.
 */
export function detectDynamicAxes(model: OnnxTypes.IModelProto): DynamicAxes {
  const graph = model.graph ?? {};
  const constants = new Set((graph.initializer ?? []).map((t) => t.name));
  let batch: string | undefined;
  let seq: string | undefined;
  const inputs = (graph.input ?? []).filter((v) => !constants.has(v.name));
  for (const v of inputs) {
    const d0 = v.type?.tensorType?.shape?.dim?.[0];
    if (d0 && !isFixedDim(d0)) {
      batch = d0.dimParam || 'batch';
      break;
    }
  }
  batch ??= 'batch';
  const named: string[] = [];
  for (const v of inputs) {
    const dims = v.type?.tensorType?.shape?.dim ?? [];
    for (let i = 1; i < dims.length; i++) {
      const p = dims[i]!.dimParam;
      if (p && p !== batch && !named.includes(p)) named.push(p);
    }
  }
  if (named.length >= 2) return { batch, symbols: Object.fromEntries(named.map((n) => [n, DEFAULT_SYMBOL_SIZE])) };
  for (const v of inputs) {
    const dims = v.type?.tensorType?.shape?.dim ?? [];
    for (let i = 1; i < dims.length && seq === undefined; i++) {
      const d = dims[i]!;
      if (!isFixedDim(d) && d.dimParam !== batch) seq = d.dimParam || 'seq';
    }
  }
  return seq === undefined ? { batch } : { batch, seq };
}

/**
 * A declared dim: its value, its symbolic name, or undefined when it is anonymous (neither
 * set). Works for decoded protos (where unset fields fall back to prototype defaults) and for
 * plain objects alike.
 */
export function dimOf(d: OnnxTypes.TensorShapeProto.IDimension): number | string | undefined {
  if (d.dimParam) return d.dimParam;
  if (Object.prototype.hasOwnProperty.call(d, 'dimValue') && d.dimValue !== null && d.dimValue !== undefined) return toNumber(d.dimValue);
  return undefined;
}

/** True for a dim with a concrete value. */
export function isFixedDim(d: OnnxTypes.TensorShapeProto.IDimension): boolean {
  return typeof dimOf(d) === 'number';
}

/** Binary min-heap of integers (node indices). */
class MinHeap {
  private readonly a: number[] = [];
  get size(): number {
    return this.a.length;
  }
  push(v: number): void {
    const a = this.a;
    a.push(v);
    let i = a.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (a[p]! <= v) break;
      a[i] = a[p]!;
      i = p;
    }
    a[i] = v;
  }
  pop(): number {
    const a = this.a;
    const top = a[0]!;
    const last = a.pop()!;
    if (a.length > 0) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= a.length) break;
        const r = l + 1;
        const c = r < a.length && a[r]! < a[l]! ? r : l;
        if (a[c]! >= last) break;
        a[i] = a[c]!;
        i = c;
      }
      a[i] = last;
    }
    return top;
  }
}
