/**
 * A dense layer for 4 inputs at once, in WebAssembly with 128-bit SIMD (two float64 lanes),
 * assembled here from its opcodes — no toolchain, no binary blob. The MLP's serving pass
 * (`mlp-predictor.ts`) runs every layer through it: the controller scores up to 4 candidate
 * groups per call, and 4 groups × 4 units per inner step reuse every loaded weight and input
 * 4 times, which plain JS cannot do (its typed-array loop needs ~0.45 ns per multiply-add
 * here, the kernel ~3× less; `bench/predictor.ts`).
 *
 * Arithmetic is float64 multiply then add, in the same order as the scalar loop (no fused
 * multiply-add in baseline wasm SIMD), so the two paths agree to the last bit except for
 * summation order across lanes, which does not exist here (each lane is one group).
 *
 *     dense(in, w, b, out, nIn, nOut, relu)   (byte addresses of float64 arrays)
 *       in  [nIn][4]    input of 4 groups, group index fastest
 *       w   [nIn][nOut] kernel, row-major as tfjs stores it
 *       b   [nOut]      bias
 *       out [nOut][4]   out[j][g] = act(b[j] + Σ_i in[i][g] · w[i][j]), act = ReLU when relu ≠ 0
 *
 * Opcodes: WebAssembly core spec §5.4 and the SIMD proposal's binary encoding
 * (https://github.com/WebAssembly/simd/blob/main/proposals/simd/BinarySIMD.md).
 */

/** The part of a WebAssembly.Memory used here (the project's lib settings carry no wasm types). */
export interface WasmMemory {
  readonly buffer: ArrayBuffer;
  /** Grow by `pages` of 64 KiB; views of the old buffer are detached. */
  grow(pages: number): number;
}

/** The part of the global WebAssembly API used here. */
interface WasmApi {
  validate(bytes: Uint8Array): boolean;
  Module: new (bytes: Uint8Array) => object;
  Instance: new (module: object) => { readonly exports: Record<string, unknown> };
}

/** The assembled kernel and its memory. */
export interface DenseKernel {
  readonly memory: WasmMemory;
  readonly dense: (input: number, w: number, b: number, out: number, nIn: number, nOut: number, relu: number) => void;
}

// value types
const I32 = 0x7f;
const V128 = 0x7b;
// instructions
const BLOCK = 0x02;
const LOOP = 0x03;
const IF = 0x04;
const VOID = 0x40;
const END = 0x0b;
const BR = 0x0c;
const BR_IF = 0x0d;
const LOCAL_GET = 0x20;
const LOCAL_SET = 0x21;
const LOCAL_TEE = 0x22;
const I32_CONST = 0x41;
const I32_GE_U = 0x4f;
const I32_GT_U = 0x4b;
const I32_ADD = 0x6a;
const I32_MUL = 0x6c;
const SIMD = 0xfd;
const V128_LOAD = 0x00;
const V128_LOAD64_SPLAT = 0x0a;
const V128_STORE = 0x0b;
const V128_CONST = 0x0c;
const F64X2_ADD = 0xf0;
const F64X2_MUL = 0xf2;
const F64X2_MAX = 0xf5;

function uleb(n: number): number[] {
  const out: number[] = [];
  do {
    let byte = n & 0x7f;
    n >>>= 7;
    if (n !== 0) byte |= 0x80;
    out.push(byte);
  } while (n !== 0);
  return out;
}

function sleb(n: number): number[] {
  const out: number[] = [];
  for (;;) {
    const byte = n & 0x7f;
    n >>= 7;
    if ((n === 0 && (byte & 0x40) === 0) || (n === -1 && (byte & 0x40) !== 0)) {
      out.push(byte);
      return out;
    }
    out.push(byte | 0x80);
  }
}

const simd = (op: number): number[] => [SIMD, ...uleb(op)];
/** memarg: alignment exponent (3 = 8 bytes, 4 = 16), constant offset in bytes. */
const mem = (align: number, offset: number): number[] => [...uleb(align), ...uleb(offset)];
const get = (l: number): number[] => [LOCAL_GET, ...uleb(l)];
const set = (l: number): number[] => [LOCAL_SET, ...uleb(l)];
const tee = (l: number): number[] => [LOCAL_TEE, ...uleb(l)];
const i32 = (v: number): number[] => [I32_CONST, ...sleb(v)];
const section = (id: number, body: number[]): number[] => [id, ...uleb(body.length), ...body];
const vec = (items: number[][]): number[] => [...uleb(items.length), ...items.flat()];
const name = (s: string): number[] => vec([...s].map((c) => [c.charCodeAt(0)]));

// locals: params 0..6, then i32 j, i, wp, xp, then v128 accumulators and temporaries
const IN = 0;
const W = 1;
const B = 2;
const OUT = 3;
const N_IN = 4;
const N_OUT = 5;
const RELU = 6;
const J = 7;
const I = 8;
const WP = 9;
const XP = 10;
/** Accumulator of unit u (0..3) of the block, lanes = groups (2p, 2p+1). */
const ACC = (u: number, p: number): number => 11 + u * 2 + p;
const X0 = 19;
const X1 = 20;
const WV = 21;

