/**
 * Shedding a `ModelInfer` call before its message is read (docs/overload.md "Overload and
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
 * A call that passes gets a second check as soon as the first bytes of its message arrive:
 * protobuf encoders write `ModelInferRequest.model_name` (field 1) first, so the first DATA frame
 * names the model, and the call is judged on that model (`InferenceBackend.admit`) before the
 * rest arrives; shed there, it is answered and reset the same way. grpc-js offers no hook before
 * a whole message is read: this adds a listener to the call's HTTP/2 stream (the private field
 * below), which sees the frames grpc-js sees, uncopied.
 *
 * A call that goes on has its arrival from then (`arrivalOf`): its latency and QoS count from its
 * metadata, as an HTTP request's count from its headers; once its first bytes admit it, it counts
 * as work ahead of later arrivals while the rest is read (not before: a call that sends metadata
 * and no message must not make others shed). Without that, calls read in parallel over one
 * connection (HTTP/2 interleaves their frames) were invisible to admission until read, and under
 * overload they took seconds to arrive.
 *
 * Only `ModelInfer`: on a `ModelStreamInfer` stream the requests come later, one per message,
 * and each is admitted on its own; the other methods are cheap.
 */
import { constants as http2 } from 'node:http2';
import * as grpc from '@grpc/grpc-js';
import type { Logger } from '../../log.ts';
import { ServeError, type AdmissionTicket, type InferenceBackend } from '../inference.ts';
import { grpcStatusOf } from './codec.ts';

/** The full path of the one method this interceptor acts on. */
export const MODEL_INFER_PATH = '/inference.GRPCInferenceService/ModelInfer';

/**
 * A server interceptor shedding `ModelInfer` calls on their metadata (file docs). Install it
 * after the token check (`bearerAuthInterceptor`): grpc-js runs server interceptors in the
 * order given, so a call without the token is answered UNAUTHENTICATED, never `overloaded`.
 * A backend without `shedUnread` gets a pass-through.
 */
export function shedUnreadInterceptor(backend: InferenceBackend, logger?: Logger, messageTimeoutMs = 0): grpc.ServerInterceptor {
  const warned = { done: false };
  /** Answer a shed call now and refuse the rest of its message (file docs). */
  const shed = (call: grpc.ServerInterceptingCallInterface, err: ServeError | { readonly code: grpc.status; readonly details: string }): void => {
    call.sendStatus(err instanceof ServeError ? grpcStatusOf(err) : { ...err, metadata: new grpc.Metadata() });
    // after grpc-js has written the status (it may hold it until this listener returns)
    setImmediate(() => {
      const stream = streamOf(call);
      if (stream !== undefined) resetAnswered(stream);
      else if (!warned.done) {
        warned.done = true;
        logger?.warn('grpc server: cannot reach the HTTP/2 stream of a shed call; its message is read and dropped instead of refused');
      }
    });
  };
  const bug = (err: unknown): void => {
    // a bug in admission must not fail the call: it goes on to the handler's own admission
    logger?.error({ err: err instanceof Error ? (err.stack ?? err.message) : String(err) }, 'admission before reading failed; the call goes on without it');
  };
  return (method, call) => {
    if (method.path !== MODEL_INFER_PATH || (backend.shedUnread === undefined && !(messageTimeoutMs > 0))) return new grpc.ServerInterceptingCall(call);
    let ticket: AdmissionTicket | undefined;
    /** The call has its status (or was cancelled): nothing may take a ticket for it any more. */
    let ended = false;
    let waiting: NodeJS.Timeout | undefined;
    const settle = (): void => {
      ended = true;
      clearTimeout(waiting);
      ticket?.settle();
    };
    const listener = new grpc.ServerListenerBuilder()
      .withOnReceiveMetadata((metadata, next) => {
        if (messageTimeoutMs > 0) {
          // a call whose message does not come is answered, as an HTTP request past its timeout is
          waiting = setTimeout(() => {
            if (ended) return;
            shed(call, { code: grpc.status.DEADLINE_EXCEEDED, details: `the request message did not arrive within ${messageTimeoutMs} ms of the call's metadata (the server's request timeout, --request-timeout-ms)` });
            settle();
          }, messageTimeoutMs);
          waiting.unref();
        }
        if (backend.shedUnread === undefined) return next(metadata);
        try {
          ticket = backend.shedUnread?.();
        } catch (err) {
          if (err instanceof ServeError) {
            settle();
            return shed(call, err);
          }
          bug(err);
        }
        if (ticket !== undefined) {
          arrivals.set(metadata, ticket);
          // grpc-js has paused the stream until the handler reads: a listener added now sees the first frame
          const stream = streamOf(call);
          if (stream !== undefined && backend.admit !== undefined) {
            const admit = backend.admit.bind(backend);
            watchFirstBytes(stream, (model) => {
              // a call already answered (its deadline passed, grpc-js refused its message) whose
              // client sends on: admitting it would take a ticket that nothing settles
              if (ticket === undefined || ended || stream.headersSent === true) return;
              try {
                ticket = admit(model, ticket, 'message') ?? ticket;
                arrivals.set(metadata, ticket);
              } catch (err) {
                if (!(err instanceof ServeError)) return bug(err);
                answered.add(metadata);
                settle();
                shed(call, err);
              }
            });
          }
        }
        next(metadata);
      })
      .withOnReceiveMessage((message, next) => {
        clearTimeout(waiting);
        next(message);
      })
      .withOnCancel(settle)
      .build();
    // every call ends with a status, whichever way: its ticket no longer counts as work ahead
    const responder = new grpc.ResponderBuilder()
      .withStart((next) => next(listener))
      .withSendStatus((status, next) => {
        settle();
        next(status);
      })
      .build();
    return new grpc.ServerInterceptingCall(call, responder);
  };
}

