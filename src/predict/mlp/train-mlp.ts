/**
 * Training of the latency MLP: mini-batch Adam on plain typed arrays, no tensor library. The
 * network is the paper's, dense layers of 32, 32, 32 units with ReLU, then one linear unit
 * (Abacus §5.2: "3 hidden layers with 32 neurons each"); `hidden` changes it. At this size and
 * with batches of 64 rows a general tensor library spends most of its time on per-operation
 * bookkeeping: with TensorFlow.js on its wasm backend, which trained it before, `abacus train`
 * on a 3,000-group sim profile at 30 epochs took 4.2-6.6 s of CPU against 2.4-2.8 s with these
 * loops (start-up included), at about the same held-out MAPE (below).
 *
 * Per batch of B rows: forward `z_l = a_{l-1} W_l + b_l`, `a_l = relu(z_l)` (the last layer
 * linear); loss the batch mean of `mae` |e|, `mse` e² or `huber` (δ = 1) over e = prediction −
 * target; backward by the chain rule (d|e|/de = sign(e), 0 at 0; relu'(z) = 1 for z > 0, else
 * 0); then one Adam step per parameter (Kingma & Ba 2015, Algorithm 1, β₁ = 0.9, β₂ = 0.999,
 * ε = 1e-7 added to the bias-corrected √v̂, TensorFlow's defaults). Weights, moments and sums are
 * float64 while training; the layers returned hold them rounded to float32, as the file and serving
 * (`MlpPredictor`) keep them.
 *
 * Training: on the standardized target (`encoded.ts` `TargetTransform`; `predict/train.ts` uses
 * ln latency). Loss: mean *absolute* error by default — on ln latency, |ln p − ln y| ≈ |p − y| / y,
 * so it is MAPE itself to first order, and it is robust to the outliers a busy machine leaves in
 * a profile (measured with the tfjs trainer on 12k sim:a100 pairs, 3×32, 60 epochs, seeds 1–3:
 * held-out MAPE 2.08–2.11 % with `mae`, 2.29–2.55 % with `mse`, 2.44 % with `huber`; on a noisy
 * ort:cpu profile 21 % vs 23 %). Mini-batches in an order drawn from our seeded `Rng` each epoch;
 * glorot-uniform kernels (Glorot & Bengio 2010: U(±√(6 / (inputs + units)))) from the same
 * generator, zero biases; the learning rate decays by cosine from `learningRate` to 5 % of it over
 * the epochs, which settles the last epochs' noise. Same seed and data → the same weights, on any
 * machine. Against the tfjs trainer, four 3,000-group profiles of `abacus reproduce all --quick`
 * (sim:a100 ×2, sim:h200:graph, sim:a100 MIG 1g; 30 epochs, 10 % held out): held-out MAPE 2.07 /
 * 5.04 / 7.49 / 2.48 % against 1.77 / 5.23 / 9.21 / 3.31 % (`abacus train`, 2-core machine).
 */
import { Rng } from '../../rng.ts';
import type { DenseLayer } from './mlp-predictor.ts';

/** Hyper-parameters of `trainMlp`; defaults in `DEFAULT_MLP_OPTIONS`. */
export interface MlpTrainOptions {
  /** Units of each hidden ReLU layer. */
  readonly hidden: readonly number[];
  readonly epochs: number;
  readonly batchSize: number;
  /** Initial Adam learning rate. */
  readonly learningRate: number;
  readonly seed: number;
  /** Loss on the standardized target: `mse`, `mae` or `huber` (δ = 1 standardized unit). */
  readonly loss: MlpLoss;
  /** Called after each epoch with the mean training loss of that epoch (over its batches as they ran). */
  readonly onEpoch?: (epoch: number, epochs: number, loss: number) => void;
}

export type MlpLoss = 'mse' | 'mae' | 'huber';

export const DEFAULT_MLP_OPTIONS: Omit<MlpTrainOptions, 'onEpoch'> = { hidden: [32, 32, 32], epochs: 60, batchSize: 64, learningRate: 3e-3, seed: 1, loss: 'mae' };

function checkOptions(o: MlpTrainOptions): void {
  if (!o.hidden.every((u) => Number.isInteger(u) && u >= 1)) throw new RangeError(`hidden layer sizes must be positive integers, got [${o.hidden.join(', ')}]`);
  if (!Number.isInteger(o.epochs) || o.epochs < 1) throw new RangeError(`epochs must be an integer ≥ 1, got ${o.epochs}`);
  if (!Number.isInteger(o.batchSize) || o.batchSize < 1) throw new RangeError(`batchSize must be an integer ≥ 1, got ${o.batchSize}`);
  if (!(o.learningRate > 0 && Number.isFinite(o.learningRate))) throw new RangeError(`learningRate must be a positive number, got ${o.learningRate}`);
  if (!Number.isFinite(o.seed)) throw new RangeError(`seed must be a finite number, got ${o.seed}`);
}

