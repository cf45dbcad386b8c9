/**
 * GraphBuilder: emits ONNX graphs (opset 17, IR 8) from TypeScript, with seeded weights and
 * full shape annotations (`value_info` with symbolic dims such as `batch`, `seq`), and records
 * which operator (contiguous piece of the model) every node belongs to.
 *
 * Weights: deterministic uniform values in [-bound, bound] from a seeded PRNG (seedrandom's
 * alea). With `withWeights: false` initializers carry dims and type but no data — enough for
 * shape/FLOP analysis and listing without materializing hundreds of MB.
 */
import seedrandom from 'seedrandom';
import { onnx, ZOO_IR_VERSION, ZOO_OPSET } from './proto.ts';
import type { OnnxTypes } from './proto.ts';
import type { TensorDataType } from '../../tensor.ts';

/** A dim: fixed size or symbolic name. */
export type Dim = number | string;
export type Shape = readonly Dim[];

/** Attribute values accepted by `node()`. Integers vs floats: see `AttrValue` docs. */
export type AttrValue =
  | { readonly int: number }
  | { readonly ints: readonly number[] }
  | { readonly float: number }
  | { readonly floats: readonly number[] }
  | { readonly string: string }
  /** A subgraph (If branches, Loop and Scan bodies). */
  | { readonly graph: OnnxTypes.IGraphProto };

/** How to fill an initializer. */
export type WeightInit =
  /** Uniform in [-bound, bound] (PyTorch's default Kaiming-uniform init uses bound = 1/sqrt(fanIn)·gain…). */
  | { readonly kind: 'uniform'; readonly bound: number }
  /** Every element equal to `value`. */
  | { readonly kind: 'constant'; readonly value: number }
  /** Explicit values (float32 or int64 initializer depending on `dataType`). */
  | { readonly kind: 'values'; readonly values: readonly number[] };

const ONNX_TYPE: Readonly<Record<TensorDataType, number>> = {
  float32: onnx.TensorProto.DataType.FLOAT,
  uint8: onnx.TensorProto.DataType.UINT8,
  int8: onnx.TensorProto.DataType.INT8,
  int32: onnx.TensorProto.DataType.INT32,
  int64: onnx.TensorProto.DataType.INT64,
  bool: onnx.TensorProto.DataType.BOOL,
  float16: onnx.TensorProto.DataType.FLOAT16,
  float64: onnx.TensorProto.DataType.DOUBLE,
  uint16: onnx.TensorProto.DataType.UINT16,
  int16: onnx.TensorProto.DataType.INT16,
  uint32: onnx.TensorProto.DataType.UINT32,
  uint64: onnx.TensorProto.DataType.UINT64,
  string: onnx.TensorProto.DataType.STRING,
};

/** ONNX TensorProto.DataType number of a data type. */
export function onnxDataType(t: TensorDataType): number {
  return ONNX_TYPE[t];
}

/** Inverse of `onnxDataType`. @throws RangeError for types this project does not serve. */
export function tensorDataTypeOf(onnxType: number): TensorDataType {
  for (const [k, v] of Object.entries(ONNX_TYPE)) if (v === onnxType) return k as TensorDataType;
  throw new RangeError(`ONNX data type ${onnxType} is not supported (supported: ${Object.keys(ONNX_TYPE).join(', ')})`);
}

/** A typed value-info proto with a (possibly symbolic) shape. */
export function valueInfo(name: string, dataType: TensorDataType, shape: Shape): OnnxTypes.IValueInfoProto {
  return {
    name,
    type: {
      tensorType: {
        elemType: ONNX_TYPE[dataType],
        shape: { dim: shape.map((d) => (typeof d === 'number' ? { dimValue: d } : { dimParam: d })) },
      },
    },
  };
}

export interface GraphBuilderOptions {
  /** Graph and model name. */
  readonly name: string;
  /** PRNG seed for weights. */
  readonly seed: number;
  /** Materialize initializer data (default true). */
  readonly withWeights?: boolean;
  readonly opset?: number;
}

/** What `build()` returns. */
export interface BuiltGraph {
  readonly model: OnnxTypes.ModelProto;
  /** `operatorOfNode[i]` = operator index of `model.graph.node[i]` (non-decreasing). */
  readonly operatorOfNode: readonly number[];
  /** `operatorNames[k]` = name given to operator k by `beginOperator`. */
  readonly operatorNames: readonly string[];
  /** Initializers that are not trainable parameters (BatchNorm running stats, shape constants). */
  readonly nonTrainable: ReadonlySet<string>;
}

export class GraphBuilder {
  private readonly nodes: OnnxTypes.INodeProto[] = [];
  private readonly nodeOperator: number[] = [];
  private readonly operatorNames: string[] = [];
  private readonly inputs: OnnxTypes.IValueInfoProto[] = [];
  private readonly outputs: OnnxTypes.IValueInfoProto[] = [];
  private readonly valueInfos: OnnxTypes.IValueInfoProto[] = [];
  private readonly initializers: OnnxTypes.ITensorProto[] = [];
  private readonly nonTrainable = new Set<string>();
  private readonly shapes = new Map<string, { dataType: TensorDataType; shape: Shape }>();
  private readonly rng: () => number;
  private readonly withWeights: boolean;
  private nameCounter = 0;
  private currentOperator = -1;

  constructor(private readonly options: GraphBuilderOptions) {
    this.rng = seedrandom.alea(String(options.seed));
    this.withWeights = options.withWeights ?? true;
  }

