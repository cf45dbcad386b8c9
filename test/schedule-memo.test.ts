/**
 * The controllers' memo of remaining-solo predictions (`schedule/heads.ts` `SoloMemo`): same
 * decisions, fewer predictor calls. Fake predictor as in schedule-abacus.test.ts (a: 10 ops ×
 * 1 ms, b: 10 ops × 2 ms; whole queries at batch 1: a 10 ms, b 20 ms).
 */
import { describe, expect, it } from 'vitest';
import { SoloMemo } from '../src/schedule/heads.ts';
import { createController } from '../src/schedule/index.ts';
import { FakePredictor } from './schedule/fake-predictor.ts';
import { input, query } from './schedule/query.ts';

describe('SoloMemo', () => {
  it('keys (model, start, end, batch, seqLen) exactly and remembers what was set', () => {
    const m = new SoloMemo();
    const base = query('q', 's', 'a', { arrivalMs: 0, qosTargetMs: 50 });
    const k = m.key(base);
    expect(m.get(k)).toBeUndefined();
    m.set(k, 12.5);
    expect(m.get(m.key({ ...base, id: 'other' }))).toBe(12.5); // the id is not part of the key
    const variants = [{ nextOperator: 1 }, { batch: 2 }, { seqLen: 3 }, { model: 'b' }, { operators: 11 }];
    const keys = new Set([k, ...variants.map((v) => m.key({ ...base, ...v }))]);
    expect(keys.size).toBe(variants.length + 1);
    for (const v of variants) expect(m.get(m.key({ ...base, ...v }))).toBeUndefined();
  });

  it('does not key slots outside its exact range, and clears itself at capacity', () => {
    const m = new SoloMemo(2);
    const base = query('q', 's', 'a', { arrivalMs: 0, qosTargetMs: 50 });
    expect(m.key({ ...base, batch: 1024 })).toBe(-1);
    expect(m.key({ ...base, seqLen: 65536 })).toBe(-1);
    m.set(-1, 1);
    expect(m.size).toBe(0);
    m.set(m.key(base), 1);
    m.set(m.key({ ...base, batch: 2 }), 2);
    expect(m.size).toBe(2);
    m.set(m.key({ ...base, batch: 4 }), 4);
    expect(m.size).toBe(1);
    expect(m.get(m.key({ ...base, batch: 4 }))).toBe(4);
    expect(() => new SoloMemo(0)).toThrow(RangeError);
  });
});

describe('controllers with the memo', () => {
  for (const policy of ['abacus', 'fcfs', 'sjf', 'edf', 'clockwork'] as const) {
    it(`${policy}: a second decision on the same heads is the same decision with the solo predictions remembered`, () => {
      const p = new FakePredictor();
      const c = createController(policy, {}, p);
      const x = query('x', 'S1', 'a', { arrivalMs: 90, qosTargetMs: 40 });
      const y = query('y', 'S2', 'b', { arrivalMs: 90, qosTargetMs: 105 });
      const inp = input(100, [[y], [x]]);
      const first = c.decide(inp);
      const callsFirst = p.calls.length;
      const second = c.decide(inp);
      const { stats: s1, ...d1 } = first;
      const { stats: s2, ...d2 } = second;
      expect(d2).toEqual(d1);
      expect(s1.soloMemoHits).toBe(0);
      // every head that the first decision scored alone is remembered
      const soloScored = p.calls.slice(0, callsFirst).flat().filter((g) => !g.includes('+')).length;
      expect(s2.soloMemoHits).toBe(soloScored);
      expect(s2.groupsScored).toBe(s1.groupsScored - soloScored);
      expect(p.calls.length - callsFirst).toBe(s2.predictorCalls);
    });
  }
});
