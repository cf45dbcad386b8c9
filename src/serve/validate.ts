/**
 * Request validation: a request is checked against its served model before anything is
 * queued, so a bad request never joins a batch or reaches the device.
 *
 * Every refusal is `bad_request`; its message names the model, the input and the field.
 * - input names: each model input exactly once; unknown or duplicate names are refused;
 * - datatype: the v2 name of the model's type (`FP32` for float32, `INT64` for int64, …);
 * - shape: the model's rank; fixed dims equal; the batch axis (dim 0) the same in every input
 *   and one of the service's `batchSizes`; the sequence axis the same in every input, in
 *   [1, the model's `maxSeqLen`]; each other dynamic axis (`DynamicAxes.symbols`, e.g. an
 *   image's `height` and `width`) ≥ 1 and the same wherever it appears (a 400 names the input,
 *   the dim, the axis and the input that bound it first); derived dims (e.g. `batch*seq`,
 *   `(height+3)/4`) equal their value at those bindings. Dims are checked before anything is
 *   allocated, so negative or huge dims cost nothing;
 * - data: element count and value rules of `tensors.ts` (flat or nested JSON, exact raw byte
 *   length, INT64 beyond 2^53 without loss, NaN/Inf as strings);
 * - `parameters.qos_ms`: a number in (0, the service's `maxQosMs`] (config; default 10 × the
 *   QoS target) replaces the service's target for this request; `parameters.seq_len`, when
 *   given, must equal the sequence axis of the inputs;
 * - Triton's sequence parameters (`sequence_id`, `sequence_start`, `sequence_end`) are refused:
 *   there is no sequence batcher;
 * - `outputs`: names of model outputs, each at most once; `parameters.classification` a
 *   positive integer on a numeric output (`classification.ts`).
 */
import { describeDomain, inDomain } from '../model/input-domain.ts';
import { evalDimExpression, parseDimExpression, querySize, resolveShape } from '../model/boundary.ts';
import type { InputDomain } from '../model/spec.ts';
import type { HostTensor, TensorMap } from '../tensor.ts';
import { elementCount, halfToNumber } from '../tensor.ts';
import { classCountOf, classifiable, CLASSIFICATION_PARAMETER } from './classification.ts';
import { ServeError, type InferInput, type InferRequest, type InferRequestedOutput } from './inference.ts';
import { metadataShape, type Served } from './served-model.ts';
import { decodeInputData, describeValue, isV2Datatype, v2Datatype, V2_DATATYPES } from './tensors.ts';

/** A validated request, ready to submit. */
export interface Plan {
  readonly model: Served;
  readonly batch: number;
  readonly seqLen: number;
  readonly inputs: TensorMap;
  readonly qosMs: number | undefined;
  /** Output names to return, in the model's output order. */
  readonly outputs: readonly string[];
  /** Outputs answered as their top classes (classification extension), with the class count. */
  readonly classification: ReadonlyMap<string, number>;
}

/** The first element of `tensor` outside `domain` (index and value), or undefined when all lie in it. */
function firstOutside(tensor: HostTensor, domain: InputDomain): { index: number; value: string } | undefined {
  const data = tensor.data;
  if (Array.isArray(data)) return undefined; // strings have no numeric domain
  const half = tensor.dataType === 'float16';
  for (let i = 0; i < data.length; i++) {
    const raw = data[i]!;
    const v = half ? halfToNumber(Number(raw)) : Number(raw);
    if (!inDomain(domain, v) || (typeof raw === 'bigint' && BigInt(v) !== raw)) return { index: i, value: String(raw) };
  }
  return undefined;
}

/**
 * Check `request` against `model` (the rules are in the file docs) and build its input tensors.
 * @throws ServeError bad_request naming the model, the input and the field.
 */
