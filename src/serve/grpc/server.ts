/**
 * The gRPC front end: `inference.GRPCInferenceService` (KServe v2 / Open Inference Protocol)
 * over @grpc/grpc-js, on top of an `InferenceBackend` (`../inference.ts`).
 *
 * - ServerLive / ServerReady / ServerMetadata: straight from the backend.
 * - ModelReady: `ready: false` (status OK) for an unknown model or version, as Triton answers.
 * - ModelMetadata: NOT_FOUND for an unknown model or version.
 * - ModelConfig (Triton model configuration extension): `{config}`, `data_type` as the enum
 *   name; NOT_FOUND for an unknown model or version.
 * - ModelStatistics (Triton statistics extension): empty `name` is every model; NOT_FOUND for
 *   an unknown model or version. Counts and ns as uint64.
 * - RepositoryIndex / RepositoryModelLoad / RepositoryModelUnload (Triton model repository
 *   extension): index with state and reason; load and unload answer once the model is READY /
 *   unloaded; PERMISSION_DENIED unless model control is on; `file:…` and `bytes_param`
 *   parameters INVALID_ARGUMENT.
 * - ModelInfer: typed `contents` or `raw_input_contents` (all inputs or none); parameters as plain
 *   values (`qos_ms` a number); `outputs` selection; `id` echoed. Outputs are returned in
 *   `raw_output_contents` by default, as Triton does (little-endian row-major bytes, one entry per
 *   output in the order of `outputs`); `outputContents: 'typed'` fills `contents` instead.
 *   Response parameters `queue_ms`, `compute_ms` (ms, double), `operator_groups` and
 *   `executed_batch_size` (int64).
 * - Status mapping (`codec.ts` `GRPC_STATUS_BY_CODE`): bad_request INVALID_ARGUMENT,
 *   model_not_found NOT_FOUND, qos_violation DEADLINE_EXCEEDED (not retried; pushback -1),
 *   overloaded / not_ready / device_failure UNAVAILABLE (retryable); forbidden PERMISSION_DENIED;
 *   details `code: reason` (ending with ` (request id "…")` when the request gave an `id`),
 *   internal and anything that is not a `ServeError` INTERNAL with a generic message (logged).
 *   The `ServeErrorCode` also travels as trailing metadata `abacus-error-code`. A message above
 *   `maxReceiveMessageBytes` is RESOURCE_EXHAUSTED (grpc-js); bytes that are not a valid request
 *   message are INVALID_ARGUMENT (bad_request; grpc-js alone would answer INTERNAL).
 * - TLS and tokens (`auth.ts`): SSL credentials with `tls`; with `authToken` every method but
 *   ServerLive and ServerReady answers UNAUTHENTICATED without `authorization: Bearer <token>`.
 * - Every call gets exactly one response. A call the client cancels (or whose connection drops)
 *   aborts the request's `signal`, so a query that has not started is withdrawn.
 *
 * Spec: https://github.com/kserve/open-inference-protocol/blob/main/specification/protocol/inference_grpc.md
 */
import { randomUUID } from 'node:crypto';
import type { Http2Server, ServerHttp2Session } from 'node:http2';
import * as grpc from '@grpc/grpc-js';
import type { Logger } from '../../log.ts';
import { ServeError, type AdmissionTicket, type InferenceBackend } from '../inference.ts';
import type { TlsMaterial } from '../security.ts';
import { answeredEarly, arrivalOf, shedUnreadInterceptor } from './shed-interceptor.ts';
import { bearerAuthInterceptor, grpcServerCredentials } from './auth.ts';
import { grpcStatusOf, inferRequestFromWire, inferResponseToWire } from './codec.ts';
import { streamInferHandler } from './stream.ts';
import {
  loadInferenceService,
  type EmptyMessage,
  type ModelConfigRequestMessage,
  type ModelConfigResponseMessage,
  type ModelInferRequestMessage,
  type ModelInferResponseMessage,
  type ModelMetadataRequestMessage,
  type ModelMetadataResponseMessage,
  type ModelReadyRequestMessage,
  type ModelReadyResponseMessage,
  type ModelStatisticsRequestMessage,
  type ModelStatisticsResponseMessage,
  type RepositoryIndexRequestMessage,
  type RepositoryIndexResponseMessage,
  type RepositoryModelRequestMessage,
  type ServerLiveResponseMessage,
  type ServerMetadataResponseMessage,
  type ServerReadyResponseMessage,
} from './proto.ts';