/** Bytes of a message's start read to find its model name before giving up (a name is at most a few hundred bytes). */
const PEEK_LIMIT_BYTES = 4096;

/**
 * Call `onModel` once with the `model_name` of the `ModelInferRequest` that starts on `stream`,
 * read from its first bytes (the gRPC frame header, RFC-less but fixed: a compressed flag and a
 * 4-byte length; then the message's field 1, `model_name`, which protobuf encoders write first),
 * as soon as those bytes arrived; never when the message is compressed, starts with another
 * field, or the name is not within `PEEK_LIMIT_BYTES`. Adds a second `data` listener beside
 * grpc-js's, which it removes once decided: the chunks are not copied.
 */
function watchFirstBytes(stream: Http2StreamLike, onModel: (model: string) => void): void {
  let head: Buffer | undefined;
  const onData = (chunk: Buffer): void => {
    // a throw in a stream listener would take the process down: a bug here only skips the check
    try {
      head = head === undefined ? chunk : Buffer.concat([head, chunk]);
      const found = modelNameAtStart(head);
      if (found === 'more' && head.length < PEEK_LIMIT_BYTES) return;
      stream.off?.('data', onData);
      if (typeof found === 'object') onModel(found.model);
    } catch {
      stream.off?.('data', onData);
    }
  };
  stream.on?.('data', onData);
}

/**
 * The `model_name` at the start of a gRPC-framed `ModelInferRequest` (`bytes` from its first
 * byte), `'more'` when `bytes` ends before it, or undefined when it is not there (compressed,
 * another field first, a malformed length).
 */
export function modelNameAtStart(bytes: Buffer): { readonly model: string } | 'more' | undefined {
  if (bytes.length < 7) return 'more';
  // gRPC frame: [compressed flag][4-byte big-endian length]; protobuf: tag 0x0a = field 1, length-delimited
  if (bytes[0] !== 0 || bytes[5] !== 0x0a) return undefined;
  let length = 0;
  let at = 6;
  for (let shift = 0; ; shift += 7) {
    if (at >= bytes.length) return 'more';
    if (shift > 21) return undefined;
    const b = bytes[at++]!;
    length |= (b & 0x7f) << shift;
    if ((b & 0x80) === 0) break;
  }
  if (length === 0 || length > PEEK_LIMIT_BYTES) return undefined;
  if (at + length > bytes.length) return 'more';
  return { model: bytes.toString('utf8', at, at + length) };
}

/** The ticket of each call admitted on its metadata, by that metadata object (grpc-js hands the same object to the handler). */
const arrivals = new WeakMap<grpc.Metadata, AdmissionTicket>();

/** Calls answered (shed) from their message's first bytes, by metadata object. */
const answered = new WeakSet<grpc.Metadata>();

/**
 * Whether the interceptor already answered this call (shed on the first bytes of its message):
 * a handler that still gets the message (it came whole in the first frame) must not admit,
 * count or run it again.
 */
export function answeredEarly(metadata: grpc.Metadata): boolean {
  return answered.has(metadata);
}

/**
 * The admission ticket `shedUnreadInterceptor` took for a `ModelInfer` call when its metadata
 * arrived (its arrival: the time its message took to arrive counts in its latency and QoS), or
 * undefined (no interceptor, no admission gate). The interceptor settles it when the call ends.
 */
export function arrivalOf(metadata: grpc.Metadata): AdmissionTicket | undefined {
  return arrivals.get(metadata);
}

/** What this file uses of a node HTTP/2 stream. */
interface Http2StreamLike {
  readonly headersSent?: boolean;
  readonly closed?: boolean;
  readonly destroyed?: boolean;
  close?: (code: number) => void;
  on?: (event: 'data', listener: (chunk: Buffer) => void) => unknown;
  off?: (event: 'data', listener: (chunk: Buffer) => void) => unknown;
}

/** A link of grpc-js's intercepting call chain: the innermost call keeps the node HTTP/2 stream as `stream`, each other the next as `nextCall`. */
interface CallChainLink {
  readonly stream?: Http2StreamLike;
  readonly nextCall?: unknown;
}

/** The node HTTP/2 stream of a call (grpc-js private fields, file docs), or undefined when a grpc-js version keeps it elsewhere. */
function streamOf(call: unknown): Http2StreamLike | undefined {
  let link = call as CallChainLink | undefined;
  for (let depth = 0; depth < 8 && link !== undefined && link !== null; depth++) {
    const stream = link.stream;
    if (stream !== undefined && typeof stream.close === 'function' && typeof stream.on === 'function') return stream;
    link = link.nextCall as CallChainLink | undefined;
  }
  return undefined;
}

/** Reset a shed call's HTTP/2 stream with NO_ERROR once its answer was sent (file docs). */
function resetAnswered(stream: Http2StreamLike): void {
  if (stream.headersSent === true && stream.closed !== true && stream.destroyed !== true) stream.close?.(http2.NGHTTP2_NO_ERROR);
}
