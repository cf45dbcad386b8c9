/**
 * device/ort with a thread count per segment (docs/threads.md): sessions per (operator, thread
 * count) created on first use and never recreated, preloaded counts, the same outputs at 1 and
 * 2 threads, and validation of the field. Small zoo variants (test/helpers/small-variants.ts).
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DeviceService, Segment } from '../src/device/device.ts';
import { OrtDevice } from '../src/device/ort/index.ts';
import { SimDevice } from '../src/device/sim/index.ts';
import { VirtualClock } from '../src/clock/index.ts';
import { driveUntilSettled } from '../src/clock/drive.ts';
import { ModelRepository } from '../src/model/repository.ts';
import { artifactAt } from '../src/model/artifact.ts';
import { maxAbsDiff, okResult, randomInputs } from './device/conformance.ts';
import { SMALL_VARIANTS } from './helpers/small-variants.ts';

describe('ort:cpu with intra-op threads per segment', () => {
  let cacheDir: string;
  let device: OrtDevice;
  let resnet: DeviceService;
  let bert: DeviceService;

  beforeAll(async () => {
    cacheDir = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-ortthreads-'));
    const repo = new ModelRepository({ cacheDir });
    resnet = { name: 'resnet50', model: (await repo.zooArtifact('resnet50', SMALL_VARIANTS.resnet50)).artifact };
    bert = { name: 'bert', model: (await repo.zooArtifact('bert', SMALL_VARIANTS.bert)).artifact };
    // maxIntraOpThreads 2 whatever this machine has: the test does not depend on the core count.
    device = await OrtDevice.create({ intraOpNumThreads: 1, maxIntraOpThreads: 2 });
    await device.load([resnet, bert]);
  });
  afterAll(async () => {
    await device.close();
    await fs.rm(cacheDir, { recursive: true, force: true });
  });

  const whole = (svc: DeviceService, queryId: string, threads: number | undefined, seed: number): Segment => {
    const spec = svc.model.spec;
    const seqLen = spec.dynamicAxes.seq === undefined ? 0 : 16;
    return {
      service: svc.name,
      queryId,
      start: 0,
      end: spec.operators.length,
      batchSize: 2,
      seqLen,
      input: { kind: 'tensors', tensors: randomInputs(spec, 2, seqLen, seed) },
      ...(threads === undefined ? {} : { intraOpThreads: threads }),
    };
  };

  it('outputs at 1 and 2 intra-op threads agree (within float32 reduction-order noise)', async () => {
    for (const svc of [resnet, bert]) {
      const one = okResult((await device.runGroup([whole(svc, `${svc.name}-t1`, 1, 7)])).segments[0]);
      const two = okResult((await device.runGroup([whole(svc, `${svc.name}-t2`, 2, 7)])).segments[0]);
      const dflt = okResult((await device.runGroup([whole(svc, `${svc.name}-td`, undefined, 7)])).segments[0]);
      const { diff, scale } = maxAbsDiff(two.outputs!, one.outputs!);
      // A different thread count splits reductions differently: float32 rounding, relative 1e-4.
      expect(diff).toBeLessThanOrEqual(1e-4 * Math.max(scale, 1));
      // The default (intraOpNumThreads 1) is the 1-thread session itself: bit for bit.
      expect(maxAbsDiff(dflt.outputs!, one.outputs!).diff).toBe(0);
    }
  });

  it('creates a session per thread count on first use and reuses it (never recreated)', async () => {
    const n = resnet.model.spec.operators.length;
    // A fresh device: only the default sessions exist after load.
    const fresh = await OrtDevice.create({ intraOpNumThreads: 1, maxIntraOpThreads: 2 });
    try {
      await fresh.load([resnet]);
      expect(await fresh.executorSessionThreads('resnet50')).toEqual(Array.from({ length: n }, () => [1]));
      // A segment [0, 3) at 2 threads creates sessions for those operators only.
      const part: Segment = { ...whole(resnet, 'q-part', 2, 1), end: 3 };
      okResult((await fresh.runGroup([part])).segments[0]);
      await fresh.releaseQuery('resnet50', 'q-part');
      const after = await fresh.executorSessionThreads('resnet50');
      expect(after.slice(0, 3)).toEqual([[1, 2], [1, 2], [1, 2]]);
      expect(after.slice(3)).toEqual(Array.from({ length: n - 3 }, () => [1]));
      // Used again, and with a mix of counts across segments of one query: still one session per count.
      for (let i = 0; i < 3; i++) okResult((await fresh.runGroup([whole(resnet, `q-again-${i}`, 2, i)])).segments[0]);
      okResult((await fresh.runGroup([{ ...whole(resnet, 'q-mix', 1, 3), end: 5 }])).segments[0]);
      okResult((await fresh.runGroup([{ ...whole(resnet, 'q-mix', 2, 3), start: 5, input: { kind: 'resume' } }])).segments[0]);
      expect(await fresh.executorSessionThreads('resnet50')).toEqual(Array.from({ length: n }, () => [1, 2]));
    } finally {
      await fresh.close();
    }
  });

  it('preloadIntraOpThreads creates the sessions at load', async () => {
    const pre = await OrtDevice.create({ intraOpNumThreads: 1, maxIntraOpThreads: 2, preloadIntraOpThreads: [2] });
    try {
      await pre.load([bert]);
      expect(await pre.executorSessionThreads('bert')).toEqual(Array.from({ length: bert.model.spec.operators.length }, () => [1, 2]));
    } finally {
      await pre.close();
    }
  });

  it.each([[0], [1.5], [3], [Number.NaN]])('intraOpThreads %s is a bad_request naming the field, before anything runs', async (threads) => {
    await expect(device.runGroup([whole(resnet, `bad-${threads}`, threads, 1)])).rejects.toMatchObject({
      code: 'bad_request',
      message: expect.stringMatching(/group\[0\]\.intraOpThreads .* must be an integer in \[1, 2\]/),
    });
  });

  it('rejects bad options naming them', async () => {
    await expect(OrtDevice.create({ maxIntraOpThreads: 0 })).rejects.toThrow(/maxIntraOpThreads/);
    await expect(OrtDevice.create({ maxIntraOpThreads: 2, preloadIntraOpThreads: [3] })).rejects.toThrow(/preloadIntraOpThreads/);
  });
});

describe('sim devices have no thread model', () => {
  it('accept and ignore intraOpThreads, and validate it', async () => {
    const cacheDir = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-simthreads-'));
    try {
      const repo = new ModelRepository({ cacheDir });
      const spec = (await repo.zooArtifact('resnet50', SMALL_VARIANTS.resnet50)).artifact.spec;
      const clock = new VirtualClock();
      const device = await SimDevice.create({ clock, id: 'sim:a100', noiseCv: 0 });
      await device.load([{ name: 'r', model: artifactAt('/nonexistent', spec) }]);
      const seg = (id: string, threads?: number): Segment => ({ service: 'r', queryId: id, start: 0, end: spec.operators.length, batchSize: 1, seqLen: 0, input: { kind: 'synthetic', seed: 1 }, ...(threads === undefined ? {} : { intraOpThreads: threads }) });
      const a = await driveUntilSettled(clock, device.runGroup([seg('a')]));
      const b = await driveUntilSettled(clock, device.runGroup([seg('b', 4)]));
      // Equal up to the rounding of clock instants (the runs start at different virtual times).
      expect(okResult(b.segments[0]).latencyMs).toBeCloseTo(okResult(a.segments[0]).latencyMs, 9);
      await expect(device.runGroup([seg('c', 0)])).rejects.toMatchObject({ code: 'bad_request', message: expect.stringMatching(/intraOpThreads/) });
      await device.close();
    } finally {
      await fs.rm(cacheDir, { recursive: true, force: true });
    }
  });
});
