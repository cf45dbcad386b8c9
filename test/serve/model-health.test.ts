/**
 * Model state follows executor health (`Device.watchHealth`, `serve/model-states.ts`): a READY
 * model whose executor crashes is UNAVAILABLE with the reason until the device reports it up,
 * the server readiness rule (strict by default), `abacus_executor_restarts_total` and
 * `abacus_model_state`, the one retry of a query caught by a crash, and reasons without paths.
 * On a sim:a100 device wrapped to crash on demand.
 */
import { describe, expect, it } from 'vitest';
import { WallClock } from '../../src/clock/index.ts';
import type { Device, GroupResult, Segment, SegmentResult, ServiceHealthEvent } from '../../src/device/device.ts';
import { SimDevice } from '../../src/device/sim/index.ts';
import { DeviceFailureError } from '../../src/errors.ts';
import { artifactAt } from '../../src/model/artifact.ts';
import { resolveModelSpec } from '../../src/model/catalog.ts';
import { ModelRepository } from '../../src/model/repository.ts';
import { createController } from '../../src/schedule/index.ts';
import { RuntimeBackend, type BackendEngine, type ServedModel } from '../../src/serve/backend.ts';
import type { InferRequest, ServeError } from '../../src/serve/inference.ts';
import { ServeMetrics } from '../../src/serve/metrics.ts';
import { redactPaths } from '../../src/serve/model-states.ts';
import { fixedPredictor } from '../helpers/fixed-predictor.ts';

/** A sim device whose service `crashing` can crash: its next segment fails and the device reports it down. */
class CrashingDevice implements Device {
  readonly id: string;
  private readonly listeners = new Set<(e: ServiceHealthEvent) => void>();
  private restarts = 0;
  /** Crashes still to happen at the next segments of `crashing`. */
  crashNext = 0;
  constructor(
    private readonly inner: SimDevice,
    private readonly crashing: string,
  ) {
    this.id = inner.id;
  }
  load = (s: Parameters<Device['load']>[0]): Promise<void> => this.inner.load(s);
  unload = (name: string): Promise<void> => this.inner.unload(name);
  releaseQuery = (s: string, q: string): Promise<void> => this.inner.releaseQuery(s, q);
  close = (): Promise<void> => this.inner.close();
  watchHealth(listener: (e: ServiceHealthEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
  emit(up: boolean, reason = ''): void {
    for (const l of this.listeners) l({ service: this.crashing, up, reason, restarts: this.restarts });
  }
  async runGroup(group: readonly Segment[]): Promise<GroupResult> {
    if (this.crashNext > 0 && group.some((s) => s.service === this.crashing)) {
      this.crashNext--;
      this.restarts++;
      this.emit(false, 'executor ended unexpectedly (signal SIGKILL); restarting');
      const segments = group.map((s): SegmentResult => ({ ok: false, queryId: s.queryId, service: s.service, error: new DeviceFailureError(`executor of service ${s.service} ended (signal SIGKILL) while running query ${s.queryId}; executor output (tail): at /srv/private/op1.onnx`) }));
      return { groupLatencyMs: 0, segments };
    }
    return this.inner.runGroup(group);
  }
}

async function setUp(options: { strictReadiness?: boolean; qosTargetMs?: number; modelControl?: boolean } = {}) {
  const spec = await resolveModelSpec(new ModelRepository(), 'resnet50-small');
  const models: ServedModel[] = ['a', 'b'].map((name) => ({ name, spec, qosTargetMs: options.qosTargetMs ?? 5000, maxQosMs: 50_000, batchSizes: [1], maxQueueLength: 100 }));
  const clock = new WallClock();
  const device = new CrashingDevice(await SimDevice.create({ clock, id: 'sim:a100', seed: 1 }), 'a');
  const metrics = new ServeMetrics({ models: ['a', 'b'], processMetrics: false });
  const backend = new RuntimeBackend({
    models,
    platform: 'abacus_sim',
    metrics,
    ...(options.strictReadiness === undefined ? {} : { strictReadiness: options.strictReadiness }),
    ...(options.modelControl === true ? { modelControl: { resolve: () => Promise.reject(new Error('no new models here')) } } : {}),
  });
  const engine: BackendEngine = {
    clock,
    device,
    controller: createController('fcfs', { drop: false }, fixedPredictor([spec.name], 0.05)),
    loadModel: async (name) => {
      await device.load([{ name, model: artifactAt('/nonexistent', spec) }]);
    },
    unloadModel: (name) => device.unload(name),
  };
  await backend.start(engine);
  return { backend, device, metrics };
}

/** Poll `cond` every 10 ms until it holds (the test's own timeout bounds the wait). */
async function until(cond: () => boolean): Promise<void> {
  while (!cond()) await new Promise((r) => setTimeout(r, 10));
}

const request = (modelName: string): InferRequest => ({ modelName, requestId: 't', inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3, 64, 64], data: { kind: 'raw', bytes: Buffer.alloc(3 * 64 * 64 * 4) } }] });

