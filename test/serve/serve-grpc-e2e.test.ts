/**
 * End to end over gRPC: `abacus serve --http-port 0 --grpc-port 0` as a child process on a small
 * sim:a100 config (policy fcfs: one group at a time, a small predictor trained on start), talked to with the project's
 * `GrpcInferenceClient` and a raw grpc-js client as a Triton-style client would; then
 * `abacus bench --target http://…` and `--target grpc://…` against it (every query accounted for
 * in the JSON and in the server's counters); a small gRPC fuzz (malformed ModelInfer messages →
 * INVALID_ARGUMENT / NOT_FOUND, the server keeps serving); and SIGTERM while a gRPC burst is
 * queued (one answer per call, exit 0).
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ExperimentJson } from '../../src/cli/experiment.ts';
import { GrpcInferenceClient } from '../../src/serve/client/index.ts';
import { loadInferenceService, type ModelInferRequestMessage, type ModelInferResponseMessage } from '../../src/serve/grpc/proto.ts';
import type { HostTensor } from '../../src/tensor.ts';
import { runAbacus } from '../helpers/cli.ts';
import { metricValue, startChildServer, writeConfig, type ChildServer } from './child-serve.ts';

type RawClient = grpc.Client & Record<string, (req: unknown, metadata: grpc.Metadata, options: grpc.CallOptions, cb: (e: grpc.ServiceError | null, r: unknown) => void) => grpc.ClientUnaryCall>;

function rawCall<T>(client: RawClient, method: string, request: unknown, timeoutMs = 10_000): Promise<T> {
  return new Promise((resolve, reject) => {
    client[method]!(request, new grpc.Metadata(), { deadline: Date.now() + timeoutMs }, (e, r) => (e !== null ? reject(e) : resolve(r as T)));
  });
}

async function status(promise: Promise<unknown>, what = 'the call'): Promise<grpc.ServiceError> {
  let response: unknown;
  try {
    response = await promise;
  } catch (e) {
    return e as grpc.ServiceError;
  }
  throw new Error(`expected ${what} to fail, got ${JSON.stringify(response).slice(0, 300)}`);
}

const IMAGE = 3 * 64 * 64;
const f32 = (n: number, v = 0.25): HostTensor => ({ dataType: 'float32', dims: [n / IMAGE, 3, 64, 64], data: new Float32Array(n).fill(v) });
const i64 = (dims: number[]): HostTensor => ({ dataType: 'int64', dims, data: new BigInt64Array(dims[0]! * dims[1]!).fill(1n) });

let tmp: string;
let config: string;
let server: ChildServer;

beforeAll(async () => {
  tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-grpc-e2e-'));
  config = await writeConfig(tmp, 'serve.yaml', [
    'device: sim:a100',
    'policy: { name: fcfs, drop: false }',
    'services:',
    '  - name: resnet',
    '    model: resnet50-small',
    '    qosTargetMs: 5000',
    '    batchSizes: [1, 4]',
    '  - name: bert',
    '    model: bert-small',
    '    qosTargetMs: 5000',
    '    batchSizes: [1, 2]',
    '    seqLens: [16, 32]',
  ]);
  server = await startChildServer(config, { cacheDir: path.join(tmp, 'models'), flags: ['--grace-ms', '1000', '--profile-samples', '100'] });
}, 180_000);

afterAll(async () => {
  await server?.stop(2000);
  await fs.rm(tmp, { recursive: true, force: true });
});

describe('abacus serve over gRPC (child process, sim:a100)', () => {
  it('announces the gRPC port; ServerLive/Ready, ServerMetadata, ModelReady, ModelMetadata answer as the spec says', async () => {
    expect(server.grpcAddress).toMatch(/^127\.0\.0\.1:\d+$/);
    const { Client } = loadInferenceService();
    const raw = new Client(server.grpcAddress!, grpc.credentials.createInsecure()) as unknown as RawClient;
    try {
      expect(await rawCall(raw, 'ServerLive', {})).toEqual({ live: true });
      expect(await rawCall(raw, 'ServerReady', {})).toEqual({ ready: true });
      expect(await rawCall(raw, 'ServerMetadata', {})).toMatchObject({ extensions: ['binary_tensor_data', 'classification', 'model_configuration', 'model_repository', 'statistics'] });
      expect(await rawCall(raw, 'ModelReady', { name: 'bert', version: '1' })).toEqual({ ready: true });
      expect(await rawCall(raw, 'ModelReady', { name: 'nope' })).toEqual({ ready: false });
      const nf = await status(rawCall(raw, 'ModelMetadata', { name: 'nope' }));
      expect(nf.code).toBe(grpc.status.NOT_FOUND);
      expect(nf.details).toContain("'nope'");
    } finally {
      raw.close();
    }
    const client = new GrpcInferenceClient(`grpc://${server.grpcAddress}`, { timeoutMs: 20_000 });
    try {
      expect(await client.ready()).toBe(true);
      const resnet = await client.modelMetadata('resnet');
      expect(resnet).toMatchObject({ name: 'resnet', versions: ['1'], platform: 'abacus_sim', inputs: [{ name: 'input', datatype: 'FP32', shape: [-1, 3, 64, 64] }] });
      expect(resnet.outputs).toEqual([{ name: 'logits', datatype: 'FP32', shape: [-1, 1000] }]);
      const bert = await client.modelMetadata('bert');
      expect(bert.inputs.map((i) => [i.name, i.datatype, i.shape])).toEqual([
        ['input_ids', 'INT64', [-1, -1]],
        ['attention_mask', 'INT64', [-1, -1]],
      ]);
      await expect(client.modelMetadata('nope')).rejects.toMatchObject({ code: 'model_not_found', status: grpc.status.NOT_FOUND });
    } finally {
      await client.close();
    }
  });

  it('ModelInfer returns outputs of the metadata shapes at the request batch; a bad input is INVALID_ARGUMENT naming it', async () => {
    const client = new GrpcInferenceClient(`grpc://${server.grpcAddress}`, { timeoutMs: 20_000 });
    try {
      const r = await client.infer({ model: 'resnet', id: 'q-1', inputs: { input: f32(4 * IMAGE) } });
      expect(r.ok, JSON.stringify(r)).toBe(true);
      if (!r.ok) return;
      expect(r.id).toBe('q-1');
      expect(Object.keys(r.outputs)).toEqual(['logits']);
      expect(r.outputs['logits']!.dims).toEqual([4, 1000]);
      expect(r.outputs['logits']!.data).toHaveLength(4000);
      expect(r.serverParameters['operator_groups']).toBeGreaterThanOrEqual(1);
      expect(r.serverParameters['compute_ms']).toBeGreaterThan(0);

      const meta = await client.modelMetadata('bert');
      const b = await client.infer({ model: 'bert', inputs: { input_ids: i64([2, 32]), attention_mask: i64([2, 32]) }, parameters: { seq_len: 32 } });
      expect(b.ok, JSON.stringify(b)).toBe(true);
      if (!b.ok) return;
      expect(Object.keys(b.outputs)).toEqual(meta.outputs.map((o) => o.name));
      for (const o of meta.outputs) {
        const dims = b.outputs[o.name]!.dims;
        expect(dims).toHaveLength(o.shape.length);
        expect(dims[0]).toBe(2);
        o.shape.forEach((d, k) => {
          if (d !== -1) expect(dims[k]).toBe(d);
        });
      }

      const bad = await client.infer({ model: 'resnet', inputs: { input: f32(3 * IMAGE) } }); // batch 3 is not served
      expect(bad).toMatchObject({ ok: false, status: grpc.status.INVALID_ARGUMENT, code: 'bad_request' });
      if (!bad.ok) expect(bad.message).toMatch(/model 'resnet'.*input 'input'|input 'input'.*batch/);
      const wrongName = await client.infer({ model: 'resnet', inputs: { image: f32(IMAGE) } });
      expect(wrongName).toMatchObject({ ok: false, status: grpc.status.INVALID_ARGUMENT });
      if (!wrongName.ok) expect(wrongName.message).toContain("'image'");
      const unknown = await client.infer({ model: 'nope', inputs: { input: f32(IMAGE) } });
      expect(unknown).toMatchObject({ ok: false, status: grpc.status.NOT_FOUND, code: 'model_not_found' });
    } finally {
      await client.close();
    }
  });

  it('malformed ModelInfer messages get INVALID_ARGUMENT or NOT_FOUND with a message; valid calls keep succeeding', async () => {
    const { Client } = loadInferenceService();
    const raw = new Client(server.grpcAddress!, grpc.credentials.createInsecure()) as unknown as RawClient;
    const good: ModelInferRequestMessage = { model_name: 'resnet', inputs: [{ name: 'input', datatype: 'FP32', shape: ['1', '3', '64', '64'] }], raw_input_contents: [Buffer.alloc(IMAGE * 4)] };
    const img = Buffer.alloc(IMAGE * 4);
    const cases: [string, unknown][] = [
      ['no inputs', { model_name: 'resnet' }],
      ['empty model name', { model_name: '', inputs: good.inputs, raw_input_contents: [img] }],
      ['unknown model', { model_name: 'nope', inputs: good.inputs, raw_input_contents: [img] }],
      ['unknown version', { model_name: 'resnet', model_version: '9', inputs: good.inputs, raw_input_contents: [img] }],
      ['unknown datatype', { model_name: 'resnet', inputs: [{ name: 'input', datatype: 'FP33', shape: ['1', '3', '64', '64'] }], raw_input_contents: [img] }],
      ['wrong datatype', { model_name: 'resnet', inputs: [{ name: 'input', datatype: 'INT64', shape: ['1', '3', '64', '64'] }], raw_input_contents: [Buffer.alloc(IMAGE * 8)] }],
      ['negative dim', { model_name: 'resnet', inputs: [{ name: 'input', datatype: 'FP32', shape: ['-1', '3', '64', '64'] }], raw_input_contents: [img] }],
      ['huge dim', { model_name: 'resnet', inputs: [{ name: 'input', datatype: 'FP32', shape: ['9223372036854775807', '3', '64', '64'] }], raw_input_contents: [img] }],
      ['rank 2', { model_name: 'resnet', inputs: [{ name: 'input', datatype: 'FP32', shape: ['1', String(IMAGE)] }], raw_input_contents: [img] }],
      ['truncated raw', { model_name: 'resnet', inputs: good.inputs, raw_input_contents: [img.subarray(0, 1001)] }],
      ['raw too long', { model_name: 'resnet', inputs: good.inputs, raw_input_contents: [Buffer.alloc(IMAGE * 4 + 4)] }],
      ['two raw for one input', { model_name: 'resnet', inputs: good.inputs, raw_input_contents: [img, img] }],
      ['raw and typed', { model_name: 'resnet', inputs: [{ name: 'input', datatype: 'FP32', shape: ['1', '3', '64', '64'], contents: { fp32_contents: [1] } }], raw_input_contents: [img] }],
      ['typed count mismatch', { model_name: 'resnet', inputs: [{ name: 'input', datatype: 'FP32', shape: ['1', '3', '64', '64'], contents: { fp32_contents: [1, 2, 3] } }] }],
      ['typed wrong field', { model_name: 'resnet', inputs: [{ name: 'input', datatype: 'FP32', shape: ['1', '3', '64', '64'], contents: { int64_contents: ['1'] } }] }],
      ['no data', { model_name: 'resnet', inputs: good.inputs }],
      ['unknown input', { model_name: 'resnet', inputs: [{ name: 'pixels', datatype: 'FP32', shape: ['1', '3', '64', '64'] }], raw_input_contents: [img] }],
      ['duplicate input', { model_name: 'resnet', inputs: [good.inputs![0], good.inputs![0]], raw_input_contents: [img, img] }],
      ['unknown output', { ...good, outputs: [{ name: 'probs' }] }],
      ['qos_ms negative', { ...good, parameters: { qos_ms: { double_param: -5 } } }],
      ['qos_ms string', { ...good, parameters: { qos_ms: { string_param: 'fast' } } }],
      ['qos_ms above max', { ...good, parameters: { qos_ms: { double_param: 1e12 } } }],
      ['bert seq mismatch', { model_name: 'bert', inputs: [{ name: 'input_ids', datatype: 'INT64', shape: ['1', '16'], contents: { int64_contents: Array(16).fill('1') } }, { name: 'attention_mask', datatype: 'INT64', shape: ['1', '32'], contents: { int64_contents: Array(32).fill('1') } }] }],
      ['bert seq too long', { model_name: 'bert', inputs: [{ name: 'input_ids', datatype: 'INT64', shape: ['1', '100000'] }, { name: 'attention_mask', datatype: 'INT64', shape: ['1', '100000'] }], raw_input_contents: [Buffer.alloc(8), Buffer.alloc(8)] }],
      // (a non-numeric int64 string never reaches the wire: protobufjs encodes it as 0 on the client)
      ['bert FP32 ids', { model_name: 'bert', inputs: [{ name: 'input_ids', datatype: 'FP32', shape: ['1', '1'], contents: { fp32_contents: [1] } }, { name: 'attention_mask', datatype: 'INT64', shape: ['1', '1'], contents: { int64_contents: ['1'] } }] }],
    ];
    try {
      let valid = 0;
      for (const [i, [what, request]] of cases.entries()) {
        const e = await status(rawCall(raw, 'ModelInfer', request), what);
        expect([grpc.status.INVALID_ARGUMENT, grpc.status.NOT_FOUND], `${what}: ${e.code} ${e.details}`).toContain(e.code);
        expect(e.details.length, what).toBeGreaterThan(10);
        expect(e.details, what).not.toMatch(/\n\s+at /);
        if (i % 5 === 4) {
          const ok = await rawCall<ModelInferResponseMessage>(raw, 'ModelInfer', good);
          expect(ok.outputs?.[0]?.shape?.map(Number)).toEqual([1, 1000]);
          valid++;
        }
      }
      expect(valid).toBe(5);
      // bytes that are not a valid protobuf message (grpc-js alone answers INTERNAL): INVALID_ARGUMENT naming the RPC
      const garbage = [Buffer.from([0xff, 0xff, 0xff]), Buffer.from('not protobuf at all'), Buffer.from([0x0a, 0x80])];
      for (const method of ['ModelInfer', 'ModelMetadata', 'ServerLive']) {
        for (const bytes of garbage) {
          const e = await status(
            new Promise((resolve, reject) => {
              raw.makeUnaryRequest(`/inference.GRPCInferenceService/${method}`, (b: Buffer) => b, (b: Buffer) => b, bytes, new grpc.Metadata(), { deadline: Date.now() + 10_000 }, (err, res) => (err !== null ? reject(err) : resolve(res)));
            }),
            `${method} ${bytes.toString('hex')}`,
          );
          expect(e.code, `${method} ${bytes.toString('hex')}: ${e.details}`).toBe(grpc.status.INVALID_ARGUMENT);
          expect(e.details).toMatch(new RegExp(`^the ${method} request message is not valid protobuf`));
          expect(e.metadata.get('abacus-error-code')).toEqual(['bad_request']);
        }
      }
      expect(await rawCall(raw, 'ServerReady', {})).toEqual({ ready: true });
      expect((await rawCall<ModelInferResponseMessage>(raw, 'ModelInfer', good)).outputs?.[0]?.name).toBe('logits');
    } finally {
      raw.close();
    }
  });

  it('abacus bench --target http:// and grpc:// accounts for every query (JSON and server counters)', async () => {
    const outcomes = async (): Promise<number> => {
      const text = await (await fetch(`${server.httpUrl}/metrics`)).text();
      let n = 0;
      for (const model of ['resnet', 'bert']) for (const o of ['success', 'overloaded', 'qos_violation', 'bad_request', 'device_failure', 'not_ready', 'cancelled', 'internal']) n += metricValue(text, `abacus_requests_total{model="${model}",outcome="${o}"}`);
      return n;
    };
    for (const target of [server.httpUrl, `grpc://${server.grpcAddress}`]) {
      const before = await outcomes();
      const r = await runAbacus(['bench', '--config', config, '--target', target, '--queries', '40', '--rate', '20', '--json'], { cacheDir: path.join(tmp, 'models') });
      expect(r.code, r.stderr).toBe(0);
      const json = JSON.parse(r.stdout) as ExperimentJson;
      expect(json.device).toBe(target);
      expect(json.runs).toHaveLength(1);
      const run = json.runs[0]!;
      expect(run.offered).toBe(40);
      const rejected = Object.values(run.rejectedBy).reduce((a, b) => a + b, 0);
      // no failures other than QoS / overload on this idle server with 5 s targets
      expect(Object.keys(run.rejectedBy).filter((k) => k !== 'qos_violation' && k !== 'overloaded'), JSON.stringify(run.rejectedBy)).toEqual([]);
      const completed = run.offered - rejected;
      expect(completed).toBeGreaterThan(0);
      expect(run.services.map((s) => s.service).sort()).toEqual(['bert', 'resnet']);
      expect(r.stderr).not.toMatch(/warning/);
      // the server answered exactly the 40 queries (plus nothing else)
      expect((await outcomes()) - before).toBe(40);
    }
  }, 120_000);

  // last: it stops the shared server
  it('SIGTERM while a gRPC burst is queued: every call gets exactly one answer (OK or UNAVAILABLE not_ready), only calls not yet served are refused, exit 0', async () => {
    const client = new GrpcInferenceClient(`grpc://${server.grpcAddress}`, { timeoutMs: 30_000 });
    const n = 100;
    const before = metricValue(await (await fetch(`${server.httpUrl}/metrics`)).text(), 'abacus_requests_total{model="resnet",outcome="success"}');
    try {
      let answered = 0;
      const calls = Array.from({ length: n }, () =>
        client.infer({ model: 'resnet', inputs: { input: f32(IMAGE) } }).then((r) => {
          answered++;
          return r;
        }),
      );
      // wait until every call reached the runtime (answered or queued); most still wait then
      // (~7.6 ms each, one at a time), but how many depends on how fast the machine delivered them
      const deadline = Date.now() + 30_000;
      let depth = 0;
      let done = 0;
      for (;;) {
        const m = await (await fetch(`${server.httpUrl}/metrics`)).text();
        depth = metricValue(m, 'abacus_queue_depth{model="resnet"}');
        done = metricValue(m, 'abacus_requests_total{model="resnet",outcome="success"}') - before;
        if (done + depth >= n || Date.now() > deadline) break;
        await new Promise((r) => setTimeout(r, 2));
      }
      server.child.kill('SIGTERM');
      const results = await Promise.all(calls);
      expect(answered).toBe(n);
      let ok = 0;
      for (const r of results) {
        if (r.ok) {
          ok++;
          expect(r.outputs['logits']!.dims).toEqual([1, 1000]);
        } else {
          expect(r, JSON.stringify(r)).toMatchObject({ status: grpc.status.UNAVAILABLE, code: 'not_ready' });
          expect(r.message).toMatch(/shutting down/);
        }
      }
      expect(await server.exit).toBe(0);
      // a call served before SIGTERM is never refused after it
      expect(ok).toBeGreaterThanOrEqual(done);
      expect(server.stdout()).toMatch(/abacus serve: SIGTERM: shutting down \(grace 1000 ms\)\nabacus serve: stopped\n/);
      console.log(`gRPC shutdown: ${ok} completed, ${n - ok} answered not_ready, queue depth at SIGTERM ${depth}`);
    } finally {
      await client.close();
    }
  }, 60_000);
});
