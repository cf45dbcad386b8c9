/**
 * FLOP conventions (2 FLOP per multiply-accumulate, fvcore/torchvision MACs × 2), per-sample
 * seq polynomials, shapes from annotations vs from onnxruntime, and the balanced split.
 * Golden values are computed by hand in the comments, or by brute force.
 */
import { describe, expect, it } from 'vitest';
import { GraphBuilder } from '../src/model/onnx/builder.ts';
import { nodeFlops } from '../src/model/onnx/flops.ts';
import { analyzeCosts, analyzeStructure } from '../src/model/onnx/analysis.ts';
import { balancedAssignment, nodeWeights, partitionModel, splitBalanced } from '../src/model/onnx/partition.ts';
import type { PartitionInput } from '../src/model/onnx/partition.ts';
import type { OnnxTypes } from '../src/model/onnx/proto.ts';
import { InvalidModelError } from '../src/errors.ts';
import { buildSkipGraph, roundTrip } from './onnx-fixtures.ts';

function flopsOf(opType: string, inputs: (number[] | undefined)[], outputs: number[][], attrs: OnnxTypes.IAttributeProto[] = [], domain = ''): number | undefined {
  const dims = new Map<string, number[]>();
  const inNames = inputs.map((d, i) => {
    if (!d) return '';
    dims.set(`i${i}`, d);
    return `i${i}`;
  });
  const outNames = outputs.map((d, i) => {
    dims.set(`o${i}`, d);
    return `o${i}`;
  });
  return nodeFlops({ opType, domain, input: inNames, output: outNames, attribute: attrs }, (n) => dims.get(n));
}

describe('nodeFlops', () => {
  it('counts contractions as 2 × multiply-accumulates, without bias', () => {
    // Conv 3→4, 3×3, 8×8 output: 2 · (4·8·8) · (3·3·3) = 13824
    expect(flopsOf('Conv', [[1, 3, 8, 8], [4, 3, 3, 3], [4]], [[1, 4, 8, 8]])).toBe(13824);
    // grouped conv (group 2): weight [4, 2, 3, 3]: 2 · 256 · 18 = 9216
    expect(flopsOf('Conv', [[1, 4, 8, 8], [4, 2, 3, 3]], [[1, 4, 8, 8]], [{ name: 'group', i: 2 }])).toBe(9216);
    // ConvTranspose X [1,2,4,4], W [2,3,3,3]: 2 · 32 · 27 = 1728
    expect(flopsOf('ConvTranspose', [[1, 2, 4, 4], [2, 3, 3, 3]], [[1, 3, 6, 6]])).toBe(1728);
    // Gemm [2,5]×[5,3]: 2 · 6 · 5 = 60; transA with A [5,2]: same
    expect(flopsOf('Gemm', [[2, 5], [5, 3], [3]], [[2, 3]])).toBe(60);
    expect(flopsOf('Gemm', [[5, 2], [5, 3]], [[2, 3]], [{ name: 'transA', i: 1 }])).toBe(60);
    // batched MatMul [2,3,4,5]×[5,6] → [2,3,4,6]: 2 · 144 · 5 = 1440
    expect(flopsOf('MatMul', [[2, 3, 4, 5], [5, 6]], [[2, 3, 4, 6]])).toBe(1440);
    // Einsum bij,bjk->bik with b=2,i=3,j=4,k=5: 2 · 2·3·4·5 = 240
    expect(flopsOf('Einsum', [[2, 3, 4], [2, 4, 5]], [[2, 3, 5]], [{ name: 'equation', s: new TextEncoder().encode('bij,bjk->bik') }])).toBe(240);
    // LSTM seq 7, batch 2, input 3, hidden 4, 1 direction: W [1,16,3], R [1,16,4]: 2·7·2·(48+64) = 3136
    expect(flopsOf('LSTM', [[7, 2, 3], [1, 16, 3], [1, 16, 4]], [[7, 1, 2, 4]])).toBe(3136);
  });

  it('counts a small documented number per element for elementwise, norm, pool and softmax ops', () => {
    expect(flopsOf('Relu', [[2, 10]], [[2, 10]])).toBe(20);
    expect(flopsOf('Add', [[2, 10], [10]], [[2, 10]])).toBe(20);
    expect(flopsOf('Sigmoid', [[2, 10]], [[2, 10]])).toBe(60);
    expect(flopsOf('Softmax', [[2, 10]], [[2, 10]])).toBe(100);
    expect(flopsOf('BatchNormalization', [[1, 4, 2, 2]], [[1, 4, 2, 2]])).toBe(32);
    expect(flopsOf('LayerNormalization', [[3, 8]], [[3, 8]])).toBe(120);
    expect(flopsOf('Sum', [[4], [4], [4]], [[4]])).toBe(8);
    // MaxPool 3×3 → output [1,4,8,8]: 256 · 9
    expect(flopsOf('MaxPool', [[1, 4, 8, 8]], [[1, 4, 8, 8]], [{ name: 'kernel_shape', ints: [3, 3] }])).toBe(2304);
    expect(flopsOf('GlobalAveragePool', [[1, 4, 8, 8]], [[1, 4, 1, 1]])).toBe(256);
    expect(flopsOf('ReduceMean', [[2, 5, 8]], [[2, 8]])).toBe(80);
  });

  it('counts 0 for shape-only ops and undefined for unknown ops, other domains or unknown shapes', () => {
    for (const op of ['Reshape', 'Transpose', 'Shape', 'Gather', 'Identity', 'Flatten', 'Concat', 'Slice', 'Unsqueeze', 'Constant', 'Cast']) {
      expect(flopsOf(op, [[2, 3]], [[3, 2]]), op).toBe(0);
    }
    expect(flopsOf('FancyOp', [[2, 3]], [[2, 3]])).toBeUndefined();
    expect(flopsOf('Relu', [[2, 3]], [[2, 3]], [], 'com.microsoft')).toBeUndefined();
    expect(flopsOf('If', [[1]], [[2, 3]])).toBeUndefined();
    expect(nodeFlops({ opType: 'MatMul', input: ['a', 'b'], output: ['c'] }, () => undefined)).toBeUndefined();
  });
});

