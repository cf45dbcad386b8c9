/**
 * Triton's features end to end on `abacus serve` (child process, ort CPU device), with the
 * typed test model (`buildTypedGraph`: y = x · 2·(words ≠ "7"), FP32 [batch, 4]; u2 UINT32;
 * neq BOOL; words_out BYTES) and a labels file in the config:
 * - classification over HTTP JSON and gRPC: `class_count` answers Triton's
 *   "value:index:label" strings equal to a top-k computed from the raw output; on a BOOL or
 *   BYTES output it is a 400 / INVALID_ARGUMENT naming the parameter;
 * - Triton's sequence parameters are a 400 naming `sequence_id`;
 * - ModelStreamInfer on a real grpc-js stream: every request answered once, ids echoed;
 * - ModelReady of an unknown model: ready false, status OK; the model config's
 *   max_batch_size and dims without the batch dim.
 */
import path from 'node:path';
import fs from 'node:fs/promises';
import * as grpc from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import { onnx } from '../../src/model/onnx/proto.ts';
import { loadInferenceService, type ModelInferRequestMessage, type ModelInferResponseMessage, type ModelStreamInferResponseMessage } from '../../src/serve/grpc/proto.ts';
import { cliSandbox } from '../helpers/cli.ts';
import { buildTypedGraph } from '../onnx-fixtures.ts';
import { startChildServer, writeConfig } from './child-serve.ts';

const sandbox = cliSandbox('abacus-serve-triton-');

type RawClient = grpc.Client & Record<string, (req: unknown, cb: (e: grpc.ServiceError | null, r: unknown) => void) => void> & {
  ModelStreamInfer: () => grpc.ClientDuplexStream<ModelInferRequestMessage, ModelStreamInferResponseMessage>;
};

function rawCall<T>(client: RawClient, method: string, request: unknown): Promise<T> {
  return new Promise((resolve, reject) => client[method]!(request, (e, r) => (e !== null ? reject(e) : resolve(r as T))));
}

/** Triton's top-k strings of one row, computed the plain way. */
function topK(row: readonly number[], k: number, labels: readonly string[]): string[] {
  return row
    .map((v, i): [number, number] => [v, i])
    .sort((a, b) => b[0] - a[0] || a[1] - b[1])
    .slice(0, k)
    .map(([v, i]) => `${v.toFixed(6)}:${i}${labels[i] === undefined || labels[i] === '' ? '' : `:${labels[i]}`}`);
}

const WORDS = ['7', 'seven', '', 'x', 'a', '7', 'b', 'c'];
const X = [1, 2, 3, 4, 5, 6, 7, 8];
/** y of the typed model for WORDS and X: x · 2 where the word is not "7". */
const Y = X.map((x, i) => (WORDS[i] === '7' ? 0 : 2 * x));
const LABELS = ['zero', 'one', '', 'three'];

function httpBody(extra: Record<string, unknown>): string {
  return JSON.stringify({
    inputs: [
      { name: 'words', datatype: 'BYTES', shape: [2, 4], data: WORDS },
      { name: 'x', datatype: 'FP32', shape: [2, 4], data: X },
    ],
    ...extra,
  });
}

function grpcRequest(id: string, extra: Partial<ModelInferRequestMessage> = {}): ModelInferRequestMessage {
  return {
    model_name: 'typed',
    id,
    inputs: [
      { name: 'words', datatype: 'BYTES', shape: ['2', '4'], contents: { bytes_contents: WORDS.map((w) => Buffer.from(w)) } },
      { name: 'x', datatype: 'FP32', shape: ['2', '4'], contents: { fp32_contents: X } },
    ],
    ...extra,
  };
}

