/**
 * The demo's pure pieces (docs/demo.md): median and spread over rounds, the "meaningful"
 * verdict, the "under load" definition and what the predictor cache does with a cached
 * predictor given the load it was profiled under. Golden values computed by hand in comments.
 */
import { describe, expect, it } from 'vitest';
import { roundSpread } from '../src/report/rounds.ts';
import { BUSY_LOAD_PER_CORE, demoVerdict, MAX_RELATIVE_SPREAD, NO_OVERLAP_RATIO, type RoundOutcome } from '../src/cli/demo-verdict.ts';
import { headlineOf } from '../src/cli/demo.ts';
import { cachedPredictorAction, isUnderLoad, loadPerCore, parseProfileConditions, PROFILE_BUSY_LOAD_PER_CORE, type ProfileConditions } from '../src/deployment/load-conditions.ts';

const TOL = 12; // digits for toBeCloseTo

describe('roundSpread', () => {
  it('median, range and relative spread', () => {
    // sorted 0.9, 1.0, 1.2 → median 1.0; (1.2 − 0.9) / 1.0 = 0.3
    const s = roundSpread([1.2, 0.9, 1.0]);
    expect(s.median).toBeCloseTo(1.0, TOL);
    expect(s.min).toBe(0.9);
    expect(s.max).toBe(1.2);
    expect(s.relativeSpread).toBeCloseTo(0.3, TOL);
    expect(s.rounds).toBe(3);
    // even count: mean of the middle two (1.0 + 1.1) / 2 = 1.05; (1.2 − 0.8) / 1.05
    const e = roundSpread([1.2, 0.8, 1.1, 1.0]);
    expect(e.median).toBeCloseTo(1.05, TOL);
    expect(e.relativeSpread).toBeCloseTo(0.4 / 1.05, TOL);
  });

  it('one round or equal rounds: no spread; a zero median with a range: infinite', () => {
    expect(roundSpread([1.1]).relativeSpread).toBe(0);
    expect(roundSpread([0, 0]).relativeSpread).toBe(0);
    expect(roundSpread([0, 0, 1]).relativeSpread).toBe(Infinity);
  });

  it('throws on no rounds or a non-finite value, naming the round', () => {
    expect(() => roundSpread([])).toThrow(RangeError);
    expect(() => roundSpread([1, Number.NaN])).toThrow(/round 1 is NaN/);
  });
});

const round = (ratio: number | null, load = 1, overlapRatio = 0.7): RoundOutcome => ({ ratio, loadAverage1mStart: load, loadAverage1mEnd: load, overlapRatio });

