/**
 * Valid inputs (docs/import.md "Valid inputs") end to end: an imported model whose int64 input indexes a Gather over a table of
 * 10 rows (implied domain [0, 9]) and whose float input is declared `values: [2]` in the config
 * is served on the ort CPU device: warm-up and profiling feed valid values (ids ≥ 10 would make
 * the Gather fail), the metadata reports each domain in `parameters`, valid requests equal the
 * whole model run locally, and a value outside a domain is a 400 naming the input and the domain.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { describe, expect, it } from 'vitest';
import { GraphBuilder } from '../../src/model/onnx/builder.ts';
import { onnx, type OnnxTypes } from '../../src/model/onnx/proto.ts';
import { runOnnx } from '../../src/model/onnx/verify.ts';
import { HttpInferenceClient } from '../../src/serve/client/index.ts';
import { cliSandbox } from '../helpers/cli.ts';
import { startChildServer, writeConfig } from './child-serve.ts';

const sandbox = cliSandbox('abacus-serve-domains-');

/** idx int64 [batch] → Cast int32 → Gather(table [10, 4]); out = rows · scale (scale float [batch, 1]). */
function lookupModel(): OnnxTypes.ModelProto {
  const g = new GraphBuilder({ name: 'lookup', seed: 1 });
  const idx = g.input('idx', 'int64', ['batch']);
  const scale = g.input('scale', 'float32', ['batch', 1]);
  const table = g.initializer('table', [10, 4], { kind: 'uniform', bound: 1 });
  g.beginOperator('gather');
  const [i32] = g.node('Cast', [idx], [['batch']], { attrs: { to: { int: 6 } }, dataType: 'int32' });
  const [rows] = g.node('Gather', [table, i32!], [['batch', 4]]);
  const [r] = g.node('Relu', [rows!], [['batch', 4]]);
  g.node('Mul', [r!, scale], [['batch', 4]], { outputs: ['out'] });
  g.output('out');
  return g.build().model;
}

describe('abacus serve: input domains (child process, ort)', () => {
  it('warms up and profiles with valid inputs, reports the domains, and answers 400 outside them', async () => {
    const model = lookupModel();
    const file = path.join(sandbox.tmp, 'lookup.onnx');
    await fs.writeFile(file, onnx.ModelProto.encode(model).finish());
    const imported = await sandbox.inProcess('models', 'import', file, '--operators', '2', '--name', 'lookup');
    expect(imported.code, imported.stderr).toBe(0);
    const config = await writeConfig(sandbox.tmp, 'lookup.yaml', ['device: ort', 'policy: { name: fcfs, drop: false }', 'services:', '  - name: lookup', '    model: lookup', '    qosTargetMs: 60000', '    batchSizes: [1, 3]', '    inputs: { scale: { values: [2] } }']);
    const server = await startChildServer(config, { cacheDir: sandbox.cacheDir, flags: ['--profile-samples', '20', '--grace-ms', '2000', '--threads', '1', '--no-grpc'], readyTimeoutMs: 300_000, stderrFile: path.join(sandbox.tmp, 'serve.log') });
    const http = new HttpInferenceClient(server.httpUrl);
    try {
      const meta = (await (await fetch(`${server.httpUrl}/v2/models/lookup`)).json()) as { inputs: { name: string; parameters?: unknown }[] };
      expect(meta.inputs).toEqual([
        { name: 'idx', datatype: 'INT64', shape: [-1], parameters: { range: [0, 9] } },
        { name: 'scale', datatype: 'FP32', shape: [-1, 1], parameters: { values: [2] } },
      ]);
      const idx = BigInt64Array.from([0n, 9n, 4n]);
      const scale = Float32Array.from([2, 2, 2]);
      const r = await http.infer({ model: 'lookup', inputs: { idx: { dataType: 'int64', dims: [3], data: idx }, scale: { dataType: 'float32', dims: [3, 1], data: scale } } });
      if (!r.ok) throw new Error(`${r.code} ${r.message}`);
      const expected = await runOnnx(model, { idx: new ort.Tensor('int64', idx, [3]), scale: new ort.Tensor('float32', scale, [3, 1]) });
      expect([...(r.outputs['out']!.data as Float32Array)]).toEqual([...(expected['out']!.data as Float32Array)]);

      const post = async (idxValue: number, scaleValue: number): Promise<Response> =>
        fetch(`${server.httpUrl}/v2/models/lookup/infer`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ inputs: [{ name: 'idx', datatype: 'INT64', shape: [1], data: [idxValue] }, { name: 'scale', datatype: 'FP32', shape: [1, 1], data: [scaleValue] }] }),
        });
      const outOfRange = await post(10, 2);
      expect(outOfRange.status).toBe(400);
      expect(await outOfRange.text()).toMatch(/input 'idx': element 0 is 10, outside the input's valid values \(in \[0, 9\]\)/);
      const notListed = await post(3, 3);
      expect(notListed.status).toBe(400);
      expect(await notListed.text()).toMatch(/input 'scale': element 0 is 3, outside the input's valid values \(one of 2\)/);
    } finally {
      await http.close();
      expect(await server.stop()).toBe(0);
    }
  }, 400_000);
});
