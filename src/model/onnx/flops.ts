/**
 * FLOP count of one ONNX node from the concrete shapes of its inputs and outputs.
 *
 * Conventions (state them wherever a number is quoted):
 * - Contractions — Conv, ConvTranspose, Gemm, MatMul, Einsum (two operands), the quantized
 *   forms (ConvInteger, QLinearConv, MatMulInteger, QLinearMatMul) and the RNN family — count
 *   2 FLOP per multiply-accumulate; bias additions are not counted. This is fvcore's MAC count
 *   (which torchvision publishes as "GFLOPS": resnet50 4.09, vgg16 15.47) times 2, so resnet50
 *   at 224² ≈ 8.2 GFLOP and vgg16 ≈ 31 GFLOP.
 *     Conv:          2 · |Y| · (C/group) · ∏kernel          (|Y| = elements of the output)
 *     ConvTranspose: 2 · |X| · (M/group) · ∏kernel
 *     Gemm, MatMul:  2 · |Y| · K                              (K = contracted dim of A)
 *     LSTM/GRU/RNN:  2 · seq · batch · (|W| + |R|)            (gate matmuls only)
 * - Elementwise, activation, normalization, pooling, reduction and softmax ops count a small
 *   fixed number of FLOP per element (table `ELEMENT_FLOPS` below): 1 for an arithmetic,
 *   comparison or single-function op (Add, Relu, Exp, Erf, Sqrt, …), the number of elementary
 *   steps for composite activations (Sigmoid 3: exp, add, divide; Gelu 5; …), 2 for an
 *   inference BatchNormalization and 5 for Layer/Instance/Group normalization (fvcore's
 *   norm counts), 5 for (Log)Softmax (max, subtract, exp, sum, divide); MaxPool/AveragePool
 *   count ∏kernel_shape per output element, global pools and reductions 1 per input element.
 * - Shape-only and data-movement ops (Reshape, Transpose, Shape, Gather, Identity, Flatten,
 *   Concat, Slice, (Un)squeeze, Expand, Pad, Cast, Constant, Dropout, …) count 0.
 * - Anything else (other domains, If/Loop/Scan, unknown op types) is `undefined`: the caller
 *   decides how to account for it (the partitioner falls back to node counts).
 */
import { elementCount } from '../../tensor.ts';
import type { OnnxTypes } from './proto.ts';
import { toNumber } from './graph.ts';

/** Shapes and attributes of one node, as seen by a FLOP rule. */
export interface FlopContext {
  readonly node: OnnxTypes.INodeProto;
  /** Dims of input `i`; undefined when the input is absent or its shape is unknown. */
  input(i: number): readonly number[] | undefined;
  /** Dims of output `i`; undefined when unknown. */
  output(i: number): readonly number[] | undefined;
  /** Number of inputs given (including empty optional ones). */
  readonly inputCount: number;
}

type FlopRule = (ctx: FlopContext) => number | undefined;

/** Elements of a shape (`elementCount`); undefined for an unknown shape. */
function count(dims: readonly number[] | undefined): number | undefined {
  return dims ? elementCount(dims) : undefined;
}

function attr(node: OnnxTypes.INodeProto, name: string): OnnxTypes.IAttributeProto | undefined {
  return (node.attribute ?? []).find((a) => a.name === name);
}

function attrInt(node: OnnxTypes.INodeProto, name: string, dflt: number): number {
  const a = attr(node, name);
  return a && a.i !== null && a.i !== undefined ? toNumber(a.i) : dflt;
}

function attrInts(node: OnnxTypes.INodeProto, name: string): number[] | undefined {
  const a = attr(node, name);
  return a?.ints && a.ints.length > 0 ? a.ints.map(toNumber) : undefined;
}

function attrString(node: OnnxTypes.INodeProto, name: string): string | undefined {
  const s = attr(node, name)?.s;
  return s && s.length > 0 ? new TextDecoder().decode(s) : undefined;
}

const perOutput =
  (flops: number): FlopRule =>
  (ctx) => {
    const n = count(ctx.output(0));
    return n === undefined ? undefined : flops * n;
  };

const perInput =
  (flops: number): FlopRule =>
  (ctx) => {
    const n = count(ctx.input(0));
    return n === undefined ? undefined : flops * n;
  };

const zero: FlopRule = () => 0;

/** 2 · |Y| · ∏(weight dims after the first): Conv-style contraction with the weight at `w`. */
const convLike =
  (w: number): FlopRule =>
  (ctx) => {
    const y = count(ctx.output(0));
    const wd = ctx.input(w);
    if (y === undefined || !wd || wd.length < 2) return undefined;
    return 2 * y * (count(wd.slice(1)) ?? 0);
  };

