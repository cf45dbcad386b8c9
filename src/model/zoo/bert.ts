/**
 * BERT-base encoder (Devlin et al. 2019; layout of Hugging Face `BertModel`,
 * `transformers/models/bert/modeling_bert.py`), inference graph, without the pooler.
 *
 * Included parameters (names as in the HF state dict):
 *   embeddings   word_embeddings [vocab, H], position_embeddings [maxPos, H],
 *                token_type_embeddings [2, H], LayerNorm (H + H)
 *   encoder.layer.i (× layers)   attention.self.{query,key,value} (H·H + H each),
 *                attention.output.dense (H·H + H), attention.output.LayerNorm (2H),
 *                intermediate.dense (H·I + I), output.dense (I·H + H), output.LayerNorm (2H)
 * Not included: the pooler (H·H + H = 590,592) and any task head. Full size (L 12, H 768,
 * A 12, I 3072, vocab 30522, 512 positions): 23,837,184 + 12 × 7,087,872 = 108,891,648
 * parameters (HF `BertModel` 109,482,240 minus the pooler). Dense weights are stored as
 * [in, out] (transposed w.r.t. PyTorch) so they feed MatMul directly; counts are unchanged.
 *
 * Graph (opset 17), `seq` dynamic up to `maxPositions`, `batch` dynamic:
 *   inputs   input_ids int64 [batch, seq], attention_mask int64 [batch, seq] (1 = attend)
 *   output   last_hidden_state float32 [batch, seq, H]
 *   embeddings  Gather(word) + Slice(position table, 0..seq) + token type 0 row, LayerNorm(eps 1e-12)
 *   mask bias   (1 − float(mask)) · −10000, shaped [batch, 1, 1, seq] (HF's extended mask)
 *   layer    post-LN: x = LN(x + O(softmax(Q·Kᵀ/√d + bias)·V)); x = LN(x + W2·GELU(W1·x))
 *            GELU(x) = 0.5·x·(1 + erf(x/√2)) (the Gelu op needs opset 20); LayerNormalization op.
 * Dropout is the identity at inference and is omitted. There is no token_type_ids input: every
 * token is segment 0, as for single-sentence inputs.
 *
 * Operators (Abacus paper: 12 for BERT-base): one per encoder layer (`encoder.0` …); the
 * embeddings and the mask bias are folded into `encoder.0`. The mask bias is computed once and
 * read by every layer (it crosses every operator boundary).
 *
 * Random weights: uniform with std 0.02 (HF `initializer_range`), bound 0.02·√3; LayerNorm
 * gamma 1, beta 0, which keeps every layer's output normalized.
 */
import { GraphBuilder } from '../onnx/builder.ts';
import { Layers } from './layers.ts';
import type { BuiltGraph } from '../onnx/builder.ts';

export interface BertOptions {
  readonly layers: number;
  readonly hidden: number;
  readonly heads: number;
  readonly intermediate: number;
  readonly vocabSize: number;
  readonly maxPositions: number;
  readonly seed: number;
}

/** HF BertConfig.layer_norm_eps. */
const LN_EPS = 1e-12;
/** HF BertConfig.initializer_range (std of a normal); uniform with the same std. */
const INIT_BOUND = 0.02 * Math.sqrt(3);
/** Additive attention bias of masked positions (HF BERT's original extended mask). */
const MASK_BIAS = -10000;

/**
 * Build the BERT encoder. Inputs `input_ids`, `attention_mask` int64 [batch, seq]; output
 * `last_hidden_state` float32 [batch, seq, hidden]. Token ids must be in [0, vocabSize) and
 * seq ≤ maxPositions (ORT reports an index error otherwise).
 * @throws RangeError when `heads` does not divide `hidden`.
 */
export function buildBert(o: BertOptions, withWeights: boolean): BuiltGraph {
  if (o.hidden % o.heads !== 0) throw new RangeError(`bert option 'heads' (${o.heads}) must divide 'hidden' (${o.hidden})`);
  const g = new GraphBuilder({ name: 'bert', seed: o.seed, withWeights });
  const L = new Layers(g);
  const H = o.hidden;
  const uniform = { kind: 'uniform', bound: INIT_BOUND } as const;

  const ids = g.input('input_ids', 'int64', ['batch', 'seq']);
  const mask = g.input('attention_mask', 'int64', ['batch', 'seq']);

  L.beginOperator('encoder.0');
  // Embeddings: word + position + token type (segment 0), then LayerNorm.
  const wordTable = g.initializer('embeddings.word_embeddings.weight', [o.vocabSize, H], uniform);
  const posTable = g.initializer('embeddings.position_embeddings.weight', [o.maxPositions, H], uniform);
  const typeTable = g.initializer('embeddings.token_type_embeddings.weight', [2, H], uniform);
  const words = L.op('Gather', [wordTable, ids], ['batch', 'seq', H], 'embeddings.word', { attrs: { axis: { int: 0 } } });
  const seqLen = L.op('Shape', [ids], [1], 'embeddings.seq_len', { attrs: { start: { int: 1 }, end: { int: 2 } }, dataType: 'int64' });
  const positions = L.op('Slice', [posTable, L.constant([0], [1], 'int64'), seqLen, L.constant([0], [1], 'int64')], ['seq', H], 'embeddings.position');
  const segment0 = L.op('Gather', [typeTable, L.constant([0], [], 'int64')], [H], 'embeddings.token_type', { attrs: { axis: { int: 0 } } });
  let x = L.binary('Add', words, positions, 'embeddings.add_position');
  x = L.binary('Add', x, segment0, 'embeddings.add_token_type');
  x = layerNorm(L, x, 'embeddings.LayerNorm', H);

  // Extended attention mask: [batch, seq] int64 -> additive bias [batch, 1, 1, seq].
  const maskF = L.castFloat(mask, 'mask.float');
  const inverted = L.binary('Sub', L.scalar(1), maskF, 'mask.invert');
  const bias2d = L.binary('Mul', inverted, L.scalar(MASK_BIAS), 'mask.bias');
  const maskBias = L.op('Unsqueeze', [bias2d, L.constant([1, 2], [2], 'int64')], ['batch', 1, 1, 'seq'], 'mask.extended');

  for (let i = 0; i < o.layers; i++) {
    if (i > 0) L.beginOperator(`encoder.${i}`);
    const last = i === o.layers - 1;
    x = encoderLayer(L, x, maskBias, `encoder.layer.${i}`, o, last ? 'last_hidden_state' : undefined);
  }
  g.output(x);
  return g.build();
}

