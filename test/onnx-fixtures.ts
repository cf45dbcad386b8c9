/**
 * Hand-built ONNX graphs (GraphBuilder) and helpers shared by the onnx-*.test.ts files.
 */
import * as ort from 'onnxruntime-node';
import seedrandom from 'seedrandom';
import { GraphBuilder, valueInfo } from '../src/model/onnx/builder.ts';
import type { BuiltGraph } from '../src/model/onnx/builder.ts';
import { onnx } from '../src/model/onnx/proto.ts';
import type { OnnxTypes } from '../src/model/onnx/proto.ts';
import type { ModelSpec } from '../src/model/spec.ts';

/**
 * "Transformer-ish" DAG with a dynamic seq axis: inputs x [batch, seq, 8] and y [batch, 8];
 * outputs `early` (produced by the 2nd operator), `probs` (last) and `y` (a graph input that
 * is a graph output). Features: a residual from operator 0 to operator 5 (crossing 4 cuts), x
 * read by operators 0 and 5, W2 shared by operators 1 and 5, a Constant node, an omitted
 * optional input (Clip min = ''), attention-like s² FLOPs (MatMul of [s,8]×[8,s] and [s,s]×[s,8]).
 * 7 operators in the builder's own assignment.
 */
export function buildSkipGraph(opts: { withWeights?: boolean } = {}): BuiltGraph {
  const g = new GraphBuilder({ name: 'skipnet', seed: 7, withWeights: opts.withWeights ?? true });
  const B = 'batch';
  const S = 'seq';
  const x = g.input('x', 'float32', [B, S, 8]);
  const y = g.input('y', 'float32', [B, 8]);
  const W1 = g.initializer('W1', [8, 8], { kind: 'uniform', bound: 0.5 });
  const B1 = g.initializer('B1', [8], { kind: 'uniform', bound: 0.1 });
  const W2 = g.initializer('W2', [8, 8], { kind: 'uniform', bound: 0.5 });
  const W3 = g.initializer('W3', [8, 8], { kind: 'uniform', bound: 0.5 });
  const axes1 = g.initializer('axes1', [1], { kind: 'values', values: [1] }, { dataType: 'int64', trainable: false });

  g.beginOperator('in');
  const [a0] = g.node('MatMul', [x, W1], [[B, S, 8]]);
  const [a0b] = g.node('Add', [a0!, B1], [[B, S, 8]]);
  const [a1] = g.node('Relu', [a0b!], [[B, S, 8]], { outputs: ['res'] });
  g.beginOperator('early');
  g.node('Tanh', [a1!], [[B, S, 8]], { outputs: ['early'] });
  const [yu] = g.node('Unsqueeze', [y, axes1], [[B, 1, 8]], { outputs: ['yu'] });
  const [a3] = g.node('MatMul', [a1!, W2], [[B, S, 8]], { outputs: ['h3'] });
  g.beginOperator('mix');
  const [a5] = g.node('Add', [a3!, yu!], [[B, S, 8]]);
  const [a6] = g.node('Sigmoid', [a5!], [[B, S, 8]]);
  const [t] = g.node('Transpose', [a6!], [[B, 8, S]], { attrs: { perm: { ints: [0, 2, 1] } } });
  g.beginOperator('attn');
  const [sc] = g.node('MatMul', [a6!, t!], [[B, S, S]]);
  const [p] = g.node('Softmax', [sc!], [[B, S, S]], { attrs: { axis: { int: -1 } } });
  const [ctx] = g.node('MatMul', [p!, a6!], [[B, S, 8]]);
  g.beginOperator('proj');
  const [a7] = g.node('MatMul', [ctx!, W3], [[B, S, 8]]);
  const [cmax] = g.node('Constant', [], [[]], { attrs: { value_float: { float: 0.75 } } });
  const [a8] = g.node('Clip', [a7!, '', cmax!], [[B, S, 8]], { outputs: ['h8'] });
  g.beginOperator('skip');
  const [a9] = g.node('Add', [a8!, a1!], [[B, S, 8]]);
  const [a10] = g.node('Mul', [a9!, x], [[B, S, 8]]);
  const [a11] = g.node('MatMul', [a10!, W2], [[B, S, 8]]);
  g.beginOperator('head');
  const [pooled] = g.node('ReduceMean', [a11!], [[B, 8]], { attrs: { axes: { ints: [1] }, keepdims: { int: 0 } } });
  g.node('Softmax', [pooled!], [[B, 8]], { attrs: { axis: { int: -1 } }, outputs: ['probs'] });
  g.output('early');
  g.output('probs');
  g.output(y);
  return g.build();
}