describe('model state follows executor health', () => {
  it('READY → UNAVAILABLE (reason) → READY; strict readiness follows; restarts and states in /metrics', async () => {
    const { backend, device, metrics } = await setUp();
    expect(backend.modelReady('a')).toBe(true);
    expect(backend.isReady()).toBe(true);
    device.emit(false, 'executor ended unexpectedly (signal SIGKILL) at /srv/secret/place/x.onnx; restarting');
    expect(backend.modelState('a')?.state).toBe('UNAVAILABLE');
    expect(backend.modelState('a')?.reason).toMatch(/executor is down and restarting by itself: executor ended unexpectedly \(signal SIGKILL\) at <…>\/x\.onnx/);
    expect(backend.modelReady('a')).toBe(false);
    expect(backend.modelReady('b')).toBe(true);
    expect(backend.isReady()).toBe(false); // strict: a model that should be served is down
    await expect(backend.infer(request('a'))).rejects.toMatchObject({ code: 'not_ready' });
    expect(backend.repositoryIndex().find((m) => m.name === 'a')?.state).toBe('UNAVAILABLE');
    const text = await metrics.text();
    expect(text).toMatch(/abacus_model_state\{model="a",state="UNAVAILABLE"\} 1/);
    expect(text).toMatch(/abacus_model_state\{model="a",state="READY"\} 0/);
    expect(text).toMatch(/abacus_ready 0/);
    device.emit(true);
    expect(backend.modelState('a')).toEqual({ state: 'READY', reason: '' });
    expect(backend.isReady()).toBe(true);
    await backend.infer(request('a'));
    await backend.shutdown(1000);
  });

  it('without strict readiness the server stays ready while another model is READY', async () => {
    const { backend, device } = await setUp({ strictReadiness: false });
    device.emit(false, 'down');
    expect(backend.modelReady('a')).toBe(false);
    expect(backend.isReady()).toBe(true);
    await backend.shutdown(1000);
  });

  it('a query caught by a crash is retried once when the executor is back; a second crash is its answer', async () => {
    const { backend, device, metrics } = await setUp();
    device.crashNext = 1;
    const answer = backend.infer(request('a'));
    await until(() => backend.modelState('a')?.state === 'UNAVAILABLE');
    device.emit(true);
    expect((await answer).modelName).toBe('a');
    device.crashNext = 2;
    const second = backend.infer(request('a'));
    await until(() => backend.modelState('a')?.state === 'UNAVAILABLE');
    device.emit(true);
    const e = await second.catch((err: unknown) => err as ServeError);
    expect(e).toMatchObject({ code: 'device_failure' });
    expect((e as ServeError).message).toMatch(/executor output \(tail\): at <…>\/op1\.onnx/); // no server folder in a 503 body
    device.emit(true);
    const text = await metrics.text();
    expect(text).toMatch(/abacus_executor_restarts_total\{model="a"\} 3/);
    expect(text).toMatch(/abacus_executor_restarts_total\{model="b"\} 0/);
    expect(text).toMatch(/abacus_requests_total\{model="a",outcome="success"\} 1/);
    expect(text).toMatch(/abacus_requests_total\{model="a",outcome="device_failure"\} 1/);
    await backend.shutdown(1000);
  });

  it('no retry when the executor is not back within the query\'s QoS target, nor once the server shuts down', async () => {
    const { backend, device } = await setUp({ qosTargetMs: 200 });
    device.crashNext = 1;
    await expect(backend.infer(request('a'))).rejects.toMatchObject({ code: 'device_failure' });
    device.emit(true);
    device.crashNext = 1;
    const answer = backend.infer(request('b')); // b does not crash: a control
    expect((await answer).modelName).toBe('b');
    const caught = backend.infer(request('a'));
    await until(() => backend.modelState('a')?.state === 'UNAVAILABLE');
    const down = backend.shutdown(1000);
    await expect(caught).rejects.toMatchObject({ code: expect.stringMatching(/^(device_failure|not_ready)$/) as unknown });
    await down;
  });

  it('a model down while its executor restarts can be unloaded (its executor ends, the server is ready) and loaded again', async () => {
    const { backend, device } = await setUp({ modelControl: true });
    device.emit(false, 'executor ended unexpectedly (signal SIGKILL); restarting');
    expect(backend.isReady()).toBe(false);
    await backend.unloadModel('a', undefined);
    expect(backend.modelState('a')).toEqual({ state: 'UNAVAILABLE', reason: 'unloaded' });
    expect(backend.isReady()).toBe(true); // an unloaded model is not one that should be served
    device.emit(true); // a late report of the old executor changes nothing
    expect(backend.modelState('a')?.state).toBe('UNAVAILABLE');
    await backend.loadModel('a', undefined);
    expect(backend.modelState('a')?.state).toBe('READY');
    expect((await backend.infer(request('a'))).modelName).toBe('a');
    device.emit(false, 'down again');
    await backend.loadModel('a', undefined); // a re-load takes the down model off first
    expect(backend.modelState('a')?.state).toBe('READY');
    await backend.shutdown(1000);
  });

  it('reasons name no absolute path: private folders by their label, others by their last segment', () => {
    const priv = [{ path: '/home/u/.cache/models', label: '<model cache>' }];
    expect(redactPaths('operator 1 file /home/u/.cache/models/m-1/op1.onnx does not load', priv)).toBe('operator 1 file <model cache>/m-1/op1.onnx does not load');
    expect(redactPaths('re-import it with `abacus models import /home/u/in/vad.onnx --name v`', priv)).toBe('re-import it with `abacus models import <…>/vad.onnx --name v`');
    expect(redactPaths("load it: POST /v2/repository/models/a/load ('/tmp/x/y')", priv)).toBe("load it: POST /v2/repository/models/a/load ('<…>/y')");
  });
});
