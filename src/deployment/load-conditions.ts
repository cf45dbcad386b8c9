/**
 * The machine's load when something is measured on a real CPU (docs/demo.md): the 1-minute
 * load average (`os.loadavg()[0]`, the count of runnable and uninterruptible threads averaged
 * with a 1-minute exponential decay, as `uptime` prints it) and the cores this process may use
 * (`os.availableParallelism()`). A profile taken under load measures contention from other
 * processes, not the overlap of our operators, and a predictor trained on it mispredicts once
 * the machine is quiet (31–67 % held-out MAPE was measured for busy profiles, docs/demo.md).
 *
 * Pure helpers plus one sampler; the thresholds are the documented definitions of "under
 * load" used by the predictor cache (`predictor-cache.ts`) and the demo (`demo.ts`).
 */
import os from 'node:os';

/**
 * Load average per core above which the machine counts as "under load" for profiling, and
 * "busy now" when a cached predictor is looked up: more than half of the cores have a
 * runnable thread on average before our own work starts (the value is read before the
 * profiler's executors run). 0.5: more than one busy core in two (docs/demo.md); one busy loop on a 2-core machine
 * reaches it after about a minute.
 */
export const PROFILE_BUSY_LOAD_PER_CORE = 0.5;

/** One reading of the machine's load. */
export interface LoadSample {
  /** 1-minute load average (runnable threads, averaged; `uptime`'s first number). */
  readonly loadAverage1m: number;
  /** `os.availableParallelism()`: cores this process may use. */
  readonly cores: number;
}

/** The load now (rounded to 0.01). */
export function sampleLoad(): LoadSample {
  return { loadAverage1m: Math.round((os.loadavg()[0] ?? 0) * 100) / 100, cores: os.availableParallelism() };
}

/**
 * Load average per core of a sample.
 * @throws RangeError when `cores` < 1 or the load average is negative or not finite.
 */
export function loadPerCore(s: LoadSample): number {
  if (!Number.isInteger(s.cores) || s.cores < 1) throw new RangeError(`cores must be an integer ≥ 1, got ${s.cores}`);
  if (!Number.isFinite(s.loadAverage1m) || s.loadAverage1m < 0) throw new RangeError(`loadAverage1m must be a finite number ≥ 0, got ${s.loadAverage1m}`);
  return s.loadAverage1m / s.cores;
}

/** Whether `s` counts as under load for profiling (load per core > `PROFILE_BUSY_LOAD_PER_CORE`). */
export function isUnderLoad(s: LoadSample): boolean {
  return loadPerCore(s) > PROFILE_BUSY_LOAD_PER_CORE;
}

/** The conditions a predictor was profiled under, stored beside it (`conditions.json` in its cache folder). */
export interface ProfileConditions {
  /** Load just before profiling started (the reading that decides `underLoad`). */
  readonly start: LoadSample;
  /** Load when profiling ended (includes the profiler's own executors: recorded, not judged). */
  readonly end: LoadSample;
  /** `isUnderLoad(start)`. */
  readonly underLoad: boolean;
  /** ISO 8601 time profiling ended. */
  readonly profiledAt: string;
}

/** What to do with a cached predictor given the conditions it was profiled under and the load now. */
export type CachedPredictorAction =
  /** Use it: conditions match (both quiet or both under load). */
  | { readonly kind: 'use' }
  /** Use it, and say why the conditions may not match (unknown conditions, or quiet profile on a busy machine now). */
  | { readonly kind: 'use-with-note'; readonly note: string }
  /** Profile again: it was profiled under load and the machine is quiet now. */
  | { readonly kind: 'reprofile'; readonly note: string };

/**
 * Decide about a cached predictor (pure). Profiled under load and quiet now → profile again (a
 * busy profile measured other processes' contention). Profiled quiet and busy now → keep it
 * and say so: a quiet profile is the better model of the device, and profiling under load
 * would replace it with a noisy one; the run's own conditions are reported with its results.
 * Unknown conditions (cached before they were recorded) → keep it and say so.
 */
export function cachedPredictorAction(conditions: ProfileConditions | undefined, now: LoadSample): CachedPredictorAction {
  const nowText = `load average ${now.loadAverage1m} on ${now.cores} cores now`;
  if (conditions === undefined) return { kind: 'use-with-note', note: `the cached predictor's profiling load is unknown (cached before it was recorded; ${nowText}); delete its folder to profile again` };
  const then = `load average ${conditions.start.loadAverage1m} on ${conditions.start.cores} cores when profiled`;
  const busyNow = isUnderLoad(now);
  if (conditions.underLoad && !busyNow) return { kind: 'reprofile', note: `the cached predictor was profiled under load (${then}) and the machine is quiet now (${nowText}): profiling again` };
  if (!conditions.underLoad && busyNow) return { kind: 'use-with-note', note: `the cached predictor was profiled on a quiet machine (${then}) and the machine is under load now (${nowText}): keeping the quiet profile; latencies measured now include the other processes' contention` };
  return { kind: 'use' };
}

/**
 * Parse a stored `conditions.json` (as written from a `ProfileConditions`).
 * @returns undefined when the value is not a complete record (an older or foreign file).
 */
export function parseProfileConditions(value: unknown): ProfileConditions | undefined {
  const sample = (v: unknown): LoadSample | undefined => {
    if (typeof v !== 'object' || v === null) return undefined;
    const { loadAverage1m, cores } = v as Record<string, unknown>;
    return typeof loadAverage1m === 'number' && Number.isFinite(loadAverage1m) && loadAverage1m >= 0 && typeof cores === 'number' && Number.isInteger(cores) && cores >= 1 ? { loadAverage1m, cores } : undefined;
  };
  if (typeof value !== 'object' || value === null) return undefined;
  const r = value as Record<string, unknown>;
  const start = sample(r['start']);
  const end = sample(r['end']);
  if (start === undefined || end === undefined || typeof r['profiledAt'] !== 'string') return undefined;
  return { start, end, underLoad: isUnderLoad(start), profiledAt: r['profiledAt'] };
}