describe('demoVerdict', () => {
  it('meaningful: calm load, rounds agree, overlap gain present', () => {
    const v = demoVerdict([round(1.1), round(1.05), round(1.15)], 2);
    expect(v.meaningful).toBe(true);
    expect(v.reasons).toEqual([]);
    expect(v.ratio?.median).toBeCloseTo(1.1, TOL);
    expect(v.overlapRatio).toBeCloseTo(0.7, TOL);
    expect(v.maxLoadAverage1m).toBe(1);
  });

  it('too busy when any round start or end exceeds the per-core threshold', () => {
    const cores = 2;
    const limit = BUSY_LOAD_PER_CORE * cores; // 4
    expect(demoVerdict([round(1.1, limit), round(1.1)], cores).meaningful).toBe(true); // at the limit: not above
    const v = demoVerdict([round(1.1), { ...round(1.1), loadAverage1mEnd: limit + 0.01 }], cores);
    expect(v.meaningful).toBe(false);
    expect(v.reasons).toHaveLength(1);
    expect(v.reasons[0]).toMatch(/too busy.*4\.01 on 2 cores \(round 2;/);
    expect(v.maxLoadAverage1m).toBeCloseTo(limit + 0.01, TOL);
  });

  it('spread too wide', () => {
    // 0.9, 1.0, 1.0 + 0.25 → (1.25 − 0.9) / 1.0 = 0.35 > 0.25
    const wide = demoVerdict([round(0.9), round(1.0), round(1.25)], 2);
    expect(wide.meaningful).toBe(false);
    expect(wide.reasons[0]).toMatch(/rounds disagree: abacus ÷ fcfs ranged 0\.90–1\.25 \(spread 35 %/);
    // exactly MAX_RELATIVE_SPREAD is still meaningful: 0.9, 1.0, 1.15 → 0.25
    expect(demoVerdict([round(0.9), round(1.0), round(1.0 + MAX_RELATIVE_SPREAD - 0.1)], 2).meaningful).toBe(true);
  });

  it('no overlap gain at or above the threshold (median over rounds)', () => {
    const v = demoVerdict([round(1.0, 1, NO_OVERLAP_RATIO), round(1.0, 1, 1.0), round(1.0, 1, 0.5)], 2);
    expect(v.overlapRatio).toBe(NO_OVERLAP_RATIO);
    expect(v.meaningful).toBe(false);
    expect(v.reasons[0]).toMatch(/no overlap gain/);
  });

  it('a single round or a round without a ratio is not meaningful', () => {
    const one = demoVerdict([round(1.2)], 2);
    expect(one.meaningful).toBe(false);
    expect(one.reasons[0]).toMatch(/only 1 round/);
    const none = demoVerdict([round(1.2), round(null)], 2);
    expect(none.meaningful).toBe(false);
    expect(none.ratio).toBeNull();
    expect(none.reasons[0]).toMatch(/no goodput in round 2/);
  });

  it('every failed criterion is listed', () => {
    const v = demoVerdict([round(0.5, 10, 1.0), round(1.5, 10, 1.0)], 2);
    expect(v.reasons.map((r) => r.split(':')[0])).toEqual(['the machine was too busy', 'the rounds disagree', 'no overlap gain']);
  });

  it('throws on no rounds or bad cores', () => {
    expect(() => demoVerdict([], 2)).toThrow(RangeError);
    expect(() => demoVerdict([round(1)], 0)).toThrow(RangeError);
  });
});

describe('headlineOf', () => {
  const base = {
    baseline: 'fcfs (2 threads)',
    abacusOverFcfsGoodputByBaseline: { 'fcfs (1 thread)': 1.3, 'fcfs (2 threads)': 1.1 },
    rounds: [{}, {}, {}] as never[],
    abacusOverFcfsGoodputSpread: roundSpread([1.05, 1.1, 1.2]),
  };
  it('headlines the ratio with its spread when meaningful', () => {
    expect(headlineOf({ ...base, meaningful: true, reasons: [] })).toEqual(['Abacus goodput ÷ fcfs (2 threads) goodput (the better fcfs) = 1.10, median of 3 rounds, range 1.05–1.20 (against fcfs (1 thread): 1.30)']);
  });
  it('says abacus fell back to one query at a time when its fallback decided most groups', () => {
    const [line] = headlineOf({ ...base, meaningful: true, reasons: [], abacusFallbackShare: 0.8 });
    expect(line).toMatch(/^Abacus fell back to one query at a time for 80 % of its groups .*; abacus goodput ÷ fcfs \(2 threads\) goodput \(the better fcfs\) = 1\.10/);
    expect(headlineOf({ ...base, meaningful: true, reasons: [], abacusFallbackShare: 0.2 })[0]).toMatch(/^Abacus goodput ÷/);
  });
  it('says plainly why not instead of headlining it', () => {
    const lines = headlineOf({ ...base, meaningful: false, reasons: ['the machine was too busy: x', 'no overlap gain: y'] });
    expect(lines[0]).toBe('NOT A MEANINGFUL RESULT: the machine was too busy: x; no overlap gain: y.');
    expect(lines[1]).toMatch(/^Measured anyway, not a result: abacus goodput ÷ fcfs \(2 threads\) goodput .* = 1\.10/);
  });
});

const conditions = (loadAverage1m: number, cores = 2): ProfileConditions => ({
  start: { loadAverage1m, cores },
  end: { loadAverage1m: loadAverage1m + 1, cores },
  underLoad: isUnderLoad({ loadAverage1m, cores }),
  profiledAt: '2025-01-01T00:00:00.000Z',
});

describe('load conditions', () => {
  it('under load above half a runnable thread per core', () => {
    expect(PROFILE_BUSY_LOAD_PER_CORE).toBe(0.5);
    expect(loadPerCore({ loadAverage1m: 3, cores: 2 })).toBe(1.5);
    expect(isUnderLoad({ loadAverage1m: 1, cores: 2 })).toBe(false); // 0.5: at the threshold
    expect(isUnderLoad({ loadAverage1m: 1.01, cores: 2 })).toBe(true);
    expect(() => loadPerCore({ loadAverage1m: 1, cores: 0 })).toThrow(RangeError);
    expect(() => loadPerCore({ loadAverage1m: -1, cores: 2 })).toThrow(RangeError);
  });

  it('cached predictor: busy profile on a quiet machine is profiled again; quiet profile on a busy machine is kept with a note', () => {
    const quiet = { loadAverage1m: 0.3, cores: 2 };
    const busy = { loadAverage1m: 2.5, cores: 2 };
    expect(cachedPredictorAction(conditions(0.2), quiet)).toEqual({ kind: 'use' });
    expect(cachedPredictorAction(conditions(3), busy)).toEqual({ kind: 'use' });
    const again = cachedPredictorAction(conditions(3), quiet);
    expect(again.kind).toBe('reprofile');
    expect(again.kind === 'reprofile' && again.note).toMatch(/profiled under load \(load average 3 on 2 cores.*quiet now \(load average 0\.3/);
    const kept = cachedPredictorAction(conditions(0.2), busy);
    expect(kept.kind).toBe('use-with-note');
    const unknown = cachedPredictorAction(undefined, quiet);
    expect(unknown.kind === 'use-with-note' && unknown.note).toMatch(/unknown/);
  });

  it('parses a stored record (judging under load from its start) and rejects incomplete ones', () => {
    const stored = JSON.parse(JSON.stringify({ ...conditions(3), underLoad: false })) as unknown;
    expect(parseProfileConditions(stored)).toEqual(conditions(3)); // underLoad recomputed: 1.5 per core
    expect(parseProfileConditions({ start: { loadAverage1m: 1, cores: 2 } })).toBeUndefined();
    expect(parseProfileConditions(null)).toBeUndefined();
    expect(parseProfileConditions({ ...conditions(1), start: { loadAverage1m: 1, cores: 0 } })).toBeUndefined();
  });
});