/**
 * One pass over `units` (4 or 1) units starting at j: accumulate, optional ReLU, store.
 * Leaves j unchanged.
 */
function unitBlock(units: number): number[] {
  const code: number[] = [];
  // acc(u, p) = splat(b[j + u])
  for (let u = 0; u < units; u++) {
    code.push(...get(B), ...get(J), ...i32(8), I32_MUL, I32_ADD, ...simd(V128_LOAD64_SPLAT), ...mem(3, u * 8), ...tee(ACC(u, 0)), ...set(ACC(u, 1)));
  }
  // i = 0; xp = in; wp = w + 8j
  code.push(...i32(0), ...set(I), ...get(IN), ...set(XP), ...get(W), ...get(J), ...i32(8), I32_MUL, I32_ADD, ...set(WP));
  code.push(BLOCK, VOID, LOOP, VOID);
  code.push(...get(I), ...get(N_IN), I32_GE_U, BR_IF, 1);
  // x0 = in[i][0..1], x1 = in[i][2..3]
  code.push(...get(XP), ...simd(V128_LOAD), ...mem(4, 0), ...set(X0));
  code.push(...get(XP), ...simd(V128_LOAD), ...mem(4, 16), ...set(X1));
  for (let u = 0; u < units; u++) {
    code.push(...get(WP), ...simd(V128_LOAD64_SPLAT), ...mem(3, u * 8), ...set(WV));
    for (let p = 0; p < 2; p++) {
      code.push(...get(ACC(u, p)), ...get(p === 0 ? X0 : X1), ...get(WV), ...simd(F64X2_MUL), ...simd(F64X2_ADD), ...set(ACC(u, p)));
    }
  }
  // xp += 32; wp += 8·nOut; i += 1
  code.push(...get(XP), ...i32(32), I32_ADD, ...set(XP));
  code.push(...get(WP), ...get(N_OUT), ...i32(8), I32_MUL, I32_ADD, ...set(WP));
  code.push(...get(I), ...i32(1), I32_ADD, ...set(I));
  code.push(BR, 0, END, END);
  // ReLU
  code.push(...get(RELU), IF, VOID);
  for (let u = 0; u < units; u++) {
    for (let p = 0; p < 2; p++) code.push(...get(ACC(u, p)), ...simd(V128_CONST), ...new Array<number>(16).fill(0), ...simd(F64X2_MAX), ...set(ACC(u, p)));
  }
  code.push(END);
  // out[j + u][2p .. 2p+1] at out + 32(j + u) + 16p
  for (let u = 0; u < units; u++) {
    for (let p = 0; p < 2; p++) code.push(...get(OUT), ...get(J), ...i32(32), I32_MUL, I32_ADD, ...get(ACC(u, p)), ...simd(V128_STORE), ...mem(4, 32 * u + 16 * p));
  }
  return code;
}

/** The module's bytes. */
export function denseKernelModule(): Uint8Array {
  const body: number[] = [];
  body.push(...i32(0), ...set(J));
  // blocks of 4 units while j + 4 ≤ nOut
  body.push(BLOCK, VOID, LOOP, VOID);
  body.push(...get(J), ...i32(4), I32_ADD, ...get(N_OUT), I32_GT_U, BR_IF, 1);
  body.push(...unitBlock(4));
  body.push(...get(J), ...i32(4), I32_ADD, ...set(J), BR, 0, END, END);
  // the remaining units one by one
  body.push(BLOCK, VOID, LOOP, VOID);
  body.push(...get(J), ...get(N_OUT), I32_GE_U, BR_IF, 1);
  body.push(...unitBlock(1));
  body.push(...get(J), ...i32(1), I32_ADD, ...set(J), BR, 0, END, END);
  body.push(END);
  const locals = vec([
    [...uleb(4), I32],
    [...uleb(11), V128],
  ]);
  const func = [...locals, ...body];
  const bytes = [
    ...[0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00],
    ...section(1, vec([[0x60, ...vec(new Array<number[]>(7).fill([I32])), ...vec([])]])), // type: (i32 ×7) → ()
    ...section(3, vec([uleb(0)])), // function 0 has type 0
    ...section(5, vec([[0x00, ...uleb(1)]])), // memory: min 1 page
    ...section(7, vec([[...name('dense'), 0x00, ...uleb(0)], [...name('memory'), 0x02, ...uleb(0)]])),
    ...section(10, vec([[...uleb(func.length), ...func]])),
  ];
  return Uint8Array.from(bytes);
}

/**
 * Instantiate the kernel (synchronously: the module is a few hundred bytes), or undefined where
 * WebAssembly or its SIMD extension is missing (callers fall back to plain JS).
 */
export function createDenseKernel(): DenseKernel | undefined {
  const wasm = (globalThis as { WebAssembly?: WasmApi }).WebAssembly;
  if (wasm === undefined) return undefined;
  const bytes = denseKernelModule();
  if (!wasm.validate(bytes)) return undefined;
  const instance = new wasm.Instance(new wasm.Module(bytes));
  const { dense, memory } = instance.exports as { dense: DenseKernel['dense']; memory: WasmMemory };
  return { dense, memory };
}
