/**
 * Partitioning an ONNX model into N operators: the ModelSpec (per-operator interface,
 * passthrough, node count, parameters and per-sample costs) and one standalone ONNX sub-model
 * per operator; the FLOP-balanced choice of the N contiguous pieces; and the import of an
 * arbitrary ONNX file (`abacus models import FILE --operators N`, docs/models.md "Import").
 *
 * Boundary semantics: `model/spec.ts` header and `split.ts`. Cost conventions: `flops.ts`
 * (FLOP), `analysis.ts` (per-sample polynomials in seqLen). Parameter accounting:
 * - `OperatorSpec.params` counts the elements of the floating-point and quantized-integer
 *   initializers (`isParameterType`: a quantized model's uint8 weights count, int64 shapes and
 *   bool masks do not) of the operator's sub-model that are not in `nonTrainable`; an
 *   initializer read by several operators is copied into each sub-model but its elements are
 *   counted only in the FIRST operator that reads it, so the operators' params sum to
 *   `ModelSpec.params` (each distinct parameter counted once, like torchvision's numel sum).
 * - `OperatorSpec.paramBytes` counts the bytes of every initializer held by the sub-model
 *   (shared ones in each operator holding them: what that sub-model loads), including those in
 *   subgraphs of If/Loop nodes.
 */
import path from 'node:path';
import { InvalidModelError } from '../../errors.ts';
import type { DynamicAxes, ModelSpec, OperatorSpec, PerSampleCost, TensorSpec } from '../spec.ts';
import { MAX_SEQ_LEN } from '../spec.ts';
import { DATA_DEPENDENT_DIM } from '../boundary.ts';
import { analyzeCosts, analyzeStructure, bytesCost, costAt } from './analysis.ts';
import type { GraphStructure, ModelCosts } from './analysis.ts';
import { elementCount } from '../../tensor.ts';
import { boundaryDataType, elementBytes, isParameterType } from './dtypes.ts';
import { defaultOpsetVersion, detectDynamicAxes, isTopologicallySorted, pruneDeadNodes, sortModelTopologically, toNumber } from './graph.ts';
import { nameInputAxes, restoreFixedInputs } from './axis-names.ts';
import { foldConstants, RANDOM_OPS } from './constants.ts';
import { checkProbeInputs, declaredValueInfos, dimBinding, probeSeqLen } from './shapes.ts';
import type { ProbeInputs } from './shapes.ts';
import { impliedInputDomains } from './domains.ts';
import { hasExternalData, readOnnxFile } from './load.ts';
import type { GraphIndex } from './graph.ts';
import type { OnnxTypes } from './proto.ts';
import { probeWithSearch } from './search.ts';
import type { SearchableAxes } from './search.ts';
import { buildOperatorModel, checkAssignment, computeCuts, subgraphInitializers } from './split.ts';
import type { OperatorCut } from './split.ts';

/** What `partitionModel` needs. */
export interface PartitionInput {
  /** Model name as served. */
  readonly name: string;
  /** The whole model; external data must already be loaded (`readOnnxModel` does). */
  readonly model: OnnxTypes.ModelProto;
  /**
   * Operator of each node of `model.graph.node`: integers 0..N−1, each used, and never smaller
   * than the operator of a node it reads from (contiguous, non-decreasing in a topological order).
   */
  readonly operatorOfNode: readonly number[];
  /** `operatorNames[k]` names operator k (default `op<k>`); length N when given. */
  readonly operatorNames?: readonly string[];
  /** Initializers that are not trainable parameters (BatchNorm running stats, shape constants). */
  readonly nonTrainable?: ReadonlySet<string>;
  readonly dynamicAxes: DynamicAxes;
  /** Sequence length when a caller gives none (0 without a seq axis; > 0 with one). */
  readonly defaultSeqLen: number;
  /** Largest accepted sequence length, when the model has one (copied to the spec). */
  readonly maxSeqLen?: number;
  readonly source: ModelSpec['source'];
}

/** A partitioned model: the spec and `operatorModels[k]` = operator k's standalone sub-model. */
export interface PartitionResult {
  readonly spec: ModelSpec;
  readonly operatorModels: OnnxTypes.ModelProto[];
}

