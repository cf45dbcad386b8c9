/**
 * Constants where they are used (docs/import.md, "Constants where they are used"): `Constant` nodes, and the constant-foldable
 * subgraphs they feed (a `Cast`, `Reshape`, `Transpose`, … of constants only), become
 * initializers before a model is partitioned. Initializers never cross operator boundaries:
 * every operator's sub-model holds a copy of those it reads (`split.ts`), so a weight stored
 * as a `Constant` node (Paddle2ONNX stores every weight so) is duplicated into each operator
 * that uses it instead of being produced by operator 0 and carried to the others on every
 * query.
 *
 * A node is folded when it is in the default domain, holds no subgraph, is not random (its
 * result would change from run to run: RandomNormal, RandomUniform, their `Like` forms,
 * Bernoulli, Multinomial), produces no graph output, and every input it reads is an
 * initializer or the output of a folded node (a `Constant` reads nothing). The values that
 * unfolded nodes read are then computed: a `Constant` holding a dense `value` tensor becomes
 * that tensor (same data buffer) renamed to its output; every other value is computed by
 * running the folded nodes once with onnxruntime-node (CPU, one thread) — the same evaluation
 * onnxruntime's own constant folding performs when it loads the whole model, so the folded
 * model computes the same outputs (operators `Constant`, `ConstantOfShape`, … as in the ONNX
 * operator spec, https://onnx.ai/onnx/operators/).
 */
import * as ort from 'onnxruntime-node';
import { describeError, InvalidModelError } from '../../errors.ts';
import { elemTypeOfOrt } from './dtypes.ts';
import { indexGraph, requireGraph, subgraphsOf, toNumber } from './graph.ts';
import { onnx } from './proto.ts';
import type { OnnxTypes } from './proto.ts';

/** Ops whose result changes from run to run: never folded. */
export const RANDOM_OPS: ReadonlySet<string> = new Set(['RandomNormal', 'RandomNormalLike', 'RandomUniform', 'RandomUniformLike', 'Bernoulli', 'Multinomial']);

/** What `foldConstants` did. */
export interface FoldResult {
  /** The model with folded nodes removed and their used results as initializers (the input model itself when nothing folds). */
  readonly model: OnnxTypes.ModelProto;
  /** Number of nodes removed. */
  readonly foldedNodes: number;
  /** Names of the initializers added (values unfolded nodes read). */
  readonly addedInitializers: readonly string[];
}

/**
 * Fold `Constant` nodes and the constant-only subgraphs they feed into initializers (file
 * header). Pure: `model` is not modified; the result shares its nodes and tensor buffers.
 * @param model a model whose external data is loaded.
 * @param what model label for messages.
 * @throws InvalidModelError for a malformed graph (as `indexGraph`), or when onnxruntime
 *   cannot evaluate the constant subgraph (naming the values it was computing).
 */
export async function foldConstants(model: OnnxTypes.ModelProto, what: string): Promise<FoldResult> {
  const graph = requireGraph(model, what);
  const index = indexGraph(graph, what);
  const graphOutputs = new Set(index.outputs);
  const constant = new Set<string>([...index.initializers.keys(), ...index.sparseInitializers.keys()]);
  const folded = new Array<boolean>(index.nodes.length).fill(false);
  // Nodes in file order may be unsorted: iterate to a fixed point.
  for (let changed = true; changed; ) {
    changed = false;
    index.nodes.forEach((node, i) => {
      if (folded[i] || !isFoldable(node, index.reads[i]!, index.writes[i]!, constant, graphOutputs)) return;
      folded[i] = true;
      for (const o of index.writes[i]!) constant.add(o);
      changed = true;
    });
  }
  if (!folded.some(Boolean)) return { model, foldedNodes: 0, addedInitializers: [] };

  // Values of folded nodes that an unfolded node reads (explicitly or from a subgraph).
  const needed: string[] = [];
  const neededSet = new Set<string>();
  index.nodes.forEach((_, i) => {
    if (folded[i]) return;
    for (const r of index.reads[i]!) {
      const p = index.producer.get(r);
      if (p !== undefined && folded[p] && !neededSet.has(r)) {
        neededSet.add(r);
        needed.push(r);
      }
    }
  });

  const added = new Map<string, OnnxTypes.ITensorProto>();
  const toEvaluate: string[] = [];
  for (const name of needed) {
    const node = index.nodes[index.producer.get(name)!]!;
    const direct = node.opType === 'Constant' ? constantValue(node) : undefined;
    if (direct) added.set(name, onnx.TensorProto.create({ ...direct, name }));
    else toEvaluate.push(name);
  }
  if (toEvaluate.length > 0) {
    for (const [name, t] of await evaluate(model, index, folded, toEvaluate, what)) added.set(name, t);
  }

  const nodes = index.nodes.filter((_, i) => !folded[i]);
  const initializers = [...(graph.initializer ?? []), ...needed.map((n) => added.get(n)!)];
  // IR < 4: every initializer must also be a graph input (onnx/docs/IR.md, "Graphs").
  const legacyInputs =
    toNumber(model.irVersion) < 4
      ? needed.map((n) => {
          const t = added.get(n)!;
          return { name: n, type: { tensorType: { elemType: t.dataType ?? 0, shape: { dim: (t.dims ?? []).map((d) => ({ dimValue: toNumber(d) })) } } } };
        })
      : [];
  const keptValues = new Set(nodes.flatMap((n) => n.output ?? []));
  const newGraph = onnx.GraphProto.create({
    ...graph,
    node: nodes,
    input: [...(graph.input ?? []), ...legacyInputs],
    initializer: initializers,
    // Value infos of removed values go; those of the new initializers stay (they describe them).
    valueInfo: (graph.valueInfo ?? []).filter((v) => !v.name || keptValues.has(v.name) || neededSet.has(v.name) || !index.producer.has(v.name)),
  });
  return { model: onnx.ModelProto.create({ ...model, graph: newGraph }), foldedNodes: folded.filter(Boolean).length, addedInitializers: needed };
}

