/**
 * clock/drive.ts: `driveUntilSettled` drives a VirtualClock until one promise settles, also
 * across real I/O between timers. No wall-clock assertions.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { driveUntilSettled, VirtualClock } from '../src/clock/index.ts';

describe('driveUntilSettled', () => {
  it('returns the value of work that only waits on the clock, at the exact virtual time', async () => {
    const clock = new VirtualClock();
    const work = (async () => {
      await clock.sleep(5);
      await clock.sleep(2.5);
      return clock.now();
    })();
    await expect(driveUntilSettled(clock, work)).resolves.toBe(7.5);
    expect(clock.now()).toBe(7.5);
  });

  it('resolves at once for work that is already settled, firing nothing', async () => {
    const clock = new VirtualClock();
    await expect(driveUntilSettled(clock, Promise.resolve(42))).resolves.toBe(42);
    expect(clock.now()).toBe(0);
    expect(clock.eventsFired).toBe(0);
  });

  it('keeps driving across real file I/O between timers (plain clock.run() would stop early)', async () => {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-drive-'));
    try {
      const file = path.join(dir, 'f.txt');
      const clock = new VirtualClock();
      const log: string[] = [];
      const work = (async () => {
        for (let i = 0; i < 5; i++) {
          await clock.sleep(10);
          await fs.appendFile(file, `${i}@${clock.now()}\n`);
          log.push(await fs.readFile(file, 'utf8'));
        }
        return clock.now();
      })();
      await expect(driveUntilSettled(clock, work)).resolves.toBe(50);
      expect(await fs.readFile(file, 'utf8')).toBe('0@10\n1@20\n2@30\n3@40\n4@50\n');
      expect(log).toHaveLength(5);
    } finally {
      await fs.rm(dir, { recursive: true, force: true });
    }
  });

  it('keeps driving across real timers (setTimeout outside the clock)', async () => {
    const clock = new VirtualClock();
    const work = (async () => {
      await clock.sleep(1);
      await new Promise<void>((resolve) => setTimeout(resolve, 5));
      await clock.sleep(1);
      return clock.now();
    })();
    await expect(driveUntilSettled(clock, work)).resolves.toBe(2);
  });

  it('propagates a rejection of the work (after virtual time reached the failure)', async () => {
    const clock = new VirtualClock();
    const work = (async () => {
      await clock.sleep(3);
      throw new RangeError('boom at 3');
    })();
    await expect(driveUntilSettled(clock, work)).rejects.toThrow('boom at 3');
    expect(clock.now()).toBe(3);
  });

  it('propagates an error thrown by a timer callback (the clock rejects)', async () => {
    const clock = new VirtualClock();
    clock.setTimer(1, () => {
      throw new Error('callback failed');
    });
    await expect(driveUntilSettled(clock, clock.sleep(5))).rejects.toThrow('callback failed');
  });

  it('rejects when another driver is already driving the clock', async () => {
    const clock = new VirtualClock();
    clock.setTimer(1, () => {});
    const first = clock.run();
    await expect(driveUntilSettled(clock, clock.sleep(1))).rejects.toThrow(/already driving/);
    await first;
  });

  it('rejects work that can never settle once idleTimeoutMs passed', async () => {
    const clock = new VirtualClock();
    const never = new Promise<number>(() => {});
    await expect(driveUntilSettled(clock, never, { idleTimeoutMs: 20 })).rejects.toThrow(/never happens/);
    await expect(driveUntilSettled(clock, Promise.resolve(1), { idleTimeoutMs: -1 })).rejects.toThrow(RangeError);
  });

  it('stops at the instant the work settled: later timers of other work stay pending', async () => {
    const clock = new VirtualClock();
    let late = false;
    clock.setTimer(100, () => {
      late = true;
    });
    let sameInstant = false;
    clock.setTimer(1, () => {
      sameInstant = true;
    });
    await expect(driveUntilSettled(clock, clock.sleep(1))).resolves.toBeUndefined();
    expect(sameInstant).toBe(true);
    expect(late).toBe(false);
    expect(clock.now()).toBe(1);
    expect(clock.pendingTimers).toBe(1);
    await clock.run();
    expect(late).toBe(true);
  });
});
