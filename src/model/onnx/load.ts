/**
 * Reading ONNX files: decode, sanity-check, and load external-data tensors.
 *
 * External data follows onnx/docs/ExternalData.md: a tensor with `data_location = EXTERNAL`
 * carries `external_data` entries `location` (path relative to the model file's directory),
 * `offset` and `length` (bytes, optional) and `checksum` (ignored). The bytes are read into
 * `raw_data` and the external reference is removed, so the decoded model is self-contained.
 */
import { createHash } from 'node:crypto';
import { open, readFile } from 'node:fs/promises';
import path from 'node:path';
import { describeError, InvalidModelError } from '../../errors.ts';
import { elementCount } from '../../tensor.ts';
import { elementBytes } from './dtypes.ts';
import { subgraphsOf, toNumber } from './graph.ts';
import { onnx } from './proto.ts';
import type { OnnxTypes } from './proto.ts';

/**
 * Read and decode an `.onnx` file; tensors stored as external data are loaded from files
 * relative to the model's directory into `rawData`.
 * @throws InvalidModelError when the file cannot be read, is not ONNX, is truncated, has no
 *   graph or no opset import, or an external data file is missing, outside the model's
 *   directory or too short (the message names the data file and the tensor).
 */
export async function readOnnxModel(file: string): Promise<OnnxTypes.ModelProto> {
  return (await readOnnxFile(file)).model;
}

/** `readOnnxModel` plus the file's SHA-256 (hex, of the `.onnx` file itself). */
export async function readOnnxFile(file: string): Promise<{ model: OnnxTypes.ModelProto; sha256: string }> {
  let bytes: Uint8Array;
  try {
    bytes = await readFile(file);
  } catch (cause) {
    throw new InvalidModelError(`cannot read model file ${file}: ${describeError(cause)}`, { cause });
  }
  const model = decodeOnnxModel(bytes, file);
  await loadExternalData(model, path.dirname(path.resolve(file)), file);
  return { model, sha256: createHash('sha256').update(bytes).digest('hex') };
}

/**
 * Decode ONNX model bytes (protobuf `ModelProto`) and check the minimum a runtime needs.
 * External-data tensors are left external (see `loadExternalData`).
 * @param source file name or label used in messages.
 * @throws InvalidModelError when the bytes are not a protobuf ModelProto (random bytes, text),
 *   are truncated, or the model lacks `ir_version`, an opset import or a graph with nodes' op types.
 */
export function decodeOnnxModel(bytes: Uint8Array, source: string): OnnxTypes.ModelProto {
  let model: OnnxTypes.ModelProto;
  try {
    model = onnx.ModelProto.decode(bytes);
  } catch (cause) {
    throw new InvalidModelError(`${source} is not a valid ONNX model (not an ONNX protobuf, or truncated): ${describeError(cause)}`, { cause });
  }
  if (toNumber(model.irVersion) <= 0) {
    throw new InvalidModelError(`${source} is not a valid ONNX model: no ir_version (not an ONNX file, or truncated)`);
  }
  if (!model.graph) throw new InvalidModelError(`${source} is not a valid ONNX model: it has no graph (truncated?)`);
  if (model.opsetImport.length === 0) throw new InvalidModelError(`${source} is not a valid ONNX model: it imports no opset (truncated?)`);
  (model.graph.node ?? []).forEach((n, i) => {
    if (!n.opType) throw new InvalidModelError(`${source} is not a valid ONNX model: node #${i} has no op_type`);
  });
  return model;
}

/** Every tensor proto in a graph: initializers, sparse initializers, node attribute tensors, recursively in subgraphs. */
function* tensorsOf(graph: OnnxTypes.IGraphProto): Generator<OnnxTypes.ITensorProto> {
  yield* graph.initializer ?? [];
  for (const s of graph.sparseInitializer ?? []) {
    if (s.values) yield s.values;
    if (s.indices) yield s.indices;
  }
  for (const node of graph.node ?? []) {
    for (const a of node.attribute ?? []) {
      if (a.t) yield a.t;
      yield* a.tensors ?? [];
    }
    for (const g of subgraphsOf(node)) yield* tensorsOf(g);
  }
}

