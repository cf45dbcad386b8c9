/** Test shorthands for waiting queries and schedule inputs. */
import type { ScheduleInput, WaitingQuery } from '../../src/schedule/controller.ts';
import { OPERATORS } from './fake-predictor.ts';

export interface QueryOpts {
  readonly arrivalMs: number;
  readonly qosTargetMs: number;
  readonly nextOperator?: number;
  readonly batch?: number;
  readonly seqLen?: number;
  /** Defaults to the test zoo's operator count of the model. */
  readonly operators?: number;
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
  };
}

export function input(nowMs: number, queues: WaitingQuery[][], runningRemainingMs = 0): ScheduleInput {
  return { nowMs, queues, runningRemainingMs };
}

/**
 * A random input: 0..4 services (`s0`…), 0..3 queries each, test-zoo models, random progress,
 * batch 1 or 2, QoS 20..120 ms (15%: 1..51 ms) after up to 40 ms of waiting, running remainder
 * 0..20 ms (0 half the time).
 */
export function randomInput(r: () => number, tag: string): ScheduleInput {
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

