/**
 * VGG-16 / VGG-19 without batch norm, exactly as torchvision `torchvision/models/vgg.py`
 * (configs "D" and "E" of Simonyan & Zisserman 2015, Table 1):
 *
 *   features    3×3 convs (pad 1, with bias) + ReLU, 2×2/2 max-pools
 *   avgpool     AdaptiveAvgPool2d((7, 7))
 *   classifier  Linear(512·7·7 → 4096), ReLU, Dropout, Linear(4096 → 4096), ReLU, Dropout,
 *               Linear(4096 → numClasses)   (Dropout is the identity at inference: omitted)
 *
 * Parameters at 224², numClasses 1000: vgg16 138,357,544; vgg19 143,667,240 (torchvision).
 *
 * Operators (Abacus paper: 19 / 22): one per conv layer (conv + ReLU, named `conv{stage}_{i}`),
 * one per max-pool (`pool{stage}`), and `classifier` (avgpool, flatten, three linears).
 *
 * Resolutions other than 224 (final feature map s×s with s = floor(R/32)):
 *   - s = 7 (R = 224…255): the adaptive pool is the identity and is not emitted — exact torchvision;
 *   - s > 7: AdaptiveAvgPool2d((7, 7)) exactly as PyTorch defines it (bin i covers
 *     [floor(i·s/7), ceil((i+1)·s/7))): an AveragePool with kernel = stride = s/7 when 7 divides
 *     s, else two MatMuls with constant averaging matrices (the pool is separable);
 *   - s < 7 (small test variants): no pool; the classifier's first layer takes the real
 *     C·s·s features instead of the 49-fold replicated 7×7 map torchvision would feed it.
 *     This deliberately deviates from torchvision to keep small variants small.
 * The width multiplier scales the conv channels and the 4096-wide hidden layers.
 */
import { GraphBuilder } from '../onnx/builder.ts';
import { Layers, scaleChannels } from './layers.ts';
import type { BuiltGraph } from '../onnx/builder.ts';

export type VggDepth = 16 | 19;

/** torchvision `cfgs`: "D" (vgg16) and "E" (vgg19); 'M' = max-pool. */
export const VGG_CONFIGS: Readonly<Record<VggDepth, readonly (number | 'M')[]>> = {
  16: [64, 64, 'M', 128, 128, 'M', 256, 256, 256, 'M', 512, 512, 512, 'M', 512, 512, 512, 'M'],
  19: [64, 64, 'M', 128, 128, 'M', 256, 256, 256, 256, 'M', 512, 512, 512, 512, 'M', 512, 512, 512, 512, 'M'],
};

/** Side of AdaptiveAvgPool2d's output in torchvision's VGG. */
const POOL_OUT = 7;

export interface VggOptions {
  readonly resolution: number;
  readonly widthMultiplier: number;
  readonly numClasses: number;
  readonly seed: number;
}

/** Operators of a VGG: one per config entry + classifier (16 → 19, 19 → 22). */
export function vggOperatorCount(depth: VggDepth): number {
  return VGG_CONFIGS[depth].length + 1;
}

/**
 * PyTorch AdaptiveAvgPool 1-D as a [out, size] matrix: row i averages
 * [floor(i·size/out), ceil((i+1)·size/out)) (aten/src/ATen/native/AdaptiveAveragePooling.cpp).
 */
export function adaptivePoolMatrix(size: number, out: number): number[] {
  const m = new Array<number>(out * size).fill(0);
  for (let i = 0; i < out; i++) {
    const start = Math.floor((i * size) / out);
    const end = Math.ceil(((i + 1) * size) / out);
    for (let j = start; j < end; j++) m[i * size + j] = 1 / (end - start);
  }
  return m;
}

/**
 * Build a VGG. Input `input` float32 [batch, 3, R, R]; output `logits` float32 [batch, numClasses].
 * @throws RangeError when R < 32 (the fifth pool would produce an empty map).
 */
export function buildVgg(depth: VggDepth, o: VggOptions, withWeights: boolean): BuiltGraph {
  const g = new GraphBuilder({ name: `vgg${depth}`, seed: o.seed, withWeights });
  const L = new Layers(g);
  const ch = (c: number): number => scaleChannels(c, o.widthMultiplier);

  let x = g.input('input', 'float32', ['batch', 3, o.resolution, o.resolution]);
  let stage = 1;
  let conv = 1;
  VGG_CONFIGS[depth].forEach((v, index) => {
    if (v === 'M') {
      L.beginOperator(`pool${stage}`);
      x = L.pool('MaxPool', x, `features.${index}`, { kernel: [2, 2], stride: [2, 2] });
      stage += 1;
      conv = 1;
    } else {
      L.beginOperator(`conv${stage}_${conv}`);
      // torchvision's `features` index: conv at `index`, its ReLU at `index + 1`.
      const moduleIndex = featureIndex(VGG_CONFIGS[depth], index);
      x = L.conv(x, `features.${moduleIndex}`, ch(v), { kernel: [3, 3], pad: [1, 1] }, { bias: true });
      x = L.relu(x, `features.${moduleIndex + 1}`);
      conv += 1;
    }
  });

  L.beginOperator('classifier');
  x = adaptiveAvgPool7(L, x);
  x = L.flatten(x, 'flatten');
  x = L.linear(x, 'classifier.0', ch(4096), { he: true });
  x = L.relu(x, 'classifier.1');
  x = L.linear(x, 'classifier.3', ch(4096), { he: true });
  x = L.relu(x, 'classifier.4');
  x = L.linear(x, 'classifier.6', o.numClasses, { he: false, output: 'logits' });
  g.output(x);
  return g.build();
}

/** Index in torchvision's `features` Sequential of config entry `i` (conv = 2 modules, pool = 1). */
function featureIndex(cfg: readonly (number | 'M')[], i: number): number {
  let idx = 0;
  for (let k = 0; k < i; k++) idx += cfg[k] === 'M' ? 1 : 2;
  return idx;
}

/** AdaptiveAvgPool2d((7, 7)) as documented in the module header (identity / skipped when s ≤ 7). */
function adaptiveAvgPool7(L: Layers, x: string): string {
  const s = L.shape(x);
  const size = s[2];
  if (typeof size !== 'number' || size <= POOL_OUT) return x;
  if (size % POOL_OUT === 0) {
    const k = size / POOL_OUT;
    return L.pool('AveragePool', x, 'avgpool', { kernel: [k, k], stride: [k, k] });
  }
  const p = adaptivePoolMatrix(size, POOL_OUT);
  const pt = new Array<number>(p.length);
  for (let i = 0; i < POOL_OUT; i++) for (let j = 0; j < size; j++) pt[j * POOL_OUT + i] = p[i * size + j]!;
  const cols = L.matmul(x, L.constant(pt, [size, POOL_OUT]), 'avgpool.w'); // [b, C, s, 7]
  return L.matmul(L.constant(p, [POOL_OUT, size]), cols, 'avgpool.h'); // [b, C, 7, 7]
}
