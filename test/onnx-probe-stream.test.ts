/**
 * The streamed shape probe (docs/import.md "Memory"): probed in chunks of one node's values each (after the
 * first 16 nodes), or in the default 256 MiB chunks, a graph stripped of its value_info gets
 * the same shapes at every point as its annotations give (the GraphBuilder's hand-written
 * shapes: an independent reference), and the same symbolic shapes.
 */
import { describe, expect, it } from 'vitest';
import { detectDynamicAxes, indexGraph, requireGraph } from '../src/model/onnx/graph.ts';
import { dimBinding, resolveShapes } from '../src/model/onnx/shapes.ts';
import type { ResolvedShapes, ShapePoint } from '../src/model/onnx/shapes.ts';
import type { OnnxTypes } from '../src/model/onnx/proto.ts';
import { buildInceptionGraph, buildSkipGraph, roundTrip } from './onnx-fixtures.ts';

async function shapesOf(model: OnnxTypes.IModelProto, points: readonly ShapePoint[], chunkBytes?: number): Promise<ResolvedShapes> {
  const index = indexGraph(requireGraph(model, 'm'), 'm');
  return resolveShapes(index, model, dimBinding(index, detectDynamicAxes(model)), points, 'm', {}, chunkBytes === undefined ? {} : { chunkBytes });
}

function stripped(model: OnnxTypes.ModelProto): OnnxTypes.ModelProto {
  const copy = roundTrip(model);
  copy.graph!.valueInfo = [];
  return copy;
}

describe('streamed shape probe', () => {
  for (const [name, build, points] of [
    ['an inception-like CNN (19 nodes)', buildInceptionGraph, [{ batch: 1, seqLen: 0 }, { batch: 3, seqLen: 0 }]],
    ['a transformer-like DAG with a seq axis and a residual across the graph', buildSkipGraph, [{ batch: 1, seqLen: 8 }, { batch: 1, seqLen: 16 }, { batch: 2, seqLen: 32 }]],
  ] as const) {
    it(`${name}: one-value chunks and default chunks give the annotated shapes`, async () => {
      const { model } = build();
      const reference = await shapesOf(model, points);
      expect(reference.source).toBe('annotations');
      for (const chunkBytes of [1, undefined]) {
        const probed = await shapesOf(stripped(model), points, chunkBytes);
        expect(probed.source).toBe('onnxruntime');
        reference.tables.forEach((table, j) => {
          for (const [value, shape] of table) expect(probed.tables[j]!.get(value)?.dims, `${value} at point ${j}, chunkBytes ${chunkBytes}`).toEqual(shape.dims);
        });
        for (const [value, shape] of reference.symbolic) expect(probed.symbolic.get(value)?.shape, `${value}, chunkBytes ${chunkBytes}`).toEqual(shape.shape);
      }
    });
  }
});