/**
 * Build the ModelSpec and one standalone ONNX sub-model per operator. Pure: `input.model` is not
 * modified; sub-models share its node and tensor objects (and weight buffers).
 * @throws RangeError for a malformed `operatorOfNode` / `operatorNames` / `defaultSeqLen`.
 * @throws InvalidModelError for a malformed or cyclic graph, unloaded external data, an operator
 *   whose nodes feed nothing later, a boundary tensor of an unsupported type, shapes that are
 *   neither annotated nor inferable with onnxruntime, a boundary tensor with a dim the dim
 *   grammar cannot write (see `TensorSpec`), or a data-dependent tensor on a boundary.
 */
export async function partitionModel(input: PartitionInput): Promise<PartitionResult> {
  const what = input.name;
  if (hasExternalData(input.model)) {
    throw new InvalidModelError(`${what}: some tensors are still stored as external data; load the model with readOnnxModel() first`);
  }
  checkSeqLen(input.dynamicAxes, input.defaultSeqLen, what);
  const structure = analyzeStructure(input.model, what);
  const operatorCount = checkAssignment(structure.index, input.operatorOfNode, what);
  if (input.operatorNames !== undefined && input.operatorNames.length !== operatorCount) {
    throw new RangeError(`operatorNames of ${what} has ${input.operatorNames.length} entries but operatorOfNode defines ${operatorCount} operators`);
  }
  const cuts = computeCuts(structure.index, structure.order, input.operatorOfNode, operatorCount, what);
  const costs = await analyzeCosts(structure, input.dynamicAxes, input.defaultSeqLen);
  return assemblePartition(structure, costs, cuts, input);
}

function checkSeqLen(axes: DynamicAxes, defaultSeqLen: number, what: string): void {
  if (!Number.isInteger(defaultSeqLen) || defaultSeqLen < 0) throw new RangeError(`defaultSeqLen of ${what} must be an integer ≥ 0, got ${defaultSeqLen}`);
  if (axes.seq !== undefined && defaultSeqLen === 0) throw new RangeError(`defaultSeqLen of ${what} must be ≥ 1 because the model has a seq axis '${axes.seq}'`);
}

