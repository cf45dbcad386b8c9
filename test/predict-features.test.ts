/**
 * Feature encoding (`predict/features.ts`): golden vectors computed by hand for the tiny specs
 * of `predict-fixtures.ts`, the kind of compute of an operator, the canonical slot order
 * (permutation-invariant, by model rank and never by urgency), the O(1) prefix sums against a
 * per-operator reference, tied standardization, and the errors.
 */
import { describe, expect, it } from 'vitest';
import { fitScaling } from '../src/predict/encoded.ts';
import { FeatureEncoder, canonicalSlotOrder, computeKindOf, featureNames, segmentCosts } from '../src/predict/features.ts';
import type { OperatorSpec, TensorSpec } from '../src/model/spec.ts';
import type { GroupSlot } from '../src/predict/predictor.ts';
import { Rng } from '../src/rng.ts';
import { CNN, TINY_SPECS, TX, randomGroup } from './predict-fixtures.ts';

/** Relative tolerance of sums done in another order (prefix sums vs by hand): 1e-12. */
function expectClose(actual: ArrayLike<number>, expected: readonly number[]): void {
  expect(actual.length).toBe(expected.length);
  for (let i = 0; i < expected.length; i++) {
    const e = expected[i]!;
    expect(Math.abs(actual[i]! - e), `feature ${i}: ${actual[i]} vs ${e}`).toBeLessThanOrEqual(1e-12 * Math.max(1, Math.abs(e)));
  }
}

const full = (): FeatureEncoder => new FeatureEncoder({ featureSet: 'full', maxSlots: 3, trainedModels: ['tx', 'cnn'], specs: TINY_SPECS });
const encode = (enc: FeatureEncoder, group: readonly GroupSlot[]): Float64Array => {
  const out = new Float64Array(enc.width);
  enc.encode(group, out);
  return out;
};

// Group: the urgent query first (tx), as the controller builds it.
const TX_SLOT: GroupSlot = { model: 'tx', start: 0, end: 2, batch: 2, seqLen: 4 };
const CNN_SLOT: GroupSlot = { model: 'cnn', start: 1, end: 3, batch: 4, seqLen: 0 };

/*
 * By hand (cnn: op0, op1 spatial, op2 dense; tx: both dense — predict-fixtures.ts):
 * cnn [1,3) batch 4: GFLOP spatial 4·2 = 8, dense 4·0.5 = 2;
 *   bytes spatial 2000 + 4·(200 + 50) = 3000 → 0.003 MB, dense 500 + 4·(50 + 10) = 740
 *   → 0.00074 MB; kernels spatial 5, dense 2; 2 of 3 operators.
 * tx [0,2) batch 2 seq 4, all dense: GFLOP 2·((0.1·4 + 0.01·16) + (0.5 + 0.2·4)) = 2·(0.56 + 1.3)
 *   = 3.72; bytes 4000 + 1000 + 2·((8·4 + 64·4) + (64·4 + 40)) = 5000 + 2·(288 + 296) = 6168
 *   → 0.006168 MB; kernels 10 + 4 = 14; 2 of 2 operators.
 * full per slot: start, end, batch, seq_len, gflop_{spatial,dense}, mb_{…}, kernels_{…}.
 */
const CNN_FULL = [1, 3, 4, 0, 8, 2, 0.003, 0.00074, 5, 2];
const TX_FULL = [0, 2, 2, 4, 0, 3.72, 0, 0.006168, 0, 14];
const ZEROS = (n: number): number[] => new Array<number>(n).fill(0);