/** 2 · |X| · ∏(weight dims after the first): ConvTranspose (weight [C, M/group, k…]). */
const convTranspose: FlopRule = (ctx) => {
  const x = count(ctx.input(0));
  const wd = ctx.input(1);
  if (x === undefined || !wd || wd.length < 2) return undefined;
  return 2 * x * (count(wd.slice(1)) ?? 0);
};

/** 2 · |Y| · K with K the last dim of the first operand at `a` (MatMul semantics, numpy-style). */
const matmulLike =
  (a: number): FlopRule =>
  (ctx) => {
    const y = count(ctx.output(0));
    const ad = ctx.input(a);
    if (y === undefined || !ad || ad.length === 0) return undefined;
    return 2 * y * ad[ad.length - 1]!;
  };

const gemm: FlopRule = (ctx) => {
  const y = count(ctx.output(0));
  const ad = ctx.input(0);
  if (y === undefined || !ad || ad.length !== 2) return undefined;
  const k = attrInt(ctx.node, 'transA', 0) ? ad[0]! : ad[1]!;
  return 2 * y * k;
};

/** RNN family: 2 · seq · batch · (|W| + |R|); X is [seq, batch, in] (layout 0) or [batch, seq, in]. */
const recurrent: FlopRule = (ctx) => {
  const x = ctx.input(0);
  const w = count(ctx.input(1));
  const r = count(ctx.input(2));
  if (!x || x.length !== 3 || w === undefined || r === undefined) return undefined;
  return 2 * x[0]! * x[1]! * (w + r);
};

/** Einsum with one or two operands: 2 · ∏(size of every distinct index) for two, |X| for one. */
const einsum: FlopRule = (ctx) => {
  const eq = attrString(ctx.node, 'equation')?.replace(/\s+/g, '');
  if (!eq || eq.includes('.')) return undefined;
  const lhs = eq.split('->')[0]!.split(',');
  if (lhs.length === 1) return count(ctx.input(0));
  if (lhs.length !== 2) return undefined;
  const sizes = new Map<string, number>();
  for (let k = 0; k < 2; k++) {
    const dims = ctx.input(k);
    const letters = lhs[k]!;
    if (!dims || dims.length !== letters.length) return undefined;
    [...letters].forEach((c, i) => sizes.set(c, Math.max(sizes.get(c) ?? 1, dims[i]!)));
  }
  let macs = 1;
  for (const s of sizes.values()) macs *= s;
  return 2 * macs;
};

/** MaxPool / AveragePool / LpPool: ∏kernel_shape per output element. */
const pool: FlopRule = (ctx) => {
  const y = count(ctx.output(0));
  const k = attrInts(ctx.node, 'kernel_shape');
  if (y === undefined || !k) return undefined;
  return y * (count(k) ?? 1);
};

/** Sum/Max/Min: (inputs − 1) per output element; Mean: inputs per element. */
const variadic =
  (extra: number): FlopRule =>
  (ctx) => {
    const y = count(ctx.output(0));
    return y === undefined ? undefined : y * Math.max(1, ctx.inputCount - 1 + extra);
  };

const resize: FlopRule = (ctx) => {
  const y = count(ctx.output(0));
  if (y === undefined) return undefined;
  const mode = attrString(ctx.node, 'mode') ?? 'nearest';
  return y * (mode === 'linear' ? 4 : mode === 'cubic' ? 16 : 1);
};

const lrn: FlopRule = (ctx) => {
  const y = count(ctx.output(0));
  return y === undefined ? undefined : y * (attrInt(ctx.node, 'size', 1) + 3);
};

/** FLOP per output element of elementwise and activation ops (see the file header). */
const ELEMENT_FLOPS: Readonly<Record<string, number>> = {
  Add: 1, Sub: 1, Mul: 1, Div: 1, Pow: 1, Mod: 1, Neg: 1, Abs: 1, Reciprocal: 1, Sqrt: 1, Exp: 1, Log: 1,
  Floor: 1, Ceil: 1, Round: 1, Sign: 1, Erf: 1, Tanh: 1, Sin: 1, Cos: 1, Tan: 1, Asin: 1, Acos: 1, Atan: 1,
  Sinh: 1, Cosh: 1, Asinh: 1, Acosh: 1, Atanh: 1,
  Relu: 1, LeakyRelu: 1, PRelu: 1, ThresholdedRelu: 1, Clip: 1, Shrink: 1,
  Equal: 1, Less: 1, LessOrEqual: 1, Greater: 1, GreaterOrEqual: 1, And: 1, Or: 1, Xor: 1, Not: 1, Where: 1,
  BitShift: 1, BitwiseAnd: 1, BitwiseOr: 1, BitwiseXor: 1, BitwiseNot: 1, IsNaN: 1, IsInf: 1,
  Sigmoid: 3, Softplus: 3, Softsign: 3, HardSigmoid: 3, Elu: 3, HardSwish: 4, Selu: 4, Celu: 4, Gelu: 5, Mish: 5,
  QuantizeLinear: 2, DequantizeLinear: 2, CumSum: 1,
  BatchNormalization: 2, LayerNormalization: 5, InstanceNormalization: 5, GroupNormalization: 5, MeanVarianceNormalization: 5,
  Softmax: 5, LogSoftmax: 5, Hardmax: 2,
};