/** Spec and sub-models from an analyzed graph and its cuts (the last step of `partitionModel`). */
export function assemblePartition(structure: GraphStructure, costs: ModelCosts, cuts: readonly OperatorCut[], input: PartitionInput): PartitionResult {
  const { index, what } = structure;
  const symbolic = costs.shapes.symbolic;
  const inputDependent = inputDependentValues(index, structure.order);
  const domains = impliedInputDomains(index);
  const interfaceNames = new Set([...index.inputs, ...index.outputs]);
  const unresolvedShapes = costs.shapes.unresolved;
  // A tensor the executors cannot size ahead: a data-dependent one off the model's interface,
  // or one whose shape no expression of the axes writes anywhere on an inner boundary.
  const unsizable = (name: string, inner: boolean): boolean =>
    unresolvedShapes.has(name) ? inner : !interfaceNames.has(name) && symbolic.get(name)?.shape.includes(DATA_DEPENDENT_DIM) === true;
  const crossing = innerBoundaryValues(cuts).find((name) => unsizable(name, true));
  if (crossing !== undefined) {
    const avoid = largestCountAvoiding(structure, costs, input.defaultSeqLen, cuts.length, unsizable);
    const why = unresolvedShapes.has(crossing)
      ? `its shape cannot be written in terms of the model's axes (${unresolvedShapes.get(crossing)!})`
      : `its size depends on the data (${describeShape(symbolic.get(crossing)!.shape)}: after NonZero, NonMaxSuppression, Unique, Compress or a TopK with a computed k)`;
    throw new InvalidModelError(
      `${what}: tensor '${crossing}' would cross an operator boundary, but ${why}, which executors cannot size ahead; ` +
        `import with --operators ${avoid} (the most operators whose cuts avoid every such tensor), or fewer`,
    );
  }
  const tensorSpec = (name: string): TensorSpec => {
    const s = symbolic.get(name);
    // An unresolved model output (on no inner boundary, checked above) is served with its actual
    // shape, its unwritable dims '?data', as data-dependent outputs are (docs/import.md).
    if (!s) throw new InvalidModelError(`${what}: the type and shape of tensor '${name}' are unknown`);
    // A computed If condition or Loop count crossing a boundary keeps the value the probe saw:
    // warm-up and profiling then take the branch the spec's shapes describe (docs/import.md
    // "Control flow").
    const control = costs.shapes.controls?.get(name);
    const domain = domains.get(name) ?? (control === undefined || index.inputs.includes(name) ? undefined : { values: [control] });
    return { name, dataType: boundaryDataType(s.elemType, name, what), shape: s.shape, ...(inputDependent.has(name) ? {} : { constant: true as const }), ...(domain === undefined ? {} : { domain }) };
  };

  const owner = new Map<string, number>();
  for (const cut of cuts) for (const c of cut.constants) if (!owner.has(c)) owner.set(c, cut.index);
  const isParam = (t: OnnxTypes.ITensorProto): boolean => isParameterType(t.dataType ?? 0) && !(t.name && input.nonTrainable?.has(t.name));

  const operators: OperatorSpec[] = [];
  const operatorModels: OnnxTypes.ModelProto[] = [];
  let totalParams = 0;
  for (const cut of cuts) {
    const name = input.operatorNames?.[cut.index] ?? `op${cut.index}`;
    let params = 0;
    let paramBytes = 0;
    for (const c of cut.constants) {
      const dense = index.initializers.get(c);
      const sparse = index.sparseInitializers.get(c);
      const tensors = dense ? [dense] : [sparse?.values, sparse?.indices].filter((t): t is OnnxTypes.ITensorProto => !!t);
      for (const t of tensors) paramBytes += tensorBytes(t);
      const values = dense ?? sparse?.values;
      if (values && owner.get(c) === cut.index && isParam(values)) params += tensorElements(values);
    }
    const nodes = cut.nodes.map((i) => index.nodes[i]!);
    for (const t of subgraphInitializers(nodes)) {
      paramBytes += tensorBytes(t);
      if (isParam(t)) params += tensorElements(t);
    }
    totalParams += params;
    let flops: PerSampleCost = { c0: 0, c1: 0, c2: 0 };
    for (const i of cut.nodes) {
      const f = costs.nodeFlops[i];
      if (f) flops = { c0: flops.c0 + f.c0, c1: flops.c1 + f.c1, c2: flops.c2 + f.c2 };
    }
    operators.push({
      index: cut.index,
      name,
      inputs: cut.inputs.map(tensorSpec),
      outputs: cut.outputs.map(tensorSpec),
      passthrough: [...cut.passthrough],
      nodeCount: cut.nodes.length,
      params,
      paramBytes,
      gflops: { c0: flops.c0 / 1e9, c1: flops.c1 / 1e9, c2: flops.c2 / 1e9 },
      inputBytes: bytesCost(costs, cut.inputs, what),
      outputBytes: bytesCost(costs, cut.outputs, what),
    });
    operatorModels.push(
      buildOperatorModel(structure.model, index, cut, { operatorName: name, modelName: input.name, operatorCount: cuts.length, symbolic }, what),
    );
  }

  const spec: ModelSpec = {
    name: input.name,
    source: input.source,
    inputs: index.inputs.map(tensorSpec),
    outputs: index.outputs.map(tensorSpec),
    dynamicAxes: input.dynamicAxes,
    defaultSeqLen: input.defaultSeqLen,
    ...(input.maxSeqLen === undefined ? {} : { maxSeqLen: input.maxSeqLen }),
    operators,
    params: totalParams,
    opset: defaultOpsetVersion(structure.model),
  };
  return { spec, operatorModels };
}

/** A shape for messages: `[batch, 2, ?data]`. */
function describeShape(shape: readonly (number | string)[]): string {
  return `[${shape.join(', ')}]`;
}

/** Values on the inner boundaries 1 … N − 1 of a partition (what operators hand to later ones). */
function innerBoundaryValues(cuts: readonly OperatorCut[]): string[] {
  return [...new Set(cuts.slice(0, -1).flatMap((cut) => [...cut.outputs, ...cut.passthrough]))];
}

