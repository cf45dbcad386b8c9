/**
 * Neural-network layers on top of GraphBuilder, shared by the zoo builders.
 *
 * Every helper reads its input's shape from the builder, computes the output shape itself
 * (PyTorch / ONNX formulas, floor mode) and annotates it, so the whole graph carries shapes
 * (symbolic `batch` / `seq` where dynamic). Initializer names follow the reference
 * implementations' state-dict keys (`layer1.0.conv1.weight`, `encoder.layer.0.attention…`), so
 * parameter counts can be compared name by name with torchvision / Hugging Face.
 *
 * Constants that are not parameters (shape tensors, scalars, pooling matrices) are created per
 * operator and marked non-trainable: every operator's sub-model then owns its initializers and
 * no initializer is shared between operators.
 *
 * Weight initialization (random, seeded; no trained weights exist here):
 *   - conv / linear layers followed by ReLU: He (Kaiming) uniform, bound = sqrt(6 / fanIn),
 *     i.e. variance 2 / fanIn (He et al. 2015, "Delving deep into rectifiers", eq. 10), which
 *     keeps the second moment of activations constant through ReLU layers;
 *   - biases and classifier outputs: PyTorch's default bound 1 / sqrt(fanIn);
 *   - BatchNorm: gamma 1 (or a given value), beta 0, running mean 0, running var 1
 *     (torchvision's init), so inference-mode BN is ≈ identity.
 */
import type { GraphBuilder, Shape, Dim, AttrValue } from '../onnx/builder.ts';
import type { TensorDataType } from '../../tensor.ts';

/** ONNX `TensorProto.DataType.FLOAT`, for `Cast`. */
const ONNX_FLOAT = 1;

/** Number of elements of a static shape. @throws RangeError when a dim is symbolic. */
export function staticSize(shape: Shape, what: string): number {
  let n = 1;
  for (const d of shape) {
    if (typeof d !== 'number') throw new RangeError(`${what}: dim '${d}' must be static`);
    n *= d;
  }
  return n;
}

function dimAt(shape: Shape, i: number, what: string): Dim {
  const d = shape[i < 0 ? shape.length + i : i];
  if (d === undefined) throw new RangeError(`${what}: shape [${shape.join(', ')}] has no dim ${i}`);
  return d;
}

function staticDim(shape: Shape, i: number, what: string): number {
  const d = dimAt(shape, i, what);
  if (typeof d !== 'number') throw new RangeError(`${what}: dim ${i} ('${d}') must be static`);
  return d;
}

/** Channel count scaled by the width multiplier (rounded, at least 1). */
export function scaleChannels(c: number, widthMultiplier: number): number {
  return Math.max(1, Math.round(c * widthMultiplier));
}

/** Output size of a sliding window (conv / pool, floor mode), PyTorch `Conv2d` formula. */
export function windowOut(size: number, kernel: number, stride: number, padBegin: number, padEnd: number): number {
  return Math.floor((size + padBegin + padEnd - kernel) / stride) + 1;
}

/** A 2-D window: kernel, stride and symmetric padding as [h, w]. */
export interface Window2d {
  readonly kernel: readonly [number, number];
  readonly stride?: readonly [number, number];
  readonly pad?: readonly [number, number];
}

/**
 * Layer helpers bound to one GraphBuilder. Holds the per-operator constant cache (instance
 * state, cleared by `beginOperator`).
 */
export class Layers {
  private readonly consts = new Map<string, string>();
  private operatorName = '';

  constructor(readonly g: GraphBuilder) {}

  /** Start a new operator (see GraphBuilder.beginOperator); constants are per operator. */
  beginOperator(name: string): number {
    this.consts.clear();
    this.operatorName = name;
    return this.g.beginOperator(name);
  }

  /** Annotated shape of value `x`. @throws RangeError for an unknown value. */
  shape(x: string): Shape {
    return this.g.shapeOf(x).shape;
  }

  /** A non-trainable float32 or int64 constant of this operator (deduplicated within it). */
  constant(values: readonly number[], dims: readonly number[], dataType: 'float32' | 'int64' = 'float32'): string {
    const key = `${dataType}:${dims.join('x')}:${values.join(',')}`;
    const hit = this.consts.get(key);
    if (hit !== undefined) return hit;
    const name = this.g.fresh(`${this.operatorName}.const`);
    this.g.initializer(name, dims, { kind: 'values', values }, { dataType, trainable: false });
    this.consts.set(key, name);
    return name;
  }

  /** A float32 scalar constant (dims `[]`). */
  scalar(value: number): string {
    return this.constant([value], []);
  }

  private out(name: string): string {
    return this.g.fresh(name);
  }

