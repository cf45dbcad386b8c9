/**
 * Seeded synthetic tensors for `{ kind: 'synthetic' }` segments (profiling at any start).
 *
 * Values: floats uniform in [-1, 1); integer types (int64/int32/uint8/int8, and the
 * uint16/int16/uint32/uint64 of imports) uniform in [0, SYNTHETIC_MAX_ID) — valid small token
 * ids for BERT-like `input_ids`; bool 0/1; strings `s<id>`.
 * Masks: a tensor whose name matches `MASK_NAME` (/mask/i, e.g. BERT's `attention_mask`) is all
 * ones whatever its type (1 = attend to every position: random 0/1 or ids would mask out
 * arbitrary positions and make attention degenerate; for an additive float mask, a constant
 * shift leaves softmax unchanged). The stream of each tensor depends only on (seed, tensor name), so a boundary is the same
 * whatever order its tensors are made in. PRNG: mulberry32 (public-domain 32-bit generator,
 * ~1 ns/element), fast enough for [32, 64, 112, 112] activations.
 */
import type { HostTensor, TensorData, TensorMap } from '../tensor.ts';
import { elementCount, zeroTensorData } from '../tensor.ts';
import type { InputDomain } from './spec.ts';
import type { ResolvedTensorSpec } from './boundary.ts';

/** Exclusive upper bound of synthetic integer values (token ids in [0, 100)). */
export const SYNTHETIC_MAX_ID = 100;

/** Names of tensors filled with ones (attention/padding masks). */
export const MASK_NAME = /mask/i;

/** IEEE half-precision bits of 1.0. */
const HALF_ONE = 0x3c00;

