/**
 * TensorFlow.js (wasm backend) as an independent reference in tests: its own `model.predict` on
 * the weights our trainer wrote, to check the serving forward pass (`MlpPredictor`) against.
 * The project trains and serves without it (`src/predict/mlp/`).
 */
import type * as TfCore from '@tensorflow/tfjs-core';
import type * as TfLayers from '@tensorflow/tfjs-layers';
import type { DenseLayer } from '../../src/predict/mlp/mlp-predictor.ts';

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
