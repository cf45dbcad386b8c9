/**
 * Warm-up until steady (docs/benchmarks.md, warm-up) on device/ort: with `DeviceService.warmupShapes`, each
 * executor runs every operator at every serving shape, then a whole query per shape, until three
 * runs agree (or `maxRuns`),
 * before `load` resolves, and logs what it did; `warmupUntilSteady: false` skips it; a zero
 * budget skips every pair and says so (warn). Counts only: no wall-clock assertions.
 */
import path from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DeviceService } from '../src/device/device.ts';
import { OrtDevice } from '../src/device/ort/index.ts';
import { okResult, seg } from './device/conformance.ts';
import { buildSkipNet, makeFixtureDir } from './fixtures/tiny-models.ts';

interface Line {
  readonly level: number;
  readonly msg: string;
  readonly [key: string]: unknown;
}

function capture(): { logger: pino.Logger; lines: Line[] } {
  const lines: Line[] = [];
  return { logger: pino({ level: 'info' }, { write: (s: string) => void lines.push(JSON.parse(s) as Line) }), lines };
}

describe('OrtDevice warm-up at the serving shapes', () => {
  let fixtures: { dir: string; cleanup: () => Promise<void> };
  let cnn: DeviceService;
  const devices: OrtDevice[] = [];
  beforeAll(async () => {
    fixtures = await makeFixtureDir();
    cnn = { name: 'cnn', model: await buildSkipNet(path.join(fixtures.dir, 'cnn')), warmupShapes: [1, 2, 4].map((batchSize) => ({ batchSize, seqLen: 0 })) };
  });
  afterAll(async () => {
    await Promise.all(devices.map((d) => d.close()));
    await fixtures?.cleanup();
  });

  it('runs every operator at every shape at least `window` times, at most maxRuns, before load resolves', async () => {
    const { logger, lines } = capture();
    const device = await OrtDevice.create({ logger, warmupUntilSteady: { window: 3, maxRuns: 6 } });
    devices.push(device);
    await device.load([cnn]);
    const line = lines.find((l) => l.msg === 'executor warmed up at the serving shapes');
    expect(line).toMatchObject({ service: 'cnn', shapes: 3, skipped: 0 });
    // every (operator, shape) pair, then a whole query per shape: 3 to 6 runs each
    const pairs = 3 * cnn.model.spec.operators.length + 3;
    expect(line!['runs']).toBeGreaterThanOrEqual(3 * pairs);
    expect(line!['runs']).toBeLessThanOrEqual(6 * pairs);
    expect(line!['unsettled']).toBeLessThanOrEqual(pairs);
    okResult((await device.runGroup([seg(cnn, 'q', 0, cnn.model.spec.operators.length, { kind: 'synthetic', seed: 1 }, 4)])).segments[0]);
  });

  it('warmupUntilSteady: false skips it; a budget of 0 skips every pair with a warning', async () => {
    const off = capture();
    const a = await OrtDevice.create({ logger: off.logger, warmupUntilSteady: false });
    devices.push(a);
    await a.load([cnn]);
    expect(off.lines.some((l) => l.msg.includes('warm'))).toBe(false);
    const none = capture();
    const b = await OrtDevice.create({ logger: none.logger, warmupUntilSteady: { budgetMs: 0 } });
    devices.push(b);
    await b.load([{ ...cnn, name: 'cnn2' }]);
    const warn = none.lines.find((l) => l.msg.startsWith('warm-up budget ran out'));
    expect(warn).toMatchObject({ level: 40, service: 'cnn2', runs: 0 });
    expect(warn!['skipped']).toBeGreaterThan(0);
  });

  it('bad options and shapes are refused naming the field', async () => {
    await expect(OrtDevice.create({ warmupUntilSteady: { tolerance: -1 } })).rejects.toThrow(/warmupUntilSteady\.tolerance -1 must be a number in \[0, 10\]/);
    await expect(OrtDevice.create({ warmupUntilSteady: { window: 5, maxRuns: 2 } })).rejects.toThrow(/warmupUntilSteady\.maxRuns 2 must be an integer in \[5, 10000\]/);
    const device = await OrtDevice.create();
    devices.push(device);
    await expect(device.load([{ ...cnn, name: 'bad', warmupShapes: [{ batchSize: 0, seqLen: 0 }] }])).rejects.toThrow(/services\[0\]\.warmupShapes\[0\] must have an integer batchSize ≥ 1 and seqLen ≥ 0/);
  });
});
