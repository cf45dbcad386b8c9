/**
 * Partition correctness: running the N operator sub-models in sequence (carrying passthrough
 * tensors) reproduces the whole model's outputs within 1e-4 × max|output| (docs/models.md "Operators on disk"),
 * on hand-built DAGs, for every N from 1 to the node count.
 */
import * as ort from 'onnxruntime-node';
import { describe, expect, it } from 'vitest';
import { balancedAssignment, partitionModel } from '../src/model/onnx/partition.ts';
import type { PartitionInput } from '../src/model/onnx/partition.ts';
import { compareOutputs, runOnnx, runOperatorsInSequence } from '../src/model/onnx/verify.ts';
import type { OnnxTypes } from '../src/model/onnx/proto.ts';
import type { BuiltGraph } from '../src/model/onnx/builder.ts';
import type { DynamicAxes } from '../src/model/spec.ts';
import { InvalidModelError } from '../src/errors.ts';
import { boundaryViolations, buildIfGraph, buildInceptionGraph, buildSkipGraph, randomTensor, roundTrip } from './onnx-fixtures.ts';

const SKIP_AXES: DynamicAxes = { batch: 'batch', seq: 'seq' };
const CNN_AXES: DynamicAxes = { batch: 'batch' };

function input(built: BuiltGraph, model: OnnxTypes.ModelProto, operatorOfNode: readonly number[], axes: DynamicAxes, defaultSeqLen: number): PartitionInput {
  return { name: model.graph?.name ?? 'm', model, operatorOfNode, nonTrainable: built.nonTrainable, dynamicAxes: axes, defaultSeqLen, source: { kind: 'zoo', options: {} } };
}

/** Partition, run both ways, return the comparisons (and check the spec's boundaries). */
async function check(pi: PartitionInput, feeds: Record<string, ort.Tensor>): Promise<void> {
  const { spec, operatorModels } = await partitionModel(pi);
  expect(boundaryViolations(spec)).toEqual([]);
  expect(operatorModels).toHaveLength(spec.operators.length);
  expect(spec.operators.reduce((a, op) => a + op.nodeCount, 0)).toBe(pi.model.graph!.node!.length);
  const whole = await runOnnx(pi.model, feeds);
  const split = await runOperatorsInSequence(spec, operatorModels, feeds);
  expect(Object.keys(split).sort()).toEqual(Object.keys(whole).sort());
  for (const c of compareOutputs(whole, split)) expect(c, `N=${spec.operators.length} output ${c.name}`).toMatchObject({ ok: true });
}

describe('partitionModel on a DAG with a long skip, two inputs, two outputs and a seq axis', () => {
  const built = buildSkipGraph();
  const model = roundTrip(built.model); // decoded form: Long dims, prototype defaults
  const nodeCount = model.graph!.node!.length;
  const feeds = { x: randomTensor([2, 5, 8], 'x'), y: randomTensor([2, 8], 'y') };

  it("reproduces the outputs with the builder's own 7 operators, and the spec says what crosses each cut", async () => {
    const { spec, operatorModels } = await partitionModel(input(built, model, built.operatorOfNode, SKIP_AXES, 16));
    expect(spec.operators.map((o) => o.name)).toEqual(['op0', 'op1', 'op2', 'op3', 'op4', 'op5', 'op6']);
    const [op0, op1, , , , op5, op6] = spec.operators;
    // x is read by operators 0 and 5 and carried across 1..4; y is an input, read by 1 and an output.
    expect(op0!.inputs.map((t) => t.name)).toEqual(['x']);
    expect(op0!.passthrough).toEqual(['x', 'y']);
    expect(op1!.inputs.map((t) => t.name)).toEqual(['y', 'res']);
    expect(op1!.outputs.map((t) => t.name)).toEqual(['early', 'yu', 'h3']);
    // res (the residual) crosses operators 1..4 (read by 1 too), read again by 5.
    for (const k of [1, 2, 3, 4]) expect(spec.operators[k]!.passthrough).toContain('res');
    expect(op5!.inputs.map((t) => t.name)).toEqual(['x', 'res', 'h8']);
    expect(op6!.outputs.map((t) => t.name)).toEqual(['probs']);
    expect(op6!.passthrough).toEqual(['y', 'early']);
    expect(spec.outputs.map((t) => t.name)).toEqual(['early', 'probs', 'y']);
    expect(spec.inputs).toEqual([
      { name: 'x', dataType: 'float32', shape: ['batch', 'seq', 8] },
      { name: 'y', dataType: 'float32', shape: ['batch', 8] },
    ]);
    // W2 is read by operators 1 and 5: copied into both, counted once.
    const inits = operatorModels.map((m) => m.graph!.initializer!.map((t) => t.name));
    expect(inits[1]).toContain('W2');
    expect(inits[5]).toContain('W2');
    expect(spec.params).toBe(8 * 8 * 3 + 8);
    expect(spec.operators.reduce((a, o) => a + o.params, 0)).toBe(spec.params);
    expect(op1!.params).toBe(64);
    expect(op5!.params).toBe(0);
    expect(op5!.paramBytes).toBe(64 * 4);
    expect(spec.opset).toBe(17);
    expect(operatorModels[0]!.opsetImport).toEqual(model.opsetImport);
    await check(input(built, model, built.operatorOfNode, SKIP_AXES, 16), feeds);
  });

  it('reproduces the outputs for every N from 1 to the node count (FLOP-balanced cuts)', async () => {
    for (let n = 1; n <= nodeCount; n++) {
      const assignment = await balancedAssignment(model, n, SKIP_AXES, { seqLen: 16 });
      expect(new Set(assignment).size).toBe(n);
      await check(input(built, model, assignment, SKIP_AXES, 16), feeds);
    }
  });

  it('carries only the relevant value_info into each sub-model and copies ir_version, producer and metadata', async () => {
    const withMeta = roundTrip({ ...model, docString: 'doc', metadataProps: [{ key: 'author', value: 'me' }] });
    const { operatorModels } = await partitionModel(input(built, withMeta, built.operatorOfNode, SKIP_AXES, 16));
    for (const m of operatorModels) {
      expect(Number(m.irVersion)).toBe(Number(model.irVersion));
      expect(m.producerName).toBe('abacus-ts');
      expect(m.docString).toBe('doc');
      expect(m.metadataProps.find((p) => p.key === 'author')?.value).toBe('me');
      const produced = new Set(m.graph!.node!.flatMap((n) => n.output ?? []));
      const outs = new Set(m.graph!.output!.map((o) => o.name));
      for (const v of m.graph!.valueInfo!) {
        expect(produced.has(v.name ?? '')).toBe(true);
        expect(outs.has(v.name)).toBe(false);
      }
    }
  });
});

