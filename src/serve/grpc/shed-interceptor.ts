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
 * Only `ModelInfer`: on a `ModelStreamInfer` stream the requests come later, one per message,
 * and each is admitted on its own; the other methods are cheap.
 */
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
  return (method, call) => {
    if (method.path !== MODEL_INFER_PATH || backend.shedUnread === undefined) return new grpc.ServerInterceptingCall(call);
    const listener = new grpc.ServerListenerBuilder()
      .withOnReceiveMetadata((metadata, next) => {
        try {
          backend.shedUnread?.();
        } catch (err) {
          if (err instanceof ServeError) {
            call.sendStatus(grpcStatusOf(err));
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
