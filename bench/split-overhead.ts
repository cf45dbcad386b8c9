/**
 * Split overhead (docs/benchmarks.md "Split overhead and overlap on the CPU"): resnet50, 224², batch 1, CPU — the model run as its 18 operator
 * sessions vs one whole-model session, both measured in this process in alternating rounds.
 *
 *  - in-process: plain onnxruntime-node sessions in this thread (pure cost of the split:
 *    18 session runs, tensor hand-off between them, fusions lost at the cuts);
 *  - executor: through OrtDevice, the 18-operator artifact vs the same model imported as a
 *    1-operator artifact (what the runtime pays per query).
 * The project's target: ratio ≤ 1.10 (docs/benchmarks.md "Split overhead and overlap on the CPU").
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { OrtDevice } from '../src/device/ort/index.ts';
import type { Segment } from '../src/device/device.ts';
import { ModelRepository } from '../src/model/repository.ts';
import { resolvedBoundary } from '../src/model/boundary.ts';
import { syntheticTensors } from '../src/model/synthetic.ts';
import type { ModelArtifact } from '../src/model/artifact.ts';
import { median } from '../src/stats.ts';

export interface SplitOverheadResult {
  model: string;
  batch: number;
  threads: number;
  repeat: number;
  inProcess: { wholeMs: number; operatorsMs: number; ratio: number };
  executor: { wholeMs: number; operatorsMs: number; ratio: number };
}


function toOrt(artifact: ModelArtifact, batch: number): Record<string, ort.Tensor> {
  const feeds: Record<string, ort.Tensor> = {};
  for (const [name, t] of Object.entries(syntheticTensors(resolvedBoundary(artifact.spec, 0, batch, 0), 1))) {
    feeds[name] = new ort.Tensor(t.dataType as 'float32', t.data as Float32Array, [...t.dims]);
  }
  return feeds;
}

/** `zooOptions` picks a small variant (tests); the benchmark itself runs full-size resnet50. */
export async function benchSplitOverhead(opts: { repeat: number; threads: number; cacheDir?: string; zooOptions?: Record<string, number>; log: (s: string) => void }): Promise<SplitOverheadResult> {
  const repo = new ModelRepository(opts.cacheDir === undefined ? {} : { cacheDir: opts.cacheDir });
  const batch = 1;
  const split = (await repo.zooArtifact('resnet50', opts.zooOptions ?? {})).artifact;
  // The 1-operator baseline is imported into a scratch cache, so it never shows up among the user's models.
  const scratch = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-bench-whole-'));
  const whole = (await new ModelRepository({ cacheDir: scratch }).importModel(split.modelPath, { operators: 1, name: 'resnet50-whole' })).artifact;
  opts.log(`split overhead: resnet50 224² batch ${batch}, ${split.spec.operators.length} operators vs 1, ${opts.threads} intra-op thread(s)\n`);

  // In-process plain ORT.
  const sessionOptions: ort.InferenceSession.SessionOptions = { intraOpNumThreads: opts.threads, interOpNumThreads: 1, executionMode: 'sequential' };
  const wholeSession = await ort.InferenceSession.create(split.modelPath, sessionOptions);
  const opSessions = await Promise.all(split.operatorPaths.map((p) => ort.InferenceSession.create(p, sessionOptions)));
  const feeds = toOrt(split, batch);
  const runOps = async (): Promise<void> => {
    let state: Record<string, ort.Tensor> = { ...feeds };
    for (const op of split.spec.operators) {
      const inputs: Record<string, ort.Tensor> = {};
      for (const t of op.inputs) inputs[t.name] = state[t.name]!;
      const out = await opSessions[op.index]!.run(inputs);
      const next: Record<string, ort.Tensor> = {};
      for (const p of op.passthrough) next[p] = state[p]!;
      for (const t of op.outputs) next[t.name] = out[t.name]!;
      state = next;
    }
  };
  const inWhole: number[] = [];
  const inOps: number[] = [];
  for (let r = -2; r < opts.repeat; r++) {
    const order = r % 2 === 0 ? ['whole', 'ops'] : ['ops', 'whole'];
    for (const which of order) {
      const t0 = performance.now();
      if (which === 'whole') await wholeSession.run(feeds);
      else await runOps();
      const ms = performance.now() - t0;
      if (r >= 0) (which === 'whole' ? inWhole : inOps).push(ms);
    }
  }
  await wholeSession.release();
  for (const s of opSessions) await s.release();

  // Through the executors.
  const device = await OrtDevice.create({ intraOpNumThreads: opts.threads });
  const exWhole: number[] = [];
  const exOps: number[] = [];
  try {
    await device.load([
      { name: 'split', model: split },
      { name: 'whole', model: whole },
    ]);
    let id = 0;
    const seg = (service: string, n: number, seed: number): Segment => ({ service, queryId: `q${id++}`, start: 0, end: n, batchSize: batch, seqLen: 0, input: { kind: 'synthetic', seed } });
    for (let r = -2; r < opts.repeat; r++) {
      const order = r % 2 === 0 ? ['whole', 'split'] : ['split', 'whole'];
      for (const which of order) {
        const res = await device.runGroup([seg(which, which === 'whole' ? 1 : split.spec.operators.length, 1)]);
        const s = res.segments[0]!;
        if (!s.ok) throw s.error;
        if (r >= 0) (which === 'whole' ? exWhole : exOps).push(s.latencyMs);
      }
    }
  } finally {
    await device.close();
    await fs.rm(scratch, { recursive: true, force: true });
  }
  const inProcess = { wholeMs: median(inWhole), operatorsMs: median(inOps), ratio: 0 };
  inProcess.ratio = inProcess.operatorsMs / inProcess.wholeMs;
  const executor = { wholeMs: median(exWhole), operatorsMs: median(exOps), ratio: 0 };
  executor.ratio = executor.operatorsMs / executor.wholeMs;
  return { model: 'resnet50', batch, threads: opts.threads, repeat: opts.repeat, inProcess, executor };
}
