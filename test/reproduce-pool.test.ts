/**
 * The reproduce pool (`src/reproduce/pool.ts`): results come back per unit whatever thread ran
 * it; a unit that throws or whose thread dies fails with the unit's label and the pool goes on;
 * closing rejects what waits. The serial path (one worker) runs units in this thread, in order.
 */
import { describe, expect, it } from 'vitest';
import { UnitPool } from '../src/reproduce/pool.ts';

const ENTRY = new URL('./fixtures/pool-entry.ts', import.meta.url);

describe('UnitPool', () => {
  it('threads: each unit gets its own result (NaN kept), lines said reach onLog, a failing unit or a dead thread names the unit, the pool goes on', async () => {
    const logs: string[] = [];
    const pool = new UnitPool<unknown>({ workers: 2, entry: ENTRY, workerData: 'data', runHere: () => Promise.reject(new Error('not here')), onLog: (t) => logs.push(t) });
    try {
      const results = await Promise.all([1, 2, 3, 4, 5].map((n) => pool.run(n, `unit ${n}`)));
      expect(results).toEqual([1, 2, 3, 4, 5].map((n) => ({ value: 2 * n, nan: NaN })));
      expect(logs.sort()).toEqual([1, 2, 3, 4, 5].map((n) => `doubling ${n} (data)\n`));
      await expect(pool.run('throw', 'batching: a+b on sim:a100 under triton')).rejects.toThrow(/^batching: a\+b on sim:a100 under triton: this unit fails$/);
      await expect(pool.run('exit', 'mixes: c+d on sim:h200:graph under abacus')).rejects.toThrow(/^mixes: c\+d on sim:h200:graph under abacus: its reproduce thread failed \(exited with code 3\)/);
      expect(await pool.run(21, 'after')).toEqual({ value: 42, nan: NaN });
    } finally {
      await pool.close();
    }
    await expect(pool.run(1, 'late')).rejects.toThrow(/^late: the pool of reproduce threads is closed/);
  }, 60_000);

  it('one worker: units run in this thread one at a time, in order; a failure names its unit and the next ones still run', async () => {
    const order: string[] = [];
    let running = 0;
    const pool = new UnitPool<number>({
      workers: 1,
      entry: ENTRY,
      runHere: async (n) => {
        running++;
        expect(running).toBe(1);
        order.push(`start ${n}`);
        await new Promise((r) => setTimeout(r, 3 - n));
        order.push(`end ${n}`);
        running--;
        if (n === 2) throw new Error('two fails');
        return n * 10;
      },
    });
    const all = [0, 1, 2].map((n) => pool.run(n, `unit ${n}`));
    const settled = await Promise.allSettled(all);
    expect(settled.map((s) => (s.status === 'fulfilled' ? s.value : (s.reason as Error).message))).toEqual([0, 10, 'unit 2: two fails']);
    expect(order).toEqual(['start 0', 'end 0', 'start 1', 'end 1', 'start 2', 'end 2']);
    expect(await pool.run(3, 'unit 3')).toBe(30);
    await pool.close();
  });

  it('closing rejects the units still waiting, naming them', async () => {
    const pool = new UnitPool<unknown>({ workers: 2, entry: ENTRY, runHere: () => Promise.resolve(undefined) });
    const waiting = [1, 2, 3].map((n) => pool.run(n, `unit ${n}`));
    const settling = Promise.allSettled(waiting);
    await pool.close();
    const settled = await settling;
    for (const [i, s] of settled.entries()) {
      expect(s.status).toBe('rejected');
      expect((s as PromiseRejectedResult).reason).toBeInstanceOf(Error);
      expect(((s as PromiseRejectedResult).reason as Error).message).toMatch(new RegExp(`^unit ${i + 1}: the pool of reproduce threads closed`));
    }
    expect(() => new UnitPool({ workers: 0, entry: ENTRY, runHere: () => Promise.resolve(undefined) })).toThrow(RangeError);
  }, 30_000);
});
