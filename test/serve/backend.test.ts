/**
 * RuntimeBackend (serve/backend.ts) on sim:a100 with the wall clock: validation before
 * execution (each bad input → bad_request naming the model, input and field), the INT64 and
 * NaN/Inf rules, per-request QoS, outcome mapping, cancellation, readiness and shutdown.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RuntimeBackend } from '../../src/serve/backend.ts';
import { ServeError, type InferInput, type InferRequest } from '../../src/serve/inference.ts';
import { decodeInputData, jsonDataText } from '../../src/serve/tensors.ts';
import { simBackend } from './helpers.ts';
import { BadRequestError } from '../../src/errors.ts';
import type { Device, DeviceService, GroupResult, Segment } from '../../src/device/device.ts';

let backend: RuntimeBackend;
let metricsText: () => Promise<string>;
beforeAll(async () => {
  const b = await simBackend([
    { name: 'resnet', model: 'resnet50-small', qosTargetMs: 200, maxQosMs: 1000, batchSizes: [1, 2, 4] },
    { name: 'bert', model: 'bert-small', qosTargetMs: 200, batchSizes: [1, 2] },
  ]);
  backend = b.backend;
  metricsText = () => b.metrics.text();
}, 60_000);
afterAll(async () => {
  await backend.shutdown(2000);
});

const IMAGE = 3 * 64 * 64;
const image = (batch = 1): InferInput => ({ name: 'input', datatype: 'FP32', shape: [batch, 3, 64, 64], data: { kind: 'raw', bytes: new Uint8Array(batch * IMAGE * 4) } });
const ids = (batch: number, seq: number, values: unknown = new Array(batch * seq).fill(7)): InferInput[] => [
  { name: 'input_ids', datatype: 'INT64', shape: [batch, seq], data: { kind: 'json', values } },
  { name: 'attention_mask', datatype: 'INT64', shape: [batch, seq], data: { kind: 'json', values: new Array(batch * seq).fill(1) } },
];
const req = (modelName: string, inputs: readonly InferInput[], extra: Partial<InferRequest> = {}): InferRequest => ({ modelName, requestId: 'test', inputs, ...extra });

async function failure(request: InferRequest): Promise<ServeError> {
  try {
    await backend.infer(request);
  } catch (err) {
    expect(err).toBeInstanceOf(ServeError);
    return err as ServeError;
  }
  throw new Error('expected the request to fail');
}

describe('RuntimeBackend: metadata and success', () => {
  it('serves metadata with -1 for dynamic dims and v2 datatypes', () => {
    expect(backend.serverMetadata()).toEqual({ name: 'abacus', version: '0.1.0', extensions: ['binary_tensor_data', 'classification', 'model_configuration', 'model_repository', 'statistics'] });
    expect(backend.modelMetadata('bert')).toEqual({
      name: 'bert',
      versions: ['1'],
      platform: 'abacus_sim',
      inputs: [
        { name: 'input_ids', datatype: 'INT64', shape: [-1, -1], parameters: { range: [0, 30521] } }, // the vocabulary (docs/import.md "Valid inputs")
        { name: 'attention_mask', datatype: 'INT64', shape: [-1, -1] },
      ],
      outputs: [{ name: 'last_hidden_state', datatype: 'FP32', shape: [-1, -1, 256] }],
      state: 'READY',
      reason: '',
    });
    expect(backend.modelReady('resnet', '1')).toBe(true);
    expect(() => backend.modelMetadata('nope')).toThrow(/model 'nope' is not served here \(served: resnet, bert\)/);
    expect(() => backend.modelReady('resnet', '2')).toThrow(/model 'resnet' has no version '2'/);
  });

  it('runs a request: outputs [batch, …], id echoed, queue/compute/operator_groups reported', async () => {
    const r = await backend.infer(req('resnet', [image(2)], { id: 'abc' }));
    expect(r.id).toBe('abc');
    expect(r.modelVersion).toBe('1');
    expect(r.outputs['logits']!.dims).toEqual([2, 1000]);
    expect(r.outputDatatypes).toEqual({ logits: 'FP32' });
    expect(r.parameters.operator_groups).toBeGreaterThanOrEqual(1);
    expect(r.parameters.compute_ms).toBeGreaterThan(0);
    expect(r.parameters.queue_ms).toBeGreaterThanOrEqual(0);
    const b = await backend.infer(req('bert', ids(2, 16), { parameters: { qos_ms: 2000, seq_len: 16 } }));
    expect(b.outputs['last_hidden_state']!.dims).toEqual([2, 16, 256]);
  });

  it('accepts nested JSON data, bigint INT64 values and safe integers', async () => {
    // input_ids are bounded by the vocabulary [0, 30521]; the mask is not
    const nested = [[1n, 2, 3, 30_521n]];
    const r = await backend.infer(req('bert', [
      { name: 'input_ids', datatype: 'INT64', shape: [1, 4], data: { kind: 'json', values: nested } },
      { name: 'attention_mask', datatype: 'INT64', shape: [1, 4], data: { kind: 'typed', values: ['1', 1, 1n, '-9223372036854775808'] } },
    ]));
    expect(r.outputs['last_hidden_state']!.dims).toEqual([1, 4, 256]);
  });
});

describe('RuntimeBackend: validation (bad_request naming the field)', () => {
  const cases: [string, () => InferRequest, RegExp][] = [
    ['unknown input', () => req('resnet', [image(), { ...image(), name: 'extra' }]), /model 'resnet': unknown input 'extra' \(the model's inputs: input\)/],
    ['duplicate input', () => req('resnet', [image(), image()]), /input 'input' is given twice/],
    ['missing input', () => req('bert', [ids(1, 8)[0]!]), /missing input 'attention_mask'/],
    ['no inputs', () => req('bert', []), /missing inputs 'input_ids', 'attention_mask'/],
    ['unknown datatype', () => req('resnet', [{ ...image(), datatype: 'FP99' }]), /input 'input': unknown datatype "FP99" \(v2 datatypes: BOOL,/],
    ['wrong datatype', () => req('resnet', [{ ...image(), datatype: 'FP64' }]), /input 'input': datatype FP64 does not match the model's FP32/],
    ['BYTES', () => req('resnet', [{ ...image(), datatype: 'BYTES' }]), /datatype BYTES does not match the model's FP32/],
    ['id outside the vocabulary', () => req('bert', [{ name: 'input_ids', datatype: 'INT64', shape: [1, 2], data: { kind: 'json', values: [5, 9_007_199_254_740_993n] } }, { name: 'attention_mask', datatype: 'INT64', shape: [1, 2], data: { kind: 'json', values: [1, 1] } }]), /input 'input_ids': element 1 is 9007199254740993, outside the input's valid values \(in \[0, 30521\]\)/],
    ['rank', () => req('resnet', [{ ...image(), shape: [1, 3, 64] }]), /shape \[1, 3, 64\] has rank 3, the model's \[-1, 3, 64, 64\] has rank 4/],
    ['fixed dim', () => req('resnet', [{ ...image(), shape: [1, 3, 64, 65] }]), /input 'input': shape\[3\] is 65, the model needs 64/],
    ['negative dim', () => req('resnet', [{ ...image(), shape: [-1, 3, 64, 64] }]), /shape\[0\] must be a non-negative integer, got -1/],
    ['huge dim (no allocation)', () => req('resnet', [{ ...image(), shape: [1e15, 3, 64, 64] }]), /batch size 1000000000000000 .* is not served; allowed batch sizes: 1, 2, 4/],
    ['unsafe dim', () => req('resnet', [{ ...image(), shape: [2 ** 60, 3, 64, 64] }]), /shape\[0\] must be a non-negative integer/],
    ['bigint dim', () => req('resnet', [{ ...image(), shape: [12345678901234567890n as unknown as number, 3, 64, 64] }]), /shape\[0\] must be a non-negative integer, got 12345678901234567890/],
    ['fractional dim', () => req('resnet', [{ ...image(), shape: [1.5, 3, 64, 64] }]), /shape\[0\] must be a non-negative integer, got 1.5/],
    ['batch not served', () => req('resnet', [image(3)]), /batch size 3 \(dim 0 of input 'input'\) is not served; allowed batch sizes: 1, 2, 4/],
    ['batch 0', () => req('resnet', [{ ...image(), shape: [0, 3, 64, 64] }]), /batch size .*must be ≥ 1, got 0/],
    ['batch mismatch', () => req('bert', [ids(1, 8)[0]!, ids(2, 8)[1]!]), /input 'attention_mask': batch \(shape\[0\]\) is 2, but input 'input_ids' has batch 1/],
    ['seq mismatch', () => req('bert', [ids(1, 8)[0]!, ids(1, 9)[1]!]), /sequence length \(shape\[1\]\) is 9, but input 'input_ids' has 8/],
    ['seq too long', () => req('bert', ids(1, 129)), /sequence length 129 .* must be in \[1, 128\]/],
    ['seq_len parameter', () => req('bert', ids(1, 8), { parameters: { seq_len: 9 } }), /parameters.seq_len is 9, but the inputs have sequence length 8/],
    ['seq_len without seq axis', () => req('resnet', [image()], { parameters: { seq_len: 9 } }), /parameters.seq_len: the model has no sequence axis/],
    ['element count', () => req('bert', ids(1, 8, new Array(7).fill(1))), /input 'input_ids': data has 7 elements, but the shape \[1, 8\] has 8/],
    ['data not an array', () => req('bert', ids(1, 2, 'abc')), /input 'input_ids': data must be an array/],
    ['nested wrong length', () => req('bert', ids(2, 2, [[1, 2], [3]])), /data\[1\] has 1 elements, expected 2/],
    ['mixed nesting', () => req('bert', ids(1, 2, [1, [2]])), /data\[1\] is an array/],
    ['raw byte length', () => req('resnet', [{ ...image(), data: { kind: 'raw', bytes: new Uint8Array(IMAGE * 4 - 1) } }]), /binary data has 49151 bytes, but the shape \[1, 3, 64, 64\] of FP32 needs 12288 × 4 = 49152/],
    ['unsafe INT64 number', () => req('bert', ids(1, 2, [1, 2 ** 60])), /element 1 is 1152921504606847000, an integer beyond 2\^53 whose precision may already be lost; send INT64 values as exact integers/],
    ['fractional INT64', () => req('bert', ids(1, 2, [1, 0.5])), /element 1 is 0.5, expected an integer in \[-2\^63, 2\^63\)/],
    ['INT64 out of range', () => req('bert', ids(1, 2, [1, 2n ** 63n])), /element 1 is 9223372036854775808, expected an integer in \[-2\^63, 2\^63\)/],
    ['INT64 string in JSON', () => req('bert', ids(1, 2, [1, '2'])), /element 1 is "2"/],
    ['FP32 string', () => req('resnet', [{ ...image(), data: { kind: 'json', values: ['nan', ...new Array(IMAGE - 1).fill(0)] } }]), /element 0 is "nan", expected a number in the FP32 range or "NaN", "Infinity", "-Infinity"/],
    ['FP32 out of range', () => req('resnet', [{ ...image(), data: { kind: 'json', values: [1e39, ...new Array(IMAGE - 1).fill(0)] } }]), /element 0 is 1e\+39, expected a number in the FP32 range/],
    ['FP32 boolean', () => req('resnet', [{ ...image(), data: { kind: 'json', values: [true, ...new Array(IMAGE - 1).fill(0)] } }]), /element 0 is true/],
    ['qos_ms above maximum', () => req('resnet', [image()], { parameters: { qos_ms: 1001 } }), /parameters.qos_ms must be a number of ms in \(0, 1000\] .*default target is 200.*got 1001/],
    ['qos_ms zero', () => req('resnet', [image()], { parameters: { qos_ms: 0 } }), /parameters.qos_ms .* got 0/],
    ['qos_ms string', () => req('resnet', [image()], { parameters: { qos_ms: '50' } }), /parameters.qos_ms .* got "50"/],
    ['unknown output', () => req('resnet', [image()], { outputs: [{ name: 'probs' }] }), /unknown output 'probs' \(the model's outputs: logits\)/],
    ['duplicate output', () => req('resnet', [image()], { outputs: [{ name: 'logits' }, { name: 'logits' }] }), /output 'logits' is requested twice/],
    ['input name not a string', () => req('resnet', [{ ...image(), name: 5 as unknown as string }]), /inputs\[0\].name must be a string, got 5/],
  ];
  it.each(cases)('%s', async (_what, make, message) => {
    const err = await failure(make());
    expect(err.code).toBe('bad_request');
    expect(err.message).toMatch(message);
  });

  it('unknown model or version → model_not_found; the metrics count every outcome', async () => {
    const e = await failure(req('nope', [image()]));
    expect([e.code, e.message]).toEqual(['model_not_found', "model 'nope' is not served here (served: resnet, bert)"]);
    expect((await failure(req('resnet', [image()], { modelVersion: '7' }))).code).toBe('model_not_found');
    const text = await metricsText();
    expect(text).toMatch(/abacus_requests_total\{model="unknown",outcome="model_not_found"\} 1/);
    expect(text).toMatch(/abacus_requests_total\{model="resnet",outcome="model_not_found"\} 1/);
    expect(text).toMatch(/abacus_requests_total\{model="resnet",outcome="bad_request"\} [1-9]/);
    expect(text).toMatch(/abacus_requests_total\{model="resnet",outcome="success"\} [1-9]/);
    expect(text).toMatch(/abacus_request_duration_seconds_count\{model="resnet"\} [1-9]/);
    expect(text).toMatch(/abacus_operator_group_size_count [1-9]/);
    expect(text).toMatch(/abacus_predictor_absolute_error_seconds_count [1-9]/);
    expect(text).toMatch(/abacus_device_busy_seconds_total [0-9.e-]+/);
    expect(text).toMatch(/abacus_ready 1/);
  });
});

describe('tensor value rules', () => {
  const ctx = { model: 'm', input: 'x' };
  it('FP32 accepts "NaN"/"Infinity"/"-Infinity" strings and writes them back the same way', () => {
    const data = decodeInputData(ctx, 'float32', [4], 4, { kind: 'json', values: ['NaN', 'Infinity', '-Infinity', 1.5] });
    expect(Array.from(data as Float32Array)).toEqual([NaN, Infinity, -Infinity, 1.5]);
    expect(jsonDataText('float32', data)).toBe('["NaN","Infinity","-Infinity",1.5]');
  });
  it('INT64 outputs are exact integer literals beyond 2^53', () => {
    const data = BigInt64Array.from([2n ** 63n - 1n, -(2n ** 63n), 9_007_199_254_740_993n]);
    expect(jsonDataText('int64', data)).toBe('[9223372036854775807,-9223372036854775808,9007199254740993]');
  });
  it('BOOL raw bytes must be 0 or 1; FP16 needs binary data', () => {
    expect(Array.from(decodeInputData(ctx, 'bool', [2], 2, { kind: 'raw', bytes: Uint8Array.from([0, 1]) }) as Uint8Array)).toEqual([0, 1]);
    expect(() => decodeInputData(ctx, 'bool', [2], 2, { kind: 'raw', bytes: Uint8Array.from([0, 2]) })).toThrow(/BOOL byte 1 is 2/);
    expect(() => decodeInputData(ctx, 'bool', [1], 1, { kind: 'json', values: [1] })).toThrow(/element 0 is 1, expected true or false/);
    expect(() => decodeInputData(ctx, 'float16', [1], 1, { kind: 'json', values: [1] })).toThrow(/FP16 .* send them as binary data/);
    expect(Array.from(decodeInputData(ctx, 'float16', [1], 1, { kind: 'raw', bytes: Uint8Array.from([0x00, 0x3c]) }) as Uint16Array)).toEqual([0x3c00]);
    expect(jsonDataText('float16', Uint16Array.from([0x3c00, 0x7c00, 0xc000]))).toBe('[1,"Infinity",-2]');
  });
});

/** Wraps a device: while `refuse` is set, a group fails as the device refusing its inputs; while `hold` is set, a group waits for it. */
class TestDevice implements Device {
  readonly id: string;
  refuse = false;
  hold: Promise<void> | undefined;
  /** Called when a group starts waiting for `hold`. */
  onHold: () => void = () => undefined;
  constructor(private readonly inner: Device) {
    this.id = inner.id;
  }
  load(services: readonly DeviceService[]): Promise<void> {
    return this.inner.load(services);
  }
  async runGroup(group: readonly Segment[]): Promise<GroupResult> {
    if (this.refuse) throw new BadRequestError('input_ids: token id 99999 is beyond the vocabulary (30522)');
    if (this.hold !== undefined) {
      this.onHold();
      await this.hold;
    }
    return this.inner.runGroup(group);
  }
  releaseQuery(service: string, queryId: string): Promise<void> {
    return this.inner.releaseQuery(service, queryId);
  }
  close(): Promise<void> {
    return this.inner.close();
  }
}

