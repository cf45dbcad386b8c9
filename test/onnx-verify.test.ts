/**
 * The partition check (docs/models.md "Operators on disk"), max abs error ≤ 1e-4 relative to the output scale:
 * err ≤ 1e-4 · max|expected| (exact equality always passes), failing when the scale is 0 or not finite (verify.ts, the one
 * implementation, also behind test/helpers/run-operators.ts). Values are chosen by hand.
 */
import * as ort from 'onnxruntime-node';
import { describe, expect, it } from 'vitest';
import { compareOutputs, maxAbsDiff, relativeError } from '../src/model/onnx/verify.ts';
import type { HostTensor } from '../src/tensor.ts';
import { relativeMaxError } from './helpers/run-operators.ts';

const f32 = (values: number[], dims = [values.length]): ort.Tensor => new ort.Tensor('float32', Float32Array.from(values), dims);
const host = (values: number[]): HostTensor => ({ dataType: 'float32', dims: [values.length], data: Float32Array.from(values) });

describe('compareOutputs', () => {
  it('is relative to max|expected| with no floor at 1: small outputs get a small tolerance', () => {
    // scale 0.01 → allowed error 1e-6; 5e-7 passes, 2e-6 fails (an absolute 1e-4 would pass both)
    const expected = { y: f32([0.01, -0.005, 0]) };
    expect(compareOutputs(expected, { y: f32([0.0100005, -0.005, 0]) })[0]).toMatchObject({ name: 'y', ok: true });
    const bad = compareOutputs(expected, { y: f32([0.010002, -0.005, 0]) })[0]!;
    expect(bad.ok).toBe(false);
    expect(bad.scale).toBeCloseTo(0.01, 9);
    expect(bad.maxAbsError).toBeCloseTo(2e-6, 9);
    // scale 1000 → allowed error 0.1
    expect(compareOutputs({ y: f32([1000, 3]) }, { y: f32([1000.0625, 3]) })[0]!.ok).toBe(true);
    expect(compareOutputs({ y: f32([1000, 3]) }, { y: f32([1000.25, 3]) })[0]!.ok).toBe(false);
  });

  it('passes exact equality even at scale 0; fails a non-finite expected output, a missing output, another shape, and NaN', () => {
    expect(compareOutputs({ y: f32([0, 0]) }, { y: f32([0, 0]) })[0]!.ok).toBe(true);
    expect(compareOutputs({ y: f32([0, 0]) }, { y: f32([0, 1e-9]) })[0]!.ok).toBe(false);
    expect(compareOutputs({ y: f32([Infinity, 1]) }, { y: f32([Infinity, 1]) })[0]!.ok).toBe(false);
    expect(compareOutputs({ y: f32([1, 2]) }, {})[0]).toMatchObject({ ok: false, maxAbsError: Infinity });
    expect(compareOutputs({ y: f32([1, 2], [2]) }, { y: f32([1, 2], [1, 2]) })[0]!.ok).toBe(false);
    expect(compareOutputs({ y: f32([1, 2]) }, { y: f32([1, NaN]) })[0]!.ok).toBe(false);
    expect(() => compareOutputs({}, {}, -1)).toThrow(RangeError);
  });

  it('accepts host tensors and onnxruntime tensors alike', () => {
    expect(compareOutputs({ y: f32([2, -4]) }, { y: host([2, -4.0002]) })[0]!.ok).toBe(true);
    expect(compareOutputs({ y: host([2, -4]) }, { y: f32([2, -4.001]) })[0]!.ok).toBe(false);
    expect(maxAbsDiff(host([1, 2]), f32([1, 2.5]))).toBeCloseTo(0.5, 9);
    // float16 bits are decoded (0x3c00 = 1, 0x4000 = 2)
    const half: HostTensor = { dataType: 'float16', dims: [2], data: Uint16Array.from([0x3c00, 0x4000]) };
    expect(maxAbsDiff(half, f32([1, 2]))).toBe(0);
  });

  it('relativeError / the test helper relativeMaxError are error / scale, Infinity without a scale', () => {
    expect(relativeError(f32([0.5, -2]), f32([0.5, -2.001]))).toBeCloseTo(5e-4, 6);
    expect(relativeMaxError(f32([0.5, -2]), f32([0.5, -2.001]))).toBeCloseTo(5e-4, 6);
    expect(relativeMaxError(f32([0, 0]), f32([0, 0]))).toBe(Infinity);
  });
});