describe('partitionModel on an inception-like CNN (branches that merge, BatchNorm, shortcut)', () => {
  const built = buildInceptionGraph();
  const model = built.model;
  const feeds = { img: randomTensor([2, 3, 12, 12], 'img') };

  it('reproduces the outputs for every N from 1 to the node count', async () => {
    const n = model.graph!.node!.length;
    for (let k = 1; k <= n; k++) {
      const assignment = await balancedAssignment(model, k, CNN_AXES);
      await check(input(built, model, assignment, CNN_AXES, 0), feeds);
    }
  });

  it('counts BatchNorm running stats as buffers, not parameters', async () => {
    const { spec } = await partitionModel(input(built, model, built.operatorOfNode, CNN_AXES, 0));
    const weights = 8 * 27 + 8 + 4 * 8 + 4 * 8 + 4 * 4 * 9 + 4 * 8 + 12 + 12 + 12 * 8 + 10 * 12 + 10;
    expect(spec.params).toBe(weights);
    expect(spec.operators[2]!.paramBytes).toBe((12 * 4 + 12 * 8) * 4);
  });
});

describe('partitionModel with an If node reading values from two earlier operators', () => {
  const built = buildIfGraph();
  it('passes the outer-scope values of the branches to the If operator and reproduces both branches', async () => {
    const { spec } = await partitionModel(input(built, built.model, built.operatorOfNode, CNN_AXES, 0));
    const ifOp = spec.operators[2]!;
    expect(ifOp.inputs.map((t) => t.name)).toEqual(['flag', 'a', 'b', 'c']);
    expect(spec.operators[1]!.passthrough).toEqual(['x', 'flag', 'a', 'b']);
    for (const flag of [0, 1]) {
      await check(input(built, built.model, built.operatorOfNode, CNN_AXES, 0), { x: randomTensor([3, 4], 'x'), flag: new ort.Tensor('bool', new Uint8Array([flag]), []) });
    }
    for (let n = 1; n <= built.model.graph!.node!.length; n++) {
      const assignment = await balancedAssignment(built.model, n, CNN_AXES);
      await check(input(built, built.model, assignment, CNN_AXES, 0), { x: randomTensor([3, 4], 'x2'), flag: new ort.Tensor('bool', new Uint8Array([1]), []) });
    }
  });
});

describe('partitionModel rejects bad assignments', () => {
  const built = buildSkipGraph({ withWeights: false });
  const base = (operatorOfNode: number[]): PartitionInput => input(built, built.model, operatorOfNode, SKIP_AXES, 16);
  const n = built.operatorOfNode.length;

  it('with a RangeError for a wrong length, a gap, a negative index or a backwards edge', async () => {
    await expect(partitionModel(base([0, 0]))).rejects.toThrow(RangeError);
    await expect(partitionModel(base(built.operatorOfNode.map((k) => (k >= 3 ? k + 1 : k))))).rejects.toThrow(/no node to operator 3/);
    await expect(partitionModel(base(built.operatorOfNode.map((k, i) => (i === 0 ? -1 : k))))).rejects.toThrow(RangeError);
    const backwards = [...built.operatorOfNode];
    backwards[0] = 1; // MatMul moves after the Relu that reads it, via the Add
    backwards[1] = 0;
    backwards[2] = 0;
    await expect(partitionModel(base(backwards))).rejects.toThrow(/not contiguous in a topological order/);
    await expect(partitionModel({ ...base([...built.operatorOfNode]), operatorNames: ['a'] })).rejects.toThrow(/operatorNames/);
    expect(n).toBeGreaterThan(3);
  });

  it('with an InvalidModelError when an operator produces nothing used later', async () => {
    const m = roundTrip(built.model);
    // A dead node (its output is unused) alone in the last-but-one operator.
    m.graph!.node!.splice(m.graph!.node!.length - 2, 0, { opType: 'Relu', input: ['x'], output: ['dead'], name: 'dead' });
    const assignment = [...built.operatorOfNode.slice(0, -2), 6, 7, 7];
    const err = await partitionModel(input(built, m, assignment, SKIP_AXES, 16)).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidModelError);
    expect(String(err)).toMatch(/operator 6 \('dead'.*produces no tensor/);
  });
});
