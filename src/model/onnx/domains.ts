/**
 * Input domains implied by a graph (docs/import.md "Valid inputs"): a model input whose values reach the
 * `indices` input of a Gather (ONNX operator spec: indices must lie in [−s, s − 1] where s is
 * the data's size on the gathered axis) through value-preserving ops only (Identity, Cast,
 * Reshape, Unsqueeze, Squeeze, Flatten) accepts [0, s − 1] when the data is an initializer
 * with a known size on that axis: BERT's `input_ids` get [0, vocabulary − 1], `token_type_ids`
 * [0, 1]. Negative indices (counted from the end) are valid ONNX but not what such inputs mean.
 * Several Gathers bound one input by the smallest table.
 */
import type { InputDomain } from '../spec.ts';
import type { GraphIndex } from './graph.ts';
import { toNumber } from './graph.ts';

/** Ops that pass values through unchanged (only their layout or integer type changes). */
const VALUE_PRESERVING: ReadonlySet<string> = new Set(['Identity', 'Cast', 'Reshape', 'Unsqueeze', 'Squeeze', 'Flatten']);

/** Implied domain of each graph input that has one (see the file header). */
export function impliedInputDomains(index: GraphIndex): Map<string, InputDomain> {
  const out = new Map<string, InputDomain>();
  for (const input of index.inputs) {
    let bound: number | undefined;
    const seen = new Set<string>();
    const visit = (value: string): void => {
      if (seen.has(value)) return;
      seen.add(value);
      for (const i of index.readers.get(value) ?? []) {
        const node = index.nodes[i]!;
        if (node.domain && node.domain !== 'ai.onnx') continue;
        const op = node.opType ?? '';
        if (op === 'Gather' && node.input?.[1] === value && node.input[0] !== value) {
          const size = tableSize(index, node.input[0] ?? '', axisOf(node));
          if (size !== undefined && size > 0) bound = Math.min(bound ?? size, size);
        } else if (VALUE_PRESERVING.has(op) && node.input?.[0] === value) {
          for (const o of index.writes[i]!) visit(o);
        }
      }
    };
    visit(input);
    if (bound !== undefined) out.set(input, { range: [0, bound - 1] });
  }
  return out;
}

function axisOf(node: { attribute?: readonly { name?: string | null; i?: unknown }[] | null }): number {
  const a = (node.attribute ?? []).find((x) => x.name === 'axis');
  return a ? toNumber(a.i) : 0;
}

/** Size of initializer `name` on `axis` (negative counts from the end); undefined when unknown. */
function tableSize(index: GraphIndex, name: string, axis: number): number | undefined {
  const t = index.initializers.get(name);
  if (!t) return undefined;
  const dims = (t.dims ?? []).map(toNumber);
  const k = axis < 0 ? dims.length + axis : axis;
  return dims[k];
}