const metricValue = (text: string, series: string): number => Number(new RegExp(`^${series.replace(/[{}"=]/g, (c) => `\\${c}`)} (\\S+)$`, 'm').exec(text)?.[1] ?? Number.NaN);

describe('RuntimeBackend: metrics of device refusals and late completions', () => {
  it('a device refusing the inputs answers bad_request but counts as device_refused, apart from front-end bad_request', async () => {
    const b = await simBackend([{ name: 'r', model: 'resnet50-small', qosTargetMs: 10_000, batchSizes: [1] }], { start: false });
    const device = new TestDevice(b.engine.device);
    await b.backend.start({ ...b.engine, device });
    try {
      device.refuse = true;
      const refused = await b.backend.infer(req('r', [image()])).then(() => undefined, (e: unknown) => e as ServeError);
      expect(refused?.code).toBe('bad_request');
      expect(refused?.message).toMatch(/^model 'r': the device refused the inputs \('input' \[1, 3, 64, 64\]\): .*token id 99999 is beyond the vocabulary/);
      const malformed = await b.backend.infer(req('r', [{ ...image(), datatype: 'INT64' }])).then(() => undefined, (e: unknown) => e as ServeError);
      expect(malformed?.code).toBe('bad_request');
      const text = await b.metrics.text();
      expect(metricValue(text, 'abacus_requests_total{model="r",outcome="device_refused"}')).toBe(1);
      expect(metricValue(text, 'abacus_requests_total{model="r",outcome="bad_request"}')).toBe(1);
    } finally {
      await b.backend.shutdown(2000);
    }
  }, 60_000);

  it('a request that completes after its QoS target counts in abacus_late_completions_total (and as a success); one on time does not', async () => {
    const b = await simBackend([{ name: 'r', model: 'resnet50-small', qosTargetMs: 10_000, batchSizes: [1] }], { start: false });
    const device = new TestDevice(b.engine.device);
    await b.backend.start({ ...b.engine, device });
    try {
      await b.backend.infer(req('r', [image()]));
      // the controller launches it in time (predicted 0.05 ms); the device then holds the group
      // past the request's 50 ms target: once launched it cannot be dropped, only be late
      let release = (): void => undefined;
      device.hold = new Promise((resolve) => (release = resolve));
      const launched = new Promise<void>((resolve) => (device.onHold = resolve));
      const late = b.backend.infer(req('r', [image()], { parameters: { qos_ms: 50 } }));
      await launched;
      await new Promise((resolve) => setTimeout(resolve, 100));
      release();
      device.hold = undefined;
      await late;
      const text = await b.metrics.text();
      expect(metricValue(text, 'abacus_late_completions_total{model="r"}')).toBe(1);
      expect(metricValue(text, 'abacus_requests_total{model="r",outcome="success"}')).toBe(2);
      expect(metricValue(text, 'abacus_requests_total{model="r",outcome="qos_violation"}')).toBe(0);
    } finally {
      await b.backend.shutdown(2000);
    }
  }, 60_000);
});

