/**
 * KServe v2 HTTP/REST client over Node's global `fetch` (undici, keep-alive).
 *
 * `infer` sends `POST /v2/models/{model}/infer`. By default inputs travel in the binary tensor
 * data extension (as Triton's clients and perf_analyzer do): the JSON header, then each input's
 * little-endian bytes in input order, `parameters.binary_data_size` on each input,
 * `Content-Type: application/octet-stream` and `Inference-Header-Content-Length`; and outputs
 * are asked for as binary (`binary_data_output: true`), which also keeps INT64 beyond 2^53
 * lossless (JSON.parse would round it). With `binary: false`, inputs go as JSON `data` (INT64
 * as bare integers, lossless; FP16 still binary, it has no JSON form) and outputs come back as
 * JSON (INT64 beyond 2^53 rounded).
 *
 * Specs: https://github.com/kserve/open-inference-protocol/blob/main/specification/protocol/inference_rest.md
 * https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_binary_data.md
 */
import { INFERENCE_HEADER } from '../http/codec.ts';
import { SERVE_ERROR_CODE_KEY, type ModelMetadata, type ServeErrorCode } from '../inference.ts';
import type { HostTensor, TensorMap } from '../../tensor.ts';
import {
  InferenceClientError,
  serveErrorCodeOf,
  type ClientInferFailure,
  type ClientInferRequest,
  type ClientInferResult,
  type InferenceClient,
} from './client.ts';
import { rawBytes, V2_DATATYPE_OF } from '../tensors.ts';
import { hostTensorFromBytes, hostTensorFromValues, hostTensorValues, jsonStringify } from './tensors.ts';

export interface HttpInferenceClientOptions {
  /** Binary tensor data for inputs and outputs (default true); false: JSON both ways. */
  readonly binary?: boolean;
  /** Per-call timeout in ms (default: none). A timed-out call is a `transport` failure. */
  readonly timeoutMs?: number;
  /**
   * Bearer token sent as `Authorization: Bearer <token>` on every call (a server started with
   * `--auth-token-file`). An `https://` server's certificate is checked against the system's
   * CAs and those in `NODE_EXTRA_CA_CERTS`.
   */
  readonly authToken?: string;
}

interface JsonOutput {
  name?: unknown;
  datatype?: unknown;
  shape?: unknown;
  parameters?: Record<string, unknown>;
  data?: unknown;
}

function flatten(values: unknown): unknown[] {
  return Array.isArray(values) ? values.flatMap((v) => flatten(v)) : [values];
}

/** The `ServeErrorCode` of an HTTP error answer: header, then message prefix, then status. */
function codeOfHttpError(status: number, header: string | null, message: string): ServeErrorCode | 'transport' {
  const tagged = serveErrorCodeOf(header, message);
  if (tagged !== undefined) return tagged;
  if (status === 400 || status === 413 || status === 415 || status === 422) return 'bad_request';
  if (status === 404) return 'model_not_found';
  if (status === 503) return 'not_ready';
  if (status === 429) return 'overloaded';
  if (status === 500) return 'internal';
  return 'transport';
}

function describe(error: unknown): string {
  if (error instanceof Error) {
    const cause = error.cause instanceof Error ? `: ${error.cause.message}` : '';
    return `${error.message}${cause}`;
  }
  return String(error);
}

export class HttpInferenceClient implements InferenceClient {
  private readonly base: string;
  private readonly binary: boolean;
  private readonly timeoutMs: number | undefined;
  /** The `authorization` header of every call, when a token was given. */
  private readonly auth: Record<string, string>;

  /**
   * @param baseUrl `http://host:port` (a trailing slash is ignored).
   * @throws TypeError for a URL that is not http(s).
   */
  constructor(baseUrl: string, options: HttpInferenceClientOptions = {}) {
    const url = new URL(baseUrl);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new TypeError(`baseUrl must be http:// or https://, got ${baseUrl}`);
    this.base = url.href.replace(/\/+$/, '');
    this.binary = options.binary ?? true;
    this.timeoutMs = options.timeoutMs;
    this.auth = options.authToken === undefined ? {} : { authorization: `Bearer ${options.authToken}` };
  }

  private signal(callerSignal: AbortSignal | undefined): AbortSignal | undefined {
    const signals: AbortSignal[] = [];
    if (callerSignal !== undefined) signals.push(callerSignal);
    if (this.timeoutMs !== undefined) signals.push(AbortSignal.timeout(this.timeoutMs));
    return signals.length === 0 ? undefined : signals.length === 1 ? signals[0] : AbortSignal.any(signals);
  }

  private encodeRequest(request: ClientInferRequest): { body: Uint8Array | string; headers: Record<string, string> } {
    const parameters: Record<string, unknown> = { ...(request.parameters ?? {}) };
    if (request.qosMs !== undefined) parameters['qos_ms'] = request.qosMs;
    if (this.binary) parameters['binary_data_output'] = true;
    const chunks: Uint8Array[] = [];
    const inputs = Object.entries(request.inputs).map(([name, tensor]: [string, HostTensor]) => {
      const base = { name, datatype: V2_DATATYPE_OF[tensor.dataType], shape: [...tensor.dims] };
      // FP16 has no JSON representation (its elements are half-precision bit patterns): always binary.
      if (!this.binary && tensor.dataType !== 'float16') return { ...base, data: hostTensorValues(tensor) };
      const bytes = rawBytes(tensor.data);
      chunks.push(bytes);
      return { ...base, parameters: { binary_data_size: bytes.byteLength } };
    });
    const json: Record<string, unknown> = { inputs };
    if (request.id !== undefined) json['id'] = request.id;
    if (Object.keys(parameters).length > 0) json['parameters'] = parameters;
    if (request.outputs !== undefined) json['outputs'] = request.outputs.map((name) => (this.binary ? { name, parameters: { binary_data: true } } : { name }));
    const header = jsonStringify(json);
    if (chunks.length === 0) return { body: header, headers: { 'content-type': 'application/json' } };
    const headerBytes = Buffer.from(header, 'utf8');
    return {
      body: Buffer.concat([headerBytes, ...chunks]),
      headers: { 'content-type': 'application/octet-stream', [INFERENCE_HEADER]: String(headerBytes.byteLength) },
    };
  }

