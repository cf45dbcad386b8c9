/**
 * A fake `InferenceBackend` for protocol tests (gRPC and HTTP front ends, clients, bench).
 *
 * Models:
 * - `m`: input `x` FP32 `[-1, 4]`; outputs `y` FP32 `[-1, 4]` = 2·x and `idx` INT64 `[-1, 1]`
 *   = 2^53 + 1 + row (beyond 2^53, to check lossless INT64 output).
 * - `i64`: input `a` INT64 `[-1, 2]`; output `b` INT64 `[-1, 2]` = a + 1 (lossless INT64 input).
 *
 * Behaviour switches, as request parameters:
 * - `fake_error`: a `ServeErrorCode`; the request fails with that code (message `fake <code>`,
 *   or `fake_message` when that is a string).
 * - `fake_throw`: true; the backend throws a plain `Error` (a bug) instead of a `ServeError`.
 * - `fake_delay_ms`: wait this long before answering; an aborted signal during the wait rejects
 *   with qos_violation `withdrawn` and records the request id in `aborted`.
 * Fields `ready`, `live` toggle health; `requests` records every request received.
 *
 * Model configuration: `max_batch_size` 8, dims without the batch dim, no dynamic batching.
 * Statistics (a `ModelStatsRecorder`): each successful request counts with fixed times —
 * latency `FAKE_LATENCY_MS`, queue 0.25 ms, compute 1.5 ms, one execution of its own batch;
 * each failure of a known model with latency `FAKE_LATENCY_MS`. `last_inference` is 1000.
 */
import { ServeError, type InferenceBackend, type InferRequest, type InferResponse, type ModelConfig, type ModelMetadata, type ModelStatistics, type RepositoryIndexEntry, type ServeErrorCode, type ServerMetadata, type V2Datatype } from '../../src/serve/inference.ts';
import { ModelStatsRecorder } from '../../src/serve/stats.ts';
import { configDataType } from '../../src/serve/backend.ts';
import type { HostTensor, TensorMap } from '../../src/tensor.ts';
import { ModelControlOff } from './model-control-off.ts';

export const FAKE_MODELS: readonly ModelMetadata[] = [
  {
    name: 'm',
    versions: ['1'],
    platform: 'abacus_fake',
    inputs: [{ name: 'x', datatype: 'FP32', shape: [-1, 4] }],
    outputs: [
      { name: 'y', datatype: 'FP32', shape: [-1, 4] },
      { name: 'idx', datatype: 'INT64', shape: [-1, 1] },
    ],
  },
  {
    name: 'i64',
    versions: ['1'],
    platform: 'abacus_fake',
    inputs: [{ name: 'a', datatype: 'INT64', shape: [-1, 2] }],
    outputs: [{ name: 'b', datatype: 'INT64', shape: [-1, 2] }],
  },
];

/** Latency the fake's statistics record for every request, ms. */
export const FAKE_LATENCY_MS = 2;

/** 2^53 + 1: the first integer a double cannot hold. */
export const BIG_INT64 = 2n ** 53n + 1n;

const SERVE_CODES: readonly ServeErrorCode[] = ['bad_request', 'model_not_found', 'qos_violation', 'overloaded', 'not_ready', 'device_failure', 'internal'];

function flatten(values: unknown): unknown[] {
  return Array.isArray(values) ? values.flatMap((v) => flatten(v)) : [values];
}

