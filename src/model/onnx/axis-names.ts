/**
 * Axes of input dims the file leaves anonymous or names wrongly (docs/import.md "Naming axes"):
 * the user binds a dim to an axis (`abacus models import --axis state.1=batch --axis
 * input.1=samples`), and the importer infers the batch dim of a recurrent state. Both work by
 * giving the input's declared dim that axis's name before the dynamic axes are detected
 * (`detectDynamicAxes`), so the probe, the fitter and the spec treat it as they treat a dim the
 * file names.
 *
 * The inference: an input of rank 3 whose dims 0 and 2 are fixed and whose dim 1 is anonymous
 * has the layout of an ONNX LSTM/GRU/RNN state (`initial_h` [num_directions, batch_size,
 * hidden_size], ONNX operator spec), so its dim 1 is the batch — when the model has a dynamic
 * batch at all (some input's dim 0 is not fixed). The probe then feeds it the batch at every
 * point (1, 2, 3), and an import whose probe runs confirms it.
 *
 * Errors: `RangeError` naming the flag, the input, the dim and the axis.
 */
import { onnx } from './proto.ts';
import type { OnnxTypes } from './proto.ts';
import { detectDynamicAxes, dimOf } from './graph.ts';

/**
 * Input name → dim index → axis name (`batch`, or any other name: an axis of that name) or a
 * size (digits: the dim is fixed at that size, for a model that accepts one length only).
 */
export type AxisNames = Readonly<Record<string, Readonly<Record<number, string>>>>;

/** A dim bound to an axis: by the user (`--axis`) or inferred. */
export interface NamedDim {
  readonly input: string;
  readonly dim: number;
  readonly axis: string;
  readonly inferred: boolean;
}

/** Names an axis may have: they appear in dim expressions (`(samples+128)/160-3`), so no operators or spaces. */
const AXIS_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * The model with the named (and inferred) input dims renamed to their axes (or fixed at the size
 * given), the dims named, and the original declarations of the inputs that got a fixed dim
 * (`restoreFixedInputs`); the model itself when nothing changes. `batch` stands for the model's batch axis under whatever name the file
 * gives it.
 * @throws RangeError naming `--axis`, the input, the dim and the axis when the input is not a
 *   graph input, the dim is outside its rank or fixed, dim 0 is given another axis than the
 *   batch, or the axis name is not a plain name.
 */
