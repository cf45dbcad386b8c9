/**
 * ONNX element types (`TensorProto.DataType`, onnx/onnx `onnx.proto`): sizes, names and the
 * mapping to onnxruntime-node's tensor type strings and to this project's `TensorDataType`.
 */
import { InvalidModelError } from '../../errors.ts';
import type { TensorDataType } from '../../tensor.ts';
import { tensorDataTypeOf } from './builder.ts';
import { onnx } from './proto.ts';

const DT = onnx.TensorProto.DataType;

/** Bytes per element of each fixed-size ONNX element type (STRING and UNDEFINED have none). */
const ELEMENT_BYTES: ReadonlyMap<number, number> = new Map([
  [DT.FLOAT, 4],
  [DT.UINT8, 1],
  [DT.INT8, 1],
  [DT.UINT16, 2],
  [DT.INT16, 2],
  [DT.INT32, 4],
  [DT.INT64, 8],
  [DT.BOOL, 1],
  [DT.FLOAT16, 2],
  [DT.DOUBLE, 8],
  [DT.UINT32, 4],
  [DT.UINT64, 8],
  [DT.COMPLEX64, 8],
  [DT.COMPLEX128, 16],
  [DT.BFLOAT16, 2],
]);

/** Bytes per element of an ONNX element type; undefined for strings and unknown types. */
export function elementBytes(elemType: number): number | undefined {
  return ELEMENT_BYTES.get(elemType);
}

/** Floating-point element types. */
export function isFloatType(elemType: number): boolean {
  return FLOAT_TYPES.has(elemType);
}

const FLOAT_TYPES: ReadonlySet<number> = new Set<number>([DT.FLOAT, DT.FLOAT16, DT.DOUBLE, DT.BFLOAT16]);

/**
 * Element types whose initializers count as parameters: floating point, and the integer types
 * quantized weights and biases use (INT8/UINT8 weights of QLinearConv/ConvInteger/MatMulInteger,
 * INT32 biases; INT16/UINT16/UINT32 for wider quantization). INT64, UINT64, BOOL and STRING
 * initializers are not parameters: the ONNX operator spec types shapes, axes, pads and indices
 * (Reshape, Slice, Pad, Gather, …) as int64, and masks as bool.
 */
export function isParameterType(elemType: number): boolean {
  return FLOAT_TYPES.has(elemType) || QUANTIZED_TYPES.has(elemType);
}

const QUANTIZED_TYPES: ReadonlySet<number> = new Set<number>([DT.INT8, DT.UINT8, DT.INT16, DT.UINT16, DT.INT32, DT.UINT32]);

/** onnxruntime-node `Tensor.type` names ↔ ONNX element types (the types ORT's JS API can hold). */
const ORT_TYPES: ReadonlyArray<readonly [string, number]> = [
  ['float32', DT.FLOAT],
  ['uint8', DT.UINT8],
  ['int8', DT.INT8],
  ['uint16', DT.UINT16],
  ['int16', DT.INT16],
  ['int32', DT.INT32],
  ['int64', DT.INT64],
  ['string', DT.STRING],
  ['bool', DT.BOOL],
  ['float16', DT.FLOAT16],
  ['float64', DT.DOUBLE],
  ['uint32', DT.UINT32],
  ['uint64', DT.UINT64],
];

/** ONNX element type of an onnxruntime tensor type name; undefined when unknown. */
export function elemTypeOfOrt(type: string): number | undefined {
  return ORT_TYPES.find(([name]) => name === type)?.[1];
}

/** onnxruntime tensor type name of an ONNX element type; undefined when ORT's JS API has none. */
export function ortTypeOf(elemType: number): string | undefined {
  return ORT_TYPES.find(([, t]) => t === elemType)?.[0];
}

/** Name of an ONNX element type for messages (`FLOAT`, `INT64`, …). */
export function elemTypeName(elemType: number): string {
  return (DT as unknown as Record<number, string>)[elemType] ?? `type ${elemType}`;
}

/**
 * The project's `TensorDataType` of a boundary tensor.
 * @throws InvalidModelError naming the tensor when its type is not one the executors carry.
 */
export function boundaryDataType(elemType: number, tensor: string, what: string): TensorDataType {
  try {
    return tensorDataTypeOf(elemType);
  } catch (cause) {
    throw new InvalidModelError(`${what}: tensor '${tensor}' crosses an operator boundary with element type ${elemTypeName(elemType)}, which executors cannot carry`, { cause });
  }
}
