/**
 * The options of `OrtDevice.create` (`ort-device.ts`), their defaults and their validation.
 */
import os from 'node:os';
import { pino } from 'pino';
import type { Logger } from '../../log.ts';
import type { SessionConfig, WarmupSettle } from './protocol.ts';
import { realDeadlineTimer, type DeadlineTimer } from './deadline-timer.ts';
import { DEFAULT_RESTART_BACKOFF, type RestartBackoff } from './restart-backoff.ts';

/** Options of `OrtDevice.create`. Every field is optional; defaults in brackets. */
export interface OrtDeviceOptions {
  /** Execution provider ['cpu']. 'cuda' needs a CUDA-enabled onnxruntime-node install and a GPU. */
  readonly executionProvider?: 'cpu' | 'cuda';
  /** CUDA device ordinal [0]; ignored for 'cpu'. */
  readonly cudaDeviceId?: number;
  /** Threads inside one ORT kernel, per session [1]; 0 = ORT's default (one per core). A segment's `intraOpThreads` overrides it. */
  readonly intraOpNumThreads?: number;
  /**
   * Largest `Segment.intraOpThreads` a segment may name [os.availableParallelism()], in [1, 1024]:
   * bounds the sessions per operator (one per distinct count used).
   */
  readonly maxIntraOpThreads?: number;
  /**
   * Intra-op thread counts whose sessions every executor creates and warms up at `load` [none],
   * each in [1, maxIntraOpThreads]: the counts a thread rule will use (`threads.ts`
   * `threadCountsOf`), so that no segment waits for a session to be created.
   */
  readonly preloadIntraOpThreads?: readonly number[];
  /** Threads across kernels, per session [1] (sessions run in sequential mode). */
  readonly interOpNumThreads?: number;
  /** Let ORT pool threads spin while idle [false]; spinning burns the cores co-located services need. */
  readonly spinning?: boolean;
  /**
   * ORT's CPU memory arena (`enableCpuMemArena`) [true] and per-shape memory planning
   * (`enableMemPattern`) [true] for every session. Off trades some speed for memory returned to
   * the system between runs (`bench/executor-memory.ts` measures the RSS with both settings).
   */
  readonly cpuMemArena?: boolean;
  readonly memPattern?: boolean;
  /** ORT graph optimization level ['all']. */
  readonly graphOptimizationLevel?: 'disabled' | 'basic' | 'extended' | 'all';
  /** Warm-up runs per operator at load, batch 1, default seq [1]. */
  readonly warmupRuns?: number;
  /**
   * After `warmupRuns`, warm every operator at each of a service's `DeviceService.warmupShapes`
   * until its latency settles: `true` [default] with `DEFAULT_WARMUP_SETTLE`, or some of its
   * fields, or `false` (no such warm-up). Counts in `loadTimeoutMs`; its `budgetMs` defaults to
   * half of it (at most 60 s).
   */
  readonly warmupUntilSteady?: boolean | Partial<WarmupSettle>;
  /**
   * Each executor runs a full garbage collection after every this many segments [50], in
   * [0, 1000000], 0 = never (then V8 decides): ORT output tensors return their memory only when
   * their JS wrappers are collected. Measured with bench/executor-memory.ts (bert-small, 9
   * shapes, 10,000 requests): RSS growth after warm-up 3.6 % with 50 against 35.6 % without,
   * no latency difference beyond noise. The collection runs once no segment is queued (at the
   * latest after 4 × this many), never delaying one.
   */
  readonly gcEverySegments?: number;
  /** Per-executor budget of the synthetic-input cache in bytes [268435456 = 256 MiB]; 0 disables it. */
  readonly syntheticCacheBytes?: number;
  /**
   * Deadline in ms [120000], in [1, 2147483647], of the CUDA probe in `create` and of each
   * executor start (spawn + session creation + warm-up), at `load` and at every restart.
   */
  readonly loadTimeoutMs?: number;
  /**
   * Deadline in ms of one segment [0 = none], in [0, 2147483647], counted from when it reaches
   * the front of its executor's queue. An overrun kills the executor (SIGKILL) and restarts it;
   * the segment gets a DeviceFailureError "exceeded segmentTimeoutMs N ms".
   */
  readonly segmentTimeoutMs?: number;
  /**
   * How each segment's `segmentTimeoutMs` is timed [`realDeadlineTimer`: Node's `setTimeout`].
   * Tests pass their own to end a stalled segment deterministically (deadline-timer.ts).
   */
  readonly segmentDeadlineTimer?: DeadlineTimer;
  /**
   * Largest resident memory of one executor process, MiB [0 = none], in [0, 1048576]. Each
   * executor reports its RSS with every segment result; above the limit it is killed and
   * restarted, the segments it was running or had queued fail with a DeviceFailureError naming
   * the limit, and later ones run on the fresh executor (`executor-handle.ts`). An executor
   * above the limit right after loading fails `load`.
   */
  readonly executorMemoryLimitMb?: number;
  /** Most queries remembered as lost (their next resume gets an error result) [10000]; oldest forgotten first. */
  readonly maxLostQueries?: number;
  /** Most unfinished queries whose state is kept [10000]; beyond that the oldest is evicted (treated as lost). */
  readonly maxKeptQueries?: number;
  /** Backoff between failed executor restarts, ms [{ initialMs: 250, maxMs: 30000 }], each in [1, 2147483647]. */
  readonly restartBackoff?: RestartBackoff;
  /** Where executor exits, restarts, timeouts and load timings are logged [silent]. */
  readonly logger?: Logger;
}

