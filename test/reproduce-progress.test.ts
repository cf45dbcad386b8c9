/**
 * `abacus reproduce all` as it goes (`src/reproduce/progress.ts`, docs/reproduction.md
 * "Interrupted runs"): after the k-th experiment, results.json and report.html hold exactly the
 * first k and the report marks the others as not run yet; a run that stops at an experiment
 * leaves the ones before it. The experiments are injected (small hand-made outcomes), so the test
 * exercises the sequence and the files, not the simulations.
 */
import { readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { ColocationRow } from '../src/reproduce/colocation.ts';
import { runExperimentSequence, type ExperimentKey } from '../src/reproduce/progress.ts';
import { EXPERIMENT_ORDER, readResults, type ReproduceResults } from '../src/reproduce/report.ts';

const tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-repro-progress-'));
afterAll(async () => {
  await fs.rm(tmp, { recursive: true, force: true });
});

function row(set: string, policy: string, p99OverQos: number, peakGoodputQps: number): ColocationRow {
  return { set, policy, qosMs: 100, rateQps: 50, violationRatio: 0, p99Ms: p99OverQos * 100, p99OverQos, goodputQps: 50, meanGroupSize: 1.2, predictorMape: 0.05, peakGoodputQps };
}

const run = { device: 'sim:a100', quick: true, queries: 300, seed: 1, wallSeconds: 1.5 };
const rows = ['abacus', 'fcfs', 'sjf', 'edf'].map((p, i) => row('resnet50+vgg16', p, 0.8 + i / 10, 130 - 10 * i));
/** What each injected experiment stores. */
const OUTCOMES: ReproduceResults = {
  qos: { ...run, policies: ['abacus', 'fcfs', 'sjf', 'edf'], rows },
  throughput: { ...run, policies: ['abacus', 'fcfs', 'sjf', 'edf'], rows },
  search: { ...run, decisions: 100, models: ['resnet101', 'bert'], slackMs: 0, rows: [1, 2, 16].map((ways) => ({ ways, decisions: 100, medianUs: 10 + ways, p99Us: 30, meanUs: 12, predictorCalls: 3, groupsScored: 8, searchRounds: 2 })) },
};
/** The section title each injected experiment's report section starts with. */
const TITLE: Partial<Record<ExperimentKey, string>> = { qos: '§7.2 Ensuring QoS', throughput: '§7.3 Improving peak throughput', search: '§7.7 Decision time vs search ways' };
const SEQUENCE = ['qos', 'throughput', 'search'] as const;

/** What the output folder holds now: the stored experiments and the report. */
async function onDisk(out: string): Promise<{ stored: string[]; html: string }> {
  return { stored: Object.keys(await readResults(out)), html: await fs.readFile(path.join(out, 'report.html'), 'utf8') };
}

describe('reproduce: results.json and report.html after every experiment', () => {
  it('after the k-th experiment the files hold exactly the first k; the report marks the rest as pending', async () => {
    const out = path.join(tmp, 'complete');
    await fs.mkdir(out);
    const results: ReproduceResults = {};
    const snapshots: { exp: string; done: number; stored: string[]; html: string }[] = [];
    await runExperimentSequence({
      out,
      experiments: SEQUENCE,
      results,
      run: async (exp) => {
        // before experiment k + 1 runs, the files still hold the first k (a stop here keeps them)
        if (exp !== 'qos') expect((await onDisk(out)).stored).toEqual(SEQUENCE.slice(0, SEQUENCE.indexOf(exp)));
        Object.assign(results, { [exp]: OUTCOMES[exp] });
      },
      onSaved: (exp, done, reportFile) => {
        const stored = Object.keys(JSON.parse(readFileSync(path.join(out, 'results.json'), 'utf8')) as ReproduceResults);
        snapshots.push({ exp, done, stored, html: readFileSync(reportFile, 'utf8') });
      },
    });
    expect(snapshots.map((s) => [s.exp, s.done])).toEqual([['qos', 1], ['throughput', 2], ['search', 3]]);
    for (const { done, stored, html } of snapshots) {
      expect(stored).toEqual(SEQUENCE.slice(0, done));
      for (const exp of SEQUENCE.slice(0, done)) expect(html).toContain(TITLE[exp]);
      for (const exp of SEQUENCE.slice(done)) {
        expect(html).not.toContain(TITLE[exp]);
        expect(html).toContain(`<dt>${exp}</dt><dd>pending: not run yet</dd>`);
      }
      const pending = SEQUENCE.slice(done);
      if (pending.length > 0) expect(html).toContain(`had not finished them): ${pending.join(', ')}.`);
    }
    const final = snapshots[2]!.html;
    expect(final).not.toContain('pending');
    // experiments the sequence did not include are marked as not run, not as pending
    const others = EXPERIMENT_ORDER.filter((e) => !(SEQUENCE as readonly string[]).includes(e));
    expect(final).toContain(`Not run: ${others.join(', ')}.`);
    for (const exp of others) expect(final).toContain(`<dt>${exp}</dt><dd>not run</dd>`);
    // both files were replaced atomically: no temporary file is left behind
    expect((await fs.readdir(out)).sort()).toEqual(['report.html', 'results.json']);
  });

  it('a run stopped at its third experiment leaves the first two, the rest marked pending', async () => {
    const out = path.join(tmp, 'stopped');
    await fs.mkdir(out);
    const results: ReproduceResults = {};
    const stop = new Error('stopped (SIGINT)');
    await expect(
      runExperimentSequence({
        out,
        experiments: SEQUENCE,
        results,
        run: async (exp) => {
          if (exp === 'search') throw stop;
          Object.assign(results, { [exp]: OUTCOMES[exp] });
          await Promise.resolve();
        },
      }),
    ).rejects.toBe(stop);
    const { stored, html } = await onDisk(out);
    expect(stored).toEqual(['qos', 'throughput']);
    expect(html).toContain(TITLE.qos);
    expect(html).toContain(TITLE.throughput);
    expect(html).not.toContain(TITLE.search);
    expect(html).toContain('<dt>search</dt><dd>pending: not run yet</dd>');
    expect(html).toContain('<dt>mig</dt><dd>not run</dd>');
  });
});