describe('feature names', () => {
  it('full: one count per trained model (by name), then 10 per slot; flop: 9 per slot', () => {
    expect(full().names).toEqual([
      'count_cnn',
      'count_tx',
      ...[0, 1, 2].flatMap((s) => ['start', 'end', 'batch', 'seq_len', 'gflop_spatial', 'gflop_dense', 'mb_spatial', 'mb_dense', 'kernels_spatial', 'kernels_dense'].map((f) => `${f}_${s}`)),
    ]);
    expect(featureNames('flop', ['a', 'b'], 2)).toEqual(
      [0, 1].flatMap((s) =>
        ['log1p_batch', 'seq_len', 'log1p_gflop_spatial', 'log1p_gflop_dense', 'log1p_mb_spatial', 'log1p_mb_dense', 'log1p_kernels_spatial', 'log1p_kernels_dense', 'op_fraction'].map((f) => `${f}_${s}`),
      ),
    );
  });

  it('tied columns: flop pairs each slot\'s spatial and dense column of a cost; full has none', () => {
    const enc = new FeatureEncoder({ featureSet: 'flop', maxSlots: 2, trainedModels: ['cnn', 'tx'], specs: TINY_SPECS });
    expect(enc.tiedColumns.map((g) => g.map((j) => enc.names[j]))).toEqual(
      [0, 1].flatMap((s) => ['gflop', 'mb', 'kernels'].map((c) => [`log1p_${c}_spatial_${s}`, `log1p_${c}_dense_${s}`])),
    );
    expect(full().tiedColumns).toEqual([]);
  });
});

describe('kind of compute', () => {
  const t = (dataType: TensorSpec['dataType'], ...shape: (number | string)[]): TensorSpec => ({ name: 'x', dataType, shape });
  const withOutputs = (outputs: TensorSpec[]): OperatorSpec => ({ ...CNN.operators[0]!, outputs });
  it('the fixtures: cnn op0, op1 spatial, op2 dense; tx all dense', () => {
    expect(CNN.operators.map((o) => computeKindOf(CNN, o))).toEqual(['spatial', 'spatial', 'dense']);
    expect(TX.operators.map((o) => computeKindOf(TX, o))).toEqual(['dense', 'dense']);
  });
  it('the largest output decides (elements at batch 1), not the first or any rank-4 one', () => {
    // [batch, 8, 2, 2]: 32 elements; [batch, 100]: 100 → dense; [batch, 8, 4, 4]: 128 → spatial
    expect(computeKindOf(CNN, withOutputs([t('float32', 'batch', 8, 2, 2), t('float32', 'batch', 100)]))).toBe('dense');
    expect(computeKindOf(CNN, withOutputs([t('float32', 'batch', 8, 4, 4), t('float32', 'batch', 100)]))).toBe('spatial');
  });
  it('no outputs: dense; an output whose size cannot be resolved counts as empty', () => {
    expect(computeKindOf(CNN, withOutputs([]))).toBe('dense');
    expect(computeKindOf(CNN, withOutputs([t('float32', 'batch', 'n', 4, 4), t('float32', 'batch', 3)]))).toBe('dense');
  });
});

describe('golden vectors (by hand)', () => {
  it('full: counts, then slots in canonical order (cnn before tx), empty slot zeros', () => {
    expectClose(encode(full(), [TX_SLOT, CNN_SLOT]), [1, 1, ...CNN_FULL, ...TX_FULL, ...ZEROS(10)]);
  });

  it('flop: ln(1 + x) of batch and of the costs per kind, seq_len, operator fraction; no model identity', () => {
    const enc = new FeatureEncoder({ featureSet: 'flop', maxSlots: 2, trainedModels: ['cnn', 'tx'], specs: TINY_SPECS });
    // the costs of CNN_FULL / TX_FULL above; ln(1 + 0) = 0 for tx's spatial costs
    const cnn = [Math.log1p(4), 0, Math.log1p(8), Math.log1p(2), Math.log1p(0.003), Math.log1p(0.00074), Math.log1p(5), Math.log1p(2), 2 / 3];
    const tx = [Math.log1p(2), 4, 0, Math.log1p(3.72), 0, Math.log1p(0.006168), 0, Math.log1p(14), 1];
    expectClose(encode(enc, [TX_SLOT, CNN_SLOT]), [...cnn, ...tx]);
  });

  it('seqLen 0 means the default sequence length (8): GFLOP per sample 0.8 + 0.64 + 0.5 + 1.6', () => {
    const v = encode(full(), [{ model: 'tx', start: 0, end: 2, batch: 1, seqLen: 0 }]);
    // bytes 5000 + (64 + 512) + (512 + 40) = 6128, all dense
    expectClose(v, [0, 1, 0, 2, 1, 8, 0, 3.54, 0, 0.006128, 0, 14, ...ZEROS(20)]);
  });

  it('the same model twice: counted twice, ordered by start then end', () => {
    const a: GroupSlot = { model: 'cnn', start: 0, end: 3, batch: 1, seqLen: 0 };
    const b: GroupSlot = { model: 'cnn', start: 0, end: 1, batch: 2, seqLen: 0 };
    // b [0,1) batch 2, spatial only: GFLOP 2·1 = 2; bytes 1000 + 2·300 = 1600; 3 kernels.
    // a [0,3) batch 1: spatial GFLOP 1 + 2 = 3, bytes 3000 + 300 + 250 = 3550, 3 + 5 = 8 kernels;
    //   dense GFLOP 0.5, bytes 500 + 60 = 560, 2 kernels.
    expectClose(encode(full(), [a, b]), [2, 0, 0, 1, 2, 0, 2, 0, 0.0016, 0, 3, 0, 0, 3, 1, 0, 3, 0.5, 0.00355, 0.00056, 8, 2, ...ZEROS(10)]);
  });
});