/** Default largest accepted request message: 64 MiB (batch 32 of `[3, 224, 224]` FP32 is 19 MiB). */
export const DEFAULT_MAX_RECEIVE_MESSAGE_BYTES = 64 * 1024 * 1024;
/** Default largest response message: 64 MiB. */
export const DEFAULT_MAX_SEND_MESSAGE_BYTES = 64 * 1024 * 1024;

export interface GrpcServerOptions {
  /** Request logs (one line per failed call, debug per call) carry `requestId`. */
  readonly logger?: Logger;
  /** Largest request message in bytes (`grpc.max_receive_message_length`); larger calls fail RESOURCE_EXHAUSTED. Default 64 MiB. */
  readonly maxReceiveMessageBytes?: number;
  /** Largest response message in bytes (`grpc.max_send_message_length`). Default 64 MiB. */
  readonly maxSendMessageBytes?: number;
  /** How outputs are encoded: `raw` (default, `raw_output_contents`, as Triton) or `typed` (`contents`). */
  readonly outputContents?: 'raw' | 'typed';
  /** Serve SSL with this certificate (client certificates required when it has a CA); absent: plain text. */
  readonly tls?: TlsMaterial;
  /** Require `authorization: Bearer <authToken>` metadata on every method but ServerLive and ServerReady (`auth.ts`); absent: none. */
  readonly authToken?: string;
  /**
   * Time a `ModelInfer` call has from its metadata until its whole message arrived, ms (HTTP's
   * request timeout, `--request-timeout-ms`); past it the call is answered DEADLINE_EXCEEDED and
   * its stream reset. 0 or absent: none (grpc-js itself waits for a message forever).
   */
  readonly requestTimeoutMs?: number;
}

/** A gRPC server for one backend; create with `createGrpcServer`. */
export interface GrpcInferenceServer {
  /**
   * Bind `host:port` (port 0: any free port), with TLS when the options have `tls`, and start serving.
   * @returns the bound port.
   * @throws Error when the address cannot be bound or the server is already listening or closed.
   */
  listen(host: string, port: number): Promise<number>;
  /**
   * Stop accepting calls and wait up to `graceMs` for running calls to finish; then cancel the
   * rest (their requests' signals abort). Resolves when the server has stopped; idempotent.
   */
  close(graceMs: number): Promise<void>;
}

function checkBytesOption(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < 1) throw new RangeError(`${name} must be a positive integer (bytes), got ${value}`);
  return value;
}

/** `host:port` for grpc-js, bracketing an IPv6 literal. */
function bindAddress(host: string, port: number): string {
  return host.includes(':') && !host.startsWith('[') ? `[${host}]:${port}` : `${host}:${port}`;
}

/** A request message protobuf could not decode (see `tolerantDefinition`); the bytes' problem in `reason`. */
const MALFORMED = Symbol('malformed request message');
interface MalformedMessage {
  readonly [MALFORMED]: string;
}

function malformedReason(message: unknown): string | undefined {
  return typeof message === 'object' && message !== null && MALFORMED in message ? (message as MalformedMessage)[MALFORMED] : undefined;
}

/**
 * `definition` with request deserializers that never throw: grpc-js answers a deserializer's
 * throw with INTERNAL, but bytes that are not a valid request message are the client's fault,
 * so they become a `MalformedMessage` that the handlers answer with INVALID_ARGUMENT.
 */
function tolerantDefinition(definition: grpc.ServiceDefinition): grpc.ServiceDefinition {
  const out: Record<string, grpc.MethodDefinition<unknown, unknown>> = {};
  for (const [name, method] of Object.entries(definition as Record<string, grpc.MethodDefinition<unknown, unknown>>)) {
    out[name] = {
      ...method,
      requestDeserialize: (bytes: Buffer): unknown => {
        try {
          return method.requestDeserialize(bytes);
        } catch (error) {
          return { [MALFORMED]: error instanceof Error ? error.message : String(error) } satisfies MalformedMessage;
        }
      },
    };
  }
  return out;
}

