/**
 * Boundary helpers: which named tensors are live before operator k, and their concrete
 * shapes for a query of `batch` samples of length `seqLen` (ModelSpec docs: boundary 0 is the
 * model's inputs, boundary(k+1) = outputs(k) ∪ passthrough(k), boundary N the outputs).
 *
 * Used by both sides of the executor boundary: the device validates a group with them and
 * the executor builds synthetic inputs with them. Pure functions over plain data.
 */
import { BadRequestError } from '../errors.ts';
import type { InputDomain, ModelSpec, TensorSpec } from './spec.ts';
import { MAX_SEQ_LEN } from './spec.ts';
import { bytesPerElement } from '../tensor.ts';
import type { TensorDataType } from '../tensor.ts';

/** A tensor spec with every dim resolved to a number, e.g. `[2, 3, 224, 224]`. */
export interface ResolvedTensorSpec {
  readonly name: string;
  readonly dataType: TensorDataType;
  readonly dims: readonly number[];
  /** The input's valid values (`TensorSpec.domain`), when it has them. */
  readonly domain?: InputDomain;
}

/**
 * Every tensor spec the model declares, by name: model inputs and outputs and each operator's
 * inputs and outputs (the first declaration wins; the partitioner declares each value once
 * with one type and shape).
 */
export function tensorSpecIndex(spec: ModelSpec): Map<string, TensorSpec> {
  // Plain loops, no per-call closures: the simulator validates every segment through here.
  const index = new Map<string, TensorSpec>();
  addSpecs(index, spec.inputs);
  for (const op of spec.operators) {
    addSpecs(index, op.inputs);
    addSpecs(index, op.outputs);
  }
  addSpecs(index, spec.outputs);
  return index;
}

function addSpecs(index: Map<string, TensorSpec>, tensors: readonly TensorSpec[]): void {
  for (const t of tensors) if (!index.has(t.name)) index.set(t.name, t);
}

/** `tensorSpecIndex` of each spec the default arguments below were called with (specs are not mutated once built). */
const SPEC_INDEXES = new WeakMap<ModelSpec, ReadonlyMap<string, TensorSpec>>();

/**
 * `tensorSpecIndex(spec)`, built once per spec object and shared: the default of the functions
 * below, which the simulator's validation calls for every synthetic segment (a ResNet's index
 * holds hundreds of names).
 */
function sharedSpecIndex(spec: ModelSpec): ReadonlyMap<string, TensorSpec> {
  let index = SPEC_INDEXES.get(spec);
  if (index === undefined) SPEC_INDEXES.set(spec, (index = tensorSpecIndex(spec)));
  return index;
}

/**
 * Specs of the tensors a segment starting at operator `start` needs: the inputs of operator
 * `start` plus what it passes through — boundary `start` as consumed from there on (for
 * `start === 0` these are the model inputs that operators actually read).
 * @throws RangeError when `start` is outside `[0, operators.length)`.
 * @throws BadRequestError when a passthrough name has no declared spec (a broken ModelSpec).
 */
export function boundarySpecs(spec: ModelSpec, start: number, index: ReadonlyMap<string, TensorSpec> = sharedSpecIndex(spec)): TensorSpec[] {
  const op = spec.operators[start];
  if (!op) throw new RangeError(`boundary start ${start} of ${spec.name} must be an integer in [0, ${spec.operators.length - 1}]`);
  const out: TensorSpec[] = [...op.inputs];
  for (const name of op.passthrough) {
    const t = index.get(name);
    if (!t) throw new BadRequestError(`${spec.name}: passthrough tensor '${name}' of operator ${start} (${op.name}) has no declared type/shape in the ModelSpec`);
    if (!out.some((o) => o.name === name)) out.push(t);
  }
  return out;
}

/** The sequence length a query runs with: `seqLen` when given (> 0), else the model's default. */
export function effectiveSeqLen(spec: ModelSpec, seqLen: number): number {
  return seqLen > 0 ? seqLen : spec.defaultSeqLen;
}

