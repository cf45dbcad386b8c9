/**
 * `abacus reproduce adaptive` (docs/adaptive.md; `src/reproduce/adaptive.ts`): the ×1.5 drift at
 * mid-run in virtual time, with and without online refinement. Small runs (600 queries, a
 * 1500-group profile): the JSON's shape, the definitions checked on the run's own numbers, and
 * the property that refinement beats the offline predictor on MAPE after the change. No tight
 * numbers: docs/adaptive.md has the full-size run.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { parse } from 'csv-parse/sync';
import { describe, expect, it } from 'vitest';
import type { ReproduceJson } from '../src/cli/reproduce.ts';
import { ADAPTIVE_SETUP, driftMetrics } from '../src/reproduce/adaptive.ts';
import type { GroupRecord, QueryRecord } from '../src/runtime/records.ts';
import { cliSandbox } from './helpers/cli.ts';

const sandbox = cliSandbox('abacus-repro-adaptive-', { cacheName: 'models' });

describe('abacus reproduce adaptive', () => {
  it('600 queries: adaptive carries both runs\' three numbers and rejectionLateMs 0 (on time on the virtual clock, unlike deciding only when idle); refinement beats the offline predictor on MAPE', async () => {
    const out = path.join(sandbox.tmp, 'out');
    const r = await sandbox.abacus('reproduce', 'adaptive', '--queries', '600', '--samples', '1500', '--out', out, '--json', '--workers', '1');
    expect(r.code, r.stderr).toBe(0);
    const a = (JSON.parse(r.stdout) as ReproduceJson).adaptive!;
    for (const run of [a, a.withoutRefinement, a.literal.withRefinement, a.literal.withoutRefinement]) {
      expect(run.mapeAfterRecovery).toBeGreaterThanOrEqual(0);
      expect(run.violationRatioAfterRecovery).toBeGreaterThanOrEqual(0);
      expect(run.violationRatioAfterRecovery).toBeLessThanOrEqual(1);
      expect(run.groupsToRecover === null || (Number.isInteger(run.groupsToRecover) && run.groupsToRecover >= 1 && run.groupsToRecover <= run.groupsAfterChange)).toBe(true);
      expect(run.groupsAfterChange).toBeGreaterThan(0);
      expect(run.groupsAfterChange).toBeLessThan(run.groups);
    }
    // on-time rejection: answered exactly at the hopeless instant, where deciding only when idle answers at the long group's end
    expect(a.rejectionLateMs).toBe(0);
    for (const c of [a.rejection.atArrival, a.rejection.duringOverrun]) {
      expect(c.outcome).toBe('qos_violation');
      expect(c.answeredAtMs).toBe(c.hopelessAtMs);
      expect(c.answeredAtMsDecidingWhenIdle).toBeGreaterThan(c.hopelessAtMs);
    }
    expect(a.rejection.atArrival.hopelessAtMs).toBe(a.rejection.atArrival.shortArrivalMs);
    expect(a.rejection.duringOverrun.hopelessAtMs).toBeGreaterThan(a.rejection.duringOverrun.shortArrivalMs);
    expect(a.rejection.duringOverrun.hopelessAtMs).toBeLessThan(a.rejection.duringOverrun.longMeasuredMs);
    // the rate rule: peak at QoS / 1.5, divided by 1.5; the change at the middle query's expected arrival
    expect(a.rateQps).toBeCloseTo(a.peakBeforeQps / ADAPTIVE_SETUP.factor, 9);
    expect(a.changeAtMs).toBe(Math.round((600 / 2 / a.rateQps) * 1000));
    expect(a.deviceId).toBe(`sim:a100:drift-1.5x@${a.changeAtMs}ms`);
    // refinement learns the drifted device; the offline predictor stays ≈ 1/1.4 short
    expect(a.mapeAfterRecovery).toBeLessThan(a.withoutRefinement.mapeAfterRecovery);
    expect(a.literal.withRefinement.mapeAfterRecovery).toBeLessThan(a.literal.withoutRefinement.mapeAfterRecovery);
    expect(a.groupsToRecover).not.toBeNull();
    expect(a.withoutRefinement.groupsToRecover).toBeNull();
    const rows = parse<Record<string, string>>(await fs.readFile(path.join(out, 'adaptive.csv'), 'utf8'), { columns: true });
    expect(rows.map((x) => x['run'])).toHaveLength(4);
    expect(await fs.readFile(path.join(out, 'report.html'), 'utf8')).toContain('Adaptive runtime: a ×1.5 drift at mid-run');
  }, 300_000);
});

describe('driftMetrics', () => {
  /** Groups at 1 ms apart; the change at 10 ms; APE given per group. */
  const groups = (apes: readonly number[]): GroupRecord[] => apes.map((e, i) => ({ index: i, launchMs: i, predictedMs: 10 * (1 + e), measuredMs: 10, segments: [] }));
  const queries = (spec: readonly [number, boolean][]): QueryRecord[] =>
    spec.map(([arrivalMs, ok], i) => ({ id: `q${i}`, service: 's', arrivalMs, batch: 1, seqLen: 0, qosTargetMs: 5, groups: [], outcome: ok ? 'completed' : 'rejected', endMs: arrivalMs + 1 }));

  it('groups to recover count only groups after the change; violations after recovery from the recovery launch; MAPE of the last 500 groups', () => {
    // before the change: 0 error; after: 0.3, 0.3, 0.0 × 20 → rolling over j groups: 0.3, 0.3, 0.2, 0.15, 0.12, 0.1, …, 0.6 / j ≤ 0.05 at j = 12
    const g = groups([...Array<number>(10).fill(0), 0.3, 0.3, ...Array<number>(20).fill(0)]);
    const q = queries([[0, true], [5, false], [10, false], [20, true], [21, false], [30, true]]);
    const m = driftMetrics({ groups: g, queries: q }, 10);
    expect(m.groupsToRecover).toBe(12);
    expect(m.recoveredAtMs).toBe(21); // the 12th group after the change, launched at 10 + 11
    expect(m.violationRatioAfterRecovery).toBeCloseTo(1 / 2, 12); // arrivals 21 (rejected) and 30
    expect(m.violationRatioBeforeChange).toBeCloseTo(1 / 2, 12);
    expect(m.violationRatioAfterChange).toBeCloseTo(2 / 4, 12);
    expect(m.mapeAfterRecovery).toBeCloseTo(0.6 / 32, 12); // fewer than 500 groups: all of them
    expect(m.groupsAfterChange).toBe(22);
    // given an instant, violations count from it
    expect(driftMetrics({ groups: g, queries: q }, 10, 0).violationRatioAfterRecovery).toBeCloseTo(3 / 6, 12);
    // never recovered: null, and violations after recovery count from the change
    const never = driftMetrics({ groups: groups([...Array<number>(10).fill(0), ...Array<number>(30).fill(0.2)]), queries: q }, 10);
    expect(never.groupsToRecover).toBeNull();
    expect(never.recoveredAtMs).toBe(10);
    expect(never.violationRatioAfterRecovery).toBeCloseTo(2 / 4, 12);
  });
});
