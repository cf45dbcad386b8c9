/**
 * Per-model state of `RuntimeBackend` (LOADING / READY / UNLOADING / UNAVAILABLE) on a sim:a100
 * device: containment at start-up (a model that fails to load or to warm up is UNAVAILABLE with
 * its reason, the others serve), unload draining the model's queued requests, concurrent loads.
 */
import { describe, expect, it } from 'vitest';
import { WallClock } from '../../src/clock/index.ts';
import type { Device, GroupResult, Segment, SegmentResult } from '../../src/device/device.ts';
import { SimDevice } from '../../src/device/sim/index.ts';
import { DeviceFailureError, InvalidModelError } from '../../src/errors.ts';
import { artifactAt } from '../../src/model/artifact.ts';
import { resolveModelSpec } from '../../src/model/catalog.ts';
import { ModelRepository } from '../../src/model/repository.ts';
import { createController } from '../../src/schedule/index.ts';
import { RuntimeBackend, type BackendEngine, type ModelControl, type ServedModel } from '../../src/serve/backend.ts';
import { ServeError, type InferRequest } from '../../src/serve/inference.ts';
import { fixedPredictor } from '../helpers/fixed-predictor.ts';

/** Segments of `failing` fail on the device (as an operator failing on its inputs would); the rest run on `inner`. */
function failingDevice(inner: SimDevice, failing: string): Device {
  return {
    id: inner.id,
    load: (s) => inner.load(s),
    unload: (name) => inner.unload(name),
    releaseQuery: (s, q) => inner.releaseQuery(s, q),
    close: () => inner.close(),
    runGroup: async (group: readonly Segment[]): Promise<GroupResult> => {
      const ok = group.filter((s) => s.service !== failing);
      const ran = ok.length === 0 ? { groupLatencyMs: 0, segments: [] } : await inner.runGroup(ok);
      let k = 0;
      const segments = group.map((s): SegmentResult => (s.service === failing ? { ok: false, queryId: s.queryId, service: s.service, error: new DeviceFailureError(`operator 0 of ${s.service} failed on its inputs`) } : ran.segments[k++]!));
      return { groupLatencyMs: ran.groupLatencyMs, segments };
    },
  };
}

async function setUp(names: readonly string[], options: { failWarmUp?: string; failLoad?: string; modelControl?: ModelControl } = {}) {
  const spec = await resolveModelSpec(new ModelRepository(), 'resnet50-small');
  const models: ServedModel[] = names.map((name) => ({ name, spec, qosTargetMs: 5000, maxQosMs: 50_000, batchSizes: [1, 2], maxQueueLength: 100 }));
  const clock = new WallClock();
  const sim = await SimDevice.create({ clock, id: 'sim:a100', seed: 1 });
  const device = options.failWarmUp === undefined ? sim : failingDevice(sim, options.failWarmUp);
  const backend = new RuntimeBackend({ models, platform: 'abacus_sim', ...(options.modelControl === undefined ? {} : { modelControl: options.modelControl }) });
  const engine: BackendEngine = {
    clock,
    device,
    controller: createController('fcfs', { drop: false }, fixedPredictor([spec.name], 0.05)),
    loadModel: async (name) => {
      if (name === options.failLoad) throw new InvalidModelError(`service ${name}: operator 1 file /cache/op1.onnx does not load: protobuf parsing failed`);
      await device.load([{ name, model: artifactAt('/nonexistent', spec) }]);
    },
    unloadModel: (name) => device.unload!(name),
  };
  return { backend, engine, sim, spec };
}

const request = (modelName: string): InferRequest => ({ modelName, requestId: 't', inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3, 64, 64], data: { kind: 'raw', bytes: Buffer.alloc(3 * 64 * 64 * 4) } }] });

async function code(p: Promise<unknown>): Promise<string> {
  try {
    await p;
    return 'ok';
  } catch (err) {
    return err instanceof ServeError ? `${err.code}: ${err.message}` : String(err);
  }
}