/**
 * The batch size of a model whose batch dim is fixed rather than symbolic (an import whose
 * inputs are declared e.g. [4, 3, 224, 224]): dim 0 of its first input of rank ≥ 1, when no
 * input has a symbolic dim 0. Undefined for a model with a dynamic batch (every zoo model) and
 * for a model whose inputs are all scalars. Such a model's costs are still per sample (the
 * importer divides the per-run FLOP and bytes by this number, `model/onnx/analysis.ts`), so
 * `evalCost(op.gflops, fixedBatchOf(spec))` is the FLOP of one run.
 */
export function fixedBatchOf(spec: ModelSpec): number | undefined {
  if (spec.inputs.some((t) => typeof t.shape[0] === 'string')) return undefined;
  const first = spec.inputs.find((t) => t.shape.length > 0);
  return typeof first?.shape[0] === 'number' ? first.shape[0] : undefined;
}

/**
 * One monomial `coefficient · batch^batchPower · seq^seqPower` of a dim expression; a dim is the
 * sum of its terms (see the grammar in `TensorSpec`).
 */
export interface DimTerm {
  readonly coefficient: number;
  readonly batchPower: number;
  readonly seqPower: number;
}

/** Axis names a dim expression may use: the model's `DynamicAxes`. */
export interface DimAxes {
  readonly batch: string;
  readonly seq?: string | undefined;
}

/**
 * Parse a string dim as a polynomial in the batch and sequence axes (grammar: `TensorSpec`).
 * Axis names are matched literally, longest first, so names containing `-` or `*` still parse
 * when the expression is unambiguous.
 * @returns the terms (like terms not merged), or undefined when `dim` is not such an expression
 *   (an unknown name such as `heads`, a stray character, a dangling operator).
 */
export function parseDimExpression(dim: string, axes: DimAxes): DimTerm[] | undefined {
  const names = [axes.batch, ...(axes.seq !== undefined ? [axes.seq] : [])].filter((n) => n.length > 0).sort((a, b) => b.length - a.length);
  type Token = { kind: 'int'; value: number } | { kind: 'axis'; batch: number; seq: number } | { kind: 'op'; op: '+' | '-' | '*' };
  const tokens: Token[] = [];
  let i = 0;
  scan: while (i < dim.length) {
    const c = dim[i]!;
    if (c === ' ' || c === '\t') {
      i++;
      continue;
    }
    for (const name of names) {
      if (dim.startsWith(name, i)) {
        tokens.push(name === axes.batch ? { kind: 'axis', batch: 1, seq: 0 } : { kind: 'axis', batch: 0, seq: 1 });
        i += name.length;
        continue scan;
      }
    }
    if (c === '+' || c === '-' || c === '*') {
      tokens.push({ kind: 'op', op: c });
      i++;
      continue;
    }
    const digits = /^[0-9]+/.exec(dim.slice(i));
    if (!digits) return undefined;
    const value = Number(digits[0]);
    if (!Number.isSafeInteger(value)) return undefined;
    tokens.push({ kind: 'int', value });
    i += digits[0].length;
  }
  // expr := ['-'] term (('+' | '-') term)* ; term := factor ('*' factor)* ; factor := int | axis
  const terms: DimTerm[] = [];
  let k = 0;
  let sign = 1;
  const first = tokens[0];
  if (first?.kind === 'op' && first.op === '-') {
    sign = -1;
    k = 1;
  }
  for (;;) {
    let coefficient = sign;
    let batchPower = 0;
    let seqPower = 0;
    for (;;) {
      const f = tokens[k++];
      if (f === undefined || f.kind === 'op') return undefined;
      if (f.kind === 'int') coefficient *= f.value;
      else {
        batchPower += f.batch;
        seqPower += f.seq;
      }
      const next = tokens[k];
      if (next?.kind === 'op' && next.op === '*') {
        k++;
        continue;
      }
      break;
    }
    terms.push({ coefficient, batchPower, seqPower });
    const next = tokens[k];
    if (next === undefined) return terms;
    if (next.kind !== 'op' || next.op === '*') return undefined;
    sign = next.op === '-' ? -1 : 1;
    k++;
  }
}

