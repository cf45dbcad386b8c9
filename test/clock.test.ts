/**
 * clock/: VirtualClock semantics (ordering, exact time jumps, settling of async work between
 * events, drivers, limits, determinism) and WallClock basics with generous bounds (no tight
 * wall-time asserts: the suite must pass on a loaded 2-core box).
 */
import { describe, expect, it, vi } from 'vitest';
import { VirtualClock, WallClock, type Clock, type TimerHandle } from '../src/clock/index.ts';
import { rng } from './helpers/rng.ts';

const BAD_DELAYS = [-1, -0.001, Number.NaN, Infinity, -Infinity];

/** Behaviour every Clock must show; run on both implementations. */
function describeClockBasics(name: string, make: () => { clock: Clock; drive: () => Promise<unknown> }): void {
  describe(`${name}: Clock contract`, () => {
    it('rejects bad delays with RangeError and a non-function callback with TypeError', async () => {
      const { clock } = make();
      for (const d of BAD_DELAYS) {
        expect(() => clock.setTimer(d, () => {}), String(d)).toThrow(RangeError);
        await expect(clock.sleep(d), String(d)).rejects.toThrow(RangeError);
      }
      expect(() => clock.setTimer(1, undefined as unknown as () => void)).toThrow(TypeError);
    });

    it('fires timers in due order, FIFO at equal due times, never before the due time', async () => {
      const { clock, drive } = make();
      const log: string[] = [];
      const late: string[] = [];
      const at = (label: string, delayMs: number): void => {
        const dueMs = clock.now() + delayMs;
        clock.setTimer(delayMs, () => {
          log.push(label);
          if (clock.now() < dueMs) late.push(`${label} early: ${clock.now()} < ${dueMs}`);
        });
      };
      at('c30', 30);
      at('a0', 0);
      at('b10-1', 10);
      at('b10-2', 10);
      at('b10-3', 10);
      at('a0-2', 0);
      await drive();
      expect(log).toEqual(['a0', 'a0-2', 'b10-1', 'b10-2', 'b10-3', 'c30']);
      expect(late).toEqual([]);
    });

    it('clearTimer cancels; clearing twice, after firing, or a foreign handle is a no-op', async () => {
      const { clock, drive } = make();
      const log: string[] = [];
      const a = clock.setTimer(5, () => log.push('a'));
      const b = clock.setTimer(5, () => log.push('b'));
      clock.setTimer(6, () => log.push('c'));
      clock.clearTimer(b);
      clock.clearTimer(b);
      clock.clearTimer({ id: a.id });
      await drive();
      clock.clearTimer(a);
      expect(log).toEqual(['a', 'c']);
    });

    it('sleep resolves after the delay', async () => {
      const { clock, drive } = make();
      let wokeAt = -1;
      const start = clock.now();
      const task = clock.sleep(20).then(() => {
        wokeAt = clock.now();
      });
      await drive();
      await task;
      expect(wokeAt).toBeGreaterThanOrEqual(start + 20);
    });
  });
}

describeClockBasics('VirtualClock', () => {
  const clock = new VirtualClock();
  return { clock, drive: () => clock.run() };
});
describeClockBasics('WallClock', () => {
  const clock = new WallClock();
  /** Wait (real time) until every timer of this clock has fired. */
  const drive = async (): Promise<void> => {
    while (clock.pendingTimers > 0) await new Promise((r) => setTimeout(r, 5));
  };
  return { clock, drive };
});

describe('VirtualClock: time', () => {
  it('starts at startMs and jumps exactly to each due time', async () => {
    const clock = new VirtualClock({ startMs: 100 });
    const seen: number[] = [];
    clock.setTimer(0.1, () => {
      seen.push(clock.now());
      clock.setTimer(0.2, () => seen.push(clock.now()));
    });
    clock.setTimer(7, () => seen.push(clock.now()));
    expect(clock.now()).toBe(100);
    expect(clock.nextTimerMs()).toBe(100 + 0.1);
    const fired = await clock.run();
    // Same floating-point arithmetic as the clock: due = now-when-set + delay.
    expect(seen).toEqual([100 + 0.1, 100 + 0.1 + 0.2, 100 + 7]);
    expect(clock.now()).toBe(107);
    expect(fired).toBe(3);
    expect(clock.eventsFired).toBe(3);
    expect(clock.pendingTimers).toBe(0);
    expect(clock.nextTimerMs()).toBeUndefined();
  });

  it('does not move while nothing drives it', async () => {
    const clock = new VirtualClock();
    let fired = false;
    clock.setTimer(0, () => (fired = true));
    await new Promise((r) => setTimeout(r, 5));
    expect([clock.now(), fired]).toEqual([0, false]);
  });

  it('a zero-delay timer set by a callback fires after the timers already due at that instant', async () => {
    const clock = new VirtualClock();
    const log: string[] = [];
    clock.setTimer(5, () => {
      log.push('a');
      clock.setTimer(0, () => log.push('a+0'));
    });
    clock.setTimer(5, () => log.push('b'));
    await clock.run();
    expect(log).toEqual(['a', 'b', 'a+0']);
    expect(clock.now()).toBe(5);
  });
});

