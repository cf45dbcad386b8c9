/**
 * The onnxruntime shape probe (part of the shape resolution of `shapes.ts`; docs/import.md "When
 * the probe cannot guess", "Memory"): run a model whose value shapes are not annotated at given
 * points, with zero inputs (or the user's `--probe-shape` / `--probe-value`), in chunks of
 * consecutive nodes that bound the memory, and read the dims of every value a partition needs.
 * Also the checks of the user's probe inputs against the graph.
 * Errors: `ProbeRunError` when onnxruntime refuses a required point, `InvalidModelError` when it
 * cannot load the model or an input cannot be fed, `RangeError` for probe inputs that do not fit.
 */
import * as ort from 'onnxruntime-node';
import { describeError, InvalidModelError } from '../../errors.ts';
import { elementCount, NOMINAL_STRING_BYTES } from '../../tensor.ts';
import { elemTypeOfOrt, ortTypeOf } from './dtypes.ts';
import { isTopologicallySorted } from './graph.ts';
import type { GraphIndex } from './graph.ts';
import { onnx } from './proto.ts';
import type { OnnxTypes } from './proto.ts';
import type { AxisNames } from './axis-names.ts';
import { annotation, bindDim, canonicalDim, declaredDims, valuesOf } from './shape-binding.ts';
import type { DimBinding, ShapePoint, TensorShape } from './shape-binding.ts';

/**
 * onnxruntime refused to run the model at a required probe point (`resolveShapes`): the message
 * says what the probe fed and which flags to give; `failedOp` is the op type onnxruntime names
 * (`running Pad node`) and `failedNode` the node's name (`Name:'pad'`) — for a failure inside a
 * subgraph, of the innermost node (a Pad in an If's branch, not the If) — each undefined when it
 * names none.
 */
export class ProbeRunError extends InvalidModelError {
  constructor(
    message: string,
    readonly failedOp: string | undefined,
    readonly failedNode: string | undefined,
    options?: { cause?: unknown },
  ) {
    super(message, options);
    this.name = 'ProbeRunError';
  }
}
/**
 * What the user tells the shape probe about inputs it cannot guess (`abacus models import
 * --probe-shape NAME=DxD… --probe-value NAME=V`): `shapes[name]` = a full shape for the input
 * (its batch dim still follows the probe point; a dim bound to the sequence axis must equal the
 * probe's sequence length, which the importer derives from it; every other dim is used as given
 * instead of 1), `values[name]` = the value every element of the input holds (instead of 0).
 */
export interface ProbeInputs {
  readonly shapes?: Readonly<Record<string, readonly number[]>>;
  readonly values?: Readonly<Record<string, number>>;
  /**
   * `axes[input][dim]` = the axis a dim of an input is (`--axis NAME.D=AXIS`; `batch` = the
   * batch axis): applied to the declared input shapes before the axes are detected
   * (`axis-names.ts`).
   */
  readonly axes?: AxisNames;
  /**
   * `ranges[input][dim]` = [lo, hi]: the sizes a dim bound to the sequence axis accepts
   * (`--probe-shape input=1x256-640`, for a model that refuses lengths outside them); the probe
   * then samples the axis at lo, (lo + hi)/2 and hi instead of d/4 … d, and `shapes[input][dim]`
   * is hi (the default length).
   */
  readonly ranges?: Readonly<Record<string, Readonly<Record<number, readonly [number, number]>>>>;
}
/** How `resolveShapes` streams the onnxruntime probe. */
export interface ProbeOptions {
  /** Bytes of values one chunk aims at (default `PROBE_CHUNK_BYTES`); ≤ 1: one node's values per chunk. */
  readonly chunkBytes?: number;
}

/**
 * Values of single-element tensors the probe reads while it runs (the condition of an If, the
 * trip count and condition of a Loop): `values.get(name)[j]` = the value at point j.
 */
export interface ProbeCapture {
  readonly names: ReadonlySet<string>;
  readonly values: Map<string, (number | undefined)[]>;
}