function isFoldable(node: OnnxTypes.INodeProto, reads: readonly string[], writes: readonly string[], constant: ReadonlySet<string>, graphOutputs: ReadonlySet<string>): boolean {
  if (node.domain && node.domain !== 'ai.onnx') return false;
  const op = node.opType ?? '';
  if (RANDOM_OPS.has(op) || subgraphsOf(node).length > 0) return false;
  if (writes.length === 0 || writes.some((o) => graphOutputs.has(o))) return false;
  if (reads.length === 0) return op === 'Constant';
  return reads.every((r) => constant.has(r));
}

/** The dense tensor of a `Constant` node's `value` attribute; undefined for the other attribute forms. */
function constantValue(node: OnnxTypes.INodeProto): OnnxTypes.ITensorProto | undefined {
  const attrs = node.attribute ?? [];
  if (attrs.length !== 1 || attrs[0]!.name !== 'value' || !attrs[0]!.t) return undefined;
  const t = attrs[0]!.t;
  // Segmented or externally stored tensors are left to onnxruntime.
  if (t.segment || (t.externalData ?? []).length > 0) return undefined;
  return t;
}

/**
 * Run the folded nodes once and return `names` as tensors.
 * @throws InvalidModelError naming the values when onnxruntime cannot load or run them.
 */
async function evaluate(
  model: OnnxTypes.IModelProto,
  index: ReturnType<typeof indexGraph>,
  folded: readonly boolean[],
  names: readonly string[],
  what: string,
): Promise<Map<string, OnnxTypes.ITensorProto>> {
  const graph = index.graph;
  // Only the folded ancestors of the values asked for.
  const keep = new Array<boolean>(index.nodes.length).fill(false);
  const stack = names.map((n) => index.producer.get(n)!);
  while (stack.length > 0) {
    const i = stack.pop()!;
    if (keep[i] || !folded[i]) continue;
    keep[i] = true;
    for (const r of index.reads[i]!) {
      const p = index.producer.get(r);
      if (p !== undefined) stack.push(p);
    }
  }
  const nodes = index.nodes.filter((_, i) => keep[i]);
  const reads = new Set(index.nodes.flatMap((_, i) => (keep[i] ? index.reads[i]! : [])));
  const evalGraph = onnx.GraphProto.create({
    name: `${graph.name || 'model'}/constants`,
    node: nodes,
    input: toNumber(model.irVersion) < 4 ? (graph.input ?? []).filter((v) => v.name && reads.has(v.name)) : [],
    output: names.map((name) => ({ name })),
    initializer: (graph.initializer ?? []).filter((t) => t.name && reads.has(t.name)),
    sparseInitializer: (graph.sparseInitializer ?? []).filter((t) => t.values?.name && reads.has(t.values.name)),
  });
  const evalModel = onnx.ModelProto.create({ ...model, graph: evalGraph, metadataProps: [] });
  const label = names.length > 3 ? `${names.slice(0, 3).join("', '")}' and ${names.length - 3} more` : `${names.join("', '")}'`;
  let session: ort.InferenceSession;
  try {
    session = await ort.InferenceSession.create(onnx.ModelProto.encode(evalModel).finish(), { intraOpNumThreads: 1, interOpNumThreads: 1, executionProviders: ['cpu'], logSeverityLevel: 3 });
  } catch (cause) {
    throw new InvalidModelError(`${what}: cannot compute the constant values '${label} with onnxruntime: ${describeError(cause)}`, { cause });
  }
  try {
    let results: ort.InferenceSession.ReturnType;
    try {
      results = await session.run({});
    } catch (cause) {
      throw new InvalidModelError(`${what}: cannot compute the constant values '${label} with onnxruntime: ${describeError(cause)}`, { cause });
    }
    const out = new Map<string, OnnxTypes.ITensorProto>();
    for (const name of names) {
      const value = results[name];
      if (!value) throw new InvalidModelError(`${what}: onnxruntime did not return the constant value '${name}'`);
      out.set(name, tensorProtoOf(name, value, what));
    }
    return out;
  } finally {
    await session.release();
  }
}

/**
 * An onnxruntime tensor as a TensorProto (`raw_data` little-endian as the ONNX spec requires;
 * strings in `string_data`).
 * @throws InvalidModelError naming the value for a type onnxruntime-node returns but ONNX lacks.
 */
export function tensorProtoOf(name: string, value: ort.Tensor, what: string): OnnxTypes.TensorProto {
  const elemType = elemTypeOfOrt(value.type);
  if (elemType === undefined) throw new InvalidModelError(`${what}: constant value '${name}' has onnxruntime type ${value.type}, which has no ONNX element type here`);
  const dims = [...value.dims];
  if (value.type === 'string') {
    const encoder = new TextEncoder();
    return onnx.TensorProto.create({ name, dataType: elemType, dims, stringData: (value.data as string[]).map((s) => encoder.encode(s)) });
  }
  const data = value.data as ArrayBufferView;
  const rawData = new Uint8Array(data.byteLength);
  rawData.set(new Uint8Array(data.buffer, data.byteOffset, data.byteLength));
  return onnx.TensorProto.create({ name, dataType: elemType, dims, rawData });
}
