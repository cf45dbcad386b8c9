/**
 * Bounded executor memory (docs/benchmarks.md, executor memory) on device/ort: every executor reports its resident
 * set size (`residentBytes`), `executorMemoryLimitMb` restarts an executor that exceeds it (the
 * segments it was running fail `device_failure` naming the limit, kept states are lost, later
 * segments run on the fresh executor), a limit below what a model needs after loading fails
 * `load`, and the gauge `abacus_executor_rss_bytes{model}` reaches /metrics through the runtime
 * backend. The leak is injected (`{ holdMemoryBytes }`: the child allocates and keeps that many
 * bytes), so nothing depends on how ORT's allocator behaves on this machine; the in-flight
 * segment is held in flight by an injected stall, so no timing matters.
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WallClock } from '../src/clock/index.ts';
import type { DeviceService } from '../src/device/device.ts';
import { OrtDevice } from '../src/device/ort/index.ts';
import { DeviceFailureError } from '../src/errors.ts';
import { createController } from '../src/schedule/index.ts';
import { RuntimeBackend } from '../src/serve/backend.ts';
import { ServeMetrics } from '../src/serve/metrics.ts';
import { okResult, seg } from './device/conformance.ts';
import { buildSkipNet, makeFixtureDir } from './fixtures/tiny-models.ts';
import { fixedPredictor } from './helpers/fixed-predictor.ts';

const MIB = 1024 * 1024;
/** Room above the executor's RSS after loading that running a few tiny segments never fills. */
const HEADROOM_MIB = 64;
/** The injected leak: well above the headroom. */
const LEAK_BYTES = 160 * MIB;
const synth = (seed: number) => ({ kind: 'synthetic', seed }) as const;

