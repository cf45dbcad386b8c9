/**
 * What the other processes on this machine want of its CPU, from Linux's `/proc` (`proc(5)`):
 * the runnable threads that are not ours, averaged over time, in cores.
 *
 * Each sample reads `procs_running` (the threads runnable now, machine-wide) from `/proc/stat`
 * and counts our own runnable threads — every thread of this process and of the device's
 * executors (`/proc/PID/task/TID/stat`, state `R`), just before and just after, the larger
 * count — and takes the difference. The samples are
 * averaged exponentially (half-life `HALF_LIFE_MS`), at most one per `PERIOD_MS`.
 *
 * Why runnable threads and not CPU time: CPU time is what the neighbours *got*, which on a shared
 * core depends on what we run (four busy loops beside our two threads got 4/6 of two cores, 1.3
 * cores, as if one core were busy); the runnable count is what they *want*, which is what decides
 * whether a second intra-op thread of ours finds a core or waits behind a neighbour.
 * (Measured on the 2-core development machine, docs/interference.md: beside one busy
 * loop, one query at a time at one thread served more within QoS than at two threads or
 * overlapped, because it alone never shared a core with the loop.)
 *
 * Elsewhere than Linux (no `/proc/stat`) `demandCores` is undefined and nothing reacts to it.
 * Not thread-safe. A sample reads `/proc/stat` and, twice, one small file per thread of ours: 0.15
 * ms for a process alone, 0.56 ms beside two child processes of 18 threads each (measured on the
 * 2-core development machine), taken on the decision path; hence at most one per `PERIOD_MS`
 * (at one per 50 ms abacus served 3–5 % less than without the trigger on the quiet machine, where
 * it never fired, in three contention runs; docs/interference.md).
 */
import fs from 'node:fs';
import os from 'node:os';
import type { Device } from './device.ts';

/** At most one sample per this many ms (module docs: each costs the decision path up to about a millisecond). */
export const PERIOD_MS = 250;
/** Half-life of the average, ms: a neighbour that arrives shows within about two of them. */
export const HALF_LIFE_MS = 1000;

/**
 * A `ProcNeighbours` that counts as ours the executors of a device opened later (the controller
 * is built before the device): `attach` it once open (`Device.processIds`); before, only this
 * process's threads are ours.
 */
export function neighboursBeside(): { readonly neighbours: ProcNeighbours; attach(device: Device): void } {
  let device: Device | undefined;
  return {
    neighbours: new ProcNeighbours(() => device?.processIds?.() ?? []),
    attach: (d) => {
      device = d;
    },
  };
}

/** What the calibration fallback asks of the machine (`CpuNeighbours` in `schedule/controller.ts`), from `/proc`. */
export class ProcNeighbours {
  readonly cores: number;
  readonly #ownPids: () => readonly number[];
  readonly #root: string;
  #lastMs = -Infinity;
  #average: number | undefined;
  #unavailable = false;

  /**
   * @param ownPids the processes whose threads are ours beside this one (the device's executors), asked at each sample
   * @param options.root where `/proc` is [`/proc`] (tests); `cores` [`os.availableParallelism()`]
   */
  constructor(ownPids: () => readonly number[] = () => [], options: { root?: string; cores?: number } = {}) {
    this.#ownPids = ownPids;
    this.#root = options.root ?? '/proc';
    this.cores = options.cores ?? os.availableParallelism();
  }

  /**
   * Runnable threads of other processes, averaged (cores wanted, ≥ 0), as of `nowMs` (ms on the
   * runtime's clock, wall time on a real device; a sample is taken when the last is `PERIOD_MS`
   * old); undefined where `/proc/stat` cannot be read.
   */
  demandCores(nowMs: number): number | undefined {
    if (this.#unavailable) return undefined;
    if (nowMs - this.#lastMs < PERIOD_MS) return this.#average;
    const sample = this.#sample();
    if (sample === undefined) {
      this.#unavailable = this.#average === undefined; // never readable: stop trying
      return this.#average;
    }
    const dt = Math.min(nowMs - this.#lastMs, 10 * HALF_LIFE_MS);
    const keep = this.#average === undefined ? 0 : Math.pow(0.5, dt / HALF_LIFE_MS);
    this.#average = keep * (this.#average ?? 0) + (1 - keep) * sample;
    this.#lastMs = nowMs;
    return this.#average;
  }

  /** One sample: runnable threads machine-wide minus ours, ≥ 0; undefined when `/proc/stat` cannot be read. */
  #sample(): number | undefined {
    const pids = [...new Set([process.pid, ...this.#ownPids()])];
    const ours = (): number => pids.reduce((n, pid) => n + this.#runnableThreads(pid), 0);
    // our threads counted before and after the machine-wide count, the larger taken: a thread of
    // ours that stopped or started running between the reads is not taken for a neighbour
    const before = ours();
    let running: number;
    try {
      const m = /^procs_running (\d+)$/m.exec(fs.readFileSync(`${this.#root}/stat`, 'utf8'));
      if (m === null) return undefined;
      running = Number(m[1]);
    } catch {
      return undefined;
    }
    return Math.max(0, running - Math.max(before, ours()));
  }

  /** Threads of `pid` in state R now (0 when it is gone). */
  #runnableThreads(pid: number): number {
    let tids: string[];
    try {
      tids = fs.readdirSync(`${this.#root}/${pid}/task`);
    } catch {
      return 0;
    }
    let n = 0;
    for (const tid of tids) {
      try {
        const stat = fs.readFileSync(`${this.#root}/${pid}/task/${tid}/stat`, 'utf8');
        if (stat.charAt(stat.lastIndexOf(')') + 2) === 'R') n++;
      } catch {
        // the thread ended between the listing and the read
      }
    }
    return n;
  }
}
