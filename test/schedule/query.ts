/** Test shorthands for waiting queries and schedule inputs. */
import type { BatchingLimits, ScheduleInput, WaitingQuery } from '../../src/schedule/controller.ts';
import { OPERATORS } from './fake-predictor.ts';

export interface QueryOpts {
  readonly arrivalMs: number;
  readonly qosTargetMs: number;
  readonly nextOperator?: number;
  readonly batch?: number;
  readonly seqLen?: number;
  /** Defaults to the test zoo's operator count of the model. */
  readonly operators?: number;
  /** Dynamic batching: the query may be fused with others of its service (set together with `fuseKey`). */
  readonly batching?: BatchingLimits;
  readonly fuseKey?: string;
}

/** Batching limits with `maxBatchSize`, no queue delay, no preferred sizes. */
export function limits(maxBatchSize: number): BatchingLimits {
  return { maxBatchSize, maxQueueDelayMs: 0, preferredBatchSizes: [] };
}

/** A waiting query `id` of `service` running test-zoo `model`. */
export function query(id: string, service: string, model: string, o: QueryOpts): WaitingQuery {
  return {
    id,
    service,
    model,
    operators: o.operators ?? OPERATORS[model] ?? 10,
    nextOperator: o.nextOperator ?? 0,
    batch: o.batch ?? 1,
    seqLen: o.seqLen ?? 0,
    arrivalMs: o.arrivalMs,
    qosTargetMs: o.qosTargetMs,
    ...(o.batching === undefined ? {} : { batching: o.batching }),
    ...(o.fuseKey === undefined ? {} : { fuseKey: o.fuseKey }),
  };
}

export function input(nowMs: number, queues: WaitingQuery[][], runningRemainingMs = 0): ScheduleInput {
  return { nowMs, queues, runningRemainingMs };
}

/** What `randomInput` may produce besides the default. */
export interface RandomInputOptions {
  /**
   * Dynamic batching: each service batches with probability 0.75 (maxBatchSize 1..6), its queue
   * holds 0..7 queries, and each query at operator 0 of a batching service carries the limits
   * and a fuseKey drawn from two (`k0`, `k1`); the other draws are as without it.
   */
  readonly batching?: boolean;
}

/**
 * A random input: 0..4 services (`s0`…), 0..3 queries each, test-zoo models, random progress,
 * batch 1 or 2, QoS 20..120 ms (15%: 1..51 ms) after up to 40 ms of waiting, running remainder
 * 0..20 ms (0 half the time). With `batching`, see `RandomInputOptions`.
 */
export function randomInput(r: () => number, tag: string, opts: RandomInputOptions = {}): ScheduleInput {
  const models = Object.keys(OPERATORS);
  const nowMs = 1000;
  const services = Math.floor(r() * 5);
  const queues: WaitingQuery[][] = [];
  let n = 0;
  for (let s = 0; s < services; s++) {
    const model = models[Math.floor(r() * models.length)]!;
    const ops = OPERATORS[model]!;
    const batching = opts.batching === true && r() < 0.75 ? limits(1 + Math.floor(r() * 6)) : undefined;
    const len = Math.floor(r() * (opts.batching === true ? 8 : 4));
    const queue: WaitingQuery[] = [];
    let arrivalMs = nowMs - 40 * r();
    for (let i = 0; i < len; i++) {
      const qosTargetMs = Math.round(20 + 100 * r());
      // drawn in this order (the default stream is unchanged by the batching option)
      const qos = r() < 0.15 ? Math.round(50 * r()) + 1 : qosTargetMs;
      const nextOperator = i === 0 && r() < 0.4 ? Math.floor(r() * ops) : 0;
      queue.push(
        query(`${tag}-${n++}`, `s${s}`, model, {
          arrivalMs,
          qosTargetMs: qos,
          nextOperator,
          batch: r() < 0.7 ? 1 : 2,
          ...(batching !== undefined && nextOperator === 0 ? { batching, fuseKey: r() < 0.8 ? 'k0' : 'k1' } : {}),
        }),
      );
      arrivalMs += 5 * r();
    }
    queues.push(queue);
  }
  return { nowMs, queues, runningRemainingMs: r() < 0.5 ? 0 : 20 * r() };
}
