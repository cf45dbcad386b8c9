/**
 * `abacus reproduce batching` (docs/batching.md): a small run through the CLI (2 pairs, few queries,
 * tiny profiles) checks the JSON shape, the invariants of the headline (finite, positive
 * ratios; batch-aware Abacus fuses at its peak) and the CSV's rows (pair × device × policy);
 * the saturation throughput is checked against its definition. No assertion on the
 * experiment's targets: those are for the experiment's output, not for tests.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { parse } from 'csv-parse/sync';
import { describe, expect, it } from 'vitest';
import type { ReproduceJson } from '../src/cli/reproduce.ts';
import { ModelRepository } from '../src/model/repository.ts';
import { groupedBarSpec, renderSvg } from '../src/report/plots.ts';
import { availableVariants, BATCHING_DEVICES, BATCHING_VARIANTS, batchingHeadline, batchingPairs, bestBatchingBaselines, saturationThroughput, queriesFor, type BatchingRow } from '../src/reproduce/batching.ts';
import { coRunLimit } from '../src/reproduce/co-run.ts';
import { readPaperWorkloads } from '../src/reproduce/workloads.ts';
import { cliSandbox, runAbacus } from './helpers/cli.ts';

const sandbox = cliSandbox('abacus-repro-batching-', { cacheName: 'models' });

describe('abacus reproduce batching', () => {
  it('1 pair, --quick: one headline per device, finite positive ratios, a CSV row per pair × device × policy, the report section', async () => {
    // one pair: the means and minimum over several pairs are checked on rows made by hand below
    const out = path.join(sandbox.tmp, 'out');
    // every role (unbatched, abacus both ways, concurrent, serial); fcfs-batch and edf-batch run
    // the same way as clockwork here and are left out for time (the conformance suite covers them)
    const ids = ['abacus-no-batching', 'abacus', 'abacus-no-barrier', 'triton', 'clockwork'];
    const r = await sandbox.abacus('reproduce', 'batching', '--quick', '--pairs', '1', '--variants', ids.join(','), '--queries', '60', '--samples', '400', '--out', out, '--json', '--workers', '2');
    expect(r.code, r.stderr).toBe(0);
    const json = JSON.parse(r.stdout) as ReproduceJson;
    const { run, skipped } = availableVariants(BATCHING_VARIANTS.filter((v) => ids.includes(v.id)));
    expect(Object.keys(json.batching!).sort()).toEqual([...BATCHING_DEVICES].sort());
    for (const device of BATCHING_DEVICES) {
      const h = json.batching![device]!;
      expect(h.pairs).toBe(1);
      for (const x of [h.peakRatioVsUnbatched, h.peakRatioVsBestBatching, h.saturationFraction]) {
        expect(Number.isFinite(x)).toBe(true);
        expect(x!).toBeGreaterThan(0);
      }
      if (skipped.includes('triton')) expect(h.peakRatioVsTriton).toBeNull();
      else expect(h.peakRatioVsTriton!).toBeGreaterThan(0);
      expect(h.abacusMaxViolationRatio).toBeGreaterThanOrEqual(0);
      expect(h.abacusMaxViolationRatio).toBeLessThanOrEqual(0.01); // at its reported peak, by the peak's definition
      expect(h.bestOf).toEqual(bestBatchingBaselines(device).filter((id) => run.some((v) => v.id === id)));
      // batch-aware abacus fuses the queued batch-1 requests at its peak
      expect(h.abacusMeanBatch!).toBeGreaterThan(1);
      // abacus without the group barrier, against triton and the continuous co-run limit
      const nb = h.noBarrier!;
      for (const x of [nb.peakRatioVsTriton, nb.minPairRatioVsTriton, nb.coRunLimitFraction, nb.tritonCoRunLimitFraction, nb.peakRatioVsBarrier]) expect(x!).toBeGreaterThan(0);
      expect(nb.minPairRatioVsTriton!).toBeLessThanOrEqual(nb.peakRatioVsTriton!);
      expect(nb.maxViolationRatio).toBeLessThanOrEqual(0.01);
    }
    const rows = parse<Record<string, string>>(await fs.readFile(path.join(out, 'batching.csv'), 'utf8'), { columns: true });
    expect(Object.keys(rows[0]!)).toEqual(['pair', 'device', 'policy', 'qosMs', 'peakGoodputQps', 'peakRateQps', 'violationRatio', 'p99Ms', 'meanBatch', 'meanGroupSize', 'predictorMape', 'saturationQps', 'coLaunchQps', 'coRunLimitQps', 'coRunBatch', 'bracketed']);
    const pairs = ['resnet50+resnet101'];
    expect(rows).toHaveLength(pairs.length * BATCHING_DEVICES.length * run.length);
    for (const pair of pairs) for (const device of BATCHING_DEVICES) for (const v of run) expect(rows.filter((x) => x['pair'] === pair && x['device'] === device && x['policy'] === v.id)).toHaveLength(1);
    for (const x of rows.filter((x) => x['policy'] === 'abacus-no-batching')) expect(Number(x['meanBatch'])).toBe(1);
    const html = await fs.readFile(path.join(out, 'report.html'), 'utf8');
    expect(html).toContain('Dynamic batching of single-sample requests (simulated');
    expect(html).toMatch(/<svg[\s\S]*Peak goodput at ≤ 1 % violations, sim:h200:graph[\s\S]*<\/svg>/);
    const holdout = parse<Record<string, string>>(await fs.readFile(path.join(out, 'batching-predictor.csv'), 'utf8'), { columns: true });
    expect(new Set(holdout.map((x) => x['device']))).toEqual(new Set(BATCHING_DEVICES));
  }, 300_000);

  it('the headline over two pairs: means of the per-pair ratios, the lowest pair against triton, the worst violation ratio, the baselines that ran', () => {
    const row = (pair: string, device: string, policy: string, peak: number, extra: Partial<BatchingRow> = {}): BatchingRow => ({ pair, device, policy, qosMs: 50, peakGoodputQps: peak, peakRateQps: peak, violationRatio: 0, p99Ms: 10, meanBatch: 1, meanGroupSize: 1, predictorMape: 0.1, saturationQps: 400, coLaunchQps: 500, coRunLimitQps: 300, coRunBatch: 8, bracketed: true, ...extra });
    const a100 = 'sim:a100';
    const rows = [
      // pair p: abacus 200; unbatched 100; the serial baselines 100 (clockwork) and 50; triton 160 (concurrent: not among a100's best)
      row('p', a100, 'abacus', 200, { meanBatch: 4, violationRatio: 0.004, predictorMape: 0.2 }),
      row('p', a100, 'abacus-no-batching', 100),
      row('p', a100, 'clockwork', 100),
      row('p', a100, 'fcfs-batch', 50),
      row('p', a100, 'triton', 160),
      row('p', a100, 'abacus-no-barrier', 240, { violationRatio: 0.008 }),
      // pair q: abacus 120 (violation NaN: read back from JSON as null); unbatched 120; best serial 60 (fcfs-batch); triton 200
      row('q', a100, 'abacus', 120, { meanBatch: 2, violationRatio: Number.NaN, predictorMape: 0.4 }),
      row('q', a100, 'abacus-no-batching', 120),
      row('q', a100, 'clockwork', 40),
      row('q', a100, 'fcfs-batch', 60),
      row('q', a100, 'triton', 200),
      row('q', a100, 'abacus-no-barrier', 100, { violationRatio: 0.002 }),
    ];
    const h = batchingHeadline(rows)[a100]!;
    expect(h.pairs).toBe(2);
    expect(h.peakRatioVsUnbatched).toBeCloseTo((2 + 1) / 2, 12);
    expect(h.peakRatioVsBestBatching).toBeCloseTo((2 + 2) / 2, 12);
    expect(h.peakRatioVsTriton).toBeCloseTo((200 / 160 + 120 / 200) / 2, 12);
    expect(h.saturationFraction).toBeCloseTo((200 / 400 + 120 / 400) / 2, 12);
    expect(h.abacusMaxViolationRatio).toBe(0.004);
    expect(h.abacusMeanBatch).toBe(3);
    expect(h.abacusPredictorMape).toBeCloseTo(0.3, 12);
    expect(h.bestOf).toEqual(['clockwork', 'fcfs-batch']);
    expect(h.noBarrier!.peakRatioVsTriton).toBeCloseTo((240 / 160 + 100 / 200) / 2, 12);
    expect(h.noBarrier!.minPairRatioVsTriton).toBeCloseTo(0.5, 12);
    expect(h.noBarrier!.peakRatioVsBarrier).toBeCloseTo((240 / 200 + 100 / 120) / 2, 12);
    expect(h.noBarrier!.maxViolationRatio).toBe(0.008);
    expect(h.noBarrier!.coRunLimitFraction).toBeCloseTo(((240 * (1 - 0.008)) / 300 + (100 * (1 - 0.002)) / 300) / 2, 12);
  });
  it('two threads give the same CSVs, results.json and report as the serial path (wall times aside), predictors trained in threads included', async () => {
    // abacus alone: the one variant that asks for predictors, which each thread trains
    const args = ['reproduce', 'batching', '--quick', '--pairs', '1', '--devices', 'sim:a100', '--variants', 'abacus', '--queries', '60', '--samples', '200'];
    const outs = ['1', '2'].map((w) => path.join(sandbox.tmp, `workers-${w}`));
    const runs = await Promise.all(['1', '2'].map((w, i) => runAbacus([...args, '--workers', w, '--out', outs[i]!], { cacheDir: path.join(sandbox.tmp, `cache-workers-${w}`) })));
    for (const r of runs) expect(r.code, r.stderr).toBe(0);
    const read = (i: number, file: string): Promise<string> => fs.readFile(path.join(outs[i]!, file), 'utf8');
    for (const file of ['batching.csv', 'batching-predictor.csv', 'batching-holdout-sim_a100.csv']) expect(await read(1, file), file).toBe(await read(0, file));
    // wall-clock fields: `wallSeconds` in results.json (also inside the report's data) and "… s" of wall time in the report
    const noWall = (text: string): string => text.replace(/"wallSeconds":\s*[\d.e+-]+/g, '"wallSeconds":0').replace(/\d+(\.\d+)? s\b/g, 'N s');
    expect(noWall(await read(1, 'results.json'))).toBe(noWall(await read(0, 'results.json')));
    expect(noWall(await read(1, 'report.html'))).toBe(noWall(await read(0, 'report.html')));
  }, 300_000);

  it('continuous co-run limit: one model back to back is about its saturation throughput; a pair overlapped beats one batch at a time; a tight QoS lowers the batch', async () => {
    const repo = new ModelRepository({ cacheDir: sandbox.cacheDir });
    const a = await repo.zooSpec('resnet50');
    const b = await repo.zooSpec('vgg16');
    const alone = await coRunLimit('sim:a100', [a], 1000, 16, 32, 8);
    const sa = await saturationThroughput('sim:a100', [a]);
    expect(alone.batch).toBe(16);
    // K batches back to back on one executor: at least the batches one after the other (the next
    // batch's launches are issued while the last one's kernels drain, so it may be faster)
    expect(alone.qps / sa.qps).toBeGreaterThan(0.95);
    expect(alone.qps / sa.qps).toBeLessThan(1.5);
    const pair = await coRunLimit('sim:a100', [a, b], 1000, 16, 32, 8);
    const serial = await saturationThroughput('sim:a100', [a, b]);
    expect(pair.qps).toBeGreaterThan(serial.qps);
    // every batch of the pair co-running must fit half the QoS target: a 2·L_a target forces smaller batches
    const tight = await coRunLimit('sim:a100', [a, b], 2 * sa.solo[0]!.latencyMs, 16, 32, 8);
    expect(tight.batch).toBeLessThan(16);
    expect(2 * tight.maxBatchMs <= 2 * sa.solo[0]!.latencyMs || tight.batch === 1).toBe(true);
  }, 120_000);

  it('saturation throughput: 1000 · 16 / L alone; a pair is the harmonic mean of its two models alone (equal shares); co-launch: 32000 / L_12', async () => {
    const repo = new ModelRepository({ cacheDir: sandbox.cacheDir });
    const a = await repo.zooSpec('resnet50');
    const b = await repo.zooSpec('vgg16');
    const sa = await saturationThroughput('sim:a100', [a]);
    const sb = await saturationThroughput('sim:a100', [b]);
    const pair = await saturationThroughput('sim:a100', [a, b]);
    expect(sa.qps).toBeCloseTo((1000 * 16) / sa.solo[0]!.latencyMs, 9);
    // equal shares: 1 / rate = ½ (1 / rate_a + 1 / rate_b)
    expect(pair.qps).toBeCloseTo(2 / (1 / sa.qps + 1 / sb.qps), 6);
    expect(pair.solo.map((s) => s.batch)).toEqual([16, 16]);
    // one model co-launched with nothing is that model alone
    expect(sa.coLaunchQps).toBeCloseTo(sa.qps, 9);
    expect(pair.coLaunchQps).toBeCloseTo((1000 * 2 * 16) / pair.coLaunchMs, 9);
    // overlapped, the pair takes longer than its longer model alone and less than both in a row
    expect(pair.coLaunchMs).toBeGreaterThan(Math.max(sa.solo[0]!.latencyMs, sb.solo[0]!.latencyMs));
    expect(pair.coLaunchMs).toBeLessThan(sa.solo[0]!.latencyMs + sb.solo[0]!.latencyMs);
    await expect(saturationThroughput('sim:a100', [])).rejects.toThrow(RangeError);
  }, 60_000);

  it('--quick runs 7 of the 21 pairs, a cycle through the 7 models (each in two pairs); --pairs takes the first n of those', async () => {
    const workloads = await readPaperWorkloads();
    const all = batchingPairs(workloads, { quick: false });
    expect(all).toHaveLength(21);
    const quick = batchingPairs(workloads, { quick: true });
    expect(quick.map((w) => w.models.join('+'))).toEqual(['resnet50+resnet101', 'resnet101+resnet152', 'resnet152+inception_v3', 'inception_v3+vgg16', 'vgg16+vgg19', 'vgg19+bert', 'resnet50+bert']);
    const uses = new Map<string, number>();
    for (const m of quick.flatMap((w) => w.models)) uses.set(m, (uses.get(m) ?? 0) + 1);
    expect([...uses.values()]).toEqual(Array(7).fill(2));
    for (const w of quick) expect(all).toContain(w);
    expect(batchingPairs(workloads, { quick: true, pairs: 2 })).toEqual(quick.slice(0, 2));
    expect(batchingPairs(workloads, { quick: false, pairs: 3 })).toEqual(all.slice(0, 3));
  });

  it('runs last at least the asked number of QoS targets; the variants list abacus three ways and every batching baseline', () => {
    expect(queriesFor(50, 100, 300, 20)).toBe(300); // 50 q/s × 2 s = 100 < 300
    expect(queriesFor(2000, 100, 300, 20)).toBe(4000); // 2000 q/s × 20 × 0.1 s
    expect(BATCHING_VARIANTS.map((v) => v.id)).toEqual(['abacus-no-batching', 'abacus', 'abacus-no-barrier', 'triton', 'clockwork', 'fcfs-batch', 'edf-batch']);
    expect(bestBatchingBaselines('sim:a100')).toEqual(['clockwork', 'fcfs-batch', 'edf-batch']);
    expect(bestBatchingBaselines('sim:h200:graph')).toEqual(['triton', 'clockwork', 'fcfs-batch', 'edf-batch']);
  });

  it('the peak-goodput plot: a log y axis leaves out bars without a peak (0), and renders', async () => {
    const spec = groupedBarSpec({ title: 't', yTitle: 'q/s', logY: true, data: [{ group: 'a', series: 'x', value: 100 }, { group: 'a', series: 'y', value: 0 }, { group: 'b', series: 'x', value: 2000 }] }) as unknown as { encoding: { y: { scale?: { type: string } } }; data: { values: { value: number }[] } };
    expect(spec.encoding.y.scale?.type).toBe('log');
    expect(spec.data.values.map((d) => d.value)).toEqual([100, 2000]);
    expect(await renderSvg(groupedBarSpec({ title: 't', yTitle: 'q/s', logY: true, data: [{ group: 'a', series: 'x', value: 100 }] }))).toMatch(/^<svg/);
  });
});