describe('VirtualClock: settling between events', () => {
  it('runs chains of awaits, nextTicks, microtasks and setImmediates before time advances', async () => {
    const clock = new VirtualClock();
    const log: string[] = [];
    const deepAwaits = async (n: number): Promise<void> => {
      for (let i = 0; i < n; i++) await Promise.resolve(i);
    };
    const nestedImmediates = (depth: number): Promise<void> =>
      new Promise((resolve) => {
        const step = (left: number): void => {
          if (left === 0) resolve();
          else setImmediate(() => step(left - 1));
        };
        step(depth);
      });
    clock.setTimer(1, () => {
      log.push(`start@${clock.now()}`);
      void (async () => {
        await deepAwaits(1000);
        await new Promise<void>((r) => process.nextTick(r));
        await new Promise<void>((r) => queueMicrotask(r));
        await Promise.all([deepAwaits(10), deepAwaits(20)]);
        await nestedImmediates(5);
        log.push(`chain done@${clock.now()}`);
        clock.setTimer(2, () => log.push(`follow-up@${clock.now()}`));
      })();
    });
    clock.setTimer(1, () => log.push(`same instant@${clock.now()}`));
    clock.setTimer(1.5, () => log.push(`other@${clock.now()}`));
    await clock.run();
    expect(log).toEqual(['start@1', 'chain done@1', 'same instant@1', 'other@1.5', 'follow-up@3']);
  });

  it('sleeps in async tasks interleave by virtual time; run() picks up timers set after awaits', async () => {
    const clock = new VirtualClock();
    const log: string[] = [];
    const worker = async (name: string, delays: number[]): Promise<void> => {
      await Promise.resolve();
      await Promise.resolve();
      for (const d of delays) {
        await clock.sleep(d);
        log.push(`${name}@${clock.now()}`);
      }
    };
    const done = Promise.all([worker('x', [3, 3, 3]), worker('y', [2, 5, 1])]);
    await clock.run();
    await done;
    expect(log).toEqual(['y@2', 'x@3', 'x@6', 'y@7', 'y@8', 'x@9']);
  });

  it('settles pending work even when no timer is pending at the start', async () => {
    const clock = new VirtualClock();
    let resumedAt = -1;
    void (async () => {
      for (let i = 0; i < 5; i++) await Promise.resolve();
      await clock.sleep(4);
      resumedAt = clock.now();
    })();
    expect(clock.pendingTimers).toBe(0);
    await clock.run();
    expect(resumedAt).toBe(4);
  });
});

describe('VirtualClock: drivers', () => {
  it('runUntil fires timers due at or before tMs (including ones set meanwhile) and stops at tMs', async () => {
    const clock = new VirtualClock();
    const log: number[] = [];
    for (const d of [5, 10, 10.0001, 20]) clock.setTimer(d, () => log.push(clock.now()));
    clock.setTimer(8, () => clock.setTimer(2, () => log.push(-clock.now())));
    expect(await clock.runUntil(10)).toBe(4);
    expect(log).toEqual([5, 10, -10]);
    expect(clock.now()).toBe(10);
    expect(clock.pendingTimers).toBe(2);
    expect(await clock.runUntil(15)).toBe(1);
    expect(clock.now()).toBe(15);
    expect(await clock.runUntil(15)).toBe(0);
    await expect(clock.runUntil(14)).rejects.toThrow(RangeError);
    await expect(clock.runUntil(Number.NaN)).rejects.toThrow(RangeError);
    await expect(clock.runUntil(Infinity)).rejects.toThrow(RangeError);
    expect(await clock.run()).toBe(1);
    expect(log).toEqual([5, 10, -10, 10.0001, 20]);
    expect(clock.now()).toBe(20);
  });

  it('advance(ms) is runUntil(now() + ms); advance(0) fires only what is due now', async () => {
    const clock = new VirtualClock();
    const log: string[] = [];
    clock.setTimer(0, () => log.push('zero'));
    clock.setTimer(3, () => log.push('three'));
    expect(await clock.advance(0)).toBe(1);
    expect([clock.now(), log]).toEqual([0, ['zero']]);
    expect(await clock.advance(2.5)).toBe(0);
    expect(clock.now()).toBe(2.5);
    expect(await clock.advance(2.5)).toBe(1);
    expect([clock.now(), log]).toEqual([5, ['zero', 'three']]);
    for (const bad of BAD_DELAYS) await expect(clock.advance(bad), String(bad)).rejects.toThrow(RangeError);
    expect(clock.now()).toBe(5);
  });

  it('run() with no timers returns 0 and leaves now() where it was', async () => {
    const clock = new VirtualClock({ startMs: 42 });
    expect(await clock.run()).toBe(0);
    expect(clock.now()).toBe(42);
  });

  it('allows one driver at a time', async () => {
    const clock = new VirtualClock();
    clock.setTimer(1, () => {});
    const first = clock.run();
    await expect(clock.advance(1)).rejects.toThrow(/already driving/);
    expect(await first).toBe(1);
    let nested: unknown;
    clock.setTimer(1, () => {
      clock.run().catch((err: unknown) => (nested = err));
    });
    await clock.run();
    expect(nested).toBeInstanceOf(Error);
    expect(String(nested)).toMatch(/already driving/);
  });

  it('a throwing callback rejects the driver; the clock stays usable', async () => {
    const clock = new VirtualClock();
    const log: string[] = [];
    clock.setTimer(1, () => {
      throw new Error('boom');
    });
    clock.setTimer(2, () => log.push('after'));
    await expect(clock.run()).rejects.toThrow('boom');
    expect(clock.now()).toBe(1);
    expect(clock.pendingTimers).toBe(1);
    await clock.run();
    expect(log).toEqual(['after']);
  });
});

