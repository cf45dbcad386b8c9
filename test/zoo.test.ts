/**
 * Model zoo: architecture (parameter counts, MACs, node counts vs. torchvision / Hugging Face),
 * operator partition, options validation, and real execution of small variants in
 * onnxruntime-node (every annotated shape is compared with what ORT computes).
 */
import { describe, expect, it } from 'vitest';
import * as ort from 'onnxruntime-node';
import { onnx, type OnnxTypes } from '../src/model/onnx/proto.ts';
import {
  buildZooModel,
  isZooModelName,
  parseZooOptions,
  zooOperatorCount,
  ZOO_MODEL_NAMES,
  type ZooBuild,
  type ZooModelName,
  type ZooOptions,
} from '../src/model/zoo/index.ts';
import { adaptivePoolMatrix } from '../src/model/zoo/vgg.ts';

/** Published counts. torchvision: `sum(p.numel() for p in model.parameters())`; BERT: see bert.ts. */
const PAPER: Record<ZooModelName, { operators: number; params: number }> = {
  resnet50: { operators: 18, params: 25_557_032 },
  resnet101: { operators: 35, params: 44_549_160 },
  resnet152: { operators: 52, params: 60_192_808 },
  inception_v3: { operators: 14, params: 23_834_568 },
  vgg16: { operators: 19, params: 138_357_544 },
  vgg19: { operators: 22, params: 143_667_240 },
  bert: { operators: 12, params: 108_891_648 },
};

/**
 * torchvision's documented "GFLOPS" (conv + linear multiply-accumulates, default input) in the
 * weights tables of torchvision.models (e.g. ResNet50_Weights.IMAGENET1K_V1: 4.09).
 */
const TORCHVISION_GMACS: Partial<Record<ZooModelName, number>> = {
  resnet50: 4.09,
  resnet101: 7.8,
  resnet152: 11.51,
  inception_v3: 5.71,
  vgg16: 15.47,
  vgg19: 19.63,
};

/** Small variants used by the ORT tests (fast on a 2-core box). */
const SMALL: Record<ZooModelName, ZooOptions> = {
  resnet50: { resolution: 32, widthMultiplier: 0.125 },
  resnet101: { resolution: 32, widthMultiplier: 0.125 },
  resnet152: { resolution: 32, widthMultiplier: 0.125 },
  inception_v3: { resolution: 75, widthMultiplier: 0.125 },
  vgg16: { resolution: 32, widthMultiplier: 0.125 },
  vgg19: { resolution: 32, widthMultiplier: 0.125 },
  bert: { layers: 2, hidden: 64, heads: 2, vocabSize: 1000, maxPositions: 64 },
};

function graphOf(b: ZooBuild): OnnxTypes.IGraphProto {
  const g = b.model.graph;
  if (!g) throw new Error('no graph');
  return g;
}

function dimsOf(v: OnnxTypes.IValueInfoProto): (number | string)[] {
  return (v.type?.tensorType?.shape?.dim ?? []).map((d) => (d.dimParam ? d.dimParam : Number(d.dimValue)));
}

/** Conv + Gemm/MatMul multiply-accumulates of one sample, from the annotated shapes. */
function macsFromShapes(b: ZooBuild, seq = 0): number {
  const g = graphOf(b);
  const shapes = new Map<string, (number | string)[]>();
  for (const v of [...(g.input ?? []), ...(g.valueInfo ?? []), ...(g.output ?? [])]) shapes.set(v.name!, dimsOf(v));
  for (const t of g.initializer ?? []) shapes.set(t.name!, (t.dims ?? []).map(Number));
  const num = (s: (number | string)[]): number[] => s.map((d) => (d === 'batch' ? 1 : d === 'seq' ? seq : (d as number)));
  const prod = (s: number[]): number => s.reduce((a, c) => a * c, 1);
  let macs = 0;
  for (const node of g.node ?? []) {
    const out = num(shapes.get(node.output![0]!)!);
    if (node.opType === 'Conv') macs += out[2]! * out[3]! * prod(num(shapes.get(node.input![1]!)!));
    if (node.opType === 'Gemm') macs += prod(num(shapes.get(node.input![1]!)!));
    if (node.opType === 'MatMul') {
      const a = num(shapes.get(node.input![0]!)!);
      macs += prod(out) * a[a.length - 1]!;
    }
  }
  return macs;
}