/** VGG16 (torchvision layout, 224², no AdaptiveAvgPool since it is the identity at 224²). */
function buildVgg16(): { model: OnnxTypes.ModelProto; nonTrainable: ReadonlySet<string> } {
  const g = new GraphBuilder({ name: 'vgg16', seed: 1, withWeights: false });
  let x = g.input('img', 'float32', ['batch', 3, 224, 224]);
  let c = 3;
  let hw = 224;
  g.beginOperator('features');
  const cfg: (number | 'M')[] = [64, 64, 'M', 128, 128, 'M', 256, 256, 256, 'M', 512, 512, 512, 'M', 512, 512, 512, 'M'];
  cfg.forEach((v, i) => {
    if (v === 'M') {
      hw /= 2;
      [x] = g.node('MaxPool', [x], [['batch', c, hw, hw]], { attrs: { kernel_shape: { ints: [2, 2] }, strides: { ints: [2, 2] } } }) as [string];
      return;
    }
    const w = g.initializer(`f${i}.w`, [v, c, 3, 3], { kind: 'uniform', bound: 0.1 });
    const b = g.initializer(`f${i}.b`, [v], { kind: 'uniform', bound: 0.1 });
    [x] = g.node('Conv', [x, w, b], [['batch', v, hw, hw]], { attrs: { pads: { ints: [1, 1, 1, 1] } } }) as [string];
    [x] = g.node('Relu', [x], [['batch', v, hw, hw]]) as [string];
    c = v;
  });
  [x] = g.node('Flatten', [x], [['batch', 25088]]) as [string];
  const fc = (i: number, inF: number, outF: number, relu: boolean): void => {
    const w = g.initializer(`fc${i}.w`, [outF, inF], { kind: 'uniform', bound: 0.01 });
    const b = g.initializer(`fc${i}.b`, [outF], { kind: 'uniform', bound: 0.01 });
    [x] = g.node('Gemm', [x, w, b], [['batch', outF]], { attrs: { transB: { int: 1 } } }) as [string];
    if (relu) [x] = g.node('Relu', [x], [['batch', outF]]) as [string];
  };
  fc(0, 25088, 4096, true);
  fc(1, 4096, 4096, true);
  fc(2, 4096, 1000, false);
  g.output(x);
  const built = g.build();
  return { model: built.model, nonTrainable: built.nonTrainable };
}

