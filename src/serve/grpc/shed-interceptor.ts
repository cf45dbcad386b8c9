/**
 * Shedding a `ModelInfer` call before its message is read (docs/serving.md "Overload and
 * admission"). grpc-js reads a unary call's whole message, and decodes it, before the handler
 * runs; under overload that is most of what a shed request costs the server (a 600 KB image
 * arrives as some 40 HTTP/2 frames, each a JavaScript event, then is copied into one buffer).
 * This server interceptor asks `InferenceBackend.shedUnread` on the call's metadata instead:
 * when every READY model would shed a request arriving now, the call is answered UNAVAILABLE
 * `overloaded` at once as a trailers-only response, and its message is discarded unread
 * (grpc-js drops the frames of a finished call without decoding them). Otherwise the call goes
 * on and the handler's own admission (`InferenceBackend.admit`, on the model it names) decides.
 *
 * Once the answer is out, the call's HTTP/2 stream is reset with NO_ERROR (RFC 9113 §8.1: a server
 * that answered before the request was complete may ask the client to stop sending it), so the
 * client drops the rest of the message instead of sending it to be discarded: under overload
 * the shed calls' bytes are most of what crosses the connection. grpc-js keeps the stream in a
 * private field of its innermost call (`stream`); when a later grpc-js moves it, the calls are
 * still shed, their bytes read and dropped as before, and a warning says so once.
 *
 * Only `ModelInfer`: on a `ModelStreamInfer` stream the requests come later, one per message,
 * and each is admitted on its own; the other methods are cheap.
 */
import { constants as http2 } from 'node:http2';
import * as grpc from '@grpc/grpc-js';
import type { Logger } from '../../log.ts';
import { ServeError, type InferenceBackend } from '../inference.ts';
import { grpcStatusOf } from './codec.ts';

/** The full path of the one method this interceptor acts on. */
export const MODEL_INFER_PATH = '/inference.GRPCInferenceService/ModelInfer';

/**
 * A server interceptor shedding `ModelInfer` calls on their metadata (file docs). Install it
 * after the token check (`bearerAuthInterceptor`): grpc-js runs server interceptors in the
 * order given, so a call without the token is answered UNAUTHENTICATED, never `overloaded`.
 * A backend without `shedUnread` gets a pass-through.
 */
export function shedUnreadInterceptor(backend: InferenceBackend, logger?: Logger): grpc.ServerInterceptor {
  const warned = { done: false };
  return (method, call) => {
    if (method.path !== MODEL_INFER_PATH || backend.shedUnread === undefined) return new grpc.ServerInterceptingCall(call);
    const listener = new grpc.ServerListenerBuilder()
      .withOnReceiveMetadata((metadata, next) => {
        try {
          backend.shedUnread?.();
        } catch (err) {
          if (err instanceof ServeError) {
            call.sendStatus(grpcStatusOf(err));
            // after grpc-js has written the status (it may hold it until this listener returns)
            setImmediate(() => {
              if (!resetAnswered(call) && !warned.done) {
                warned.done = true;
                logger?.warn('grpc server: cannot reach the HTTP/2 stream of a shed call; its message is read and dropped instead of refused');
              }
            });
            return;
          }
          // a bug in admission must not fail the call: it goes on to the handler's own admission
          logger?.error({ err: err instanceof Error ? (err.stack ?? err.message) : String(err) }, 'admission before reading failed; the call goes on without it');
        }
        next(metadata);
      })
      .build();
    return new grpc.ServerInterceptingCall(call, { start: (next) => next(listener) });
  };
}

/** The node HTTP/2 stream of an intercepting call chain: grpc-js's innermost call keeps it as `stream`, each other as `nextCall`. */
interface CallChainLink {
  readonly stream?: { readonly headersSent?: boolean; readonly closed?: boolean; readonly destroyed?: boolean; close?: (code: number) => void };
  readonly nextCall?: unknown;
}

/**
 * Reset a shed call's HTTP/2 stream with NO_ERROR once its answer was sent (file docs).
 * @returns false when the stream could not be found in the call chain.
 */
function resetAnswered(call: unknown): boolean {
  let link = call as CallChainLink | undefined;
  for (let depth = 0; depth < 8 && link !== undefined && link !== null; depth++) {
    const stream = link.stream;
    if (stream !== undefined && typeof stream.close === 'function') {
      if (stream.headersSent === true && stream.closed !== true && stream.destroyed !== true) stream.close(http2.NGHTTP2_NO_ERROR);
      return true;
    }
    link = link.nextCall as CallChainLink | undefined;
  }
  return false;
}
