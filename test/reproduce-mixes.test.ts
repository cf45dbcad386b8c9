/**
 * `abacus reproduce mixes`: a small run through the CLI (the first mix, 3 policies, few
 * queries, tiny profiles) checks the JSON shape, the CSV rows (mix × device × policy) and the
 * report section; the mixes' definitions are checked against what the experiment promises.
 * No assertion on the experiment's goals: those are for its output, not for tests.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { parse } from 'csv-parse/sync';
import { describe, expect, it } from 'vitest';
import type { ReproduceJson } from '../src/cli/reproduce.ts';
import { mixes, mixesHeadline, mixesToRun, type MixRow } from '../src/reproduce/mixes.ts';
import { readPaperWorkloads } from '../src/reproduce/workloads.ts';
import { cliSandbox } from './helpers/cli.ts';

const sandbox = cliSandbox('abacus-repro-mixes-', { cacheName: 'models' });

describe('abacus reproduce mixes', () => {
  it('defines 3- and 4-service sets, tight targets at 1.5x and 2x, a 9:1 skew and a heavy model beside a light one', async () => {
    const list = mixes(await readPaperWorkloads());
    expect(list.filter((m) => m.kind === 'beyond-pair').map((m) => m.models.length)).toEqual([3, 3, 3, 3, 4]);
    expect(list.filter((m) => m.kind === 'tight').map((m) => m.qosFactor)).toEqual([1.5, 1.5, 2, 2]);
    expect(list.filter((m) => m.kind === 'skewed').map((m) => m.weights)).toEqual([
      [9, 1],
      [1, 9],
    ]);
    expect(list.find((m) => m.kind === 'heavy-light')).toMatchObject({ models: ['vgg19', 'bert'], qosMs: [80, 5] });
  });

  it('--quick runs 7 of the 12 mixes, every kind; a count takes the first of those', async () => {
    const workloads = await readPaperWorkloads();
    expect(mixesToRun(workloads, { quick: false })).toEqual(mixes(workloads));
    const quick = mixesToRun(workloads, { quick: true });
    expect(quick.map((m) => m.id)).toEqual(['resnet101+resnet152+vgg19', expect.any(String) as unknown, 'resnet101+resnet152+vgg19+bert', 'resnet50+vgg16 @1.5x', 'inception_v3+bert @1.5x', 'resnet50+resnet101 9:1', 'vgg19+bert@5ms']);
    expect(new Set(quick.map((m) => m.kind))).toEqual(new Set(['beyond-pair', 'tight', 'skewed', 'heavy-light']));
    expect(new Set(quick.flatMap((m) => m.models))).toEqual(new Set(mixes(workloads).flatMap((m) => m.models)));
    expect(mixesToRun(workloads, { quick: true, count: 1 })).toEqual(quick.slice(0, 1));
  });

  it('the headline mean covers the beyond-pair and tight mixes; the best baseline includes triton', () => {
    const row = (mix: string, kind: MixRow['kind'], policy: string, peak: number): MixRow => ({ mix, kind, device: 'd', policy, qosMs: '1', peakGoodputQps: peak, peakRateQps: peak, violationRatio: 0, meanBatch: 1, predictorMape: 0, coRunLimitQps: 1, coRunBatch: 1, bracketed: true });
    const h = mixesHeadline([row('a', 'beyond-pair', 'abacus-no-barrier', 120), row('a', 'beyond-pair', 'triton', 100), row('a', 'beyond-pair', 'clockwork', 50), row('b', 'skewed', 'abacus-no-barrier', 50), row('b', 'skewed', 'triton', 100)])['d']!;
    expect(h.meanRatioVsBestBaseline).toBeCloseTo(1.2, 9);
    expect(h.meanRatioVsBestBaselineAll).toBeCloseTo(0.85, 9);
  });

  it('1 mix, --quick: one headline per device, a CSV row per mix × device × policy, the report section', async () => {
    const out = path.join(sandbox.tmp, 'out');
    const r = await sandbox.abacus('reproduce', 'mixes', '--quick', '--pairs', '1', '--variants', 'abacus,abacus-no-barrier,triton', '--queries', '60', '--samples', '400', '--out', out, '--json', '--workers', '2');
    expect(r.code, r.stderr).toBe(0);
    const json = JSON.parse(r.stdout) as ReproduceJson;
    expect(Object.keys(json.mixes!).sort()).toEqual(['sim:a100', 'sim:h200:graph']);
    for (const h of Object.values(json.mixes!)) {
      expect(h.rows).toHaveLength(1 * 3);
      expect(h.meanRatioVsBestBaseline!).toBeGreaterThan(0);
      for (const row of h.rows) expect(row.coRunLimitQps).toBeGreaterThan(0);
    }
    const rows = parse<Record<string, string>>(await fs.readFile(path.join(out, 'mixes.csv'), 'utf8'), { columns: true });
    expect(rows).toHaveLength(1 * 2 * 3);
    expect(new Set(rows.map((x) => x['policy']))).toEqual(new Set(['abacus', 'abacus-no-barrier', 'triton']));
    const html = await fs.readFile(path.join(out, 'report.html'), 'utf8');
    expect(html).toContain('Harder mixes');
  }, 300_000);
});
