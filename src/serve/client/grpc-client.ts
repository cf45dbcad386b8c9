/**
 * KServe v2 gRPC client (`inference.GRPCInferenceService`) over @grpc/grpc-js, loading the same
 * `grpc_service.proto` as the server. Inputs go in `raw_input_contents` (as Triton's clients
 * do); outputs are read from `raw_output_contents` or from typed `contents`, whichever the
 * server used. INT64 is lossless both ways.
 *
 * Failures: the gRPC status code is `status`; `code` comes from the trailing metadata
 * `abacus-error-code` when the server sent it, else from the details prefix (`qos_violation: …`),
 * else from the status (INVALID_ARGUMENT / RESOURCE_EXHAUSTED / OUT_OF_RANGE bad_request,
 * NOT_FOUND model_not_found, INTERNAL internal, UNAVAILABLE with details from a server not_ready);
 * anything else, including a connection that cannot be made, is `transport`.
 */
import * as grpc from '@grpc/grpc-js';
import { SERVE_ERROR_CODE_KEY, type ModelMetadata, type ServeErrorCode, type TensorMetadata, type V2Datatype } from '../inference.ts';
import { CONTENTS_FIELD_BY_DATATYPE, int64FromWire, parametersFromWire, parametersToWire, tensorBytes } from '../grpc/codec.ts';
import {
  loadInferenceService,
  type ModelInferRequestMessage,
  type ModelInferResponseMessage,
  type ModelMetadataResponseMessage,
  type ServerReadyResponseMessage,
} from '../grpc/proto.ts';
import type { TensorMap } from '../../tensor.ts';
import {
  InferenceClientError,
  serveErrorCodeOf,
  type ClientInferFailure,
  type ClientInferRequest,
  type ClientInferResult,
  type InferenceClient,
} from './client.ts';
import { V2_DATATYPE_OF } from '../tensors.ts';
import { hostTensorFromBytes, hostTensorFromValues } from './tensors.ts';

export interface GrpcInferenceClientOptions {
  /** Per-call deadline in ms (default: none). An expired call is a `transport` failure. */
  readonly timeoutMs?: number;
  /** Largest response message in bytes (default 64 MiB). */
  readonly maxReceiveMessageBytes?: number;
  /** Bearer token sent as `authorization: Bearer <token>` metadata on every call (a server started with `--auth-token-file`). */
  readonly authToken?: string;
  /**
   * CA certificates (PEM) that a `grpcs://` server's certificate must chain to; absent: the
   * system's roots. Ignored for `grpc://` (plain text).
   */
  readonly tlsCa?: Buffer;
}

type UnaryMethod = (request: unknown, metadata: grpc.Metadata, options: grpc.CallOptions, callback: (error: grpc.ServiceError | null, response: unknown) => void) => grpc.ClientUnaryCall;

function codeOfGrpcError(error: grpc.ServiceError): ServeErrorCode | 'transport' {
  const tagged = serveErrorCodeOf(error.metadata?.get(SERVE_ERROR_CODE_KEY)[0], error.details ?? '');
  if (tagged !== undefined) return tagged;
  switch (error.code) {
    case grpc.status.INVALID_ARGUMENT:
    case grpc.status.RESOURCE_EXHAUSTED:
    case grpc.status.OUT_OF_RANGE:
      return 'bad_request';
    case grpc.status.NOT_FOUND:
      return 'model_not_found';
    case grpc.status.INTERNAL:
      return 'internal';
    default:
      return 'transport';
  }
}

function failureOf(error: unknown): ClientInferFailure {
  if (error instanceof Error && typeof (error as Partial<grpc.ServiceError>).code === 'number') {
    const e = error as grpc.ServiceError;
    return { ok: false, status: e.code, code: codeOfGrpcError(e), message: e.details !== '' ? e.details : e.message };
  }
  return { ok: false, status: grpc.status.UNKNOWN, code: 'transport', message: error instanceof Error ? error.message : String(error) };
}

export class GrpcInferenceClient implements InferenceClient {
  private readonly client: grpc.Client;
  private readonly timeoutMs: number | undefined;
  private readonly authToken: string | undefined;

  /**
   * @param target `host:port` or `grpc://host:port` (plain text), `grpcs://host:port` (TLS).
   * @throws TypeError for a URL of another scheme.
   */
  constructor(target: string, options: GrpcInferenceClientOptions = {}) {
    let address = target;
    let tls = false;
    if (target.includes('://')) {
      const url = new URL(target);
      if (url.protocol !== 'grpc:' && url.protocol !== 'grpcs:') throw new TypeError(`target must be host:port, grpc://host:port or grpcs://host:port, got ${target}`);
      address = url.host;
      tls = url.protocol === 'grpcs:';
    }
    const { Client } = loadInferenceService();
    this.client = new Client(address, tls ? grpc.credentials.createSsl(options.tlsCa ?? null) : grpc.credentials.createInsecure(), {
      'grpc.max_receive_message_length': options.maxReceiveMessageBytes ?? 64 * 1024 * 1024,
    });
    this.timeoutMs = options.timeoutMs;
    this.authToken = options.authToken;
  }