/**
 * Train an MLP on `n` rows of standardized features `x` (row-major `[n, width]`) and targets
 * `y` (`[n]`): the rows in a new seeded order each epoch, in batches of `batchSize` (the last
 * one shorter). Returns the layers in the file's form (kernels row-major `[inputs, units]`).
 * Returns to the event loop every few batches.
 * @throws RangeError for bad options, n = 0, or `x` not holding `n × width` values.
 */
export async function trainMlp(x: Float32Array, y: Float32Array, width: number, options: MlpTrainOptions): Promise<DenseLayer[]> {
  checkOptions(options);
  const n = y.length;
  if (n === 0) throw new RangeError('cannot train on 0 samples');
  if (x.length !== n * width) throw new RangeError(`x has ${x.length} values, expected ${n}×${width}`);
  return await trainAdam(x, y, width, options);
}

/** Adam's decay rates and ε (TensorFlow's defaults). */
const BETA1 = 0.9;
const BETA2 = 0.999;
const EPSILON = 1e-7;
/** Batches between returns to the event loop: about 15 ms of work at 3×32 units, 64 rows of 47 features (14 µs a row, measured on the 2-core machine). */
const YIELD_EVERY_BATCHES = 16;

/** One layer's parameters, gradients and Adam moments; kernel row-major `[inputs, units]`. */
interface Layer {
  readonly inputs: number;
  readonly units: number;
  readonly relu: boolean;
  readonly w: Float64Array;
  readonly b: Float64Array;
  readonly gw: Float64Array;
  readonly gb: Float64Array;
  readonly mw: Float64Array;
  readonly vw: Float64Array;
  readonly mb: Float64Array;
  readonly vb: Float64Array;
  /** Pre-activations and activations of the current batch, `[batch, units]`. */
  readonly z: Float64Array;
  readonly a: Float64Array;
  /** dLoss/dz of the current batch, `[batch, units]`. */
  readonly dz: Float64Array;
}

function makeLayer(inputs: number, units: number, relu: boolean, batch: number, rng: Rng): Layer {
  const limit = Math.sqrt(6 / (inputs + units));
  const w = new Float64Array(inputs * units);
  for (let i = 0; i < w.length; i++) w[i] = (2 * rng.nextUnit() - 1) * limit;
  const size = inputs * units;
  return {
    inputs,
    units,
    relu,
    w,
    b: new Float64Array(units),
    gw: new Float64Array(size),
    gb: new Float64Array(units),
    mw: new Float64Array(size),
    vw: new Float64Array(size),
    mb: new Float64Array(units),
    vb: new Float64Array(units),
    z: new Float64Array(batch * units),
    a: new Float64Array(batch * units),
    dz: new Float64Array(batch * units),
  };
}

/** `out[r, j] = bias[j] + Σ_i inp[r, i] · w[i, j]` for r < rows. */
function dense(inp: Float64Array, rows: number, layer: Layer): void {
  const { inputs, units, w, b, z } = layer;
  for (let r = 0; r < rows; r++) {
    const zo = r * units;
    for (let j = 0; j < units; j++) z[zo + j] = b[j]!;
    const io = r * inputs;
    for (let i = 0; i < inputs; i++) {
      const v = inp[io + i]!;
      if (v === 0) continue;
      const wo = i * units;
      for (let j = 0; j < units; j++) z[zo + j] = z[zo + j]! + v * w[wo + j]!;
    }
  }
}

/** One Adam step on `p` with gradient `g` and moments `m`, `v`; `c1`, `c2` the bias corrections 1 − βᵗ. */
function adam(p: Float64Array, g: Float64Array, m: Float64Array, v: Float64Array, lr: number, c1: number, c2: number): void {
  for (let i = 0; i < p.length; i++) {
    const gi = g[i]!;
    const mi = (m[i] = BETA1 * m[i]! + (1 - BETA1) * gi);
    const vi = (v[i] = BETA2 * v[i]! + (1 - BETA2) * gi * gi);
    p[i] = p[i]! - (lr * (mi / c1)) / (Math.sqrt(vi / c2) + EPSILON);
  }
}