describe('zoo names and options', () => {
  it('lists the seven models', () => {
    expect([...ZOO_MODEL_NAMES]).toEqual(['resnet50', 'resnet101', 'resnet152', 'inception_v3', 'vgg16', 'vgg19', 'bert']);
    expect(isZooModelName('vgg16')).toBe(true);
    expect(isZooModelName('vgg11')).toBe(false);
  });

  it('fills defaults and coerces numeric strings', () => {
    expect(parseZooOptions('resnet50', {})).toEqual({ resolution: 224, widthMultiplier: 1, numClasses: 1000, seed: 0 });
    expect(parseZooOptions('inception_v3', {}).resolution).toBe(299);
    expect(parseZooOptions('vgg16', { resolution: '64', widthMultiplier: '0.25', seed: undefined })).toEqual({ resolution: 64, widthMultiplier: 0.25, numClasses: 1000, seed: 0 });
    expect(parseZooOptions('bert', {})).toEqual({ layers: 12, hidden: 768, heads: 12, intermediate: 3072, vocabSize: 30522, maxPositions: 512, defaultSeqLen: 128, seed: 0 });
    const small = parseZooOptions('bert', { hidden: 64, heads: 2, maxPositions: 64 });
    expect(small.intermediate).toBe(256);
    expect(small.defaultSeqLen).toBe(64);
  });

  it('rejects bad values with errors naming the field and range', () => {
    expect(() => parseZooOptions('resnet50', { resolution: 16 })).toThrow(RangeError);
    expect(() => parseZooOptions('resnet50', { resolution: 16 })).toThrow(/'resolution'.*\[32, 1024\]/);
    expect(() => parseZooOptions('inception_v3', { resolution: 74 })).toThrow(/'resolution'.*\[75, 1024\]/);
    expect(() => parseZooOptions('resnet50', { resolution: 32.5 })).toThrow(RangeError);
    expect(() => parseZooOptions('resnet50', { widthMultiplier: 0 })).toThrow(/'widthMultiplier'/);
    expect(() => parseZooOptions('resnet50', { numClasses: 'many' })).toThrow(TypeError);
    expect(() => parseZooOptions('resnet50', { numClasses: 'many' })).toThrow(/'numClasses'/);
    expect(() => parseZooOptions('resnet50', { seed: Infinity })).toThrow(RangeError);
    expect(() => parseZooOptions('resnet50', { layers: 2 })).toThrow(TypeError);
    expect(() => parseZooOptions('resnet50', { layers: 2 })).toThrow(/'layers'.*resnet50/);
    expect(() => parseZooOptions('bert', { resolution: 32 })).toThrow(/'resolution'/);
    expect(() => parseZooOptions('bert', { hidden: 100, heads: 12 })).toThrow(RangeError);
    expect(() => parseZooOptions('bert', { hidden: 100, heads: 12 })).toThrow(/'heads'/);
    expect(() => parseZooOptions('bert', { layers: 0 })).toThrow(/'layers'.*\[1, 48\]/);
    expect(() => parseZooOptions('bert', { maxPositions: 64, defaultSeqLen: 65 })).toThrow(/'defaultSeqLen'/);
    expect(() => buildZooModel('vgg16', { resolution: 8 }, { withWeights: false })).toThrow(/'resolution'/);
  });

  it('operator counts follow the paper; BERT follows `layers`', () => {
    for (const name of ZOO_MODEL_NAMES) expect(zooOperatorCount(name)).toBe(PAPER[name].operators);
    expect(zooOperatorCount('bert', { layers: 3 })).toBe(3);
    expect(zooOperatorCount('resnet50', { resolution: 64 })).toBe(18);
  });
});