/**
 * The largest operator count below `count` whose FLOP-balanced cuts (`splitBalanced`, as an
 * import makes them) put no tensor the executors cannot size (`unsizable`) on an inner
 * boundary; 1 when none (one operator has no inner boundary).
 */
function largestCountAvoiding(structure: GraphStructure, costs: ModelCosts, seqLen: number, count: number, unsizable: (name: string, inner: boolean) => boolean): number {
  const weights = nodeWeights(costs, seqLen);
  for (let n = count - 1; n > 1; n--) {
    const assignment = splitBalanced(weights, n);
    const cuts = computeCuts(structure.index, structure.order, assignment, n, structure.what);
    if (!innerBoundaryValues(cuts).some((name) => unsizable(name, true))) return n;
  }
  return 1;
}

/**
 * Values whose content depends on a graph input or on a random op (RandomNormal, …): the
 * activations. Every other node output is computed from initializers and `Constant` nodes only
 * (`TensorSpec.constant`).
 */
function inputDependentValues(index: GraphIndex, order: readonly number[]): Set<string> {
  const dependent = new Set<string>(index.inputs);
  for (const i of order) {
    const node = index.nodes[i]!;
    const reads = index.reads[i]!;
    const isConstant = (node.opType === 'Constant' && reads.length === 0) || (reads.length > 0 && !RANDOM_OPS.has(node.opType ?? '') && reads.every((r) => !dependent.has(r)));
    if (!isConstant) for (const o of index.writes[i]!) dependent.add(o);
  }
  return dependent;
}

function tensorElements(t: OnnxTypes.ITensorProto): number {
  return elementCount((t.dims ?? []).map(toNumber));
}

/** Bytes of a tensor: elements × element size; for strings, the stored bytes. */
function tensorBytes(t: OnnxTypes.ITensorProto): number {
  const size = elementBytes(t.dataType ?? 0);
  if (size !== undefined) return tensorElements(t) * size;
  return (t.stringData ?? []).reduce((a, s) => a + s.length, 0) + (t.rawData?.length ?? 0);
}

/**
 * @throws RangeError naming `operators` and the valid range [1, nodeCount].
 */
export function checkOperatorCount(operators: number, nodeCount: number, what: string): void {
  if (!Number.isInteger(operators) || operators < 1 || operators > nodeCount) {
    throw new RangeError(`operators must be an integer in [1, ${nodeCount}] (the node count of ${what}); got ${operators}`);
  }
}

/** Options of `balancedAssignment`. */
export interface BalanceOptions {
  /** Sequence length the FLOPs are balanced at (default 128 when the model has a seq axis). */
  readonly seqLen?: number;
}

/** Sequence length used for imported models with a seq axis when none is given. */
export const DEFAULT_IMPORT_SEQ_LEN = 128;

/**
 * Contiguous N-way split of the node order balanced by FLOPs: minimizes the sum of squared
 * operator FLOPs (= the variance of operator FLOPs) over all splits into N non-empty runs.
 * Unknown FLOPs (`nodeWeights`): the partition falls back to the node count where an op's
 * FLOPs are unknown; each unknown node counts as one node, converted to FLOP units at the
 * mean FLOPs of the known nonzero-FLOP nodes, so a graph of only unknown ops is balanced by
 * node count exactly. A tiny per-node weight (1e-6 of the mean) breaks ties between zero-FLOP
 * nodes by node count.
 * @param model a topologically sorted model (see `sortModelTopologically`) without dead nodes
 *   (`pruneDeadNodes`): an operator made only of dead nodes cannot be partitioned.
 * @returns operatorOfNode for `model.graph.node`, non-decreasing, using 0..operators−1.
 * @throws RangeError naming `operators` and the valid range [1, nodeCount].
 * @throws InvalidModelError when the nodes are not topologically sorted, the graph is
 *   malformed or cyclic, or shapes cannot be determined.
 */
