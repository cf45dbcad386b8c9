/**
 * Per-model inference statistics in the shape of Triton's statistics extension
 * (`ModelStatistics`, see `inference.ts`), recorded by the backend from what the runtime measures.
 *
 * What is real and what is 0 (docs/serving.md "Model configuration and statistics"):
 * - `inference_count`: samples of successful requests (a request of batch 4 counts 4);
 * - `execution_count`: successful model executions: a request that ran alone is one, a fused
 *   dynamic batch is one however many requests it carried;
 * - `last_inference`: wall-clock time of the last successful request, ms since the epoch (0: none);
 * - `inference_stats.success`: successful requests and their latency (backend entry → answer);
 * - `inference_stats.fail`: failed requests to a served model and version (any `ServeError`
 *   except `model_not_found`, and client disconnects) and their latency;
 * - `inference_stats.queue`: requests that reached the device and their queue time (arrival →
 *   first operator group launched);
 * - `inference_stats.compute_infer`: successful requests and their compute time (sum of the
 *   measured latencies of the operator groups they ran in: co-located segments share a group);
 * - `batch_stats[].compute_infer`: per executed batch size (the fused batch's size for a fused
 *   execution), executions and their compute time;
 * - `compute_input`, `compute_output`, `cache_hit`, `cache_miss`: always `{count: 0, ns: 0}`.
 *   Input/output copies happen inside the device's group run and are not timed apart from it;
 *   there is no response cache.
 *
 * Durations are kept in ms as doubles and reported as whole ns (`Math.round(ms * 1e6)`), exact
 * as integers up to 2^53 ns (104 days of cumulative time). Counters only grow; nothing resets them.
 *
 * Spec: https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_statistics.md
 */
import type { InferBatchStatistics, ModelStatistics, StatisticDuration } from './inference.ts';

interface Duration {
  count: number;
  ms: number;
}

interface BatchRow {
  readonly batchSize: number;
  readonly computeInfer: Duration;
}

interface ModelRow {
  lastInferenceMs: number;
  inferenceCount: number;
  executionCount: number;
  readonly success: Duration;
  readonly fail: Duration;
  readonly queue: Duration;
  readonly computeInfer: Duration;
  readonly batches: Map<number, BatchRow>;
}

/** One successful request, as `ModelStatsRecorder.success` takes it. */
export interface SuccessSample {
  /** Samples in the request (dim 0 of its inputs). */
  readonly batch: number;
  /** Backend entry → answer, ms. */
  readonly latencyMs: number;
  /** Arrival → first operator group launched, ms; undefined when it never launched. */
  readonly queueMs: number | undefined;
  /** Sum of the measured latencies of the groups it ran in, ms. */
  readonly computeMs: number;
  /**
   * The execution this request completes, when it is the first of its execution to be recorded
   * (a fused batch is recorded once): its batch size (samples) and compute time, ms.
   */
  readonly execution?: { readonly batch: number; readonly computeMs: number };
}

const ZERO: StatisticDuration = { count: 0, ns: 0 };

function ns(d: Duration): StatisticDuration {
  return { count: d.count, ns: Math.round(d.ms * 1e6) };
}

function add(d: Duration, ms: number): void {
  d.count++;
  if (Number.isFinite(ms) && ms > 0) d.ms += ms;
}

/** Cumulative statistics of a fixed set of models, each with one version. */
export class ModelStatsRecorder {
  private readonly rows = new Map<string, ModelRow>();
  private readonly version: string;
  private readonly now: () => number;

  /**
   * @param models served names, in the order `snapshot` lists them.
   * @param version the one version every model has (`"1"`).
   * @param now wall clock for `last_inference`, ms since the epoch [`Date.now`].
   */
  constructor(models: readonly string[], version: string, now: () => number = Date.now) {
    this.version = version;
    this.now = now;
    for (const m of models) this.add(m);
  }

  /** Start counting `model` (a model loaded at runtime); no-op when it is counted already (its counts are kept across unload and load). */
  add(model: string): void {
    if (this.rows.has(model)) return;
    this.rows.set(model, { lastInferenceMs: 0, inferenceCount: 0, executionCount: 0, success: { count: 0, ms: 0 }, fail: { count: 0, ms: 0 }, queue: { count: 0, ms: 0 }, computeInfer: { count: 0, ms: 0 }, batches: new Map() });
  }

  /** Record a successful request of `model`; unknown models are ignored. */
  success(model: string, s: SuccessSample): void {
    const row = this.rows.get(model);
    if (row === undefined) return;
    row.lastInferenceMs = this.now();
    row.inferenceCount += s.batch;
    add(row.success, s.latencyMs);
    if (s.queueMs !== undefined) add(row.queue, s.queueMs);
    add(row.computeInfer, s.computeMs);
    if (s.execution !== undefined) {
      row.executionCount++;
      let b = row.batches.get(s.execution.batch);
      if (b === undefined) {
        b = { batchSize: s.execution.batch, computeInfer: { count: 0, ms: 0 } };
        row.batches.set(b.batchSize, b);
      }
      add(b.computeInfer, s.execution.computeMs);
    }
  }

  /** Record a failed request of `model` after `latencyMs`, and its queue time when it reached the device. */
  fail(model: string, latencyMs: number, queueMs: number | undefined): void {
    const row = this.rows.get(model);
    if (row === undefined) return;
    add(row.fail, latencyMs);
    if (queueMs !== undefined) add(row.queue, queueMs);
  }

  /**
   * Statistics of `models` (each must be a name given to the constructor), in that order;
   * `batch_stats` by ascending batch size. `identify`: the model name and version each is
   * reported as (a version of a model served in several is counted under its own name)
   * [the name itself, the recorder's version].
   * @throws RangeError for a name the recorder does not know (a bug in the caller).
   */
  snapshot(models: readonly string[], identify?: (model: string) => { name: string; version: string }): ModelStatistics[] {
    return models.map((name) => {
      const row = this.rows.get(name);
      if (row === undefined) throw new RangeError(`ModelStatsRecorder.snapshot: unknown model '${name}'`);
      const batchStats: InferBatchStatistics[] = [...row.batches.values()]
        .sort((a, b) => a.batchSize - b.batchSize)
        .map((b) => ({ batch_size: b.batchSize, compute_input: ZERO, compute_infer: ns(b.computeInfer), compute_output: ZERO }));
      const id = identify?.(name) ?? { name, version: this.version };
      return {
        name: id.name,
        version: id.version,
        last_inference: row.lastInferenceMs,
        inference_count: row.inferenceCount,
        execution_count: row.executionCount,
        inference_stats: { success: ns(row.success), fail: ns(row.fail), queue: ns(row.queue), compute_input: ZERO, compute_infer: ns(row.computeInfer), compute_output: ZERO, cache_hit: ZERO, cache_miss: ZERO },
        batch_stats: batchStats,
      };
    });
  }
}
