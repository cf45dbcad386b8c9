/**
 * Drift on the simulator (docs/devices.md): a step change of speed from `atMs` on, as a
 * `SimDevice.create` option and as a device id part `drift-<factor>x@<ms>ms`. Golden values
 * are properties of the mechanism, not numbers from a run: with noise 0, every time of a solo
 * segment's timeline scales with the factor, so a segment started after the step takes exactly
 * factor × its latency before (relative tolerance 1e-9: floating-point sums over ≤ 26
 * operators); dispatch is not scaled; a segment straddling the step lies strictly in between.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { VirtualClock } from '../src/clock/index.ts';
import type { ExperimentJson } from '../src/cli/experiment.ts';
import type { DeviceService, Segment } from '../src/device/device.ts';
import { SimDevice, parseSimDeviceId, type SimDeviceOptions } from '../src/device/sim/index.ts';
import { artifactAt } from '../src/model/artifact.ts';
import { ModelRepository } from '../src/model/repository.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import { cliSandbox } from './helpers/cli.ts';

/** Relative tolerance of "exactly factor × as long" (floating-point rounding only). */
const REL_TOL = 1e-9;
const expectRel = (got: number, want: number): void => expect(Math.abs(got / want - 1), `${got} vs ${want}`).toBeLessThanOrEqual(REL_TOL);

const MODELS = ['resnet50', 'bert'] as const;
type Name = (typeof MODELS)[number];
const specs = new Map<Name, ModelSpec>();
beforeAll(async () => {
  const repo = new ModelRepository();
  for (const name of MODELS) specs.set(name, await repo.zooSpec(name));
});
const service = (name: Name): DeviceService => ({ name, model: artifactAt('/nonexistent', specs.get(name)!) });

let qn = 0;
const whole = (name: Name, batchSize = 1): Segment => ({ service: name, queryId: `q${++qn}`, start: 0, end: specs.get(name)!.operators.length, batchSize, seqLen: name === 'bert' ? 64 : 0, input: { kind: 'synthetic', seed: qn } });

async function device(options: Partial<SimDeviceOptions> = {}): Promise<{ device: SimDevice; clock: VirtualClock }> {
  const clock = new VirtualClock();
  const d = await SimDevice.create({ clock, noiseCv: 0, ...options });
  await d.load(MODELS.map(service));
  return { device: d, clock };
}

/** Run `name` alone starting at `atMs` (virtual time); returns its segment latency and group latency, ms. */
async function soloAt(d: SimDevice, clock: VirtualClock, name: Name, atMs: number, batchSize = 1): Promise<{ latencyMs: number; groupLatencyMs: number }> {
  await clock.runUntil(atMs);
  const p = d.runGroup([whole(name, batchSize)]);
  await clock.run();
  const r = await p;
  const s = r.segments[0]!;
  if (!s.ok) throw new Error(s.error.message);
  return { latencyMs: s.latencyMs, groupLatencyMs: r.groupLatencyMs };
}

