/**
 * Probe sizes found by search (docs/import.md "When the probe cannot guess"): when the shape probe (`resolveShapes`) fails at the
 * default sizes because an operator needs a longer input — a reflect Pad whose pad exceeds the
 * axis, a Conv or pool whose kernel is longer than the axis, an STFT frame — the importer grows
 * the dynamic axes it chose itself and tries again, before it fails with the error that names
 * `--probe-shape` / `--probe-value`.
 *
 * The search: every searched axis (the sequence axis, or each other dynamic axis, unless the
 * user set its size) is scaled by the same power of two; the first factor tried makes the
 * smallest size the probe feeds (`smallestProbedSize`) at least the lower bound the graph
 * implies (`graphLowerBound`), then the factor doubles, while every axis stays ≤
 * `MAX_PROBE_AXIS` (65,536). It stops at the first size the probe accepts, and gives up — with
 * the last error — when a failure is not one more size could fix (the failing op is not in
 * `SIZE_SENSITIVE_OPS`: a Gather fed a rate of 0 fails at every size), or when the same node
 * failed at three sizes in a row (`MAX_SAME_NODE_RETRIES`). When the sequence axis is searched
 * and every doubling failed, it then tries windows of lengths that start at the graph's bound:
 * the axis sampled at bound, the middle and 2·bound, then 3·bound/2, then bound + 2 (a model
 * that also refuses long inputs, as silero VAD's 16 kHz export accepts 256–640 samples only).
 */
import type { DynamicAxes } from '../spec.ts';
import { MAX_SEQ_LEN } from '../spec.ts';
import { analyzeCosts } from './analysis.ts';
import type { GraphStructure, ModelCosts } from './analysis.ts';
import { nodesWithSubgraphs, toNumber } from './graph.ts';
import type { GraphIndex } from './graph.ts';
import type { OnnxTypes } from './proto.ts';
import { ProbeRunError } from './shapes.ts';
import { tensorInts } from './stride-rules.ts';
import type { ProbeInputs } from './shapes.ts';

/** Largest size the search gives one axis (elements along it). */
export const MAX_PROBE_AXIS = 1 << 16;

/**
 * Ops whose failure on a too-short axis more size can fix (ONNX operator spec: Pad reflect
 * needs pads < the axis; Conv, ConvTranspose and pools need the padded axis ≥ the dilated
 * kernel; STFT and DFT need the signal ≥ the frame; Reshape, Split, Slice, Unfold-like
 * Reshapes need sizes that divide).
 */
export const SIZE_SENSITIVE_OPS: ReadonlySet<string> = new Set([
  'Pad',
  'Conv',
  'ConvInteger',
  'QLinearConv',
  'ConvTranspose',
  'MaxPool',
  'AveragePool',
  'LpPool',
  'STFT',
  'DFT',
  'Reshape',
  'Split',
  'Slice',
  'Col2Im',
]);

/**
 * Doublings after which the search gives up when the same node keeps failing (it fails at the
 * start size and at 2 and 4 times it): a failure that size does not fix (a Reshape to a shape
 * read from a zero input) would otherwise be retried up to 65,536, where a transformer's
 * attention alone needs tens of GB.
 */
export const MAX_SAME_NODE_RETRIES = 2;

/** Which axes the search may grow (those the user did not size). */
export interface SearchableAxes {
  /** The sequence axis, when the model has one and neither `--probe-shape` nor `--default-seq-len` set it. */
  readonly seq: boolean;
  /** Other dynamic axes (`DynamicAxes.symbols`) whose size no `--probe-shape` gave. */
  readonly symbols: ReadonlySet<string>;
}

/** What `probeWithSearch` found: the costs and the axes and default length they were probed at. */
export interface SearchedProbe {
  readonly costs: ModelCosts;
  readonly dynamicAxes: DynamicAxes;
  readonly defaultSeqLen: number;
  /** The factor the searched axes were scaled by (1: the default sizes worked). */
  readonly factor: number;
}