/**
 * The parameters of a load/unload request as plain values (`bool_param` → boolean, `int64_param`
 * → number, `string_param` → string); `bytes_param` is refused (this server takes no bytes in a
 * load or unload request: `file:…` contents are Triton's way of sending model files).
 * @throws ServeError bad_request naming the parameter.
 */
function repositoryParameters(action: 'load' | 'unload', request: RepositoryModelRequestMessage): Record<string, unknown> | undefined {
  const entries = Object.entries(request.parameters ?? {});
  if (entries.length === 0) return undefined;
  const out: Record<string, unknown> = {};
  for (const [key, p] of entries) {
    const where = `${action} '${String(request.model_name ?? '').slice(0, 80)}': parameters.${key.slice(0, 80)}`;
    if (key.startsWith('file:')) throw new ServeError('bad_request', `${where}: model files are never accepted in a load request; a load names a zoo or imported model already in the server's model repository (parameters.config.model)`);
    switch (p.parameter_choice) {
      case 'bool_param':
        out[key] = p.bool_param;
        break;
      case 'int64_param':
        out[key] = Number(p.int64_param);
        break;
      case 'string_param':
        out[key] = p.string_param;
        break;
      default:
        throw new ServeError('bad_request', `${where}: ${p.parameter_choice ?? 'an empty parameter'} is not accepted (config is a string_param)`);
    }
  }
  return out;
}

/** The INVALID_ARGUMENT status for an undecodable `rpc` request message. */
function malformedStatus(rpc: string, reason: string): Partial<grpc.StatusObject> {
  return grpcStatusOf(new ServeError('bad_request', `the ${rpc} request message is not valid protobuf for inference.GRPCInferenceService (${reason.slice(0, 200)})`));
}

/**
 * Create the gRPC front end for `backend`. Loads `grpc_service.proto` now.
 * @throws RangeError for a message size that is not a positive integer.
 */
