/**
 * Pure helpers of device/ort: boundaries (which tensors are live before operator k and their
 * shapes) and seeded synthetic tensors. Golden values are written out by hand from the
 * fixture graphs (module docs of fixtures/tiny-models.ts), not read from the partitioner.
 */
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { boundarySpecs, resolvedBoundary, resolveShape } from '../src/model/boundary.ts';
import { MASK_NAME, SYNTHETIC_MAX_ID, syntheticTensor } from '../src/model/synthetic.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import { randomInputs } from './device/conformance.ts';
import { BadRequestError } from '../src/errors.ts';
import type { ModelArtifact } from '../src/model/artifact.ts';
import { buildSkipNet, buildTinyBert, makeFixtureDir } from './fixtures/tiny-models.ts';

describe('device/ort boundaries', () => {
  let fixtures: { dir: string; cleanup: () => Promise<void> };
  let skip: ModelArtifact;
  let bert: ModelArtifact;
  beforeAll(async () => {
    fixtures = await makeFixtureDir();
    skip = await buildSkipNet(path.join(fixtures.dir, 'skip'));
    bert = await buildTinyBert(path.join(fixtures.dir, 'bert'));
  });
  afterAll(async () => {
    await fixtures?.cleanup();
  });

  it('boundary k = inputs(k) ∪ passthrough(k): the skip tensor is live before operators 1..3', () => {
    const names = (k: number): string[] => boundarySpecs(skip.spec, k).map((t) => t.name);
    expect(names(0)).toEqual(['x']);
    expect(names(1)).toEqual(['a']);
    expect(names(2)).toEqual(['b', 'a']);
    expect(names(3).sort()).toEqual(['a', 'c']); // the head reads both (order is the partitioner's)
    expect(() => boundarySpecs(skip.spec, 4)).toThrow(RangeError);
  });

  it('shapes substitute batch and seq (seqLen 0 → the model default)', () => {
    expect(resolvedBoundary(skip.spec, 2, 3, 0).map((t) => t.dims)).toEqual([
      [3, 8, 8, 8],
      [3, 8, 8, 8],
    ]);
    expect(resolvedBoundary(bert.spec, 0, 2, 5)[0]).toEqual({ name: 'input_ids', dataType: 'int64', dims: [2, 5], domain: { range: [0, 99] } }); // the vocabulary its embedding table implies
    expect(resolvedBoundary(bert.spec, 1, 2, 0)[0]!.dims).toEqual([2, bert.spec.defaultSeqLen, 16]);
  });

  it('an unknown symbolic dim cannot be synthesized: BadRequestError naming tensor and dim', () => {
    const t = { name: 'mask', dataType: 'float32' as const, shape: ['batch', 'heads'] };
    expect(() => resolveShape(skip.spec, t, 1, 0)).toThrow(BadRequestError);
    expect(() => resolveShape(skip.spec, t, 1, 0)).toThrow(/'mask' dim 1 is symbolic 'heads'/);
  });
});

