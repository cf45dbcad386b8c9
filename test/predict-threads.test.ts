/**
 * The thread count as a predictor feature (docs/threads.md): the encoding, training on rows
 * with thread counts, predictor files with and without the feature, the sampler's thread
 * rules and the CSV's threads_i columns.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { FeatureEncoder } from '../src/predict/features.ts';
import { loadPredictor, writePredictorFile } from '../src/predict/file.ts';
import type { GroupSlot } from '../src/predict/predictor.ts';
import { trainPredictor } from '../src/predict/train.ts';
import { formatProfileHeader, formatProfileRow, parseProfileCsv } from '../src/profile/csv.ts';
import type { ProfileRow } from '../src/profile/dataset.ts';
import { ProfileSampler, sameSlots } from '../src/profile/sampler.ts';
import { threadsFor } from '../src/threads.ts';
import { formulaLatencyMs, formulaRows, TINY_SPECS } from './predict-fixtures.ts';

const enc = (threads: boolean): FeatureEncoder => new FeatureEncoder({ featureSet: 'full', maxSlots: 2, trainedModels: [...TINY_SPECS.keys()], specs: TINY_SPECS, threads });
const [cnnName, txName] = [...TINY_SPECS.keys()].sort() as [string, string];

describe('FeatureEncoder with the threads feature', () => {
  it('ends every slot block in threads_i and encodes the count (absent: 0)', () => {
    const e = enc(true);
    const plain = enc(false);
    expect(e.width).toBe(plain.width + 2);
    expect(e.names.filter((n) => n.startsWith('threads_'))).toEqual(['threads_0', 'threads_1']);
    const slot: GroupSlot = { model: cnnName, start: 0, end: 2, batch: 1, seqLen: 0 };
    const x = new Float64Array(e.width);
    e.encode([{ ...slot, intraOpThreads: 2 }], x);
    expect(x[e.names.indexOf('threads_0')]).toBe(2);
    e.encode([slot], x);
    expect(x[e.names.indexOf('threads_0')]).toBe(0);
    // without the feature, the thread count changes nothing
    const a = new Float64Array(plain.width);
    const b = new Float64Array(plain.width);
    plain.encode([{ ...slot, intraOpThreads: 1 }], a);
    plain.encode([{ ...slot, intraOpThreads: 2 }], b);
    expect([...a]).toEqual([...b]);
  });

  it('orders equal slots by thread count, so permuting them gives the same features', () => {
    const e = enc(true);
    const s: GroupSlot = { model: cnnName, start: 0, end: 2, batch: 1, seqLen: 0 };
    const x = new Float64Array(e.width);
    const y = new Float64Array(e.width);
    e.encode([{ ...s, intraOpThreads: 2 }, { ...s, intraOpThreads: 1 }], x);
    e.encode([{ ...s, intraOpThreads: 1 }, { ...s, intraOpThreads: 2 }], y);
    expect([...x]).toEqual([...y]);
    expect(() => e.encode([{ ...s, intraOpThreads: 0 }], x)).toThrow(/slot 0 .*intraOpThreads 0 must be an integer ≥ 1/);
  });
});

describe('training on rows with thread counts', () => {
  /** Latency of the fixtures' formula ÷ the group's thread count (a CPU that scales perfectly). */
  const threadedRows = (n: number, seed: number): ProfileRow[] =>
    formulaRows(n, seed).map((r, i) => {
      const threads = threadsFor(i % 2 === 0 ? { kind: 'fixed', threads: 1 } : { kind: 'split', cores: 2 }, r.slots.length)!;
      const slots = r.slots.map((s) => ({ ...s, intraOpThreads: threads }));
      const ms = formulaLatencyMs(r.slots, TINY_SPECS) / threads;
      return { ...r, slots, medianMs: ms, meanMs: ms };
    });

  it('gives a predictor with the threads feature whose lone-query predictions at 2 threads differ from 1; its file round-trips', async () => {
    const trained = await trainPredictor(threadedRows(600, 5), { kind: 'linear', specs: TINY_SPECS, folds: 0, holdout: 0 });
    expect(trained.predictor.threadFeature).toBe(true);
    expect(trained.file.features.threads).toBe(true);
    const lone = (t: number): GroupSlot[] => [{ model: txName, start: 0, end: TINY_SPECS.get(txName)!.operators.length, batch: 4, seqLen: 0, intraOpThreads: t }];
    const [one, two] = trained.predictor.predict([lone(1), lone(2)]);
    expect(two!).toBeLessThan(one!);
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-predthreads-'));
    try {
      const file = path.join(dir, 'p.json');
      await writePredictorFile(file, trained.file);
      const loaded = await loadPredictor(file, { deviceId: 'sim:a100', models: TINY_SPECS });
      expect(loaded.threadFeature).toBe(true);
      expect([...loaded.predict([lone(1), lone(2)])]).toEqual([one, two]);
    } finally {
      await fs.rm(dir, { recursive: true, force: true });
    }
  });

  it('rows without thread counts (every older profile) give a predictor without the feature, as before', async () => {
    const trained = await trainPredictor(formulaRows(200, 3), { kind: 'linear', specs: TINY_SPECS, folds: 0, holdout: 0 });
    expect(trained.predictor.threadFeature).toBe(false);
    expect('threads' in trained.file.features).toBe(false);
    expect(trained.file.features.names.some((n) => n.startsWith('threads_'))).toBe(false);
    const slot: GroupSlot = { model: cnnName, start: 0, end: 2, batch: 1, seqLen: 0 };
    const [a, b] = trained.predictor.predict([[{ ...slot, intraOpThreads: 1 }], [{ ...slot, intraOpThreads: 2 }]]);
    expect(a).toBe(b);
  });
});