  /**
   * Conv2d, NCHW. Weight `[outC, inC, kh, kw]` named `${name}.weight` (He uniform), optional
   * bias `[outC]` (`${name}.bias`, bound 1/sqrt(fanIn)).
   * x: [batch, inC, H, W] -> [batch, outC, H', W'], H' = floor((H + 2·padH − kh)/strideH) + 1.
   * @throws RangeError when the output would be empty (input too small).
   */
  conv(x: string, name: string, outC: number, win: Window2d, opts: { bias?: boolean } = {}): string {
    const s = this.shape(x);
    const inC = staticDim(s, 1, name);
    const [kh, kw] = win.kernel;
    const [sh, sw] = win.stride ?? [1, 1];
    const [ph, pw] = win.pad ?? [0, 0];
    const h = windowOut(staticDim(s, 2, name), kh, sh, ph, ph);
    const w = windowOut(staticDim(s, 3, name), kw, sw, pw, pw);
    if (h < 1 || w < 1) throw new RangeError(`${name}: input ${s.join('x')} too small for a ${kh}x${kw}/${sh} conv; raise 'resolution'`);
    const fanIn = inC * kh * kw;
    const inputs = [x, this.g.initializer(`${name}.weight`, [outC, inC, kh, kw], { kind: 'uniform', bound: Math.sqrt(6 / fanIn) })];
    if (opts.bias === true) inputs.push(this.g.initializer(`${name}.bias`, [outC], { kind: 'uniform', bound: 1 / Math.sqrt(fanIn) }));
    const attrs: Record<string, AttrValue> = {
      kernel_shape: { ints: [kh, kw] },
      strides: { ints: [sh, sw] },
      pads: { ints: [ph, pw, ph, pw] },
    };
    return this.g.node('Conv', inputs, [[dimAt(s, 0, name), outC, h, w]], { attrs, outputs: [this.out(name)] })[0]!;
  }

  /**
   * BatchNormalization (inference mode). `${name}.weight`/`.bias` `[C]` trainable;
   * `.running_mean`/`.running_var` `[C]` non-trainable buffers (torchvision counts only the former).
   */
  batchNorm(x: string, name: string, opts: { eps: number; gamma?: number }): string {
    const s = this.shape(x);
    const c = staticDim(s, 1, name);
    const inputs = [
      x,
      this.g.initializer(`${name}.weight`, [c], { kind: 'constant', value: opts.gamma ?? 1 }),
      this.g.initializer(`${name}.bias`, [c], { kind: 'constant', value: 0 }),
      this.g.initializer(`${name}.running_mean`, [c], { kind: 'constant', value: 0 }, { trainable: false }),
      this.g.initializer(`${name}.running_var`, [c], { kind: 'constant', value: 1 }, { trainable: false }),
    ];
    return this.g.node('BatchNormalization', inputs, [s], { attrs: { epsilon: { float: opts.eps } }, outputs: [this.out(name)] })[0]!;
  }

  /** Elementwise op with one input, same shape. */
  unary(op: 'Relu' | 'Erf' | 'Softmax', x: string, name: string, attrs: Record<string, AttrValue> = {}): string {
    return this.g.node(op, [x], [this.shape(x)], { attrs, outputs: [this.out(name)] })[0]!;
  }

  /** ReLU, same shape. */
  relu(x: string, name: string): string {
    return this.unary('Relu', x, name);
  }

  /**
   * Elementwise binary op with numpy broadcasting; output shape is the broadcast of both
   * (symbolic dims win over 1).
   * @throws RangeError when the shapes do not broadcast.
   */
  binary(op: 'Add' | 'Sub' | 'Mul' | 'Div', a: string, b: string, name: string): string {
    const shape = broadcastShapes(this.shape(a), this.shape(b), `${name} (${op})`);
    return this.g.node(op, [a, b], [shape], { outputs: [this.out(name)] })[0]!;
  }

  /** MaxPool / AveragePool 2-D (floor mode). AveragePool counts padding like PyTorch's default. */
  pool(op: 'MaxPool' | 'AveragePool', x: string, name: string, win: Window2d): string {
    const s = this.shape(x);
    const [kh, kw] = win.kernel;
    const [sh, sw] = win.stride ?? win.kernel;
    const [ph, pw] = win.pad ?? [0, 0];
    const h = windowOut(staticDim(s, 2, name), kh, sh, ph, ph);
    const w = windowOut(staticDim(s, 3, name), kw, sw, pw, pw);
    if (h < 1 || w < 1) throw new RangeError(`${name}: input ${s.join('x')} too small for a ${kh}x${kw}/${sh} pool; raise 'resolution'`);
    const attrs: Record<string, AttrValue> = {
      kernel_shape: { ints: [kh, kw] },
      strides: { ints: [sh, sw] },
      pads: { ints: [ph, pw, ph, pw] },
    };
    // PyTorch avg_pool2d defaults to count_include_pad=True.
    if (op === 'AveragePool') attrs['count_include_pad'] = { int: 1 };
    return this.g.node(op, [x], [[dimAt(s, 0, name), dimAt(s, 1, name), h, w]], { attrs, outputs: [this.out(name)] })[0]!;
  }

  /** GlobalAveragePool = AdaptiveAvgPool2d((1, 1)): [batch, C, H, W] -> [batch, C, 1, 1]. */
  globalAvgPool(x: string, name: string): string {
    const s = this.shape(x);
    return this.g.node('GlobalAveragePool', [x], [[dimAt(s, 0, name), dimAt(s, 1, name), 1, 1]], { outputs: [this.out(name)] })[0]!;
  }