/**
 * Inception-like CNN: a stem, three branches (1×1; 1×1→3×3; maxpool→1×1) merged by Concat,
 * BatchNorm + Relu, a 1×1 shortcut from the stem added after the merge, global pool, Gemm.
 * Input img [batch, 3, 12, 12], output logits [batch, 10].
 */
export function buildInceptionGraph(): BuiltGraph {
  const g = new GraphBuilder({ name: 'minception', seed: 11 });
  const B = 'batch';
  const img = g.input('img', 'float32', [B, 3, 12, 12]);
  const w = (name: string, dims: number[]): string => g.initializer(name, dims, { kind: 'uniform', bound: 1 / Math.sqrt(dims.slice(1).reduce((a, b) => a * b, 1)) });
  const pad1 = { pads: { ints: [1, 1, 1, 1] } };
  g.beginOperator('stem');
  const [c0] = g.node('Conv', [img, w('c0.w', [8, 3, 3, 3]), w('c0.b', [8])], [[B, 8, 12, 12]], { attrs: { ...pad1, kernel_shape: { ints: [3, 3] } } });
  const [r0] = g.node('Relu', [c0!], [[B, 8, 12, 12]]);
  g.beginOperator('branches');
  const [b1] = g.node('Conv', [r0!, w('b1.w', [4, 8, 1, 1])], [[B, 4, 12, 12]]);
  const [b2a] = g.node('Conv', [r0!, w('b2a.w', [4, 8, 1, 1])], [[B, 4, 12, 12]]);
  const [b2r] = g.node('Relu', [b2a!], [[B, 4, 12, 12]]);
  const [b2] = g.node('Conv', [b2r!, w('b2.w', [4, 4, 3, 3])], [[B, 4, 12, 12]], { attrs: pad1 });
  const [mp] = g.node('MaxPool', [r0!], [[B, 8, 12, 12]], { attrs: { kernel_shape: { ints: [3, 3] }, strides: { ints: [1, 1] }, ...pad1 } });
  const [b3] = g.node('Conv', [mp!, w('b3.w', [4, 8, 1, 1])], [[B, 4, 12, 12]]);
  const [cat] = g.node('Concat', [b1!, b2!, b3!], [[B, 12, 12, 12]], { attrs: { axis: { int: 1 } } });
  g.beginOperator('merge');
  const scale = g.initializer('bn.scale', [12], { kind: 'uniform', bound: 1 });
  const bias = g.initializer('bn.bias', [12], { kind: 'uniform', bound: 0.1 });
  const mean = g.initializer('bn.mean', [12], { kind: 'uniform', bound: 0.1 }, { trainable: false });
  const vari = g.initializer('bn.var', [12], { kind: 'constant', value: 1.5 }, { trainable: false });
  const [bn] = g.node('BatchNormalization', [cat!, scale, bias, mean, vari], [[B, 12, 12, 12]]);
  const [r1] = g.node('Relu', [bn!], [[B, 12, 12, 12]]);
  const [s] = g.node('Conv', [r0!, w('sc.w', [12, 8, 1, 1])], [[B, 12, 12, 12]]);
  const [add] = g.node('Add', [r1!, s!], [[B, 12, 12, 12]]);
  g.beginOperator('head');
  const [pool] = g.node('GlobalAveragePool', [add!], [[B, 12, 1, 1]]);
  const [flat] = g.node('Flatten', [pool!], [[B, 12]], { attrs: { axis: { int: 1 } } });
  g.node('Gemm', [flat!, w('fc.w', [10, 12]), w('fc.b', [10])], [[B, 10]], { attrs: { transB: { int: 1 } }, outputs: ['logits'] });
  g.output('logits');
  return g.build();
}