export async function balancedAssignment(model: OnnxTypes.ModelProto, operators: number, dynamicAxes: DynamicAxes, options: BalanceOptions = {}): Promise<number[]> {
  const what = model.graph?.name || 'model';
  const structure = analyzeStructure(model, what);
  checkOperatorCount(operators, structure.index.nodes.length, what);
  if (!isTopologicallySorted(structure.index)) {
    throw new InvalidModelError(`${what}: nodes are not in topological order; sort the model first (sortModelTopologically)`);
  }
  const seqLen = dynamicAxes.seq === undefined ? 0 : (options.seqLen ?? DEFAULT_IMPORT_SEQ_LEN);
  const costs = await analyzeCosts(structure, dynamicAxes, seqLen);
  return splitBalanced(nodeWeights(costs, seqLen), operators);
}

/**
 * Balancing weight of each node: its FLOP at `seqLen` (per sample) when known; for a node whose
 * FLOPs are unknown (`nodeFlops` undefined: an op type without a rule, another domain,
 * If/Loop/Scan), the node-count fallback (an op whose FLOPs are unknown counts as
 * one node) expressed in FLOP units: one node = the mean FLOP of the known nodes with
 * nonzero FLOP, so known and unknown nodes can share one balance. When no node has known
 * nonzero FLOP every unknown node weighs 1 and the split is a pure node-count balance (sizes
 * differ by at most one).
 */
export function nodeWeights(costs: ModelCosts, seqLen: number): number[] {
  const flops = costs.nodeFlops.map((f) => (f === undefined ? undefined : Math.max(0, costAt(f, seqLen))));
  const known = flops.filter((f): f is number => f !== undefined && f > 0);
  const unknownWeight = known.length > 0 ? known.reduce((a, b) => a + b, 0) / known.length : 1;
  return flops.map((f) => f ?? unknownWeight);
}

/**
 * Split `weights` (in order) into `parts` non-empty contiguous runs minimizing Σ(run sum)².
 * Dynamic programming over parts with divide-and-conquer optimization (the optimal cut is
 * monotone because the cost (P[i] − P[j])² satisfies the quadrangle inequality for
 * non-negative weights): O(parts · n · log n) time, O(parts · (n − parts)) memory.
 * @returns the run index of each position (non-decreasing, 0..parts−1).
 * @throws RangeError naming `operators` when parts is not in [1, weights.length].
 */
export function splitBalanced(weights: readonly number[], parts: number): number[] {
  const n = weights.length;
  checkOperatorCount(parts, n, 'the graph');
  if (parts === 1) return new Array<number>(n).fill(0);
  if (parts === n) return weights.map((_, i) => i);
  const total = weights.reduce((a, b) => a + Math.max(0, b), 0);
  const scale = total > 0 ? 1 / total : 1;
  const eps = 1e-6 / n;
  const P = new Float64Array(n + 1);
  for (let i = 0; i < n; i++) P[i + 1] = P[i]! + Math.max(0, weights[i]!) * scale + eps;

  // prev[i] = best cost of splitting the first i positions into k−1 runs.
  let prev = new Float64Array(n + 1).fill(Infinity);
  for (let i = 1; i <= n - (parts - 1); i++) prev[i] = P[i]! * P[i]!;
  const choices: Int32Array[] = []; // choices[k − 2][i − k] = start of run k for prefix i
  for (let k = 2; k <= parts; k++) {
    const lo = k;
    const hi = n - (parts - k);
    const cur = new Float64Array(n + 1).fill(Infinity);
    const arg = new Int32Array(hi - lo + 1);
    const prevK = prev;
    const solve = (a: number, b: number, optLo: number, optHi: number): void => {
      if (a > b) return;
      const mid = (a + b) >> 1;
      let best = Infinity;
      let bestJ = optLo;
      const top = Math.min(mid - 1, optHi);
      for (let j = optLo; j <= top; j++) {
        const d = P[mid]! - P[j]!;
        const c = prevK[j]! + d * d;
        if (c < best) {
          best = c;
          bestJ = j;
        }
      }
      cur[mid] = best;
      arg[mid - lo] = bestJ;
      solve(a, mid - 1, optLo, bestJ);
      solve(mid + 1, b, bestJ, optHi);
    };
    solve(lo, hi, k - 1, hi - 1);
    choices.push(arg);
    prev = cur;
  }
  const ends = new Array<number>(parts + 1).fill(0);
  ends[parts] = n;
  for (let k = parts; k >= 2; k--) ends[k - 1] = choices[k - 2]![ends[k]! - k]!;
  const out = new Array<number>(n);
  for (let k = 0; k < parts; k++) for (let i = ends[k]!; i < ends[k + 1]!; i++) out[i] = k;
  return out;
}

