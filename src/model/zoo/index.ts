/**
 * Model zoo: ONNX (opset 17) builders for the seven models of the Abacus paper (SC'21),
 * each partitioned into the paper's operator count.
 *
 * | model        | source of the architecture          | operators | params (default options) |
 * |--------------|-------------------------------------|-----------|--------------------------|
 * | resnet50     | torchvision `resnet50` (v1.5)       | 18        | 25,557,032               |
 * | resnet101    | torchvision `resnet101`             | 35        | 44,549,160               |
 * | resnet152    | torchvision `resnet152`             | 52        | 60,192,808               |
 * | inception_v3 | torchvision `inception_v3`, no aux  | 14        | 23,834,568               |
 * | vgg16        | torchvision `vgg16` (config D)      | 19        | 138,357,544              |
 * | vgg19        | torchvision `vgg19` (config E)      | 22        | 143,667,240              |
 * | bert         | BERT-base encoder + embeddings (HF) | 12        | 108,891,648              |
 *
 * Interfaces: CNNs take `input` float32 [batch, 3, R, R] and return `logits` float32
 * [batch, numClasses]; BERT takes `input_ids`, `attention_mask` int64 [batch, seq] and returns
 * `last_hidden_state` float32 [batch, seq, hidden]. Every node output carries its shape.
 * Weights are seeded random values (no trained weights exist here); see each builder for the
 * initialization that keeps random-weight activations finite and O(1).
 */
import { buildBert } from './bert.ts';
import { buildInceptionV3, INCEPTION_OPERATORS } from './inception.ts';
import { buildResNet, resnetOperatorCount } from './resnet.ts';
import { buildVgg, vggOperatorCount } from './vgg.ts';
import { isZooModelName, parseZooOptions, ZOO_MODEL_NAMES } from './options.ts';
import type { ZooModelName, ZooOptions } from './options.ts';
import type { BuiltGraph } from '../onnx/builder.ts';
import type { DynamicAxes } from '../spec.ts';

export { isReservedZooName, isZooModelName, parseZooOptions, ZOO_MODEL_NAMES, ZOO_VARIANT_SUFFIXES, MIN_RESOLUTION } from './options.ts';
export type { ZooModelName, ZooOptions } from './options.ts';

/** A built zoo model: the ONNX graph with operator tags, plus what a ModelSpec needs. */
export interface ZooBuild extends BuiltGraph {
  readonly name: ZooModelName;
  /** `{ batch: 'batch' }`; BERT adds `seq: 'seq'`. */
  readonly dynamicAxes: DynamicAxes;
  /** Sequence length used when a query gives none; 0 for CNNs. */
  readonly defaultSeqLen: number;
  /** Normalized options (every applicable field, defaults filled): the cache key. */
  readonly options: Record<string, number>;
  /** Trainable parameters (elements): initializers minus `nonTrainable`, torchvision's `numel()` sum. */
  readonly params: number;
}

/** Operators of each model at default options (the partition used by the Abacus paper and artifact). */
const PAPER_OPERATORS: Readonly<Record<ZooModelName, number>> = {
  resnet50: resnetOperatorCount(50),
  resnet101: resnetOperatorCount(101),
  resnet152: resnetOperatorCount(152),
  inception_v3: INCEPTION_OPERATORS,
  vgg16: vggOperatorCount(16),
  vgg19: vggOperatorCount(19),
  bert: 12,
};

/**
 * Number of operators `buildZooModel` partitions `name` into: resnet50 18, resnet101 35,
 * resnet152 52, inception_v3 14, vgg16 19, vgg19 22 (independent of options); bert = `layers`
 * (12 by default).
 * @throws TypeError/RangeError for invalid options (as `parseZooOptions`).
 */
export function zooOperatorCount(name: ZooModelName, options: ZooOptions = {}): number {
  if (name === 'bert') return parseZooOptions(name, options).layers ?? PAPER_OPERATORS.bert;
  if (!isZooModelName(name)) throw new TypeError(`unknown zoo model '${String(name)}' (valid: ${ZOO_MODEL_NAMES.join(', ')})`);
  return PAPER_OPERATORS[name];
}

/**
 * Build a zoo model as ONNX with operator tags.
 * @param options validated again and completed with defaults (a partial or raw set is fine).
 * @param build.withWeights false: initializers carry dims but no data (fast; for shape/FLOP
 *   analysis, listing and parameter counts). true: seeded weights (full vgg19 ≈ 575 MB, a few s).
 * @throws TypeError/RangeError for invalid options (the message names the field).
 */
export function buildZooModel(name: ZooModelName, options: ZooOptions, build: { withWeights: boolean }): ZooBuild {
  const o = parseZooOptions(name, options) as Required<ZooOptions>;
  const w = build.withWeights;
  let graph: BuiltGraph;
  switch (name) {
    case 'resnet50':
      graph = buildResNet(50, o, w);
      break;
    case 'resnet101':
      graph = buildResNet(101, o, w);
      break;
    case 'resnet152':
      graph = buildResNet(152, o, w);
      break;
    case 'vgg16':
      graph = buildVgg(16, o, w);
      break;
    case 'vgg19':
      graph = buildVgg(19, o, w);
      break;
    case 'inception_v3':
      graph = buildInceptionV3(o, w);
      break;
    case 'bert':
      graph = buildBert(o, w);
      break;
  }
  const expected = name === 'bert' ? o.layers : PAPER_OPERATORS[name];
  if (graph.operatorNames.length !== expected) {
    throw new RangeError(`zoo builder ${name} produced ${graph.operatorNames.length} operators, expected ${expected}`);
  }
  const isBert = name === 'bert';
  return {
    ...graph,
    name,
    dynamicAxes: isBert ? { batch: 'batch', seq: 'seq' } : { batch: 'batch' },
    defaultSeqLen: isBert ? o.defaultSeqLen : 0,
    options: { ...(o as Record<string, number>) },
    params: countParams(graph),
  };
}

/** Elements of all initializers not listed in `nonTrainable`. */
export function countParams(graph: BuiltGraph): number {
  let total = 0;
  for (const t of graph.model.graph?.initializer ?? []) {
    if (graph.nonTrainable.has(t.name ?? '')) continue;
    let n = 1;
    for (const d of t.dims ?? []) n *= Number(d); // a protobufjs Long converts via toString()
    total += n;
  }
  return total;
}