describe('canonical slot order', () => {
  it('every permutation of a group gives identical features', () => {
    const slots: GroupSlot[] = [TX_SLOT, CNN_SLOT, { model: 'cnn', start: 0, end: 2, batch: 1, seqLen: 0 }];
    const enc = full();
    const reference = encode(enc, slots);
    const perms = [
      [0, 1, 2],
      [0, 2, 1],
      [1, 0, 2],
      [1, 2, 0],
      [2, 0, 1],
      [2, 1, 0],
    ];
    for (const p of perms) expect(Array.from(encode(enc, p.map((i) => slots[i]!)))).toEqual(Array.from(reference));
  });

  it('orders by model rank (sorted trained models), not by position/urgency', () => {
    const enc = full();
    expect(enc.canonical([TX_SLOT, CNN_SLOT])).toEqual([CNN_SLOT, TX_SLOT]);
    expect(enc.canonical([CNN_SLOT, TX_SLOT])).toEqual([CNN_SLOT, TX_SLOT]);
    // the rank is the name order of the trained models, whatever order they were given in
    expect(enc.rankOf('cnn')).toBe(0);
    expect(enc.rankOf('tx')).toBe(1);
    expect(enc.rankOf('nope')).toBe(-1);
  });

  it('unseen models (flop) rank after every trained model, by name', () => {
    const enc = new FeatureEncoder({ featureSet: 'flop', maxSlots: 2, trainedModels: ['tx'], specs: TINY_SPECS });
    expect(enc.unseenModels).toEqual(['cnn']);
    expect(enc.rankOf('tx')).toBe(0);
    expect(enc.rankOf('cnn')).toBe(1);
    expect(enc.canonical([CNN_SLOT, TX_SLOT])).toEqual([TX_SLOT, CNN_SLOT]);
  });

  it('canonicalSlotOrder is a stable sort by (rank, start, end, batch, seqLen)', () => {
    const g: GroupSlot[] = [
      { model: 'x', start: 1, end: 2, batch: 1, seqLen: 0 },
      { model: 'x', start: 0, end: 2, batch: 4, seqLen: 0 },
      { model: 'x', start: 0, end: 2, batch: 2, seqLen: 9 },
      { model: 'x', start: 0, end: 2, batch: 2, seqLen: 3 },
      { model: 'y', start: 0, end: 1, batch: 1, seqLen: 0 },
    ];
    expect(Array.from(canonicalSlotOrder(g, [1, 1, 1, 1, 0]))).toEqual([4, 3, 2, 1, 0]);
  });
});

