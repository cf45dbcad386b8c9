/**
 * Which versions a service serves (`deployment/versions.ts`): Triton's version policies over
 * the imported versions, and the config errors that name the field.
 */
import { describe, expect, it } from 'vitest';
import { expandVersions, pickVersions } from '../src/deployment/versions.ts';
import { InvalidConfigError } from '../src/errors.ts';
import { ModelRepository } from '../src/model/repository.ts';
import { parseServingConfig } from '../src/runtime/config.ts';

describe('pickVersions', () => {
  it('takes the latest N, all, or specific versions; absent, the latest one', () => {
    expect(pickVersions(undefined, [1, 2, 3])).toEqual([3]);
    expect(pickVersions({ latest: 2 }, [1, 2, 3])).toEqual([2, 3]);
    expect(pickVersions({ latest: 5 }, [1, 2])).toEqual([1, 2]);
    expect(pickVersions({ all: true }, [1, 2, 3])).toEqual([1, 2, 3]);
    expect(pickVersions({ specific: [3, 1, 3] }, [1, 2, 3])).toEqual([1, 3]);
    expect(() => pickVersions({ specific: [4] }, [1, 2, 3])).toThrow(/version 4 is not imported \(available: 1, 2, 3\)/);
  });
});

describe('versionPolicy in the serving config', () => {
  it('is validated with the field named', () => {
    const base = { device: 'sim:a100', services: [{ model: 'resnet50', qosTargetMs: 20 }] };
    expect(() => parseServingConfig({ ...base, services: [{ model: 'resnet50', qosTargetMs: 20, versionPolicy: { latest: 0 } }] }, 'c.yaml')).toThrow(/services\[0\]\.versionPolicy/);
    expect(() => parseServingConfig({ ...base, services: [{ model: 'resnet50', qosTargetMs: 20, versionPolicy: 'all' }] }, 'c.yaml')).toThrow(/services\[0\]\.versionPolicy: must be \{ latest: N \}/);
    expect(parseServingConfig({ ...base, services: [{ model: 'resnet50', qosTargetMs: 20, versionPolicy: { specific: [1] } }] }, 'c.yaml').services[0]!.versionPolicy).toEqual({ specific: [1] });
  });

  it('a zoo model has version 1 only; a model named with its version takes no policy', async () => {
    const repo = new ModelRepository({ cacheDir: '/nonexistent-abacus-cache' });
    const one = parseServingConfig({ device: 'sim:a100', services: [{ name: 'r', model: 'resnet50-small', qosTargetMs: 20, versionPolicy: { all: true } }] }, 'c.yaml');
    const expanded = await expandVersions(repo, one);
    expect(expanded.config.services.map((s) => [s.name, s.model])).toEqual([['r', 'resnet50-small']]);
    expect(expanded.versions.get('r')).toEqual({ modelName: 'r', version: '1' });
    const two = parseServingConfig({ device: 'sim:a100', services: [{ name: 'r', model: 'resnet50-small', qosTargetMs: 20, versionPolicy: { specific: [2] } }] }, 'c.yaml');
    await expect(expandVersions(repo, two)).rejects.toThrow(InvalidConfigError);
    await expect(expandVersions(repo, two)).rejects.toThrow(/c\.yaml: services\[0\]\.versionPolicy: model 'resnet50-small': version 2 is not imported \(available: 1\)/);
    const both = parseServingConfig({ device: 'sim:a100', services: [{ name: 'm', model: 'mine@2', qosTargetMs: 20, versionPolicy: { latest: 1 } }] }, 'c.yaml');
    await expect(expandVersions(repo, both)).rejects.toThrow(/services\[0\]\.versionPolicy: model 'mine@2' names its version/);
  });
});