/**
 * A graph with an If node whose branches read outer-scope values produced by two earlier
 * operators: x [batch, 4], flag bool []; out = (flag ? relu(x) + (−x) : relu(x) · sigmoid(relu(x))) + x.
 * Operators: {Relu, Neg} {Sigmoid} {If} {Add}.
 */
export function buildIfGraph(): BuiltGraph {
  const g = new GraphBuilder({ name: 'branchy', seed: 3 });
  const x = g.input('x', 'float32', ['batch', 4]);
  g.input('flag', 'bool', []);
  g.beginOperator('pre');
  const [a] = g.node('Relu', [x], [['batch', 4]], { outputs: ['a'] });
  const [b] = g.node('Neg', [x], [['batch', 4]], { outputs: ['b'] });
  g.beginOperator('sig');
  const [c] = g.node('Sigmoid', [a!], [['batch', 4]], { outputs: ['c'] });
  g.beginOperator('if');
  g.node('Identity', [a!], [['batch', 4]], { outputs: ['if_placeholder'] });
  g.beginOperator('post');
  g.node('Add', ['if_out', x], [['batch', 4]], { outputs: ['final'] });
  g.output('final');
  const built = g.build();
  // Replace the placeholder by an If node (GraphBuilder has no graph attributes).
  const branch = (name: string, op: string, inputs: string[]): OnnxTypes.IGraphProto => ({
    name,
    node: [{ opType: op, input: inputs, output: [`${name}_out`], name: `${name}_${op}` }],
    output: [valueInfo(`${name}_out`, 'float32', ['batch', 4])],
  });
  const graph = built.model.graph!;
  const idx = graph.node!.findIndex((n) => n.output?.[0] === 'if_placeholder');
  graph.node![idx] = {
    opType: 'If',
    name: 'the_if',
    input: ['flag'],
    output: ['if_out'],
    attribute: [
      { name: 'then_branch', type: onnx.AttributeProto.AttributeType.GRAPH, g: branch('then', 'Add', [a!, b!]) },
      { name: 'else_branch', type: onnx.AttributeProto.AttributeType.GRAPH, g: branch('else', 'Mul', [a!, c!]) },
    ],
  };
  graph.valueInfo = (graph.valueInfo ?? []).map((v) => (v.name === 'if_placeholder' ? valueInfo('if_out', 'float32', ['batch', 4]) : v));
  return built;
}

/** Deterministic random float32 tensor in [-1, 1). */
export function randomTensor(dims: number[], seed: string): ort.Tensor {
  const rng = seedrandom.alea(seed);
  const n = dims.reduce((a, b) => a * b, 1);
  const data = new Float32Array(n);
  for (let i = 0; i < n; i++) data[i] = rng() * 2 - 1;
  return new ort.Tensor('float32', data, dims);
}

/** Encode and decode (what a file round trip gives: Long dims, prototype defaults). */
export function roundTrip(model: OnnxTypes.IModelProto): OnnxTypes.ModelProto {
  return onnx.ModelProto.decode(onnx.ModelProto.encode(model).finish());
}

/**
 * Independent check of the boundary invariant of a spec: boundary(k+1) = outputs(k) ∪
 * passthrough(k) = inputs(k+1) ∪ passthrough(k+1), boundary N = model outputs, every input of
 * operator 0 is a model input. Returns a list of violations (empty when fine).
 */