/**
 * `axes` with each other dynamic axis (`DynamicAxes.symbols`) at the size `--probe-shape` gives
 * for a dim of that name (else its default).
 * @throws RangeError when two given shapes give one axis different sizes.
 */
function withProbeSizes(axes: DynamicAxes, index: GraphIndex, probe: ProbeInputs): DynamicAxes {
  if (axes.symbols === undefined) return axes;
  const symbols: Record<string, number> = { ...axes.symbols };
  const from = new Map<string, string>();
  for (const [name, dims] of Object.entries(probe.shapes ?? {})) {
    const declared = (index.graph.input ?? []).find((v) => v.name === name)?.type?.tensorType?.shape?.dim ?? [];
    declared.forEach((d, i) => {
      const symbol = d.dimParam;
      const size = dims[i];
      if (!symbol || size === undefined || !(symbol in symbols)) return;
      const earlier = from.get(symbol);
      if (earlier !== undefined && symbols[symbol] !== size) throw new RangeError(`--probe-shape: ${earlier} and ${name} give the axis '${symbol}' different sizes (${symbols[symbol]}, ${size})`);
      symbols[symbol] = size;
      from.set(symbol, name);
    });
  }
  return { ...axes, symbols };
}

/** The other dynamic axes (`DynamicAxes.symbols`) some `--probe-shape` gives a size. */
function probeSizedSymbols(index: GraphIndex, probe: ProbeInputs): Set<string> {
  const out = new Set<string>();
  for (const [name, dims] of Object.entries(probe.shapes ?? {})) {
    const declared = (index.graph.input ?? []).find((v) => v.name === name)?.type?.tensorType?.shape?.dim ?? [];
    declared.forEach((d, i) => {
      if (d.dimParam && dims[i] !== undefined) out.add(d.dimParam);
    });
  }
  return out;
}

/** Options of `importOnnxModel`. */
export interface ImportOptions {
  /** Number of operators N, in [1, node count]. */
  readonly operators: number;
  /** Model name (default: the file name without `.onnx`). */
  readonly name?: string;
  /** Default sequence length for a model with a seq axis (default 128); ignored without one. */
  readonly defaultSeqLen?: number;
  /**
   * Shapes and values for the shape probe (`ProbeInputs`); a size given for the sequence axis
   * is also the default sequence length unless `defaultSeqLen` is given.
   */
  readonly probe?: ProbeInputs;
}

/** What `importOnnxModel` returns. */
export interface ImportResult {
  readonly spec: ModelSpec;
  /** The whole model as partitioned: nodes topologically sorted, dead nodes removed, external data loaded. */
  readonly model: OnnxTypes.ModelProto;
  readonly operatorModels: OnnxTypes.ModelProto[];
}