async function trainAdam(x: Float32Array, y: Float32Array, width: number, o: MlpTrainOptions): Promise<DenseLayer[]> {
  const n = y.length;
  const rng = new Rng(o.seed);
  const batch = Math.min(o.batchSize, n);
  const sizes = [...o.hidden, 1];
  const layers: Layer[] = [];
  sizes.forEach((units, l) => layers.push(makeLayer(l === 0 ? width : sizes[l - 1]!, units, l < o.hidden.length, batch, rng)));
  const order = Int32Array.from({ length: n }, (_, i) => i);
  const xb = new Float64Array(batch * width);
  const yb = new Float64Array(batch);
  let step = 0;
  for (let epoch = 0; epoch < o.epochs; epoch++) {
    // Fisher–Yates with the seeded generator
    for (let i = n - 1; i > 0; i--) {
      const j = rng.nextUint32() % (i + 1);
      const t = order[i]!;
      order[i] = order[j]!;
      order[j] = t;
    }
    // cosine decay from learningRate to 5 % of it (file comment)
    const progress = o.epochs > 1 ? epoch / (o.epochs - 1) : 1;
    const lr = o.learningRate * (0.05 + 0.95 * 0.5 * (1 + Math.cos(Math.PI * progress)));
    let lossSum = 0;
    for (let start = 0; start < n; start += batch) {
      const rows = Math.min(batch, n - start);
      for (let r = 0; r < rows; r++) {
        const src = order[start + r]!;
        for (let c = 0; c < width; c++) xb[r * width + c] = x[src * width + c]!;
        yb[r] = y[src]!;
      }
      // forward
      let inp: Float64Array = xb;
      for (const layer of layers) {
        dense(inp, rows, layer);
        const { z, a } = layer;
        const size = rows * layer.units;
        if (layer.relu) for (let i = 0; i < size; i++) a[i] = z[i]! > 0 ? z[i]! : 0;
        else for (let i = 0; i < size; i++) a[i] = z[i]!;
        inp = a;
      }
      // loss and dLoss/dprediction (the last layer has one unit)
      const last = layers[layers.length - 1]!;
      for (let r = 0; r < rows; r++) {
        const e = last.a[r]! - yb[r]!;
        const abs = Math.abs(e);
        if (o.loss === 'mse') {
          lossSum += e * e;
          last.dz[r] = (2 * e) / rows;
        } else if (o.loss === 'mae') {
          lossSum += abs;
          last.dz[r] = Math.sign(e) / rows;
        } else {
          lossSum += abs <= 1 ? 0.5 * e * e : abs - 0.5;
          last.dz[r] = (abs <= 1 ? e : Math.sign(e)) / rows;
        }
      }
      // backward: dLoss/dW and dLoss/db of each layer, and dLoss/dz of the layer before (where
      // relu(z) = 0, its input here is 0 too: that row and input add nothing and pass nothing back)
      for (let l = layers.length - 1; l >= 0; l--) {
        const layer = layers[l]!;
        const { inputs, units, w, gw, gb, dz } = layer;
        const prev = l === 0 ? undefined : layers[l - 1]!;
        const prevA = prev === undefined ? xb : prev.a;
        gw.fill(0);
        gb.fill(0);
        for (let r = 0; r < rows; r++) {
          const dzo = r * units;
          for (let j = 0; j < units; j++) gb[j] = gb[j]! + dz[dzo + j]!;
          const io = r * inputs;
          for (let i = 0; i < inputs; i++) {
            const v = prevA[io + i]!;
            if (v === 0) {
              if (prev !== undefined) prev.dz[io + i] = 0;
              continue;
            }
            const wo = i * units;
            if (prev === undefined) {
              for (let j = 0; j < units; j++) gw[wo + j] = gw[wo + j]! + v * dz[dzo + j]!;
            } else {
              let s = 0;
              for (let j = 0; j < units; j++) {
                const d = dz[dzo + j]!;
                gw[wo + j] = gw[wo + j]! + v * d;
                s += w[wo + j]! * d;
              }
              prev.dz[io + i] = s;
            }
          }
        }
      }
      step++;
      // back to the event loop now and then (a server's health checks, a SIGTERM during a first start)
      if (step % YIELD_EVERY_BATCHES === 0) await new Promise<void>((resolve) => setImmediate(resolve));
      const c1 = 1 - BETA1 ** step;
      const c2 = 1 - BETA2 ** step;
      for (const layer of layers) {
        adam(layer.w, layer.gw, layer.mw, layer.vw, lr, c1, c2);
        adam(layer.b, layer.gb, layer.mb, layer.vb, lr, c1, c2);
      }
    }
    o.onEpoch?.(epoch + 1, o.epochs, lossSum / n);
  }
  // float32 values, as the file and serving hold them (`MlpPredictor`, its SIMD and JS paths alike)
  return layers.map((l) => ({ inputs: l.inputs, units: l.units, activation: l.relu ? 'relu' : 'linear', kernel: Array.from(Float32Array.from(l.w)), bias: Array.from(Float32Array.from(l.b)) }));
}