/**
 * Bytes of probe outputs one onnxruntime run may hold (each is copied once into JavaScript):
 * the streamed probe sizes its chunks of values to stay near this (docs/import.md "Memory").
 */
export const PROBE_CHUNK_BYTES = 256 * 1024 * 1024;

/**
 * onnxruntime's own log level in probe sessions and runs: 4 = fatal only (onnxruntime
 * `include/onnxruntime/core/common/logging/severity.h`: 0 verbose … 3 error, 4 fatal). A probe
 * expects some runs to fail (sizes the model refuses, optional odd sizes); onnxruntime would log
 * each as an `[E:onnxruntime …]` line on stderr, so the probe silences it and reports only its
 * final outcome (the error it throws carries onnxruntime's message).
 */
const PROBE_LOG_SEVERITY = 4;

/** Nodes in the first chunk of a streamed probe, before any value size is known. */
const FIRST_CHUNK_NODES = 16;

/**
 * Run the model at each point and collect the shapes of the values a partition needs
 * (`valuesOf`); points from `required` on are optional: a point onnxruntime rejects gives
 * undefined.
 *
 * Streamed (docs/import.md "Memory": a run that returns every intermediate holds them all at once, twice —
 * in onnxruntime and copied into JavaScript — 3.5 GB for a 1,000-node CNN): for a topologically
 * sorted graph the values are fetched in chunks of consecutive nodes; chunk k is a model made of
 * the node prefix that ends with the chunk (so onnxruntime frees every value before it that is
 * not an output) with the initializers it reads, whose outputs are the chunk's values, run at every point and released before
 * the next. Chunks are sized so that their values at the largest point take about
 * `chunkBytes` (default `PROBE_CHUNK_BYTES`), from the largest bytes per value seen so far (`FIRST_CHUNK_NODES` nodes
 * first). The price is compute: the prefixes are run again (about (chunks + 1)/2 whole runs per
 * point). An unsorted graph is probed in one chunk.
 */
export async function probeShapes(
  index: GraphIndex,
  model: OnnxTypes.IModelProto,
  binding: DimBinding,
  points: readonly ShapePoint[],
  infos: ReadonlyMap<string, OnnxTypes.IValueInfoProto>,
  what: string,
  probe: ProbeInputs,
  required: number,
  chunkBytes: number,
  capture?: ProbeCapture,
): Promise<(Map<string, TensorShape> | undefined)[]> {
  checkProbeInputs(index, infos, probe, what);
  const graph = index.graph;
  const wanted = new Set(valuesOf(index));
  const nodeCount = index.nodes.length;
  const sorted = isTopologicallySorted(index);
  const feedsAt = points.map((point) => {
    const feeds: Record<string, ort.Tensor> = {};
    for (const name of index.inputs) feeds[name] = zeroTensor(infos.get(name), binding, point, name, what, probe);
    return feeds;
  });
  const tables: (Map<string, TensorShape> | undefined)[] = feedsAt.map((feeds) => {
    const table = new Map<string, TensorShape>();
    for (const [name, t] of Object.entries(feeds)) table.set(name, { elemType: elemTypeOfOrt(t.type) ?? 0, dims: [...t.dims] });
    return table;
  });
  let bytesPerValue: number | undefined;
  let start = 0;
  while (start < nodeCount) {
    let end = start;
    let fetch: string[] = [];
    if (!sorted) end = nodeCount;
    else if (bytesPerValue === undefined) end = Math.min(nodeCount, start + FIRST_CHUNK_NODES);
    else {
      const most = bytesPerValue > 0 ? Math.max(1, Math.floor(chunkBytes / bytesPerValue)) : Infinity;
      let values = 0;
      while (end < nodeCount) {
        const adds = index.writes[end]!.filter((o) => wanted.has(o)).length;
        if (end > start && values + adds > most) break;
        values += adds;
        end += 1;
      }
    }
    for (let i = start; i < end; i++) for (const o of index.writes[i]!) if (wanted.has(o) && !fetch.includes(o)) fetch.push(o);
    fetch = fetch.filter((o) => !index.inputs.includes(o));
    if (fetch.length > 0) {
      const outputs = fetch.map((name) => {
        const info = infos.get(name);
        return info?.type ? { name, type: info.type } : { name };
      });
      // Only the initializers the prefix reads (onnxruntime warns about each unused one).
      const read = new Set<string>();
      for (let i = 0; i < end; i++) for (const r of index.reads[i]!) read.add(r);
      const inputs = new Set(index.inputs);
      const prefix = onnx.ModelProto.create({
        ...model,
        graph: onnx.GraphProto.create({
          ...graph,
          node: graph.node!.slice(0, end),
          input: (graph.input ?? []).filter((v) => inputs.has(v.name ?? '') || read.has(v.name ?? '')),
          initializer: (graph.initializer ?? []).filter((t) => read.has(t.name ?? '')),
          sparseInitializer: (graph.sparseInitializer ?? []).filter((t) => read.has(t.values?.name ?? '')),
          output: outputs,
          valueInfo: [],
        }),
      });
      const largest = await probeChunk(index, prefix, fetch, points, feedsAt, tables, binding, infos, what, probe, required, capture);
      bytesPerValue = Math.max(bytesPerValue ?? 0, largest / fetch.length);
    }
    start = end;
  }
  return tables;
}