describe('full-size architectures (no weights)', () => {
  for (const name of ZOO_MODEL_NAMES) {
    it(`${name}: operators, parameters, tags, shapes, I/O`, () => {
      const b = buildZooModel(name, {}, { withWeights: false });
      const g = graphOf(b);
      expect(b.name).toBe(name);
      expect(b.operatorNames).toHaveLength(PAPER[name].operators);
      expect(zooOperatorCount(name, b.options)).toBe(PAPER[name].operators);
      // Exact: the builders reproduce the reference architectures parameter for parameter.
      expect(b.params).toBe(PAPER[name].params);

      // Tags: one per node, non-decreasing, every operator non-empty.
      expect(b.operatorOfNode).toHaveLength(g.node!.length);
      for (let i = 1; i < b.operatorOfNode.length; i++) expect(b.operatorOfNode[i]! - b.operatorOfNode[i - 1]!).toBeGreaterThanOrEqual(0);
      expect(new Set(b.operatorOfNode).size).toBe(PAPER[name].operators);

      // Every node output is annotated; every dim is a positive size or a declared symbol.
      const annotated = new Map<string, (number | string)[]>();
      for (const v of [...(g.valueInfo ?? []), ...(g.output ?? [])]) annotated.set(v.name!, dimsOf(v));
      const symbols = new Set(Object.values(b.dynamicAxes));
      for (const node of g.node!) {
        for (const out of node.output!) {
          const dims = annotated.get(out);
          expect(dims, `${node.opType} output ${out}`).toBeDefined();
          for (const d of dims!) expect(typeof d === 'number' ? d > 0 : symbols.has(d)).toBe(true);
        }
      }

      // No initializer is shared between operators (each operator's sub-model owns its weights).
      const owner = new Map<string, number>();
      const inits = new Set((g.initializer ?? []).map((t) => t.name!));
      expect(inits.size).toBe(g.initializer!.length);
      g.node!.forEach((node, i) => {
        for (const input of node.input!) {
          if (!inits.has(input)) continue;
          const op = b.operatorOfNode[i]!;
          expect(owner.get(input) ?? op, `${input} used by two operators`).toBe(op);
          owner.set(input, op);
        }
      });

      if (name === 'bert') {
        expect(b.dynamicAxes).toEqual({ batch: 'batch', seq: 'seq' });
        expect(b.defaultSeqLen).toBe(128);
        expect(g.input!.map((v) => [v.name, dimsOf(v)])).toEqual([
          ['input_ids', ['batch', 'seq']],
          ['attention_mask', ['batch', 'seq']],
        ]);
        expect(g.output!.map((v) => [v.name, dimsOf(v)])).toEqual([['last_hidden_state', ['batch', 'seq', 768]]]);
      } else {
        const r = name === 'inception_v3' ? 299 : 224;
        expect(b.dynamicAxes).toEqual({ batch: 'batch' });
        expect(b.defaultSeqLen).toBe(0);
        expect(g.input!.map((v) => [v.name, dimsOf(v)])).toEqual([['input', ['batch', 3, r, r]]]);
        expect(g.output!.map((v) => [v.name, dimsOf(v)])).toEqual([['logits', ['batch', 1000]]]);
      }
    });
  }

  it('annotated shapes give torchvision\'s documented GMACs (±0.5%)', () => {
    for (const [name, gmacs] of Object.entries(TORCHVISION_GMACS)) {
      const b = buildZooModel(name as ZooModelName, {}, { withWeights: false });
      const got = macsFromShapes(b) / 1e9;
      expect(Math.abs(got - gmacs) / gmacs, `${name}: ${got.toFixed(3)} vs ${gmacs}`).toBeLessThan(0.005);
    }
  });

  it('BERT MACs from shapes match the closed form 12·s·(4H² + 2HI + 2sH)', () => {
    const b = buildZooModel('bert', {}, { withWeights: false });
    const [s, H, I] = [128, 768, 3072];
    expect(macsFromShapes(b, s)).toBe(12 * s * (4 * H * H + 2 * H * I + 2 * s * H));
  });

  it('node types match the reference architectures (BN kept separate)', () => {
    const count = (name: ZooModelName, op: string): number => graphOf(buildZooModel(name, {}, { withWeights: false })).node!.filter((n) => n.opType === op).length;
    // torchvision resnet50: 1 stem conv + 16 blocks × 3 + 4 downsample convs = 53, each with a BN.
    expect(count('resnet50', 'Conv')).toBe(53);
    expect(count('resnet50', 'BatchNormalization')).toBe(53);
    expect(count('resnet152', 'Conv')).toBe(155);
    // Inception3 without AuxLogits: 94 BasicConv2d.
    expect(count('inception_v3', 'Conv')).toBe(94);
    expect(count('vgg16', 'Conv')).toBe(13);
    expect(count('vgg19', 'Conv')).toBe(16);
    expect(count('vgg16', 'Gemm')).toBe(3);
    expect(count('bert', 'LayerNormalization')).toBe(25);
    expect(count('bert', 'Softmax')).toBe(12);
  });

  it('BERT parameter count follows the formula for other sizes', () => {
    const o = { layers: 3, hidden: 96, heads: 4, intermediate: 200, vocabSize: 500, maxPositions: 40 };
    const emb = (o.vocabSize + o.maxPositions + 2) * o.hidden + 2 * o.hidden;
    const layer = 4 * (o.hidden * o.hidden + o.hidden) + 2 * o.hidden * o.intermediate + o.intermediate + o.hidden + 4 * o.hidden;
    expect(buildZooModel('bert', o, { withWeights: false }).params).toBe(emb + o.layers * layer);
  });
});