/** LayerNormalization over the last axis with `${name}.weight` (1) / `${name}.bias` (0), [H] each. */
function layerNorm(L: Layers, x: string, name: string, H: number, output?: string): string {
  const gamma = L.g.initializer(`${name}.weight`, [H], { kind: 'constant', value: 1 });
  const beta = L.g.initializer(`${name}.bias`, [H], { kind: 'constant', value: 0 });
  const attrs = { axis: { int: -1 }, epsilon: { float: LN_EPS } };
  return L.op('LayerNormalization', [x, gamma, beta], L.shape(x), name, output === undefined ? { attrs } : { attrs, output });
}

/** Dense layer x·W + b with W [in, out] (`${name}.weight`) and b [out] (`${name}.bias`). */
function dense(L: Layers, x: string, name: string, inF: number, outF: number): string {
  const w = L.g.initializer(`${name}.weight`, [inF, outF], { kind: 'uniform', bound: INIT_BOUND });
  const b = L.g.initializer(`${name}.bias`, [outF], { kind: 'uniform', bound: INIT_BOUND });
  return L.binary('Add', L.matmul(x, w, `${name}.matmul`), b, name);
}

/** One post-LN encoder layer (HF `BertLayer`): x [batch, seq, H] -> [batch, seq, H] (named `output` when given). */
function encoderLayer(L: Layers, x: string, maskBias: string, n: string, o: BertOptions, output: string | undefined): string {
  const H = o.hidden;
  const A = o.heads;
  const d = H / A;
  const toHeads = L.constant([0, 0, A, d], [4], 'int64');
  const split = (t: string, name: string, perm: readonly number[]): string => {
    const r = L.op('Reshape', [t, toHeads], ['batch', 'seq', A, d], `${name}.reshape`);
    const shape = perm.map((p) => (['batch', 'seq', A, d] as const)[p]!);
    return L.op('Transpose', [r], shape, `${name}.transpose`, { attrs: { perm: { ints: perm } } });
  };
  const q = split(dense(L, x, `${n}.attention.self.query`, H, H), `${n}.attention.q`, [0, 2, 1, 3]); // [b, A, s, d]
  const kT = split(dense(L, x, `${n}.attention.self.key`, H, H), `${n}.attention.k`, [0, 2, 3, 1]); // [b, A, d, s]
  const v = split(dense(L, x, `${n}.attention.self.value`, H, H), `${n}.attention.v`, [0, 2, 1, 3]); // [b, A, s, d]
  let scores = L.matmul(q, kT, `${n}.attention.scores`); // [b, A, s, s]
  scores = L.binary('Mul', scores, L.scalar(1 / Math.sqrt(d)), `${n}.attention.scaled`);
  scores = L.binary('Add', scores, maskBias, `${n}.attention.masked`);
  const probs = L.unary('Softmax', scores, `${n}.attention.probs`, { axis: { int: -1 } });
  const ctx = L.matmul(probs, v, `${n}.attention.context`); // [b, A, s, d]
  const ctxT = L.op('Transpose', [ctx], ['batch', 'seq', A, d], `${n}.attention.context.transpose`, { attrs: { perm: { ints: [0, 2, 1, 3] } } });
  const merged = L.op('Reshape', [ctxT, L.constant([0, 0, H], [3], 'int64')], ['batch', 'seq', H], `${n}.attention.context.reshape`);
  let attn = dense(L, merged, `${n}.attention.output.dense`, H, H);
  attn = L.binary('Add', attn, x, `${n}.attention.output.residual`);
  attn = layerNorm(L, attn, `${n}.attention.output.LayerNorm`, H);

  const inter = dense(L, attn, `${n}.intermediate.dense`, H, o.intermediate);
  const act = gelu(L, inter, `${n}.intermediate.gelu`);
  let out = dense(L, act, `${n}.output.dense`, o.intermediate, H);
  out = L.binary('Add', out, attn, `${n}.output.residual`);
  return layerNorm(L, out, `${n}.output.LayerNorm`, H, output);
}

/** Exact GELU, 0.5·x·(1 + erf(x/√2)) (Hendrycks & Gimpel 2016; HF `gelu`). */
function gelu(L: Layers, x: string, name: string): string {
  const scaled = L.binary('Div', x, L.scalar(Math.SQRT2), `${name}.div`);
  const erf = L.unary('Erf', scaled, `${name}.erf`);
  const onePlus = L.binary('Add', erf, L.scalar(1), `${name}.add`);
  const prod = L.binary('Mul', x, onePlus, `${name}.mul`);
  return L.binary('Mul', prod, L.scalar(0.5), name);
}
