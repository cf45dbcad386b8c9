/**
 * `abacus models show NAME` through the CLI: what a model takes and gives before any server
 * runs — inputs and outputs with v2 datatypes, shapes with their symbols, the server's metadata
 * shapes, shapes at batch 1, valid values; the dynamic axes with their sizes and defaults; the
 * operator counts an import was made with. Models: the README's small BERT exported from the
 * zoo and imported twice (2 and 4 operators), and the detector fixture with two dynamic axes
 * (`onnx-axes-fixtures.ts`), imported with a probe.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { ModelInterface } from '../src/cli/model-interface.ts';
import { onnx } from '../src/model/onnx/proto.ts';
import { cliSandbox } from './helpers/cli.ts';
import { detectorModel } from './onnx-axes-fixtures.ts';

const sandbox = cliSandbox('abacus-models-show-');

describe('abacus models show: inputs, outputs, axes', () => {
  it('an imported BERT: input types, symbols, the server\'s -1 dims, valid token ids, the sequence range, the other operator counts', async () => {
    const file = path.join(sandbox.tmp, 'mynet.onnx');
    const exported = await sandbox.abacus('models', 'export', 'bert', '--layers', '2', '--hidden', '64', '--heads', '2', '--vocab-size', '1000', '--max-positions', '64', '--default-seq-len', '16', '--out', file);
    expect(exported.code, exported.stderr).toBe(0);
    for (const n of ['4', '2']) {
      // the second import in this process: a child's start-up through tsx costs about a second of CPU
      const imported = await (n === '4' ? sandbox.abacus : sandbox.inProcess)('models', 'import', file, '--operators', n, '--name', 'mynet', '--default-seq-len', '16');
      expect(imported.code, imported.stderr).toBe(0);
    }
    const text = await sandbox.abacus('models', 'show', 'mynet', '--operators', '2');
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toMatch(/^mynet: 2 operators/);
    expect(text.stdout).toContain(`source: imported from ${file}; also imported with 4 operators (mynet:N picks one)`);
    expect(text.stdout).toMatch(/^input_ids\s+INT64\s+\[batch, seq\]\s+\[-1, -1\]\s+\[1, 16\]\s+0 … 999$/m);
    expect(text.stdout).toMatch(/^batch\s+batch\s+1 … 65,?536\s+1\s+input_ids\[0\], attention_mask\[0\]$/m);
    expect(text.stdout).toMatch(/^seq\s+sequence\s+1 … \d+\s+16\s+input_ids\[1\], attention_mask\[1\]$/m);
    expect(text.stdout).toMatch(/^last_hidden_state\s+FP32\s+\[batch, seq, 64\]\s+\[-1, -1, 64\]\s+\[1, 16, 64\]$/m);
    expect(text.stdout).toContain('batch: a service serves the batch sizes of its config (batchSizes) only');
    expect(text.stdout).toMatch(/operators \(at batch 1, seq 16\):\n#\s+operator/);

    const json = await sandbox.inProcess('models', 'show', 'mynet', '--operators', '4', '--json');
    expect(json.code, json.stderr).toBe(0);
    const spec = JSON.parse(json.stdout) as { operators: unknown[]; interface: ModelInterface & { importedOperatorCounts: number[] } };
    expect(spec.operators).toHaveLength(4);
    expect(spec.interface.importedOperatorCounts).toEqual([2, 4]);
    expect(spec.interface.inputs.map((t) => [t.name, t.datatype, t.metadataShape, t.exampleShape])).toEqual([
      ['input_ids', 'INT64', [-1, -1], [1, 16]],
      ['attention_mask', 'INT64', [-1, -1], [1, 16]],
    ]);
    expect(spec.interface.inputs[0]!.values).toEqual({ range: [0, 999] });
    expect(spec.interface.axes.map((a) => [a.name, a.kind, a.min, a.default])).toEqual([
      ['batch', 'batch', 1, 1],
      ['seq', 'sequence', 1, 16],
    ]);
  });

  it('a detector with two dynamic axes: each axis with its probed size, derived output dims, no upper bound', async () => {
    const file = path.join(sandbox.tmp, 'detector.onnx');
    await fs.writeFile(file, onnx.ModelProto.encode(detectorModel()).finish());
    const imported = await sandbox.abacus('models', 'import', file, '--operators', '2', '--name', 'det', '--probe-shape', 'image=1x3x64x96');
    expect(imported.code, imported.stderr).toBe(0);
    const json = await sandbox.inProcess('models', 'show', 'det', '--json');
    expect(json.code, json.stderr).toBe(0);
    const io = (JSON.parse(json.stdout) as { interface: ModelInterface }).interface;
    expect(io.inputs).toEqual([{ name: 'image', datatype: 'FP32', dataType: 'float32', shape: ['batch', 3, 'height', 'width'], metadataShape: [-1, 3, -1, -1], exampleShape: [1, 3, 64, 96] }]);
    expect(io.axes.filter((a) => a.kind === 'dynamic').map((a) => ({ name: a.name, min: a.min, max: a.max, default: a.default, dims: a.dims }))).toEqual([
      { name: 'height', min: 1, max: undefined, default: 64, dims: ['image[2]'] },
      { name: 'width', min: 1, max: undefined, default: 96, dims: ['image[3]'] },
    ]);
    const heat4 = io.outputs.find((t) => t.name === 'heat4')!;
    expect(heat4.metadataShape).toEqual([-1, 2, -1, -1]);
    expect(heat4.exampleShape).toEqual([1, 2, 16, 24]);
    const text = await sandbox.inProcess('models', 'show', 'det');
    expect(text.stdout).toMatch(/^height\s+dynamic\s+≥ 1\s+64\s+image\[2\]$/m);
    expect(text.stdout).toMatch(/^image\s+FP32\s+\[batch, 3, height, width\]\s+\[-1, 3, -1, -1\]\s+\[1, 3, 64, 96\]\s+any$/m);
  });

  it('a zoo model names its options as its source', async () => {
    const r = await sandbox.inProcess('models', 'show', 'resnet50-small');
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^source: the zoo \(resolution 64, widthMultiplier 0\.25/m);
    expect(r.stdout).toMatch(/^input\s+FP32\s+\[batch, 3, 64, 64\]\s+\[-1, 3, 64, 64\]\s+\[1, 3, 64, 64\]\s+any$/m);
  });
});
