/**
 * Per-model analysis shared by the partitioner and the balancer: graph structure, value
 * shapes, and each node's FLOP as a per-sample polynomial in the sequence length.
 *
 * Per-sample costs are evaluated at batch 1. Without a seq axis one point suffices (c1 = c2 =
 * 0); with one, costs are evaluated at three sequence lengths and the quadratic through them
 * is taken (exact for costs that are polynomials of degree ≤ 2 in seqLen, as in transformers:
 * linear layers ∝ s, attention scores ∝ s²). A model with several dynamic axes (an image's
 * height and width, `DynamicAxes.symbols`) is sampled at three sizes with all axes scaled
 * together, and the quadratic is in the size, the product of the axes (`querySize`:
 * convolutions are ∝ H·W up to the rounding of strides).
 *
 * A model whose batch dim is fixed (an import whose inputs are declared e.g. [4, 3, 224, 224],
 * `fixedBatchSize`) can only be evaluated at that batch, so its FLOP and bytes are measured per
 * run and divided by the fixed batch: costs stay per sample for every model, and
 * `evalCost(op.gflops, fixedBatch)` (`model/cost.ts`) is the FLOP of one run, just as
 * `evalCost(op.gflops, b)` is for a query of b samples of a dynamic-batch model. The fixed batch
 * is recorded in the ModelSpec as the numeric dim 0 of its inputs (`fixedBatchOf` in
 * `model/boundary.ts` reads it back).
 */
import { InvalidModelError } from '../../errors.ts';
import type { DynamicAxes, PerSampleCost } from '../spec.ts';
import { elementCount, NOMINAL_STRING_BYTES } from '../../tensor.ts';
import { onnx } from './proto.ts';
import { elementBytes } from './dtypes.ts';
import { nodeFlops } from './flops.ts';
import { indexGraph, requireGraph, topologicalOrder } from './graph.ts';
import type { GraphIndex } from './graph.ts';
import type { OnnxTypes } from './proto.ts';
import { dimBinding, fixedBatchSize, probeSeqRange, resolveShapes } from './shapes.ts';
import type { DimBinding, ProbeInputs, ResolvedShapes, ShapePoint, ShapeTable } from './shapes.ts';

/** Structure of a graph: index plus a topological order. */
export interface GraphStructure {
  readonly what: string;
  readonly model: OnnxTypes.IModelProto;
  readonly index: GraphIndex;
  /** Node indices in a stable topological order. */
  readonly order: readonly number[];
}

/** Shapes and per-node FLOP of a model. */
export interface ModelCosts {
  readonly axes: DynamicAxes;
  readonly binding: DimBinding;
  /** Sequence lengths the costs were evaluated at (`[0]` without a seq axis). */
  readonly seqPoints: readonly number[];
  readonly shapes: ResolvedShapes;
  /**
   * Samples in each run the shape tables describe: the fixed batch of a model whose batch dim
   * is fixed, else 1 (tables at batch 1). Per-run FLOP and bytes are divided by it.
   */
  readonly samplesPerRun: number;
  /** Per node of `graph.node`: FLOP (not GFLOP) per sample; undefined when unknown. */
  readonly nodeFlops: readonly (PerSampleCost | undefined)[];
}

/**
 * Index the graph and find a topological order.
 * @throws InvalidModelError for a malformed graph or a cycle (naming a node on it).
 */
export function analyzeStructure(model: OnnxTypes.IModelProto, what: string): GraphStructure {
  const index = indexGraph(requireGraph(model, what), what);
  return { what, model, index, order: topologicalOrder(index, what) };
}

/**
 * Sequence lengths at which seq-dependent costs are sampled: {lo, ⌊(lo + hi)/2⌋, hi} for a range
 * the user gives (`--probe-shape audio=1x256-640`, hi ≥ lo + 2), else {d/4, d/2, d} for the
 * default length d ≥ 8 (never beyond the default, which the model is known to accept), else
 * {8, 16, 32}.
 */
export function seqSamplePoints(defaultSeqLen: number, range?: readonly [number, number]): number[] {
  if (range !== undefined) return [range[0], Math.floor((range[0] + range[1]) / 2), range[1]];
  if (defaultSeqLen >= 8) return [Math.floor(defaultSeqLen / 4), Math.floor(defaultSeqLen / 2), defaultSeqLen];
  return [8, 16, 32];
}

/**
 * Factors the other dynamic axes are scaled by for cost samples (the first is the base): a base
 * that is a multiple of 64 stays a multiple of 32, as FPN-style detectors need.
 */
const SIZE_FACTORS = [1, 0.5, 1.5];

