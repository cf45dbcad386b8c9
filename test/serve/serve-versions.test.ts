/**
 * Model versions end to end on `abacus serve` (child process, ort): two different files
 * imported under one name are versions 1 and 2 (`typed`, `typed@2`); a service with
 * `versionPolicy: { all: true }` serves both at once, each on its `/versions/{v}/` route (HTTP
 * and gRPC `model_version`) with its own outputs, the latest without a version; metadata,
 * the repository index and statistics list both; an unload and a load act on both.
 *
 * The two files differ in one constant: version 1 compares the words with "7", version 2
 * with "8", so y = x · 2·(word ≠ constant) tells which version answered.
 */
import path from 'node:path';
import fs from 'node:fs/promises';
import * as grpc from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import { onnx } from '../../src/model/onnx/proto.ts';
import { loadInferenceService, type ModelInferResponseMessage } from '../../src/serve/grpc/proto.ts';
import { cliSandbox } from '../helpers/cli.ts';
import { buildTypedGraph } from '../onnx-fixtures.ts';
import { startChildServer, writeConfig } from './child-serve.ts';

const sandbox = cliSandbox('abacus-serve-versions-');

type RawClient = grpc.Client & Record<string, (req: unknown, cb: (e: grpc.ServiceError | null, r: unknown) => void) => void>;

function rawCall<T>(client: RawClient, method: string, request: unknown): Promise<T> {
  return new Promise((resolve, reject) => client[method]!(request, (e, r) => (e !== null ? reject(e) : resolve(r as T))));
}

/** The typed test graph comparing its words with `word` instead of "7". */
function typedComparingWith(word: string): Uint8Array {
  const model = buildTypedGraph();
  model.graph!.initializer![0]!.stringData = [new TextEncoder().encode(word)];
  return onnx.ModelProto.encode(model).finish();
}

const WORDS = ['7', '8', '7', '8'];
const X = [1, 2, 3, 4];
const yOf = (constant: string): number[] => X.map((x, i) => (WORDS[i] === constant ? 0 : 2 * x));

describe('abacus serve: model versions (child process, ort)', () => {
  it('serves two versions of one imported model side by side, each on its route with its own outputs', async () => {
    const file = path.join(sandbox.tmp, 'typed.onnx');
    await fs.writeFile(file, typedComparingWith('7'));
    const v1 = await sandbox.inProcess('models', 'import', file, '--operators', '2', '--name', 'typed');
    expect(v1.code, v1.stderr).toBe(0);
    await fs.writeFile(file, typedComparingWith('8'));
    const v2 = await sandbox.inProcess('models', 'import', file, '--operators', '2', '--name', 'typed');
    expect(v2.code, v2.stderr).toBe(0);
    expect(v2.stdout).toMatch(/^typed@2: imported/);

    const config = await writeConfig(sandbox.tmp, 'versions.yaml', ['device: ort', 'policy: { name: fcfs, drop: false }', 'services:', '  - name: typed', '    model: typed', '    qosTargetMs: 60000', '    batchSizes: [1]', '    versionPolicy: { all: true }']);
    const server = await startChildServer(config, { cacheDir: sandbox.cacheDir, flags: ['--profile-samples', '20', '--grace-ms', '2000', '--threads', '1', '--model-control', 'explicit'], readyTimeoutMs: 300_000, stderrFile: path.join(sandbox.tmp, 'serve.log') });
    const { Client } = loadInferenceService();
    const raw = new Client(server.grpcAddress!, grpc.credentials.createInsecure()) as unknown as RawClient;
    const body = JSON.stringify({
      inputs: [
        { name: 'words', datatype: 'BYTES', shape: [1, 4], data: WORDS },
        { name: 'x', datatype: 'FP32', shape: [1, 4], data: X },
      ],
      outputs: [{ name: 'y' }],
    });
    const infer = async (route: string): Promise<{ status: number; version?: string; y?: number[] }> => {
      const r = await fetch(`${server.httpUrl}/v2/models/typed${route}/infer`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      if (r.status !== 200) return { status: r.status };
      const j = (await r.json()) as { model_version: string; outputs: { data: number[] }[] };
      return { status: 200, version: j.model_version, y: j.outputs[0]!.data };
    };
    try {
      expect(await infer('/versions/1')).toEqual({ status: 200, version: '1', y: yOf('7') });
      expect(await infer('/versions/2')).toEqual({ status: 200, version: '2', y: yOf('8') });
      expect(await infer('')).toEqual({ status: 200, version: '2', y: yOf('8') });
      expect((await infer('/versions/3')).status).toBe(404);

      const meta = (await (await fetch(`${server.httpUrl}/v2/models/typed`)).json()) as { name: string; versions: string[] };
      expect(meta).toMatchObject({ name: 'typed', versions: ['1', '2'] });
      expect(await (await fetch(`${server.httpUrl}/v2/models`)).json()).toEqual({ models: ['typed'] });
      const index = (await (await fetch(`${server.httpUrl}/v2/repository/index`, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } })).json()) as { name: string; version: string; state: string }[];
      expect(index.map((e) => [e.name, e.version, e.state])).toEqual([
        ['typed', '1', 'READY'],
        ['typed', '2', 'READY'],
      ]);
      const stats = (await (await fetch(`${server.httpUrl}/v2/models/typed/stats`)).json()) as { model_stats: { name: string; version: string; inference_count: number }[] };
      expect(stats.model_stats.map((s) => [s.name, s.version, s.inference_count])).toEqual([
        ['typed', '1', 1],
        ['typed', '2', 2],
      ]);

      // gRPC: model_version picks the version; ModelReady per version
      const g = await rawCall<ModelInferResponseMessage>(raw, 'ModelInfer', {
        model_name: 'typed',
        model_version: '1',
        inputs: [
          { name: 'words', datatype: 'BYTES', shape: ['1', '4'], contents: { bytes_contents: WORDS.map((w) => Buffer.from(w)) } },
          { name: 'x', datatype: 'FP32', shape: ['1', '4'], contents: { fp32_contents: X } },
        ],
        outputs: [{ name: 'y' }],
      });
      expect(g.model_version).toBe('1');
      expect(Array.from(new Float32Array(new Uint8Array(g.raw_output_contents![0]!).buffer))).toEqual(yOf('7'));
      expect(await rawCall(raw, 'ModelReady', { name: 'typed', version: '2' })).toEqual({ ready: true });
      expect(await rawCall(raw, 'ModelReady', { name: 'typed', version: '3' })).toEqual({ ready: false });

      // unload and load act on every version
      const repo = (action: string): Promise<Response> => fetch(`${server.httpUrl}/v2/repository/models/typed/${action}`, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } });
      expect((await repo('unload')).status).toBe(200);
      expect((await infer('/versions/1')).status).toBe(404);
      expect((await infer('/versions/2')).status).toBe(404);
      expect((await repo('load')).status).toBe(200);
      expect(await infer('/versions/1')).toEqual({ status: 200, version: '1', y: yOf('7') });
      expect(await infer('/versions/2')).toEqual({ status: 200, version: '2', y: yOf('8') });
    } finally {
      raw.close();
      expect(await server.stop()).toBe(0);
    }
  }, 400_000);
});