function decodeInput(request: InferRequest, meta: ModelMetadata): HostTensor {
  const spec = meta.inputs[0]!;
  if (request.inputs.length !== 1 || request.inputs[0]!.name !== spec.name) {
    throw new ServeError('bad_request', `model ${meta.name}: expected exactly input ${spec.name}, got ${request.inputs.map((i) => i.name).join(', ') || 'none'}`);
  }
  const input = request.inputs[0]!;
  if (input.datatype !== spec.datatype) throw new ServeError('bad_request', `model ${meta.name}: input ${spec.name}: datatype ${input.datatype}, expected ${spec.datatype}`);
  const cols = spec.shape[1]!;
  if (input.shape.length !== 2 || input.shape[1] !== cols || !(input.shape[0]! >= 1)) {
    throw new ServeError('bad_request', `model ${meta.name}: input ${spec.name}: shape [${input.shape.join(', ')}] does not match [-1, ${cols}]`);
  }
  const count = input.shape[0]! * cols;
  const dims = [input.shape[0]!, cols];
  const data = input.data;
  if (data.kind === 'raw') {
    const bytesPer = spec.datatype === 'FP32' ? 4 : 8;
    if (data.bytes.byteLength !== count * bytesPer) {
      throw new ServeError('bad_request', `model ${meta.name}: input ${spec.name}: ${data.bytes.byteLength} bytes for ${count} elements of ${spec.datatype}`);
    }
    const copy = new Uint8Array(data.bytes);
    return spec.datatype === 'FP32'
      ? { dataType: 'float32', dims, data: new Float32Array(copy.buffer) }
      : { dataType: 'int64', dims, data: new BigInt64Array(copy.buffer) };
  }
  const values = data.kind === 'json' ? flatten(data.values) : [...data.values];
  if (values.length !== count) throw new ServeError('bad_request', `model ${meta.name}: input ${spec.name}: ${values.length} values for shape [${dims.join(', ')}]`);
  if (spec.datatype === 'FP32') {
    if (!values.every((v) => typeof v === 'number')) throw new ServeError('bad_request', `model ${meta.name}: input ${spec.name}: FP32 values must be numbers`);
    return { dataType: 'float32', dims, data: Float32Array.from(values) };
  }
  const ints = values.map((v) => {
    if (typeof v === 'bigint') return v;
    if (typeof v === 'number' && Number.isSafeInteger(v)) return BigInt(v);
    if (typeof v === 'string' && /^-?\d+$/.test(v)) return BigInt(v);
    throw new ServeError('bad_request', `model ${meta.name}: input ${spec.name}: INT64 value ${String(v)} is not a safe integer`);
  });
  return { dataType: 'int64', dims, data: BigInt64Array.from(ints) };
}

function delay(ms: number, signal: AbortSignal | undefined, onAbort: () => void): Promise<void> {
  return new Promise((resolve, reject) => {
    const rejectAborted = (): void => {
      clearTimeout(timer);
      onAbort();
      reject(new ServeError('qos_violation', 'withdrawn: the client went away'));
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', rejectAborted);
      resolve();
    }, ms);
    if (signal?.aborted === true) rejectAborted();
    else signal?.addEventListener('abort', rejectAborted, { once: true });
  });
}

export class FakeBackend extends ModelControlOff implements InferenceBackend {
  ready = true;
  live = true;
  readonly requests: InferRequest[] = [];
  /** Request ids whose signal aborted while they waited. */
  readonly aborted: string[] = [];
  /** Resolves when the next request arrives (for cancellation tests). */
  private waiters: ((r: InferRequest) => void)[] = [];
  private readonly stats = new ModelStatsRecorder(FAKE_MODELS.map((m) => m.name), '1', () => 1000);

