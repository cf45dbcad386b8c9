/**
 * Fixtures of the predictor tests: two tiny hand-written specs whose segment costs are easy to
 * compute by hand, random groups over them, and rows whose latency is a known formula.
 */
import type { ModelSpec, OperatorSpec, PerSampleCost, TensorSpec } from '../src/model/spec.ts';
import type { GroupSlot } from '../src/predict/predictor.ts';
import type { ProfileRow } from '../src/profile/dataset.ts';
import { segmentCosts } from '../src/predict/features.ts';
import { Rng } from '../src/rng.ts';

const cost = (c0: number, c1 = 0, c2 = 0): PerSampleCost => ({ c0, c1, c2 });

/** An output tensor of an operator: only its rank matters to the features (the kind of compute). */
const out = (index: number, dataType: TensorSpec['dataType'], ...shape: (number | string)[]): TensorSpec => ({ name: `t${index}`, dataType, shape });

function op(index: number, o: { gflops: PerSampleCost; inputBytes: PerSampleCost; outputBytes: PerSampleCost; paramBytes: number; nodeCount: number; outputs: TensorSpec[] }): OperatorSpec {
  return { index, name: `op${index}`, inputs: [], passthrough: [], params: o.paramBytes / 4, ...o };
}

function spec(name: string, operators: OperatorSpec[], seq: boolean, defaultSeqLen: number): ModelSpec {
  return {
    name,
    source: { kind: 'zoo', options: {} },
    inputs: [],
    outputs: [],
    dynamicAxes: seq ? { batch: 'batch', seq: 'seq' } : { batch: 'batch' },
    defaultSeqLen,
    operators,
    params: operators.reduce((a, o) => a + o.params, 0),
    opset: 17,
  };
}

/**
 * `cnn`: 3 operators, no sequence axis; op0 and op1 are spatial (rank-4 output), op2 a dense
 * classifier (rank-2 output).
 *   op0: 1 GFLOP, in 100 B, out 200 B [batch, 2, 5, 5] f32, params 1000 B, 3 nodes   spatial
 *   op1: 2 GFLOP, in 200 B, out  50 B [batch, 1, 5, 5] f16, params 2000 B, 5 nodes   spatial
 *   op2: 0.5 GFLOP, in 50 B, out 10 B [batch, 5] f16,       params  500 B, 2 nodes   dense
 *   (costs per sample)
 */
export const CNN: ModelSpec = spec(
  'cnn',
  [
    op(0, { gflops: cost(1), inputBytes: cost(100), outputBytes: cost(200), paramBytes: 1000, nodeCount: 3, outputs: [out(0, 'float32', 'batch', 2, 5, 5)] }),
    op(1, { gflops: cost(2), inputBytes: cost(200), outputBytes: cost(50), paramBytes: 2000, nodeCount: 5, outputs: [out(1, 'float16', 'batch', 1, 5, 5)] }),
    op(2, { gflops: cost(0.5), inputBytes: cost(50), outputBytes: cost(10), paramBytes: 500, nodeCount: 2, outputs: [out(2, 'float16', 'batch', 5)] }),
  ],
  false,
  0,
);

/**
 * `tx`: 2 operators with a sequence axis, default seq 8; both dense (rank-3 and rank-2 outputs).
 *   op0: GFLOP 0.1·s + 0.01·s², in 8·s B, out 64·s B [batch, seq, 16] f32, params 4000 B, 10 nodes
 *   op1: GFLOP 0.5 + 0.2·s,     in 64·s B, out 40 B [batch, 10] f32,     params 1000 B,  4 nodes
 */
export const TX: ModelSpec = spec(
  'tx',
  [
    op(0, { gflops: cost(0, 0.1, 0.01), inputBytes: cost(0, 8), outputBytes: cost(0, 64), paramBytes: 4000, nodeCount: 10, outputs: [out(0, 'float32', 'batch', 'seq', 16)] }),
    op(1, { gflops: cost(0.5, 0.2), inputBytes: cost(0, 64), outputBytes: cost(40), paramBytes: 1000, nodeCount: 4, outputs: [out(1, 'float32', 'batch', 10)] }),
  ],
  true,
  8,
);

export const TINY_SPECS: ReadonlyMap<string, ModelSpec> = new Map([
  ['cnn', CNN],
  ['tx', TX],
]);

/** A random group of 1..maxSlots slots over `specs`. */
export function randomGroup(rng: Rng, specs: readonly ModelSpec[], maxSlots: number): GroupSlot[] {
  const n = 1 + (rng.nextUint32() % maxSlots);
  return Array.from({ length: n }, () => {
    const s = specs[rng.nextUint32() % specs.length]!;
    const ops = s.operators.length;
    const start = rng.nextUint32() % ops;
    const end = start + 1 + (rng.nextUint32() % (ops - start));
    const batch = [1, 2, 4, 8][rng.nextUint32() % 4]!;
    const seqLen = s.dynamicAxes.seq === undefined ? 0 : [4, 8, 16][rng.nextUint32() % 3]!;
    return { model: s.name, start, end, batch, seqLen };
  });
}

/**
 * A smooth, non-linear latency (ms) of a group: per-slot time 0.2 + 0.3·GFLOP + 0.02·kernels,
 * the group taking the longest slot plus 40% of the others (partial overlap).
 */
export function formulaLatencyMs(slots: readonly GroupSlot[], specs: ReadonlyMap<string, ModelSpec>): number {
  const times = slots.map((s) => {
    const c = segmentCosts(specs.get(s.model)!, s.start, s.end, s.batch, s.seqLen);
    return 0.2 + 0.3 * c.gflop + 0.02 * c.kernels;
  });
  const max = Math.max(...times);
  return max + 0.4 * (times.reduce((a, b) => a + b, 0) - max);
}

/** `n` profile rows over the tiny specs with `latency(slots)` as the median. */
export function formulaRows(n: number, seed: number, maxSlots = 2, latency: (slots: readonly GroupSlot[]) => number = (s) => formulaLatencyMs(s, TINY_SPECS), device = 'sim:a100'): ProfileRow[] {
  const rng = new Rng(seed);
  return Array.from({ length: n }, (_, i) => {
    const slots = randomGroup(rng, [CNN, TX], maxSlots);
    const ms = latency(slots);
    return { sample: i, device, slots, medianMs: ms, meanMs: ms, stdMs: 0, runs: 1 };
  });
}
