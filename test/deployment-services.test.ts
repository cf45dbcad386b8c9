/**
 * `resolveServices`: a config's model references resolved against the model repository.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ownShapes, profiledBatchSizes, resolveServices } from '../src/deployment/services.ts';
import { failedServiceOf } from '../src/deployment/serving.ts';
import type { ModelShapes } from '../src/profile/sampler.ts';
import type { DeploymentContext } from '../src/deployment/context.ts';
import { ModelRepository } from '../src/model/repository.ts';
import { parseServingConfig } from '../src/runtime/config.ts';
import { SMALL_VARIANTS } from './helpers/small-variants.ts';

let tmp: string;
let repo: ModelRepository;
const ctx: DeploymentContext = { err: () => undefined, cacheOptions: () => ({}) };

beforeAll(async () => {
  tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-services-'));
  repo = new ModelRepository({ cacheDir: path.join(tmp, 'cache') });
  const zoo = (await repo.zooArtifact('resnet50', SMALL_VARIANTS.resnet50)).artifact;
  const file = path.join(tmp, 'mynet.onnx');
  await fs.copyFile(zoo.modelPath, file);
  await repo.importModel(file, { operators: 2 });
  await repo.importModel(file, { operators: 4 });
});
afterAll(async () => {
  await fs.rm(tmp, { recursive: true, force: true });
});

describe('resolveServices', () => {
  it('refuses two operator counts of one model in one config (the predictor knows a model by its name), naming services[i].model', async () => {
    const config = parseServingConfig(
      {
        device: 'sim:a100',
        services: [
          { name: 'two', model: 'mynet:2', qosTargetMs: 50 },
          { name: 'four', model: 'mynet:4', qosTargetMs: 50 },
        ],
      },
      'c.yaml',
    );
    await expect(resolveServices(ctx, repo, config)).rejects.toThrow(
      "c.yaml: services[1].model: 'mynet:4' is model mynet with 4 operators, and services[0].model 'mynet:2' serves it with 2; a config serves one operator count per model, because the profiler and the predictor know a model by its name (mynet). Give every service of mynet the same model (one count), and serve another count from another server (its own config, or loaded at runtime with abacus serve --model-control explicit by a server whose config does not serve mynet)",
    );
  });

  it('two services of the same model reference are fine; one count of a model beside another model too', async () => {
    const same = parseServingConfig({ device: 'sim:a100', services: [{ name: 'a', model: 'mynet:2', qosTargetMs: 50 }, { name: 'b', model: 'mynet:2', qosTargetMs: 80 }, { name: 'c', model: 'resnet50-small', qosTargetMs: 80 }] }, 'c.yaml');
    const hosted = await resolveServices(ctx, repo, same);
    expect(hosted.services.map((s) => [s.name, s.spec.name, s.spec.operators.length])).toEqual([
      ['a', 'mynet', 2],
      ['b', 'mynet', 2],
      ['c', 'resnet50-small', expect.any(Number)],
    ]);
  });
});

describe('first-start profile: each model at its own shapes; a failure naming one model', () => {
  it('ownShapes: per model the union of its own services\' batch sizes; undefined when every model has the shared lists', async () => {
    const mixed = parseServingConfig({ device: 'sim:a100', services: [{ name: 'a', model: 'mynet:2', qosTargetMs: 50, batchSizes: [1, 2] }, { name: 'b', model: 'mynet:2', qosTargetMs: 80, batchSizes: [4] }, { name: 'c', model: 'resnet50-small', qosTargetMs: 80, batchSizes: [8] }] }, 'c.yaml');
    const hosted = await resolveServices(ctx, repo, mixed);
    const all = hosted.services.flatMap((s) => profiledBatchSizes(s));
    const shapes = ownShapes(hosted.services, all, []);
    const listed: [string, number[]][] = [...(shapes ?? new Map<string, ModelShapes>())].map(([m, s]) => [m, [...(s.batchSizes ?? [])].sort((x, y) => x - y)]);
    expect(listed).toEqual([
      ['mynet', [1, 2, 4]],
      ['resnet50-small', [8]],
    ]);
    const same = parseServingConfig({ device: 'sim:a100', services: [{ name: 'a', model: 'mynet:2', qosTargetMs: 50, batchSizes: [1, 2] }, { name: 'c', model: 'resnet50-small', qosTargetMs: 80, batchSizes: [2, 1] }] }, 'c.yaml');
    const h2 = await resolveServices(ctx, repo, same);
    expect(ownShapes(h2.services, h2.services.flatMap((s) => profiledBatchSizes(s)), [])).toBeUndefined();
    // a sequence model with no seqLens of its own is profiled at its default, not at another service's
    const seq = parseServingConfig({ device: 'sim:a100', services: [{ name: 'b', model: 'bert-small', qosTargetMs: 50, batchSizes: [1] }, { name: 'b2', model: 'bert-small', qosTargetMs: 50, batchSizes: [1], seqLens: [8] }] }, 'c.yaml');
    const h3 = await resolveServices(ctx, repo, seq);
    const bert = h3.services[0]!.spec;
    expect(ownShapes(h3.services, [1], [8])?.get(bert.name)?.seqLens?.slice().sort((x, y) => x - y)).toEqual([8, bert.defaultSeqLen].sort((x, y) => x - y));
    const alone = parseServingConfig({ device: 'sim:a100', services: [{ name: 'b', model: 'bert-small', qosTargetMs: 50, batchSizes: [1] }, { name: 'r', model: 'resnet50-small', qosTargetMs: 50, batchSizes: [1] }] }, 'c.yaml');
    const h4 = await resolveServices(ctx, repo, alone);
    expect(ownShapes(h4.services, [1], [])).toBeUndefined(); // the sampler's own fallback: nothing changes, nor the cache key
  });

  it('failedServiceOf: the services of the one model the error names (by service or model name), else none', async () => {
    const config = parseServingConfig({ device: 'sim:a100', services: [{ name: 'a', model: 'mynet:2', qosTargetMs: 50 }, { name: 'b', model: 'mynet:2', qosTargetMs: 80 }, { name: 'c', model: 'resnet50-small', qosTargetMs: 80 }] }, 'c.yaml');
    const hosted = await resolveServices(ctx, repo, config);
    expect([...failedServiceOf(hosted, new Error('service c, query p1: operator 0 failed'))].map(([s]) => s)).toEqual(['c']);
    expect([...failedServiceOf(hosted, new Error('service mynet, query p1: Got invalid dimensions'))].map(([s]) => s)).toEqual(['a', 'b']);
    expect(failedServiceOf(hosted, new Error('service mynet and service c failed')).size).toBe(0);
    expect(failedServiceOf(hosted, new Error('out of memory')).size).toBe(0);
    expect(failedServiceOf(hosted, new Error('service c failed')).get('c')).toMatch(/^it failed while the predictor was profiled: service c failed/);
  });
});