describe('abacus serve: Triton features (child process, ort)', () => {
  it('classification, sequence parameters, ModelStreamInfer, ModelReady and the model config as Triton clients expect', async () => {
    const file = path.join(sandbox.tmp, 'typed.onnx');
    await fs.writeFile(file, onnx.ModelProto.encode(buildTypedGraph()).finish());
    const imported = await sandbox.inProcess('models', 'import', file, '--operators', '2', '--name', 'typed');
    expect(imported.code, imported.stderr).toBe(0);
    await fs.writeFile(path.join(sandbox.tmp, 'labels.txt'), LABELS.join('\n') + '\n');
    const config = await writeConfig(sandbox.tmp, 'typed.yaml', ['device: ort', 'policy: { name: fcfs, drop: false }', 'services:', '  - name: typed', '    model: typed', '    qosTargetMs: 60000', '    batchSizes: [1, 2]', '    labels: labels.txt']);
    const server = await startChildServer(config, { cacheDir: sandbox.cacheDir, flags: ['--profile-samples', '20', '--grace-ms', '2000', '--threads', '1'], readyTimeoutMs: 300_000, stderrFile: path.join(sandbox.tmp, 'serve.log') });
    const { Client } = loadInferenceService();
    const raw = new Client(server.grpcAddress!, grpc.credentials.createInsecure()) as unknown as RawClient;
    const post = (body: string): Promise<Response> => fetch(`${server.httpUrl}/v2/models/typed/infer`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    try {
      // classification over HTTP JSON: y's top 3 per row, labelled; u2 (UINT32) as integers
      const r = await post(httpBody({ outputs: [{ name: 'y', parameters: { classification: 3 } }, { name: 'u2', parameters: { classification: 2 } }] }));
      expect(r.status).toBe(200);
      const body = (await r.json()) as { outputs: { name: string; datatype: string; shape: number[]; data: string[] }[] };
      const y = body.outputs.find((o) => o.name === 'y')!;
      expect(y).toMatchObject({ datatype: 'BYTES', shape: [2, 3] });
      expect(y.data).toEqual([...topK(Y.slice(0, 4), 3, LABELS), ...topK(Y.slice(4), 3, LABELS)]);
      expect(body.outputs.find((o) => o.name === 'u2')!.data).toEqual(['2:1:one', '2:2', '2:0:zero', '2:2']);
      const onBool = await post(httpBody({ outputs: [{ name: 'neq', parameters: { classification: 1 } }] }));
      expect(onBool.status).toBe(400);
      expect(await onBool.text()).toMatch(/output 'neq': parameters.classification/);
      // sequence parameters are refused, naming the parameter
      const seq = await post(httpBody({ parameters: { sequence_id: 5, sequence_start: true } }));
      expect(seq.status).toBe(400);
      expect(await seq.text()).toMatch(/parameters.sequence_id/);

      // classification over gRPC (int64 parameter), and a bad count
      const g = await rawCall<ModelInferResponseMessage>(raw, 'ModelInfer', grpcRequest('c1', { outputs: [{ name: 'y', parameters: { classification: { int64_param: '2' } } }] }));
      expect(g.outputs!.map((o) => [o.name, o.datatype, o.shape])).toEqual([['y', 'BYTES', ['2', '2']]]);
      const bytes = Buffer.from(g.raw_output_contents![0]!);
      const strings: string[] = [];
      for (let at = 0; at < bytes.length; ) {
        const n = bytes.readUInt32LE(at);
        strings.push(bytes.subarray(at + 4, at + 4 + n).toString('utf8'));
        at += 4 + n;
      }
      expect(strings).toEqual([...topK(Y.slice(0, 4), 2, LABELS), ...topK(Y.slice(4), 2, LABELS)]);
      const badCount = await rawCall(raw, 'ModelInfer', grpcRequest('c2', { outputs: [{ name: 'y', parameters: { classification: { int64_param: '0' } } }] })).then(
        () => undefined,
        (e: unknown) => e as grpc.ServiceError,
      );
      expect(badCount?.code).toBe(grpc.status.INVALID_ARGUMENT);

      // ModelStreamInfer: 12 requests, every third invalid, each answered once with its id
      const stream = raw.ModelStreamInfer();
      const answers: ModelStreamInferResponseMessage[] = [];
      const ended = new Promise<void>((resolve, reject) => {
        stream.on('data', (m: ModelStreamInferResponseMessage) => answers.push(m));
        stream.on('end', resolve);
        stream.on('error', reject);
      });
      for (let i = 0; i < 12; i++) stream.write(i % 3 === 2 ? grpcRequest(`s${i}`, { parameters: { sequence_id: { int64_param: '9' } } }) : grpcRequest(`s${i}`));
      stream.end();
      await ended;
      expect(answers.map((a) => a.infer_response?.id).sort()).toEqual(Array.from({ length: 12 }, (_, i) => `s${i}`).sort());
      for (const a of answers) {
        const i = Number(a.infer_response!.id!.slice(1));
        if (i % 3 === 2) expect(a.error_message).toMatch(/sequence_id/);
        else expect(a.error_message).toBe('');
      }

      // readiness and configuration as tritonclient reads them
      expect(await rawCall(raw, 'ModelReady', { name: 'nope', version: '' })).toEqual({ ready: false });
      const cfg = (await (await fetch(`${server.httpUrl}/v2/models/typed/config`)).json()) as { max_batch_size: number; input: { name: string; dims: number[] }[] };
      expect(cfg.max_batch_size).toBe(2);
      expect(cfg.input.map((t) => [t.name, t.dims])).toEqual([
        ['words', [4]],
        ['x', [4]],
      ]);
      const meta = (await (await fetch(`${server.httpUrl}/v2`)).json()) as { extensions: string[] };
      expect(meta.extensions).toContain('classification');
    } finally {
      raw.close();
      expect(await server.stop()).toBe(0);
    }
  }, 400_000);
});