  /** Start operator `operatorNames.length`; every node added afterwards belongs to it. */
  beginOperator(name: string): number {
    this.operatorNames.push(name);
    this.currentOperator = this.operatorNames.length - 1;
    return this.currentOperator;
  }

  /** A fresh value name `prefix_N`. */
  fresh(prefix: string): string {
    this.nameCounter += 1;
    return `${prefix}_${this.nameCounter}`;
  }

  /** Declare a graph input. Returns its name. */
  input(name: string, dataType: TensorDataType, shape: Shape): string {
    this.inputs.push(valueInfo(name, dataType, shape));
    this.shapes.set(name, { dataType, shape });
    return name;
  }

  /** Declare an existing value as a graph output (its shape must be known). */
  output(name: string): void {
    const info = this.shapeOf(name);
    this.outputs.push(valueInfo(name, info.dataType, info.shape));
  }

  /** Shape and type of a value added earlier. @throws RangeError for an unknown value. */
  shapeOf(name: string): { dataType: TensorDataType; shape: Shape } {
    const s = this.shapes.get(name);
    if (!s) throw new RangeError(`GraphBuilder: unknown value '${name}'`);
    return s;
  }

  /**
   * Add an initializer. `trainable: false` marks buffers (BN running stats, shape constants)
   * that torchvision does not count as parameters.
   */
  initializer(name: string, dims: readonly number[], init: WeightInit, opts: { dataType?: 'float32' | 'int64'; trainable?: boolean } = {}): string {
    const dataType = opts.dataType ?? 'float32';
    const count = dims.reduce((a, b) => a * b, 1);
    const tensor: OnnxTypes.ITensorProto = { name, dims: [...dims], dataType: ONNX_TYPE[dataType] };
    if (this.withWeights || init.kind === 'values' || dataType === 'int64') {
      if (dataType === 'int64') {
        const values = init.kind === 'values' ? init.values : new Array<number>(count).fill(init.kind === 'constant' ? init.value : 0);
        const data = new BigInt64Array(count);
        for (let i = 0; i < count; i++) data[i] = BigInt(values[i] ?? 0);
        tensor.rawData = new Uint8Array(data.buffer);
      } else {
        const data = new Float32Array(count);
        if (init.kind === 'uniform') {
          const rng = this.rng;
          const twoBound = 2 * init.bound;
          for (let i = 0; i < count; i++) data[i] = (rng() - 0.5) * twoBound;
        } else if (init.kind === 'constant') {
          data.fill(init.value);
        } else {
          data.set(init.values);
        }
        tensor.rawData = new Uint8Array(data.buffer);
      }
    }
    this.initializers.push(tensor);
    if (opts.trainable === false) this.nonTrainable.add(name);
    this.shapes.set(name, { dataType, shape: [...dims] });
    return name;
  }

  /**
   * Add a node. `outputShapes` gives the shape of each output (required: the builder keeps
   * every value annotated). Output names are fresh unless given.
   * @returns the output names.
   */
  node(
    opType: string,
    inputs: readonly string[],
    outputShapes: readonly Shape[],
    opts: { attrs?: Record<string, AttrValue>; outputs?: readonly string[]; dataType?: TensorDataType; outputDataTypes?: readonly TensorDataType[] } = {},
  ): string[] {
    if (this.currentOperator < 0) throw new RangeError('GraphBuilder: call beginOperator() before adding nodes');
    const outs = opts.outputs ? [...opts.outputs] : outputShapes.map(() => this.fresh(opType.toLowerCase()));
    const attribute: OnnxTypes.IAttributeProto[] = [];
    for (const [name, v] of Object.entries(opts.attrs ?? {})) attribute.push(toAttribute(name, v));
    this.nodes.push({ opType, input: [...inputs], output: outs, name: this.fresh(`${opType}`), attribute });
    this.nodeOperator.push(this.currentOperator);
    outs.forEach((o, i) => {
      const dataType = opts.outputDataTypes?.[i] ?? opts.dataType ?? 'float32';
      const shape = outputShapes[i] ?? [];
      this.shapes.set(o, { dataType, shape });
      this.valueInfos.push(valueInfo(o, dataType, shape));
    });
    return outs;
  }

  /** Assemble the ModelProto. Graph outputs are excluded from `value_info`. */
  build(): BuiltGraph {
    const outputNames = new Set(this.outputs.map((o) => o.name));
    const graph: OnnxTypes.IGraphProto = {
      name: this.options.name,
      node: this.nodes,
      input: this.inputs,
      output: this.outputs,
      initializer: this.initializers,
      valueInfo: this.valueInfos.filter((v) => !outputNames.has(v.name)),
    };
    const model = onnx.ModelProto.create({
      irVersion: ZOO_IR_VERSION,
      producerName: 'abacus-ts',
      opsetImport: [{ domain: '', version: this.options.opset ?? ZOO_OPSET }],
      graph,
    });
    return { model, operatorOfNode: this.nodeOperator, operatorNames: this.operatorNames, nonTrainable: this.nonTrainable };
  }
}

function toAttribute(name: string, v: AttrValue): OnnxTypes.IAttributeProto {
  const T = onnx.AttributeProto.AttributeType;
  if ('int' in v) return { name, type: T.INT, i: v.int };
  if ('ints' in v) return { name, type: T.INTS, ints: [...v.ints] };
  if ('float' in v) return { name, type: T.FLOAT, f: v.float };
  if ('floats' in v) return { name, type: T.FLOATS, floats: [...v.floats] };
  if ('graph' in v) return { name, type: T.GRAPH, g: v.graph };
  return { name, type: T.STRING, s: new TextEncoder().encode(v.string) };
}
