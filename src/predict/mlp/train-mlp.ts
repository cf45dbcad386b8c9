/**
 * Training of the MLP with TensorFlow.js on its wasm backend (pure JS + wasm, installs and runs
 * offline; no native tfjs-node). tfjs is imported lazily here only, so serving (`MlpPredictor`)
 * and CLI start-up never load it.
 *
 * Network: the paper's, dense layers of 32, 32, 32 units with ReLU, then one linear unit
 * (Abacus §5.2: "3 hidden layers with 32 neurons each"); `hidden` changes it.
 *
 * Training: Adam on the standardized target (`encoded.ts` `TargetTransform`; `predict/train.ts`
 * uses ln latency). Loss: mean *absolute* error by default — on ln latency, |ln p − ln y| ≈
 * |p − y| / y, so it is MAPE itself to first order, and it is robust to the outliers a busy
 * machine leaves in a profile. Measured on /tmp/sim-a100-pairs.csv (12k sim:a100 pairs, 3×32,
 * 60 epochs, seeds 1–3): held-out MAPE 2.08–2.11% with `mae`, 2.29–2.55% with `mse`, 2.44% with
 * `huber`; on the noisy ort:cpu profile also slightly better (21% vs 23%). Mini-batches in an
 * order drawn from our seeded `Rng` each epoch (tfjs' own shuffle is unseeded), glorot-uniform
 * kernels seeded per layer, zero biases; the learning rate decays by cosine from
 * `learningRate` to 5% of it over the epochs, which settles the last epochs' noise. Same seed,
 * data and tfjs version → the same weights (the wasm kernels are deterministic on one machine).
 */
import type * as TfCore from '@tensorflow/tfjs-core';
import type * as TfLayers from '@tensorflow/tfjs-layers';
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
  /** Called after each epoch with the mean training loss of that epoch. */
  readonly onEpoch?: (epoch: number, epochs: number, loss: number) => void;
}

export type MlpLoss = 'mse' | 'mae' | 'huber';

export const DEFAULT_MLP_OPTIONS: Omit<MlpTrainOptions, 'onEpoch'> = { hidden: [32, 32, 32], epochs: 60, batchSize: 64, learningRate: 3e-3, seed: 1, loss: 'mae' };

interface Tf {
  readonly core: typeof TfCore;
  readonly layers: typeof TfLayers;
}

/**
 * Import tfjs (core, wasm backend, layers) and select the wasm backend. The emscripten module
 * of the wasm backend registers process-wide `uncaughtException` / `unhandledRejection`
 * listeners that rethrow (and print its whole minified source); they are removed again, so
 * the process keeps its own error handling.
 */
async function loadTf(): Promise<Tf> {
  const before = { uncaught: new Set(process.listeners('uncaughtException')), rejection: new Set(process.listeners('unhandledRejection')) };
  const core = await import('@tensorflow/tfjs-core');
  await import('@tensorflow/tfjs-backend-wasm');
  const layers = await import('@tensorflow/tfjs-layers');
  if (core.getBackend() !== 'wasm') {
    const ok = await core.setBackend('wasm');
    if (!ok) throw new Error('tfjs: the wasm backend failed to initialize');
  }
  await core.ready();
  for (const l of process.listeners('uncaughtException')) if (!before.uncaught.has(l)) process.removeListener('uncaughtException', l);
  for (const l of process.listeners('unhandledRejection')) if (!before.rejection.has(l)) process.removeListener('unhandledRejection', l);
  return { core, layers };
}

function buildModel(tf: Tf, inputWidth: number, hidden: readonly number[], seed: number): TfLayers.Sequential {
  const model = tf.layers.sequential();
  const units = [...hidden, 1];
  units.forEach((u, i) => {
    model.add(
      tf.layers.layers.dense({
        ...(i === 0 ? { inputShape: [inputWidth] } : {}),
        units: u,
        activation: i < hidden.length ? 'relu' : 'linear',
        kernelInitializer: tf.layers.initializers.glorotUniform({ seed: seed * 1000 + i }),
        biasInitializer: 'zeros',
      }),
    );
  });
  return model;
}

function checkOptions(o: MlpTrainOptions): void {
  if (!o.hidden.every((u) => Number.isInteger(u) && u >= 1)) throw new RangeError(`hidden layer sizes must be positive integers, got [${o.hidden.join(', ')}]`);
  if (!Number.isInteger(o.epochs) || o.epochs < 1) throw new RangeError(`epochs must be an integer ≥ 1, got ${o.epochs}`);
  if (!Number.isInteger(o.batchSize) || o.batchSize < 1) throw new RangeError(`batchSize must be an integer ≥ 1, got ${o.batchSize}`);
  if (!(o.learningRate > 0 && Number.isFinite(o.learningRate))) throw new RangeError(`learningRate must be a positive number, got ${o.learningRate}`);
  if (!Number.isFinite(o.seed)) throw new RangeError(`seed must be a finite number, got ${o.seed}`);
}

