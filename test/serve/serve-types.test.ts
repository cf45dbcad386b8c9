/**
 * Element types (docs/import.md "Element types") end to end: an imported model with STRING, FP32 inputs and FP32, BYTES, UINT32,
 * BOOL outputs (`buildTypedGraph`, 4 operators: STRING/BOOL/UINT32 tensors cross boundaries)
 * served by `abacus serve` on the ort CPU device, answered over HTTP with JSON data, over HTTP
 * with binary data (BYTES length-prefixed), and over gRPC (raw contents) — each answer equal to
 * the hand-computed golden: neq = words ≠ "7", u2 = 2·neq, y = x·u2, words_out = words.
 */
import path from 'node:path';
import fs from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { GrpcInferenceClient, HttpInferenceClient, type ClientInferResult, type InferenceClient } from '../../src/serve/client/index.ts';
import { onnx } from '../../src/model/onnx/proto.ts';
import type { TensorMap } from '../../src/tensor.ts';
import { cliSandbox } from '../helpers/cli.ts';
import { buildTypedGraph } from '../onnx-fixtures.ts';
import { startChildServer, writeConfig } from './child-serve.ts';

const sandbox = cliSandbox('abacus-serve-types-');

describe('abacus serve: BYTES, UINT32 and BOOL tensors (child process, ort)', () => {
  it('answers over HTTP JSON, HTTP binary and gRPC with the golden outputs', async () => {
    const file = path.join(sandbox.tmp, 'typed.onnx');
    await fs.writeFile(file, onnx.ModelProto.encode(buildTypedGraph()).finish());
    const imported = await sandbox.inProcess('models', 'import', file, '--operators', '4', '--name', 'typed');
    expect(imported.code, imported.stderr).toBe(0);
    const config = await writeConfig(sandbox.tmp, 'typed.yaml', ['device: ort', 'policy: { name: fcfs, drop: false }', 'services:', '  - name: typed', '    model: typed', '    qosTargetMs: 60000', '    batchSizes: [1, 2]']);
    const server = await startChildServer(config, { cacheDir: sandbox.cacheDir, flags: ['--profile-samples', '20', '--grace-ms', '2000', '--threads', '1'], readyTimeoutMs: 300_000, stderrFile: path.join(sandbox.tmp, 'serve.log') });
    const clients: [string, InferenceClient][] = [
      ['http json', new HttpInferenceClient(server.httpUrl)],
      ['http binary', new HttpInferenceClient(server.httpUrl, { binary: true })],
      ['grpc', new GrpcInferenceClient(server.grpcAddress!)],
    ];
    try {
      const meta = await (clients[0]![1] as HttpInferenceClient).modelMetadata('typed');
      expect(meta.inputs.map((t) => [t.name, t.datatype, t.shape])).toEqual([
        ['words', 'BYTES', [-1, 4]],
        ['x', 'FP32', [-1, 4]],
      ]);
      expect(Object.fromEntries(meta.outputs.map((t) => [t.name, t.datatype]))).toEqual({ y: 'FP32', words_out: 'BYTES', u2: 'UINT32', neq: 'BOOL' });
      const words = ['7', 'seven', '', 'ünïcode "7"', '7', '7', 'x', 'y\n'];
      const inputs: TensorMap = {
        words: { dataType: 'string', dims: [2, 4], data: words },
        x: { dataType: 'float32', dims: [2, 4], data: Float32Array.from([1, 2, 3, 4, 5, 6, 7, 8]) },
      };
      for (const [what, client] of clients) {
        const r: ClientInferResult = await client.infer({ model: 'typed', inputs });
        if (!r.ok) throw new Error(`${what}: ${r.code} ${r.message}`);
        expect(r.outputs['words_out'], what).toEqual({ dataType: 'string', dims: [2, 4], data: words });
        expect(r.outputs['u2']!.dataType, what).toBe('uint32');
        expect([...(r.outputs['u2']!.data as Uint32Array)], what).toEqual([0, 2, 2, 2, 0, 0, 2, 2]);
        expect(r.outputs['neq']!.dataType, what).toBe('bool');
        expect([...(r.outputs['neq']!.data as Uint8Array)], what).toEqual([0, 1, 1, 1, 0, 0, 1, 1]);
        expect([...(r.outputs['y']!.data as Float32Array)], what).toEqual([0, 4, 6, 8, 0, 0, 14, 16]);
      }
      // A BYTES input sent as numbers is a 400 naming the input and element.
      const bad = await fetch(`${server.httpUrl}/v2/models/typed/infer`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ inputs: [{ name: 'words', datatype: 'BYTES', shape: [1, 4], data: [1, 2, 3, 4] }, { name: 'x', datatype: 'FP32', shape: [1, 4], data: [1, 2, 3, 4] }] }),
      });
      expect(bad.status).toBe(400);
      expect(await bad.text()).toMatch(/input 'words': element 0 is 1, expected a string/);
    } finally {
      for (const [, c] of clients) await c.close();
      expect(await server.stop()).toBe(0);
    }
  }, 400_000);
});
