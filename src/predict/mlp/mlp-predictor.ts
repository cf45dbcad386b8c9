/**
 * The MLP predictor at serving time: a forward pass of the network trained by
 * `mlp/train-mlp.ts`. The weights are the trained values rounded to float32; sums are float64
 * multiply-adds, so the output matches TensorFlow.js' `model.predict` on the same weights
 * (float32 throughout) to float32 rounding (test/predict-mlp.test.ts checks ≤ 1e-5 ms).
 *
 * Up to 4 groups are scored together through a WebAssembly SIMD dense layer
 * (`simd-kernel.ts`; weights and activations in its memory); where WebAssembly SIMD is
 * missing, a plain JS loop over Float32Array weights computes the same sums in the same order.
 */
import { EncodedPredictor, LANES, type FeatureScaling, type TargetTransform } from '../encoded.ts';
import type { FeatureEncoder } from '../features.ts';
import { createDenseKernel, type DenseKernel } from './simd-kernel.ts';

/** Activations the forward pass implements (as tfjs names them). */
export type Activation = 'relu' | 'linear';

/**
 * One dense layer as tfjs stores it: `kernel` row-major `[inputs, units]`
 * (kernel[i·units + j] connects input i to unit j), `bias` `[units]`.
 */
export interface DenseLayer {
  readonly inputs: number;
  readonly units: number;
  readonly activation: Activation;
  readonly kernel: readonly number[];
  readonly bias: readonly number[];
}

/** Layer in serving form: kernel transposed to `[units, inputs]` for contiguous dot products. */
interface PackedLayer {
  readonly inputs: number;
  readonly units: number;
  readonly relu: boolean;
  readonly weights: Float32Array;
  readonly bias: Float32Array;
  readonly out: Float64Array;
}

/**
 * Check the layer shapes chain from `inputWidth` to one output.
 * @throws RangeError naming the layer and the mismatch.
 */
export function checkLayers(layers: readonly DenseLayer[], inputWidth: number): void {
  if (layers.length === 0) throw new RangeError('an MLP needs at least one layer');
  let width = inputWidth;
  layers.forEach((l, i) => {
    if (l.inputs !== width) throw new RangeError(`layer ${i} takes ${l.inputs} inputs, but ${width} come in`);
    if (l.kernel.length !== l.inputs * l.units) throw new RangeError(`layer ${i} kernel has ${l.kernel.length} values, expected ${l.inputs}×${l.units}`);
    if (l.bias.length !== l.units) throw new RangeError(`layer ${i} bias has ${l.bias.length} values, expected ${l.units}`);
    width = l.units;
  });
  if (width !== 1) throw new RangeError(`the last layer must have 1 unit, has ${width}`);
}

/** Byte addresses of a layer's arrays in the kernel's memory. */
interface KernelLayer {
  readonly inputs: number;
  readonly units: number;
  readonly relu: number;
  readonly w: number;
  readonly b: number;
}

/** The network in the SIMD kernel's memory (float64 throughout). */
interface KernelNet {
  readonly kernel: DenseKernel;
  readonly layers: readonly KernelLayer[];
  /** Byte address of the input `[width][LANES]` and of the two activation buffers. */
  readonly input: number;
  readonly bufA: number;
  readonly bufB: number;
  /** float64 view of the memory (after any growth). */
  readonly heap: Float64Array;
}

