/**
 * `abacus reproduce` end to end on a fresh cache: profiles and trains its predictor inside the
 * command, runs the 21 pairs of §7.2 under four policies, writes the CSV, prints the headline.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runAbacus, type CliResult } from './helpers/cli.ts';
import { parse } from 'csv-parse/sync';
import type { ReproduceJson } from '../src/cli/reproduce.ts';

let tmp: string;
beforeAll(async () => {
  tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-repro-'));
});
afterAll(async () => {
  await fs.rm(tmp, { recursive: true, force: true });
});

function abacus(...args: string[]): Promise<CliResult> {
  return runAbacus(args, { cacheDir: path.join(tmp, 'models') });
}

describe('abacus reproduce', () => {
  it('qos --quick: 21 pairs × 4 policies in the CSV and the headline JSON', async () => {
    const out = path.join(tmp, 'out');
    const r = await abacus('reproduce', 'qos', '--quick', '--queries', '120', '--out', out, '--json');
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

  it('names the experiments that exist', async () => {
    const r = await abacus('reproduce', 'cluster');
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/not in this version yet \(available: qos, throughput, beyond-pair, all;/);
    expect((await abacus('reproduce', 'nope')).stderr).toMatch(/unknown experiment 'nope'/);
  }, 60_000);
});