/** True when some tensor of the model is stored as external data. */
export function hasExternalData(model: OnnxTypes.IModelProto): boolean {
  if (!model.graph) return false;
  for (const t of tensorsOf(model.graph)) if (isExternal(t)) return true;
  return false;
}

function isExternal(t: OnnxTypes.ITensorProto): boolean {
  return t.dataLocation === onnx.TensorProto.DataLocation.EXTERNAL;
}

/**
 * Load every external-data tensor of `model` into its `rawData`, IN PLACE (meant for a model
 * just decoded by the caller; `readOnnxModel` does this for you).
 * @param baseDir directory the `location` entries are relative to (the model file's directory).
 * @param source model file name for messages.
 * @throws InvalidModelError when a data file is missing/unreadable, a location is absolute or
 *   leaves `baseDir`, or the file is shorter than `offset + length` (or than the tensor's size).
 */
export async function loadExternalData(model: OnnxTypes.IModelProto, baseDir: string, source: string): Promise<void> {
  if (!model.graph) return;
  const files = new Map<string, { handle: Awaited<ReturnType<typeof open>>; size: number }>();
  try {
    for (const t of tensorsOf(model.graph)) {
      if (!isExternal(t)) continue;
      const entries = new Map((t.externalData ?? []).map((e) => [e.key ?? '', e.value ?? '']));
      const tensor = t.name ?? '(unnamed)';
      const location = entries.get('location');
      if (!location) throw new InvalidModelError(`${source}: tensor '${tensor}' is stored as external data but has no location`);
      const full = path.resolve(baseDir, location);
      const rel = path.relative(baseDir, full);
      if (path.isAbsolute(location) || rel.startsWith('..') || path.isAbsolute(rel)) {
        throw new InvalidModelError(`${source}: external data file '${location}' of tensor '${tensor}' must be a relative path inside ${baseDir}`);
      }
      let file = files.get(full);
      if (!file) {
        try {
          const handle = await open(full, 'r');
          file = { handle, size: (await handle.stat()).size };
        } catch (cause) {
          throw new InvalidModelError(`${source}: external data file '${location}' of tensor '${tensor}' cannot be read (${full}): ${describeError(cause)}`, { cause });
        }
        files.set(full, file);
      }
      const offset = entries.has('offset') ? Number(entries.get('offset')) : 0;
      const elements = elementCount((t.dims ?? []).map(toNumber));
      const elemSize = elementBytes(t.dataType ?? 0);
      const expected = elemSize === undefined ? undefined : elements * elemSize;
      const length = entries.has('length') ? Number(entries.get('length')) : (expected ?? file.size - offset);
      if (!Number.isInteger(offset) || offset < 0 || !Number.isInteger(length) || length < 0) {
        throw new InvalidModelError(`${source}: tensor '${tensor}' has an invalid external data offset/length (${entries.get('offset') ?? ''}/${entries.get('length') ?? ''})`);
      }
      if (expected !== undefined && length !== expected) {
        throw new InvalidModelError(`${source}: tensor '${tensor}' needs ${expected} bytes but its external data in '${location}' has length ${length}`);
      }
      if (offset + length > file.size) {
        throw new InvalidModelError(`${source}: external data file '${location}' is too short for tensor '${tensor}': needs bytes [${offset}, ${offset + length}) but has ${file.size}`);
      }
      const data = new Uint8Array(length);
      const { bytesRead } = await file.handle.read(data, 0, length, offset);
      if (bytesRead !== length) {
        throw new InvalidModelError(`${source}: external data file '${location}' is too short for tensor '${tensor}' (read ${bytesRead} of ${length} bytes)`);
      }
      t.rawData = data;
      t.externalData = [];
      t.dataLocation = onnx.TensorProto.DataLocation.DEFAULT;
    }
  } finally {
    for (const f of files.values()) await f.handle.close();
  }
}