export function createGrpcServer(backend: InferenceBackend, options: GrpcServerOptions = {}): GrpcInferenceServer {
  const maxReceive = checkBytesOption('maxReceiveMessageBytes', options.maxReceiveMessageBytes, DEFAULT_MAX_RECEIVE_MESSAGE_BYTES);
  const maxSend = checkBytesOption('maxSendMessageBytes', options.maxSendMessageBytes, DEFAULT_MAX_SEND_MESSAGE_BYTES);
  const outputContents = options.outputContents ?? 'raw';
  const logger = options.logger;
  const { definition } = loadInferenceService();
  const server = new grpc.Server({
    'grpc.max_receive_message_length': maxReceive,
    'grpc.max_send_message_length': maxSend,
    // every method, whatever its kind, is behind the token check (`auth.ts`); then ModelInfer calls
    // are shed on their metadata when no model could take them (`shed-interceptor.ts`)
    interceptors: [...(options.authToken === undefined ? [] : [bearerAuthInterceptor(options.authToken)]), shedUnreadInterceptor(backend, logger, options.requestTimeoutMs ?? 0)],
  });

  /** Run a synchronous handler body; any throw becomes the mapped status. */
  function unary<Req, Res>(rpc: string, body: (request: Req) => Res): grpc.handleUnaryCall<Req, Res> {
    return (call, callback) => {
      const malformed = malformedReason(call.request);
      if (malformed !== undefined) {
        callback(malformedStatus(rpc, malformed));
        return;
      }
      try {
        callback(null, body(call.request));
      } catch (error) {
        const requestId = randomUUID();
        const st = grpcStatusOf(error);
        if (st.code === grpc.status.INTERNAL) logger?.error({ err: error, rpc, requestId }, 'grpc call failed with an internal error');
        else logger?.debug({ rpc, requestId, code: st.code, details: st.details }, 'grpc call failed');
        callback(st);
      }
    };
  }

  /**
   * Admit, decode and run one inference request message; settles once, with the response
   * message or the error (a `ServeError` carrying the request's `id`, or any other error).
   */
  const runInfer = (message: ModelInferRequestMessage, requestId: string, signal: AbortSignal, arrival?: AdmissionTicket): Promise<ModelInferResponseMessage> => {
    let settleTicket: (() => void) | undefined;
    let pending: Promise<ModelInferResponseMessage>;
    try {
      // admission before the tensors are decoded (`InferenceBackend.admit`), counting the time the
      // message took to arrive since its metadata (`arrival`): a shed call is UNAVAILABLE at once
      const admission = backend.admit?.(message.model_name ?? '', arrival);
      if (admission !== undefined) settleTicket = admission.settle;
      const decoded = inferRequestFromWire(message, requestId, signal);
      const request = admission === undefined ? decoded : { ...decoded, admission };
      pending = backend.infer(request).then((response) => inferResponseToWire(response, outputContents));
    } catch (error) {
      pending = Promise.reject(error instanceof Error ? error : new Error(String(error)));
    }
    const id = message.id;
    return pending.then(
      (response) => {
        settleTicket?.();
        return response;
      },
      (error: unknown) => {
        settleTicket?.();
        throw typeof id === 'string' && id !== '' && error instanceof ServeError && error.id === undefined ? error.withId(id) : error;
      },
    );
  };

  /** Log a failed inference: INTERNAL at error level with the error, the rest at debug. */
  const logFailure = (rpc: string, error: unknown, st: Partial<grpc.StatusObject>, requestId: string, model: string | undefined): void => {
    if (st.code === grpc.status.INTERNAL) logger?.error({ err: error, rpc, requestId, model }, 'grpc infer failed with an internal error');
    else logger?.debug({ rpc, requestId, model, code: st.code, details: st.details }, 'grpc infer failed');
  };

  const modelInfer: grpc.handleUnaryCall<ModelInferRequestMessage, ModelInferResponseMessage> = (call, callback) => {
    const malformed = malformedReason(call.request);
    if (malformed !== undefined) {
      logger?.debug({ reason: malformed }, 'grpc infer: undecodable request message');
      callback(malformedStatus('ModelInfer', malformed));
      return;
    }
    // shed on the first bytes of its message and answered by the interceptor already
    if (answeredEarly(call.metadata)) return;
    const requestId = randomUUID();
    const controller = new AbortController();
    const onCancelled = (): void => {
      logger?.debug({ requestId, model: call.request.model_name }, 'grpc infer cancelled by the client');
      controller.abort(new Error('the client cancelled the call'));
    };
    call.on('cancelled', onCancelled);
    if (call.cancelled) controller.abort(new Error('the client cancelled the call'));
    runInfer(call.request, requestId, controller.signal, arrivalOf(call.metadata)).then(
      (response) => {
        call.removeListener('cancelled', onCancelled);
        callback(null, response);
        logger?.debug({ requestId, model: call.request.model_name }, 'grpc infer ok');
      },
      (error: unknown) => {
        call.removeListener('cancelled', onCancelled);
        const st = grpcStatusOf(error);
        logFailure('ModelInfer', error, st, requestId, call.request.model_name);
        callback(st);
      },
    );
  };

  /** An asynchronous handler body; a rejection becomes the mapped status. */
  function unaryAsync<Req, Res>(rpc: string, body: (request: Req) => Promise<Res>): grpc.handleUnaryCall<Req, Res> {
    return (call, callback) => {
      const malformed = malformedReason(call.request);
      if (malformed !== undefined) {
        callback(malformedStatus(rpc, malformed));
        return;
      }
      let pending: Promise<Res>;
      try {
        pending = body(call.request);
      } catch (error) {
        pending = Promise.reject(error instanceof Error ? error : new Error(String(error)));
      }
      pending.then(
        (response) => callback(null, response),
        (error: unknown) => {
          const st = grpcStatusOf(error);
          if (st.code === grpc.status.INTERNAL) logger?.error({ err: error, rpc }, 'grpc call failed with an internal error');
          else logger?.debug({ rpc, code: st.code, details: st.details }, 'grpc call failed');
          callback(st);
        },
      );
    };
  }

  const handlers: grpc.UntypedServiceImplementation = {
    ServerLive: unary<EmptyMessage, ServerLiveResponseMessage>('ServerLive', () => ({ live: backend.isLive() })),
    ServerReady: unary<EmptyMessage, ServerReadyResponseMessage>('ServerReady', () => ({ ready: backend.isReady() })),
    ServerMetadata: unary<EmptyMessage, ServerMetadataResponseMessage>('ServerMetadata', () => {
      const m = backend.serverMetadata();
      return { name: m.name, version: m.version, extensions: [...m.extensions] };
    }),
    ModelReady: unary<ModelReadyRequestMessage, ModelReadyResponseMessage>('ModelReady', (request) => {
      const version = request.version === '' ? undefined : request.version;
      // an unknown model or version is not ready (OK, ready: false), as Triton answers, so tritonclient's is_model_ready returns False
      try {
        return { ready: backend.modelReady(request.name ?? '', version) };
      } catch (error) {
        if (error instanceof ServeError && error.code === 'model_not_found') return { ready: false };
        throw error;
      }
    }),
    ModelMetadata: unary<ModelMetadataRequestMessage, ModelMetadataResponseMessage>('ModelMetadata', (request) => {
      const version = request.version === '' ? undefined : request.version;
      const m = backend.modelMetadata(request.name ?? '', version);
      const tensor = (t: { name: string; datatype: string; shape: readonly number[] }): { name: string; datatype: string; shape: number[] } => ({
        name: t.name,
        datatype: t.datatype,
        shape: [...t.shape],
      });
      return { name: m.name, versions: [...m.versions], platform: m.platform, inputs: m.inputs.map(tensor), outputs: m.outputs.map(tensor) };
    }),
    ModelInfer: modelInfer,
    ModelStreamInfer: streamInferHandler({ runInfer, logFailure, malformedReason, malformedStatus, ...(logger === undefined ? {} : { logger }) }),
    ModelConfig: unary<ModelConfigRequestMessage, ModelConfigResponseMessage>('ModelConfig', (request) => {
      const c = backend.modelConfig(request.name ?? '', request.version === '' ? undefined : request.version);
      const tensor = (t: { name: string; data_type: string; dims: readonly number[] }) => ({ name: t.name, data_type: t.data_type, dims: [...t.dims] });
      return {
        config: {
          name: c.name,
          platform: c.platform,
          max_batch_size: c.max_batch_size,
          input: c.input.map(tensor),
          output: c.output.map(tensor),
          ...(c.dynamic_batching === undefined ? {} : { dynamic_batching: { preferred_batch_size: [...c.dynamic_batching.preferred_batch_size], max_queue_delay_microseconds: c.dynamic_batching.max_queue_delay_microseconds } }),
        },
      };
    }),
    ModelStatistics: unary<ModelStatisticsRequestMessage, ModelStatisticsResponseMessage>('ModelStatistics', (request) => ({
      model_stats: backend.modelStatistics(request.name ?? '', request.version === '' ? undefined : request.version).map((m) => ({ ...m, inference_stats: { ...m.inference_stats }, batch_stats: m.batch_stats.map((b) => ({ ...b })) })),
    })),
    RepositoryIndex: unary<RepositoryIndexRequestMessage, RepositoryIndexResponseMessage>('RepositoryIndex', (request) => ({
      models: backend.repositoryIndex(request.ready === true).map((m) => ({ ...m })),
    })),
    RepositoryModelLoad: unaryAsync<RepositoryModelRequestMessage, EmptyMessage>('RepositoryModelLoad', async (request) => {
      await backend.loadModel(request.model_name ?? '', repositoryParameters('load', request));
      return {};
    }),
    RepositoryModelUnload: unaryAsync<RepositoryModelRequestMessage, EmptyMessage>('RepositoryModelUnload', async (request) => {
      await backend.unloadModel(request.model_name ?? '', repositoryParameters('unload', request));
      return {};
    }),
  };
  server.addService(tolerantDefinition(definition), handlers);

  let state: 'new' | 'listening' | 'closed' = 'new';
  let closing: Promise<void> | undefined;

  return {
    listen(host: string, port: number): Promise<number> {
      if (!Number.isSafeInteger(port) || port < 0 || port > 65535) return Promise.reject(new RangeError(`port must be an integer in [0, 65535], got ${port}`));
      if (state !== 'new') return Promise.reject(new Error(`the gRPC server is ${state === 'listening' ? 'already listening' : 'closed'}`));
      state = 'listening';
      const address = bindAddress(host, port);
      return new Promise<number>((resolve, reject) => {
        server.bindAsync(address, grpcServerCredentials(options.tls), (error, boundPort) => {
          if (error !== null) {
            state = 'new';
            reject(new Error(`gRPC server cannot bind ${address}: ${error.message}`, { cause: error }));
            return;
          }
          widenFlowControl(server, logger);
          logger?.info({ address, port: boundPort }, 'grpc server listening');
          resolve(boundPort);
        });
      });
    },
    close(graceMs: number): Promise<void> {
      if (closing !== undefined) return closing;
      if (!(graceMs >= 0)) return Promise.reject(new RangeError(`graceMs must be >= 0, got ${graceMs}`));
      state = 'closed';
      closing = new Promise<void>((resolve) => {
        const timer = setTimeout(() => {
          logger?.warn({ graceMs }, 'grpc server: grace period over, cancelling the remaining calls');
          server.forceShutdown();
          resolve();
        }, graceMs);
        server.tryShutdown(() => {
          clearTimeout(timer);
          resolve();
        });
      });
      return closing;
    },
  };
}

