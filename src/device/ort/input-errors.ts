/**
 * Which onnxruntime failures blame a query's inputs rather than the device. The server
 * validates each request against the model's declared shapes and value domains before it runs,
 * but a graph can still refuse dims or values its declaration allows: a Paddle export with
 * dynamic H and W whose branches only line up at multiples of 32, a token id beyond BERT's
 * vocabulary. Those are the request's fault — answered 400 `bad_request`, which clients and
 * balancers do not retry — while everything else stays `device_failure` (503, retryable).
 *
 * Each pattern is a message onnxruntime 1.30's CPU kernels write, captured from a failing run
 * (element_wise_ops.h `BroadcastIterator::Init`, matmul_helper.h, concatbase.h,
 * reshape_helper.h, the Gather kernels). The session's own check of an operator file's inputs
 * ("Got invalid dimensions for input") is left a device failure: the server already checked
 * the request against the model's declared shapes, so an operator refusing the dims it was
 * given is a model whose declaration does not hold, not a bad request.
 */
export const INPUT_REFUSAL_PATTERNS: readonly RegExp[] = [
  /indices element out of data bounds/i, // Gather/GatherElements: an index outside its table
  /Attempting to broadcast an axis by a dimension other than 1/i, // element-wise ops: shapes that do not broadcast
  /MatMul dimension mismatch/i,
  /Non concat axis dimensions must match/i,
  /cannot be reshaped to the requested shape/i,
];

/** Whether an onnxruntime error message blames the query's inputs (see the file docs). */
export function refusesInputs(detail: string): boolean {
  return INPUT_REFUSAL_PATTERNS.some((p) => p.test(detail));
}
