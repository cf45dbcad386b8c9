/**
 * profile/profiler.ts: `profileDevice` through the Device contract — statistics, how it uses a
 * device (services per copy, fresh query ids, releases, warm-up + timed runs), a failed segment,
 * resume (interrupted by an AbortSignal, a cut-short last line, mismatching options), a run on
 * `sim:a100` with the full-size zoo (virtual time), and a small run on `ort` (real CPU).
 * No wall-clock assertions.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { VirtualClock } from '../src/clock/index.ts';
import type { Device, DeviceService, GroupResult, Segment } from '../src/device/device.ts';
import { OrtDevice } from '../src/device/ort/index.ts';
import { SimDevice } from '../src/device/sim/index.ts';
import { DeviceFailureError } from '../src/errors.ts';
import { artifactAt, type ModelArtifact } from '../src/model/artifact.ts';
import { resolveModelArtifact } from '../src/model/catalog.ts';
import { ModelRepository } from '../src/model/repository.ts';
import { ZOO_MODEL_NAMES } from '../src/model/zoo/index.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import { describeGroup, profileDevice, ProfileSampler, readProfileCsv, runStats, type ProfileDeviceOptions, type ProfileProgress } from '../src/profile/index.ts';

let tmp: string;
let repo: ModelRepository;
const zoo = new Map<string, ModelSpec>();
beforeAll(async () => {
  tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-profiler-'));
  repo = new ModelRepository({ cacheDir: path.join(tmp, 'cache') });
  for (const name of ZOO_MODEL_NAMES) zoo.set(name, await repo.zooSpec(name));
});
afterAll(async () => {
  await fs.rm(tmp, { recursive: true, force: true });
});

const simArtifacts = (...names: string[]): ModelArtifact[] => names.map((n) => artifactAt('/nonexistent', zoo.get(n)!));
let fileNo = 0;
const outFile = (): string => path.join(tmp, `p${fileNo++}`, 'profile.csv');

/** A device that records what it is asked and answers `latencyMs` per group (or fails a slot). */
class FakeDevice implements Device {
  readonly id = 'fake:0';
  readonly loads: string[][] = [];
  readonly groups: Segment[][] = [];
  readonly released: string[] = [];
  readonly kept = new Set<string>();
  constructor(private readonly opts: { failSlot?: number; latencyMs?: (call: number) => number } = {}) {}
  load(services: readonly DeviceService[]): Promise<void> {
    this.loads.push(services.map((s) => s.name));
    return Promise.resolve();
  }
  runGroup(group: readonly Segment[]): Promise<GroupResult> {
    const call = this.groups.length;
    this.groups.push([...group]);
    const segments = group.map((s, j) => {
      if (j === this.opts.failSlot) return { ok: false as const, queryId: s.queryId, service: s.service, error: new DeviceFailureError('executor crashed') };
      this.kept.add(s.queryId); // kept until released (every test group here stops early or ends)
      return { ok: true as const, queryId: s.queryId, service: s.service, latencyMs: 1 };
    });
    return Promise.resolve({ groupLatencyMs: this.opts.latencyMs?.(call) ?? 1, segments });
  }
  releaseQuery(_service: string, queryId: string): Promise<void> {
    this.released.push(queryId);
    this.kept.delete(queryId);
    return Promise.resolve();
  }
  close(): Promise<void> {
    return Promise.resolve();
  }
}

describe('runStats', () => {
  it('drops min and max from ≥ 3 runs; median, mean, sample standard deviation (by hand)', () => {
    expect(runStats([4, 100, 2, 1, 3])).toEqual({ medianMs: 3, meanMs: 3, stdMs: 1 }); // [2,3,4]
    const two = runStats([1, 3]); // nothing dropped: mean 2, sd √2
    expect(two.medianMs).toBe(2);
    expect(two.stdMs).toBeCloseTo(Math.SQRT2, 12);
    expect(runStats([5])).toEqual({ medianMs: 5, meanMs: 5, stdMs: 0 });
    expect(runStats([1, 2, 3, 4]).medianMs).toBe(2.5); // [2,3]
    expect(() => runStats([])).toThrow(RangeError);
  });
});