export function validateRequest(model: Served, request: InferRequest): Plan {
  const where = `model '${model.name}'`;
  const bad = (detail: string): ServeError => new ServeError('bad_request', `${where}: ${detail}`);
  if (!Array.isArray(request.inputs)) throw bad('inputs must be a list');
  const byName = new Map<string, InferInput>();
  for (const [i, input] of (request.inputs as readonly (InferInput | undefined)[]).entries()) {
    const name: unknown = input?.name;
    if (typeof name !== 'string') throw bad(`inputs[${i}].name must be a string, got ${describeValue(name)}`);
    if (byName.has(name)) throw bad(`input '${name}' is given twice`);
    if (!model.inputs.some((p) => p.spec.name === name)) throw bad(`unknown input '${name}' (the model's inputs: ${model.inputs.map((p) => p.spec.name).join(', ')})`);
    byName.set(name, input!);
  }
  const missing = model.inputs.filter((p) => !byName.has(p.spec.name)).map((p) => `'${p.spec.name}'`);
  if (missing.length > 0) throw bad(`missing input${missing.length > 1 ? 's' : ''} ${missing.join(', ')} (the model's inputs: ${model.inputs.map((p) => p.spec.name).join(', ')})`);

  // datatypes and shapes first: nothing is allocated before every dim is known to fit
  const axes = model.spec.dynamicAxes;
  let batch: { value: number; from: string } | undefined;
  let seq: { value: number; from: string } | undefined;
  const symbolAxes = axes.symbols ?? {};
  const bound = new Map<string, { value: number; from: string; dim: number }>();
  for (const plan of model.inputs) {
    const input = byName.get(plan.spec.name)!;
    const name = plan.spec.name;
    const datatype: unknown = input.datatype;
    if (typeof datatype !== 'string' || !isV2Datatype(datatype)) throw bad(`input '${name}': unknown datatype ${describeValue(datatype)} (v2 datatypes: ${V2_DATATYPES.join(', ')})`);
    if (datatype !== plan.datatype) throw bad(`input '${name}': datatype ${datatype} does not match the model's ${plan.datatype}`);
    const shape: unknown = input.shape;
    if (!Array.isArray(shape)) throw bad(`input '${name}': shape must be a list of dims`);
    const want = plan.spec.shape;
    const wantText = `[${metadataShape(plan.spec).join(', ')}]`;
    if (shape.length !== want.length) throw bad(`input '${name}': shape [${shape.map(String).join(', ')}] has rank ${shape.length}, the model's ${wantText} has rank ${want.length}`);
    for (let d = 0; d < want.length; d++) {
      const got: unknown = shape[d];
      if (typeof got !== 'number' || !Number.isSafeInteger(got) || got < 0) throw bad(`input '${name}': shape[${d}] must be a non-negative integer, got ${describeValue(got)}`);
      const w = want[d]!;
      if (typeof w === 'number') {
        if (got !== w) throw bad(`input '${name}': shape[${d}] is ${got}, the model needs ${w} (shape ${wantText})`);
      } else if (w === axes.batch) {
        if (batch !== undefined && batch.value !== got) throw bad(`input '${name}': batch (shape[${d}]) is ${got}, but input '${batch.from}' has batch ${batch.value}`);
        batch ??= { value: got, from: name };
      } else if (axes.seq !== undefined && w === axes.seq) {
        if (seq !== undefined && seq.value !== got) throw bad(`input '${name}': sequence length (shape[${d}]) is ${got}, but input '${seq.from}' has ${seq.value}`);
        seq ??= { value: got, from: name };
      } else if (w in symbolAxes) {
        const earlier = bound.get(w);
        if (earlier !== undefined && earlier.value !== got) throw bad(`input '${name}': shape[${d}] is ${got}, but it is the dynamic axis '${w}', which input '${earlier.from}' gives as ${earlier.value} (its shape[${earlier.dim}])`);
        if (got < 1) throw bad(`input '${name}': shape[${d}] (the dynamic axis '${w}') must be ≥ 1, got ${got}`);
        bound.set(w, { value: got, from: name, dim: d });
      } else if (parseDimExpression(w, axes) === undefined && evalDimExpression(w, new Map([axes.batch, ...(axes.seq === undefined ? [] : [axes.seq]), ...Object.keys(symbolAxes)].map((n) => [n, 1]))) === undefined) {
        throw bad(`input '${name}': shape[${d}] is the model's symbolic dim '${w}', which cannot be served (neither the batch nor the sequence axis nor a dynamic axis)`);
      }
    }
  }
  const batchValue = model.fixedBatch ?? batch?.value ?? 1;
  if (model.fixedBatch === undefined) {
    if (batchValue < 1) throw bad(`batch size (dim 0 of the inputs) must be ≥ 1, got ${batchValue}`);
    if (!model.batchSizes.includes(batchValue)) throw bad(`batch size ${batchValue} (dim 0 of input '${batch?.from ?? '?'}') is not served; allowed batch sizes: ${model.batchSizes.join(', ')}`);
  }
  let seqLen = 0;
  const symbols = Object.fromEntries([...bound].map(([n, b]) => [n, b.value]));
  if (axes.seq !== undefined) {
    seqLen = seq?.value ?? model.spec.defaultSeqLen;
    if (seqLen < 1 || seqLen > model.maxSeqLen) throw bad(`sequence length ${seqLen} (input '${seq?.from ?? '?'}') must be in [1, ${model.maxSeqLen}]`);
  } else if (axes.symbols !== undefined) {
    seqLen = querySize(model.spec, symbols); // the variable of the model's costs (`querySize`)
  }
  const params = request.parameters ?? {};
  if (typeof params !== 'object' || params === null || Array.isArray(params)) throw bad('parameters must be an object');
  const seqParam: unknown = params['seq_len'];
  if (seqParam !== undefined) {
    if (axes.seq === undefined) throw bad(`parameters.seq_len: the model has no sequence axis`);
    if (seqParam !== seqLen) throw bad(`parameters.seq_len is ${describeValue(seqParam)}, but the inputs have sequence length ${seqLen}`);
  }
  refuseSequence(params, bad);
  const qosParam: unknown = params['qos_ms'];
  let qosMs: number | undefined;
  if (qosParam !== undefined) {
    if (typeof qosParam !== 'number' || !Number.isFinite(qosParam) || qosParam <= 0 || qosParam > model.maxQosMs) {
      throw bad(`parameters.qos_ms must be a number of ms in (0, ${model.maxQosMs}] (the service's maximum; its default target is ${model.qosTargetMs}), got ${describeValue(qosParam)}`);
    }
    qosMs = qosParam;
  }

  const { names: outputs, classification } = selectOutputs(model, request, bad);

  const tensors: TensorMap = {};
  const symbolText = Object.keys(symbols).length === 0 ? '' : `, ${Object.entries(symbols).map(([n, v]) => `${n} ${v}`).join(', ')}`;
  for (const plan of model.inputs) {
    const input = byName.get(plan.spec.name)!;
    // every dim was checked above; resolve derived dims (e.g. batch*seq, (height+3)/4) and compare
    const dims = resolveShape(model.spec, plan.spec, batchValue, seqLen, symbols);
    const given = input.shape;
    const d = dims.findIndex((v, i) => v !== given[i]);
    if (d >= 0) throw bad(`input '${plan.spec.name}': shape[${d}] is ${given[d]}, the model needs ${dims[d]} at batch ${batchValue}${axes.seq !== undefined ? `, sequence length ${seqLen}` : ''}${symbolText}`);
    const n = elementCount(dims);
    const data: unknown = input.data;
    if (typeof data !== 'object' || data === null) throw bad(`input '${plan.spec.name}': no data`);
    const tensor: HostTensor = { dataType: plan.spec.dataType, dims, data: decodeInputData({ model: model.name, input: plan.spec.name }, plan.spec.dataType, dims, n, input.data) };
    if (plan.spec.domain !== undefined) {
      const outside = firstOutside(tensor, plan.spec.domain);
      if (outside !== undefined) throw bad(`input '${plan.spec.name}': element ${outside.index} is ${outside.value}, outside the input's valid values (${describeDomain(plan.spec.domain)})`);
    }
    tensors[plan.spec.name] = tensor;
  }
  return { model, batch: batchValue, seqLen, inputs: tensors, qosMs, outputs, classification };
}