describe('RuntimeBackend: per-model state and containment', () => {
  it('a model failing its warm-up is UNAVAILABLE with the reason and left the device; the others serve and the server is ready', async () => {
    const { backend, engine, sim } = await setUp(['good', 'bad', 'other'], { failWarmUp: 'bad' });
    expect(backend.repositoryIndex().map((m) => m.state)).toEqual(['LOADING', 'LOADING', 'LOADING']);
    expect(backend.isReady()).toBe(false);
    await backend.start(engine);
    const index = backend.repositoryIndex();
    expect(index.map((m) => [m.name, m.state])).toEqual([
      ['good', 'READY'],
      ['bad', 'UNAVAILABLE'],
      ['other', 'READY'],
    ]);
    expect(index[1]!.reason).toMatch(/^warm-up at batch 1 failed \(device_failure\): .*operator 0 of bad failed on its inputs/);
    expect(backend.isReady()).toBe(true);
    expect(backend.modelReady('bad')).toBe(false);
    expect(backend.modelReady('good')).toBe(true);
    expect(backend.modelList()).toEqual(['good', 'other']);
    expect(backend.repositoryIndex(true).map((m) => m.name)).toEqual(['good', 'other']);
    expect(backend.modelMetadata('bad')).toMatchObject({ state: 'UNAVAILABLE', reason: index[1]!.reason });
    expect(sim.services).toEqual(['good', 'other']);
    expect(await code(backend.infer(request('good')))).toBe('ok');
    expect(await code(backend.infer(request('bad')))).toMatch(/^not_ready: not_ready: model 'bad' is UNAVAILABLE: warm-up at batch 1 failed/);
    await backend.shutdown(1000);
  });

  it('a model failing to load is UNAVAILABLE; with every model failing start rejects, unless model control is on (then up, not ready)', async () => {
    const one = await setUp(['good', 'broken'], { failLoad: 'broken' });
    await one.backend.start(one.engine);
    expect(one.backend.modelState('broken')).toEqual({ state: 'UNAVAILABLE', reason: 'service broken: operator 1 file <…>/op1.onnx does not load: protobuf parsing failed' });
    expect(one.backend.isReady()).toBe(true);
    await one.backend.shutdown(1000);

    const all = await setUp(['broken'], { failLoad: 'broken' });
    await expect(all.backend.start(all.engine)).rejects.toThrow(/no model could be loaded: broken: service broken: operator 1 file/);
    await all.backend.shutdown(1000);

    const control: ModelControl = { resolve: () => Promise.reject(new Error('not used')) };
    const up = await setUp(['broken'], { failLoad: 'broken', modelControl: control });
    await up.backend.start(up.engine);
    expect(up.backend.isReady()).toBe(false);
    expect(up.backend.isLive()).toBe(true);
    expect(await code(up.backend.loadModel('broken', undefined))).toMatch(/^device_failure: load 'broken': the model failed to load and is UNAVAILABLE: service broken: operator 1/);
    await up.backend.shutdown(1000);
  });

  it('unload lets the queued requests of the model finish, then refuses new ones; concurrent loads run one after the other', async () => {
    const control: ModelControl = { resolve: () => Promise.reject(new Error('not used')) };
    const { backend, engine, sim } = await setUp(['a', 'b'], { modelControl: control });
    await backend.start(engine);
    const queued = Array.from({ length: 8 }, () => code(backend.infer(request('a'))));
    const unloading = backend.unloadModel('a', undefined);
    expect(backend.modelState('a')?.state).toBe('UNLOADING');
    expect(await code(backend.infer(request('a')))).toMatch(/^not_ready: not_ready: model 'a' is UNLOADING: unloaded/);
    expect(await Promise.all(queued)).toEqual(new Array(8).fill('ok'));
    await unloading;
    expect(backend.modelState('a')).toEqual({ state: 'UNAVAILABLE', reason: 'unloaded' });
    expect(sim.services).toEqual(['b']);
    expect(await code(backend.infer(request('a')))).toMatch(/^model_not_found: model 'a' is unloaded/);
    expect(await code(backend.infer(request('b')))).toBe('ok');

    const loads = await Promise.all([code(backend.loadModel('a', undefined)), code(backend.loadModel('a', undefined)), code(backend.loadModel('b', undefined))]);
    expect(loads).toEqual(['ok', 'ok', 'ok']);
    expect(backend.repositoryIndex().map((m) => m.state)).toEqual(['READY', 'READY']);
    expect(sim.services.toSorted()).toEqual(['a', 'b']);
    expect(await code(backend.infer(request('a')))).toBe('ok');
    // a model of the config takes no parameters.config; names are checked before anything else
    expect(await code(backend.loadModel('a', { config: '{}' }))).toMatch(/^bad_request: load 'a': parameters\.config: 'a' is a model of the config file/);
    expect(await code(backend.loadModel('../a', undefined))).toMatch(/^bad_request: load: model name "\.\.\/a" is not a model name/);
    // 'stats' would shadow GET /v2/models/stats (statistics): refused, with or without parameters.config
    expect(await code(backend.loadModel('stats', undefined))).toMatch(/^bad_request: load: model name 'stats' is reserved \(GET \/v2\/models\/stats is the statistics of every model\)/);
    expect(await code(backend.loadModel('stats', { config: '{"model":"resnet50-small","qosTargetMs":50}' }))).toMatch(/^bad_request: load: model name 'stats' is reserved/);
    expect(backend.repositoryIndex().map((m) => m.name)).toEqual(['a', 'b']);
    expect(await code(backend.loadModel('new', undefined))).toMatch(/^bad_request: load 'new': no such model in the config; give its service settings as parameters\.config/);
    expect(await code(backend.unloadModel('nope', undefined))).toMatch(/^model_not_found: unload 'nope': no such model/);
    await backend.shutdown(1000);
  });
});