  serverMetadata(): ServerMetadata {
    return { name: 'abacus-fake', version: '0.0.1', extensions: ['binary_tensor_data'] };
  }
  isLive(): boolean {
    return this.live;
  }
  isReady(): boolean {
    return this.ready;
  }
  private model(name: string, version?: string): ModelMetadata {
    const meta = FAKE_MODELS.find((m) => m.name === name);
    if (meta === undefined || (version !== undefined && version !== '1')) {
      throw new ServeError('model_not_found', `model ${name}${version !== undefined ? ` version ${version}` : ''} is not served`);
    }
    return meta;
  }
  modelReady(name: string, version?: string): boolean {
    this.model(name, version);
    return this.ready;
  }
  modelMetadata(name: string, version?: string): ModelMetadata {
    return this.model(name, version);
  }
  modelList(): string[] {
    return FAKE_MODELS.map((m) => m.name);
  }
  modelConfig(name: string, version?: string): ModelConfig {
    const meta = this.model(name, version);
    const tensor = (t: ModelMetadata['inputs'][number]) => ({ name: t.name, data_type: configDataType(t.datatype), dims: t.shape.slice(1) });
    return { name: meta.name, platform: meta.platform, max_batch_size: 8, input: meta.inputs.map(tensor), output: meta.outputs.map(tensor) };
  }
  modelStatistics(name?: string, version?: string): ModelStatistics[] {
    if (name === undefined || name === '') {
      if (version !== undefined && version !== '' && version !== '1') throw new ServeError('model_not_found', `no model has version ${version}`);
      return this.stats.snapshot(this.modelList());
    }
    return this.stats.snapshot([this.model(name, version).name]);
  }
  repositoryIndex(readyOnly = false): RepositoryIndexEntry[] {
    return readyOnly && !this.ready ? [] : FAKE_MODELS.map((m) => ({ name: m.name, version: '1', state: this.ready ? 'READY' : 'LOADING', reason: '' }));
  }
  /** A promise for the next request this backend receives. */
  nextRequest(): Promise<InferRequest> {
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  async infer(request: InferRequest): Promise<InferResponse> {
    try {
      const response = await this.answer(request);
      this.stats.success(response.modelName, { batch: Number(request.inputs[0]?.shape[0] ?? 1), latencyMs: FAKE_LATENCY_MS, queueMs: 0.25, computeMs: 1.5, execution: { batch: Number(request.inputs[0]?.shape[0] ?? 1), computeMs: 1.5 } });
      return response;
    } catch (err) {
      if (!(err instanceof ServeError && err.code === 'model_not_found')) this.stats.fail(request.modelName, FAKE_LATENCY_MS, undefined);
      throw err;
    }
  }

  private async answer(request: InferRequest): Promise<InferResponse> {
    this.requests.push(request);
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w(request);
    const params = request.parameters ?? {};
    if (params['fake_throw'] === true) throw new Error('fake bug with a secret stack');
    const meta = this.model(request.modelName, request.modelVersion);
    if (!this.ready) throw new ServeError('not_ready', 'server is not ready');
    const fakeError = params['fake_error'];
    if (typeof fakeError === 'string') {
      const code = SERVE_CODES.find((c) => c === fakeError) ?? 'internal';
      const message = params['fake_message'];
      throw new ServeError(code, typeof message === 'string' ? message : `fake ${code}`);
    }
    const x = decodeInput(request, meta);
    for (const o of request.outputs ?? []) {
      if (!meta.outputs.some((m) => m.name === o.name)) throw new ServeError('bad_request', `model ${meta.name}: unknown output ${o.name}`);
    }
    const delayMs = params['fake_delay_ms'];
    if (typeof delayMs === 'number' && delayMs > 0) await delay(delayMs, request.signal, () => this.aborted.push(request.requestId));
    const batch = x.dims[0]!;
    const all: TensorMap = {};
    const datatypes: Record<string, V2Datatype> = {};
    if (meta.name === 'm') {
      all['y'] = { dataType: 'float32', dims: x.dims, data: (x.data as Float32Array).map((v) => v * 2) };
      all['idx'] = { dataType: 'int64', dims: [batch, 1], data: BigInt64Array.from({ length: batch }, (_, i) => BIG_INT64 + BigInt(i)) };
    } else {
      all['b'] = { dataType: 'int64', dims: x.dims, data: (x.data as BigInt64Array).map((v) => v + 1n) };
    }
    const wanted = request.outputs?.map((o) => o.name);
    const outputs: TensorMap = {};
    for (const o of meta.outputs) {
      if (wanted !== undefined && !wanted.includes(o.name)) continue;
      outputs[o.name] = all[o.name]!;
      datatypes[o.name] = o.datatype;
    }
    return {
      modelName: meta.name,
      modelVersion: '1',
      ...(request.id !== undefined ? { id: request.id } : {}),
      outputs,
      outputDatatypes: datatypes,
      parameters: { queue_ms: 0.25, compute_ms: 1.5, operator_groups: 2, executed_batch_size: 8 },
    };
  }
}