describe('device/ort synthetic tensors', () => {
  it('int64 ids lie in [0, 100) and use the whole range', () => {
    const t = syntheticTensor({ name: 'input_ids', dataType: 'int64', dims: [4, 256] }, 1);
    const ids = [...(t.data as BigInt64Array)].map(Number);
    expect(ids).toHaveLength(1024);
    expect(Math.min(...ids)).toBe(0);
    expect(Math.max(...ids)).toBe(SYNTHETIC_MAX_ID - 1);
  });

  it('inputs named like a mask (/mask/i) are all ones, whatever the dtype; other names are not', () => {
    const ones = (name: string, dataType: 'int64' | 'int32' | 'float32' | 'float16' | 'bool'): number[] =>
      [...syntheticTensor({ name, dataType, dims: [2, 64] }, 5).data].map(Number);
    expect(MASK_NAME.test('attention_mask')).toBe(true);
    expect(ones('attention_mask', 'int64').every((v) => v === 1)).toBe(true);
    expect(ones('Attention_Mask', 'int32').every((v) => v === 1)).toBe(true);
    expect(ones('padding_mask', 'bool').every((v) => v === 1)).toBe(true);
    expect(ones('mask.extended_3', 'float32').every((v) => v === 1)).toBe(true);
    expect(ones('attention_mask', 'float16').every((v) => v === 0x3c00)).toBe(true); // 1.0 in IEEE half
    const ids = ones('input_ids', 'int64');
    expect(new Set(ids).size).toBeGreaterThan(10); // ids stay random in [0, 100)
  });

  it('BERT-like inputs for the conformance suite: ids random, attention_mask all ones', () => {
    const ids = { name: 'input_ids', dataType: 'int64', shape: ['batch', 'seq'] } as const;
    const mask = { name: 'attention_mask', dataType: 'int64', shape: ['batch', 'seq'] } as const;
    const zero = { c0: 0, c1: 0, c2: 0 };
    const out = { name: 'hidden', dataType: 'float32', shape: ['batch', 'seq', 4] } as const;
    const spec: ModelSpec = {
      name: 'bert-like',
      source: { kind: 'zoo', options: {} },
      inputs: [ids, mask],
      outputs: [out],
      dynamicAxes: { batch: 'batch', seq: 'seq' },
      defaultSeqLen: 16,
      operators: [{ index: 0, name: 'op0', inputs: [ids, mask], outputs: [out], passthrough: [], nodeCount: 1, params: 0, paramBytes: 0, gflops: zero, inputBytes: zero, outputBytes: zero }],
      params: 0,
      opset: 17,
    };
    const t = randomInputs(spec, 2, 8, 1);
    expect(t['attention_mask']!.dims).toEqual([2, 8]);
    expect([...(t['attention_mask']!.data as BigInt64Array)].every((v) => v === 1n)).toBe(true);
    expect(new Set(t['input_ids']!.data as BigInt64Array).size).toBeGreaterThan(1);
  });

  it('floats lie in [-1, 1) with mean ≈ 0 (|mean| < 0.02 over 65536 samples, 5σ ≈ 0.011)', () => {
    const t = syntheticTensor({ name: 'x', dataType: 'float32', dims: [1, 1, 256, 256] }, 3);
    const d = t.data as Float32Array;
    let sum = 0;
    for (const v of d) {
      expect(v).toBeGreaterThanOrEqual(-1);
      expect(v).toBeLessThan(1);
      sum += v;
    }
    expect(Math.abs(sum / d.length)).toBeLessThan(0.02);
  });

  it('depends only on (seed, name): same pair → same values, other seed or name → different', () => {
    const spec = { name: 'x', dataType: 'float32' as const, dims: [64] };
    const a = syntheticTensor(spec, 7).data;
    expect(syntheticTensor(spec, 7).data).toEqual(a);
    expect(syntheticTensor(spec, 8).data).not.toEqual(a);
    expect(syntheticTensor({ ...spec, name: 'y' }, 7).data).not.toEqual(a);
  });

  it('covers every served dtype with the right typed array', () => {
    const kinds = { float32: Float32Array, float64: Float64Array, float16: Uint16Array, int64: BigInt64Array, int32: Int32Array, uint8: Uint8Array, int8: Int8Array, bool: Uint8Array } as const;
    for (const [dataType, ctor] of Object.entries(kinds)) {
      const t = syntheticTensor({ name: 't', dataType: dataType as keyof typeof kinds, dims: [2, 3] }, 1);
      expect(t.data).toBeInstanceOf(ctor);
      expect(t.data.length).toBe(6);
    }
    const half = syntheticTensor({ name: 'h', dataType: 'float16', dims: [1000] }, 1).data as Uint16Array;
    // |x| < 1 in half precision: exponent field ≤ 14 (0x3bff is the largest value below 1.0).
    for (const bits of half) expect(bits & 0x7fff).toBeLessThanOrEqual(0x3bff);
  });
});