/**
 * Train an MLP on `n` rows of standardized features `x` (row-major `[n, width]`) and targets
 * `y` (`[n]`). Returns the layers in the file's form (kernels row-major `[inputs, units]`).
 * @throws RangeError for bad options or n = 0.
 */
export async function trainMlp(x: Float32Array, y: Float32Array, width: number, options: MlpTrainOptions): Promise<DenseLayer[]> {
  checkOptions(options);
  const n = y.length;
  if (n === 0) throw new RangeError('cannot train on 0 samples');
  if (x.length !== n * width) throw new RangeError(`x has ${x.length} values, expected ${n}×${width}`);
  const tf = await loadTf();
  const { core } = tf;
  const model = buildModel(tf, width, options.hidden, options.seed);
  const optimizer = core.train.adam(options.learningRate);
  const loss =
    options.loss === 'mse' ? 'meanSquaredError' : options.loss === 'mae' ? 'meanAbsoluteError' : (yTrue: TfCore.Tensor, yPred: TfCore.Tensor): TfCore.Tensor => core.losses.huberLoss(yTrue, yPred, undefined, 1);
  model.compile({ optimizer, loss });
  const rng = new Rng(options.seed);
  const order = Int32Array.from({ length: n }, (_, i) => i);
  const xs = new Float32Array(n * width);
  const ys = new Float32Array(n);
  try {
    for (let epoch = 0; epoch < options.epochs; epoch++) {
      // Fisher–Yates with the seeded generator
      for (let i = n - 1; i > 0; i--) {
        const j = rng.nextUint32() % (i + 1);
        const t = order[i]!;
        order[i] = order[j]!;
        order[j] = t;
      }
      for (let r = 0; r < n; r++) {
        const src = order[r]!;
        xs.set(x.subarray(src * width, src * width + width), r * width);
        ys[r] = y[src]!;
      }
      const progress = options.epochs > 1 ? epoch / (options.epochs - 1) : 1;
      // cosine decay to 5% (see the file comment); the field is protected in tfjs' typings only
      (optimizer as unknown as { learningRate: number }).learningRate = options.learningRate * (0.05 + 0.95 * 0.5 * (1 + Math.cos(Math.PI * progress)));
      const xt = core.tensor2d(xs, [n, width]);
      const yt = core.tensor2d(ys, [n, 1]);
      try {
        const h = await model.fit(xt, yt, { epochs: 1, batchSize: options.batchSize, shuffle: false, verbose: 0 });
        const loss = h.history['loss']?.[0];
        options.onEpoch?.(epoch + 1, options.epochs, typeof loss === 'number' ? loss : Number.NaN);
      } finally {
        xt.dispose();
        yt.dispose();
      }
    }
    return exportLayers(model, options.hidden.length);
  } finally {
    model.dispose();
    optimizer.dispose();
  }
}

function exportLayers(model: TfLayers.Sequential, hiddenCount: number): DenseLayer[] {
  return model.layers.map((layer, i) => {
    const [kernel, bias] = layer.getWeights();
    if (kernel === undefined || bias === undefined || kernel.shape.length !== 2) throw new Error(`tfjs layer ${i} has no dense kernel and bias`);
    const [inputs, units] = kernel.shape as [number, number];
    return {
      inputs,
      units,
      activation: i < hiddenCount ? 'relu' : 'linear',
      kernel: Array.from(kernel.dataSync()),
      bias: Array.from(bias.dataSync()),
    };
  });
}

/**
 * tfjs' own `model.predict` for `layers` on standardized rows `x` (`[n, width]`): the reference
 * the plain forward pass is tested against. Returns the raw network outputs.
 */
export async function predictWithTf(layers: readonly DenseLayer[], x: Float32Array, width: number): Promise<Float32Array> {
  const tf = await loadTf();
  const { core } = tf;
  const model = tf.layers.sequential();
  layers.forEach((l, i) => {
    model.add(tf.layers.layers.dense({ ...(i === 0 ? { inputShape: [width] } : {}), units: l.units, activation: l.activation }));
  });
  const weights = layers.flatMap((l) => [core.tensor2d(l.kernel as number[], [l.inputs, l.units]), core.tensor1d(l.bias as number[])]);
  try {
    model.setWeights(weights);
    const n = x.length / width;
    const input = core.tensor2d(x, [n, width]);
    const output = model.predict(input) as TfCore.Tensor;
    const data = output.dataSync() as Float32Array;
    const copy = Float32Array.from(data);
    input.dispose();
    output.dispose();
    return copy;
  } finally {
    for (const w of weights) w.dispose();
    model.dispose();
  }
}