/**
 * One chunk of `probeShapes`: load `prefix`, run it at every point whose table is still
 * defined, add the dims of `fetch` to the tables (an optional point that fails: its table
 * becomes undefined), release the session.
 * @returns the bytes of the chunk's values at the point where they were largest.
 * @throws ProbeRunError when a required point fails; InvalidModelError when onnxruntime cannot load it.
 */
async function probeChunk(
  index: GraphIndex,
  prefix: OnnxTypes.ModelProto,
  fetch: readonly string[],
  points: readonly ShapePoint[],
  feedsAt: readonly Record<string, ort.Tensor>[],
  tables: (Map<string, TensorShape> | undefined)[],
  binding: DimBinding,
  infos: ReadonlyMap<string, OnnxTypes.IValueInfoProto>,
  what: string,
  probe: ProbeInputs,
  required: number,
  capture: ProbeCapture | undefined,
): Promise<number> {
  let session: ort.InferenceSession;
  try {
    session = await ort.InferenceSession.create(onnx.ModelProto.encode(prefix).finish(), {
      intraOpNumThreads: 1,
      interOpNumThreads: 1,
      graphOptimizationLevel: 'disabled',
      executionProviders: ['cpu'],
      logSeverityLevel: PROBE_LOG_SEVERITY,
    });
  } catch (cause) {
    throw new InvalidModelError(`${what}: its value shapes are not fully annotated and onnxruntime cannot load it to infer them: ${describeError(cause)}`, { cause });
  }
  let largest = 0;
  try {
    for (const [j, point] of points.entries()) {
      const table = tables[j];
      if (table === undefined) continue;
      const feeds = feedsAt[j]!;
      const used = new Set((prefix.graph?.input ?? []).map((v) => v.name));
      const given = Object.fromEntries(Object.entries(feeds).filter(([name]) => used.has(name) && session.inputNames.includes(name)));
      let results: ort.InferenceSession.ReturnType;
      try {
        results = await session.run(given, [...fetch], { logSeverityLevel: PROBE_LOG_SEVERITY });
      } catch (cause) {
        if (j >= required) {
          tables[j] = undefined;
          continue;
        }
        const fed = Object.entries(feeds)
          .map(([name, t]) => `${name} [${t.dims.map((d, i) => `${d}${axisLabel(infos.get(name), i, binding)}`).join(', ')}] = ${probe.values?.[name] ?? (t.type === 'string' ? "''" : 0)}`)
          .join('; ');
        const example = index.inputs[0] ?? 'NAME';
        const message = describeError(cause);
        throw new ProbeRunError(
          `${what}: onnxruntime failed to run it at batch ${point.batch}${binding.seqName ? `, ${binding.seqName} ${point.seqLen}` : ''} to infer value shapes: ${message}. ` +
            `The probe fed ${fed}. Tell it sizes and values the model accepts: --probe-shape NAME=DxD… (e.g. --probe-shape ${example}=${(feeds[example]?.dims ?? [1]).map((d, i) => (i === 0 ? 1 : d)).join('x')} with your sizes; a sequence-axis dim also sets the probe's sequence length) and --probe-value NAME=V for inputs read as sizes, rates or indices (e.g. a sample rate); for a model that accepts a range of lengths only give it (--probe-shape ${example}=1xLO-HI), for one length only fix the dim (--axis ${example}.1=SIZE)${scalarHint(index, infos, probe)}`,
          innermost(message, /running (\w+) node/g),
          innermost(message, /Name:'([^']*)'/g),
          { cause },
        );
      }
      let bytes = 0;
      for (const [name, value] of Object.entries(results)) {
        const elemType = elemTypeOfOrt(value.type);
        if (elemType !== undefined) table.set(name, { elemType, dims: [...value.dims] });
        if (capture?.names.has(name) === true && value.size === 1 && value.type !== 'string') {
          const v = (value.data as ArrayLike<number | bigint>)[0];
          let seen = capture.values.get(name);
          if (!seen) capture.values.set(name, (seen = []));
          seen[j] = typeof v === 'bigint' ? Number(v) : v;
        }
        bytes += value.type === 'string' ? value.size * NOMINAL_STRING_BYTES : (value.data as { byteLength?: number }).byteLength ?? 0;
        value.dispose();
      }
      largest = Math.max(largest, bytes);
    }
    return largest;
  } finally {
    await session.release();
  }
}