describe('VGG adaptive average pool', () => {
  it('bins match PyTorch\'s AdaptiveAvgPool (8 -> 7, by hand)', () => {
    const m = adaptivePoolMatrix(8, 7);
    // Bin i covers [floor(8i/7), ceil(8(i+1)/7)): [0,2) [1,3) [2,4) [3,5) [4,6) [5,7) [6,8).
    for (let i = 0; i < 7; i++) {
      for (let j = 0; j < 8; j++) expect(m[i * 8 + j]).toBe(j === i || j === i + 1 ? 0.5 : 0);
    }
    // 7 -> 7 is the identity.
    expect(adaptivePoolMatrix(7, 7)).toEqual(Array.from({ length: 49 }, (_, k) => (k % 8 === 0 ? 1 : 0)));
  });

  it('keeps the classifier input at C·7·7 above 224 and uses the real map below', () => {
    const fc1 = (o: ZooOptions): number[] => {
      const g = graphOf(buildZooModel('vgg16', o, { withWeights: false }));
      return g.initializer!.find((t) => t.name === 'classifier.0.weight')!.dims!.map(Number);
    };
    expect(fc1({ resolution: 256 })).toEqual([4096, 25088]); // s = 8: MatMul pooling
    expect(fc1({ resolution: 448 })).toEqual([4096, 25088]); // s = 14: AveragePool 2×2
    expect(fc1({ resolution: 64, widthMultiplier: 0.125 })).toEqual([512, 64 * 2 * 2]); // s = 2
  });
});

// ---------------------------------------------------------------------------------------------
// Execution in onnxruntime-node

interface RunResult {
  outputs: Record<string, ort.Tensor>;
  /** Annotated dims of every fetched value (graph outputs and intermediates). */
  annotated: Map<string, (number | string)[]>;
}

/** Run `b` with every intermediate value fetched as an extra graph output. */
async function runAll(b: ZooBuild, feeds: Record<string, ort.Tensor>): Promise<RunResult> {
  const g = graphOf(b);
  const annotated = new Map<string, (number | string)[]>();
  for (const v of [...(g.valueInfo ?? []), ...(g.output ?? [])]) annotated.set(v.name!, dimsOf(v));
  const model = onnx.ModelProto.create({ ...b.model, graph: { ...g, output: [...(g.output ?? []), ...(g.valueInfo ?? [])], valueInfo: [] } });
  const session = await ort.InferenceSession.create(onnx.ModelProto.encode(model).finish(), { intraOpNumThreads: 1, interOpNumThreads: 1 });
  try {
    const outputs = await session.run(feeds);
    return { outputs, annotated };
  } finally {
    await session.release();
  }
}