describe('sim drift: a step change of speed', () => {
  for (const id of ['sim:a100', 'sim:a100:graph', 'sim:h200:graph']) {
    for (const name of MODELS) {
      it(`${id} ${name}: a solo segment after the step takes factor × as long, before it as without drift`, async () => {
        const plain = await device({ id });
        const L = (await soloAt(plain.device, plain.clock, name, 0, 4)).latencyMs;
        for (const factor of [1.5, 0.5]) {
          const { device: d, clock } = await device({ id, drift: { atMs: 1000, factor } });
          const before = await soloAt(d, clock, name, 0, 4);
          expect(before.latencyMs).toBe(L); // same arithmetic before the step
          const after = await soloAt(d, clock, name, 2000, 4);
          expectRel(after.latencyMs, factor * L);
          // dispatch is the serving path, not the device: not scaled
          expect(Math.abs(after.groupLatencyMs - after.latencyMs - (before.groupLatencyMs - before.latencyMs))).toBeLessThanOrEqual(REL_TOL * after.groupLatencyMs);
        }
      });
    }
  }

  it('the id part and the option are the same drift', async () => {
    const a = await device({ id: 'sim:a100:drift-1.5x@1000ms' });
    const b = await device({ id: 'sim:a100', drift: { atMs: 1000, factor: 1.5 } });
    expect(a.device.id).toBe('sim:a100');
    expect(a.device.drift).toEqual({ atMs: 1000, factor: 1.5 });
    for (const t of [0, 500, 2000]) expect((await soloAt(a.device, a.clock, 'resnet50', t)).latencyMs).toBe((await soloAt(b.device, b.clock, 'resnet50', t)).latencyMs);
  });

  it('atMs counts from the device creation on its clock', async () => {
    const clock = new VirtualClock({ startMs: 10_000 });
    const d = await SimDevice.create({ clock, noiseCv: 0, drift: { atMs: 1000, factor: 2 } });
    await d.load([service('resnet50')]);
    const L = (await soloAt(d, clock, 'resnet50', 10_000)).latencyMs; // 0 ms after creation: before the step
    expectRel((await soloAt(d, clock, 'resnet50', 11_000)).latencyMs, 2 * L); // exactly at the step: after it
  });

  it('a segment straddling the step: operators started before it keep their speed, the rest are slowed', async () => {
    const plain = await device();
    const L = (await soloAt(plain.device, plain.clock, 'resnet50', 0)).latencyMs;
    const { device: d, clock } = await device({ drift: { atMs: 1000 + L / 2, factor: 1.5 } });
    const straddling = (await soloAt(d, clock, 'resnet50', 1000)).latencyMs;
    expect(straddling).toBeGreaterThan(L * (1 + REL_TOL));
    expect(straddling).toBeLessThan(1.5 * L * (1 - REL_TOL));
  });

  it('is deterministic: same seed and drift → the same latencies bit for bit; the noise draws are not shifted by the drift', async () => {
    const run = async (drift: SimDeviceOptions['drift']): Promise<number[]> => {
      const { device: d, clock } = await device({ noiseCv: 0.02, seed: 7, ...(drift === undefined ? {} : { drift }) });
      const out: number[] = [];
      for (const t of [0, 100, 200, 300]) for (const name of MODELS) out.push((await soloAt(d, clock, name, t + (name === 'bert' ? 50 : 0))).latencyMs);
      return out;
    };
    const drifted = await run({ atMs: 150, factor: 1.5 });
    expect(await run({ atMs: 150, factor: 1.5 })).toEqual(drifted);
    const plain = await run(undefined);
    // runs 0–2 start before the step (resnet50 at 100 ms ends long before 150), 3… at or after it
    drifted.forEach((x, i) => (i < 3 ? expect(x).toBe(plain[i]) : expectRel(x, 1.5 * plain[i]!)));
  });

  it('SimDevice.create rejects a bad drift with a RangeError naming it', async () => {
    const clock = new VirtualClock();
    const bad: [SimDeviceOptions['drift'], RegExp][] = [
      [{ atMs: 0, factor: 0 }, /SimDeviceOptions\.drift: factor 0 must be a finite number > 0/],
      [{ atMs: 0, factor: -1.5 }, /factor -1\.5 must be a finite number > 0/],
      [{ atMs: 0, factor: Infinity }, /factor Infinity must be a finite number > 0/],
      [{ atMs: 0, factor: NaN }, /factor NaN must be/],
      [{ atMs: -1, factor: 1.5 }, /SimDeviceOptions\.drift: time -1 ms must be a finite number ≥ 0/],
      [{ atMs: NaN, factor: 1.5 }, /time NaN ms must be/],
    ];
    for (const [drift, message] of bad) await expect(SimDevice.create({ clock, ...(drift === undefined ? {} : { drift }) })).rejects.toThrow(message);
    await expect(SimDevice.create({ clock, id: 'sim:a100:drift-2x@5ms', drift: { atMs: 1, factor: 2 } })).rejects.toThrow(/both given; give the drift once/);
    await expect(SimDevice.create({ clock, drift: { atMs: 1, factor: 2 } })).resolves.toBeInstanceOf(SimDevice);
  });
});

