/**
 * Loading `grpc_service.proto` (KServe v2 `inference.GRPCInferenceService`) at runtime with
 * @grpc/proto-loader, and the TypeScript shapes of its messages as the loader produces them.
 * Server (`server.ts`) and client (`../client/grpc-client.ts`) load the same file.
 *
 * Loader options and why:
 * - `keepCase: true`: field names exactly as in the spec (`model_name`, `raw_input_contents`).
 * - `longs: String`: every int64/uint64 (shapes, `int64_contents`, `uint64_contents`,
 *   `int64_param`) decodes to a decimal string, so values beyond 2^53 arrive losslessly and
 *   nothing depends on the `long` package. Encoding accepts numbers or decimal strings; we send
 *   decimal strings for INT64/UINT64 data and numbers for shapes.
 * - `defaults: true`, `arrays: true`: absent scalars decode to their proto3 default (`""`, `0`,
 *   `false`), absent repeated fields to `[]`, absent messages (`contents`) to `null`.
 * - `oneofs: true`: an `InferParameter` carries `parameter_choice` naming the member set.
 * - bytes decode to `Buffer` (the loader's default).
 *
 * Spec: https://github.com/kserve/open-inference-protocol/blob/main/specification/protocol/inference_grpc.md
 */
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

/** The proto file beside this module. */
export const GRPC_SERVICE_PROTO_PATH = fileURLToPath(new URL('./grpc_service.proto', import.meta.url));

/** Fully qualified service name. */
export const GRPC_SERVICE_NAME = 'inference.GRPCInferenceService';

/** proto-loader options shared by server and client (see the module docstring). */
export const PROTO_LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  arrays: true,
  oneofs: true,
};

/** An int64/uint64 as the loader decodes it (decimal string) or as we may encode it. */
export type Int64Wire = string | number;

/** `InferParameter`: one of the members is set; `parameter_choice` names it (decoded side). */
export interface InferParameterMessage {
  bool_param?: boolean;
  int64_param?: Int64Wire;
  string_param?: string;
  double_param?: number;
  uint64_param?: Int64Wire;
  parameter_choice?: 'bool_param' | 'int64_param' | 'string_param' | 'double_param' | 'uint64_param';
}

/** `InferTensorContents`: the repeated field matching the tensor's datatype. */
export interface InferTensorContentsMessage {
  bool_contents?: boolean[];
  int_contents?: number[];
  int64_contents?: Int64Wire[];
  uint_contents?: number[];
  uint64_contents?: Int64Wire[];
  fp32_contents?: number[];
  fp64_contents?: number[];
  bytes_contents?: Uint8Array[];
}

export type ParameterMap = Record<string, InferParameterMessage>;

export interface InferInputTensorMessage {
  name?: string;
  datatype?: string;
  shape?: Int64Wire[];
  parameters?: ParameterMap;
  contents?: InferTensorContentsMessage | null;
}

export interface InferRequestedOutputTensorMessage {
  name?: string;
  parameters?: ParameterMap;
}

export interface ModelInferRequestMessage {
  model_name?: string;
  model_version?: string;
  id?: string;
  parameters?: ParameterMap;
  inputs?: InferInputTensorMessage[];
  outputs?: InferRequestedOutputTensorMessage[];
  raw_input_contents?: Uint8Array[];
}

export interface InferOutputTensorMessage {
  name?: string;
  datatype?: string;
  shape?: Int64Wire[];
  parameters?: ParameterMap;
  contents?: InferTensorContentsMessage | null;
}

export interface ModelInferResponseMessage {
  model_name?: string;
  model_version?: string;
  id?: string;
  parameters?: ParameterMap;
  outputs?: InferOutputTensorMessage[];
  raw_output_contents?: Uint8Array[];
}

/** Triton's `ModelStreamInferResponse`: an answer, or an error with the request's id. */
export interface ModelStreamInferResponseMessage {
  error_message?: string;
  infer_response?: ModelInferResponseMessage | null;
}

