/**
 * `abacus train`: end to end as a user runs it (`node bin/abacus.js train … --json` on a small
 * profile simulated on sim:a100 with the small zoo variants), the table output, and every bad
 * input — the CSV errors name file, line and column.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runAbacus, type CliResult } from './helpers/cli.ts';
import { buildProgram, type CliContext } from '../src/cli/main.ts';
import { ModelRepository } from '../src/model/repository.ts';
import { resolveModelSpec } from '../src/model/catalog.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import { formatProfileHeader, formatProfileRow } from '../src/profile/csv.ts';
import { loadPredictor } from '../src/predict/file.ts';
import { simulateProfileRows } from '../bench/predictor.ts';

const MODELS = ['resnet50-small', 'bert-small'];

let tmp: string;
let cacheDir: string;
let csv: string;
let csvText: string;
let specs: Map<string, ModelSpec>;

beforeAll(async () => {
  tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-train-'));
  cacheDir = path.join(tmp, 'cache');
  const repo = new ModelRepository({ cacheDir });
  specs = new Map();
  for (const m of MODELS) specs.set(m, await resolveModelSpec(repo, m));
  const rows = await simulateProfileRows({ models: [...specs.values()], samples: 240, maxGroupSize: 2, batchSizes: [1, 2, 4], seqLens: [8, 16], repeat: 1 });
  csvText = formatProfileHeader(2) + rows.map((r) => formatProfileRow(r, 2)).join('');
  csv = path.join(tmp, 'profile.csv');
  await fs.writeFile(csv, csvText);
});
afterAll(async () => {
  await fs.rm(tmp, { recursive: true, force: true });
});

function abacus(...args: string[]): Promise<CliResult> {
  return runAbacus(args, { cacheDir });
}

/** The CLI in-process: resolves with stdout, rejects with what the action threw. */
async function train(...args: string[]): Promise<{ out: string; err: string }> {
  let out = '';
  let err = '';
  const ctx: CliContext = { out: (s) => (out += s), err: (s) => (err += s), cacheOptions: () => ({ cacheDir }) };
  await buildProgram(ctx).parseAsync(['node', 'abacus', 'train', ...args]);
  return { out, err };
}

async function writeCsv(name: string, text: string): Promise<string> {
  const p = path.join(tmp, name);
  await fs.writeFile(p, text);
  return p;
}

describe('abacus train (spawned)', () => {
  it('--json prints kind, samples, holdout and cv metrics; the predictor file loads', async () => {
    const out = path.join(tmp, 'out', 'predictor.json');
    const r = await abacus('train', '--data', csv, '--kind', 'mlp', '--epochs', '3', '--folds', '2', '--out', out, '--json');
    expect(r.code, r.stderr).toBe(0);
    const j = JSON.parse(r.stdout) as { kind: string; samples: number; holdout: { maeMs: number; mape: number; samples: number }; holdoutByBatch: { batch: number; samples: number; mape: number }[]; cv: { maeMs: number; mape: number }; trainSeconds: number };
    expect(j.kind).toBe('mlp');
    // Per batch size: ascending, every held-out row counted once, each MAPE a fraction.
    const batches = j.holdoutByBatch.map((b) => b.batch);
    expect(batches).toEqual([...batches].sort((a, b) => a - b));
    expect(j.holdoutByBatch.reduce((n, b) => n + b.samples, 0)).toBe(j.holdout.samples);
    for (const b of j.holdoutByBatch) expect(b.mape).toBeGreaterThan(0);
    expect(j.samples).toBe(240);
    for (const m of [j.holdout, j.cv]) {
      expect(m.maeMs).toBeGreaterThan(0);
      expect(m.mape).toBeGreaterThan(0);
      expect(m.mape).toBeLessThan(5); // a fraction, not percent (3 epochs: not accurate yet)
    }
    expect(r.stderr).toMatch(/train: 100% \(final model, epoch 3\/3\)/);
    const p = await loadPredictor(out, { deviceId: 'sim:a100', models: specs });
    expect(p.kind).toBe('mlp');
    expect(p.models).toEqual(['bert-small', 'resnet50-small']);
  });
});

