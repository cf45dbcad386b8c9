/**
 * Models with control flow inside one node (If, Loop, Scan), built with the project's GraphBuilder
 * and left without value_info so the importer must probe them (docs/import.md "Control flow").
 */
import { GraphBuilder } from '../src/model/onnx/builder.ts';
import type { OnnxTypes } from '../src/model/onnx/proto.ts';

/** A GraphBuilder's graph without value_info (outputs keep their declared types). */
function bare(g: GraphBuilder): OnnxTypes.ModelProto {
  const { model } = g.build();
  model.graph!.valueInfo = [];
  return model;
}

/** A subgraph: a GraphBuilder's graph, value_info removed. */
function subgraph(g: GraphBuilder): OnnxTypes.IGraphProto {
  return bare(g).graph!;
}

/**
 * A VAD-like model whose network sits in the branches of an If on the sample rate (as silero
 * VAD's does): input [batch, samples] float, sr int64 []. mono = Unsqueeze(input · gain) [batch,
 * 1, samples]; If(sr == 16000):
 * - then: Pad(mono, 128 reflect) → Conv(4 filters of 256 taps, stride 128) → [batch, 4, samples/128 + 1]
 * - else: Pad(mono, 64 reflect) → Conv(4 filters of 128 taps, stride 64) → [batch, 4, samples/64 + 1]
 *
 * The branches read `mono` (made by an earlier node) and the outer graph's initializers. After
 * the If: features = Relu, prob = Sigmoid(mean over frames) [batch, 4]. 7 outer nodes. Zeros
 * (sr = 0) take the else branch, whose reflect pad of 64 needs samples > 64.
 */
export function vadLikeModel(): OnnxTypes.ModelProto {
  const g = new GraphBuilder({ name: 'vadlike', seed: 31, opset: 18 });
  const input = g.input('input', 'float32', ['batch', 'samples']);
  const sr = g.input('sr', 'int64', []);
  const gain = g.initializer('gain', [1], { kind: 'constant', value: 0.5 });
  const axis1 = g.initializer('axis1', [1], { kind: 'values', values: [1] }, { dataType: 'int64', trainable: false });
  const rate = g.initializer('rate16k', [], { kind: 'values', values: [16000] }, { dataType: 'int64', trainable: false });
  const w16 = g.initializer('w16', [4, 1, 256], { kind: 'uniform', bound: 0.1 });
  const w8 = g.initializer('w8', [4, 1, 128], { kind: 'uniform', bound: 0.1 });
  const pads16 = g.initializer('pads16', [6], { kind: 'values', values: [0, 0, 128, 0, 0, 128] }, { dataType: 'int64', trainable: false });
  const pads8 = g.initializer('pads8', [6], { kind: 'values', values: [0, 0, 64, 0, 0, 64] }, { dataType: 'int64', trainable: false });
  const axis2 = g.initializer('axis2', [1], { kind: 'values', values: [2] }, { dataType: 'int64', trainable: false });
  g.beginOperator('all');
  const [scaled] = g.node('Mul', [input, gain], [['batch', 'samples']], { outputs: ['scaled'] });
  const [mono] = g.node('Unsqueeze', [scaled!, axis1], [['batch', 1, 'samples']], { outputs: ['mono'] });
  const [is16k] = g.node('Equal', [sr, rate], [[]], { outputs: ['is16k'], dataType: 'bool' });
  const branch = (name: string, pads: string, w: string, stride: number, frames: string): OnnxTypes.IGraphProto => {
    const b = new GraphBuilder({ name, seed: 1 });
    b.beginOperator(name);
    const [padded] = b.node('Pad', [mono!, pads], [['batch', 1, 'padded']], { attrs: { mode: { string: 'reflect' } }, outputs: [`${name}_padded`] });
    b.node('Conv', [padded!, w], [['batch', 4, frames]], { attrs: { strides: { ints: [stride] } }, outputs: [`${name}_out`] });
    b.output(`${name}_out`);
    return subgraph(b);
  };
  const [frames] = g.node('If', [is16k!], [['batch', 4, 'frames']], {
    outputs: ['frames'],
    attrs: { then_branch: { graph: branch('then', pads16, w16, 128, 'f16') }, else_branch: { graph: branch('else', pads8, w8, 64, 'f8') } },
  });
  const [features] = g.node('Relu', [frames!], [['batch', 4, 'frames']], { outputs: ['features'] });
  const [mean] = g.node('ReduceMean', [features!, axis2], [['batch', 4]], { attrs: { keepdims: { int: 0 } } });
  g.node('Sigmoid', [mean!], [['batch', 4]], { outputs: ['prob'] });
  g.output('prob');
  g.output('features');
  return bare(g);
}

