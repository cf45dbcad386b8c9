/**
 * ResNet-50/101/152 exactly as torchvision `torchvision/models/resnet.py` (v1.5: in a
 * Bottleneck the stride sits on the 3×3 conv, not the first 1×1).
 *
 *   stem     conv1 7×7/2 (3→64, no bias), bn1, relu, maxpool 3×3/2 pad 1
 *   layer1…4 [3,4,6,3] / [3,4,23,3] / [3,8,36,3] Bottleneck blocks, planes 64,128,256,512,
 *            expansion 4; block 0 of layers 2–4 has stride 2; a downsample (1×1 conv + BN)
 *            wherever the shape changes
 *   head     AdaptiveAvgPool2d(1) (= GlobalAveragePool), flatten, fc 2048→numClasses
 *
 * BatchNorm (eps 1e-5) stays a separate node after each conv: weight/bias are parameters,
 * running_mean/var are non-trainable buffers. Parameters (torchvision `numel()` sum at
 * numClasses 1000): resnet50 25,557,032; resnet101 44,549,160; resnet152 60,192,808.
 *
 * Operators (Abacus paper: 18 / 35 / 52): `stem`, one per bottleneck block (`layer1.0` …),
 * `head`.
 *
 * Random weights: He-uniform convs, BN identity-like (gamma 1, beta 0, mean 0, var 1) except the
 * last BN of each residual branch, whose gamma is 1/sqrt(blocks) (a softened version of
 * torchvision's `zero_init_residual`), so the activation scale grows by a bounded factor over
 * all blocks instead of doubling per block and stays O(1) through 152 layers.
 */
import { GraphBuilder } from '../onnx/builder.ts';
import { Layers, scaleChannels } from './layers.ts';
import type { BuiltGraph } from '../onnx/builder.ts';

export type ResNetDepth = 50 | 101 | 152;

/** Bottleneck blocks per stage (He et al. 2016, Table 1; torchvision `resnet50/101/152`). */
export const RESNET_BLOCKS: Readonly<Record<ResNetDepth, readonly [number, number, number, number]>> = {
  50: [3, 4, 6, 3],
  101: [3, 4, 23, 3],
  152: [3, 8, 36, 3],
};

const BN_EPS = 1e-5;
const EXPANSION = 4;

export interface ResNetOptions {
  readonly resolution: number;
  readonly widthMultiplier: number;
  readonly numClasses: number;
  readonly seed: number;
}

/** Operators of a ResNet: stem + blocks + head. */
export function resnetOperatorCount(depth: ResNetDepth): number {
  return 2 + RESNET_BLOCKS[depth].reduce((a, b) => a + b, 0);
}

/**
 * Build a ResNet. Input `input` float32 [batch, 3, R, R]; output `logits` float32
 * [batch, numClasses].
 * @throws RangeError when the resolution leaves an empty feature map (use R ≥ 32).
 */
export function buildResNet(depth: ResNetDepth, o: ResNetOptions, withWeights: boolean): BuiltGraph {
  const g = new GraphBuilder({ name: `resnet${depth}`, seed: o.seed, withWeights });
  const L = new Layers(g);
  const ch = (c: number): number => scaleChannels(c, o.widthMultiplier);
  const blocks = RESNET_BLOCKS[depth];
  const residualGamma = 1 / Math.sqrt(blocks.reduce((a, b) => a + b, 0));

  let x = g.input('input', 'float32', ['batch', 3, o.resolution, o.resolution]);

  L.beginOperator('stem');
  x = L.conv(x, 'conv1', ch(64), { kernel: [7, 7], stride: [2, 2], pad: [3, 3] });
  x = L.batchNorm(x, 'bn1', { eps: BN_EPS });
  x = L.relu(x, 'relu');
  x = L.pool('MaxPool', x, 'maxpool', { kernel: [3, 3], stride: [2, 2], pad: [1, 1] });

  const planesOf = [64, 128, 256, 512] as const;
  blocks.forEach((count, stage) => {
    const planes = planesOf[stage]!;
    for (let i = 0; i < count; i++) {
      const name = `layer${stage + 1}.${i}`;
      L.beginOperator(name);
      const stride = stage > 0 && i === 0 ? 2 : 1;
      x = bottleneck(L, x, name, ch(planes), ch(planes * EXPANSION), stride, residualGamma);
    }
  });

  L.classifierHead(x, o.numClasses);
  return g.build();
}

/**
 * torchvision `Bottleneck` (v1.5): 1×1 → 3×3 (stride) → 1×1 (×4), BN after each, ReLU after
 * the first two and after the residual add; `downsample` = 1×1 conv (stride) + BN when the
 * stride or channel count changes.
 */
function bottleneck(L: Layers, x: string, name: string, width: number, outC: number, stride: number, residualGamma: number): string {
  const inShape = L.shape(x);
  let y = L.conv(x, `${name}.conv1`, width, { kernel: [1, 1] });
  y = L.batchNorm(y, `${name}.bn1`, { eps: BN_EPS });
  y = L.relu(y, `${name}.relu1`);
  y = L.conv(y, `${name}.conv2`, width, { kernel: [3, 3], stride: [stride, stride], pad: [1, 1] });
  y = L.batchNorm(y, `${name}.bn2`, { eps: BN_EPS });
  y = L.relu(y, `${name}.relu2`);
  y = L.conv(y, `${name}.conv3`, outC, { kernel: [1, 1] });
  y = L.batchNorm(y, `${name}.bn3`, { eps: BN_EPS, gamma: residualGamma });
  let identity = x;
  if (stride !== 1 || inShape[1] !== outC) {
    identity = L.conv(x, `${name}.downsample.0`, outC, { kernel: [1, 1], stride: [stride, stride] });
    identity = L.batchNorm(identity, `${name}.downsample.1`, { eps: BN_EPS });
  }
  const sum = L.binary('Add', y, identity, `${name}.add`);
  return L.relu(sum, `${name}.relu3`);
}