describe('sim drift: device id', () => {
  it('parses drift-<factor>x@<ms>ms, keeps it out of the canonical id', () => {
    expect(parseSimDeviceId('sim:a100:drift-1.5x@60000ms')).toMatchObject({ id: 'sim:a100', mode: 'eager', drift: { factor: 1.5, atMs: 60000 } });
    expect(parseSimDeviceId('sim:a100:drift-0.5x@0ms:graph')).toMatchObject({ id: 'sim:a100:graph', mode: 'graph', drift: { factor: 0.5, atMs: 0 } });
    expect(parseSimDeviceId('sim:a100:mig-2g:drift-2x@1.5e3ms:eager')).toMatchObject({ id: 'sim:a100:mig-2g', profile: { sms: 28 }, drift: { factor: 2, atMs: 1500 } });
    expect(parseSimDeviceId('sim:h200:drift-.75x@12.5ms').drift).toEqual({ factor: 0.75, atMs: 12.5 });
    expect(parseSimDeviceId('sim:a100')).not.toHaveProperty('drift');
  });

  it('rejects bad parts with a RangeError naming the part and the accepted form', () => {
    const bad: [string, RegExp][] = [
      ['sim:a100:drift-0x@5ms', /drift part 'drift-0x@5ms': factor 0 must be a finite number > 0/],
      ['sim:a100:drift--1.5x@5ms', /factor -1\.5 must be a finite number > 0/],
      ['sim:a100:drift-1e999x@5ms', /factor Infinity must be a finite number > 0/],
      ['sim:a100:drift-Infinityx@5ms', /factor 'Infinity' is not a number/],
      ['sim:a100:drift-1.5x@-5ms', /drift part 'drift-1.5x@-5ms': time -5 ms must be a finite number ≥ 0/],
      ['sim:a100:drift-abcx@5ms', /drift part 'drift-abcx@5ms' whose factor 'abc' is not a number/],
      ['sim:a100:drift-x@5ms', /factor '' is not a number/],
      ['sim:a100:drift-1.5x@ms', /time '' is not a number of ms/],
      ['sim:a100:drift-1.5x@5s', /malformed drift part 'drift-1.5x@5s' \(expected drift-<factor>x@<ms>ms/],
      ['sim:a100:drift-1.5@5ms', /malformed drift part/],
      ['sim:a100:drift-1.5x@5ms:drift-2x@9ms', /second drift part 'drift-2x@9ms'/],
      ['sim:a100:graph:drift-1.5x@5ms', /must end with the mode/],
      ['sim:a100:drift-1.5x@5ms:mig-2g', /MIG part 'mig-2g' after the drift part \(order: MIG, drift, mode\)/],
    ];
    for (const [id, message] of bad) {
      expect(() => parseSimDeviceId(id), id).toThrow(RangeError);
      expect(() => parseSimDeviceId(id), id).toThrow(message);
      expect(() => parseSimDeviceId(id), id).toThrow(/accepted: sim:<a100\|v100\|h100\|h200>\[:mig-<1\|2\|3\|4\|7>g \(a100 only\)\]\[:interference\]\[:drift-<factor>x@<ms>ms\]\[:eager\|graph\]/);
    }
  });
});

describe('abacus simulate with a drift id', () => {
  const sandbox = cliSandbox('abacus-drift-', { cacheName: 'models' });
  it('runs, slower after the step, with the predictor of the undrifted device', async () => {
    const args = ['--models', 'resnet50,bert', '--qos-ms', '50', '--rate', '100', '--queries', '300', '--profile-samples', '300', '--policy', 'fcfs', '--json'];
    const drifted = await sandbox.abacus('simulate', '--device', 'sim:a100:drift-1.5x@0ms', ...args);
    expect(drifted.code, drifted.stderr).toBe(0);
    const dj = JSON.parse(drifted.stdout) as ExperimentJson;
    expect(dj.device).toBe('sim:a100:drift-1.5x@0ms');
    const plain = await sandbox.inProcess('simulate', '--device', 'sim:a100', ...args); // in this process: no child's start-up
    expect(plain.code, plain.stderr).toBe(0);
    const pj = JSON.parse(plain.stdout) as ExperimentJson;
    expect(pj.predictor).toBe(dj.predictor); // cached under the canonical id: profiled once
    expect(plain.stderr).not.toMatch(/no cached predictor/);
    // the predictor learned the undrifted device: its error grows with the drift
    expect(dj.runs[0]!.predictorMape!).toBeGreaterThan(pj.runs[0]!.predictorMape! + 0.1);
    const bad = await sandbox.inProcess('simulate', '--device', 'sim:a100:drift-0x@5ms', ...args);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr).toMatch(/drift part 'drift-0x@5ms': factor 0 must be a finite number > 0/);
  }, 120_000);

  it('--refine: abacus corrects its predictions online after the drift (lower predictor MAPE than without)', async () => {
    const args = ['simulate', '--device', 'sim:a100:drift-1.5x@1000ms', '--models', 'resnet50,bert', '--qos-ms', '50', '--rate', '80', '--queries', '1500', '--profile-samples', '300', '--policy', 'abacus', '--json'];
    const plain = await sandbox.inProcess(...args); // in this process: no child's start-up
    expect(plain.code, plain.stderr).toBe(0);
    const refined = await sandbox.abacus(...args, '--refine');
    expect(refined.code, refined.stderr).toBe(0);
    const mape = (r: { stdout: string }): number => (JSON.parse(r.stdout) as ExperimentJson).runs[0]!.predictorMape!;
    expect(mape(refined)).toBeLessThan(mape(plain));
  }, 120_000);

  it('profile and calibrate refuse a drift id (their results belong to the undrifted device)', async () => {
    const profile = await sandbox.inProcess('profile', '--device', 'sim:a100:drift-1.5x@0ms', '--models', 'resnet50', '--samples', '5', '--out', `${sandbox.tmp}/p.csv`);
    expect(profile.code).not.toBe(0);
    expect(profile.stderr).toMatch(/a profile is taken on an undrifted device; leave out the drift part \(profile sim:a100\)/);
    const calibrate = await sandbox.inProcess('simulate', 'calibrate', '--device', 'sim:a100:drift-1.5x@0ms');
    expect(calibrate.code).not.toBe(0);
    expect(calibrate.stderr).toMatch(/calibration compares the undrifted device with its reference; leave out the drift part \(calibrate sim:a100\)/);
  }, 60_000);
});