/**
 * `analyzeCosts` at the default sizes, and, when the probe fails on an op in
 * `SIZE_SENSITIVE_OPS`, at the searched sizes (file header).
 * @param defaultSeqLen the sequence length at the default sizes (0 without a seq axis).
 * @throws InvalidModelError (a `ProbeRunError` when onnxruntime refused every size tried): the
 *   last failure, with the sizes searched added to its message.
 */
export async function probeWithSearch(structure: GraphStructure, axes: DynamicAxes, defaultSeqLen: number, probe: ProbeInputs, searchable: SearchableAxes): Promise<SearchedProbe> {
  const searched = searchable.seq && axes.seq !== undefined ? [axes.seq] : [...searchable.symbols];
  let first: ProbeRunError;
  try {
    return { costs: await analyzeCosts(structure, axes, defaultSeqLen, probe), dynamicAxes: axes, defaultSeqLen, factor: 1 };
  } catch (e) {
    if (!(e instanceof ProbeRunError) || searched.length === 0 || !SIZE_SENSITIVE_OPS.has(e.failedOp ?? '')) throw e;
    first = e;
  }
  const at = (factor: number): { axes: DynamicAxes; seqLen: number } => {
    if (searchable.seq && axes.seq !== undefined) return { axes, seqLen: defaultSeqLen * factor };
    const symbols = Object.fromEntries(Object.entries(axes.symbols ?? {}).map(([n, v]) => [n, searchable.symbols.has(n) ? v * factor : v]));
    return { axes: { ...axes, symbols }, seqLen: Math.min(MAX_SEQ_LEN, Object.values(symbols).reduce((a, v) => a * v, 1)) };
  };
  const largest = (factor: number): number => (searchable.seq && axes.seq !== undefined ? defaultSeqLen * factor : Math.max(...[...searchable.symbols].map((n) => (axes.symbols?.[n] ?? 1) * factor)));
  const smallest = (factor: number): number => smallestProbedSize(searchable.seq && axes.seq !== undefined ? 'seq' : 'symbol', searchable.seq && axes.seq !== undefined ? defaultSeqLen * factor : Math.min(...[...searchable.symbols].map((n) => (axes.symbols?.[n] ?? 1) * factor)));
  const bound = graphLowerBound(structure.index);
  let factor = 2;
  while (smallest(factor) < bound && largest(factor * 2) <= MAX_PROBE_AXIS) factor *= 2;
  const tried: number[] = [largest(1)];
  let last: ProbeRunError = first;
  let sameNode = 0;
  for (; largest(factor) <= MAX_PROBE_AXIS; factor *= 2) {
    const { axes: grown, seqLen } = at(factor);
    tried.push(largest(factor));
    try {
      return { costs: await analyzeCosts(structure, grown, seqLen, probe), dynamicAxes: grown, defaultSeqLen: seqLen, factor };
    } catch (e) {
      if (!(e instanceof ProbeRunError)) throw e;
      sameNode = e.failedNode !== undefined && e.failedNode === last.failedNode ? sameNode + 1 : 0;
      last = e;
      if (!SIZE_SENSITIVE_OPS.has(e.failedOp ?? '') || sameNode >= MAX_SAME_NODE_RETRIES) break;
    }
  }
  // Downward: a model that also refuses long inputs (it accepts 256–640 samples only) fails at
  // every length set of the doubling; sample windows that start at the graph's bound instead.
  const windows: string[] = [];
  if (searchable.seq && axes.seq !== undefined && bound > 1) {
    for (const hi of [...new Set([2 * bound, Math.floor((3 * bound) / 2), bound + 2])].filter((h) => h >= bound + 2 && h <= MAX_PROBE_AXIS)) {
      windows.push(`${bound}-${hi}`);
      try {
        return { costs: await analyzeCosts(structure, axes, hi, probe, [bound, hi]), dynamicAxes: axes, defaultSeqLen: hi, factor: hi / defaultSeqLen };
      } catch (e) {
        if (!(e instanceof ProbeRunError)) throw e;
      }
    }
  }
  const note = `(the probe also searched larger sizes of ${searched.map((n) => `'${n}'`).join(', ')}: ${tried.join(', ')}${bound > 1 ? `, the graph implying at least ${bound}` : ''}${windows.length > 0 ? `, and the windows of lengths ${windows.join(', ')}` : ''}; this is the failure at ${tried[tried.length - 1]})`;
  throw new ProbeRunError(`${last.message} ${note}`, last.failedOp, last.failedNode, { cause: last.cause });
}