/** The requested output names in the model's output order (every output when none is named). */
function selectOutputs(model: Served, request: InferRequest, bad: (d: string) => ServeError): { names: string[]; classification: Map<string, number> } {
  const all = model.outputs.map((o) => o.name);
  const classification = new Map<string, number>();
  if (request.outputs === undefined) return { names: all, classification };
  if (!Array.isArray(request.outputs)) throw bad('outputs must be a list');
  const wanted = new Set<string>();
  for (const [i, o] of (request.outputs as readonly (InferRequestedOutput | undefined)[]).entries()) {
    const name: unknown = o?.name;
    if (typeof name !== 'string') throw bad(`outputs[${i}].name must be a string`);
    if (!all.includes(name)) throw bad(`unknown output '${name}' (the model's outputs: ${all.join(', ')})`);
    if (wanted.has(name)) throw bad(`output '${name}' is requested twice`);
    wanted.add(name);
    if (o?.classification !== undefined) {
      const spec = model.spec.outputs.find((t) => t.name === name)!;
      if (!classifiable(spec.dataType)) throw bad(`output '${name}': parameters.${CLASSIFICATION_PARAMETER}: the output is ${v2Datatype(spec.dataType)}, which has no classes to rank`);
      classification.set(name, classCountOf(model.name, name, o.classification));
    }
  }
  return { names: all.filter((n) => wanted.has(n)), classification };
}

/**
 * Triton's sequence parameters: this server has no sequence batcher (docs/serving.md "Triton
 * features"), so a request that asks for one is refused rather than served out of order.
 * `sequence_id` 0 or '' and false flags are what clients send when they use no sequence.
 */
function refuseSequence(params: Readonly<Record<string, unknown>>, bad: (d: string) => ServeError): void {
  const id = params['sequence_id'];
  const which = id !== undefined && id !== 0 && id !== '' && id !== '0' ? 'sequence_id' : params['sequence_start'] === true ? 'sequence_start' : params['sequence_end'] === true ? 'sequence_end' : undefined;
  if (which === undefined) return;
  throw bad(`parameters.${which}: sequences are not served (${which === 'sequence_id' ? `sequence_id ${describeValue(id)}` : which}): this server has no sequence batcher, so stateful requests cannot be kept in order; send each request with its whole state (the model's state inputs) and no sequence_id`);
}