/**
 * Write a polynomial in batch and seq as a dim (grammar: `TensorSpec`): a number when it is
 * constant, the axis name for `batch` or `seq` alone, else an expression such as `batch*seq`,
 * `12*batch`, `seq+1` or `batch*seq*seq` (terms of higher degree first, zero terms dropped).
 * @throws RangeError for a non-integer coefficient, a negative power, or a seq power without a
 *   seq axis.
 */
export function formatDimExpression(terms: readonly DimTerm[], axes: DimAxes): number | string {
  const parts: DimTerm[] = [];
  for (const t of terms) {
    if (!Number.isSafeInteger(t.coefficient) || !Number.isInteger(t.batchPower) || !Number.isInteger(t.seqPower) || t.batchPower < 0 || t.seqPower < 0) {
      throw new RangeError(`formatDimExpression: term ${JSON.stringify(t)} must have an integer coefficient and non-negative integer powers`);
    }
    if (t.seqPower > 0 && t.coefficient !== 0 && axes.seq === undefined) throw new RangeError(`formatDimExpression: term ${JSON.stringify(t)} uses seq, but there is no sequence axis`);
    const same = parts.findIndex((p) => p.batchPower === t.batchPower && p.seqPower === t.seqPower);
    if (same >= 0) parts[same] = { ...t, coefficient: parts[same]!.coefficient + t.coefficient };
    else parts.push(t);
  }
  const nonzero = parts.filter((t) => t.coefficient !== 0).sort((a, b) => b.batchPower + b.seqPower - (a.batchPower + a.seqPower) || b.batchPower - a.batchPower);
  if (nonzero.every((t) => t.batchPower === 0 && t.seqPower === 0)) return nonzero.reduce((a, t) => a + t.coefficient, 0);
  let out = '';
  nonzero.forEach((t, i) => {
    const factors: string[] = [];
    const abs = Math.abs(t.coefficient);
    if (abs !== 1 || (t.batchPower === 0 && t.seqPower === 0)) factors.push(String(abs));
    for (let p = 0; p < t.batchPower; p++) factors.push(axes.batch);
    for (let p = 0; p < t.seqPower; p++) factors.push(axes.seq!);
    out += (t.coefficient < 0 ? '-' : i > 0 ? '+' : '') + factors.join('*');
  });
  return out;
}

/**
 * The dim string of a data-dependent size: a dim of a tensor whose size is known only after the
 * model ran on the actual data (downstream of NonZero, NonMaxSuppression, Unique, Compress or
 * a TopK with a computed k). Only model outputs have it (an import refuses it on a boundary);
 * metadata reports -1 and responses carry the actual shape. `resolveShape` gives 0 for it
 * (the size used where one is needed without running the model).
 */
export const DATA_DEPENDENT_DIM = '?data';

/**
 * Integer value of a general dim expression (grammar: `TensorSpec`) with every name bound:
 * sums, differences, products, floor division `/` and remainder `%` by positive integer
 * constants, parentheses. Names are matched literally, longest first, among `bindings`' keys.
 * @returns the value, or undefined when `dim` is not such an expression over those names (an
 *   unknown name, a stray character, division by a non-constant or by 0).
 */