export function nameInputAxes(model: OnnxTypes.ModelProto, axes: AxisNames | undefined, what: string): { model: OnnxTypes.ModelProto; named: NamedDim[]; original: ReadonlyMap<string, OnnxTypes.IValueInfoProto> } {
  const graph = model.graph ?? {};
  const constants = new Set((graph.initializer ?? []).map((t) => t.name));
  const inputs = (graph.input ?? []).filter((v) => v.name && !constants.has(v.name));
  const batch = detectDynamicAxes(model).batch;
  const declared = (v: OnnxTypes.IValueInfoProto): (number | string | undefined)[] => (v.type?.tensorType?.shape?.dim ?? []).map(dimOf);
  const renames = new Map<string, Map<number, number | string>>();
  const named: NamedDim[] = [];
  for (const [input, dims] of Object.entries(axes ?? {})) {
    const info = inputs.find((v) => v.name === input);
    for (const [key, axis] of Object.entries(dims)) {
      const dim = Number(key);
      const flag = `--axis ${input}.${key}=${axis}`;
      if (info === undefined) throw new RangeError(`${flag}: '${input}' is not an input of ${what} (its inputs: ${inputs.map((v) => v.name).join(', ')})`);
      const shape = declared(info);
      if (!Number.isInteger(dim) || dim < 0 || dim >= shape.length) throw new RangeError(`${flag}: '${input}' has rank ${shape.length} ([${shape.map((d) => d ?? '?').join(', ')}]), so it has no dim ${key}`);
      if (typeof shape[dim] === 'number') throw new RangeError(`${flag}: dim ${dim} of '${input}' is fixed at ${shape[dim]}, so it cannot be the axis '${axis}'`);
      if (/^[0-9]+$/.test(axis)) {
        const size = Number(axis);
        if (!Number.isSafeInteger(size) || size < 1) throw new RangeError(`${flag}: a fixed size must be an integer ≥ 1`);
        let m = renames.get(input);
        if (!m) renames.set(input, (m = new Map<number, number | string>()));
        m.set(dim, size);
        named.push({ input, dim, axis: String(size), inferred: false });
        continue;
      }
      if (!AXIS_NAME.test(axis)) throw new RangeError(`${flag}: the axis name '${axis}' must be a letter or '_' followed by letters, digits or '_' (or a size: the dim is then fixed)`);
      const target = axis === 'batch' ? batch : axis;
      if (dim === 0 && target !== batch) throw new RangeError(`${flag}: dim 0 of '${input}' is the batch axis '${batch}' (docs/import.md "Dynamic axes"); only a later dim can be another axis`);
      let m = renames.get(input);
      if (!m) renames.set(input, (m = new Map<number, number | string>()));
      m.set(dim, target);
      named.push({ input, dim, axis: target, inferred: false });
    }
  }
  const dynamicBatch = inputs.some((v) => {
    const shape = declared(v);
    return shape.length > 0 && typeof shape[0] !== 'number';
  });
  if (dynamicBatch) {
    for (const v of inputs) {
      const shape = declared(v);
      const name = v.name!;
      if (shape.length !== 3 || typeof shape[0] !== 'number' || typeof shape[2] !== 'number' || shape[1] !== undefined || renames.get(name)?.has(1)) continue;
      let m = renames.get(name);
      if (!m) renames.set(name, (m = new Map<number, number | string>()));
      m.set(1, batch);
      named.push({ input: name, dim: 1, axis: batch, inferred: true });
    }
  }
  if (renames.size === 0) return { model, named, original: new Map() };
  const input = (graph.input ?? []).map((v) => {
    const m = renames.get(v.name ?? '');
    const tt = v.type?.tensorType;
    if (!m || !tt?.shape) return v;
    const dim = (tt.shape.dim ?? []).map((d, i) => {
      const to = m.get(i);
      return to === undefined ? d : typeof to === 'number' ? { dimValue: to } : { dimParam: to };
    });
    return { ...v, type: { ...v.type, tensorType: { ...tt, shape: { ...tt.shape, dim } } } };
  });
  // the declarations of inputs with a dim fixed here, for `restoreFixedInputs`
  const original = new Map<string, OnnxTypes.IValueInfoProto>();
  for (const v of graph.input ?? []) if ([...(renames.get(v.name ?? '')?.values() ?? [])].some((to) => typeof to === 'number')) original.set(v.name!, v);
  return { model: onnx.ModelProto.create({ ...model, graph: onnx.GraphProto.create({ ...graph, input }) }), named, original };
}

/**
 * A (sub-)model with the inputs whose dim `--axis` fixed declared as in the file again. The fixed
 * size is for the importer (the probe feeds it, the spec records it); the ONNX models keep the
 * file's dynamic dim, since onnxruntime's static shape inference would otherwise push the fixed
 * size into every branch of an If, where another branch may need another size (silero VAD's
 * 8 kHz branch fails to load with 512 samples fixed). Returns the model itself when none of its
 * inputs is such an input.
 */
export function restoreFixedInputs(model: OnnxTypes.ModelProto, original: ReadonlyMap<string, OnnxTypes.IValueInfoProto>): OnnxTypes.ModelProto {
  const graph = model.graph;
  if (original.size === 0 || !graph || !(graph.input ?? []).some((v) => original.has(v.name ?? ''))) return model;
  const input = (graph.input ?? []).map((v) => original.get(v.name ?? '') ?? v);
  return onnx.ModelProto.create({ ...model, graph: onnx.GraphProto.create({ ...graph, input }) });
}