/** FLOP per input element of reductions and global pools. */
const INPUT_FLOPS: Readonly<Record<string, number>> = {
  ReduceSum: 1, ReduceMean: 1, ReduceMax: 1, ReduceMin: 1, ReduceProd: 1, ReduceL1: 2, ReduceL2: 2,
  ReduceSumSquare: 2, ReduceLogSum: 1, ReduceLogSumExp: 2, ArgMax: 1, ArgMin: 1, TopK: 1,
  GlobalAveragePool: 1, GlobalMaxPool: 1, GlobalLpPool: 2,
};

/** Ops that move or reshape data without arithmetic. */
const ZERO_FLOP_OPS: readonly string[] = [
  'Reshape', 'Transpose', 'Shape', 'Size', 'Gather', 'GatherElements', 'GatherND', 'Identity', 'Flatten', 'Concat',
  'Slice', 'Unsqueeze', 'Squeeze', 'Split', 'Expand', 'Tile', 'Pad', 'Cast', 'CastLike', 'Constant', 'ConstantOfShape',
  'Range', 'Dropout', 'DepthToSpace', 'SpaceToDepth', 'ScatterND', 'ScatterElements', 'Scatter', 'NonZero', 'OneHot',
  'Trilu', 'EyeLike', 'Compress', 'ReverseSequence', 'SequenceConstruct', 'SequenceAt', 'SequenceEmpty',
  'SequenceInsert', 'SequenceErase', 'SequenceLength', 'SplitToSequence', 'ConcatFromSequence', 'Optional',
  'OptionalGetElement', 'OptionalHasElement',
];

/** The FLOP rule of every known op type of the default ONNX domain. */
export const FLOP_RULES: Readonly<Record<string, FlopRule>> = Object.freeze({
  ...Object.fromEntries(ZERO_FLOP_OPS.map((op) => [op, zero])),
  ...Object.fromEntries(Object.entries(ELEMENT_FLOPS).map(([op, f]) => [op, perOutput(f)])),
  ...Object.fromEntries(Object.entries(INPUT_FLOPS).map(([op, f]) => [op, perInput(f)])),
  Conv: convLike(1),
  ConvInteger: convLike(1),
  QLinearConv: convLike(3),
  ConvTranspose: convTranspose,
  MatMul: matmulLike(0),
  MatMulInteger: matmulLike(0),
  QLinearMatMul: matmulLike(0),
  Gemm: gemm,
  Einsum: einsum,
  LSTM: recurrent,
  GRU: recurrent,
  RNN: recurrent,
  MaxPool: pool,
  AveragePool: pool,
  LpPool: pool,
  Sum: variadic(0),
  Max: variadic(0),
  Min: variadic(0),
  Mean: variadic(1),
  Resize: resize,
  Upsample: resize,
  LRN: lrn,
});

/**
 * FLOP of one node (not GFLOP) given the dims of its values, or undefined when the op type is
 * unknown (or not in the default domain) or a shape the rule needs is unknown.
 * @param dimsOf dims of a value by name (undefined when unknown).
 */
export function nodeFlops(node: OnnxTypes.INodeProto, dimsOf: (name: string) => readonly number[] | undefined): number | undefined {
  if (node.domain && node.domain !== 'ai.onnx') return undefined;
  const rule = Object.prototype.hasOwnProperty.call(FLOP_RULES, node.opType ?? '') ? FLOP_RULES[node.opType!] : undefined;
  if (!rule) return undefined;
  const inputs = node.input ?? [];
  const outputs = node.output ?? [];
  const ctx: FlopContext = {
    node,
    inputCount: inputs.length,
    input: (i) => (inputs[i] ? dimsOf(inputs[i]) : undefined),
    output: (i) => (outputs[i] ? dimsOf(outputs[i]) : undefined),
  };
  const f = rule(ctx);
  return f !== undefined && Number.isFinite(f) && f >= 0 ? f : undefined;
}