/**
 * Import an ONNX file as a model of N operators.
 *
 * Steps: `readOnnxFile` (external data loaded); index + topological sort (stable); drop nodes
 * that reach no graph output; `Constant` nodes and the constant-only subgraphs they feed become
 * initializers (`foldConstants`: copied into every operator that reads them, never carried
 * across a boundary; node counts are those of the folded graph); input dims named by
 * `probe.axes` (`--axis`) or inferred to be the batch of a recurrent state take those axes'
 * names (`nameInputAxes`); dynamic axes from the inputs
 * (`detectDynamicAxes`: batch = dim 0 of the inputs when symbolic, one other symbolic dim =
 * seq, several distinct names = one symbol each, at the sizes `--probe-shape` gives or 64); probe inputs checked (`checkProbeInputs`); shapes and costs probed
 * (`probeWithSearch`: when onnxruntime refuses the default sizes in a Pad, Conv, pool, STFT or
 * Reshape, the axes the user did not size are grown by powers of two, from the bound the graph
 * implies, and the size found is the spec's default length or the axes' probe sizes); FLOP-balanced contiguous split
 * (`splitBalanced`, at the default sequence length); `assemblePartition`. The spec's source
 * records the absolute file path and the SHA-256 of the `.onnx` file (not of external data).
 * No file is written.
 *
 * Shapes: without full annotations, every dim of a boundary tensor is written as a number, an
 * axis name or an expression such as `batch*seq` (grammar in `TensorSpec`), so boundaries
 * resolve from (batch, seqLen) for warm-up and synthetic segments at any start. Costs are per
 * sample; for a model with a fixed batch (inputs declared [4, …]) they are the per-run costs
 * divided by that batch, so `evalCost(op.gflops, 4)` is one run (`analysis.ts`).
 * @throws RangeError naming `operators` and the valid range [1, nodeCount] (checked once the
 *   file is read and validated, so the range is known).
 * @throws InvalidModelError for an unreadable, non-ONNX or truncated file, missing external
 *   data, a malformed graph, a cycle (naming a node on it), shapes that cannot be inferred (a
 *   `ProbeRunError` when onnxruntime refused every size tried, naming the flags and the scalar
 *   inputs that need `--probe-value`), or
 *   a boundary tensor with a dim the dim grammar cannot write (naming the tensor and the
 *   observed sizes), or a data-dependent tensor on a boundary (naming it and an operator count
 *   that avoids it).
 */
export async function importOnnxModel(file: string, opts: ImportOptions): Promise<ImportResult> {
  const abs = path.resolve(file);
  const { model: raw, sha256 } = await readOnnxFile(abs);
  const what = file;
  const sorted = pruneDeadNodes(sortModelTopologically(raw, what), what);
  const probe = opts.probe ?? {};
  const { model, original } = nameInputAxes((await foldConstants(sorted, what)).model, probe.axes, what);
  const structure = analyzeStructure(model, what);
  if (structure.index.nodes.length === 0) throw new InvalidModelError(`${what}: the graph has no nodes that contribute to its outputs, nothing to partition`);
  checkOperatorCount(opts.operators, structure.index.nodes.length, what);

  const dynamicAxes = withProbeSizes(detectDynamicAxes(model), structure.index, probe);
  const binding = dimBinding(structure.index, dynamicAxes);
  checkProbeInputs(structure.index, declaredValueInfos(structure.index.graph), probe, what);
  const probedSeq = probeSeqLen(structure.index, binding, probe);
  const defaultSeqLen =
    dynamicAxes.symbols !== undefined
      ? Math.min(MAX_SEQ_LEN, Object.values(dynamicAxes.symbols).reduce((a, v) => a * v, 1)) // the size at the probe's base (`querySize`)
      : dynamicAxes.seq === undefined
        ? 0
        : (opts.defaultSeqLen ?? probedSeq ?? DEFAULT_IMPORT_SEQ_LEN);
  const searchable: SearchableAxes = {
    seq: dynamicAxes.seq !== undefined && opts.defaultSeqLen === undefined && probedSeq === undefined,
    symbols: new Set(Object.keys(dynamicAxes.symbols ?? {}).filter((n) => !probeSizedSymbols(structure.index, probe).has(n))),
  };
  const searched = await probeWithSearch(structure, dynamicAxes, defaultSeqLen, probe, searchable);
  const { costs } = searched;
  const operatorOfNode = splitBalanced(nodeWeights(costs, searched.defaultSeqLen), opts.operators);

  const input: PartitionInput = {
    name: opts.name ?? path.basename(file).replace(/\.onnx$/i, ''),
    model,
    operatorOfNode,
    dynamicAxes: searched.dynamicAxes,
    defaultSeqLen: searched.defaultSeqLen,
    source: { kind: 'import', file: abs, sha256 },
  };
  const operatorCount = checkAssignment(structure.index, operatorOfNode, what);
  const cuts = computeCuts(structure.index, structure.order, operatorOfNode, operatorCount, what);
  const { spec, operatorModels } = assemblePartition(structure, costs, cuts, input);
  return { spec, model: restoreFixedInputs(model, original), operatorModels: operatorModels.map((m) => restoreFixedInputs(m, original)) };
}