describe('VirtualClock: runaway guards and options', () => {
  it('maxEvents bounds one driver call with a RangeError; the clock can continue', async () => {
    const clock = new VirtualClock();
    let ticks = 0;
    const tick = (): void => {
      ticks++;
      clock.setTimer(1, tick);
    };
    clock.setTimer(1, tick);
    await expect(clock.run({ maxEvents: 50 })).rejects.toThrow(/maxEvents = 50/);
    expect([ticks, clock.now()]).toEqual([50, 50]);
    expect(await clock.runUntil(60)).toBe(10);
    const bounded = new VirtualClock({ maxEvents: 5 });
    bounded.setTimer(0, function again() {
      bounded.setTimer(1, again);
    });
    await expect(bounded.run()).rejects.toThrow(RangeError);
    expect(bounded.eventsFired).toBe(5);
  });

  it('maxEventsPerInstant catches a zero-delay loop that never lets time advance', async () => {
    const clock = new VirtualClock({ maxEventsPerInstant: 100 });
    const spin = (): void => {
      clock.setTimer(0, spin);
    };
    clock.setTimer(3, spin);
    await expect(clock.run()).rejects.toThrow(/maxEventsPerInstant = 100 .* at 3 ms/);
    expect(clock.eventsFired).toBe(100);
  });

  it('rejects bad options with RangeError', async () => {
    expect(() => new VirtualClock({ startMs: Number.NaN })).toThrow(RangeError);
    expect(() => new VirtualClock({ maxSettleTurns: 0 })).toThrow(/maxSettleTurns/);
    expect(() => new VirtualClock({ maxSettleTurns: Infinity })).toThrow(RangeError);
    expect(() => new VirtualClock({ maxEvents: 1.5 })).toThrow(/maxEvents/);
    expect(() => new VirtualClock({ maxEventsPerInstant: 0 })).toThrow(/maxEventsPerInstant/);
    await expect(new VirtualClock().run({ maxEvents: -1 })).rejects.toThrow(RangeError);
  });
});

