/**
 * `abacus reproduce` end to end on a fresh cache: profiles and trains its predictor inside the
 * command, runs the 21 pairs of §7.2 under four policies, writes the CSV, prints the headline;
 * `search` at tiny size writes its CSV and the report with its plot.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cliSandbox } from './helpers/cli.ts';
import { parse } from 'csv-parse/sync';
import type { ReproduceJson } from '../src/cli/reproduce.ts';

const sandbox = cliSandbox('abacus-repro-', { cacheName: 'models' });
const abacus = sandbox.abacus;

describe('abacus reproduce', () => {
  it('qos --quick: 21 pairs × 4 policies in the CSV and the headline JSON', async () => {
    const out = path.join(sandbox.tmp, 'out');
    // 400 profiled groups for its predictor instead of --quick's 3000: what is checked is the shape of the output
    const r = await abacus('reproduce', 'qos', '--quick', '--queries', '120', '--samples', '400', '--out', out, '--json');
    expect(r.code, r.stderr).toBe(0);
    const json = JSON.parse(r.stdout) as ReproduceJson;
    expect(json.device).toBe('sim:a100');
    expect(json.qos!.sets).toBe(21);
    expect(json.qos!.abacusMaxViolationRatio).toBeGreaterThanOrEqual(0);
    expect(json.qos!.abacusMaxP99OverQos).toBeGreaterThan(0);
    const rows = parse<Record<string, string>>(await fs.readFile(path.join(out, 'qos.csv'), 'utf8'), { columns: true });
    expect(rows).toHaveLength(21 * 4);
    expect(new Set(rows.map((x) => x['policy']))).toEqual(new Set(['abacus', 'fcfs', 'sjf', 'edf']));
    expect(rows.find((x) => x['set'] === 'vgg16+vgg19' && x['policy'] === 'abacus')!['qosMs']).toBe('30');
  }, 300_000);

  it('search at tiny size: decision time per ways 1..16 in the JSON, the CSV and report.html with its plot', async () => {
    const out = path.join(sandbox.tmp, 'search');
    const r = await abacus('reproduce', 'search', '--quick', '--samples', '300', '--decisions', '40', '--out', out, '--json', '--workers', '1');
    expect(r.code, r.stderr).toBe(0);
    const json = JSON.parse(r.stdout) as ReproduceJson;
    expect(Object.keys(json.search!.medianUsByWays)).toEqual(Array.from({ length: 16 }, (_, i) => String(i + 1)));
    for (const us of Object.values(json.search!.medianUsByWays)) expect(us).toBeGreaterThan(0);
    expect(json.qos).toBeUndefined();
    const rows = parse<Record<string, string>>(await fs.readFile(path.join(out, 'search.csv'), 'utf8'), { columns: true });
    expect(rows.map((x) => x['ways'])).toEqual(Object.keys(json.search!.medianUsByWays));
    const html = await fs.readFile(path.join(out, 'report.html'), 'utf8');
    expect(html).toContain('MEASURED');
    expect(html).toContain('is SIMULATED');
    expect(html).toContain('0.07–0.09 ms');
    expect(html).toMatch(/<svg[\s\S]*series: median[\s\S]*<\/svg>/);
  }, 120_000);

  it('names the experiments that exist', async () => {
    const r = await sandbox.inProcess('reproduce', 'nope'); // in this process: no child's start-up
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/unknown experiment 'nope' \(available: qos, throughput, beyond-pair, mig, cluster, search, batching, mixes, adaptive, all\)/);
  }, 60_000);
});