function kernelNet(kernel: DenseKernel, layers: readonly DenseLayer[], width: number): KernelNet {
  const maxUnits = Math.max(width, ...layers.map((l) => l.units));
  let doubles = 0;
  const placed = layers.map((l, i) => {
    const w = doubles;
    doubles += l.inputs * l.units;
    const b = doubles;
    doubles += l.units;
    return { inputs: l.inputs, units: l.units, relu: i < layers.length - 1 && l.activation === 'relu' ? 1 : 0, w: w * 8, b: b * 8 };
  });
  const input = doubles * 8;
  doubles += LANES * maxUnits;
  const bufA = doubles * 8;
  doubles += LANES * maxUnits;
  const bufB = doubles * 8;
  doubles += LANES * maxUnits;
  const pages = Math.ceil((doubles * 8) / 65536);
  const have = kernel.memory.buffer.byteLength / 65536;
  if (pages > have) kernel.memory.grow(pages - have);
  const heap = new Float64Array(kernel.memory.buffer);
  layers.forEach((l, i) => {
    heap.set(l.kernel, placed[i]!.w / 8);
    heap.set(l.bias, placed[i]!.b / 8);
  });
  return { kernel, layers: placed, input, bufA, bufB, heap };
}

/** A trained MLP behind the Predictor contract. Create with `file.ts` `loadPredictor` or from training. */
export class MlpPredictor extends EncodedPredictor {
  readonly kind = 'mlp';
  private readonly layers: readonly PackedLayer[];
  private readonly net: KernelNet | undefined;

  /**
   * @param options.simd use the WebAssembly SIMD kernel when available [true]; false forces the
   *   plain JS loop (tests compare the two).
   * @throws RangeError when the layers do not chain from the encoder's width to 1 output.
   */
  constructor(encoder: FeatureEncoder, scaling: FeatureScaling, target: TargetTransform, layers: readonly DenseLayer[], deviceId: string, options: { simd?: boolean } = {}) {
    super(encoder, scaling, target, deviceId);
    checkLayers(layers, encoder.width);
    this.layers = layers.map((l) => {
      const weights = new Float32Array(l.inputs * l.units);
      for (let i = 0; i < l.inputs; i++) for (let j = 0; j < l.units; j++) weights[j * l.inputs + i] = l.kernel[i * l.units + j]!;
      return { inputs: l.inputs, units: l.units, relu: l.activation === 'relu', weights, bias: Float32Array.from(l.bias), out: new Float64Array(l.units) };
    });
    const kernel = options.simd === false ? undefined : createDenseKernel();
    this.net = kernel === undefined ? undefined : kernelNet(kernel, layers, encoder.width);
  }

  /** Whether scoring runs on the WebAssembly SIMD kernel (else plain JS). */
  get simd(): boolean {
    return this.net !== undefined;
  }

  protected scoreRows(count: number): void {
    const net = this.net;
    if (net === undefined) {
      for (let k = 0; k < count; k++) this.raw[k] = this.scoreJs(k * this.width);
      return;
    }
    const { heap, kernel, layers } = net;
    const { rows, raw, width } = this;
    // rows [k][j] → input [j][k]; lanes beyond count get zeros
    const x = net.input / 8;
    for (let k = 0; k < LANES; k++) {
      const base = k * width;
      if (k < count) for (let j = 0; j < width; j++) heap[x + j * LANES + k] = rows[base + j]!;
      else for (let j = 0; j < width; j++) heap[x + j * LANES + k] = 0;
    }
    let input = net.input;
    let output = net.bufA;
    for (const l of layers) {
      kernel.dense(input, l.w, l.b, output, l.inputs, l.units, l.relu);
      input = output;
      output = output === net.bufA ? net.bufB : net.bufA;
    }
    const y = input / 8;
    for (let k = 0; k < count; k++) raw[k] = heap[y + k]!;
  }

  private scoreJs(offset: number): number {
    let input: Float64Array = this.rows;
    let base0 = offset;
    for (const layer of this.layers) {
      const { inputs, units, weights, bias, out, relu } = layer;
      for (let j = 0; j < units; j++) {
        let sum = bias[j]!;
        const base = j * inputs;
        for (let i = 0; i < inputs; i++) sum += input[base0 + i]! * weights[base + i]!;
        out[j] = relu && sum < 0 ? 0 : sum;
      }
      input = out;
      base0 = 0;
    }
    return input[0]!;
  }
}