describe('RuntimeBackend: outcomes, cancellation, lifecycle', () => {
  it('a full queue answers overloaded; a query that cannot meet its QoS answers qos_violation (503 codes)', async () => {
    const b = await simBackend([{ name: 'r', model: 'resnet50-small', qosTargetMs: 5_000, maxQueueLength: 2 }]);
    try {
      const settled = await Promise.allSettled(Array.from({ length: 6 }, () => b.backend.infer(req('r', [image()]))));
      const codes = settled.map((s) => (s.status === 'fulfilled' ? 'ok' : (s.reason as ServeError).code));
      expect(codes.filter((c) => c === 'ok').length).toBeGreaterThanOrEqual(2);
      expect(codes).toContain('overloaded');
      const over = settled.find((s) => s.status === 'rejected' && (s.reason as ServeError).code === 'overloaded') as PromiseRejectedResult;
      expect((over.reason as Error).message).toMatch(/^overloaded: model 'r': service 'r' has 2 queries waiting \(maxQueueLength 2\)/);
      // a QoS target far below the model's predicted latency: the controller drops it
      const late = await b.backend.infer(req('r', [image(4)], { parameters: { qos_ms: 0.001 } })).then(() => undefined, (e: unknown) => e as ServeError);
      expect(late?.code).toBe('qos_violation');
      expect(late?.message).toMatch(/^qos_violation: model 'r': dropped by the fcfs controller/);
    } finally {
      await b.backend.shutdown(2000);
    }
  }, 60_000);

  it('a client that disconnects before its query runs: withdrawn, no device time, counted as cancelled', async () => {
    const b = await simBackend([{ name: 'r', model: 'resnet50-small', qosTargetMs: 10_000 }]);
    try {
      const first = b.backend.infer(req('r', [image(4)]));
      const abort = new AbortController();
      const second = b.backend.infer(req('r', [image()], { signal: abort.signal }));
      abort.abort();
      const e = await second.then(() => undefined, (err: unknown) => err as ServeError);
      expect(e?.message).toMatch(/cancelled: model 'r': the client disconnected; the query was withdrawn/);
      await first;
      const text = await b.metrics.text();
      expect(text).toMatch(/abacus_requests_total\{model="r",outcome="cancelled"\} 1/);
      // warm-up groups (batch 1, 2, 4) + the first request: the cancelled one never launched
      expect(text).toMatch(/abacus_operator_group_size_count 4\n/);
      // already aborted: refused before queueing
      const gone = await b.backend.infer(req('r', [image()], { signal: AbortSignal.abort() })).then(() => undefined, (err: unknown) => err as ServeError);
      expect(gone?.message).toMatch(/cancelled: .*before the request was queued/);
    } finally {
      await b.backend.shutdown(2000);
    }
  }, 60_000);

  it('not ready before start and during shutdown; shutdown answers every queued request', async () => {
    const b = await simBackend([{ name: 'r', model: 'resnet50-small', qosTargetMs: 60_000, batchSizes: [1, 4] }], { start: false });
    expect(b.backend.isReady()).toBe(false);
    expect(b.backend.isLive()).toBe(true);
    const early = await b.backend.infer(req('r', [image()])).then(() => undefined, (e: unknown) => e as ServeError);
    expect([early?.code, early?.message]).toEqual(['not_ready', "not_ready: model 'r': the server is warming up; retry shortly"]);
    await b.backend.start(b.engine);
    expect(b.backend.isReady()).toBe(true);
    const queued = Array.from({ length: 30 }, () => b.backend.infer(req('r', [image(4)])).then(() => 'ok', (e: unknown) => (e as ServeError).code));
    const closing = b.backend.shutdown(50);
    expect(b.backend.isReady()).toBe(false);
    const late = await b.backend.infer(req('r', [image()])).then(() => undefined, (e: unknown) => e as ServeError);
    expect(late?.code).toBe('not_ready');
    expect(late?.message).toMatch(/shutting down/);
    await closing;
    const outcomes = await Promise.all(queued);
    expect(outcomes).toHaveLength(30);
    for (const o of outcomes) expect(['ok', 'not_ready', 'device_failure']).toContain(o);
    expect(outcomes).toContain('not_ready');
    expect(b.backend.isLive()).toBe(false);
    expect(await b.backend.shutdown(50)).toBeUndefined();
  }, 60_000);
});
