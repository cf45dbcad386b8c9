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
  /** Dynamic batching: the service's limits (absent: the query runs alone). */
  readonly batching?: BatchingLimits;
  /** Set with `batching` (default 'k' then). */
  readonly fuseKey?: string;
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
    ...(o.batching === undefined ? {} : { batching: o.batching, fuseKey: o.fuseKey ?? 'k' }),
  };
}

export function input(nowMs: number, queues: WaitingQuery[][], runningRemainingMs = 0): ScheduleInput {
  return { nowMs, queues, runningRemainingMs };
}

/** Options of `randomInput`. */
export interface RandomInputOptions {
  /** Dynamic batching on some services (`randomBatchingInput`); off: the original inputs, same seeds same inputs. */
  readonly batching?: boolean;
}

/**
 * A random input: 0..4 services (`s0`…), 0..3 queries each, test-zoo models, random progress,
 * batch 1 or 2, QoS 20..120 ms (15%: 1..51 ms) after up to 40 ms of waiting, running remainder
 * 0..20 ms (0 half the time). With `options.batching`: `randomBatchingInput`.
 */
export function randomInput(r: () => number, tag: string, options: RandomInputOptions = {}): ScheduleInput {
  if (options.batching === true) return randomBatchingInput(r, tag);
  const models = Object.keys(OPERATORS);
  const nowMs = 1000;
  const services = Math.floor(r() * 5);
  const queues: WaitingQuery[][] = [];
  let n = 0;
  for (let s = 0; s < services; s++) {
    const model = models[Math.floor(r() * models.length)]!;
    const ops = OPERATORS[model]!;
    const len = Math.floor(r() * 4);
    const queue: WaitingQuery[] = [];
    let arrivalMs = nowMs - 40 * r();
    for (let i = 0; i < len; i++) {
      const qosTargetMs = Math.round(20 + 100 * r());
      queue.push(
        query(`${tag}-${n++}`, `s${s}`, model, {
          arrivalMs,
          qosTargetMs: r() < 0.15 ? Math.round(50 * r()) + 1 : qosTargetMs,
          nextOperator: i === 0 && r() < 0.4 ? Math.floor(r() * ops) : 0,
          batch: r() < 0.7 ? 1 : 2,
        }),
      );
      arrivalMs += 5 * r();
    }
    queues.push(queue);
  }
  return { nowMs, queues, runningRemainingMs: r() < 0.5 ? 0 : 20 * r() };
}


// ---- Dynamic batching: random inputs with BatchingLimits (batching baselines) ----

const MAX_BATCH_SIZES = [2, 4, 8] as const;
const QUEUE_DELAYS_MS = [0, 5, 30, 100, 1000] as const;
const PREFERRED: readonly (readonly number[])[] = [[], [2], [2, 4]];

/**
 * A random input where some services batch dynamically: 1..4 services (`s0`…), each with
 * BatchingLimits 60% of the time (maxBatchSize 2, 4 or 8; maxQueueDelayMs 0, 5, 30, 100 or 1000;
 * preferred sizes none, [2] or [2, 4], those ≤ maxBatchSize; one frozen object per service);
 * 0..7 queries per queue, batch 1 (70%), 2 (20%) or 3, `fuseKey` 'k0' (80%) or 'k1' on the
 * queries of a batching service; the head already started 30% of the time (it keeps
 * `batching` — the runtime's view drops it once a query ran a segment, but policies must not
 * rely on that and look at `nextOperator` too); QoS 40..140 ms (15%: 1..51 ms) after 22..52 ms of waiting
 * for the head, less for the others; running remainder 0..20 ms (0 half the time).
 */
export function randomBatchingInput(r: () => number, tag: string): ScheduleInput {
  const models = Object.keys(OPERATORS);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const nowMs = 1000;
  const services = 1 + Math.floor(r() * 4);
  const queues: WaitingQuery[][] = [];
  let n = 0;
  for (let s = 0; s < services; s++) {
    const model = pick(models);
    const ops = OPERATORS[model]!;
    let batching: BatchingLimits | undefined;
    if (r() < 0.6) {
      const maxBatchSize = pick(MAX_BATCH_SIZES);
      batching = Object.freeze({
        maxBatchSize,
        maxQueueDelayMs: pick(QUEUE_DELAYS_MS),
        preferredBatchSizes: Object.freeze(pick(PREFERRED).filter((b) => b <= maxBatchSize)),
      });
    }
    const len = Math.floor(r() * 8);
    const queue: WaitingQuery[] = [];
    let arrivalMs = nowMs - 22 - 30 * r();
    for (let i = 0; i < len; i++) {
      const qosTargetMs = Math.round(40 + 100 * r());
      const u = r();
      queue.push(
        query(`${tag}-${n++}`, `s${s}`, model, {
          arrivalMs,
          qosTargetMs: r() < 0.15 ? Math.round(50 * r()) + 1 : qosTargetMs,
          nextOperator: i === 0 && r() < 0.3 ? Math.floor(r() * ops) : 0,
          batch: u < 0.7 ? 1 : u < 0.9 ? 2 : 3,
          ...(batching === undefined ? {} : { batching, fuseKey: r() < 0.8 ? 'k0' : 'k1' }),
        }),
      );
      arrivalMs += 3 * r();
    }
    queues.push(queue);
  }
  return { nowMs, queues, runningRemainingMs: r() < 0.5 ? 0 : 20 * r() };
}