  /** Flatten(axis=1): [batch, ...] -> [batch, prod(...)]. */
  flatten(x: string, name: string): string {
    const s = this.shape(x);
    return this.g.node('Flatten', [x], [[dimAt(s, 0, name), staticSize(s.slice(1), name)]], { attrs: { axis: { int: 1 } }, outputs: [this.out(name)] })[0]!;
  }

  /**
   * Linear layer as Gemm(transB=1): weight `[out, in]` (PyTorch layout), bias `[out]`.
   * x: [batch, in] -> [batch, out]. `he`: He-uniform weights (layer followed by ReLU), else
   * PyTorch's default bound 1/sqrt(in).
   */
  linear(x: string, name: string, outF: number, opts: { he: boolean; output?: string }): string {
    const s = this.shape(x);
    const inF = staticDim(s, 1, name);
    const bound = opts.he ? Math.sqrt(6 / inF) : 1 / Math.sqrt(inF);
    const w = this.g.initializer(`${name}.weight`, [outF, inF], { kind: 'uniform', bound });
    const b = this.g.initializer(`${name}.bias`, [outF], { kind: 'uniform', bound: 1 / Math.sqrt(inF) });
    return this.g.node('Gemm', [x, w, b], [[dimAt(s, 0, name), outF]], {
      attrs: { transB: { int: 1 } },
      outputs: [opts.output ?? this.out(name)],
    })[0]!;
  }

  /**
   * The torchvision classification head shared by ResNet and Inception v3, as its own operator
   * `head`: global average pool, flatten, fully connected layer to `numClasses` (output
   * `logits`, [batch, numClasses]), declared as the graph output.
   */
  classifierHead(x: string, numClasses: number): void {
    this.beginOperator('head');
    const pooled = this.globalAvgPool(x, 'avgpool');
    const flat = this.flatten(pooled, 'flatten');
    this.g.output(this.linear(flat, 'fc', numClasses, { he: false, output: 'logits' }));
  }

  /** Concat along `axis` (static sizes on that axis). */
  concat(xs: readonly string[], axis: number, name: string): string {
    const shapes = xs.map((x) => this.shape(x));
    const first = shapes[0];
    if (!first) throw new RangeError(`${name}: concat of nothing`);
    let total = 0;
    for (const s of shapes) total += staticDim(s, axis, name);
    const shape = first.map((d, i) => (i === axis ? total : d));
    return this.g.node('Concat', [...xs], [shape], { attrs: { axis: { int: axis } }, outputs: [this.out(name)] })[0]!;
  }

  /**
   * MatMul with numpy semantics: [..., n, k] x [..., k, m] -> [..., n, m] (batch dims broadcast).
   * @throws RangeError when the inner dims are static and differ.
   */
  matmul(a: string, b: string, name: string): string {
    const sa = this.shape(a);
    const sb = this.shape(b);
    if (sa.length < 2 || sb.length < 2) throw new RangeError(`${name}: MatMul needs rank ≥ 2 (got [${sa.join(', ')}], [${sb.join(', ')}])`);
    const k1 = dimAt(sa, -1, name);
    const k2 = dimAt(sb, -2, name);
    if (k1 !== k2) throw new RangeError(`${name}: MatMul inner dims differ ([${sa.join(', ')}] x [${sb.join(', ')}])`);
    const batch = broadcastShapes(sa.slice(0, -2), sb.slice(0, -2), name);
    return this.g.node('MatMul', [a, b], [[...batch, dimAt(sa, -2, name), dimAt(sb, -1, name)]], { outputs: [this.out(name)] })[0]!;
  }

  /** Generic node with explicitly given output shape / type (Shape, Slice, Gather, Reshape …). */
  op(opType: string, inputs: readonly string[], shape: Shape, name: string, opts: { attrs?: Record<string, AttrValue>; dataType?: TensorDataType; output?: string } = {}): string {
    return this.g.node(opType, inputs, [shape], {
      attrs: opts.attrs ?? {},
      dataType: opts.dataType ?? 'float32',
      outputs: [opts.output ?? this.out(name)],
    })[0]!;
  }

  /** Cast to float32 (ONNX `Cast(to=FLOAT)`). */
  castFloat(x: string, name: string): string {
    return this.op('Cast', [x], this.shape(x), name, { attrs: { to: { int: ONNX_FLOAT } } });
  }
}

/**
 * Numpy broadcasting of two shapes. A symbolic dim broadcasts with 1 and with itself; two
 * different symbols or a symbol against a static size ≠ 1 are rejected (never needed here).
 * @throws RangeError when the shapes do not broadcast.
 */
export function broadcastShapes(a: Shape, b: Shape, what: string): Dim[] {
  const n = Math.max(a.length, b.length);
  const out: Dim[] = [];
  for (let i = 0; i < n; i++) {
    const da = a[a.length - n + i] ?? 1;
    const db = b[b.length - n + i] ?? 1;
    if (da === db || db === 1) out.push(da);
    else if (da === 1) out.push(db);
    else throw new RangeError(`${what}: shapes [${a.join(', ')}] and [${b.join(', ')}] do not broadcast`);
  }
  return out;
}