describe('prefix sums', () => {
  it('match the per-operator sums (segmentCosts) on random segments', () => {
    const enc = new FeatureEncoder({ featureSet: 'full', maxSlots: 1, trainedModels: ['cnn', 'tx'], specs: TINY_SPECS });
    const rng = new Rng(3);
    const out = new Float64Array(enc.width);
    for (let i = 0; i < 200; i++) {
      const [slot] = randomGroup(rng, [CNN, TX], 1);
      enc.encode([slot!], out);
      const c = segmentCosts(slot!.model === 'cnn' ? CNN : TX, slot!.start, slot!.end, slot!.batch, slot!.seqLen);
      expectClose(out.subarray(6, 12), [c.gflopSpatial, c.gflopDense, c.mbSpatial, c.mbDense, c.kernelsSpatial, c.kernelsDense]);
      expectClose([c.gflopSpatial + c.gflopDense, c.mbSpatial + c.mbDense, c.kernelsSpatial + c.kernelsDense], [c.gflop, c.mb, c.kernels]);
    }
  });
});

describe('tied standardization (fitScaling)', () => {
  it('tied columns share the pooled mean and std; the others keep their own', () => {
    // rows (a, b, c): (1, 0, 5), (3, 0, 7), (5, 4, 9); a and b tied.
    // pooled a ∪ b = {1, 3, 5, 0, 0, 4}: mean 13/6, second moment (1 + 9 + 25 + 16)/6 = 51/6,
    // variance 51/6 − 169/36 = 137/36; c: mean 7, variance 8/3.
    const x = [1, 0, 5, 3, 0, 7, 5, 4, 9];
    const s = fitScaling(x, 3, undefined, [[0, 1]]);
    expectClose(s.mean, [13 / 6, 13 / 6, 7]);
    expectClose(s.std, [Math.sqrt(137 / 36), Math.sqrt(137 / 36), Math.sqrt(8 / 3)]);
    // untied: a has its own (mean 3, variance 8/3), b (mean 4/3, variance 32/9)
    const u = fitScaling(x, 3);
    expectClose(u.mean, [3, 4 / 3, 7]);
    expectClose(u.std, [Math.sqrt(8 / 3), Math.sqrt(32 / 9), Math.sqrt(8 / 3)]);
    expect(() => fitScaling(x, 3, undefined, [[0, 3]])).toThrow(/tied column 3 is outside 0\.\.2/);
  });
});

describe('errors name the group and the slot', () => {
  const enc = new FeatureEncoder({ featureSet: 'full', maxSlots: 2, trainedModels: ['cnn', 'tx'], specs: TINY_SPECS });
  const out = new Float64Array(enc.width);
  const bad = (group: GroupSlot[], re: RegExp): void => {
    expect(() => enc.encode(group, out, 0, 7)).toThrow(re);
    expect(() => enc.encode(group, out, 0, 7)).toThrow(RangeError);
  };
  it.each([
    [[], /group 7 has 0 slots; a group has 1\.\.2/],
    [[CNN_SLOT, CNN_SLOT, CNN_SLOT], /group 7 has 3 slots/],
    [[CNN_SLOT, { ...CNN_SLOT, model: 'vgg' }], /group 7 slot 1: model 'vgg' is not known.*cnn, tx/],
    [[{ ...CNN_SLOT, end: 4 }], /group 7 slot 0 \(cnn\): segment \[1, 4\) must satisfy 0 ≤ start < end ≤ 3/],
    [[{ ...CNN_SLOT, start: 2, end: 2 }], /segment \[2, 2\)/],
    [[{ ...CNN_SLOT, start: -1 }], /segment \[-1, 3\)/],
    [[{ ...CNN_SLOT, batch: 0 }], /group 7 slot 0 \(cnn\): batch 0 must be an integer ≥ 1/],
    [[{ ...TX_SLOT, seqLen: -1 }], /seqLen -1 must be an integer ≥ 0/],
  ] as [GroupSlot[], RegExp][])('%j', (group, re) => bad(group, re));

  it("'full' cannot encode a model it was not trained on: retrain with --features flop", () => {
    expect(() => new FeatureEncoder({ featureSet: 'full', maxSlots: 2, trainedModels: ['tx'], specs: TINY_SPECS })).toThrow(/'cnn'.*--features flop/);
  });
});
