/**
 * Triton's classification extension: a request asks for the top `k` classes of an output
 * instead of its raw values (`outputs[i].parameters.classification = k` over HTTP and gRPC;
 * tritonclient's `InferRequestedOutput(name, class_count=k)`). That output is answered as a
 * BYTES tensor of shape `[batch, k']` (a model with `max_batch_size` 0: `[k']`), k' = min(k,
 * classes per row), each element `"<value>:<index>[:<label>]"`: the value at that class index,
 * the index in the row (the row's elements flattened), and the label when the service has a
 * labels file (config `labels`, one label per line, line i for class i). Highest value first;
 * equal values by lower index. Values are written as C's `%f` (six decimals) for floating-point
 * outputs and as integers for integer outputs, as Triton writes them.
 *
 * Spec: https://github.com/triton-inference-server/server/blob/main/docs/protocol/extension_classification.md
 */
import type { HostTensor } from '../tensor.ts';
import { elementCount, halfToNumber } from '../tensor.ts';
import { ServeError } from './inference.ts';
import { describeValue } from './tensors.ts';

/** The output parameter that asks for classification (Triton's name). */
export const CLASSIFICATION_PARAMETER = 'classification';

/** Most classes one output may ask for (the count is checked before anything runs). */
export const MAX_CLASS_COUNT = 1_000_000;

/**
 * The class count a request gives for output `name` (`parameters.classification`).
 * @param value a positive integer, or a decimal string of one (gRPC int64 parameters arrive as strings).
 * @throws ServeError bad_request naming the output and the parameter.
 */
export function classCountOf(model: string, name: string, value: unknown): number {
  const n = typeof value === 'string' && /^[0-9]{1,16}$/.test(value) ? Number(value) : typeof value === 'bigint' ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < 1 || n > MAX_CLASS_COUNT) {
    throw new ServeError('bad_request', `model '${model}': output '${name}': parameters.${CLASSIFICATION_PARAMETER} must be an integer in [1, ${MAX_CLASS_COUNT}] (the number of top classes to return), got ${describeValue(value)}`);
  }
  return n;
}

/** Whether an output of this datatype can be classified (numbers only: not BYTES, not BOOL). */
export function classifiable(dataType: HostTensor['dataType']): boolean {
  return dataType !== 'string' && dataType !== 'bool';
}

/** C's `%f` of a number (what `std::to_string(float)` writes). */
function percentF(v: number): string {
  if (Number.isNaN(v)) return 'nan';
  if (!Number.isFinite(v)) return v > 0 ? 'inf' : '-inf';
  return v.toFixed(6);
}

/**
 * The top-`count` classes of each row of `tensor` (see the file docs).
 * @param tensor an output, `[batch, …]` when `batched` (each batch row classified), else one row.
 * @param labels class labels by index; a missing or empty one leaves the label out.
 * @returns a BYTES (`string`) tensor `[batch, k']` when batched, else `[k']`.
 * @throws ServeError bad_request for a BYTES or BOOL output (a 400 the request's own fault).
 */
export function classify(tensor: HostTensor, count: number, batched: boolean, labels?: readonly string[], where = 'the output'): HostTensor {
  const data = tensor.data;
  if (Array.isArray(data) || !classifiable(tensor.dataType)) throw new ServeError('bad_request', `${where}: parameters.${CLASSIFICATION_PARAMETER}: a ${tensor.dataType} output has no classes to rank`);
  const rows = batched ? (tensor.dims[0] ?? 1) : 1;
  const total = elementCount(tensor.dims);
  const perRow = rows === 0 ? 0 : total / rows;
  const k = Math.min(count, perRow);
  const half = tensor.dataType === 'float16';
  const floating = half || tensor.dataType === 'float32' || tensor.dataType === 'float64';
  const out: string[] = [];
  for (let r = 0; r < rows; r++) {
    const base = r * perRow;
    const index = Array.from({ length: perRow }, (_, i) => i);
    const at = (i: number): number | bigint => {
      const raw = data[base + i]!;
      return half ? halfToNumber(Number(raw)) : raw;
    };
    index.sort((a, b) => {
      const va = at(a);
      const vb = at(b);
      // NaN ranks last; equal values by lower index
      const na = typeof va === 'number' && Number.isNaN(va);
      const nb = typeof vb === 'number' && Number.isNaN(vb);
      if (na || nb) return na === nb ? a - b : na ? 1 : -1;
      return va > vb ? -1 : va < vb ? 1 : a - b;
    });
    for (let j = 0; j < k; j++) {
      const i = index[j]!;
      const v = at(i);
      const value = typeof v === 'bigint' ? v.toString() : floating ? percentF(v) : String(v);
      const label = labels?.[i];
      out.push(label === undefined || label === '' ? `${value}:${i}` : `${value}:${i}:${label}`);
    }
  }
  return { dataType: 'string', dims: batched ? [rows, k] : [k], data: out };
}
