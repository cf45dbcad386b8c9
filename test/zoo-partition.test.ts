/**
 * The zoo through the real pipeline (build → partition → cache): running the N operators in
 * sequence reproduces the whole model (docs/models.md "Operators on disk"), for all seven models' small variants;
 * the cache is reused; metadata totals match the published figures at full size.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ModelRepository } from '../src/model/repository.ts';
import { evalCost } from '../src/model/cost.ts';
import { ZOO_MODEL_NAMES, type ZooModelName } from '../src/model/zoo/index.ts';
import { compareOutputs } from '../src/model/onnx/verify.ts';
import { runOperators, runWhole, zooFeeds } from './helpers/run-operators.ts';
import { SMALL_VARIANTS } from './helpers/small-variants.ts';

let cacheDir: string;
let repo: ModelRepository;
beforeAll(async () => {
  cacheDir = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-zoo-'));
  repo = new ModelRepository({ cacheDir });
});
afterAll(async () => {
  await fs.rm(cacheDir, { recursive: true, force: true });
});

const PAPER_OPERATORS: Record<ZooModelName, number> = {
  resnet50: 18,
  resnet101: 35,
  resnet152: 52,
  inception_v3: 14,
  vgg16: 19,
  vgg19: 22,
  bert: 12,
};

describe.each(ZOO_MODEL_NAMES.map((n) => [n]))('%s small variant', (name) => {
  it('operators run in sequence equal the whole model (max abs error ≤ 1e-4 · max|output|)', async () => {
    const { artifact, built } = await repo.zooArtifact(name, SMALL_VARIANTS[name]);
    expect(built).toBe(true);
    const expectedOps = name === 'bert' ? (SMALL_VARIANTS.bert['layers'] as number) : PAPER_OPERATORS[name];
    expect(artifact.spec.operators).toHaveLength(expectedOps);
    const seqLen = artifact.spec.dynamicAxes.seq === undefined ? 0 : 11;
    const feeds = zooFeeds(artifact, 2, seqLen);
    const whole = await runWhole(artifact, feeds);
    const split = await runOperators(artifact, feeds);
    expect(Object.keys(split).sort()).toEqual(artifact.spec.outputs.map((t) => t.name).sort());
    for (const out of artifact.spec.outputs) expect(split[out.name]!.dims).toEqual(whole[out.name]!.dims);
    for (const c of compareOutputs(whole, split)) {
      expect(c.scale, `output ${c.name} is not all zero`).toBeGreaterThan(0);
      expect(c, `output ${c.name}`).toMatchObject({ ok: true });
    }
    // second request: served from the cache, not rebuilt
    const again = await repo.zooArtifact(name, SMALL_VARIANTS[name]);
    expect(again.built).toBe(false);
    expect(again.artifact.dir).toBe(artifact.dir);
  });
});

describe('full-size metadata (no weights materialized)', () => {
  // Published: torchvision reports 4.09 GMAC (resnet50) and 15.47 GMAC (vgg16) at 224²;
  // ×2 FLOP per multiply-add = 8.18 and 30.94 GFLOP. See src/model/onnx/flops.ts.
  it.each([
    ['resnet50', 8.18, 0.03],
    ['vgg16', 30.94, 0.03],
    ['resnet101', 15.6, 0.05],
    ['resnet152', 23.1, 0.05],
    ['vgg19', 39.26, 0.03],
    ['inception_v3', 11.42, 0.05],
  ] as const)('%s GFLOP at batch 1 ≈ %f (±%f relative)', async (name, gflops, tol) => {
    const spec = await repo.zooSpec(name);
    expect(spec.operators).toHaveLength(PAPER_OPERATORS[name]);
    const total = spec.operators.reduce((s, op) => s + evalCost(op.gflops, 1, 0), 0);
    expect(Math.abs(total - gflops) / gflops).toBeLessThanOrEqual(tol);
  });

  it('bert-base GFLOP grows quadratically with sequence length', async () => {
    const spec = await repo.zooSpec('bert');
    expect(spec.operators).toHaveLength(12);
    const at = (s: number): number => spec.operators.reduce((a, op) => a + evalCost(op.gflops, 1, s), 0);
    // Encoder matmuls: 12 layers × (4·768² + 2·768·3072) MAC per token = 85M MAC → 2·85M·s FLOP,
    // attention scores and context 12 × 2·s²·768 MAC. At s=128: 21.7 + 0.5 ≈ 22.3 GFLOP.
    const expected128 = 2 * 12 * (4 * 768 * 768 + 2 * 768 * 3072) * 128 / 1e9 + 2 * 12 * 2 * 128 * 128 * 768 / 1e9;
    expect(Math.abs(at(128) - expected128) / expected128).toBeLessThanOrEqual(0.03);
    expect(at(256) / at(128)).toBeGreaterThan(2);
  });
});