describe('abacus train (in-process)', () => {
  it('prints a table of held-out and cross-validation errors (linear)', async () => {
    const { out } = await train('--data', csv, '--kind', 'linear', '--out', path.join(tmp, 'lin.json'));
    expect(out).toMatch(/linear predictor, 'full' features, 240 samples from sim:a100/);
    expect(out).toMatch(/held-out groups\s+\d+\s+[\d.]+\s+[\d.]+/);
    expect(out).toMatch(/cross-validation \(mean of folds\)/);
    expect(out).toContain('MAPE %');
  });

  it('--features flop --test-model trains without the model and tests on it', async () => {
    const { out } = await train('--data', csv, '--kind', 'linear', '--features', 'flop', '--test-model', 'bert-small', '--folds', '0', '--out', path.join(tmp, 'gen.json'), '--json');
    const j = JSON.parse(out) as { testModel: string; holdout: { samples: number }; cv: unknown };
    expect(j.testModel).toBe('bert-small');
    expect(j.cv).toBeNull();
    const withBert = csvText.split('\n').filter((l) => l.includes('bert-small')).length;
    expect(j.holdout.samples).toBe(withBert);
  });

  it('two files of different devices: an error naming the second file', async () => {
    const other = await writeCsv('other.csv', csvText.replaceAll('sim:a100', 'ort:cpu'));
    await expect(train('--data', `${csv},${other}`, '--kind', 'linear', '--out', path.join(tmp, 'x.json'))).rejects.toThrow(/other\.csv: sample 0 was measured on 'ort:cpu' but .*profile\.csv on 'sim:a100'/);
  });

  describe('bad CSV input names file, line and column', () => {
    const lines = (): string[] => csvText.trimEnd().split('\n');
    it('a missing column', async () => {
      const [header, ...rest] = lines();
      const cols = header!.split(',');
      const drop = cols.indexOf('batch_1');
      const text = [cols.filter((_, i) => i !== drop).join(','), ...rest.map((l) => l.split(',').filter((_, i) => i !== drop).join(','))].join('\n') + '\n';
      const p = await writeCsv('missing.csv', text);
      await expect(train('--data', p, '--kind', 'linear', '--out', path.join(tmp, 'x.json'))).rejects.toThrow(/missing\.csv:1:batch_1: missing column 'batch_1'/);
    });

    it('a non-numeric cell', async () => {
      const [header, first, ...rest] = lines();
      const cols = first!.split(',');
      cols[header!.split(',').indexOf('batch_0')] = 'four';
      const p = await writeCsv('nonnumeric.csv', [header, first, cols.join(','), ...rest].join('\n') + '\n');
      await expect(train('--data', p, '--kind', 'linear', '--out', path.join(tmp, 'x.json'))).rejects.toThrow(/nonnumeric\.csv:3:batch_0: 'four' is not an integer/);
    });

    it('an unknown model', async () => {
      const [header, first, second, ...rest] = lines();
      const p = await writeCsv('unknown.csv', [header, first, second!.replace(/resnet50-small|bert-small/, 'nosuchnet'), ...rest].join('\n') + '\n');
      await expect(train('--data', p, '--kind', 'linear', '--out', path.join(tmp, 'x.json'))).rejects.toThrow(/unknown\.csv:3:model_0: unknown model 'nosuchnet'/);
    });

    it('an empty file', async () => {
      const p = await writeCsv('empty.csv', '');
      await expect(train('--data', p, '--kind', 'linear', '--out', path.join(tmp, 'x.json'))).rejects.toThrow(/empty\.csv:1: empty file/);
    });

    it('a header without rows', async () => {
      const p = await writeCsv('header.csv', lines()[0]! + '\n');
      await expect(train('--data', p, '--kind', 'linear', '--out', path.join(tmp, 'x.json'))).rejects.toThrow(/header\.csv: no profile rows/);
    });
  });

  describe('bad options', () => {
    it.each([
      [['--kind', 'forest'], /--kind must be mlp or linear, got 'forest'/],
      [['--features', 'all'], /--features must be full or flop/],
      [['--holdout', '1'], /--holdout must be a fraction in \[0, 1\), got '1'/],
      [['--folds', '-1'], /--folds must be an integer ≥ 0/],
      [['--epochs', '0'], /--epochs must be an integer ≥ 1/],
      [['--test-model', 'bert-small'], /--test-model needs --features flop/],
      [['--features', 'flop', '--test-model', 'vgg16'], /--test-model vgg16: no row of .* names that model/],
      [['--max-slots', '1'], /maxSlots 1 is smaller than the largest group in the data \(2 slots\)/],
    ] as [string[], RegExp][])('%j', async (args, re) => {
      await expect(train('--data', csv, '--out', path.join(tmp, 'x.json'), '--kind', 'linear', ...args)).rejects.toThrow(re);
    });
  });
});
