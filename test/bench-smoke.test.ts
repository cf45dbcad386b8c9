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

it('event-loop reports the three phases and every hostile kind against both servers (sim:a100, short, small hostile bodies)', async () => {
  const { benchEventLoop } = await import('../bench/event-loop.ts');
  const { HOSTILE_KINDS, SMALL_HOSTILE } = await import('../bench/event-loop-hostile.ts');
  // a predictor of 40 profiled groups, not 200: training it was a third of this case's CPU, and fcfs does not use it
  const r = await benchEventLoop({ durationMs: 600, idleMs: 200, clients: 2, hostileSize: SMALL_HOSTILE, headersTimeoutMs: 1000, profileSamples: 40, log: () => undefined });
  for (const d of [r.idleDelayMs, r.drainDelayMs, r.loadDelayMs]) for (const x of [d.p50, d.p99, d.max]) positive(x);
  positive(r.requests);
  expect(Object.keys(r.byStatus)).toEqual(['200']);
  expect(r.hostile).toBeDefined();
  for (const results of [r.hostile?.defaults ?? [], r.hostile?.jsonLimitRaised ?? []]) {
    expect(results.map((k) => k.kind)).toEqual([...HOSTILE_KINDS]);
    for (const k of results) {
      positive(k.wallMs);
      positive(k.liveMs.n);
      const answers = Object.values(k.byStatus).reduce((a, b) => a + b, 0);
      const sent = k.kind === 'floats×16' ? SMALL_HOSTILE.concurrent : k.kind === 'slow-headers' ? SMALL_HOSTILE.slowConnections : 1;
      expect(answers, `${k.kind}: ${JSON.stringify(k.byStatus)}`).toBe(sent);
    }
    // the server closes every slow-header connection with a 408 once its header timeout passes
    expect(results.find((k) => k.kind === 'slow-headers')?.byStatus).toEqual({ 408: SMALL_HOSTILE.slowConnections });
  }
}, 120_000);
