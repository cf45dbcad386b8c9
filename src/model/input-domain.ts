/**
 * Input domains (`TensorSpec.domain`, docs/import.md "Valid inputs"): checking a declared domain against its
 * input, applying the serving config's domains to a spec, and testing values.
 */
import type { InputDomain, ModelSpec, TensorSpec } from './spec.ts';
import type { TensorDataType } from '../tensor.ts';

/** True when `value` lies in `domain`. */
export function inDomain(domain: InputDomain, value: number): boolean {
  if ('values' in domain) return domain.values.includes(value);
  return value >= domain.range[0] && value <= domain.range[1];
}

/** The domain in words for messages: `one of 8000, 16000` or `in [0, 30521]`. */
export function describeDomain(domain: InputDomain): string {
  return 'values' in domain ? `one of ${domain.values.join(', ')}` : `in [${domain.range[0]}, ${domain.range[1]}]`;
}

/** Integer element types (bool counts: 0/1). */
const INTEGER_TYPES: ReadonlySet<TensorDataType> = new Set<TensorDataType>(['int64', 'int32', 'int16', 'int8', 'uint64', 'uint32', 'uint16', 'uint8', 'bool']);

/**
 * Why `domain` cannot describe input `tensor`, or undefined when it can: string inputs have no
 * numeric domain, a range needs lo ≤ hi, integer (and bool) inputs need integer bounds/values
 * (bool: 0 or 1), every number must be finite.
 */
export function domainProblem(tensor: TensorSpec, domain: InputDomain): string | undefined {
  if (tensor.dataType === 'string') return `input '${tensor.name}' is a string tensor; values/range apply to numeric inputs`;
  const numbers = 'values' in domain ? domain.values : domain.range;
  if ('values' in domain && domain.values.length === 0) return 'values must list at least one value';
  if (numbers.some((x) => !Number.isFinite(x))) return 'values and range bounds must be finite numbers';
  if ('range' in domain && domain.range[0] > domain.range[1]) return `range [${domain.range[0]}, ${domain.range[1]}] is empty (lo > hi)`;
  if (INTEGER_TYPES.has(tensor.dataType) && numbers.some((x) => !Number.isInteger(x))) return `input '${tensor.name}' is ${tensor.dataType}: values and range bounds must be integers`;
  if (tensor.dataType === 'bool' && numbers.some((x) => x !== 0 && x !== 1)) return `input '${tensor.name}' is bool: values and range bounds must be 0 or 1`;
  return undefined;
}

/**
 * `spec` with the given domains on its inputs (replacing implied ones), on `spec.inputs` and on
 * every operator interface tensor of the same name.
 * @throws RangeError naming the input when it is not a model input or the domain does not fit
 *   it (`domainProblem`).
 */
export function withInputDomains(spec: ModelSpec, domains: Readonly<Record<string, InputDomain>>): ModelSpec {
  const names = Object.keys(domains);
  if (names.length === 0) return spec;
  for (const name of names) {
    const t = spec.inputs.find((i) => i.name === name);
    if (!t) throw new RangeError(`'${name}' is not an input of model ${spec.name} (its inputs: ${spec.inputs.map((i) => i.name).join(', ')})`);
    const problem = domainProblem(t, domains[name]!);
    if (problem !== undefined) throw new RangeError(`input '${name}': ${problem}`);
  }
  const apply = (t: TensorSpec): TensorSpec => (Object.prototype.hasOwnProperty.call(domains, t.name) && spec.inputs.some((i) => i.name === t.name) ? { ...t, domain: domains[t.name]! } : t);
  return {
    ...spec,
    inputs: spec.inputs.map(apply),
    operators: spec.operators.map((op) => ({ ...op, inputs: op.inputs.map(apply), outputs: op.outputs.map(apply) })),
  };
}