/**
 * Settle rule of the warm-up at the serving shapes: three consecutive runs within 25 % of each
 * other, at most 20 runs per operator and shape. Three because one run agreeing with the one
 * before can be luck; 25 % because on a shared CPU run-to-run noise alone reaches 10–20 %
 * (measured: `bench/warm-up.ts`), and the goal is the first requests within 1.5× the steady
 * median, not a bit-exact steady state.
 */
export const DEFAULT_WARMUP_SETTLE: Omit<WarmupSettle, 'budgetMs'> = { window: 3, tolerance: 0.25, maxRuns: 20 };

const DEFAULT_SYNTHETIC_CACHE_BYTES = 256 * 1024 * 1024;
const DEFAULT_LOAD_TIMEOUT_MS = 120_000;
const DEFAULT_MAX_QUERIES = 10_000;
/** Largest delay setTimeout takes (2^31 − 1 ms). */
const MAX_TIMER_MS = 2_147_483_647;
const EXECUTION_PROVIDERS = ['cpu', 'cuda'] as const;
const OPT_LEVELS = ['disabled', 'basic', 'extended', 'all'] as const;

export interface ResolvedOptions {
  readonly session: SessionConfig;
  readonly maxIntraOpThreads: number;
  readonly preloadIntraOpThreads: readonly number[];
  readonly warmupRuns: number;
  /** undefined: off. */
  readonly warmupSettle: WarmupSettle | undefined;
  readonly syntheticCacheBytes: number;
  readonly gcEverySegments: number;
  readonly loadTimeoutMs: number;
  readonly segmentTimeoutMs: number;
  readonly segmentDeadlineTimer: DeadlineTimer;
  readonly executorMemoryLimitMb: number;
  readonly maxLostQueries: number;
  readonly maxKeptQueries: number;
  readonly restartBackoff: RestartBackoff;
  readonly logger: Logger;
}

function intOption(name: string, value: number | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new RangeError(`OrtDeviceOptions.${name} ${String(value)} must be an integer in [${min}, ${max}]`);
  }
  return value;
}

function boolOption(name: string, value: boolean | undefined, fallback: boolean): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== 'boolean') throw new TypeError(`OrtDeviceOptions.${name} must be a boolean`);
  return value;
}

/** `executorMemoryLimitMb`: a number in [0, 1048576] (MiB; fractions allowed), 0 when absent. */
function memoryLimitOption(value: number | undefined): number {
  if (value === undefined) return 0;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || value > 1_048_576) {
    throw new RangeError(`OrtDeviceOptions.executorMemoryLimitMb ${String(value)} must be a number of MiB in [0, 1048576] (0 = no limit)`);
  }
  return value;
}

/** `warmupUntilSteady` resolved (undefined: off). @throws RangeError / TypeError naming the field. */
function settleOption(value: boolean | Partial<WarmupSettle> | undefined, loadTimeoutMs: number): WarmupSettle | undefined {
  if (value === false) return undefined;
  if (value !== undefined && value !== true && (typeof value !== 'object' || value === null)) throw new TypeError('OrtDeviceOptions.warmupUntilSteady must be a boolean or an object');
  const given = typeof value === 'object' ? value : {};
  const window = intOption('warmupUntilSteady.window', given.window, DEFAULT_WARMUP_SETTLE.window, 1, 100);
  const maxRuns = intOption('warmupUntilSteady.maxRuns', given.maxRuns, DEFAULT_WARMUP_SETTLE.maxRuns, window, 10_000);
  const budgetMs = intOption('warmupUntilSteady.budgetMs', given.budgetMs, Math.min(60_000, Math.floor(loadTimeoutMs / 2)), 0, MAX_TIMER_MS);
  const tolerance = given.tolerance ?? DEFAULT_WARMUP_SETTLE.tolerance;
  if (typeof tolerance !== 'number' || !(tolerance >= 0 && tolerance <= 10)) throw new RangeError(`OrtDeviceOptions.warmupUntilSteady.tolerance ${String(tolerance)} must be a number in [0, 10]`);
  return { window, tolerance, maxRuns, budgetMs };
}

