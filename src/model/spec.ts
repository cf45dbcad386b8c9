/**
 * ModelSpec: a DNN partitioned into N contiguous operators (docs/design.md#vocabulary,
 * docs/design.md#model-and-partitioning).
 *
 * Operator k is a standalone ONNX sub-model. Between operators the query's state is a set of
 * named tensors, the "boundary": boundary 0 is the model's inputs, boundary N its outputs.
 * Operator k reads its `inputs` from boundary k and writes its `outputs`; the tensors named in
 * `passthrough` are live across operator k without being touched by it (a residual that
 * crosses several cuts) and are carried by the executor, so
 * boundary(k+1) = outputs(k) ∪ passthrough(k).
 *
 * This file holds plain data types only (serializable to `spec.json`); arithmetic on costs
 * lives in `cost.ts`.
 */
import type { TensorDataType } from '../tensor.ts';

/**
 * A cost that scales with the sequence length of the query, per sample:
 * value(seqLen) = c0 + c1·seqLen + c2·seqLen². Multiply by the batch size for a query.
 * CNNs have c1 = c2 = 0; a transformer layer has c2 > 0 (attention scores).
 */
export interface PerSampleCost {
  readonly c0: number;
  readonly c1: number;
  readonly c2: number;
}

/**
 * One named tensor of a (sub-)model interface, shape written like `[batch, seq, 768]`.
 *
 * A number dim is fixed. A string dim is symbolic: the batch axis name, the sequence axis name,
 * another dynamic axis (`DynamicAxes.symbols`), or an expression of them with integer
 * constants, so every dim resolves from (batch, seqLen, symbol values) alone (`model/boundary.ts`
 * `resolveShape`); `?data` (`DATA_DEPENDENT_DIM`) marks a size known only after running (model
 * outputs only). Imported models
 * get such expressions where a tensor's size is derived from the axes, e.g. `batch*seq` after
 * `Reshape([batch, seq, H] → [batch*seq, H])` or `12*batch` for [batch·heads, seq, 64]:
 *
 *     dim    := integer | expr
 *     expr   := ['-'] term (('+' | '-') term)*
 *     term   := factor ('*' factor)*
 *     factor := integer | BATCH | SEQ     (BATCH, SEQ: the axis names, matched literally)
 *
 * Whitespace between tokens is ignored. A plain axis name is the one-factor case. The value
 * must be a non-negative integer. Zoo models use only `batch` and `seq` and this polynomial
 * form. Imports whose sizes are not such polynomials (a stride-8 convolution's `width/8`, two
 * spatial axes) use the general form: `term := unary (('*' unary) | ('/' integer) | ('%'
 * integer))*`, `unary := ['-'] (integer | NAME | '(' expr ')')`, left to right, `/` dividing
 * by a positive constant and rounding down (`floor`; a ceiling is written `(width+7)/8`), NAME
 * any axis or symbol (e.g. `64*(height/4)*(width/4)`, `batch*((width+1)/2)`).
 */
export interface TensorSpec {
  readonly name: string;
  readonly dataType: TensorDataType;
  readonly shape: readonly (number | string)[];
  /**
   * True for a tensor computed from initializers and `Constant` nodes only (no model input,
   * no random op): a weight, not an activation. Absent for activations. Imports fold such
   * tensors into initializers (`model/onnx/constants.ts`), so on a boundary it marks one that
   * could not be folded (e.g. an op of another domain) and is carried on every query.
   */
  readonly constant?: true;
  /**
   * Values a model input accepts (on model inputs only; absent: any value of its type): given
   * in the serving config (`services[i].inputs`), or implied by the graph (an input used as the
   * indices of a Gather over a table of V rows accepts [0, V − 1]). Warm-up and profiling feed
   * values from it; the server answers a request outside it with 400.
   */
  readonly domain?: InputDomain;
}

/**
 * The valid values of one model input: an explicit set (`{ values: [16000] }`) or an inclusive
 * range (`{ range: [0, 30521] }`), compared as numbers (bool: 0/1).
 */
export type InputDomain = { readonly values: readonly number[] } | { readonly range: readonly [number, number] };