describe('model totals', () => {
  it('vgg16 at 224²: ≈ 31 GFLOP (torchvision/fvcore 15.47 GMAC × 2) and 138,357,544 parameters', async () => {
    const { model, nonTrainable } = buildVgg16();
    const n = model.graph!.node!.length;
    const { spec } = await partitionModel({
      name: 'vgg16',
      model,
      operatorOfNode: new Array<number>(n).fill(0),
      nonTrainable,
      dynamicAxes: { batch: 'batch' },
      defaultSeqLen: 0,
      source: { kind: 'zoo', options: {} },
    });
    const gflops = spec.operators[0]!.gflops;
    expect(gflops.c1).toBe(0);
    expect(gflops.c2).toBe(0);
    expect(Math.abs(gflops.c0 - 2 * 15.47) / (2 * 15.47)).toBeLessThan(0.005);
    expect(spec.params).toBe(138_357_544);
    expect(spec.operators[0]!.paramBytes).toBe(138_357_544 * 4);
    expect(spec.operators[0]!.inputBytes).toEqual({ c0: 3 * 224 * 224 * 4, c1: 0, c2: 0 });
    expect(spec.operators[0]!.outputBytes).toEqual({ c0: 1000 * 4, c1: 0, c2: 0 });
  });

  it('fits per-sample costs as polynomials in seqLen (hand-counted for the skip graph)', async () => {
    const built = buildSkipGraph({ withWeights: false });
    const { spec } = await partitionModel({
      name: 'skipnet',
      model: built.model,
      operatorOfNode: built.operatorOfNode,
      nonTrainable: built.nonTrainable,
      dynamicAxes: { batch: 'batch', seq: 'seq' },
      defaultSeqLen: 16,
      source: { kind: 'zoo', options: {} },
    });
    // c2: attention scores MatMul 2·8·s², Softmax 5·s², context MatMul 2·8·s² = 37 s²
    // c1: four [s,8]×[8,8] MatMuls 4·128·s, eight 1-FLOP ops on [s,8] 8·8·s, Sigmoid 3·8·s = 600 s
    // c0: the final Softmax on [8] = 40
    const total = spec.operators.reduce((a, o) => ({ c0: a.c0 + o.gflops.c0, c1: a.c1 + o.gflops.c1, c2: a.c2 + o.gflops.c2 }), { c0: 0, c1: 0, c2: 0 });
    expect(total.c0 * 1e9).toBeCloseTo(40, 6);
    expect(total.c1 * 1e9).toBeCloseTo(600, 6);
    expect(total.c2 * 1e9).toBeCloseTo(37, 6);
    // operator 0 reads x [s, 8] float32 = 32·s bytes per sample; operator 1 reads y (32 B) and res (32·s B)
    expect(spec.operators[0]!.inputBytes).toEqual({ c0: 0, c1: 32, c2: 0 });
    expect(spec.operators[1]!.inputBytes.c0).toBeCloseTo(32, 9);
    expect(spec.operators[1]!.inputBytes.c1).toBeCloseTo(32, 9);
    expect(spec.operators[1]!.inputBytes.c2).toBeCloseTo(0, 9);
  });

  it('gets the same costs and interfaces from onnxruntime when value_info is missing', async () => {
    const built = buildSkipGraph();
    const stripped = roundTrip(built.model);
    stripped.graph!.valueInfo = [];
    const base: PartitionInput = {
      name: 'skipnet',
      model: built.model,
      operatorOfNode: built.operatorOfNode,
      nonTrainable: built.nonTrainable,
      dynamicAxes: { batch: 'batch', seq: 'seq' },
      defaultSeqLen: 16,
      source: { kind: 'zoo', options: {} },
    };
    const annotated = (await partitionModel(base)).spec;
    const probed = (await partitionModel({ ...base, model: stripped })).spec;
    expect(probed.operators.map((o) => [o.inputs, o.outputs, o.passthrough])).toEqual(annotated.operators.map((o) => [o.inputs, o.outputs, o.passthrough]));
    probed.operators.forEach((o, k) => {
      const a = annotated.operators[k]!;
      for (const key of ['gflops', 'inputBytes', 'outputBytes'] as const) {
        for (const c of ['c0', 'c1', 'c2'] as const) expect(o[key][c], `op ${k} ${key}.${c}`).toBeCloseTo(a[key][c], 9);
      }
    });
  });
});