/**
 * ` (axis)` for a dim of an input that the probe bound to an axis (a named dim, an anonymous dim
 * 0 = the batch, another anonymous dim = the sequence axis when there is one), so an error shows
 * which axis the probe took each dim for; '' for a fixed dim or a dim fed as 1.
 */
function axisLabel(info: OnnxTypes.IValueInfoProto | undefined, i: number, binding: DimBinding): string {
  const d = annotation(info)?.dims[i];
  if (typeof d === 'number') return '';
  if (d === undefined) return i === 0 ? ` (${binding.batchName})` : binding.seqName !== undefined ? ` (${binding.seqName})` : '';
  const axis = canonicalDim(d, binding);
  return bindDim(d, binding, { batch: 1, seqLen: 1 }) === undefined ? '' : ` (${axis})`;
}

/**
 * The last capture of `pattern` (global) in an onnxruntime message: for a failure inside an
 * If, Loop or Scan, onnxruntime nests the messages (`running If node. Name:'if' Status
 * Message: … running Pad node. Name:'pad' …`), and the innermost node is the one that failed.
 */
function innermost(message: string, pattern: RegExp): string | undefined {
  let last: string | undefined;
  for (const m of message.matchAll(pattern)) last = m[1];
  return last;
}

/**
 * The numeric scalar (0-d) inputs the user gave no `--probe-value` for, which zeros cannot
 * stand in for when the model reads them as a rate, a size or an index: `; input 'sr' is a
 * scalar (0-d int64) and may be one: give --probe-value sr=V`; '' when there is none.
 */
function scalarHint(index: GraphIndex, infos: ReadonlyMap<string, OnnxTypes.IValueInfoProto>, probe: ProbeInputs): string {
  const scalars = index.inputs.filter((name) => {
    const a = annotation(infos.get(name));
    const type = ortTypeOf(a?.elemType ?? 0);
    return a !== undefined && a.dims.length === 0 && type !== undefined && type !== 'string' && type !== 'bool' && probe.values?.[name] === undefined;
  });
  if (scalars.length === 0) return '';
  const text = scalars.map((name) => `'${name}' (${ortTypeOf(annotation(infos.get(name))!.elemType)})`).join(', ');
  return `; the scalar (0-d) input${scalars.length > 1 ? 's' : ''} ${text} may be read so, which zeros cannot guess: give --probe-value ${scalars[0]}=V${scalars.length > 1 ? ' (and the others)' : ''}`;
}