  /** Metadata of every call: the token, when one was given. */
  private metadata(): grpc.Metadata {
    const m = new grpc.Metadata();
    if (this.authToken !== undefined) m.set('authorization', `Bearer ${this.authToken}`);
    return m;
  }

  private call<Res>(method: string, request: unknown, signal?: AbortSignal): Promise<Res> {
    const fn = (this.client as unknown as Record<string, UnaryMethod | undefined>)[method];
    if (fn === undefined) return Promise.reject(new Error(`no method ${method}`));
    const options: grpc.CallOptions = this.timeoutMs !== undefined ? { deadline: Date.now() + this.timeoutMs } : {};
    return new Promise<Res>((resolve, reject) => {
      const onAbort = (): void => c.cancel();
      const c = fn.call(this.client, request, this.metadata(), options, (error, response) => {
        signal?.removeEventListener('abort', onAbort);
        if (error !== null) reject(error);
        else resolve(response as Res);
      });
      if (signal?.aborted === true) c.cancel();
      else signal?.addEventListener('abort', onAbort, { once: true });
    });
  }

  private static encode(request: ClientInferRequest): ModelInferRequestMessage {
    const parameters: Record<string, unknown> = { ...(request.parameters ?? {}) };
    if (request.qosMs !== undefined) parameters['qos_ms'] = request.qosMs;
    const entries = Object.entries(request.inputs);
    return {
      model_name: request.model,
      id: request.id ?? '',
      parameters: parametersToWire(parameters),
      inputs: entries.map(([name, tensor]) => ({ name, datatype: V2_DATATYPE_OF[tensor.dataType], shape: [...tensor.dims] })),
      outputs: (request.outputs ?? []).map((name) => ({ name })),
      raw_input_contents: entries.map(([, tensor]) => tensorBytes(tensor)),
    };
  }

  private static decode(response: ModelInferResponseMessage): TensorMap {
    const outputs: TensorMap = {};
    const raw = response.raw_output_contents ?? [];
    (response.outputs ?? []).forEach((output, index) => {
      const name = output.name ?? '';
      const datatype = output.datatype ?? '';
      const shape = (output.shape ?? []).map((d) => Number(d));
      const bytes = raw[index];
      if (bytes !== undefined) {
        outputs[name] = hostTensorFromBytes(name, datatype, shape, bytes);
        return;
      }
      const field = CONTENTS_FIELD_BY_DATATYPE[datatype];
      const values: readonly unknown[] = field === undefined ? [] : (output.contents?.[field] ?? []);
      outputs[name] = hostTensorFromValues(name, datatype, shape, values);
    });
    return outputs;
  }

  async infer(request: ClientInferRequest): Promise<ClientInferResult> {
    let response: ModelInferResponseMessage;
    try {
      response = await this.call<ModelInferResponseMessage>('ModelInfer', GrpcInferenceClient.encode(request), request.signal);
    } catch (error) {
      return failureOf(error);
    }
    try {
      return {
        ok: true,
        ...(response.id !== undefined && response.id !== '' ? { id: response.id } : {}),
        outputs: GrpcInferenceClient.decode(response),
        serverParameters: parametersFromWire(response.parameters),
      };
    } catch (error) {
      return { ok: false, status: grpc.status.OK, code: 'transport', message: `unreadable response: ${error instanceof Error ? error.message : String(error)}` };
    }
  }

  /** `ServerReady`; false when the server does not answer. */
  async ready(): Promise<boolean> {
    try {
      return (await this.call<ServerReadyResponseMessage>('ServerReady', {})).ready === true;
    } catch {
      return false;
    }
  }

  /** `ModelMetadata`. @throws InferenceClientError (NOT_FOUND → model_not_found). */
  async modelMetadata(name: string): Promise<ModelMetadata> {
    let m: ModelMetadataResponseMessage;
    try {
      m = await this.call<ModelMetadataResponseMessage>('ModelMetadata', { name });
    } catch (error) {
      throw new InferenceClientError(failureOf(error), { cause: error });
    }
    const tensor = (t: { name?: string; datatype?: string; shape?: (string | number)[] }): TensorMetadata => ({
      name: t.name ?? '',
      datatype: (t.datatype ?? '') as V2Datatype,
      shape: (t.shape ?? []).map((d) => Number(int64FromWire(d))),
    });
    return { name: m.name ?? '', versions: m.versions ?? [], platform: m.platform ?? '', inputs: (m.inputs ?? []).map(tensor), outputs: (m.outputs ?? []).map(tensor) };
  }

  /** Close the channel. */
  close(): Promise<void> {
    this.client.close();
    return Promise.resolve();
  }
}
