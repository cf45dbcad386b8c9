/**
 * The MIG experiment's devices (reproduce/mig.ts over device/sim profiles): each id parses to
 * the A100-SXM4-40GB instance NVIDIA's MIG User Guide ("Supported MIG Profiles") lists —
 * k × 14 SMs and 1, 2 or 4 eighths of the memory and its bandwidth for 1g.5gb, 2g.10gb,
 * 4g.20gb — and a bandwidth-bound query is never faster on a smaller slice.
 */
import { describe, expect, it } from 'vitest';
import { driveUntilSettled, VirtualClock } from '../src/clock/index.ts';
import { parseSimDeviceId, SimDevice } from '../src/device/sim/index.ts';
import { artifactAt } from '../src/model/artifact.ts';
import { ModelRepository } from '../src/model/repository.ts';
import { MIG_DEVICES, MIG_PAIRS, runMig } from '../src/reproduce/mig.ts';

const GIB = 1024 ** 3;

describe('MIG devices', () => {
  it('match the MIG User Guide A100-40GB profiles (SMs, memory and bandwidth fractions)', () => {
    // golden values: 14 SMs per compute slice; memory slices of 5 GiB and 1555/8 GB/s
    const expected: Record<string, { sms: number; eighths: number }> = { '1g': { sms: 14, eighths: 1 }, '2g': { sms: 28, eighths: 2 }, '4g': { sms: 56, eighths: 4 }, whole: { sms: 108, eighths: 8 } };
    for (const d of MIG_DEVICES) {
      const { id, profile } = parseSimDeviceId(d.id);
      expect(id).toBe(d.id);
      const e = expected[d.label]!;
      expect(profile.sms).toBe(e.sms);
      expect(profile.memoryBytes).toBe(5 * GIB * e.eighths);
      expect(profile.memoryBandwidthGBs).toBeCloseTo((1555 * e.eighths) / 8, 9);
      expect(profile.peakTflops.fp16).toBeCloseTo((312 * e.sms) / 108, 9);
    }
    expect(MIG_DEVICES.map((d) => d.perGpu)).toEqual([7, 3, 1, 1]);
  });

  it('a VGG-16 query of batch 16 is slower on each smaller slice', async () => {
    const spec = await new ModelRepository().zooSpec('vgg16');
    const ms: number[] = [];
    for (const d of MIG_DEVICES) {
      const clock = new VirtualClock();
      const device = await SimDevice.create({ clock, id: d.id, noiseCv: 0 });
      await device.load([{ name: 'vgg16', model: artifactAt('/nonexistent', spec) }]);
      const r = await driveUntilSettled(clock, device.runGroup([{ service: 'vgg16', queryId: 'q', start: 0, end: spec.operators.length, batchSize: 16, seqLen: 0, input: { kind: 'synthetic', seed: 1 } }]));
      ms.push(r.groupLatencyMs);
      await device.close();
    }
    // 1g > 2g > 4g > whole
    for (let i = 1; i < ms.length; i++) expect(ms[i - 1]!).toBeGreaterThan(ms[i]!);
  }, 60_000);

  it('runMig names an unknown pair', async () => {
    await expect(runMig([], () => Promise.reject(new Error('unused')), { pairs: ['a+b'] })).rejects.toThrow(/MIG pair 'a\+b'/);
    expect(MIG_PAIRS.length).toBeGreaterThanOrEqual(2);
  });
});
