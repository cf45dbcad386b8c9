/**
 * Graphs with several dynamic axes and data-dependent outputs (docs/import.md "Dynamic axes", "Data-dependent shapes"), built with the
 * project's graph builder and stripped of their `value_info` (as exporters often leave them), so
 * the importer must probe their shapes with onnxruntime. Intermediate shapes given to the
 * builder are documentation only.
 */
import { GraphBuilder } from '../src/model/onnx/builder.ts';
import type { OnnxTypes } from '../src/model/onnx/proto.ts';

function conv(g: GraphBuilder, x: string, cin: number, cout: number, stride: number, kernel = 3): string {
  const w = g.initializer(g.fresh('w'), [cout, cin, kernel, kernel], { kind: 'uniform', bound: 1 / Math.sqrt(cin * kernel * kernel) });
  const b = g.initializer(g.fresh('b'), [cout], { kind: 'uniform', bound: 0.1 });
  const pad = (kernel - 1) >> 1;
  const [y] = g.node('Conv', [x, w, b], [['batch', cout, '?', '?']], { attrs: { strides: { ints: [stride, stride] }, pads: { ints: [pad, pad, pad, pad] }, kernel_shape: { ints: [kernel, kernel] } } });
  return y!;
}

function relu(g: GraphBuilder, x: string): string {
  return g.node('Relu', [x], [g.shapeOf(x).shape])[0]!;
}

function stripped(g: GraphBuilder): OnnxTypes.ModelProto {
  const { model } = g.build();
  model.graph!.valueInfo = [];
  return model;
}

/**
 * image [batch, 3, height, width] → three stride-2 convolutions (3×3, pad 1: ⌈H/2⌉, ⌈H/4⌉,
 * ⌈H/8⌉) → outputs heat4 [batch, 2, ⌈H/4⌉, ⌈W/4⌉], heat8 [batch, 2, ⌈H/8⌉, ⌈W/8⌉] and flat8 =
 * Flatten(heat8) [batch, 2·⌈H/8⌉·⌈W/8⌉]. 10 nodes.
 */
export function detectorModel(): OnnxTypes.ModelProto {
  const g = new GraphBuilder({ name: 'detector', seed: 16 });
  const image = g.input('image', 'float32', ['batch', 3, 'height', 'width']);
  g.beginOperator('all');
  const s2 = relu(g, conv(g, image, 3, 4, 2));
  const s4 = relu(g, conv(g, s2, 4, 8, 2));
  const s8 = relu(g, conv(g, s4, 8, 8, 2));
  const heat4 = g.node('Sigmoid', [conv(g, s4, 8, 2, 1, 1)], [['batch', 2, 'height/4', 'width/4']], { outputs: ['heat4'] })[0]!;
  const heat8 = conv(g, s8, 8, 2, 1, 1);
  g.node('Identity', [heat8], [['batch', 2, 'height/8', 'width/8']], { outputs: ['heat8'] });
  g.node('Flatten', ['heat8'], [['batch', 'flat']], { outputs: ['flat8'], attrs: { axis: { int: 1 } } });
  g.output(heat4);
  g.output('heat8');
  g.output('flat8');
  return stripped(g);
}

/**
 * image [batch, 1, 32, width] → three stride-2 convolutions → [batch, 8, 4, ⌈W/8⌉] → mean over
 * the height → Transpose → logits = · W [batch, ⌈W/8⌉, 10] (a CTC text recognizer's shape). 9 nodes.
 */
export function recognizerModel(): OnnxTypes.ModelProto {
  const g = new GraphBuilder({ name: 'recognizer', seed: 17 });
  const image = g.input('image', 'float32', ['batch', 1, 32, 'width']);
  g.beginOperator('all');
  const s2 = relu(g, conv(g, image, 1, 4, 2));
  const s4 = relu(g, conv(g, s2, 4, 8, 2));
  const s8 = relu(g, conv(g, s4, 8, 8, 2));
  const [pooled] = g.node('ReduceMean', [s8], [['batch', 8, 'w8']], { attrs: { axes: { ints: [2] }, keepdims: { int: 0 } } });
  const [seq] = g.node('Transpose', [pooled!], [['batch', 'w8', 8]], { attrs: { perm: { ints: [0, 2, 1] } } });
  const w = g.initializer('classifier', [8, 10], { kind: 'uniform', bound: 0.3 });
  g.node('MatMul', [seq!, w], [['batch', 'w8', 10]], { outputs: ['logits'] });
  g.output('logits');
  return stripped(g);
}

/**
 * image [batch, height, width, 3] (NHWC) · mask [batch, height, width, 1] → Transpose to NCHW →
 * two stride-2 convolutions → Transpose back → features [batch, ⌈H/4⌉, ⌈W/4⌉, 8], and pooled =
 * Sigmoid(ReduceMean over H and W) [batch, 8]. 9 nodes; `height` and `width` appear in both
 * inputs.
 */
