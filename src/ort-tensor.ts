/**
 * The one bridge from host tensors to onnxruntime tensors, used by the executors and by the
 * verification helpers.
 */
import { Tensor } from 'onnxruntime-node';
import type { HostTensor } from './tensor.ts';

/** A host tensor or an onnxruntime tensor. */
export type TensorLike = Tensor | HostTensor;

/** True for a plain host tensor (it carries `dataType`; ORT tensors carry `type`). */
export function isHostTensor(t: TensorLike): t is HostTensor {
  return 'dataType' in t;
}

/**
 * An onnxruntime tensor sharing the data of `t` (no copy; returned as is when it already is one).
 * @throws TypeError from ORT on a data/type mismatch.
 */
export function toOrtTensor(t: TensorLike): Tensor {
  if (!isHostTensor(t)) return t;
  return new Tensor(t.dataType, t.data, [...t.dims]);
}