/**
 * Shapes and per-node FLOP (`seqRange`: sample the sequence axis in that window, as a range given
 * with `--probe-shape` does). For a model with other dynamic axes (`DynamicAxes.symbols`) the
 * costs are polynomials in the query size (`querySize`: the product of the axes), sampled with
 * every axis at 1, 1/2 and 3/2 of its base size (a single point when those sizes coincide).
 * @throws InvalidModelError when shapes are not annotated and onnxruntime cannot infer them.
 */
export async function analyzeCosts(structure: GraphStructure, axes: DynamicAxes, defaultSeqLen: number, probe: ProbeInputs = {}, seqRange?: readonly [number, number]): Promise<ModelCosts> {
  const binding = dimBinding(structure.index, axes);
  let seqPoints = axes.seq === undefined ? [0] : seqSamplePoints(defaultSeqLen, seqRange ?? probeSeqRange(structure.index, binding, probe));
  let points: ShapePoint[] = seqPoints.map((seqLen) => ({ batch: 1, seqLen }));
  if (axes.symbols !== undefined && Object.keys(axes.symbols).length > 0) {
    // every other axis scaled by the same factor: sizes s, (s/2)², (3s/4)² relative to the base
    const scaled = SIZE_FACTORS.map((f) => Object.fromEntries(Object.entries(axes.symbols!).map(([n, v]) => [n, Math.max(1, Math.round(v * f))])));
    const sizes = scaled.map((sym) => Object.values(sym).reduce((a, v) => a * v, 1));
    const distinct = new Set(sizes).size === sizes.length;
    points = (distinct ? scaled : scaled.slice(0, 1)).map((symbols) => ({ batch: 1, seqLen: 0, symbols }));
    seqPoints = distinct ? sizes : sizes.slice(0, 1);
  }
  const shapes = await resolveShapes(structure.index, structure.model, binding, points, structure.what, probe);
  const fixed = fixedBatchSize(structure.index);
  const samplesPerRun = fixed !== undefined && fixed > 0 ? fixed : 1;
  const flops = structure.index.nodes.map((node) => {
    const samples: number[] = [];
    for (const table of shapes.tables) {
      const f = nodeFlops(node, (name) => table.get(name)?.dims);
      if (f === undefined) return undefined;
      samples.push(f / samplesPerRun);
    }
    return fitCost(seqPoints, samples);
  });
  return { axes, binding, seqPoints, shapes, samplesPerRun, nodeFlops: flops };
}

/**
 * The polynomial c0 + c1·s + c2·s² through the points (xs[i], ys[i]) (Newton's divided
 * differences); a constant for one point. Equal ys give exactly c1 = c2 = 0.
 */
export function fitCost(xs: readonly number[], ys: readonly number[]): PerSampleCost {
  if (xs.length !== ys.length || xs.length === 0) throw new RangeError(`fitCost: need as many xs as ys (got ${xs.length} and ${ys.length})`);
  if (xs.length === 1) return { c0: ys[0]!, c1: 0, c2: 0 };
  if (xs.length !== 3) throw new RangeError(`fitCost: expects 1 or 3 points, got ${xs.length}`);
  const [x1, x2, x3] = xs as [number, number, number];
  const [y1, y2, y3] = ys as [number, number, number];
  const d1 = (y2 - y1) / (x2 - x1);
  const d2 = ((y3 - y2) / (x3 - x2) - d1) / (x3 - x1);
  return { c0: y1 - d1 * x1 + d2 * x1 * x2, c1: d1 - d2 * (x1 + x2), c2: d2 };
}

/**
 * Bytes of a value in a shape table; undefined when its shape or element size is unknown. A
 * STRING value counts `NOMINAL_STRING_BYTES` per element (its real size depends on its data).
 */
export function valueBytes(table: ShapeTable, name: string): number | undefined {
  const s = table.get(name);
  if (!s) return undefined;
  const size = s.elemType === (onnx.TensorProto.DataType.STRING as number) ? NOMINAL_STRING_BYTES : elementBytes(s.elemType);
  if (size === undefined) return undefined;
  return elementCount(s.dims) * size;
}

/**
 * Per-sample bytes of a set of values as a cost polynomial (per-run bytes / `samplesPerRun`).
 * @throws InvalidModelError when the size of one of them is unknown.
 */
export function bytesCost(costs: ModelCosts, names: readonly string[], what: string): PerSampleCost {
  const ys = costs.shapes.tables.map((table) =>
    names.reduce((sum, name) => {
      const b = valueBytes(table, name);
      if (b === undefined) throw new InvalidModelError(`${what}: the size of tensor '${name}' is unknown (no shape, or an element type without a fixed size)`);
      return sum + b / costs.samplesPerRun;
    }, 0),
  );
  return fitCost(costs.seqPoints, ys);
}

/** Value of a per-sample cost at one sequence length (batch 1). */
export function costAt(cost: PerSampleCost, seqLen: number): number {
  return cost.c0 + cost.c1 * seqLen + cost.c2 * seqLen * seqLen;
}