export function nhwcModel(): OnnxTypes.ModelProto {
  const g = new GraphBuilder({ name: 'nhwc', seed: 18 });
  const image = g.input('image', 'float32', ['batch', 'height', 'width', 3]);
  const mask = g.input('mask', 'float32', ['batch', 'height', 'width', 1]);
  g.beginOperator('all');
  const [masked] = g.node('Mul', [image, mask], [['batch', 'height', 'width', 3]]);
  const [nchw] = g.node('Transpose', [masked!], [['batch', 3, 'height', 'width']], { attrs: { perm: { ints: [0, 3, 1, 2] } } });
  const s2 = relu(g, conv(g, nchw!, 3, 8, 2));
  const s4 = relu(g, conv(g, s2, 8, 8, 2));
  g.node('Transpose', [s4], [['batch', 'h4', 'w4', 8]], { outputs: ['features'], attrs: { perm: { ints: [0, 2, 3, 1] } } });
  const [mean] = g.node('ReduceMean', ['features'], [['batch', 8]], { attrs: { axes: { ints: [1, 2] }, keepdims: { int: 0 } } });
  g.node('Sigmoid', [mean!], [['batch', 8]], { outputs: ['pooled'] });
  g.output('features');
  g.output('pooled');
  return stripped(g);
}

/**
 * x [batch, 8] → y = Relu(x · W) [batch, 8] → NonZero(y) = indices [2, nnz] (data-dependent) →
 * Transpose [nnz, 2] → Cast float → scaled = · 0.5 (output `found`); also the output `y`.
 */
export function nonZeroModel(): OnnxTypes.ModelProto {
  const g = new GraphBuilder({ name: 'nonzero', seed: 19 });
  const x = g.input('x', 'float32', ['batch', 8]);
  g.beginOperator('all');
  const w = g.initializer('w', [8, 8], { kind: 'uniform', bound: 1 });
  const [mm] = g.node('MatMul', [x, w], [['batch', 8]]);
  const [y] = g.node('Relu', [mm!], [['batch', 8]], { outputs: ['y'] });
  const [nz] = g.node('NonZero', [y!], [[2, 'nnz']], { dataType: 'int64' });
  const [t] = g.node('Transpose', [nz!], [['nnz', 2]], { dataType: 'int64', attrs: { perm: { ints: [1, 0] } } });
  const [f] = g.node('Cast', [t!], [['nnz', 2]], { attrs: { to: { int: 1 } } });
  const half = g.initializer('half', [], { kind: 'constant', value: 0.5 });
  g.node('Mul', [f!, half], [['nnz', 2]], { outputs: ['found'] });
  g.output('y');
  g.output('found');
  return stripped(g);
}

/**
 * x [batch, 16], k int64 [1] (a dynamic k) → TopK(x, k) along axis 1 → values [batch, k],
 * indices → scores = Sigmoid(values) [batch, k]; outputs scores and indices. 3 nodes after a
 * leading Relu.
 */
export function topKModel(): OnnxTypes.ModelProto {
  const g = new GraphBuilder({ name: 'topk', seed: 20 });
  const x = g.input('x', 'float32', ['batch', 16]);
  const k = g.input('k', 'int64', [1]);
  g.beginOperator('all');
  const [r] = g.node('Relu', [x], [['batch', 16]]);
  const [values, indices] = g.node('TopK', [r!, k], [['batch', 'k'], ['batch', 'k']], { outputDataTypes: ['float32', 'int64'], outputs: ['values', 'indices'], attrs: { axis: { int: 1 } } });
  g.node('Sigmoid', [values!], [['batch', 'k']], { outputs: ['scores'] });
  g.output('scores');
  g.output(indices!);
  return stripped(g);
}

/**
 * An FPN-style detector that only accepts sizes divisible by 8: image [batch, 3, height, width]
 * → stride-2 convolutions to s4 [batch, 8, H/4, W/4] and s8 [batch, 8, H/8, W/8] → s4 +
 * Resize(s8, ×2 nearest) → out = 1×1 conv [batch, 2, H/4, W/4]. Odd sizes fail in the Add. 10
 * nodes.
 */
export function fpnModel(): OnnxTypes.ModelProto {
  const g = new GraphBuilder({ name: 'fpn', seed: 21 });
  const image = g.input('image', 'float32', ['batch', 3, 'height', 'width']);
  g.beginOperator('all');
  const s2 = relu(g, conv(g, image, 3, 8, 2));
  const s4 = relu(g, conv(g, s2, 8, 8, 2));
  const s8 = relu(g, conv(g, s4, 8, 8, 2));
  const scales = g.initializer('scales', [4], { kind: 'values', values: [1, 1, 2, 2] }, { trainable: false });
  const [up] = g.node('Resize', [s8, '', scales], [['batch', 8, 'h4', 'w4']], { attrs: { mode: { string: 'nearest' } } });
  const [sum] = g.node('Add', [s4, up!], [['batch', 8, 'h4', 'w4']]);
  const out = conv(g, sum!, 8, 2, 1, 1);
  g.node('Identity', [out], [['batch', 2, 'h4', 'w4']], { outputs: ['out'] });
  g.output('out');
  return stripped(g);
}
