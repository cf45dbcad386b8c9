/**
 * Feature encoding (`predict/features.ts`): golden vectors computed by hand for the tiny specs
 * of `predict-fixtures.ts`, the canonical slot order (permutation-invariant, by model rank and
 * never by urgency), the O(1) prefix sums against a per-operator reference, and the errors.
 */
import { describe, expect, it } from 'vitest';
import { FeatureEncoder, canonicalSlotOrder, featureNames, segmentCosts } from '../src/predict/features.ts';
import type { GroupSlot } from '../src/predict/predictor.ts';
import { Rng } from '../src/device/sim/rng.ts';
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
 * By hand:
 * cnn [1,3) batch 4: GFLOP 4·(2 + 0.5) = 10; bytes 2000 + 500 + 4·((200+50) + (50+10)) = 3740
 *   → 0.00374 MB; kernels 5 + 2 = 7; 2 of 3 operators.
 * tx [0,2) batch 2 seq 4: GFLOP 2·((0.1·4 + 0.01·16) + (0.5 + 0.2·4)) = 2·(0.56 + 1.3) = 3.72;
 *   bytes 4000 + 1000 + 2·((8·4 + 64·4) + (64·4 + 40)) = 5000 + 2·(288 + 296) = 6168
 *   → 0.006168 MB; kernels 10 + 4 = 14; 2 of 2 operators.
 */
const CNN_FULL = [1, 3, 4, 0, 10, 0.00374, 7];
const TX_FULL = [0, 2, 2, 4, 3.72, 0.006168, 14];

describe('feature names', () => {
  it('full: one count per trained model (by name), then 7 per slot; flop: 6 per slot', () => {
    expect(full().names).toEqual([
      'count_cnn',
      'count_tx',
      ...[0, 1, 2].flatMap((s) => ['start', 'end', 'batch', 'seq_len', 'gflop', 'mb', 'kernels'].map((f) => `${f}_${s}`)),
    ]);
    expect(featureNames('flop', ['a', 'b'], 2)).toEqual(['batch_0', 'seq_len_0', 'gflop_0', 'mb_0', 'kernels_0', 'op_fraction_0', 'batch_1', 'seq_len_1', 'gflop_1', 'mb_1', 'kernels_1', 'op_fraction_1']);
  });
});

describe('golden vectors (by hand)', () => {
  it('full: counts, then slots in canonical order (cnn before tx), empty slot zeros', () => {
    expectClose(encode(full(), [TX_SLOT, CNN_SLOT]), [1, 1, ...CNN_FULL, ...TX_FULL, 0, 0, 0, 0, 0, 0, 0]);
  });

  it('flop: batch, seq_len, gflop, mb, kernels, operator fraction; no model identity', () => {
    const enc = new FeatureEncoder({ featureSet: 'flop', maxSlots: 2, trainedModels: ['cnn', 'tx'], specs: TINY_SPECS });
    expectClose(encode(enc, [TX_SLOT, CNN_SLOT]), [4, 0, 10, 0.00374, 7, 2 / 3, 2, 4, 3.72, 0.006168, 14, 1]);
  });

  it('seqLen 0 means the default sequence length (8): GFLOP per sample 0.8 + 0.64 + 0.5 + 1.6', () => {
    const v = encode(full(), [{ model: 'tx', start: 0, end: 2, batch: 1, seqLen: 0 }]);
    // bytes 5000 + (64 + 512) + (512 + 40) = 6128
    expectClose(v, [0, 1, 0, 2, 1, 8, 3.54, 0.006128, 14, ...new Array<number>(14).fill(0)]);
  });

  it('the same model twice: counted twice, ordered by start then end', () => {
    const a: GroupSlot = { model: 'cnn', start: 0, end: 3, batch: 1, seqLen: 0 };
    const b: GroupSlot = { model: 'cnn', start: 0, end: 1, batch: 2, seqLen: 0 };
    // b: GFLOP 2·1 = 2; bytes 1000 + 2·300 = 1600; 3 kernels. a: GFLOP 3.5; bytes 3500 + 610 = 4110; 10 kernels.
    expectClose(encode(full(), [a, b]), [2, 0, 0, 1, 2, 0, 2, 0.0016, 3, 0, 3, 1, 0, 3.5, 0.00411, 10, 0, 0, 0, 0, 0, 0, 0]);
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
      expectClose(out.subarray(6, 9), [c.gflop, c.mb, c.kernels]);
    }
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
