/**
 * A served model as the front ends see it: the settings of its service (`ServedModel`) and what
 * is computed from them once, when it is added — its v2 metadata, its Triton model
 * configuration (docs/serving.md "Model configuration"), and the per-input datatypes that
 * request validation (`validate.ts`) checks against.
 */
import { MAX_SEQ_LEN, type ModelSpec, type TensorSpec } from '../model/spec.ts';
import { fixedBatchOf } from '../model/boundary.ts';
import type { BatchingLimits } from '../schedule/controller.ts';
import type { ConfigDataType, ModelConfig, ModelConfigTensor, ModelMetadata, TensorMetadata, V2Datatype } from './inference.ts';
import { v2Datatype } from './tensors.ts';

/** The version of a model served without versions (a zoo model, an import's first version). */
export const MODEL_VERSION = '1';

/** One served model (a service of the config with its model resolved), one version of it. */
export interface ServedModel {
  /**
   * The runtime's service name, unique in the server: the served name, or `name@v` for one
   * version of a model served in several (`deployment/versions.ts`).
   */
  readonly name: string;
  /** The name clients address it by (URL path, `model_name`) [`name`]. */
  readonly modelName?: string;
  /** Its version as clients address it (`/versions/{v}/`, `model_version`) [`MODEL_VERSION`]. */
  readonly version?: string;
  readonly spec: ModelSpec;
  /** Default QoS target of its requests, ms. */
  readonly qosTargetMs: number;
  /** Largest `parameters.qos_ms` a request may ask for, ms (≥ qosTargetMs). */
  readonly maxQosMs: number;
  /** Batch sizes a request may have (dim 0 of its inputs). */
  readonly batchSizes: readonly number[];
  /** Most queries waiting in its queue; more are rejected `overloaded`. */
  readonly maxQueueLength: number;
  /**
   * Dynamic batching limits (`RuntimeService.batching`): a fusing policy may run up to
   * `maxBatchSize` samples of its waiting requests as one batch. Absent: every request runs
   * alone. Only for a model whose queries can fuse (`batchingBlockerOf` in `runtime/config.ts`);
   * `start` throws otherwise.
   */
  readonly batching?: BatchingLimits;
  /** Class labels by class index for the classification extension (config `labels`); absent: none. */
  readonly labels?: readonly string[];
}

/** A model input with its v2 datatype. */
export interface InputPlan {
  readonly spec: TensorSpec;
  readonly datatype: V2Datatype;
}

/** A served model with what the front ends show of it, computed once (`prepareServedModel`). */
export interface Served extends ServedModel {
  readonly modelName: string;
  readonly version: string;
  /** Given in the config (else loaded at runtime from a load request's `config`). */
  readonly configured: boolean;
  readonly inputs: readonly InputPlan[];
  readonly outputs: readonly TensorMetadata[];
  readonly metadata: ModelMetadata;
  readonly config: ModelConfig;
  readonly fixedBatch: number | undefined;
  readonly maxSeqLen: number;
}

/** The `model_config.proto` `DataType` of a v2 datatype: `TYPE_` + the name, `TYPE_STRING` for BYTES. */
export function configDataType(t: V2Datatype): ConfigDataType {
  return t === 'BYTES' ? 'TYPE_STRING' : `TYPE_${t}`;
}

/**
 * The Triton model configuration of `m` (see `ModelConfig`): when dim 0 of every input and
 * output is the model's batch axis, `max_batch_size` is the largest batch the server executes —
 * the largest of the service's request batch sizes and, with dynamic batching, of the fused
 * batches (`batching.maxBatchSize`) — and the dims leave out dim 0, as Triton's do; otherwise (a
 * fixed batch, no batch axis) 0 and the full shapes. Derived dims (`batch*seq`) and the sequence
 * axis are -1. `dynamic_batching` when the service batches (`maxQueueDelayMs` × 1000 µs).
 */
function modelConfigOf(m: ServedModel, platform: string, fixedBatch: number | undefined): ModelConfig {
  const tensors = [...m.spec.inputs, ...m.spec.outputs];
  const batched = fixedBatch === undefined && m.spec.dynamicAxes.batch !== undefined && tensors.every((t) => t.shape[0] === m.spec.dynamicAxes.batch);
  const tensor = (t: TensorSpec): ModelConfigTensor => ({ name: t.name, data_type: configDataType(v2Datatype(t.dataType)), dims: metadataShape(t).slice(batched ? 1 : 0) });
  return {
    name: m.modelName ?? m.name,
    platform,
    max_batch_size: batched ? Math.max(...m.batchSizes, m.batching?.maxBatchSize ?? 0) : 0,
    input: m.spec.inputs.map(tensor),
    output: m.spec.outputs.map(tensor),
    ...(m.batching === undefined ? {} : { dynamic_batching: { preferred_batch_size: [...m.batching.preferredBatchSizes], max_queue_delay_microseconds: Math.round(m.batching.maxQueueDelayMs * 1000) } }),
  };
}

/** A tensor's shape for the v2 metadata: -1 for every symbolic dim. */
export function metadataShape(t: TensorSpec): number[] {
  return t.shape.map((d) => (typeof d === 'number' ? d : -1));
}

/**
 * `m` with its metadata and configuration on `platform` (`ModelMetadata.platform`).
 * @throws RangeError for bad QoS or batch settings, naming the model.
 */
export function prepareServedModel(m: ServedModel, configured: boolean, platform: string): Served {
  if (!(m.qosTargetMs > 0) || !(m.maxQosMs >= m.qosTargetMs)) throw new RangeError(`RuntimeBackend: model '${m.name}' needs 0 < qosTargetMs ≤ maxQosMs, got ${m.qosTargetMs} and ${m.maxQosMs}`);
  if (m.batchSizes.length === 0) throw new RangeError(`RuntimeBackend: model '${m.name}' has no batch sizes`);
  const inputs = m.spec.inputs.map((t) => ({ spec: t, datatype: v2Datatype(t.dataType) }));
  const outputs = m.spec.outputs.map((t) => ({ name: t.name, datatype: v2Datatype(t.dataType), shape: metadataShape(t) }));
  const fixedBatch = fixedBatchOf(m.spec);
  const modelName = m.modelName ?? m.name;
  return {
    ...m,
    modelName,
    version: m.version ?? MODEL_VERSION,
    configured,
    inputs,
    outputs,
    config: modelConfigOf(m, platform, fixedBatch),
    fixedBatch,
    maxSeqLen: m.spec.maxSeqLen ?? MAX_SEQ_LEN,
    metadata: {
      name: modelName,
      versions: [m.version ?? MODEL_VERSION],
      platform,
      inputs: inputs.map((i) => ({ name: i.spec.name, datatype: i.datatype, shape: metadataShape(i.spec), ...(i.spec.domain === undefined ? {} : { parameters: { ...i.spec.domain } }) })),
      outputs,
    },
  };
}

/** The served versions of the model clients call `name`, ascending by version. */
export function versionsOf(models: Iterable<Served>, name: string): Served[] {
  return [...models].filter((m) => m.modelName === name).sort((a, b) => Number(a.version) - Number(b.version));
}

/**
 * The version a request without a version goes to, among `versions` (ascending): the highest
 * READY one, else the highest (whose state the request is then answered with); undefined for none.
 */
export function pickVersion(versions: readonly Served[], isReady: (key: string) => boolean): Served | undefined {
  return versions.filter((m) => isReady(m.name)).at(-1) ?? versions.at(-1);
}