/**
 * Check the user's probe inputs against the graph.
 * @throws RangeError naming the option and the input when a name is not a graph input, a shape
 *   has another rank than declared or differs from a fixed declared dim, or a value is given
 *   for a string input.
 */
export function checkProbeInputs(index: GraphIndex, infos: ReadonlyMap<string, OnnxTypes.IValueInfoProto>, probe: ProbeInputs, what: string): void {
  const inputs = new Set(index.inputs);
  const unknown = (flag: string, name: string): RangeError => new RangeError(`${flag} ${name}=…: '${name}' is not an input of ${what} (its inputs: ${index.inputs.join(', ')})`);
  for (const [name, dims] of Object.entries(probe.shapes ?? {})) {
    if (!inputs.has(name)) throw unknown('--probe-shape', name);
    const declared = annotation(infos.get(name))?.dims;
    if (declared === undefined) continue;
    if (declared.length !== dims.length) throw new RangeError(`--probe-shape ${name}=${dims.join('x')}: '${name}' has rank ${declared.length} ([${declared.map((d) => d ?? '?').join(', ')}]), not ${dims.length}`);
    declared.forEach((d, i) => {
      if (typeof d === 'number' && d !== dims[i]) throw new RangeError(`--probe-shape ${name}=${dims.join('x')}: dim ${i} of '${name}' is fixed at ${d}`);
    });
  }
  for (const name of Object.keys(probe.values ?? {})) {
    if (!inputs.has(name)) throw unknown('--probe-value', name);
    const elemType = infos.get(name)?.type?.tensorType?.elemType;
    if (elemType === (onnx.TensorProto.DataType.STRING as number) || elemType === (onnx.TensorProto.DataType.FLOAT16 as number)) {
      throw new RangeError(`--probe-value ${name}=…: '${name}' is a ${elemType === (onnx.TensorProto.DataType.STRING as number) ? 'string' : 'float16'} input; probe values apply to the other numeric types`);
    }
  }
}

/**
 * The sequence length `probe.shapes` implies: the size given for a dim bound to the sequence
 * axis (or an anonymous later dim, which the probe treats as that axis); undefined when none.
 * @throws RangeError when two given shapes imply different lengths.
 */
export function probeSeqLen(index: GraphIndex, binding: DimBinding, probe: ProbeInputs): number | undefined {
  if (binding.seqName === undefined) return undefined;
  let found: { value: number; from: string } | undefined;
  for (const [name, dims] of Object.entries(probe.shapes ?? {})) {
    const declared = declaredDims(index, name) ?? [];
    declared.forEach((d, i) => {
      if (i === 0 || dims[i] === undefined) return;
      const isSeq = d === undefined || (typeof d === 'string' && binding.seq.has(d));
      if (!isSeq) return;
      if (found !== undefined && found.value !== dims[i]) {
        throw new RangeError(
          `--probe-shape: ${found.from} and ${name} (dim ${i}) give the sequence axis '${binding.seqName}' different sizes (${found.value}, ${dims[i]}); ` +
            `if dim ${i} of '${name}' is another axis, name it: --axis ${name}.${i}=batch (or another axis name)`,
        );
      }
      found = { value: dims[i], from: `${name} (dim ${i})` };
    });
  }
  return found?.value;
}

/**
 * The range of sequence lengths `probe.ranges` gives for a dim bound to the sequence axis (see
 * `probeSeqLen`); undefined when none.
 * @throws RangeError naming the input and the dim when a range is given for a dim that is not
 *   the sequence axis, spans fewer than 3 lengths, or two ranges differ.
 */
