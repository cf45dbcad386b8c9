/**
 * The `:interference` part of a sim device id (`device/sim/profiles.ts`, `cost-model.ts`
 * `simConstantsFor`): the A100 with the H200 fit's interference term (weighted SM sharing,
 * `kernelGrain`). It parses into a canonical id of its own, changes only `kernelGrain`, and
 * changes how overlapped groups run, not how a segment alone runs.
 */
import { describe, expect, it } from 'vitest';
import { driveUntilSettled, VirtualClock } from '../src/clock/index.ts';
import { DEFAULT_SIM_CONSTANTS, H200_GRAPH_SIM_CONSTANTS, parseSimDeviceId, SimDevice, simConstantsFor, simModelFingerprint } from '../src/device/sim/index.ts';
import { artifactAt } from '../src/model/artifact.ts';
import { ModelRepository } from '../src/model/repository.ts';

describe('sim device ids with :interference', () => {
  it('parses into its own canonical id, before the drift and the mode; refused twice and on Hopper', () => {
    expect(parseSimDeviceId('sim:a100:interference')).toMatchObject({ id: 'sim:a100:interference', interference: true, mode: 'eager' });
    expect(parseSimDeviceId('sim:a100:mig-2g:interference:drift-1.5x@10ms:graph')).toMatchObject({ id: 'sim:a100:mig-2g:interference:graph', interference: true, drift: { factor: 1.5, atMs: 10 } });
    expect(parseSimDeviceId('sim:a100').interference).toBeUndefined();
    expect(() => parseSimDeviceId('sim:a100:interference:interference')).toThrow(/second interference part/);
    expect(() => parseSimDeviceId('sim:h200:interference:graph')).toThrow(/have one already/);
  });

  it('takes kernelGrain from the H200 fit and nothing else; the fingerprint (cache key) differs', () => {
    const c = simConstantsFor(parseSimDeviceId('sim:a100').profile, 'eager', true);
    expect(c).toEqual({ ...DEFAULT_SIM_CONSTANTS, kernelGrain: H200_GRAPH_SIM_CONSTANTS.kernelGrain });
    expect(c.kernelGrain).toBeGreaterThan(0);
    expect(simModelFingerprint('sim:a100:interference')).not.toEqual(simModelFingerprint('sim:a100'));
  });

  it('a segment alone takes the same time; two overlapped ones do not', async () => {
    const repo = new ModelRepository();
    const specs = [await repo.zooSpec('resnet50'), await repo.zooSpec('vgg16')];
    const run = async (id: string, which: number[]): Promise<number[]> => {
      const clock = new VirtualClock();
      const device = await SimDevice.create({ clock, id, noiseCv: 0 });
      await device.load(specs.map((s) => ({ name: s.name, model: artifactAt('/nonexistent', s) })));
      const r = await driveUntilSettled(clock, device.runGroup(which.map((i) => ({ service: specs[i]!.name, queryId: `q${i}`, start: 0, end: specs[i]!.operators.length, batchSize: 16, seqLen: 0, input: { kind: 'synthetic' as const, seed: 1 } }))));
      await device.close();
      return r.segments.map((x) => (x.ok ? x.latencyMs : NaN));
    };
    expect(await run('sim:a100:interference', [0])).toEqual(await run('sim:a100', [0]));
    const fair = await run('sim:a100', [0, 1]);
    const weighted = await run('sim:a100:interference', [0, 1]);
    expect(weighted).not.toEqual(fair);
  }, 60_000);
});