/** 32-bit FNV-1a of a string, mixed with a numeric seed. */
function hashSeed(seed: number, name: string): number {
  let h = 0x811c9dc5 ^ (Math.trunc(seed) | 0) ^ Math.trunc(seed / 0x100000000);
  for (let i = 0; i < name.length; i++) {
    h ^= name.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** mulberry32 (public domain): a seeded 32-bit generator; each call returns a uint32. */
export function mulberry32(state: number): () => number {
  let a = state >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
}

/** IEEE half-precision bits of a float in [-1, 1] (round toward zero; enough for test data). */
function toHalfBits(x: number): number {
  if (x === 0) return 0;
  const sign = x < 0 ? 0x8000 : 0;
  const a = Math.abs(x);
  const e = Math.floor(Math.log2(a));
  if (e < -14) return sign | Math.round(a / 2 ** -24); // subnormal
  const mant = Math.floor((a / 2 ** e - 1) * 1024);
  return sign | ((e + 15) << 10) | (mant & 0x3ff);
}

/** A tensor of ones shaped `spec.dims`. */
function onesTensor(spec: ResolvedTensorSpec): HostTensor {
  const n = elementCount(spec.dims);
  let data: TensorData;
  switch (spec.dataType) {
    case 'float32':
      data = new Float32Array(n).fill(1);
      break;
    case 'float64':
      data = new Float64Array(n).fill(1);
      break;
    case 'float16':
      data = new Uint16Array(n).fill(HALF_ONE);
      break;
    case 'int64':
      data = new BigInt64Array(n).fill(1n);
      break;
    case 'int32':
      data = new Int32Array(n).fill(1);
      break;
    case 'uint8':
    case 'bool':
      data = new Uint8Array(n).fill(1);
      break;
    case 'int8':
      data = new Int8Array(n).fill(1);
      break;
    case 'uint16':
      data = new Uint16Array(n).fill(1);
      break;
    case 'int16':
      data = new Int16Array(n).fill(1);
      break;
    case 'uint32':
      data = new Uint32Array(n).fill(1);
      break;
    case 'uint64':
      data = new BigUint64Array(n).fill(1n);
      break;
    case 'string':
      data = new Array<string>(n).fill('1');
      break;
  }
  return { dataType: spec.dataType, dims: [...spec.dims], data };
}

/**
 * A tensor of values drawn from `domain` (seeded like `syntheticTensor`): each element one of
 * its `values`, or uniform in its `range` (integers for integer types; bool 0/1).
 */
function domainTensor(spec: ResolvedTensorSpec, domain: InputDomain, seed: number): HostTensor {
  const n = elementCount(spec.dims);
  const next = mulberry32(hashSeed(seed, spec.name));
  const integer = spec.dataType !== 'float32' && spec.dataType !== 'float64' && spec.dataType !== 'float16';
  const draw = (): number => {
    if ('values' in domain) return domain.values[next() % domain.values.length]!;
    const [lo, hi] = domain.range;
    const u = next() / 0x100000000; // [0, 1)
    return integer ? Math.min(hi, Math.floor(lo + u * (hi - lo + 1))) : lo + u * (hi - lo);
  };
  const data = zeroTensorData(spec.dataType, n);
  if (data instanceof BigInt64Array || data instanceof BigUint64Array) for (let i = 0; i < n; i++) data[i] = BigInt(draw());
  else if (Array.isArray(data)) for (let i = 0; i < n; i++) data[i] = String(draw());
  else if (spec.dataType === 'float16') for (let i = 0; i < n; i++) data[i] = toHalfBits(draw());
  else for (let i = 0; i < n; i++) data[i] = draw();
  return { dataType: spec.dataType, dims: [...spec.dims], data };
}

/**
 * One synthetic tensor shaped `spec.dims`: values from its domain when it has one
 * (`TensorSpec.domain`: valid warm-up and profiling inputs), else all ones when the name
 * matches `MASK_NAME`, else seeded random values (file header).
 */
export function syntheticTensor(spec: ResolvedTensorSpec, seed: number): HostTensor {
  if (spec.domain !== undefined) return domainTensor(spec, spec.domain, seed);
  if (MASK_NAME.test(spec.name)) return onesTensor(spec);
  const n = elementCount(spec.dims);
  const next = mulberry32(hashSeed(seed, spec.name));
  const unit = (): number => next() / 0x80000000 - 1; // [-1, 1)
  const id = (): number => next() % SYNTHETIC_MAX_ID;
  let data: TensorData;
  switch (spec.dataType) {
    case 'float32': {
      const d = new Float32Array(n);
      for (let i = 0; i < n; i++) d[i] = unit();
      data = d;
      break;
    }
    case 'float64': {
      const d = new Float64Array(n);
      for (let i = 0; i < n; i++) d[i] = unit();
      data = d;
      break;
    }
    case 'float16': {
      const d = new Uint16Array(n);
      for (let i = 0; i < n; i++) d[i] = toHalfBits(unit());
      data = d;
      break;
    }
    case 'int64': {
      const d = new BigInt64Array(n);
      for (let i = 0; i < n; i++) d[i] = BigInt(id());
      data = d;
      break;
    }
    case 'int32': {
      const d = new Int32Array(n);
      for (let i = 0; i < n; i++) d[i] = id();
      data = d;
      break;
    }
    case 'uint8': {
      const d = new Uint8Array(n);
      for (let i = 0; i < n; i++) d[i] = id();
      data = d;
      break;
    }
    case 'int8': {
      const d = new Int8Array(n);
      for (let i = 0; i < n; i++) d[i] = id();
      data = d;
      break;
    }
    case 'bool': {
      const d = new Uint8Array(n);
      for (let i = 0; i < n; i++) d[i] = next() & 1;
      data = d;
      break;
    }
    case 'uint16':
    case 'int16':
    case 'uint32': {
      const d = spec.dataType === 'uint16' ? new Uint16Array(n) : spec.dataType === 'int16' ? new Int16Array(n) : new Uint32Array(n);
      for (let i = 0; i < n; i++) d[i] = id();
      data = d;
      break;
    }
    case 'uint64': {
      const d = new BigUint64Array(n);
      for (let i = 0; i < n; i++) d[i] = BigInt(id());
      data = d;
      break;
    }
    case 'string': {
      const d = new Array<string>(n);
      for (let i = 0; i < n; i++) d[i] = `s${id()}`;
      data = d;
      break;
    }
  }
  return { dataType: spec.dataType, dims: [...spec.dims], data };
}

/** Synthetic tensors for every spec, by name. */
export function syntheticTensors(specs: readonly ResolvedTensorSpec[], seed: number): TensorMap {
  const out: TensorMap = {};
  for (const s of specs) out[s.name] = syntheticTensor(s, seed);
  return out;
}