export function evalDimExpression(dim: string, bindings: ReadonlyMap<string, number>): number | undefined {
  const names = [...bindings.keys()].filter((n) => n.length > 0).sort((a, b) => b.length - a.length);
  let i = 0;
  const skip = (): void => {
    while (dim[i] === ' ' || dim[i] === '\t') i++;
  };
  // expr := term (('+'|'-') term)* ; term := unary (('*' unary) | ('/' INT) | ('%' INT))* ;
  // unary := '-' unary | atom ; atom := INT | NAME | '(' expr ')'
  const atom = (): { value: number; constant: boolean } | undefined => {
    skip();
    if (dim[i] === '(') {
      i++;
      const v = expr();
      skip();
      if (v === undefined || dim[i] !== ')') return undefined;
      i++;
      return v;
    }
    for (const name of names) {
      if (dim.startsWith(name, i)) {
        i += name.length;
        return { value: bindings.get(name)!, constant: false };
      }
    }
    const digits = /^[0-9]+/.exec(dim.slice(i));
    if (!digits) return undefined;
    i += digits[0].length;
    return { value: Number(digits[0]), constant: true };
  };
  const unary = (): { value: number; constant: boolean } | undefined => {
    skip();
    if (dim[i] === '-') {
      i++;
      const v = unary();
      return v === undefined ? undefined : { value: -v.value, constant: v.constant };
    }
    return atom();
  };
  const term = (): { value: number; constant: boolean } | undefined => {
    let left = unary();
    for (;;) {
      if (left === undefined) return undefined;
      skip();
      const op = dim[i];
      if (op !== '*' && op !== '/' && op !== '%') return left;
      i++;
      const right = unary();
      if (right === undefined) return undefined;
      if (op === '*') left = { value: left.value * right.value, constant: left.constant && right.constant };
      else {
        if (!right.constant || right.value <= 0) return undefined;
        left = { value: op === '/' ? Math.floor(left.value / right.value) : left.value - right.value * Math.floor(left.value / right.value), constant: left.constant };
      }
    }
  };
  const expr = (): { value: number; constant: boolean } | undefined => {
    let left = term();
    for (;;) {
      if (left === undefined) return undefined;
      skip();
      const op = dim[i];
      if (op !== '+' && op !== '-') return left;
      i++;
      const right = term();
      if (right === undefined) return undefined;
      left = { value: op === '+' ? left.value + right.value : left.value - right.value, constant: left.constant && right.constant };
    }
  };
  const v = expr();
  skip();
  return v !== undefined && i === dim.length && Number.isSafeInteger(v.value) ? v.value : undefined;
}

/**
 * The size of a query of a model with other dynamic axes (`DynamicAxes.symbols`): the product
 * of their values (e.g. height·width in pixels), each from `symbols` or else its default,
 * capped at `MAX_SEQ_LEN`. Such a model's cost polynomials (`PerSampleCost`) are in this size,
 * and its queries carry it as their `seqLen` (the runtime, predictor and simulator evaluate
 * costs with it unchanged); its `defaultSeqLen` is the size at the defaults. 0 for a model
 * without such axes.
 */
export function querySize(spec: ModelSpec, symbols?: Readonly<Record<string, number>>): number {
  const axes = spec.dynamicAxes.symbols;
  if (axes === undefined) return 0;
  let size = 1;
  for (const [name, v] of Object.entries(axes)) size *= symbols?.[name] ?? v;
  return Math.min(size, MAX_SEQ_LEN);
}

/**
 * The values of the model's other dynamic axes (`DynamicAxes.symbols`) in a query's input
 * tensors: each axis from the first input dim declared as exactly that name; axes no input
 * gives are left out (their defaults apply). Inputs are assumed checked (`checkInputTensors`).
 */
export function bindSymbols(spec: ModelSpec, inputs: Readonly<Record<string, { readonly dims: readonly number[] }>>): Record<string, number> {
  const axes = spec.dynamicAxes.symbols ?? {};
  const out: Record<string, number> = {};
  for (const t of spec.inputs) {
    const dims = inputs[t.name]?.dims;
    if (dims === undefined) continue;
    t.shape.forEach((d, i) => {
      if (typeof d === 'string' && d in axes && !(d in out) && dims[i] !== undefined) out[d] = dims[i];
    });
  }
  return out;
}

/** Names of the model's other dynamic input dims (`DynamicAxes.symbols`), in declaration order. */
export function symbolNames(spec: ModelSpec): string[] {
  return Object.keys(spec.dynamicAxes.symbols ?? {});
}

/**
 * Names a dim expression uses among `names` (a plain name is the one-name case); empty for a
 * number. Names are matched literally, longest first, outside other names.
 */