export function boundaryViolations(spec: ModelSpec): string[] {
  const out: string[] = [];
  const names = (xs: readonly { name: string }[]): string[] => xs.map((x) => x.name);
  const eq = (a: string[], b: string[]): boolean => {
    const sa = new Set(a);
    const sb = new Set(b);
    return sa.size === a.length && sa.size === sb.size && [...sa].every((v) => sb.has(v));
  };
  const modelInputs = new Set(names(spec.inputs));
  for (const t of spec.operators[0]?.inputs ?? []) if (!modelInputs.has(t.name)) out.push(`operator 0 reads non-input ${t.name}`);
  for (const v of spec.operators[0]?.passthrough ?? []) if (!modelInputs.has(v)) out.push(`operator 0 passes non-input ${v}`);
  for (let k = 0; k + 1 < spec.operators.length; k++) {
    const a = spec.operators[k]!;
    const b = spec.operators[k + 1]!;
    const after = [...names(a.outputs), ...a.passthrough];
    const before = [...new Set([...names(b.inputs), ...b.passthrough])];
    if (!eq(after, before)) out.push(`boundary ${k + 1}: {${after.join(',')}} vs {${before.join(',')}}`);
  }
  const lastOp = spec.operators[spec.operators.length - 1]!;
  const last = [...names(lastOp.outputs), ...lastOp.passthrough];
  if (!eq(last, names(spec.outputs))) out.push(`boundary N: {${last.join(',')}} vs outputs {${names(spec.outputs).join(',')}}`);
  return out;
}

/**
 * A graph whose tensors have element types beyond float: inputs `words` STRING [batch, 4] and
 * `x` FLOAT [batch, 4]; w1 = Identity(words) (STRING), eq = Equal(w1, "7") (BOOL), neq = Not(eq),
 * u = Cast(neq → UINT32), u2 = u + u (UINT32), y = x · float(u2); outputs y (FLOAT), words_out =
 * Identity(w1) (STRING), u2 (UINT32) and neq (BOOL). Eight nodes; opset 19 (Equal on strings).
 * Every value annotated, so no probe run is needed.
 */
export function buildTypedGraph(): OnnxTypes.ModelProto {
  const DT = onnx.TensorProto.DataType;
  const AT = onnx.AttributeProto.AttributeType;
  const info = (name: string, elemType: number): OnnxTypes.IValueInfoProto => ({ name, type: { tensorType: { elemType, shape: { dim: [{ dimParam: 'batch' }, { dimValue: 4 }] } } } });
  const cast = (to: number): OnnxTypes.IAttributeProto[] => [{ name: 'to', type: AT.INT, i: to }];
  return onnx.ModelProto.create({
    irVersion: 9,
    opsetImport: [{ domain: '', version: 19 }],
    graph: {
      name: 'typed',
      input: [info('words', DT.STRING), info('x', DT.FLOAT)],
      initializer: [{ name: 'seven', dataType: DT.STRING, dims: [], stringData: [new TextEncoder().encode('7')] }],
      node: [
        { opType: 'Identity', input: ['words'], output: ['w1'], name: 'id_words' },
        { opType: 'Equal', input: ['w1', 'seven'], output: ['eq'], name: 'eq' },
        { opType: 'Not', input: ['eq'], output: ['neq'], name: 'not' },
        { opType: 'Cast', input: ['neq'], output: ['u'], name: 'to_u32', attribute: cast(DT.UINT32) },
        { opType: 'Add', input: ['u', 'u'], output: ['u2'], name: 'twice' },
        { opType: 'Cast', input: ['u2'], output: ['uf'], name: 'to_f32', attribute: cast(DT.FLOAT) },
        { opType: 'Mul', input: ['x', 'uf'], output: ['y'], name: 'mul' },
        { opType: 'Identity', input: ['w1'], output: ['words_out'], name: 'id_out' },
      ],
      valueInfo: [info('w1', DT.STRING), info('eq', DT.BOOL), info('u', DT.UINT32), info('uf', DT.FLOAT)],
      output: [info('y', DT.FLOAT), info('words_out', DT.STRING), info('u2', DT.UINT32), info('neq', DT.BOOL)],
    },
  });
}
