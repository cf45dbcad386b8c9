/**
 * Inception v3 exactly as torchvision `torchvision/models/inception.py` (`Inception3`,
 * Szegedy et al. 2016) with `aux_logits=False` and `transform_input=False` (the defaults
 * without pretrained weights): the auxiliary classifier is not built.
 *
 * BasicConv2d = Conv2d(bias=False) + BatchNorm2d(eps=0.001) + ReLU. Branch pools in
 * InceptionA/C/E are `avg_pool2d(3, stride 1, pad 1)` (count_include_pad=True); the reduction
 * blocks B/D use `max_pool2d(3, stride 2)`. Head: AdaptiveAvgPool2d(1), Dropout (identity at
 * inference, omitted), fc 2048 → numClasses.
 *
 * Parameters at numClasses 1000 without AuxLogits: 23,834,568 (torchvision's 27,161,264 minus
 * the 3,326,696 of AuxLogits).
 *
 * Operators (Abacus paper: 14). torchvision's forward has 5 stem convs, 2 max-pools, 11 Mixed
 * blocks and a head; we group them as
 *   0 `stem.a`   Conv2d_1a_3x3, Conv2d_2a_3x3, Conv2d_2b_3x3, maxpool1   (299 → 73)
 *   1 `stem.b`   Conv2d_3b_1x1, Conv2d_4a_3x3, maxpool2                  (73 → 35)
 *   2–12         Mixed_5b, 5c, 5d, 6a, 6b, 6c, 6d, 6e, 7a, 7b, 7c (one per Inception block)
 *   13 `head`    avgpool, flatten, fc
 * i.e. one operator per Inception block (the natural cut points: a single tensor crosses each
 * boundary) and the stem split at its first max-pool, where its cost divides roughly in half.
 *
 * Minimum resolution 75 (as torchvision warns): Mixed_7a then produces a 1×1 map.
 */
import { GraphBuilder } from '../onnx/builder.ts';
import { Layers, scaleChannels } from './layers.ts';
import type { BuiltGraph } from '../onnx/builder.ts';

/** Operators of Inception v3 (see module docs). */
export const INCEPTION_OPERATORS = 14;

const BN_EPS = 0.001;

export interface InceptionOptions {
  readonly resolution: number;
  readonly widthMultiplier: number;
  readonly numClasses: number;
  readonly seed: number;
}

type Pair = readonly [number, number];

/** Helper holding the layer context and the width multiplier. */
class Inception {
  constructor(
    readonly L: Layers,
    private readonly m: number,
  ) {}

  ch(c: number): number {
    return scaleChannels(c, this.m);
  }

  /** torchvision `BasicConv2d(in, out, kernel, stride, padding)`. */
  basic(x: string, name: string, out: number, kernel: Pair, stride: Pair = [1, 1], pad: Pair = [0, 0]): string {
    let y = this.L.conv(x, `${name}.conv`, this.ch(out), { kernel, stride, pad });
    y = this.L.batchNorm(y, `${name}.bn`, { eps: BN_EPS });
    return this.L.relu(y, `${name}.relu`);
  }

  avgPool3(x: string, name: string): string {
    return this.L.pool('AveragePool', x, name, { kernel: [3, 3], stride: [1, 1], pad: [1, 1] });
  }

  maxPool3s2(x: string, name: string): string {
    return this.L.pool('MaxPool', x, name, { kernel: [3, 3], stride: [2, 2] });
  }

  /** InceptionA(in, pool_features): 64 + 64 + 96 + pool_features channels. */
  a(x: string, n: string, poolFeatures: number): string {
    const b1 = this.basic(x, `${n}.branch1x1`, 64, [1, 1]);
    let b5 = this.basic(x, `${n}.branch5x5_1`, 48, [1, 1]);
    b5 = this.basic(b5, `${n}.branch5x5_2`, 64, [5, 5], [1, 1], [2, 2]);
    let b3 = this.basic(x, `${n}.branch3x3dbl_1`, 64, [1, 1]);
    b3 = this.basic(b3, `${n}.branch3x3dbl_2`, 96, [3, 3], [1, 1], [1, 1]);
    b3 = this.basic(b3, `${n}.branch3x3dbl_3`, 96, [3, 3], [1, 1], [1, 1]);
    const bp = this.basic(this.avgPool3(x, `${n}.avg_pool`), `${n}.branch_pool`, poolFeatures, [1, 1]);
    return this.L.concat([b1, b5, b3, bp], 1, `${n}.cat`);
  }

  /** InceptionB(in) (grid reduction 35 → 17): 384 + 96 + in channels. */
  b(x: string, n: string): string {
    const b3 = this.basic(x, `${n}.branch3x3`, 384, [3, 3], [2, 2]);
    let bd = this.basic(x, `${n}.branch3x3dbl_1`, 64, [1, 1]);
    bd = this.basic(bd, `${n}.branch3x3dbl_2`, 96, [3, 3], [1, 1], [1, 1]);
    bd = this.basic(bd, `${n}.branch3x3dbl_3`, 96, [3, 3], [2, 2]);
    const bp = this.maxPool3s2(x, `${n}.max_pool`);
    return this.L.concat([b3, bd, bp], 1, `${n}.cat`);
  }

