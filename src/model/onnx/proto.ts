/**
 * The one place that imports the ONNX protobuf classes (`onnx-proto`, generated from
 * onnx/onnx v1.10.2 `onnx.proto3`, IR version 8). Everything else imports `onnx` from here.
 */
import onnxProto from 'onnx-proto';

export const onnx = onnxProto.onnx;
export type { onnx as OnnxTypes } from 'onnx-proto';

/** ONNX opset version every builder in this project emits (ai.onnx domain). */
export const ZOO_OPSET = 17;
/** IR version written by the builders; ORT 1.30 reads IR ≤ 10 (onnx-proto knows up to 8). */
export const ZOO_IR_VERSION = 8;
