/**
 * Dynamic axes and data-dependent shapes (docs/import.md) end to end: imported models with several dynamic axes — a detector with
 * dynamic height and width (stride-4/8 outputs), a recognizer with a dynamic width (W/8
 * output), an NHWC model whose two inputs share `height` and `width` — a model ending in
 * NonZero and one whose TopK k is a request input (valid k from the config), each cut into
 * operators, served by `abacus serve` on the ort CPU device over HTTP at
 * sizes the import never probed (H ≠ W). Metadata reports -1 for each axis and for the
 * data-dependent dim; answers equal the whole model run locally (same onnxruntime, tolerance
 * 1e-5) with their actual shapes; an input that gives an axis another size than an earlier
 * input is a 400 naming the input, the dim and the axis.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import * as ort from 'onnxruntime-node';
import { describe, expect, it } from 'vitest';
import { onnx, type OnnxTypes } from '../../src/model/onnx/proto.ts';
import { maxAbsDiff, runOnnx } from '../../src/model/onnx/verify.ts';
import { HttpInferenceClient } from '../../src/serve/client/index.ts';
import type { HostTensor } from '../../src/tensor.ts';
import { cliSandbox } from '../helpers/cli.ts';
import { detectorModel, nhwcModel, nonZeroModel, recognizerModel, topKModel } from '../onnx-axes-fixtures.ts';
import { randomTensor } from '../onnx-fixtures.ts';
import { startChildServer, writeConfig } from './child-serve.ts';

const sandbox = cliSandbox('abacus-serve-axes-');

const host = (t: ort.Tensor): HostTensor => ({ dataType: 'float32', dims: [...t.dims], data: t.data });

describe('abacus serve: several dynamic axes and data-dependent outputs (child process, ort)', () => {
  it('serves H ≠ W and unprobed widths, checks each axis across inputs, returns data-dependent outputs with their actual shape', async () => {
    const models: [string, OnnxTypes.ModelProto, number][] = [
      ['detector', detectorModel(), 4],
      ['recognizer', recognizerModel(), 4],
      ['nhwc', nhwcModel(), 4],
      ['nonzero', nonZeroModel(), 2],
      ['topk', topKModel(), 2],
    ];
    const services: string[] = [];
    for (const [name, model, operators] of models) {
      const file = path.join(sandbox.tmp, `${name}.onnx`);
      await fs.writeFile(file, onnx.ModelProto.encode(model).finish());
      // in this process: a child's start-up through tsx costs about a second of CPU (cli.test.ts spawns the import)
      const imported = await sandbox.inProcess('models', 'import', file, '--operators', String(operators), '--name', name);
      expect(imported.code, imported.stderr).toBe(0);
      services.push(`  - name: ${name}`, `    model: ${name}`, '    qosTargetMs: 60000', '    batchSizes: [1, 2]', ...(name === 'topk' ? ['    inputs: { k: { range: [0, 16] } }'] : []));
    }
    const config = await writeConfig(sandbox.tmp, 'axes.yaml', ['device: ort', 'policy: { name: fcfs, drop: false }', 'services:', ...services]);
    const server = await startChildServer(config, { cacheDir: sandbox.cacheDir, flags: ['--profile-samples', '20', '--grace-ms', '2000', '--threads', '1', '--no-grpc'], readyTimeoutMs: 300_000, stderrFile: path.join(sandbox.tmp, 'serve.log') });
    const http = new HttpInferenceClient(server.httpUrl);
    try {
      const meta = async (name: string): Promise<{ inputs: { name: string; shape: number[] }[]; outputs: { name: string; shape: number[] }[] }> => (await (await fetch(`${server.httpUrl}/v2/models/${name}`)).json()) as never;
      const detector = await meta('detector');
      expect(detector.inputs.map((t) => [t.name, t.shape])).toEqual([['image', [-1, 3, -1, -1]]]);
      expect(detector.outputs.map((t) => [t.name, t.shape])).toEqual([
        ['heat4', [-1, 2, -1, -1]],
        ['heat8', [-1, 2, -1, -1]],
        ['flat8', [-1, -1]],
      ]);
      expect((await meta('nonzero')).outputs.map((t) => [t.name, t.shape])).toEqual([
        ['y', [-1, 8]],
        ['found', [-1, 2]],
      ]);

      const check = async (name: string, model: OnnxTypes.ModelProto, feeds: Record<string, ort.Tensor>): Promise<void> => {
        const expected = await runOnnx(model, feeds);
        const r = await http.infer({ model: name, inputs: Object.fromEntries(Object.entries(feeds).map(([k, t]) => [k, host(t)])) });
        if (!r.ok) throw new Error(`${name}: ${r.code} ${r.message}`);
        for (const [out, want] of Object.entries(expected)) {
          const got = r.outputs[out]!;
          expect(got.dims, `${name}.${out}`).toEqual([...want.dims]);
          expect(maxAbsDiff(want, got), `${name}.${out}`).toBeLessThanOrEqual(1e-5);
        }
      };
      await check('detector', models[0]![1], { image: randomTensor([2, 3, 50, 70], 'd') });
      await check('detector', models[0]![1], { image: randomTensor([1, 3, 97, 33], 'd2') });
      await check('recognizer', models[1]![1], { image: randomTensor([1, 1, 32, 203], 'r') });
      await check('nhwc', models[2]![1], { image: randomTensor([2, 40, 58, 3], 'n'), mask: randomTensor([2, 40, 58, 1], 'm') });
      await check('nonzero', models[3]![1], { x: randomTensor([2, 8], 'z') });
      for (const k of [5n, 3n]) {
        const x = randomTensor([2, 16], 't');
        const expected = await runOnnx(models[4]![1], { x, k: new ort.Tensor('int64', BigInt64Array.from([k]), [1]) });
        const r = await http.infer({ model: 'topk', inputs: { x: host(x), k: { dataType: 'int64', dims: [1], data: BigInt64Array.from([k]) } } });
        if (!r.ok) throw new Error(`topk: ${r.code} ${r.message}`);
        expect(r.outputs['scores']!.dims).toEqual([2, Number(k)]);
        expect(maxAbsDiff(expected['scores']!, r.outputs['scores']!)).toBeLessThanOrEqual(1e-6);
        expect([...(r.outputs['indices']!.data as BigInt64Array)]).toEqual([...(expected['indices']!.data as BigInt64Array)]);
      }

      const mismatch = await fetch(`${server.httpUrl}/v2/models/nhwc/infer`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          inputs: [
            { name: 'image', datatype: 'FP32', shape: [1, 4, 6, 3], data: new Array<number>(72).fill(0.5) },
            { name: 'mask', datatype: 'FP32', shape: [1, 4, 5, 1], data: new Array<number>(20).fill(1) },
          ],
        }),
      });
      expect(mismatch.status).toBe(400);
      expect(await mismatch.text()).toMatch(/input 'mask': shape\[2\] is 5, but it is the dynamic axis 'width', which input 'image' gives as 6/);
    } finally {
      await http.close();
      expect(await server.stop()).toBe(0);
    }
  }, 400_000);
});
