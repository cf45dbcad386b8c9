/**
 * Reference runner for tests: an artifact's whole model and its operators in sequence with
 * plain onnxruntime-node sessions in this thread (no executors), carrying passthrough tensors
 * exactly as the ModelSpec says. Thin wrappers over `src/model/onnx/verify.ts`, the one
 * implementation of the runner and of the error metric.
 */
import * as ort from 'onnxruntime-node';
import { MASK_NAME } from '../../src/model/synthetic.ts';
import type { ModelArtifact } from '../../src/model/artifact.ts';
import { resolveShape } from '../../src/model/boundary.ts';
import type { ModelSpec } from '../../src/model/spec.ts';
import { elementCount } from '../../src/tensor.ts';
import { relativeError, runOnnx, runOperatorsInSequence } from '../../src/model/onnx/verify.ts';
import type { TensorLike } from '../../src/model/onnx/verify.ts';

export type OrtFeeds = Record<string, ort.Tensor>;

/** Run the artifact's whole model (`model.onnx`). */
export async function runWhole(artifact: ModelArtifact, feeds: OrtFeeds): Promise<OrtFeeds> {
  return runOnnx(artifact.modelPath, feeds);
}

/** Run the artifact's operators 0..N−1 in sequence; returns the model outputs. */
export async function runOperators(artifact: ModelArtifact, feeds: OrtFeeds): Promise<OrtFeeds> {
  return runOperatorsInSequence(artifact.spec, artifact.operatorPaths, feeds);
}

/**
 * max|a − b| / max|a| over one output, `a` the reference (verify.ts `relativeError`): Infinity
 * when max|a| is 0 or not finite, or the shapes differ. Compare with `≤ 1e-4` (the partition check, docs/models.md "Operators on disk").
 */
export function relativeMaxError(a: TensorLike, b: TensorLike): number {
  return relativeError(a, b);
}

/** Deterministic inputs for a zoo model: images in [-1, 1), token ids in [0, 100), mask of ones. */
export function zooFeeds(source: { readonly spec: ModelSpec }, batch: number, seqLen: number): OrtFeeds {
  const spec = source.spec;
  const feeds: OrtFeeds = {};
  let s = 12345;
  const rnd = (): number => {
    s = (s * 1103515245 + 12345) % 2147483648;
    return s / 2147483648;
  };
  for (const input of spec.inputs) {
    const dims = resolveShape(spec, input, batch, seqLen);
    const n = elementCount(dims);
    if (input.dataType === 'int64') {
      const data = new BigInt64Array(n);
      const isMask = MASK_NAME.test(input.name);
      for (let i = 0; i < n; i++) data[i] = isMask ? 1n : BigInt(Math.floor(rnd() * 100));
      feeds[input.name] = new ort.Tensor('int64', data, dims);
    } else {
      const data = new Float32Array(n);
      for (let i = 0; i < n; i++) data[i] = rnd() * 2 - 1;
      feeds[input.name] = new ort.Tensor('float32', data, dims);
    }
  }
  return feeds;
}
