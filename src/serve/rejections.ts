/**
 * How a request that reached the runtime fails: the errors that carry a rejected query's
 * queue time to the metrics, and the mapping of the runtime's rejection reasons to them.
 */
import type { RejectionReason } from '../runtime/records.ts';
import type { TensorMap } from '../tensor.ts';
import { ServeError } from './inference.ts';

/** A runtime rejection with its queue time (for metrics). */
export class RejectedError extends ServeError {
  readonly queueMs: number | undefined;
  constructor(code: ServeError['code'], message: string, queueMs: number | undefined) {
    super(code, message);
    this.queueMs = queueMs;
  }
}

/** The device refused the inputs (a value only it checks): answered `bad_request`, counted `device_refused`. */
export class DeviceRefusedError extends RejectedError {
  constructor(message: string, queueMs: number | undefined) {
    super('bad_request', message, queueMs);
  }
}

/** The client disconnected: its query was withdrawn. Counted as `cancelled`; answered `bad_request` (nobody reads it). */
export class CancelledError extends RejectedError {
  constructor(message: string, queueMs?: number) {
    super('bad_request', `cancelled: ${message}`, queueMs);
  }
}

/**
 * The error a request gets for the runtime's rejection of its query: the `ServeError` code of
 * each `RejectionReason` (docs/serving.md "Status codes"), its queue time kept for the metrics.
 * `closing`: the server is shutting down (a full queue is then `not_ready`); `redact` removes
 * server folders from device messages (an executor's output tail may name them).
 */
export function rejectionError(model: string, reason: RejectionReason, message: string, queueMs: number | undefined, inputs: TensorMap, closing: boolean, redact: (text: string) => string): RejectedError {
  const where = `model '${model}'`;
  switch (reason) {
    case 'cancelled':
      return new CancelledError(`${where}: ${message}; the query was withdrawn`, queueMs);
    case 'overloaded':
      if (closing) return new RejectedError('not_ready', `not_ready: ${where}: the server is shutting down; the request was not run`, queueMs);
      return new RejectedError('overloaded', `overloaded: ${where}: ${message}`, queueMs);
    case 'qos_violation':
      return new RejectedError('qos_violation', `qos_violation: ${where}: ${message}`, queueMs);
    case 'device_failure':
      return new RejectedError('device_failure', `device_failure: ${where}: ${redact(message)}`, queueMs);
    case 'bad_request':
      // name the inputs it ran with: the refusal names an operator, the client knows its inputs
      return new DeviceRefusedError(`${where}: the device refused the inputs (${Object.entries(inputs).map(([n, t]) => `'${n}' [${t.dims.join(', ')}]`).join(', ')}): ${redact(message)}`, queueMs);
  }
}