export function dimNamesUsed(dim: number | string, names: readonly string[]): string[] {
  if (typeof dim === 'number') return [];
  const sorted = names.filter((n) => n.length > 0).sort((a, b) => b.length - a.length);
  const used = new Set<string>();
  let i = 0;
  outer: while (i < dim.length) {
    for (const n of sorted) {
      if (dim.startsWith(n, i)) {
        used.add(n);
        i += n.length;
        continue outer;
      }
    }
    i++;
  }
  return names.filter((n) => used.has(n));
}

/**
 * Concrete dims of `shape` for a query: the batch axis becomes `batch`, the sequence axis
 * `seqLen` (after `effectiveSeqLen`), each other dynamic axis (`DynamicAxes.symbols`, e.g.
 * `height`, `width`) its value in `symbols` or else its default, an expression of them
 * (grammar: `TensorSpec`, e.g. `batch*seq`, `(height+3)/4`) its value; numeric dims are kept,
 * a data-dependent dim (`DATA_DEPENDENT_DIM`) is 0.
 * @param symbols values of the other dynamic axes by name (from a request's input dims).
 * @throws BadRequestError naming the tensor and the dim when a symbolic dim is neither an axis
 *   nor an expression of them (its size cannot be known without real inputs), when it needs
 *   the sequence axis and that resolves to 0, or when an expression evaluates to a negative
 *   number.
 */
export function resolveShape(spec: ModelSpec, tensor: TensorSpec, batch: number, seqLen: number, symbols?: Readonly<Record<string, number>>): number[] {
  const seq = effectiveSeqLen(spec, seqLen);
  const axes = spec.dynamicAxes;
  return tensor.shape.map((d, i) => {
    if (typeof d === 'number') return d;
    if (d === axes.batch) return batch;
    if (axes.seq !== undefined && d === axes.seq) {
      if (seq <= 0) throw noSeqError(spec, tensor, i, d);
      return seq;
    }
    if (d === DATA_DEPENDENT_DIM) return 0;
    const symbol = symbols?.[d] ?? axes.symbols?.[d];
    if (symbol !== undefined) return symbol;
    const terms = parseDimExpression(d, axes);
    let value: number;
    if (terms) {
      if (seq <= 0 && terms.some((t) => t.seqPower > 0)) throw noSeqError(spec, tensor, i, d);
      value = terms.reduce((sum, t) => sum + t.coefficient * batch ** t.batchPower * seq ** t.seqPower, 0);
    } else {
      const bindings = new Map<string, number>([[axes.batch, batch]]);
      if (axes.seq !== undefined && seq > 0) bindings.set(axes.seq, seq);
      for (const [name, v] of Object.entries(axes.symbols ?? {})) bindings.set(name, symbols?.[name] ?? v);
      const general = evalDimExpression(d, bindings);
      if (general === undefined) {
        throw new BadRequestError(
          `${spec.name}: tensor '${tensor.name}' dim ${i} is symbolic '${d}', which is neither the batch axis '${axes.batch}'` +
            (axes.seq !== undefined ? ` nor the sequence axis '${axes.seq}'` : '') +
            (axes.symbols !== undefined ? ` nor a dynamic axis (${Object.keys(axes.symbols).join(', ')})` : '') +
            ' nor an expression of them and integers; its size is unknown',
        );
      }
      value = general;
    }
    if (!Number.isSafeInteger(value) || value < 0) {
      throw new BadRequestError(`${spec.name}: tensor '${tensor.name}' dim ${i} = '${d}' is ${value} at batch ${batch}, seq ${seq}; a dim must be a non-negative integer`);
    }
    return value;
  });
}

function noSeqError(spec: ModelSpec, tensor: TensorSpec, i: number, d: string): BadRequestError {
  const what = d === spec.dynamicAxes.seq ? 'the sequence axis' : 'an expression of the sequence axis';
  return new BadRequestError(`${spec.name}: tensor '${tensor.name}' dim ${i} is ${what} '${d}' but no seqLen was given and the model has no default`);
}

