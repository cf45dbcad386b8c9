/**
 * Valid inputs (docs/import.md): domains implied by the graph (a Gather's table size bounds its
 * indices: the zoo's BERT gets its vocabulary), declared in the serving config (`inputs`),
 * applied to a spec, and used by the synthetic (warm-up / profiling) tensors.
 */
import { describe, expect, it } from 'vitest';
import { resolvedBoundary } from '../src/model/boundary.ts';
import { describeDomain, inDomain, withInputDomains } from '../src/model/input-domain.ts';
import { GraphBuilder } from '../src/model/onnx/builder.ts';
import { partitionModel } from '../src/model/onnx/partition.ts';
import { ModelRepository } from '../src/model/repository.ts';
import { syntheticTensor } from '../src/model/synthetic.ts';
import { parseServingConfig } from '../src/runtime/config.ts';
import { SMALL_VARIANTS } from './helpers/small-variants.ts';

/** idx int64 [batch] → Cast → Gather(table [10, 4]) ; scale float [batch, 1]; out = gathered · scale. */
async function gatherSpec() {
  const g = new GraphBuilder({ name: 'lookup', seed: 1 });
  const idx = g.input('idx', 'int64', ['batch']);
  const scale = g.input('scale', 'float32', ['batch', 1]);
  const table = g.initializer('table', [10, 4], { kind: 'uniform', bound: 1 });
  g.beginOperator('gather');
  const [i32] = g.node('Cast', [idx], [['batch']], { attrs: { to: { int: 6 } }, dataType: 'int32' });
  const [rows] = g.node('Gather', [table, i32!], [['batch', 4]]);
  g.beginOperator('scale');
  g.node('Mul', [rows!, scale], [['batch', 4]], { outputs: ['out'] });
  g.output('out');
  const built = g.build();
  return (await partitionModel({ name: 'lookup', model: built.model, operatorOfNode: built.operatorOfNode, dynamicAxes: { batch: 'batch' }, defaultSeqLen: 0, source: { kind: 'zoo', options: {} } })).spec;
}

describe('input domains', () => {
  it('a Gather over a table of 10 rows (through a Cast) bounds its indices to [0, 9]; a float input has none', async () => {
    const spec = await gatherSpec();
    expect(spec.inputs.find((t) => t.name === 'idx')!.domain).toEqual({ range: [0, 9] });
    expect(spec.inputs.find((t) => t.name === 'scale')!.domain).toBeUndefined();
    expect(spec.operators[0]!.inputs.find((t) => t.name === 'idx')!.domain).toEqual({ range: [0, 9] });
  });

  it("the zoo's BERT gets its vocabulary as the range of input_ids", async () => {
    const repo = new ModelRepository({ cacheDir: '/nonexistent-abacus-cache' });
    const spec = await repo.zooSpec('bert', SMALL_VARIANTS.bert);
    expect(spec.inputs.find((t) => t.name === 'input_ids')!.domain).toEqual({ range: [0, SMALL_VARIANTS.bert.vocabSize! - 1] });
    expect(spec.inputs.find((t) => t.name === 'attention_mask')!.domain).toBeUndefined();
  });

  it('synthetic tensors draw from the domain: every value of a range, only the listed values', async () => {
    const spec = withInputDomains(await gatherSpec(), { scale: { values: [2, 0.5] } });
    const boundary = resolvedBoundary(spec, 0, 4000, 0);
    const idx = syntheticTensor(boundary.find((t) => t.name === 'idx')!, 3).data as BigInt64Array;
    const seen = new Set([...idx].map(Number));
    expect([...seen].sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    const scale = syntheticTensor(boundary.find((t) => t.name === 'scale')!, 3).data as Float32Array;
    expect(new Set(scale)).toEqual(new Set([2, 0.5]));
  });

  it('withInputDomains refuses an unknown input or a domain that does not fit the type, naming the input', async () => {
    const spec = await gatherSpec();
    expect(() => withInputDomains(spec, { nope: { values: [1] } })).toThrow(/'nope' is not an input of model lookup \(its inputs: idx, scale\)/);
    expect(() => withInputDomains(spec, { idx: { range: [0, 2.5] } })).toThrow(/input 'idx': input 'idx' is int64: values and range bounds must be integers/);
    expect(() => withInputDomains(spec, { idx: { range: [5, 1] } })).toThrow(/range \[5, 1\] is empty/);
    const declared = withInputDomains(spec, { idx: { values: [3] } });
    expect(declared.inputs[0]!.domain).toEqual({ values: [3] });
    expect(inDomain({ range: [0, 9] }, 9)).toBe(true);
    expect(inDomain({ range: [0, 9] }, 10)).toBe(false);
    expect(inDomain({ values: [16000] }, 8000)).toBe(false);
    expect(describeDomain({ values: [8000, 16000] })).toBe('one of 8000, 16000');
  });

  it('the serving config takes inputs: { NAME: { values } | { range } } and names a bad one', () => {
    const c = parseServingConfig({ device: 'ort', services: [{ model: 'm', qosTargetMs: 5, inputs: { sr: { values: [16000] }, input_ids: { range: [0, 30521] } } }] }, 'c.yaml');
    expect(c.services[0]!.inputs).toEqual({ sr: { values: [16000] }, input_ids: { range: [0, 30521] } });
    expect(() => parseServingConfig({ device: 'ort', services: [{ model: 'm', qosTargetMs: 5, inputs: { sr: { value: 3 } } }] }, 'c.yaml')).toThrow(/c\.yaml: services\[0\]\.inputs\.sr/);
    expect(() => parseServingConfig({ device: 'ort', services: [{ model: 'm', qosTargetMs: 5, inputs: { sr: { range: [3, 1] } } }] }, 'c.yaml')).toThrow(/services\[0\]\.inputs\.sr.*lo ≤ hi/);
  });
});