describe('sampler thread rules and threads_i columns', () => {
  const specs = [...TINY_SPECS.values()];

  it('each sample draws a rule; the slots are those of a sampler without rules, plus the rule\'s counts', () => {
    const plain = new ProfileSampler({ models: specs, maxGroupSize: 2, batchSizes: [1, 2], seed: 4 });
    const ruled = new ProfileSampler({ models: specs, maxGroupSize: 2, batchSizes: [1, 2], seed: 4, threadRules: [{ kind: 'fixed', threads: 1 }, { kind: 'split', cores: 2 }] });
    const seen = new Set<string>();
    for (let i = 0; i < 200; i++) {
      const p = plain.sampleAt(i).slots;
      const r = ruled.sampleAt(i).slots;
      expect(sameSlots(r.map(({ intraOpThreads: _t, ...s }) => s), p)).toBe(true);
      const t = r[0]!.intraOpThreads!;
      expect(r.every((s) => s.intraOpThreads === t)).toBe(true);
      // split:2 and fixed:1 give a pair 1 each; a lone query 1 or 2
      if (r.length === 2) expect(t).toBe(1);
      seen.add(`${r.length}:${t}`);
    }
    expect([...seen].sort()).toEqual(['1:1', '1:2', '2:1']);
  });

  it('CSV rows with thread counts round-trip; a file without the columns reads as before', () => {
    const rows: ProfileRow[] = [
      { sample: 0, device: 'ort:cpu', slots: [{ model: cnnName, start: 0, end: 2, batch: 1, seqLen: 0, intraOpThreads: 2 }], medianMs: 3, meanMs: 3, stdMs: 0, runs: 5 },
      { sample: 1, device: 'ort:cpu', slots: [{ model: cnnName, start: 0, end: 2, batch: 1, seqLen: 0, intraOpThreads: 1 }, { model: cnnName, start: 1, end: 3, batch: 2, seqLen: 0 }], medianMs: 4, meanMs: 4, stdMs: 0, runs: 5 },
    ];
    const text = formatProfileHeader(2, true) + rows.map((r) => formatProfileRow(r, 2, true)).join('');
    expect(text.split('\n')[0]).toContain('seq_len_0,threads_0,model_1');
    const parsed = parseProfileCsv(text, 'x.csv', TINY_SPECS);
    expect(parsed.threads).toBe(true);
    expect(parsed.rows).toEqual(rows);
    const legacy = parseProfileCsv(formatProfileHeader(2) + formatProfileRow({ ...rows[0]!, slots: [{ model: cnnName, start: 0, end: 2, batch: 1, seqLen: 0 }] }, 2), 'y.csv', TINY_SPECS);
    expect(legacy.threads).toBe(false);
    expect(legacy.rows[0]!.slots[0]).not.toHaveProperty('intraOpThreads');
    const bad = text.replace(',1,0,2,', ',1,0,0,'); // row 0: batch 1, seq_len 0, threads 2 → 0
    expect(() => parseProfileCsv(bad, 'z.csv', TINY_SPECS)).toThrow(/z\.csv:2:threads_0: 0 must be ≥ 1/);
  });
});