describe('OrtDevice executor memory (onnxruntime-node, cpu)', () => {
  let fixtures: { dir: string; cleanup: () => Promise<void> };
  let cnn: DeviceService;
  const devices: OrtDevice[] = [];
  const track = (d: OrtDevice): OrtDevice => {
    devices.push(d);
    return d;
  };

  beforeAll(async () => {
    fixtures = await makeFixtureDir();
    cnn = { name: 'cnn', model: await buildSkipNet(path.join(fixtures.dir, 'cnn')) };
  });
  afterAll(async () => {
    await Promise.all(devices.map((d) => d.close()));
    await fixtures?.cleanup();
  });

  it('rejects a bad executorMemoryLimitMb naming the option', async () => {
    await expect(OrtDevice.create({ executorMemoryLimitMb: -1 })).rejects.toThrow(/OrtDeviceOptions\.executorMemoryLimitMb -1 must be a number of MiB in \[0, 1048576\]/);
    await expect(OrtDevice.create({ executorMemoryLimitMb: Number.NaN })).rejects.toBeInstanceOf(RangeError);
  });

  it('ORT arena and memory pattern can be turned off (the executor still serves); a non-boolean is refused', async () => {
    await expect(OrtDevice.create({ cpuMemArena: 'no' as unknown as boolean })).rejects.toThrow('OrtDeviceOptions.cpuMemArena must be a boolean');
    await expect(OrtDevice.create({ gcEverySegments: -1 })).rejects.toThrow('OrtDeviceOptions.gcEverySegments -1 must be an integer in [0, 1000000]');
    const device = track(await OrtDevice.create({ cpuMemArena: false, memPattern: false }));
    await device.load([cnn]);
    okResult((await device.runGroup([seg(cnn, 'no-arena', 0, 4, synth(9))])).segments[0]);
  });

  it('a limit below what the executor needs after loading fails load, naming the limit', async () => {
    const device = track(await OrtDevice.create({ executorMemoryLimitMb: 1, loadTimeoutMs: 120_000 }));
    const p = device.load([cnn]);
    await expect(p).rejects.toBeInstanceOf(DeviceFailureError);
    await expect(p).rejects.toThrow(/executor of service cnn uses \d+\.\d MB right after loading, above its memory limit of 1\.0 MB \(executorMemoryLimitMb\)/);
    expect(device.services).toEqual([]);
  });

  it('over the limit: the running segment fails device_failure, kept state is lost, the restarted executor serves', async () => {
    // the RSS of an executor of this model right after loading, from a device without a limit
    const probe = await OrtDevice.create();
    let loadedRss: number;
    try {
      await probe.load([cnn]);
      loadedRss = probe.residentBytes().get('cnn')!;
      expect(loadedRss).toBeGreaterThan(10 * MIB); // a Node process with onnxruntime loaded
    } finally {
      await probe.close();
    }
    const limitMb = Math.ceil(loadedRss / MIB) + HEADROOM_MIB;
    const device = track(await OrtDevice.create({ executorMemoryLimitMb: limitMb }));
    await device.load([cnn]);
    okResult((await device.runGroup([seg(cnn, 'warm', 0, 4, synth(1))])).segments[0]);
    expect(device.residentBytes().get('cnn')).toBeLessThan(limitMb * MIB);
    // a query whose state the executor keeps between segments
    okResult((await device.runGroup([seg(cnn, 'kept', 0, 2, synth(2))])).segments[0]);

    await device.injectExecutorFault('cnn', { holdMemoryBytes: LEAK_BYTES });
    // `over` reports the RSS above the limit; `stalled`, queued behind it, is held in flight by
    // a stall armed between them (messages reach the executor in the order sent)
    const over = device.runGroup([seg(cnn, 'over', 0, 4, synth(3))]);
    const armed = device.injectExecutorFault('cnn', 'stall-in-next-segment');
    const stalled = device.runGroup([seg(cnn, 'stalled', 0, 4, synth(4))]);
    await armed;
    okResult((await over).segments[0]);
    const inFlight = (await stalled).segments[0]!;
    expect(inFlight.ok).toBe(false);
    if (inFlight.ok) return;
    expect(inFlight.error).toBeInstanceOf(DeviceFailureError);
    expect(inFlight.error.message).toMatch(new RegExp(`executor of service cnn was killed \\(SIGKILL\\) and is restarting while query stalled was queued or running: its resident memory \\d+\\.\\d MB exceeded the limit of ${limitMb}\\.0 MB \\(executorMemoryLimitMb\\)`));

    // the kept state went with the old executor
    const resumed = (await device.runGroup([seg(cnn, 'kept', 2, 4, { kind: 'resume' })])).segments[0]!;
    expect(resumed.ok).toBe(false);
    if (!resumed.ok) expect(resumed.error.message).toMatch(/cannot resume at operator 2, its state was lost \(executor of service cnn was killed: its resident memory/);
    // later queries run on the restarted executor, below the limit again
    okResult((await device.runGroup([seg(cnn, 'after', 0, 4, synth(5))])).segments[0]);
    expect(device.executorRestarts('cnn')).toBe(1);
    expect(device.executorMemoryRestarts('cnn')).toBe(1);
    expect(device.residentBytes().get('cnn')).toBeLessThan(limitMb * MIB);
  });

  it('abacus_executor_rss_bytes{model} in /metrics through the runtime backend', async () => {
    const device = track(await OrtDevice.create());
    await device.load([cnn]);
    const metrics = new ServeMetrics({ models: ['cnn'], processMetrics: false });
    const backend = new RuntimeBackend({ models: [{ name: 'cnn', spec: cnn.model.spec, qosTargetMs: 60_000, maxQosMs: 60_000, batchSizes: [1], maxQueueLength: 10 }], platform: 'onnxruntime_onnx', metrics });
    const before = await metrics.text();
    expect(before).toContain('# TYPE abacus_executor_rss_bytes gauge');
    expect(before).not.toMatch(/^abacus_executor_rss_bytes\{/m); // not started: no device yet
    await backend.start({ clock: new WallClock(), device, controller: createController('fcfs', {}, fixedPredictor([cnn.model.spec.name], 1)) });
    try {
      const text = await metrics.text();
      const value = Number(/^abacus_executor_rss_bytes\{model="cnn"\} (\d+)$/m.exec(text)?.[1]);
      expect(value).toBe(device.residentBytes().get('cnn'));
      expect(value).toBeGreaterThan(10 * MIB);
    } finally {
      await backend.shutdown(5000);
    }
  });
});