/**
 * The smallest size of a searched axis the probe feeds when its probe size is `size`: a
 * sequence axis is sampled from size/4 (`seqSamplePoints`), another axis from size/2
 * (`resolveShapes`, `analyzeCosts`).
 */
export function smallestProbedSize(kind: 'seq' | 'symbol', size: number): number {
  return kind === 'seq' ? Math.floor(size / 4) : Math.max(1, Math.round(size / 2));
}

/**
 * A lower bound on the size of a dynamic axis that the graph implies (1 when none): for every
 * reflect Pad with constant pads, max pad + 1 (ONNX Pad: reflect needs pads < the axis); for
 * every Conv/ConvInteger/QLinearConv/MaxPool/AveragePool/LpPool with a known kernel, the dilated
 * kernel `dilation·(k − 1) + 1` minus the explicit pads of that axis (ONNX Conv); for an STFT,
 * its constant frame_length, or else the length of its constant window. Nodes inside If, Loop
 * and Scan subgraphs count too (their constants may be initializers of the outer graph). The bound is taken over all axes of the op, not knowing which one
 * is dynamic, and over tensors possibly downsampled from the input: it only chooses where the
 * search starts.
 */
export function graphLowerBound(index: GraphIndex): number {
  let bound = 1;
  const ints = (name: string | undefined): number[] | undefined => (name === undefined || name === '' ? undefined : tensorInts(index.initializers.get(name)));
  const attr = (node: OnnxTypes.INodeProto, name: string): OnnxTypes.IAttributeProto | undefined => node.attribute?.find((a) => a.name === name);
  for (const node of nodesWithSubgraphs(index.nodes)) {
    const op = node.opType ?? '';
    if (op === 'Pad') {
      const mode = attr(node, 'mode')?.s;
      if (mode === undefined || mode === null || new TextDecoder().decode(mode) !== 'reflect') continue;
      const pads = ints(node.input?.[1]) ?? attr(node, 'pads')?.ints?.map(toNumber);
      if (pads !== undefined && pads.length > 0) bound = Math.max(bound, Math.max(...pads) + 1);
    } else if (['Conv', 'ConvInteger', 'QLinearConv', 'MaxPool', 'AveragePool', 'LpPool'].includes(op)) {
      const weight = index.initializers.get(node.input?.[op === 'QLinearConv' ? 3 : 1] ?? '');
      const kernel = attr(node, 'kernel_shape')?.ints?.map(toNumber) ?? (op.endsWith('Pool') ? undefined : (weight?.dims ?? []).slice(2).map(toNumber));
      if (kernel === undefined) continue;
      const dilations = attr(node, 'dilations')?.ints?.map(toNumber) ?? [];
      const pads = attr(node, 'pads')?.ints?.map(toNumber) ?? [];
      kernel.forEach((k, i) => {
        const effective = (dilations[i] ?? 1) * (k - 1) + 1;
        bound = Math.max(bound, effective - (pads[i] ?? 0) - (pads[i + kernel.length] ?? 0));
      });
    } else if (op === 'STFT') {
      const frame = ints(node.input?.[3]);
      const window = index.initializers.get(node.input?.[2] ?? '');
      if (frame?.length === 1) bound = Math.max(bound, frame[0]!);
      else if (window?.dims?.length === 1) bound = Math.max(bound, toNumber(window.dims[0]));
    }
  }
  return bound;
}