/** Every fetched tensor's dims equal its annotation with symbols substituted. */
function expectShapesMatch(r: RunResult, symbols: Record<string, number>): void {
  expect(Object.keys(r.outputs).length).toBe(r.annotated.size);
  for (const [name, dims] of r.annotated) {
    const want = dims.map((d) => (typeof d === 'string' ? symbols[d] : d));
    expect([...r.outputs[name]!.dims], name).toEqual(want);
  }
}

function expectHealthy(t: ort.Tensor, what: string): void {
  const data = t.data as Float32Array;
  let min = Infinity;
  let max = -Infinity;
  for (const v of data) {
    expect(Number.isFinite(v), `${what} finite`).toBe(true);
    min = Math.min(min, v);
    max = Math.max(max, v);
  }
  expect(max - min, `${what} not constant`).toBeGreaterThan(1e-6);
  expect(Math.max(Math.abs(min), Math.abs(max)), `${what} bounded`).toBeLessThan(1e4);
  // The two samples of the batch differ.
  const half = data.length / 2;
  let diff = 0;
  for (let i = 0; i < half; i++) diff = Math.max(diff, Math.abs(data[i]! - data[half + i]!));
  expect(diff, `${what}: samples differ`).toBeGreaterThan(1e-6);
}

function randomImage(batch: number, r: number, seed: number): ort.Tensor {
  const data = new Float32Array(batch * 3 * r * r);
  let s = seed >>> 0;
  for (let i = 0; i < data.length; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    data[i] = s / 2 ** 32 - 0.5;
  }
  return new ort.Tensor('float32', data, [batch, 3, r, r]);
}

function int64(values: number[], dims: number[]): ort.Tensor {
  return new ort.Tensor('int64', BigInt64Array.from(values.map(BigInt)), dims);
}

describe('small variants run in onnxruntime-node (batch 2)', () => {
  for (const name of ZOO_MODEL_NAMES.filter((n) => n !== 'bert')) {
    it(`${name} ${JSON.stringify(SMALL[name])}`, async () => {
      const b = buildZooModel(name, SMALL[name], { withWeights: true });
      const r = b.options['resolution']!;
      const res = await runAll(b, { input: randomImage(2, r, 7) });
      expectShapesMatch(res, { batch: 2 });
      expect([...res.outputs['logits']!.dims]).toEqual([2, 1000]);
      expectHealthy(res.outputs['logits']!, `${name} logits`);
    });
  }

  it('vgg16 above 224 (adaptive pool via MatMul, s = 8) runs with matching shapes', async () => {
    const b = buildZooModel('vgg16', { resolution: 256, widthMultiplier: 0.0625, numClasses: 10 }, { withWeights: true });
    const res = await runAll(b, { input: randomImage(2, 256, 3) });
    expectShapesMatch(res, { batch: 2 });
    expectHealthy(res.outputs['logits']!, 'vgg16@256 logits');
  });

  it('bert with dynamic seq 8 and 16', async () => {
    const b = buildZooModel('bert', SMALL.bert, { withWeights: true });
    for (const seq of [8, 16]) {
      const ids = Array.from({ length: 2 * seq }, (_, i) => (i * 37 + 11) % 1000);
      const mask = Array.from({ length: 2 * seq }, (_, i) => (i >= seq && i % seq >= seq - 3 ? 0 : 1));
      const res = await runAll(b, { input_ids: int64(ids, [2, seq]), attention_mask: int64(mask, [2, seq]) });
      expectShapesMatch(res, { batch: 2, seq });
      expect([...res.outputs['last_hidden_state']!.dims]).toEqual([2, seq, 64]);
      expectHealthy(res.outputs['last_hidden_state']!, `bert seq ${seq}`);
    }
  });
});