describe('VirtualClock: determinism and ordering at scale', () => {
  /** A small closed-loop simulation: clients with think times, a shared server, timeouts. */
  async function simulate(seed: number): Promise<string[]> {
    const clock = new VirtualClock();
    const random = rng(seed);
    const log: string[] = [];
    let serverFreeAtMs = 0;
    const serve = async (client: number, q: number): Promise<void> => {
      const startMs = Math.max(clock.now(), serverFreeAtMs);
      const serviceMs = Math.round(random() * 40) / 4;
      serverFreeAtMs = startMs + serviceMs;
      const timeout = clock.setTimer(8, () => log.push(`timeout c${client} q${q} @${clock.now()}`));
      await clock.sleep(serverFreeAtMs - clock.now());
      await Promise.resolve();
      clock.clearTimer(timeout);
      log.push(`done c${client} q${q} @${clock.now()}`);
    };
    const client = async (id: number): Promise<void> => {
      for (let q = 0; q < 20; q++) {
        await clock.sleep(Math.round(random() * 20) / 2);
        log.push(`send c${id} q${q} @${clock.now()}`);
        await serve(id, q);
      }
    };
    const all = Promise.all([0, 1, 2, 3].map(client));
    await clock.run();
    await all;
    log.push(`end @${clock.now()} events ${clock.eventsFired}`);
    return log;
  }

  it('two identical runs give identical event logs', async () => {
    const first = await simulate(7);
    const second = await simulate(7);
    expect(first.length).toBeGreaterThan(160);
    expect(second).toEqual(first);
    expect(await simulate(8)).not.toEqual(first);
  });

  it('fires many random timers in (due, set order) order, with cancellations', async () => {
    const clock = new VirtualClock();
    const random = rng(3);
    const expected: { dueMs: number; seq: number }[] = [];
    const fired: number[] = [];
    const handles: { handle: TimerHandle; seq: number }[] = [];
    for (let seq = 0; seq < 5000; seq++) {
      const dueMs = Math.floor(random() * 500);
      handles.push({ handle: clock.setTimer(dueMs, () => fired.push(seq)), seq });
      expected.push({ dueMs, seq });
    }
    const cancelled = new Set<number>();
    for (const { handle, seq } of handles) {
      if (random() < 0.6) {
        clock.clearTimer(handle);
        cancelled.add(seq);
      }
    }
    expect(clock.pendingTimers).toBe(5000 - cancelled.size);
    await clock.run({ maxEvents: 5000 });
    const order = expected
      .filter((e) => !cancelled.has(e.seq))
      .sort((a, b) => a.dueMs - b.dueMs || a.seq - b.seq)
      .map((e) => e.seq);
    expect(fired).toEqual(order);
  });
});

describe('WallClock', () => {
  it('now() starts at 0 (on a faked performance.now()) and follows real time', () => {
    vi.useFakeTimers({ toFake: ['performance'] });
    try {
      const clock = new WallClock();
      expect(clock.now()).toBe(0);
      vi.advanceTimersByTime(25);
      expect(clock.now()).toBe(25);
    } finally {
      vi.useRealTimers();
    }
  });

  it('now() never decreases', () => {
    const clock = new WallClock();
    const first = clock.now();
    expect(first).toBeGreaterThanOrEqual(0);
    let prev = first;
    for (let i = 0; i < 10_000; i++) {
      const t = clock.now();
      expect(t).toBeGreaterThanOrEqual(prev);
      prev = t;
    }
  });

  it('sleep waits at least the delay', async () => {
    const clock = new WallClock();
    const start = clock.now();
    await clock.sleep(30);
    expect(clock.now() - start).toBeGreaterThanOrEqual(30);
  });

  it('sleep resolves once its delay has passed, not later: on faked timers and performance.now(), 29 ms leave it pending and the 30th ms ends it', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setImmediate', 'clearImmediate', 'performance'] });
    try {
      const clock = new WallClock();
      let done = false;
      void clock.sleep(30).then(() => (done = true));
      await vi.advanceTimersByTimeAsync(29);
      expect(done).toBe(false);
      await vi.advanceTimersByTimeAsync(1);
      expect(done).toBe(true);
      expect(clock.pendingTimers).toBe(0);
    } finally {
      vi.useRealTimers();
    }
  });

  it('a cleared timer neither fires nor stays pending; an empty clock holds no Node timer', async () => {
    const clock = new WallClock();
    let fired = false;
    const h = clock.setTimer(10, () => (fired = true));
    expect(clock.pendingTimers).toBe(1);
    clock.clearTimer(h);
    expect(clock.pendingTimers).toBe(0);
    await new Promise((r) => setTimeout(r, 40));
    expect(fired).toBe(false);
    const before = process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
    const h2 = clock.setTimer(60_000, () => {});
    expect(process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length).toBe(before + 1);
    clock.clearTimer(h2);
    expect(process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length).toBe(before);
  });

  it('runs the microtasks one callback starts before the next callback', async () => {
    const clock = new WallClock();
    const log: string[] = [];
    clock.setTimer(5, () => {
      log.push('a');
      void Promise.resolve().then(() => log.push('a-micro'));
    });
    clock.setTimer(5, () => log.push('b'));
    await clock.sleep(20);
    expect(log).toEqual(['a', 'a-micro', 'b']);
  });

  it('a delay beyond setTimeout’s 2^31−1 ms limit does not fire early', async () => {
    const clock = new WallClock();
    let fired = false;
    const h = clock.setTimer(2 ** 32, () => (fired = true));
    await new Promise((r) => setTimeout(r, 20));
    expect(fired).toBe(false);
    clock.clearTimer(h);
  });
});
