/**
 * Triton's `ModelStreamInfer`: a bidirectional gRPC stream on which a client sends many
 * `ModelInferRequest`s and gets one `ModelStreamInferResponse` for each, on the same stream
 * (tritonclient's `start_stream` / `async_stream_infer`).
 *
 * - Each request runs exactly as a `ModelInfer` call would (admission, validation, QoS target,
 *   dynamic batching); requests on one stream run concurrently and are answered in the order
 *   they complete, each with its `id` echoed.
 * - A failed request is answered on the stream with `error_message` (`code: reason`, as the
 *   details of a failed `ModelInfer`) and an `infer_response` carrying only its model name,
 *   version and `id`, so a client can tell which request failed; the stream stays open. Bytes
 *   that are not a valid request message are such an error too.
 * - The client half-closing the stream ends it once every request on it has been answered.
 * - The client cancelling the stream (or its connection dropping) withdraws every request on
 *   it that has not started (`InferRequest.signal`); nothing more is written to it.
 *
 * Spec: Triton's `grpc_service.proto` (`ModelStreamInfer`, `ModelStreamInferResponse`),
 * https://github.com/triton-inference-server/common/blob/main/protobuf/grpc_service.proto
 */
import { randomUUID } from 'node:crypto';
import type * as grpc from '@grpc/grpc-js';
import type { Logger } from '../../log.ts';
import { grpcStatusOf } from './codec.ts';
import type { ModelInferRequestMessage, ModelInferResponseMessage, ModelStreamInferResponseMessage } from './proto.ts';

/** What the stream handler borrows from the unary `ModelInfer` of `server.ts`. */
export interface StreamInferParts {
  /** Admit, decode and run one request message; settles once. */
  readonly runInfer: (message: ModelInferRequestMessage, requestId: string, signal: AbortSignal) => Promise<ModelInferResponseMessage>;
  readonly logFailure: (rpc: string, error: unknown, st: Partial<grpc.StatusObject>, requestId: string, model: string | undefined) => void;
  /** The decoding problem of a message the tolerant deserializer could not decode; undefined for a good one. */
  readonly malformedReason: (message: unknown) => string | undefined;
  readonly malformedStatus: (rpc: string, reason: string) => Partial<grpc.StatusObject>;
  readonly logger?: Logger;
}

/** The `ModelStreamInfer` handler (see the file docs). */
export function streamInferHandler(parts: StreamInferParts): grpc.handleBidiStreamingCall<ModelInferRequestMessage, ModelStreamInferResponseMessage> {
  const { runInfer, logFailure, malformedReason, malformedStatus, logger } = parts;
  return (call) => {
    const controller = new AbortController();
    let pending = 0;
    let halfClosed = false;
    let finished = false;
    const finishIfDone = (): void => {
      if (halfClosed && pending === 0 && !finished) {
        finished = true;
        call.end();
      }
    };
    const write = (message: ModelStreamInferResponseMessage): void => {
      if (finished || call.cancelled || call.destroyed) return;
      call.write(message);
    };
    const failed = (message: ModelInferRequestMessage, error: unknown, st: Partial<grpc.StatusObject>, requestId: string): void => {
      logFailure('ModelStreamInfer', error, st, requestId, message.model_name);
      write({
        error_message: st.details ?? 'the request failed',
        infer_response: { model_name: message.model_name ?? '', model_version: message.model_version ?? '', id: message.id ?? '' },
      });
    };
    call.on('data', (message: ModelInferRequestMessage) => {
      const requestId = randomUUID();
      const malformed = malformedReason(message);
      if (malformed !== undefined) {
        const st = malformedStatus('ModelStreamInfer', malformed);
        logger?.debug({ requestId, reason: malformed }, 'grpc stream infer: undecodable request message');
        write({ error_message: st.details ?? 'the request message is not valid protobuf', infer_response: { model_name: '', model_version: '', id: '' } });
        return;
      }
      pending++;
      runInfer(message, requestId, controller.signal)
        .then(
          (response) => write({ error_message: '', infer_response: response }),
          (error: unknown) => failed(message, error, grpcStatusOf(error), requestId),
        )
        .catch((err: unknown) => logger?.error({ err, requestId }, 'grpc stream infer: could not answer on the stream'))
        .finally(() => {
          pending--;
          finishIfDone();
        });
    });
    call.on('end', () => {
      halfClosed = true;
      finishIfDone();
    });
    call.on('cancelled', () => {
      logger?.debug({ pending }, 'grpc stream infer cancelled by the client');
      controller.abort(new Error('the client cancelled the stream'));
    });
    call.on('error', (err) => {
      logger?.debug({ err: err.message }, 'grpc stream infer: stream error');
      controller.abort(new Error('the stream failed'));
    });
  };
}