export type EmptyMessage = Record<string, never>;
export interface ServerLiveResponseMessage { live?: boolean }
export interface ServerReadyResponseMessage { ready?: boolean }
export interface ModelReadyRequestMessage { name?: string; version?: string }
export interface ModelReadyResponseMessage { ready?: boolean }
export interface ServerMetadataResponseMessage { name?: string; version?: string; extensions?: string[] }
export interface ModelMetadataRequestMessage { name?: string; version?: string }
export interface TensorMetadataMessage { name?: string; datatype?: string; shape?: Int64Wire[] }
export interface ModelMetadataResponseMessage {
  name?: string;
  versions?: string[];
  platform?: string;
  inputs?: TensorMetadataMessage[];
  outputs?: TensorMetadataMessage[];
}

export interface ModelConfigRequestMessage { name?: string; version?: string }
export interface ModelConfigTensorMessage { name?: string; data_type?: string; dims?: Int64Wire[] }
export interface ModelConfigMessage {
  name?: string;
  platform?: string;
  max_batch_size?: number;
  input?: ModelConfigTensorMessage[];
  output?: ModelConfigTensorMessage[];
  dynamic_batching?: { preferred_batch_size?: number[]; max_queue_delay_microseconds?: Int64Wire } | null;
  /** Decoded side (`oneofs: true`): `dynamic_batching` when set. */
  scheduling_choice?: 'dynamic_batching';
}
export interface ModelConfigResponseMessage { config?: ModelConfigMessage | null }
export interface ModelStatisticsRequestMessage { name?: string; version?: string }
export interface StatisticDurationMessage { count?: Int64Wire; ns?: Int64Wire }
export interface ModelStatisticsMessage {
  name?: string;
  version?: string;
  last_inference?: Int64Wire;
  inference_count?: Int64Wire;
  execution_count?: Int64Wire;
  inference_stats?: Record<string, StatisticDurationMessage | null> | null;
  batch_stats?: { batch_size?: Int64Wire; compute_input?: StatisticDurationMessage | null; compute_infer?: StatisticDurationMessage | null; compute_output?: StatisticDurationMessage | null }[];
}
export interface ModelStatisticsResponseMessage { model_stats?: ModelStatisticsMessage[] }

/** `ModelRepositoryParameter` (decoded: `parameter_choice` names the member set). */
export interface ModelRepositoryParameterMessage {
  bool_param?: boolean;
  int64_param?: Int64Wire;
  string_param?: string;
  bytes_param?: Buffer;
  parameter_choice?: 'bool_param' | 'int64_param' | 'string_param' | 'bytes_param';
}
export interface RepositoryIndexRequestMessage { repository_name?: string; ready?: boolean }
export interface RepositoryIndexResponseMessage { models?: { name: string; version: string; state: string; reason: string }[] }
/** `RepositoryModelLoadRequest` and `RepositoryModelUnloadRequest` (the same fields). */
export interface RepositoryModelRequestMessage { repository_name?: string; model_name?: string; parameters?: Record<string, ModelRepositoryParameterMessage> }

/** The loaded service: its definition (for `Server.addService`) and a client constructor. */
export interface LoadedInferenceService {
  readonly definition: grpc.ServiceDefinition;
  readonly Client: grpc.ServiceClientConstructor;
}

/**
 * Load `grpc_service.proto` (synchronously; a few ms). Call once per server or client.
 * @throws Error when the proto file is missing or does not parse (a packaging bug).
 */
export function loadInferenceService(): LoadedInferenceService {
  const packageDefinition = protoLoader.loadSync(GRPC_SERVICE_PROTO_PATH, PROTO_LOADER_OPTIONS);
  const loaded = grpc.loadPackageDefinition(packageDefinition);
  const inference = loaded['inference'] as grpc.GrpcObject | undefined;
  const Client = inference?.['GRPCInferenceService'] as grpc.ServiceClientConstructor | undefined;
  if (Client === undefined) throw new Error(`${GRPC_SERVICE_PROTO_PATH} does not define ${GRPC_SERVICE_NAME}`);
  return { definition: Client.service, Client };
}