export function probeSeqRange(index: GraphIndex, binding: DimBinding, probe: ProbeInputs): readonly [number, number] | undefined {
  let found: { range: readonly [number, number]; from: string } | undefined;
  for (const [name, dims] of Object.entries(probe.ranges ?? {})) {
    const declared = declaredDims(index, name) ?? [];
    for (const [key, range] of Object.entries(dims)) {
      const i = Number(key);
      const d = declared[i];
      const isSeq = binding.seqName !== undefined && i > 0 && (d === undefined || (typeof d === 'string' && binding.seq.has(d)));
      const flag = `--probe-shape ${name}=…${range[0]}-${range[1]}…`;
      if (!isSeq) throw new RangeError(`${flag}: dim ${i} of '${name}' is not the sequence axis${binding.seqName === undefined ? ' (the model has none)' : ` '${binding.seqName}'`}; a range of sizes is accepted for the sequence axis only`);
      if (range[1] - range[0] < 2) throw new RangeError(`${flag}: a range needs at least 3 lengths (lo + 2 ≤ hi); for one length fix the dim with --axis ${name}.${i}=${range[1]}`);
      if (found !== undefined && (found.range[0] !== range[0] || found.range[1] !== range[1])) throw new RangeError(`${flag}: ${found.from} gives the sequence axis another range (${found.range.join('-')})`);
      found = { range, from: `${name} (dim ${i})` };
    }
  }
  return found?.range;
}

/** A probe input tensor: zeros (or `probe.values[name]`), shaped by the point and `probe.shapes[name]`. */
function zeroTensor(info: OnnxTypes.IValueInfoProto | undefined, binding: DimBinding, point: ShapePoint, name: string, what: string, probe: ProbeInputs = {}): ort.Tensor {
  const a = annotation(info);
  const elemType = info?.type?.tensorType?.elemType ?? 0;
  const type = ortTypeOf(elemType);
  if (!a || type === undefined) throw new InvalidModelError(`${what}: graph input '${name}' is not a tensor of a type onnxruntime-node can feed`);
  // Unbound dims: dim 0 is the batch; an anonymous later dim is the seq axis when the model has
  // one (detectDynamicAxes names it so); anything else is 1.
  const given = probe.shapes?.[name];
  const dims = a.dims.map((d, i) => bindDim(d, binding, point) ?? (i === 0 ? point.batch : d === undefined && binding.seqName !== undefined ? point.seqLen : (given?.[i] ?? 1)));
  const n = elementCount(dims);
  const value = probe.values?.[name];
  if (value !== undefined && type !== 'string') {
    const t = zeroTensor(info, binding, point, name, what, { shapes: probe.shapes ?? {} });
    const data = t.data as unknown as { fill(v: number | bigint): void };
    data.fill(type === 'int64' || type === 'uint64' ? BigInt(Math.trunc(value)) : type === 'bool' ? (value ? 1 : 0) : value);
    return t;
  }
  switch (type) {
    case 'float32':
      return new ort.Tensor('float32', new Float32Array(n), dims);
    case 'float64':
      return new ort.Tensor('float64', new Float64Array(n), dims);
    case 'int64':
      return new ort.Tensor('int64', new BigInt64Array(n), dims);
    case 'uint64':
      return new ort.Tensor('uint64', new BigUint64Array(n), dims);
    case 'int32':
      return new ort.Tensor('int32', new Int32Array(n), dims);
    case 'uint32':
      return new ort.Tensor('uint32', new Uint32Array(n), dims);
    case 'int16':
      return new ort.Tensor('int16', new Int16Array(n), dims);
    case 'uint16':
      return new ort.Tensor('uint16', new Uint16Array(n), dims);
    case 'float16':
      return new ort.Tensor('float16', new Uint16Array(n), dims);
    case 'int8':
      return new ort.Tensor('int8', new Int8Array(n), dims);
    case 'uint8':
      return new ort.Tensor('uint8', new Uint8Array(n), dims);
    case 'bool':
      return new ort.Tensor('bool', new Uint8Array(n), dims);
    default:
      return new ort.Tensor('string', new Array<string>(n).fill(''), dims);
  }
}
