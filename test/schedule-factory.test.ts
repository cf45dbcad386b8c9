/** createController / parseControllerParams: defaults, coercion of CLI strings, errors that name the field. */
import { describe, expect, it } from 'vitest';
import {
  AbacusController,
  ClockworkController,
  createController,
  OneAtATimeController,
  OverlapAllController,
  parseControllerParams,
  POLICY_NAMES,
  POLICY_SUMMARIES,
  policyNeedsPredictor,
  TritonController,
} from '../src/schedule/index.ts';
import { FakePredictor } from './schedule/fake-predictor.ts';

describe('parseControllerParams', () => {
  it('fills the paper defaults', () => {
    expect(parseControllerParams('abacus')).toEqual({ ways: 2, slackMs: 5, drop: true, refine: false, fallback: false, guard: true, barrier: true, hold: true, threads: 'device', interference: false, fallbackThreads: 0 });
    for (const p of ['fcfs', 'sjf', 'edf', 'fcfs-batch', 'edf-batch']) expect(parseControllerParams(p)).toEqual({ drop: true, threads: 'device' });
    expect(parseControllerParams('triton')).toEqual({ drop: true });
    expect(parseControllerParams('overlap-all')).toEqual({});
    // Clockwork (OSDI'20): window 10, p99, max_exec 25 ms
    expect(parseControllerParams('clockwork')).toEqual({ window: 10, percentile: 99, maxExecMs: 25, threads: 'device' });
  });

  it('coerces numeric and boolean strings; undefined means default', () => {
    expect(parseControllerParams('abacus', { ways: '4', slackMs: ' 0.5 ', drop: 'false' })).toEqual({ ways: 4, slackMs: 0.5, drop: false, refine: false, fallback: false, guard: true, barrier: true, hold: true, threads: 'device', interference: false, fallbackThreads: 0 });
    expect(parseControllerParams('abacus', { ways: undefined })).toEqual({ ways: 2, slackMs: 5, drop: true, refine: false, fallback: false, guard: true, barrier: true, hold: true, threads: 'device', interference: false, fallbackThreads: 0 });
  });

  it('RangeError naming the field and its range for values out of range', () => {
    expect(() => parseControllerParams('abacus', { ways: 1 })).toThrow(new RangeError("abacus parameter 'ways' must be an integer in [2, 64], got 1"));
    expect(() => parseControllerParams('abacus', { ways: 2.5 })).toThrow(RangeError);
    expect(() => parseControllerParams('abacus', { slackMs: -1 })).toThrow(/abacus parameter 'slackMs' must be a number of ms in \[0, 1e9\], got -1/);
    expect(() => parseControllerParams('clockwork', { percentile: 0 })).toThrow(/'percentile' must be a number in \(0, 100\], got 0/);
    expect(() => parseControllerParams('clockwork', { window: '0' })).toThrow(RangeError);
    expect(() => parseControllerParams('clockwork', { maxExecMs: 0 })).toThrow(new RangeError("clockwork parameter 'maxExecMs' must be a number of ms in (0, 1e9], got 0"));
    expect(parseControllerParams('clockwork', { maxExecMs: '12.5' })).toEqual({ window: 10, percentile: 99, maxExecMs: 12.5, threads: 'device' });
  });

  it('TypeError naming the field for a wrong type or a parameter the policy lacks', () => {
    expect(() => parseControllerParams('abacus', { ways: 'four' })).toThrow(new TypeError("abacus parameter 'ways' must be an integer in [2, 64], got 'four'"));
    expect(() => parseControllerParams('fcfs', { drop: 'yes' })).toThrow(/fcfs parameter 'drop' must be a boolean, got 'yes'/);
    expect(() => parseControllerParams('fcfs', { drop: 1 })).toThrow(TypeError);
    expect(() => parseControllerParams('fcfs', { ways: 2 })).toThrow(new TypeError("fcfs has no parameter 'ways' (valid: drop, threads)"));
    expect(() => parseControllerParams('overlap-all', { drop: true })).toThrow(new TypeError("overlap-all has no parameter 'drop' (it takes none)"));
    expect(() => parseControllerParams('triton', { maxQueueDelayMs: 1 })).toThrow(new TypeError("triton has no parameter 'maxQueueDelayMs' (valid: drop)"));
    expect(() => parseControllerParams('abacus', { slack_ms: 3 })).toThrow(new TypeError("abacus has no parameter 'slack_ms' (valid: ways, slackMs, drop, refine, fallback, guard, barrier, hold, threads, interference, fallbackThreads; parameters are camelCase: 'slackMs')"));
  });

  it('RangeError naming the valid policies for an unknown one', () => {
    expect(() => parseControllerParams('lifo')).toThrow(new RangeError(`policy must be one of ${POLICY_NAMES.join(', ')}; got 'lifo'`));
  });
});

describe('createController', () => {
  it('builds each policy', () => {
    const p = new FakePredictor();
    expect(createController('abacus', { ways: 4 }, p)).toBeInstanceOf(AbacusController);
    expect((createController('abacus', { ways: 4 }, p) as AbacusController).params).toEqual({ ways: 4, slackMs: 5, drop: true });
    for (const policy of ['fcfs', 'sjf', 'edf', 'fcfs-batch', 'edf-batch'] as const) {
      const c = createController(policy, {}, p);
      expect(c).toBeInstanceOf(OneAtATimeController);
      expect(c.policy).toBe(policy);
    }
    expect(createController('clockwork', {}, p)).toBeInstanceOf(ClockworkController);
    expect((createController('clockwork', { maxExecMs: 40 }, p) as ClockworkController).params).toEqual({ window: 10, percentile: 99, maxExecMs: 40 });
    expect(createController('overlap-all')).toBeInstanceOf(OverlapAllController);
    expect(createController('triton')).toBeInstanceOf(TritonController);
    expect((createController('triton', { drop: 'false' }) as TritonController).params).toEqual({ drop: false });
  });

  it('TypeError when a policy that predicts gets no predictor; overlap-all and triton need none', () => {
    expect(() => createController('abacus')).toThrow(new TypeError("policy 'abacus' needs a predictor"));
    expect(() => createController('edf-batch')).toThrow(new TypeError("policy 'edf-batch' needs a predictor"));
    expect(POLICY_NAMES.filter((name) => !policyNeedsPredictor(name))).toEqual(['overlap-all', 'triton']);
  });

  it('every policy has a one-line summary for --help', () => {
    expect(Object.keys(POLICY_SUMMARIES).sort()).toEqual([...POLICY_NAMES].sort());
    for (const name of POLICY_NAMES) expect(POLICY_SUMMARIES[name].length, name).toBeGreaterThan(10);
  });
});