/** `boundarySpecs` with every shape resolved for a query. @throws as `boundarySpecs`/`resolveShape`. */
export function resolvedBoundary(spec: ModelSpec, start: number, batch: number, seqLen: number, index?: ReadonlyMap<string, TensorSpec>, symbols?: Readonly<Record<string, number>>): ResolvedTensorSpec[] {
  return boundarySpecs(spec, start, index).map((t) => ({ name: t.name, dataType: t.dataType, dims: resolveShape(spec, t, batch, seqLen, symbols), ...(t.domain === undefined ? {} : { domain: t.domain }) }));
}

/**
 * Why queries of `spec` cannot be fused along the batch axis (dynamic batching), or undefined
 * when they can: every input and output must have the batch axis as dim 0 and nowhere else
 * (not in another dim, not in an expression such as `batch*seq`), so that concatenating inputs
 * on dim 0 and splitting outputs on dim 0 gives each query its own rows. A model with a fixed
 * batch cannot be fused, nor one with other dynamic axes (`DynamicAxes.symbols`: queries may
 * differ in them, and the runtime does not compare them), nor one with a data-dependent output
 * (`DATA_DEPENDENT_DIM`).
 */
export function batchFusionBlocker(spec: ModelSpec): string | undefined {
  const axis = spec.dynamicAxes.batch;
  const symbols = symbolNames(spec);
  if (symbols.length > 0) return `${spec.name} has dynamic axes ${symbols.map((n) => `'${n}'`).join(', ')} whose sizes may differ between queries`;
  const dataDependent = spec.outputs.find((t) => t.shape.includes(DATA_DEPENDENT_DIM));
  if (dataDependent !== undefined) return `output '${dataDependent.name}' of ${spec.name} has a data-dependent size ([${dataDependent.shape.join(', ')}]), which a fused run would size for the whole batch`;
  for (const [kind, tensors] of [['input', spec.inputs], ['output', spec.outputs]] as const) {
    for (const t of tensors) {
      if (t.shape[0] !== axis) return `${kind} '${t.name}' of ${spec.name} has dim 0 ${t.shape.length === 0 ? '(a scalar)' : String(t.shape[0])}, not the batch axis '${axis}'`;
      const other = t.shape.findIndex((d, i) => i > 0 && typeof d === 'string' && d !== DATA_DEPENDENT_DIM && (parseDimExpression(d, spec.dynamicAxes)?.some((term) => term.batchPower > 0) ?? dimNamesUsed(d, [axis, ...symbolNames(spec)]).includes(axis)));
      if (other > 0) return `${kind} '${t.name}' of ${spec.name} uses the batch axis in dim ${other} ('${String(t.shape[other])}')`;
    }
  }
  return undefined;
}

/** Bytes of the tensors on one boundary, split into activations and constants (`TensorSpec.constant`). */
export interface BoundaryBytes {
  readonly activationBytes: number;
  readonly constantBytes: number;
}

/**
 * Bytes crossing boundary `k` (between operators k − 1 and k, 1 ≤ k ≤ N − 1) for a query of
 * `batch` samples of length `seqLen`: the tensors operator k reads or carries, as
 * `resolvedBoundary` gives them, split into activations and constants. An import folds its
 * constants into initializers (`model/onnx/constants.ts`), so its `constantBytes` is 0 unless
 * a constant could not be folded.
 * @throws RangeError when k is outside [1, N − 1]; BadRequestError as `resolvedBoundary`.
 */
export function boundaryBytes(spec: ModelSpec, k: number, batch: number, seqLen: number, index: ReadonlyMap<string, TensorSpec> = sharedSpecIndex(spec)): BoundaryBytes {
  if (!Number.isInteger(k) || k < 1 || k >= spec.operators.length) throw new RangeError(`boundary ${k} of ${spec.name} must be an integer in [1, ${spec.operators.length - 1}]`);
  let activationBytes = 0;
  let constantBytes = 0;
  for (const t of resolvedBoundary(spec, k, batch, seqLen, index)) {
    let n = 1;
    for (const d of t.dims) n *= d;
    const bytes = n * bytesPerElement(t.dataType);
    if (index.get(t.name)?.constant === true) constantBytes += bytes;
    else activationBytes += bytes;
  }
  return { activationBytes, constantBytes };
}