describe('profileDevice through the Device contract', () => {
  it('loads one service per model copy, warms up, times `repeat` runs, releases unfinished queries', async () => {
    const device = new FakeDevice({ latencyMs: (call) => call }); // latency = call number
    const out = outFile();
    const progress: ProfileProgress[] = [];
    const result = await profileDevice({ device, models: simArtifacts('resnet50', 'bert'), samples: 10, maxGroupSize: 2, batchSizes: [1, 2], seqLens: [8], repeat: 3, warmup: 2, out, onProgress: (p) => progress.push(p) });
    expect(result).toMatchObject({ device: 'fake:0', samples: 10, measured: 10, skipped: 0, interrupted: false });
    expect(device.groups).toHaveLength(10 * 5);
    expect(device.loads.flat().sort()).toEqual(['bert#0', 'bert#1', 'resnet50#0', 'resnet50#1']);
    const ids = device.groups.flat().map((s) => s.queryId);
    expect(new Set(ids).size).toBe(ids.length); // a fresh query per run
    expect(device.kept.size).toBe(device.groups.flat().filter((s) => s.end === zoo.get(s.service.split('#')[0]!)!.operators.length).length);
    for (const s of device.groups.flat()) {
      expect(s.input).toEqual({ kind: 'synthetic', seed: expect.any(Number) });
      const model = s.service.split('#')[0]!;
      if (s.end < zoo.get(model)!.operators.length) expect(device.released).toContain(s.queryId);
    }
    const selfPair = device.groups.find((g) => g.length === 2 && g[0]!.service.split('#')[0] === g[1]!.service.split('#')[0]);
    expect(selfPair?.map((s) => s.service.split('#')[1])).toEqual(['0', '1']); // two services, so they overlap
    const rows = await readProfileCsv([out], { models: zoo });
    // sample i ran calls 5i..5i+4; timed: 5i+2, 5i+3, 5i+4 → drop min and max → 5i+3
    expect(rows.map((r) => r.medianMs)).toEqual(Array.from({ length: 10 }, (_, i) => 5 * i + 3));
    expect(rows.every((r) => r.runs === 3 && r.stdMs === 0 && r.device === 'fake:0')).toBe(true);
    expect(progress.at(0)).toEqual({ done: 0, total: 10, skipped: 0, measured: 0 });
    expect(progress.at(-1)).toEqual({ done: 10, total: 10, skipped: 0, measured: 10 });
  });

  it('on real time, a stop request during a sample drops that sample (a Ctrl-C may have disturbed it)', async () => {
    const controller = new AbortController();
    const device = new FakeDevice({
      latencyMs: (call) => {
        if (call === 13) controller.abort(); // during sample 2 (runs 12..17)
        return 1;
      },
    });
    const out = outFile();
    const result = await profileDevice({ device, models: simArtifacts('resnet50'), samples: 10, maxGroupSize: 1, batchSizes: [1], out, signal: controller.signal });
    expect(result).toMatchObject({ measured: 2, interrupted: true });
    expect((await readProfileCsv([out], { models: zoo })).map((r) => r.sample)).toEqual([0, 1]);
  });

  it('a failed segment is an error naming the sample and the slot; rows before it stay', async () => {
    const device = new FakeDevice({ failSlot: 1 });
    const out = outFile();
    const err = await profileDevice({ device, models: simArtifacts('resnet50'), samples: 5, maxGroupSize: 2, batchSizes: [1], out }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DeviceFailureError);
    // sample 0 is the solo resnet50, sample 1 the self-pair: its slot 1 fails
    expect((err as Error).message).toMatch(/^sample 1 \(resnet50\[.*\+ resnet50.*\), slot 1 \(service resnet50#1\), warm-up run 0: executor crashed/);
    expect(await readProfileCsv([out], { models: zoo })).toHaveLength(1);
  });
});

describe('profileDevice on sim (virtual time)', () => {
  const simOpen = (id = 'sim:a100'): Pick<Extract<ProfileDeviceOptions, { openDevice: unknown }>, 'openDevice'> => ({
    openDevice: async (seed: number) => {
      const clock = new VirtualClock();
      return { device: await SimDevice.create({ clock, id, seed }), clock };
    },
  });
  const baseOf = () => ({ models: simArtifacts('resnet50', 'bert', 'vgg16'), samples: 30, maxGroupSize: 3, batchSizes: [1, 4], seqLens: [16, 64], seed: 3, repeat: 4 });
  let base: ReturnType<typeof baseOf>;
  beforeAll(() => {
    base = baseOf();
  });

  it('the seven full-size zoo models, all 35 combinations of up to two: one row per sample, as sampled', async () => {
    const out = outFile();
    const models = simArtifacts(...ZOO_MODEL_NAMES);
    const result = await profileDevice({ ...simOpen(), models, samples: 70, maxGroupSize: 2, batchSizes: [1, 8], seqLens: [32], out });
    expect(result).toMatchObject({ device: 'sim:a100', measured: 70, skipped: 0, interrupted: false });
    const rows = await readProfileCsv([out], { models: zoo });
    const sampler = new ProfileSampler({ models: models.map((m) => m.spec), maxGroupSize: 2, batchSizes: [1, 8], seqLens: [32], seed: 0 });
    expect(rows.map((r) => r.sample)).toEqual([...Array(70).keys()]);
    for (const r of rows) {
      expect(r.slots).toEqual(sampler.sampleAt(r.sample).slots);
      expect(r.runs).toBe(5);
      expect(r.medianMs).toBeGreaterThan(0);
      expect(r.stdMs).toBeGreaterThan(0); // noise (cv 2%) on by default
      expect(r.stdMs / r.meanMs).toBeLessThan(0.2);
    }
    const combos = new Set(rows.map((r) => r.slots.map((s) => s.model).sort().join('+')));
    expect(combos.size).toBe(35);
    for (const m of ZOO_MODEL_NAMES) expect(combos).toContain(`${m}+${m}`);
  });

  it('a shared SimDevice on a VirtualClock works too (driven per sample)', async () => {
    const clock = new VirtualClock();
    const device = await SimDevice.create({ clock, id: 'sim:h100', noiseCv: 0 });
    const result = await profileDevice({ ...base, device, clock, samples: 12, out: outFile() });
    expect(result).toMatchObject({ device: 'sim:h100', measured: 12 });
    expect(clock.now()).toBeGreaterThan(0);
    expect(device.services.length).toBeGreaterThan(0);
    expect(device.services.every((s) => /^(resnet50|bert|vgg16)#[012]$/.test(s))).toBe(true);
    await device.close();
  });

  it('resume: stopped by the signal after some samples, rerun → the same file as one uninterrupted run', async () => {
    const whole = outFile();
    await profileDevice({ ...base, ...simOpen(), out: whole });
    const expected = await fs.readFile(whole, 'utf8');
    expect(expected.trim().split('\n')).toHaveLength(31);

    const out = outFile();
    const controller = new AbortController();
    const first = await profileDevice({
      ...base,
      ...simOpen(),
      out,
      signal: controller.signal,
      onProgress: (p) => {
        if (p.measured === 11) controller.abort();
      },
    });
    expect(first).toMatchObject({ measured: 11, skipped: 0, interrupted: true });
    expect(await readProfileCsv([out], { models: zoo })).toHaveLength(11); // valid after the stop
    const second = await profileDevice({ ...base, ...simOpen(), out });
    expect(second).toMatchObject({ measured: 19, skipped: 11, interrupted: false });
    expect(await fs.readFile(out, 'utf8')).toBe(expected);
    const third = await profileDevice({ ...base, ...simOpen(), out });
    expect(third).toMatchObject({ measured: 0, skipped: 30 });
    // more samples later: only the new ones are measured
    const more = await profileDevice({ ...base, ...simOpen(), out, samples: 33 });
    expect(more).toMatchObject({ measured: 3, skipped: 30 });
  });

  it('resume: a cut-short last line (a kill mid-write) is dropped, the file rewritten and the sample measured again', async () => {
    const whole = outFile();
    await profileDevice({ ...base, ...simOpen(), out: whole });
    const expected = await fs.readFile(whole, 'utf8');
    const out = outFile();
    await fs.mkdir(path.dirname(out), { recursive: true });
    const lines = expected.split('\n');
    await fs.writeFile(out, lines.slice(0, 8).join('\n') + '\n' + lines[8]!.slice(0, 20)); // header + 7 rows + a piece
    const result = await profileDevice({ ...base, ...simOpen(), out });
    expect(result).toMatchObject({ measured: 23, skipped: 7 });
    expect(await fs.readFile(out, 'utf8')).toBe(expected);
    // only part of the header: start over
    await fs.writeFile(out, 'sample,device,sl');
    expect(await profileDevice({ ...base, ...simOpen(), out })).toMatchObject({ measured: 30, skipped: 0 });
    expect(await fs.readFile(out, 'utf8')).toBe(expected);
  });

  it('resume refuses a file made with other options or on another device', async () => {
    const out = outFile();
    await profileDevice({ ...base, ...simOpen(), out, samples: 10 });
    await expect(profileDevice({ ...base, ...simOpen(), out, seed: 4 })).rejects.toThrow(/sample \d+ is .* but these options generate .*the options differ from those the file was made with \(rerun with those, or use a new --out\)/);
    await expect(profileDevice({ ...base, ...simOpen(), out, batchSizes: [1, 2] })).rejects.toThrow(/the options differ/);
    await expect(profileDevice({ ...base, ...simOpen(), out, maxGroupSize: 2 })).rejects.toThrow(/slot columns for groups of up to 3, this run samples groups of up to 2/);
    await expect(profileDevice({ ...base, ...simOpen(), out, repeat: 5 })).rejects.toThrow(/4 timed runs, this run makes 5 \(--repeat\)/);
    await expect(profileDevice({ ...base, ...simOpen('sim:v100'), out })).rejects.toThrow(/measured on sim:a100, this run uses sim:v100/);
    await expect(profileDevice({ ...base, ...simOpen(), out, models: simArtifacts('resnet50', 'bert') })).rejects.toThrow(/unknown model 'vgg16' .*cannot resume .*use a new --out/);
    // the file is untouched by the refusals
    expect((await readProfileCsv([out], { models: zoo })).length).toBe(10);
  });

  it('rejects bad options', async () => {
    await expect(profileDevice({ ...base, ...simOpen(), out: outFile(), samples: 0 })).rejects.toThrow(/samples 0 must be an integer ≥ 1/);
    await expect(profileDevice({ ...base, ...simOpen(), out: outFile(), warmup: -1 })).rejects.toThrow(/warmup/);
    await expect(profileDevice({ ...base, ...simOpen(), out: outFile(), seqLens: [4096] })).rejects.toThrow(/exceeds bert's maximum sequence length/);
  });
});

describe('profileDevice on ort (real CPU)', () => {
  it('two small models, a few samples: valid rows, nothing kept on the executors', async () => {
    const models: ModelArtifact[] = [];
    for (const name of ['resnet50-small', 'bert-small']) models.push((await resolveModelArtifact(repo, name)).artifact);
    const specs = new Map(models.map((m) => [m.spec.name, m.spec]));
    const device = await OrtDevice.create({ intraOpNumThreads: 1 });
    try {
      const out = outFile();
      const result = await profileDevice({ device, models, samples: 6, maxGroupSize: 2, batchSizes: [1, 2], seqLens: [8, 16], repeat: 3, out });
      expect(result).toMatchObject({ device: 'ort:cpu', measured: 6, skipped: 0 });
      const rows = await readProfileCsv([out], { models: specs });
      expect(rows).toHaveLength(6);
      for (const r of rows) {
        expect(r.medianMs).toBeGreaterThan(0);
        expect(Number.isFinite(r.stdMs)).toBe(true);
        expect(r.device).toBe('ort:cpu');
      }
      expect(rows.some((r) => r.slots.length === 2 && r.slots[0]!.model === r.slots[1]!.model)).toBe(true);
      for (const service of device.services) expect(await device.executorKeptQueries(service), service).toEqual([]);
      expect(describeGroup(rows[0]!.slots)).toMatch(/^resnet50-small\[\d+,18\) b[12]$/);
    } finally {
      await device.close();
    }
  });
});
