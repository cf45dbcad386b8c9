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

it('reports median, p99 and counters for fcfs and abacus with both predictors, memo warm and cold', async () => {
  const r = await benchSchedule({ decisions: 200, warmup: 50, scenarios: 64, cacheDir });
  const names = ['cost-table', 'mlp'].flatMap((p) => ['warm', 'cold'].flatMap((m) => [`${p}/fcfs/${m}`, `${p}/abacus ways 4/${m}`, `${p}/abacus ways 4 refine/${m}`]));
  expect(r.rows.map((x) => `${x.predictor}/${x.policy}/${x.memo}`)).toEqual(names);
  for (const row of r.rows) {
    for (const x of [row.medianUs, row.p99Us, row.meanUs, row.ratioToFcfs]) expect(Number.isFinite(x) && x > 0, String(x)).toBe(true);
    expect(row.p99Us).toBeGreaterThanOrEqual(row.medianUs);
    // cold: every solo predicted; warm: 64 scenarios cycled, so step 1 is answered from the memo
    if (row.memo === 'cold') expect(row.soloMemoHits).toBe(0);
    else expect(row.soloMemoHits).toBeGreaterThan(0);
    if (row.memo === 'cold' || row.policy.startsWith('abacus')) expect(row.predictorCalls).toBeGreaterThan(0);
  }
  for (const row of r.rows.filter((x) => x.policy.startsWith('abacus'))) expect(row.searchRounds).toBeGreaterThan(0);
  const abacus = r.rows.filter((x) => x.policy === 'abacus ways 4');
  // refine rows: observed as predicted, factors exactly 1 — the same decisions, the same work
  const refine = r.rows.filter((x) => x.policy === 'abacus ways 4 refine');
  refine.forEach((x, i) => expect([x.groupsScored, x.searchRounds, x.soloMemoHits]).toEqual([abacus[i]!.groupsScored, abacus[i]!.searchRounds, abacus[i]!.soloMemoHits]));
  // same decisions with both predictors (the mlp row answers with the table's values).
  expect(abacus[0]!.groupsScored).toBe(abacus[2]!.groupsScored);
  expect(abacus[1]!.groupsScored).toBe(abacus[3]!.groupsScored);
  // the memo removes the solo scoring, never a decision: warm abacus scores exactly the 4 solos fewer
  expect(abacus[1]!.groupsScored - abacus[0]!.groupsScored).toBeCloseTo(4, 0);
  // dynamic batching: fcfs, abacus on the same queues without batching, abacus with batching, and without the barrier
  const policies = ['fcfs', 'abacus ways 4 (batching off)', 'abacus ways 4', 'abacus ways 4 (no barrier)'];
  const batchingNames = ['cost-table', 'mlp'].flatMap((p) => ['warm', 'cold'].flatMap((m) => policies.map((x) => `${p}/${x}/${m}`)));
  expect(r.batching.rows.map((x) => `${x.predictor}/${x.policy}/${x.memo}`)).toEqual(batchingNames);
  for (const row of r.batching.rows) {
    for (const x of [row.medianUs, row.p99Us, row.meanUs, row.ratioToFcfs, row.samplesPerSegment]) expect(Number.isFinite(x) && x > 0, String(x)).toBe(true);
  }
  const batched = r.batching.rows.filter((x) => x.policy === 'abacus ways 4');
  const unbatched = r.batching.rows.filter((x) => x.policy === 'abacus ways 4 (batching off)');
  // fusing makes the launched segments larger than the same queues' heads alone
  for (let i = 0; i < batched.length; i++) expect(batched[i]!.samplesPerSegment).toBeGreaterThan(unbatched[i]!.samplesPerSegment);
  // without the barrier: segments in flight are predicted too, and it fuses as well
  for (const row of r.batching.rows.filter((x) => x.policy === 'abacus ways 4 (no barrier)')) {
    expect(row.predictorCalls).toBeGreaterThan(0);
    expect(row.samplesPerSegment).toBeGreaterThan(1);
  }
});