describe('splitBalanced / balancedAssignment', () => {
  /** Minimum of Σ(run sum)² over all splits into `parts` non-empty runs (brute force). */
  function bruteForce(w: number[], parts: number): number {
    const n = w.length;
    let best = Infinity;
    const rec = (startAt: number, left: number, acc: number): void => {
      if (left === 1) {
        const s = w.slice(startAt).reduce((a, b) => a + b, 0);
        best = Math.min(best, acc + s * s);
        return;
      }
      let s = 0;
      for (let end = startAt + 1; end <= n - (left - 1); end++) {
        s += w[end - 1]!;
        rec(end, left - 1, acc + s * s);
      }
    };
    rec(0, parts, 0);
    return best;
  }
  const objective = (w: number[], assignment: number[]): number => {
    const sums = new Map<number, number>();
    assignment.forEach((k, i) => sums.set(k, (sums.get(k) ?? 0) + w[i]!));
    return [...sums.values()].reduce((a, s) => a + s * s, 0);
  };

  it('finds the minimum-variance contiguous split (checked against brute force)', () => {
    let seed = 12345;
    const rnd = (): number => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed / 2 ** 31;
    };
    for (let trial = 0; trial < 20; trial++) {
      const n = 4 + (trial % 8);
      const w = Array.from({ length: n }, () => (rnd() < 0.2 ? 0 : Math.floor(rnd() * 100)));
      for (let parts = 1; parts <= n; parts++) {
        const a = splitBalanced(w, parts);
        expect(a).toHaveLength(n);
        for (let i = 1; i < n; i++) expect(a[i]! - a[i - 1]!).toBeGreaterThanOrEqual(0);
        expect(new Set(a).size).toBe(parts);
        const opt = bruteForce(w, parts);
        expect(objective(w, a)).toBeLessThanOrEqual(opt * (1 + 1e-4) + 1e-9);
      }
    }
  });

  it('balances by node count when no FLOPs are known, and by FLOPs otherwise', async () => {
    const g = new GraphBuilder({ name: 'opaque', seed: 1, withWeights: false });
    let x = g.input('x', 'float32', ['batch', 16]);
    g.beginOperator('all');
    for (let i = 0; i < 12; i++) [x] = g.node('MysteryOp', [x], [['batch', 16]]) as [string];
    g.output(x);
    const opaque = g.build().model;
    const a = await balancedAssignment(opaque, 4, { batch: 'batch' });
    expect(a).toEqual([0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]);

    // One heavy MatMul (2·64·64 per sample) among cheap Relus: it gets an operator of its own.
    const h = new GraphBuilder({ name: 'heavy', seed: 1, withWeights: false });
    let y = h.input('y', 'float32', ['batch', 64]);
    h.beginOperator('all');
    for (let i = 0; i < 4; i++) [y] = h.node('Relu', [y], [['batch', 64]]) as [string];
    const w = h.initializer('w', [64, 64], { kind: 'uniform', bound: 1 });
    [y] = h.node('MatMul', [y, w], [['batch', 64]]) as [string];
    for (let i = 0; i < 4; i++) [y] = h.node('Relu', [y], [['batch', 64]]) as [string];
    h.output(y);
    const heavy = h.build().model;
    expect(await balancedAssignment(heavy, 3, { batch: 'batch' })).toEqual([0, 0, 0, 0, 1, 2, 2, 2, 2]);
  });

  it('balances a graph of only unknown ops by node count exactly, for every N (the node-count fallback)', async () => {
    const g = new GraphBuilder({ name: 'opaque10', seed: 1, withWeights: false });
    let x = g.input('x', 'float32', ['batch', 16]);
    g.beginOperator('all');
    for (let i = 0; i < 10; i++) [x] = g.node(i % 3 === 0 ? 'MysteryOp' : i % 3 === 1 ? 'Scan9' : 'Relu', [x], [['batch', 16]]) as [string];
    g.output(x);
    const model = g.build().model;
    // Relu in another domain has no FLOP rule either.
    for (const node of model.graph!.node!) if (node.opType === 'Relu') node.domain = 'com.example';
    model.opsetImport.push({ domain: 'com.example', version: 1 });
    const structure = analyzeStructure(model, 'opaque10');
    const costs = await analyzeCosts(structure, { batch: 'batch' }, 0);
    expect(costs.nodeFlops.every((f) => f === undefined)).toBe(true);
    expect(nodeWeights(costs, 0)).toEqual(new Array<number>(10).fill(1));
    for (let n = 1; n <= 10; n++) {
      const a = await balancedAssignment(model, n, { batch: 'batch' });
      const sizes = Array.from({ length: n }, (_, k) => a.filter((op) => op === k).length);
      expect(Math.max(...sizes) - Math.min(...sizes), `N=${n}: ${sizes.join(',')}`).toBeLessThanOrEqual(1);
      expect(sizes.reduce((p, q) => p + q, 0)).toBe(10);
    }
  });

  it('weighs an unknown node as one node at the mean FLOP of the known nonzero-FLOP nodes', async () => {
    const g = new GraphBuilder({ name: 'mixed', seed: 1, withWeights: false });
    const x = g.input('x', 'float32', ['batch', 16]);
    g.beginOperator('all');
    const [a] = g.node('Relu', [x], [['batch', 16]]); // 16 FLOP per sample
    const [b] = g.node('MysteryOp', [a!], [['batch', 16]]); // unknown
    const [c] = g.node('Sigmoid', [b!], [['batch', 16]]); // 3 · 16 = 48
    g.node('Identity', [c!], [['batch', 16]], { outputs: ['y'] }); // 0, not in the mean
    g.output('y');
    const model = g.build().model;
    const costs = await analyzeCosts(analyzeStructure(model, 'mixed'), { batch: 'batch' }, 0);
    expect(nodeWeights(costs, 0)).toEqual([16, 32, 48, 0]);
  });

  it('throws RangeError naming operators and the valid range, InvalidModelError for an unsorted model', async () => {
    const built = buildSkipGraph({ withWeights: false });
    const n = built.model.graph!.node!.length;
    for (const bad of [0, -1, n + 1, 2.5]) {
      const err = await balancedAssignment(built.model, bad, { batch: 'batch', seq: 'seq' }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(RangeError);
      expect(String(err)).toContain('operators');
      expect(String(err)).toContain(`[1, ${n}]`);
    }
    const unsorted = roundTrip(built.model);
    unsorted.graph!.node!.reverse();
    await expect(balancedAssignment(unsorted, 2, { batch: 'batch', seq: 'seq' })).rejects.toThrow(InvalidModelError);
  });
});
