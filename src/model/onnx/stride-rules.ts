/**
 * What strided ops tell the dim fitter (`dim-fit.ts`; docs/import.md "Strided and windowed
 * dims"): a probe sees a frame count at a few sizes only, and for a stride of 160 many floor
 * divisions fit them; the graph knows the stride, the kernel and the pads, so the output dim of
 * a Conv or pool over a dim fitted as `⌊(x + b)/d⌋ + c` is exactly
 * `⌊(⌊(x + b)/d⌋ + c + P − E)/s⌋ + 1 = ⌊(x + b + d·(c + P − E))/(d·s)⌋ + 1` (P the pads, E the
 * dilated kernel, s the stride: ONNX Conv / MaxPool output size), and an STFT's frame count is
 * `⌊(L − frame_length)/frame_step⌋ + 1` (ONNX STFT). These derived factors are tried first, and
 * every stride and hop of the graph is tried as a divisor before the generic ones.
 * Pure: reads nodes and initializers, runs nothing; undefined where a rule does not apply.
 */
import type { AxisFactor, Factor } from './dim-fit.ts';
import { normalizeFactor } from './dim-fit.ts';
import { nodesWithSubgraphs, toNumber } from './graph.ts';
import type { GraphIndex } from './graph.ts';
import type { OnnxTypes } from './proto.ts';
import { onnx } from './proto.ts';

/** Ops with Conv's output-size rule (ONNX Conv, ConvInteger, QLinearConv and the pools). */
const CONV_LIKE = new Set(['Conv', 'ConvInteger', 'QLinearConv', 'MaxPool', 'AveragePool', 'LpPool']);

function attr(node: OnnxTypes.INodeProto, name: string): OnnxTypes.IAttributeProto | undefined {
  return node.attribute?.find((a) => a.name === name);
}

function attrInts(node: OnnxTypes.INodeProto, name: string): number[] | undefined {
  return attr(node, name)?.ints?.map(toNumber);
}

function attrString(node: OnnxTypes.INodeProto, name: string): string | undefined {
  const s = attr(node, name)?.s;
  return s === undefined || s === null ? undefined : new TextDecoder().decode(s);
}

/**
 * The strides and hops of a graph's ops (Conv-like `strides`, STFT `frame_step`), in If, Loop and
 * Scan subgraphs too, each value once: divisors the fitter tries before the generic ones.
 */
export function graphStrides(index: GraphIndex): number[] {
  const out = new Set<number>();
  for (const node of nodesWithSubgraphs(index.nodes)) {
    const op = node.opType ?? '';
    if (CONV_LIKE.has(op)) for (const s of attrInts(node, 'strides') ?? []) if (s > 1) out.add(s);
    if (op === 'STFT') {
      const step = tensorInts(index.initializers.get(node.input?.[1] ?? ''));
      if (step?.length === 1 && step[0]! > 1) out.add(step[0]!);
    }
  }
  return [...out];
}

/**
 * The factor of output `dim` of a strided node, from the factor of the input dim it is computed
 * from (`input`: fitted earlier, `a` = 1 and no square term); undefined when the node is not
 * strided along that dim, its kernel, stride or pads are not constants, or the input's factor is
 * unknown or not of that form.
 * @param inputOf the fitted factor of dim `d` of input `name`, when there is one.
 */
export function stridedOutputFactor(node: OnnxTypes.INodeProto, index: GraphIndex, dim: number, inputOf: (name: string, d: number) => AxisFactor | undefined): AxisFactor | undefined {
  const op = node.opType ?? '';
  if (CONV_LIKE.has(op)) {
    if (dim < 2) return undefined;
    const input = inputOf(node.input?.[0] ?? '', dim);
    if (input === undefined) return undefined;
    const j = dim - 2;
    const weight = index.initializers.get(node.input?.[op === 'QLinearConv' ? 3 : 1] ?? '');
    const kernel = attrInts(node, 'kernel_shape') ?? (op.endsWith('Pool') ? undefined : (weight?.dims ?? []).slice(2).map(toNumber));
    const k = kernel?.[j];
    if (kernel === undefined || k === undefined) return undefined;
    const s = attrInts(node, 'strides')?.[j] ?? 1;
    const dilation = attrInts(node, 'dilations')?.[j] ?? 1;
    const pads = attrInts(node, 'pads') ?? [];
    const autoPad = attrString(node, 'auto_pad') ?? 'NOTSET';
    const ceil = (attr(node, 'ceil_mode')?.i ?? 0) !== 0;
    // ⌊(L + K)/s⌋ + e
    let K: number;
    let e: number;
    if (autoPad === 'SAME_UPPER' || autoPad === 'SAME_LOWER') {
      K = s - 1; // ⌈L/s⌉
      e = 0;
    } else if (autoPad === 'NOTSET' || autoPad === 'VALID') {
      const padded = autoPad === 'VALID' ? 0 : (pads[j] ?? 0) + (pads[j + kernel.length] ?? 0);
      K = padded - (dilation * (k - 1) + 1) + (ceil ? s - 1 : 0);
      e = 1;
    } else return undefined;
    return compose(input, K, s, e);
  }
  if (op === 'STFT' && dim === 1) {
    const input = inputOf(node.input?.[0] ?? '', 1);
    const step = tensorInts(index.initializers.get(node.input?.[1] ?? ''));
    const length = tensorInts(index.initializers.get(node.input?.[3] ?? ''));
    const window = index.initializers.get(node.input?.[2] ?? '');
    const frame = length?.length === 1 ? length[0] : window?.dims?.length === 1 ? toNumber(window.dims[0]) : undefined;
    if (input === undefined || step?.length !== 1 || frame === undefined) return undefined;
    return compose(input, -frame, step[0]!, 1);
  }
  return undefined;
}

/** `⌊(f(x) + K)/s⌋ + e` for the input factor f = `⌊(x + b)/d⌋ + c` (a = 1): `⌊(x + b + d·(c + K))/(d·s)⌋ + e`. */
function compose(input: AxisFactor, K: number, s: number, e: number): AxisFactor | undefined {
  const f = input.factor;
  if (f.a !== 1 || f.square !== 0 || s < 1 || !Number.isSafeInteger(K)) return undefined;
  const factor: Factor = normalizeFactor({ a: 1, b: f.b + f.d * (f.c + K), d: f.d * s, c: e, square: 0 });
  return { axis: input.axis, factor };
}

/** Values of an INT64/INT32 initializer; undefined for another type or no data. */
export function tensorInts(t: OnnxTypes.ITensorProto | undefined): number[] | undefined {
  if (t === undefined) return undefined;
  const DT = onnx.TensorProto.DataType;
  if (t.dataType === DT.INT64) {
    if (t.int64Data && t.int64Data.length > 0) return t.int64Data.map(toNumber);
    if (t.rawData && t.rawData.length % 8 === 0) {
      const view = new DataView(t.rawData.buffer, t.rawData.byteOffset, t.rawData.byteLength);
      return Array.from({ length: t.rawData.length / 8 }, (_, i) => Number(view.getBigInt64(i * 8, true)));
    }
  } else if (t.dataType === DT.INT32) {
    if (t.int32Data && t.int32Data.length > 0) return [...t.int32Data];
    if (t.rawData && t.rawData.length % 4 === 0) {
      const view = new DataView(t.rawData.buffer, t.rawData.byteOffset, t.rawData.byteLength);
      return Array.from({ length: t.rawData.length / 4 }, (_, i) => view.getInt32(i * 4, true));
    }
  }
  return undefined;
}
