/**
 * The benchmarks' code paths on small variants with one repetition, so `npm run bench` cannot
 * rot unnoticed. No timing is asserted (benchmarks are not tests): only that every reported
 * quantity is a finite positive number.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { benchSplitOverhead } from '../bench/split-overhead.ts';
import { benchOverlap } from '../bench/overlap.ts';
import { SMALL_VARIANTS } from './helpers/small-variants.ts';

let cacheDir: string;
beforeAll(async () => {
  cacheDir = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-bench-'));
});
afterAll(async () => {
  await fs.rm(cacheDir, { recursive: true, force: true });
});

const positive = (x: number): void => {
  expect(Number.isFinite(x) && x > 0, String(x)).toBe(true);
};

it('split-overhead reports both paths', async () => {
  const r = await benchSplitOverhead({ repeat: 1, threads: 1, cacheDir, zooOptions: SMALL_VARIANTS.resnet50, log: () => undefined });
  for (const x of [r.inProcess.wholeMs, r.inProcess.operatorsMs, r.inProcess.ratio, r.executor.wholeMs, r.executor.operatorsMs, r.executor.ratio]) positive(x);
});

it('overlap reports group, both baselines and ratios', async () => {
  const rs = await benchOverlap({
    pairs: [['resnet50', 'bert']],
    batches: [1],
    seqLen: 8,
    threads: 1,
    repeat: 1,
    cacheDir,
    zooOptions: { resnet50: SMALL_VARIANTS.resnet50, bert: SMALL_VARIANTS.bert },
    log: () => undefined,
  });
  expect(rs).toHaveLength(1);
  const r = rs[0]!;
  expect(r.soloMs).toHaveLength(2);
  for (const x of [r.groupMs, r.sequentialMs, r.sequentialAllCoresMs, r.ratio, r.ratioVsAllCores, ...r.soloMs]) positive(x);
});

it('event-loop reports the three phases (sim:a100, short)', async () => {
  const { benchEventLoop } = await import('../bench/event-loop.ts');
  const r = await benchEventLoop({ durationMs: 600, idleMs: 200, clients: 2, log: () => undefined });
  for (const d of [r.idleDelayMs, r.drainDelayMs, r.loadDelayMs]) for (const x of [d.p50, d.p99, d.max]) positive(x);
  positive(r.requests);
  expect(Object.keys(r.byStatus)).toEqual(['200']);
}, 120_000);
