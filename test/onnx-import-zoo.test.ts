/**
 * The import and partition check (docs/models.md "Operators on disk") on every zoo model: each of the seven models' small variants, written as a plain
 * ONNX file without `value_info` (so shapes come from onnxruntime, as for a foreign model) and
 * imported with `importOnnxModel` at several operator counts, runs as N operators in sequence
 * with the same outputs as the whole model: max abs error ≤ 1e-4 · max|output| (verify.ts).
 * Batch 2; BERT at seq 11 (imported with its default sequence length 16, below maxPositions).
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { foldConstants } from '../src/model/onnx/constants.ts';
import { importOnnxModel } from '../src/model/onnx/partition.ts';
import { onnx } from '../src/model/onnx/proto.ts';
import { compareOutputs, runOnnx, runOperatorsInSequence } from '../src/model/onnx/verify.ts';
import { buildZooModel, ZOO_MODEL_NAMES } from '../src/model/zoo/index.ts';
import { zooFeeds } from './helpers/run-operators.ts';
import { SMALL_VARIANTS } from './helpers/small-variants.ts';
import { boundaryViolations, roundTrip } from './onnx-fixtures.ts';

let dir = '';
beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'abacus-import-zoo-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Operator counts tried: 2, 7 and ⌊nodes/3⌋, each clamped to [1, nodes], without repeats. */
function operatorCounts(nodes: number): number[] {
  return [...new Set([2, 7, Math.floor(nodes / 3)].map((n) => Math.min(Math.max(n, 1), nodes)))];
}

describe.each(ZOO_MODEL_NAMES.map((n) => [n]))('%s small variant imported from a file without value_info', (name) => {
  it('N operators in sequence equal the whole model for N ∈ {2, 7, ⌊nodes/3⌋}', async () => {
    const options = SMALL_VARIANTS[name];
    const built = buildZooModel(name, options, { withWeights: true });
    const model = roundTrip(built.model);
    model.graph!.valueInfo = [];
    const file = path.join(dir, `${name}.onnx`);
    await writeFile(file, onnx.ModelProto.encode(model).finish());
    // constant-only nodes (BERT's position ids) fold into initializers (docs/import.md, "Constants where they are used")
    const nodes = model.graph!.node!.length - (await foldConstants(model, name)).foldedNodes;
    const seqLen = built.dynamicAxes.seq === undefined ? 0 : 11;

    let expected: Awaited<ReturnType<typeof runOnnx>> | undefined;
    for (const operators of operatorCounts(nodes)) {
      const { spec, operatorModels } = await importOnnxModel(file, { operators, ...(built.defaultSeqLen > 0 ? { defaultSeqLen: built.defaultSeqLen } : {}) });
      expect(spec.operators).toHaveLength(operators);
      expect(spec.dynamicAxes).toEqual(built.dynamicAxes);
      expect(spec.operators.reduce((a, op) => a + op.nodeCount, 0)).toBe(nodes);
      expect(boundaryViolations(spec)).toEqual([]);
      const feeds = zooFeeds({ spec }, 2, seqLen);
      expected ??= await runOnnx(model, feeds);
      const actual = await runOperatorsInSequence(spec, operatorModels, feeds);
      expect(Object.keys(actual).sort()).toEqual(Object.keys(expected).sort());
      for (const c of compareOutputs(expected, actual)) expect(c, `N=${operators} output ${c.name}`).toMatchObject({ ok: true });
    }
  });
});