  /** Parse a 200 answer: JSON header, then binary outputs in order. */
  private static decodeResponse(body: Uint8Array, headerLength: number | undefined): { id?: string; outputs: TensorMap; parameters: Record<string, unknown> } {
    const jsonEnd = headerLength ?? body.byteLength;
    if (!(jsonEnd >= 0 && jsonEnd <= body.byteLength)) throw new RangeError(`Inference-Header-Content-Length ${jsonEnd} is outside the ${body.byteLength}-byte body`);
    const parsed = JSON.parse(Buffer.from(body.buffer, body.byteOffset, jsonEnd).toString('utf8')) as { id?: unknown; outputs?: unknown; parameters?: unknown };
    let offset = jsonEnd;
    const outputs: TensorMap = {};
    for (const output of (Array.isArray(parsed.outputs) ? parsed.outputs : []) as JsonOutput[]) {
      const name = String(output.name);
      const datatype = String(output.datatype);
      const shape = Array.isArray(output.shape) ? output.shape.map(Number) : [];
      const size = output.parameters?.['binary_data_size'];
      if (typeof size === 'number') {
        if (offset + size > body.byteLength) throw new RangeError(`output ${name}: binary_data_size ${size} runs past the end of the body`);
        outputs[name] = hostTensorFromBytes(name, datatype, shape, body.subarray(offset, offset + size));
        offset += size;
      } else {
        outputs[name] = hostTensorFromValues(name, datatype, shape, flatten(output.data));
      }
    }
    const parameters = typeof parsed.parameters === 'object' && parsed.parameters !== null ? (parsed.parameters as Record<string, unknown>) : {};
    return { ...(typeof parsed.id === 'string' ? { id: parsed.id } : {}), outputs, parameters };
  }

  async infer(request: ClientInferRequest): Promise<ClientInferResult> {
    let response: Response;
    let body: Uint8Array;
    try {
      const { body: requestBody, headers } = this.encodeRequest(request);
      const signal = this.signal(request.signal);
      response = await fetch(`${this.base}/v2/models/${encodeURIComponent(request.model)}/infer`, {
        method: 'POST',
        // identity: fetch would otherwise ask for gzip/deflate, and the server compresses
        // what is asked (tensors compress poorly; tritonclient asks only when told to)
        headers: { ...headers, ...this.auth, 'accept-encoding': 'identity' },
        body: requestBody,
        ...(signal !== undefined ? { signal } : {}),
      });
      body = new Uint8Array(await response.arrayBuffer());
    } catch (error) {
      return { ok: false, status: 0, code: 'transport', message: describe(error) };
    }
    if (!response.ok) return HttpInferenceClient.failure(response, body);
    try {
      const lengthHeader = response.headers.get(INFERENCE_HEADER);
      const decoded = HttpInferenceClient.decodeResponse(body, lengthHeader === null ? undefined : Number(lengthHeader));
      return { ok: true, ...(decoded.id !== undefined ? { id: decoded.id } : {}), outputs: decoded.outputs, serverParameters: decoded.parameters };
    } catch (error) {
      return { ok: false, status: response.status, code: 'transport', message: `unreadable response: ${describe(error)}` };
    }
  }

  private static failure(response: Response, body: Uint8Array): ClientInferFailure {
    const text = Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8');
    let message = text;
    try {
      const parsed = JSON.parse(text) as { error?: unknown };
      if (typeof parsed.error === 'string') message = parsed.error;
    } catch {
      // not JSON: keep the text
    }
    if (message === '') message = `HTTP ${response.status}`;
    return { ok: false, status: response.status, code: codeOfHttpError(response.status, response.headers.get(SERVE_ERROR_CODE_KEY), message), message };
  }

  private async getJson(path: string): Promise<unknown> {
    let response: Response;
    let body: Uint8Array;
    try {
      const signal = this.signal(undefined);
      response = await fetch(`${this.base}${path}`, { headers: this.auth, ...(signal !== undefined ? { signal } : {}) });
      body = new Uint8Array(await response.arrayBuffer());
    } catch (error) {
      throw new InferenceClientError({ status: 0, code: 'transport', message: `GET ${path}: ${describe(error)}` }, { cause: error });
    }
    if (!response.ok) throw new InferenceClientError(HttpInferenceClient.failure(response, body));
    try {
      return JSON.parse(Buffer.from(body).toString('utf8')) as unknown;
    } catch (error) {
      throw new InferenceClientError({ status: response.status, code: 'transport', message: `GET ${path}: the answer is not JSON` }, { cause: error });
    }
  }

  /** `GET /v2/health/ready`: true on 200. */
  async ready(): Promise<boolean> {
    try {
      const signal = this.signal(undefined);
      const response = await fetch(`${this.base}/v2/health/ready`, signal !== undefined ? { signal } : {});
      await response.arrayBuffer();
      return response.ok;
    } catch {
      return false;
    }
  }

  /** `GET /v2/models/{name}`. @throws InferenceClientError */
  async modelMetadata(name: string): Promise<ModelMetadata> {
    return (await this.getJson(`/v2/models/${encodeURIComponent(name)}`)) as ModelMetadata;
  }

  /** Nothing to release (fetch pools connections globally). */
  close(): Promise<void> {
    return Promise.resolve();
  }
}
