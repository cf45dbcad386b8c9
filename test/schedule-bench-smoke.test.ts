/**
 * The scheduling-latency benchmark's code path (bench/schedule.ts) with a few decisions, so
 * `npm run bench -- --only schedule` cannot rot unnoticed. No timing is asserted (benchmarks
 * are not tests): only that every figure is finite and positive and that abacus' search ran.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { benchSchedule } from '../bench/schedule.ts';

let cacheDir: string;
beforeAll(async () => {
  cacheDir = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-schedule-bench-'));
});
afterAll(async () => {
  await fs.rm(cacheDir, { recursive: true, force: true });
});

it('reports median, p99 and counters for fcfs and abacus with both predictors', async () => {
  const r = await benchSchedule({ decisions: 200, warmup: 50, scenarios: 64, cacheDir });
  expect(r.rows.map((x) => `${x.predictor}/${x.policy}`)).toEqual(['cost-table/fcfs', 'cost-table/abacus ways 4', 'mlp/fcfs', 'mlp/abacus ways 4']);
  for (const row of r.rows) {
    for (const x of [row.medianUs, row.p99Us, row.meanUs, row.predictorCalls, row.groupsScored, row.ratioToFcfs]) expect(Number.isFinite(x) && x > 0, String(x)).toBe(true);
    expect(row.p99Us).toBeGreaterThanOrEqual(row.medianUs);
  }
  const abacus = r.rows.filter((x) => x.policy.startsWith('abacus'));
  for (const row of abacus) expect(row.searchRounds).toBeGreaterThan(0);
  // same decisions with both predictors (the mlp row answers with the table's values).
  expect(abacus[0]!.groupsScored).toBe(abacus[1]!.groupsScored);
});
