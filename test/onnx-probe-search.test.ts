/**
 * Probe sizes found by search (docs/import.md "When the probe cannot guess"): the lower bound the probe's search starts from (`graphLowerBound`), on graphs
 * built by hand; every expected value is worked out from the ONNX operator spec in a comment.
 */
import { describe, expect, it } from 'vitest';
import { indexGraph } from '../src/model/onnx/graph.ts';
import { onnx } from '../src/model/onnx/proto.ts';
import type { OnnxTypes } from '../src/model/onnx/proto.ts';
import { graphLowerBound, smallestProbedSize } from '../src/model/onnx/search.ts';

const DT = onnx.TensorProto.DataType;
const AT = onnx.AttributeProto.AttributeType;
const i64 = (name: string, values: number[]): OnnxTypes.ITensorProto => ({ name, dataType: DT.INT64, dims: [values.length], rawData: new Uint8Array(BigInt64Array.from(values.map(BigInt)).buffer) });
const f32 = (name: string, dims: number[]): OnnxTypes.ITensorProto => ({ name, dataType: DT.FLOAT, dims, rawData: new Uint8Array(new Float32Array(dims.reduce((a, b) => a * b, 1)).buffer) });
const mode = (m: string): OnnxTypes.IAttributeProto => ({ name: 'mode', type: AT.STRING, s: new TextEncoder().encode(m) });

function boundOf(node: OnnxTypes.INodeProto, initializer: OnnxTypes.ITensorProto[]): number {
  const graph: OnnxTypes.IGraphProto = {
    name: 'g',
    input: [{ name: 'x', type: { tensorType: { elemType: DT.FLOAT, shape: { dim: [{ dimParam: 'batch' }, { dimValue: 1 }, { dimParam: 'n' }] } } } }],
    initializer,
    node: [{ ...node, input: ['x', ...(node.input ?? [])], output: ['y'], name: 'op' }],
    output: [{ name: 'y' }],
  };
  return graphLowerBound(indexGraph(graph, 'g'));
}

describe('graphLowerBound', () => {
  it('a reflect Pad needs the axis longer than its largest pad; a constant Pad needs nothing', () => {
    expect(boundOf({ opType: 'Pad', input: ['pads'], attribute: [mode('reflect')] }, [i64('pads', [0, 0, 100, 0, 0, 7])])).toBe(101);
    expect(boundOf({ opType: 'Pad', input: ['pads'], attribute: [mode('constant')] }, [i64('pads', [0, 0, 100, 0, 0, 7])])).toBe(1);
    expect(boundOf({ opType: 'Pad', input: ['pads'] }, [i64('pads', [0, 0, 100, 0, 0, 7])])).toBe(1); // default mode: constant
  });

  it('a Conv needs the dilated kernel less its pads: 3·(9 − 1) + 1 − 2 − 2 = 21', () => {
    const attrs = [
      { name: 'dilations', type: AT.INTS, ints: [3] },
      { name: 'pads', type: AT.INTS, ints: [2, 2] },
    ];
    expect(boundOf({ opType: 'Conv', input: ['w'], attribute: attrs }, [f32('w', [4, 1, 9])])).toBe(21);
    expect(boundOf({ opType: 'MaxPool', attribute: [{ name: 'kernel_shape', type: AT.INTS, ints: [5] }] }, [])).toBe(5);
  });

  it("an STFT needs its frame_length (input 3)", () => {
    expect(boundOf({ opType: 'STFT', input: ['step', '', 'frame'] }, [i64('step', [160]), { ...i64('frame', [400]), dims: [] }])).toBe(400);
  });

  it('the smallest size the probe feeds: a quarter of a sequence length, half of another axis', () => {
    expect(smallestProbedSize('seq', 1024)).toBe(256);
    expect(smallestProbedSize('symbol', 128)).toBe(64);
  });
});