// ---------------------------------------------------------------------------------------------
// BERT against an independent reference implementation (float64, plain loops)

function initializerValues(b: ZooBuild, name: string): Float32Array {
  const t = graphOf(b).initializer!.find((x) => x.name === name);
  if (!t?.rawData) throw new Error(`no data for ${name}`);
  const bytes = t.rawData.slice();
  return new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
}

/** erf, Abramowitz & Stegun 7.1.26 (|error| ≤ 1.5e-7). */
function erf(x: number): number {
  const s = Math.sign(x);
  const a = Math.abs(x);
  const t = 1 / (1 + 0.3275911 * a);
  const y = 1 - ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * Math.exp(-a * a);
  return s * y;
}

/** HF BertModel forward (eval mode, token type 0, no pooler) for one sequence: [seq][H]. */
function bertReference(b: ZooBuild, ids: number[], mask: number[]): number[][] {
  const { layers, hidden: H, heads: A, intermediate: I } = b.options;
  const d = H! / A!;
  const W = (n: string): Float32Array => initializerValues(b, n);
  const ln = (x: number[], n: string): number[] => {
    const g = W(`${n}.weight`);
    const be = W(`${n}.bias`);
    const mean = x.reduce((a, c) => a + c, 0) / x.length;
    const vr = x.reduce((a, c) => a + (c - mean) ** 2, 0) / x.length;
    return x.map((v, i) => ((v - mean) / Math.sqrt(vr + 1e-12)) * g[i]! + be[i]!);
  };
  const dense = (x: number[], n: string, inF: number, outF: number): number[] => {
    const w = W(`${n}.weight`); // [in, out]
    const bias = W(`${n}.bias`);
    const y = Array.from(bias);
    for (let i = 0; i < inF; i++) for (let o = 0; o < outF; o++) y[o]! += x[i]! * w[i * outF + o]!;
    return y;
  };
  const word = W('embeddings.word_embeddings.weight');
  const pos = W('embeddings.position_embeddings.weight');
  const type = W('embeddings.token_type_embeddings.weight');
  let x = ids.map((id, t) => ln(Array.from({ length: H! }, (_, h) => word[id * H! + h]! + pos[t * H! + h]! + type[h]!), 'embeddings.LayerNorm'));
  for (let l = 0; l < layers!; l++) {
    const n = `encoder.layer.${l}`;
    const q = x.map((v) => dense(v, `${n}.attention.self.query`, H!, H!));
    const k = x.map((v) => dense(v, `${n}.attention.self.key`, H!, H!));
    const v = x.map((t) => dense(t, `${n}.attention.self.value`, H!, H!));
    const ctx = x.map(() => new Array<number>(H!).fill(0));
    for (let a = 0; a < A!; a++) {
      for (let t = 0; t < ids.length; t++) {
        const scores = ids.map((_, u) => {
          let s = 0;
          for (let i = 0; i < d; i++) s += q[t]![a * d + i]! * k[u]![a * d + i]!;
          return s / Math.sqrt(d) + (1 - mask[u]!) * -10000;
        });
        const m = Math.max(...scores);
        const e = scores.map((s) => Math.exp(s - m));
        const z = e.reduce((p, c) => p + c, 0);
        for (let u = 0; u < ids.length; u++) for (let i = 0; i < d; i++) ctx[t]![a * d + i]! += (e[u]! / z) * v[u]![a * d + i]!;
      }
    }
    const attn = x.map((xt, t) => ln(dense(ctx[t]!, `${n}.attention.output.dense`, H!, H!).map((y, i) => y + xt[i]!), `${n}.attention.output.LayerNorm`));
    x = attn.map((at) => {
      const inter = dense(at, `${n}.intermediate.dense`, H!, I!).map((y) => 0.5 * y * (1 + erf(y / Math.SQRT2)));
      return ln(dense(inter, `${n}.output.dense`, I!, H!).map((y, i) => y + at[i]!), `${n}.output.LayerNorm`);
    });
  }
  return x;
}

