/**
 * Which onnxruntime failures are the request's fault (`device/ort/input-errors.ts`): the
 * messages below were captured from onnxruntime-node 1.30 running small graphs with inputs
 * whose dims the graph's declaration allows but its operators refuse; each must be a
 * `bad_request`, and failures of the device itself must not.
 */
import { describe, expect, it } from 'vitest';
import { refusesInputs } from '../src/device/ort/input-errors.ts';

const REFUSALS = [
  "Non-zero status code returned while running Add node. Name:'' Status Message: /onnxruntime_src/onnxruntime/core/providers/cpu/math/element_wise_ops.h:563 void onnxruntime::BroadcastIterator::Init(ptrdiff_t, ptrdiff_t) axis == 1 || axis == largest was false. Attempting to broadcast an axis by a dimension other than 1. 25 by 26",
  "Non-zero status code returned while running MatMul node. Name:'' Status Message: matmul_helper.h:59 Compute MatMul dimension mismatch",
  "Non-zero status code returned while running Concat node. Name:'' Status Message: concatbase.h:133 PrepareForComputeImpl Non concat axis dimensions must match: Axis 1 has mismatched dimensions of 6 and 5",
  "Non-zero status code returned while running Reshape node. Name:'' Status Message: /onnxruntime_src/onnxruntime/core/providers/cpu/tensor/reshape_helper.h:84 onnxruntime::ReshapeHelper::ReshapeHelper(const onnxruntime::TensorShape&, onnxruntime::TensorShapeVector&, bool) size != 0 && (input_shape_size % size) == 0 was false. The input tensor cannot be reshaped to the requested shape. Input shape:{1,5}, requested shape:{1,2,-1}",
  "Non-zero status code returned while running Gather node. Name:'emb' Status Message: indices element out of data bounds, idx=99999999 must be within the inclusive range [-30522,30521]",
];

const DEVICE_FAILURES = [
  'executor exited with signal SIGKILL while running the group',
  "Non-zero status code returned while running Conv node. Name:'conv1' Status Message: Failed to allocate memory for requested buffer of size 1073741824",
  'the executor did not answer within 30000 ms',
  // an operator file refusing the dims the model's declaration allows: the model is at fault
  'Got invalid dimensions for input: x for the following indices\n index: 0 Got: 2 Expected: 1\n Please fix either the inputs/outputs or the model.',
];

describe('refusesInputs', () => {
  it('blames the inputs for shape and index refusals of onnxruntime kernels', () => {
    for (const m of REFUSALS) expect(refusesInputs(m), m.slice(0, 80)).toBe(true);
  });
  it('leaves the device at fault for crashes, allocation failures and timeouts', () => {
    for (const m of DEVICE_FAILURES) expect(refusesInputs(m), m).toBe(false);
  });
});
