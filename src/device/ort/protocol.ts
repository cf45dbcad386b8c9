/**
 * Messages between `OrtDevice` (parent) and one executor child process. Plain data only:
 * they cross the IPC channel with `serialization: 'advanced'` (V8 structured clone), so typed
 * arrays (incl. BigInt64Array) arrive as typed arrays. Only a query's inputs and final outputs
 * cross; intermediate tensors stay in the child.
 */
import type { AbacusErrorCode } from '../../errors.ts';
import { AbacusError, BadRequestError, DeviceFailureError, DeviceUnavailableError, InvalidModelError } from '../../errors.ts';
import type { ModelSpec } from '../../model/spec.ts';
import type { TensorMap } from '../../tensor.ts';
import type { Segment } from '../device.ts';

/** ORT session settings applied to every operator session of an executor. */
export interface SessionConfig {
  readonly executionProvider: 'cpu' | 'cuda';
  readonly cudaDeviceId: number;
  /** Threads inside one ORT kernel; 1 = no intra-op pool (the co-location default). */
  readonly intraOpNumThreads: number;
  readonly interOpNumThreads: number;
  /** ORT `session.intra_op.allow_spinning` / `session.inter_op.allow_spinning`. */
  readonly spinning: boolean;
  readonly graphOptimizationLevel: 'disabled' | 'basic' | 'extended' | 'all';
  /** ORT `enableCpuMemArena` (the CPU allocator's arena; ORT's default: on). */
  readonly cpuMemArena: boolean;
  /** ORT `enableMemPattern` (memory planned per input shape; ORT's default: on). */
  readonly memPattern: boolean;
}

/** An error as it crosses the channel. */
export interface WireError {
  readonly code: AbacusErrorCode;
  readonly message: string;
}

/** Parent → child: create the sessions of one service and warm them up. */
export interface LoadMessage {
  readonly t: 'load';
  readonly service: string;
  readonly spec: ModelSpec;
  readonly operatorPaths: readonly string[];
  readonly session: SessionConfig;
  /** Warm-up runs per operator at batch 1, default seq (0 = none). */
  readonly warmupRuns: number;
  /**
   * Shapes serving will use (batch size, sequence length; 0 for models without a sequence
   * axis): after the runs above, every operator runs at each of them until its latency settles
   * (`WarmupSettle`). Empty: none.
   */
  readonly warmupShapes: readonly { readonly batchSize: number; readonly seqLen: number }[];
  readonly warmupSettle: WarmupSettle;
  /**
   * Run a full V8 garbage collection after every this many segments (0 = never) — once no
   * message waits, at the latest after 4 × as many — and once after warm-up: ORT output tensors are freed only when the JS objects wrapping them are collected,
   * which V8 does late for wrappers this small (`bench/executor-memory.ts`). Needs the child
   * started with `--expose-gc` (`ExecutorHandle` does).
   */
  readonly gcEverySegments: number;
  /** Byte budget of the synthetic-input cache (0 disables it). */
  readonly syntheticCacheBytes: number;
  /**
   * Intra-op thread counts (besides `session.intraOpNumThreads`) whose sessions are created and
   * warmed up at load; other counts a segment names get their sessions on first use.
   */
  readonly preloadIntraOpThreads: readonly number[];
}

/**
 * When an operator's warm-up at one shape has settled: its last `window` runs lie within
 * `tolerance` of each other (max ≤ (1 + tolerance) × min); it stops unsettled after `maxRuns`
 * runs, and the whole settle phase stops after `budgetMs` (what is not warmed then is logged).
 */
export interface WarmupSettle {
  readonly window: number;
  readonly tolerance: number;
  readonly maxRuns: number;
  readonly budgetMs: number;
}

/** What the settle phase did (`loaded` message; logged by the parent). */
export interface WarmupReport {
  readonly shapes: number;
  readonly runs: number;
  /** (operator, shape) pairs that hit `maxRuns` without settling. */
  readonly unsettled: number;
  /** Pairs not warmed because `budgetMs` ran out. */
  readonly skipped: number;
  readonly ms: number;
}

/** Parent → child: run operators `[start, end)` of one query (a Segment; the child knows its service). */
export interface RunMessage extends Omit<Segment, 'service'> {
  readonly t: 'run';
  readonly reqId: number;
}

/** Parent → child: free a query's kept state (queued behind earlier runs). */
export interface ReleaseMessage {
  readonly t: 'release';
  readonly queryId: string;
}

/**
 * Parent → child: fault injection, armed for the next segment the child starts (queued like a
 * run). 'exit-in-next-segment': exit with code 70 after its first operator. 'stall-in-next-segment':
 * block the child's thread for `STALL_MS` after its first operator (a hung kernel).
 */
export interface FaultMessage {
  readonly t: 'fault';
  readonly fault: 'exit-in-next-segment' | 'stall-in-next-segment' | 'hold-memory';
  /** 'hold-memory' only: bytes the child allocates, touches and keeps (a leak, for memory-limit tests). */
  readonly bytes?: number;
}

/**
 * Parent → child: report the ids of the queries whose state the executor keeps and, per
 * operator, the intra-op thread counts it has sessions for (queued like a run, so it reflects
 * every message sent before it). For tests and leak checks.
 */
export interface StatsMessage {
  readonly t: 'stats';
  readonly reqId: number;
}

/** Parent → child: check an execution provider by creating a session on `model` (ONNX bytes). */
export interface ProbeMessage {
  readonly t: 'probe';
  readonly session: SessionConfig;
  readonly model: Uint8Array;
}

export type ParentMessage = LoadMessage | RunMessage | ReleaseMessage | FaultMessage | StatsMessage | ProbeMessage;

export type ChildMessage =
  /** `rssBytes`: the child's resident set size (`process.memoryUsage.rss()`) when it sent the message. */
  | { readonly t: 'loaded'; readonly rssBytes?: number; readonly warmup?: WarmupReport }
  | { readonly t: 'load-failed'; readonly error: WireError }
  | { readonly t: 'result'; readonly reqId: number; readonly ok: true; readonly latencyMs: number; readonly outputs?: TensorMap; readonly rssBytes?: number }
  | { readonly t: 'result'; readonly reqId: number; readonly ok: false; readonly error: WireError; readonly rssBytes?: number }
  | { readonly t: 'stats'; readonly reqId: number; readonly keptQueries: readonly string[]; readonly sessionThreads: readonly (readonly number[])[] }
  | { readonly t: 'probe-result'; readonly backends: readonly string[]; readonly error?: string };

/** Exit code of a child that exits on an injected fault. */
export const FAULT_EXIT_CODE = 70;

/** How long an injected stall blocks the child, in ms (10 min: "forever" for a test; the parent kills it). */
export const STALL_MS = 600_000;

/** Turn a wire error back into the domain error class of its code. */
export function fromWire(e: WireError): AbacusError {
  switch (e.code) {
    case 'device_failure':
      return new DeviceFailureError(e.message);
    case 'device_unavailable':
      return new DeviceUnavailableError(e.message);
    case 'invalid_model':
      return new InvalidModelError(e.message);
    case 'bad_request':
      return new BadRequestError(e.message);
    default:
      return new AbacusError(e.code, e.message);
  }
}