  /** InceptionC(in, channels_7x7): 4 × 192 channels. */
  c(x: string, n: string, c7: number): string {
    const b1 = this.basic(x, `${n}.branch1x1`, 192, [1, 1]);
    let b7 = this.basic(x, `${n}.branch7x7_1`, c7, [1, 1]);
    b7 = this.basic(b7, `${n}.branch7x7_2`, c7, [1, 7], [1, 1], [0, 3]);
    b7 = this.basic(b7, `${n}.branch7x7_3`, 192, [7, 1], [1, 1], [3, 0]);
    let bd = this.basic(x, `${n}.branch7x7dbl_1`, c7, [1, 1]);
    bd = this.basic(bd, `${n}.branch7x7dbl_2`, c7, [7, 1], [1, 1], [3, 0]);
    bd = this.basic(bd, `${n}.branch7x7dbl_3`, c7, [1, 7], [1, 1], [0, 3]);
    bd = this.basic(bd, `${n}.branch7x7dbl_4`, c7, [7, 1], [1, 1], [3, 0]);
    bd = this.basic(bd, `${n}.branch7x7dbl_5`, 192, [1, 7], [1, 1], [0, 3]);
    const bp = this.basic(this.avgPool3(x, `${n}.avg_pool`), `${n}.branch_pool`, 192, [1, 1]);
    return this.L.concat([b1, b7, bd, bp], 1, `${n}.cat`);
  }

  /** InceptionD(in) (grid reduction 17 → 8): 320 + 192 + in channels. */
  d(x: string, n: string): string {
    let b3 = this.basic(x, `${n}.branch3x3_1`, 192, [1, 1]);
    b3 = this.basic(b3, `${n}.branch3x3_2`, 320, [3, 3], [2, 2]);
    let b7 = this.basic(x, `${n}.branch7x7x3_1`, 192, [1, 1]);
    b7 = this.basic(b7, `${n}.branch7x7x3_2`, 192, [1, 7], [1, 1], [0, 3]);
    b7 = this.basic(b7, `${n}.branch7x7x3_3`, 192, [7, 1], [1, 1], [3, 0]);
    b7 = this.basic(b7, `${n}.branch7x7x3_4`, 192, [3, 3], [2, 2]);
    const bp = this.maxPool3s2(x, `${n}.max_pool`);
    return this.L.concat([b3, b7, bp], 1, `${n}.cat`);
  }

  /** InceptionE(in): 320 + 768 + 768 + 192 = 2048 channels. */
  e(x: string, n: string): string {
    const b1 = this.basic(x, `${n}.branch1x1`, 320, [1, 1]);
    const b3 = this.basic(x, `${n}.branch3x3_1`, 384, [1, 1]);
    const b3a = this.basic(b3, `${n}.branch3x3_2a`, 384, [1, 3], [1, 1], [0, 1]);
    const b3b = this.basic(b3, `${n}.branch3x3_2b`, 384, [3, 1], [1, 1], [1, 0]);
    const b3cat = this.L.concat([b3a, b3b], 1, `${n}.branch3x3.cat`);
    let bd = this.basic(x, `${n}.branch3x3dbl_1`, 448, [1, 1]);
    bd = this.basic(bd, `${n}.branch3x3dbl_2`, 384, [3, 3], [1, 1], [1, 1]);
    const bda = this.basic(bd, `${n}.branch3x3dbl_3a`, 384, [1, 3], [1, 1], [0, 1]);
    const bdb = this.basic(bd, `${n}.branch3x3dbl_3b`, 384, [3, 1], [1, 1], [1, 0]);
    const bdcat = this.L.concat([bda, bdb], 1, `${n}.branch3x3dbl.cat`);
    const bp = this.basic(this.avgPool3(x, `${n}.avg_pool`), `${n}.branch_pool`, 192, [1, 1]);
    return this.L.concat([b1, b3cat, bdcat, bp], 1, `${n}.cat`);
  }
}

/**
 * Build Inception v3. Input `input` float32 [batch, 3, R, R] (R ≥ 75, default 299); output
 * `logits` float32 [batch, numClasses].
 * @throws RangeError when R < 75 (a feature map would be empty).
 */
export function buildInceptionV3(o: InceptionOptions, withWeights: boolean): BuiltGraph {
  const g = new GraphBuilder({ name: 'inception_v3', seed: o.seed, withWeights });
  const L = new Layers(g);
  const net = new Inception(L, o.widthMultiplier);

  let x = g.input('input', 'float32', ['batch', 3, o.resolution, o.resolution]);

  L.beginOperator('stem.a');
  x = net.basic(x, 'Conv2d_1a_3x3', 32, [3, 3], [2, 2]);
  x = net.basic(x, 'Conv2d_2a_3x3', 32, [3, 3]);
  x = net.basic(x, 'Conv2d_2b_3x3', 64, [3, 3], [1, 1], [1, 1]);
  x = net.maxPool3s2(x, 'maxpool1');

  L.beginOperator('stem.b');
  x = net.basic(x, 'Conv2d_3b_1x1', 80, [1, 1]);
  x = net.basic(x, 'Conv2d_4a_3x3', 192, [3, 3]);
  x = net.maxPool3s2(x, 'maxpool2');

  const blocks: readonly [string, (y: string, n: string) => string][] = [
    ['Mixed_5b', (y, n) => net.a(y, n, 32)],
    ['Mixed_5c', (y, n) => net.a(y, n, 64)],
    ['Mixed_5d', (y, n) => net.a(y, n, 64)],
    ['Mixed_6a', (y, n) => net.b(y, n)],
    ['Mixed_6b', (y, n) => net.c(y, n, 128)],
    ['Mixed_6c', (y, n) => net.c(y, n, 160)],
    ['Mixed_6d', (y, n) => net.c(y, n, 160)],
    ['Mixed_6e', (y, n) => net.c(y, n, 192)],
    ['Mixed_7a', (y, n) => net.d(y, n)],
    ['Mixed_7b', (y, n) => net.e(y, n)],
    ['Mixed_7c', (y, n) => net.e(y, n)],
  ];
  for (const [name, block] of blocks) {
    L.beginOperator(name);
    x = block(x, name);
  }

  L.classifierHead(x, o.numClasses);
  return g.build();
}