/** @throws RangeError / TypeError naming the option and its valid values. */
export function resolveOptions(o: OrtDeviceOptions): ResolvedOptions {
  if (typeof o !== 'object' || o === null) throw new TypeError('OrtDevice.create(options): options must be an object');
  const ep = o.executionProvider ?? 'cpu';
  if (!(EXECUTION_PROVIDERS as readonly string[]).includes(ep)) {
    throw new RangeError(`OrtDeviceOptions.executionProvider '${String(ep)}' is not supported (supported: ${EXECUTION_PROVIDERS.map((e) => `'${e}'`).join(', ')})`);
  }
  const level = o.graphOptimizationLevel ?? 'all';
  if (!(OPT_LEVELS as readonly string[]).includes(level)) {
    throw new RangeError(`OrtDeviceOptions.graphOptimizationLevel '${String(level)}' must be one of ${OPT_LEVELS.map((e) => `'${e}'`).join(', ')}`);
  }
  if (o.spinning !== undefined && typeof o.spinning !== 'boolean') throw new TypeError('OrtDeviceOptions.spinning must be a boolean');
  if (o.logger !== undefined && (typeof o.logger !== 'object' || o.logger === null || typeof o.logger.warn !== 'function')) {
    throw new TypeError('OrtDeviceOptions.logger must be a pino Logger');
  }
  const maxIntraOpThreads = intOption('maxIntraOpThreads', o.maxIntraOpThreads, Math.min(os.availableParallelism(), 1024), 1, 1024);
  if (o.segmentDeadlineTimer !== undefined && typeof o.segmentDeadlineTimer !== 'function') throw new TypeError('OrtDeviceOptions.segmentDeadlineTimer must be a function');
  const preload: unknown = o.preloadIntraOpThreads ?? [];
  if (!Array.isArray(preload)) throw new TypeError('OrtDeviceOptions.preloadIntraOpThreads must be an array of integers');
  const preloadIntraOpThreads = [...new Set((preload as unknown[]).map((n) => intOption('preloadIntraOpThreads[]', n as number, 1, 1, maxIntraOpThreads)))].sort((a, b) => a - b);
  return {
    maxIntraOpThreads,
    preloadIntraOpThreads,
    session: {
      executionProvider: ep,
      cudaDeviceId: intOption('cudaDeviceId', o.cudaDeviceId, 0, 0, 1024),
      intraOpNumThreads: intOption('intraOpNumThreads', o.intraOpNumThreads, 1, 0, 1024),
      interOpNumThreads: intOption('interOpNumThreads', o.interOpNumThreads, 1, 0, 1024),
      spinning: o.spinning ?? false,
      graphOptimizationLevel: level,
      cpuMemArena: boolOption('cpuMemArena', o.cpuMemArena, true),
      memPattern: boolOption('memPattern', o.memPattern, true),
    },
    warmupRuns: intOption('warmupRuns', o.warmupRuns, 1, 0, 100),
    warmupSettle: settleOption(o.warmupUntilSteady, intOption('loadTimeoutMs', o.loadTimeoutMs, DEFAULT_LOAD_TIMEOUT_MS, 1, MAX_TIMER_MS)),
    gcEverySegments: intOption('gcEverySegments', o.gcEverySegments, 50, 0, 1_000_000),
    syntheticCacheBytes: intOption('syntheticCacheBytes', o.syntheticCacheBytes, DEFAULT_SYNTHETIC_CACHE_BYTES, 0, Number.MAX_SAFE_INTEGER),
    loadTimeoutMs: intOption('loadTimeoutMs', o.loadTimeoutMs, DEFAULT_LOAD_TIMEOUT_MS, 1, MAX_TIMER_MS),
    segmentTimeoutMs: intOption('segmentTimeoutMs', o.segmentTimeoutMs, 0, 0, MAX_TIMER_MS),
    segmentDeadlineTimer: o.segmentDeadlineTimer ?? realDeadlineTimer,
    executorMemoryLimitMb: memoryLimitOption(o.executorMemoryLimitMb),
    maxLostQueries: intOption('maxLostQueries', o.maxLostQueries, DEFAULT_MAX_QUERIES, 1, Number.MAX_SAFE_INTEGER),
    maxKeptQueries: intOption('maxKeptQueries', o.maxKeptQueries, DEFAULT_MAX_QUERIES, 1, Number.MAX_SAFE_INTEGER),
    restartBackoff: {
      initialMs: intOption('restartBackoff.initialMs', o.restartBackoff?.initialMs, DEFAULT_RESTART_BACKOFF.initialMs, 1, MAX_TIMER_MS),
      maxMs: intOption('restartBackoff.maxMs', o.restartBackoff?.maxMs, DEFAULT_RESTART_BACKOFF.maxMs, 1, MAX_TIMER_MS),
    },
    logger: o.logger ?? pino({ enabled: false }),
  };
}