/** Metadata of one operator (one contiguous piece of the model). */
export interface OperatorSpec {
  /** 0-based position in the model. */
  readonly index: number;
  /** Human name, e.g. `stem`, `layer3.4`, `conv1_2`, `encoder.0`. */
  readonly name: string;
  /** Inputs of the operator's ONNX sub-model, read from boundary `index`. */
  readonly inputs: readonly TensorSpec[];
  /** Outputs of the operator's ONNX sub-model, written to boundary `index + 1`. */
  readonly outputs: readonly TensorSpec[];
  /** Names of boundary tensors carried across this operator untouched. */
  readonly passthrough: readonly string[];
  /** Number of ONNX nodes in the sub-model (a proxy for kernel launches). */
  readonly nodeCount: number;
  /** Trainable parameters (elements), same convention as torchvision's `numel()` sum. */
  readonly params: number;
  /** Bytes of all initializers of the sub-model (including non-trainable buffers). */
  readonly paramBytes: number;
  /** FLOP per sample in units of GFLOP, multiply-add = 2 FLOP (see `model/onnx/flops.ts`). */
  readonly gflops: PerSampleCost;
  /** Bytes per sample of the tensors read from boundary `index` (the sub-model's inputs). */
  readonly inputBytes: PerSampleCost;
  /** Bytes per sample of the tensors written to boundary `index + 1` (the sub-model's outputs). */
  readonly outputBytes: PerSampleCost;
}

/** Symbolic axes of a model's inputs. */
export interface DynamicAxes {
  /** Name of the batch dimension (always dim 0 of every input and output). */
  readonly batch: string;
  /** Name of the sequence dimension, when the model has one (BERT: `seq`). */
  readonly seq?: string;
  /**
   * The model's other dynamic input dims, each its own symbol named as in the file (a detector's
   * `height` and `width`, `p2o.DynamicDimension.1`), mapped to the size it takes when a caller
   * gives none (warm-up, profiling, synthetic segments, costs): the shape probe's base size.
   * A request binds each from its input dims. Absent for zoo models and for imports with at
   * most one dynamic dim besides the batch (that one is `seq`). Costs (`PerSampleCost`) are
   * evaluated at these sizes and do not scale with them (docs/import.md).
   */
  readonly symbols?: Readonly<Record<string, number>>;
}

/** A partitioned model: interface, operators, totals. Serialized as `spec.json`. */
export interface ModelSpec {
  /** Model name as served (`resnet50`, or the name given at import). */
  readonly name: string;
  /** Where it came from: a zoo builder or an imported file. */
  readonly source:
    | { readonly kind: 'zoo'; readonly options: Record<string, number | string> }
    | {
        readonly kind: 'import';
        readonly file: string;
        /** SHA-256 (hex) of the `.onnx` file. */
        readonly sha256: string;
        /** SHA-256 (hex) of the `.onnx` file and its external data files (the repository's identity of an import); absent in older entries. */
        readonly contentSha256?: string;
        /**
         * Version of the model under its name, ≥ 1 (1 when absent): a different file imported under
         * a taken name without `--force` is the next version (`ModelRepository.importModel`).
         */
        readonly version?: number;
      };
  readonly inputs: readonly TensorSpec[];
  readonly outputs: readonly TensorSpec[];
  readonly dynamicAxes: DynamicAxes;
  /** Sequence length used when a caller gives none (0 for models without a sequence axis). */
  readonly defaultSeqLen: number;
  /**
   * Largest sequence length the model accepts (BERT: its position table, 512 for bert-base);
   * absent when unbounded or unknown (imports). Longer queries are bad requests.
   */
  readonly maxSeqLen?: number;
  readonly operators: readonly OperatorSpec[];
  /** Trainable parameters of the whole model (elements). */
  readonly params: number;
  readonly opset: number;
}

/**
 * Largest batch size any query or segment may ask for: far beyond what any model here fits in
 * device memory, small enough that per-operator costs (FLOP, bytes) stay finite numbers.
 */
export const MAX_BATCH_SIZE = 65_536;
/** Largest sequence length any query or segment may ask for (a model's own `maxSeqLen` may be lower). */
export const MAX_SEQ_LEN = 1_048_576;