describe('bert numerics', () => {
  it('matches an independent reference implementation (|Δ| ≤ 1e-4), mask included', async () => {
    const b = buildZooModel('bert', { layers: 2, hidden: 16, heads: 4, intermediate: 24, vocabSize: 50, maxPositions: 12, seed: 3 }, { withWeights: true });
    // Scale Q and K by 30 (in the model both sides read), so attention is far from uniform and
    // the head split / transposes / mask really matter.
    for (const t of graphOf(b).initializer!) {
      if (!/attention\.self\.(query|key)\.weight$/.test(t.name!)) continue;
      const v = initializerValues(b, t.name!).map((x) => x * 30);
      t.rawData = new Uint8Array(v.buffer);
    }
    const seq = 6;
    const ids = [3, 17, 42, 8, 8, 49, 0, 5, 12, 33, 21, 1];
    const mask = [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0];
    const res = await runAll(b, { input_ids: int64(ids, [2, seq]), attention_mask: int64(mask, [2, seq]) });
    const got = res.outputs['last_hidden_state']!.data as Float32Array;
    let maxErr = 0;
    for (let s = 0; s < 2; s++) {
      const ref = bertReference(b, ids.slice(s * seq, (s + 1) * seq), mask.slice(s * seq, (s + 1) * seq));
      for (let t = 0; t < seq; t++) for (let h = 0; h < 16; h++) maxErr = Math.max(maxErr, Math.abs(ref[t]![h]! - got[(s * seq + t) * 16 + h]!));
    }
    expect(maxErr).toBeLessThan(1e-4);
  });

  it('masked tokens do not influence the others', async () => {
    const b = buildZooModel('bert', SMALL.bert, { withWeights: true });
    const mask = int64([1, 1, 1, 1, 1, 0, 0, 0], [1, 8]);
    const a = await runAll(b, { input_ids: int64([5, 6, 7, 8, 9, 10, 11, 12], [1, 8]), attention_mask: mask });
    const c = await runAll(b, { input_ids: int64([5, 6, 7, 8, 9, 900, 901, 902], [1, 8]), attention_mask: mask });
    const x = a.outputs['last_hidden_state']!.data as Float32Array;
    const y = c.outputs['last_hidden_state']!.data as Float32Array;
    for (let i = 0; i < 5 * 64; i++) expect(Math.abs(x[i]! - y[i]!)).toBeLessThan(1e-5);
    let changed = 0;
    for (let i = 5 * 64; i < 8 * 64; i++) changed = Math.max(changed, Math.abs(x[i]! - y[i]!));
    expect(changed).toBeGreaterThan(1e-3);
  });
});

describe('determinism', () => {
  it('same seed gives identical bytes; another seed differs', () => {
    const bytes = (name: ZooModelName, o: ZooOptions): Uint8Array => onnx.ModelProto.encode(buildZooModel(name, o, { withWeights: true }).model).finish();
    for (const name of ['resnet50', 'bert'] as const) {
      const a = bytes(name, SMALL[name]);
      expect(Buffer.from(bytes(name, SMALL[name])).equals(Buffer.from(a))).toBe(true);
      expect(Buffer.from(bytes(name, { ...SMALL[name], seed: 1 })).equals(Buffer.from(a))).toBe(false);
    }
  });

  it('withWeights:false has the same graph and no weight data', () => {
    const w = buildZooModel('resnet50', SMALL.resnet50, { withWeights: true });
    const n = buildZooModel('resnet50', SMALL.resnet50, { withWeights: false });
    expect(n.params).toBe(w.params);
    expect(n.operatorOfNode).toEqual(w.operatorOfNode);
    expect(graphOf(n).node!.map((x) => x.opType)).toEqual(graphOf(w).node!.map((x) => x.opType));
    expect(graphOf(n).initializer!.filter((t) => t.name!.endsWith('.weight')).every((t) => !t.rawData || t.rawData.length === 0)).toBe(true);
  });
});