/**
 * HTTP/2 receive window of every gRPC connection and stream, bytes (1 MiB). Node's default is
 * 64 KiB (RFC 9113 §6.9.2's initial value) for the connection and for each stream, so a client
 * can have at most 64 KiB of request bytes in flight on a connection: a 196 KB tensor needs four
 * round trips through the server's event loop, and every request on the connection shares that
 * window; with it, at 10× overload the p99 of answered requests was 7–11 s. grpc-js sets a
 * client's window (`grpc-node.flow_control_window`) but not a server's.
 *
 * Not larger: a new call's HEADERS frame, which admission needs to shed it before its message is
 * read (`shed-interceptor.ts`), queues behind the DATA the window lets the client send first.
 * Measured on `examples/serve-sim4.yaml` over gRPC at 10× its capacity (docs/benchmarks.md
 * "Goodput under overload", load 3–4): with a 16 MiB window calls reached the server 48 ms
 * (median) after they were sent and 85 answers/s made their QoS; 4 MiB 37 ms and 80/s; 1 MiB
 * 16 ms and 128–140/s. A connection holds at most this much unread request data in the server.
 */
export const GRPC_FLOW_CONTROL_WINDOW_BYTES = 1024 * 1024;

/**
 * Open the receive windows of the HTTP/2 sessions grpc-js accepts (`GRPC_FLOW_CONTROL_WINDOW_BYTES`).
 * grpc-js keeps its node HTTP/2 servers in a private map, `http2Servers`; when a later version
 * has no such map, this logs a warning and leaves node's defaults.
 */
function widenFlowControl(server: grpc.Server, logger: Logger | undefined): void {
  const servers = (server as unknown as { http2Servers?: unknown }).http2Servers;
  if (!(servers instanceof Map)) {
    logger?.warn('grpc server: cannot reach the HTTP/2 servers of grpc-js; the flow-control window stays at 64 KiB');
    return;
  }
  for (const h2 of servers.keys() as IterableIterator<Http2Server>) {
    h2.on('session', (session: ServerHttp2Session) => {
      try {
        session.setLocalWindowSize(GRPC_FLOW_CONTROL_WINDOW_BYTES);
        session.settings({ initialWindowSize: GRPC_FLOW_CONTROL_WINDOW_BYTES });
      } catch (err) {
        logger?.warn({ err: err instanceof Error ? err.message : String(err) }, 'grpc server: could not widen the flow-control window of a connection');
      }
    });
  }
}

