/**
 * Reference runner for tests: run an artifact's whole model and its operators in sequence
 * with plain onnxruntime-node sessions in this thread (no executors), carrying passthrough
 * tensors exactly as the ModelSpec says.
 */
import * as ort from 'onnxruntime-node';
import type { ModelArtifact } from '../../src/model/artifact.ts';

export type OrtFeeds = Record<string, ort.Tensor>;

export async function runWhole(artifact: ModelArtifact, feeds: OrtFeeds): Promise<OrtFeeds> {
  const session = await ort.InferenceSession.create(artifact.modelPath);
  try {
    return await session.run(feeds);
  } finally {
    await session.release();
  }
}

export async function runOperators(artifact: ModelArtifact, feeds: OrtFeeds): Promise<OrtFeeds> {
  let state: OrtFeeds = { ...feeds };
  for (const op of artifact.spec.operators) {
    const session = await ort.InferenceSession.create(artifact.operatorPaths[op.index]!);
    try {
      const inputs: OrtFeeds = {};
      for (const t of op.inputs) {
        const v = state[t.name];
        if (!v) throw new Error(`operator ${op.index} (${op.name}) needs ${t.name}, boundary has ${Object.keys(state).join(', ')}`);
        inputs[t.name] = v;
      }
      const outputs = await session.run(inputs);
      const next: OrtFeeds = {};
      for (const name of op.passthrough) {
        const v = state[name];
        if (!v) throw new Error(`operator ${op.index} passthrough ${name} missing`);
        next[name] = v;
      }
      for (const t of op.outputs) next[t.name] = outputs[t.name]!;
      state = next;
    } finally {
      await session.release();
    }
  }
  return state;
}

/** max |a-b| / max(1, max |a|) over one output. */
export function relativeMaxError(a: ort.Tensor, b: ort.Tensor): number {
  const x = a.data as Float32Array;
  const y = b.data as Float32Array;
  if (x.length !== y.length) return Infinity;
  let err = 0;
  let scale = 1;
  for (let i = 0; i < x.length; i++) {
    err = Math.max(err, Math.abs(x[i]! - y[i]!));
    scale = Math.max(scale, Math.abs(x[i]!));
  }
  return err / scale;
}

/** Deterministic inputs for a zoo model: images in [-1, 1), token ids in [0, 100), mask of ones. */
export function zooFeeds(artifact: ModelArtifact, batch: number, seqLen: number): OrtFeeds {
  const feeds: OrtFeeds = {};
  let s = 12345;
  const rnd = (): number => {
    s = (s * 1103515245 + 12345) % 2147483648;
    return s / 2147483648;
  };
  for (const input of artifact.spec.inputs) {
    const dims = input.shape.map((d) => (d === artifact.spec.dynamicAxes.batch ? batch : d === artifact.spec.dynamicAxes.seq ? seqLen : (d as number)));
    const n = dims.reduce((a, b) => a * b, 1);
    if (input.dataType === 'int64') {
      const data = new BigInt64Array(n);
      const isMask = input.name.includes('mask');
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