/**
 * A Loop with a constant trip count (3) whose body reads an outer value: x [batch, samples];
 * scaled = x · 0.25; y = Loop(3, true, x) with body y ← y · half + scaled (half an outer
 * initializer); out = Tanh(y). 3 outer nodes.
 */
export function loopModel(): OnnxTypes.ModelProto {
  const g = new GraphBuilder({ name: 'looped', seed: 32 });
  const x = g.input('x', 'float32', ['batch', 'samples']);
  const quarter = g.initializer('quarter', [1], { kind: 'constant', value: 0.25 });
  const half = g.initializer('half', [1], { kind: 'constant', value: 0.5 });
  const trips = g.initializer('trips', [], { kind: 'values', values: [3] }, { dataType: 'int64', trainable: false });
  g.beginOperator('all');
  const [scaled] = g.node('Mul', [x, quarter], [['batch', 'samples']], { outputs: ['scaled'] });
  const [yes] = g.node('Constant', [], [[]], { attrs: { value_int: { int: 1 } }, outputs: ['yes_int'], dataType: 'int64' });
  const [cond] = g.node('Cast', [yes!], [[]], { attrs: { to: { int: 9 } }, outputs: ['yes'], dataType: 'bool' });
  const b = new GraphBuilder({ name: 'body', seed: 1 });
  b.input('iter', 'int64', []);
  const condIn = b.input('cond_in', 'bool', []);
  const yIn = b.input('y_in', 'float32', ['batch', 'samples']);
  b.beginOperator('body');
  b.node('Identity', [condIn], [[]], { outputs: ['cond_out'], dataType: 'bool' });
  const [halved] = b.node('Mul', [yIn, half], [['batch', 'samples']]);
  b.node('Add', [halved!, scaled!], [['batch', 'samples']], { outputs: ['y_out'] });
  b.output('cond_out');
  b.output('y_out');
  const [y] = g.node('Loop', [trips, cond!, x], [['batch', 'samples']], { outputs: ['y'], attrs: { body: { graph: subgraph(b) } } });
  g.node('Tanh', [y!], [['batch', 'samples']], { outputs: ['out'] });
  g.output('out');
  return bare(g);
}

/**
 * A Scan along the samples axis whose body reads an outer value: x [batch, samples];
 * s0 = mean of x over samples [batch]; w = 0.9 · s0 (outer); Scan with state s and scan input
 * x[:, t]: s ← s · 0.5 + x[:, t] + w, emitting s — final [batch] and trace [batch, samples]. 3
 * outer nodes.
 */
export function scanModel(): OnnxTypes.ModelProto {
  const g = new GraphBuilder({ name: 'scanned', seed: 33, opset: 18 });
  const x = g.input('x', 'float32', ['batch', 'samples']);
  const axis1 = g.initializer('axis1', [1], { kind: 'values', values: [1] }, { dataType: 'int64', trainable: false });
  const decay = g.initializer('decay', [1], { kind: 'constant', value: 0.9 });
  const half = g.initializer('half', [1], { kind: 'constant', value: 0.5 });
  g.beginOperator('all');
  const [s0] = g.node('ReduceMean', [x, axis1], [['batch']], { attrs: { keepdims: { int: 0 } }, outputs: ['s0'] });
  const [w] = g.node('Mul', [s0!, decay], [['batch']], { outputs: ['w'] });
  const b = new GraphBuilder({ name: 'step', seed: 1 });
  const sIn = b.input('s_in', 'float32', ['batch']);
  const xt = b.input('x_t', 'float32', ['batch']);
  b.beginOperator('step');
  const [kept] = b.node('Mul', [sIn, half], [['batch']]);
  const [added] = b.node('Add', [kept!, xt], [['batch']]);
  const [sOut] = b.node('Add', [added!, w!], [['batch']], { outputs: ['s_out'] });
  b.node('Identity', [sOut!], [['batch']], { outputs: ['emit'] });
  b.output('s_out');
  b.output('emit');
  g.node('Scan', [s0!, x], [['batch'], ['batch', 'samples']], {
    outputs: ['final', 'trace'],
    attrs: { body: { graph: subgraph(b) }, num_scan_inputs: { int: 1 }, scan_input_axes: { ints: [1] }, scan_output_axes: { ints: [1] } },
  });
  g.output('final');
  g.output('trace');
  return bare(g);
}
