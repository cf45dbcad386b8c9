/**
 * Symbolic dims from observations (part of the shape resolution of `shapes.ts`): given one dim
 * of a value as the onnxruntime probe saw it at several points (batch, sequence length, other
 * axes), the expression in the dim grammar (`model/spec.ts` `TensorSpec`) that reproduces every
 * observation — a number, a polynomial of batch and seq (`inferDim`), or a product of one factor
 * per axis, each an integer polynomial or `a·⌊(x + b)/d⌋ + c` (`inferDimGeneral`). Pure
 * arithmetic; undefined where no such form fits, never an error.
 */
import { evalDimExpression, formatDimExpression } from '../boundary.ts';
import type { DimTerm } from '../boundary.ts';
import type { DimBinding, ShapePoint } from './shape-binding.ts';

/** The integer nearest to x when x is within 1e-6 (relative) of it; undefined otherwise. */
function asInteger(x: number): number | undefined {
  const r = Math.round(x);
  return Number.isSafeInteger(r) && Math.abs(x - r) <= 1e-6 * Math.max(1, Math.abs(r)) ? r : undefined;
}

/**
 * Symbolic form of one dim observed at several points: the number when it is constant, else
 * `batch^a · P(seq)` with a ∈ {0, 1} and P a polynomial of degree ≤ 2 with integer
 * coefficients, fitted through the points at the first point's batch (at most three distinct
 * seq lengths; without a seq axis P is a constant) and checked against every point, written
 * with `formatDimExpression`. Undefined when no such form reproduces every observation.
 */
export function inferDim(values: readonly number[], points: readonly ShapePoint[], binding: DimBinding): number | string | undefined {
  const v0 = values[0]!;
  if (values.every((v) => v === v0)) return v0;
  const b0 = points[0]!.batch;
  const seqOf = (p: ShapePoint): number => (binding.seqName === undefined ? 0 : p.seqLen);
  // P through the points at batch b0 (Newton's divided differences, ≤ 3 distinct seq lengths).
  const xs: number[] = [];
  const ys: number[] = [];
  points.forEach((p, j) => {
    if (p.batch !== b0 || xs.includes(seqOf(p)) || xs.length === 3) return;
    xs.push(seqOf(p));
    ys.push(values[j]!);
  });
  let poly: [number, number, number];
  if (xs.length === 1) poly = [ys[0]!, 0, 0];
  else {
    const d1 = (ys[1]! - ys[0]!) / (xs[1]! - xs[0]!);
    if (xs.length === 2) poly = [ys[0]! - d1 * xs[0]!, d1, 0];
    else {
      const d2 = ((ys[2]! - ys[1]!) / (xs[2]! - xs[1]!) - d1) / (xs[2]! - xs[0]!);
      poly = [ys[0]! - d1 * xs[0]! + d2 * xs[0]! * xs[1]!, d1 - d2 * (xs[0]! + xs[1]!), d2];
    }
  }
  for (const batchPower of [0, 1]) {
    const coeffs = poly.map((c) => asInteger(c / b0 ** batchPower));
    if (coeffs.some((c) => c === undefined)) continue;
    const [c0, c1, c2] = coeffs as [number, number, number];
    const fits = points.every((p, j) => p.batch ** batchPower * (c0 + c1 * seqOf(p) + c2 * seqOf(p) ** 2) === values[j]);
    if (!fits) continue;
    const terms: DimTerm[] = [
      { coefficient: c2, batchPower, seqPower: 2 },
      { coefficient: c1, batchPower, seqPower: 1 },
      { coefficient: c0, batchPower, seqPower: 0 },
    ];
    return formatDimExpression(terms, { batch: binding.batchName, seq: binding.seqName });
  }
  return undefined;
}

/** A univariate factor: `a·⌊(x + b)/d⌋ + c` (d = 1: the polynomial c + a·x + q·x², q from `square`). */
export interface Factor {
  readonly a: number;
  readonly b: number;
  readonly d: number;
  readonly c: number;
  readonly square: number;
}

/** A factor of one named axis (`stride-rules.ts` derives them from strided ops). */
export interface AxisFactor {
  readonly axis: string;
  readonly factor: Factor;
}

/**
 * What the graph suggests for the fit of one axis (`stride-rules.ts`): `factors` derived exactly
 * from strided ops (a Conv of stride 160 over `samples+256`), tried before any other floor
 * division; `divisors` = the strides and hops of the graph's ops (any size, 160 or 320 as well
 * as 2), tried with every offset before the generic divisors 2 … 64.
 */
export interface FitHints {
  readonly factors: readonly Factor[];
  readonly divisors: readonly number[];
}

const NO_HINTS: FitHints = { factors: [], divisors: [] };

/** `⌊(x + b)/d⌋` with b brought into [0, d) (the constant c takes the rest): the form `fitFactors` writes. */
export function normalizeFactor(f: Factor): Factor {
  if (f.d <= 1) return f;
  const q = Math.floor(f.b / f.d);
  return { ...f, b: f.b - q * f.d, c: f.c + f.a * q };
}

/** The value of a factor at x. */
export function factorAt(f: Factor, x: number): number {
  return f.a * Math.floor((x + f.b) / f.d) + f.c + f.square * x * x;
}

function gcd(a: number, b: number): number {
  a = Math.abs(a);
  b = Math.abs(b);
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}

/** Most candidate factors `fitFactors` returns for one axis. */
const MAX_FACTOR_CANDIDATES = 8;

/**
 * The factors through the observations (x, v) with distinct xs, simplest first: an integer
 * polynomial of degree ≤ 2 (alone, when it fits), else the factors the graph implies
 * (`hints.factors`) that fit, then `a·⌊(x + b)/d⌋ + c` with integers a, c, 0 ≤ b < d, for d
 * among the graph's strides (`hints.divisors`, any size), then the powers of two 2 … 64 (strides
 * of 2 to 64, which few probe sizes cannot tell from a neighbouring divisor: at 256, 512, 768,
 * 1024 (+1, +3) `x/32+1` and `(x+23)/31` agree), then the other d ≤ 64; by d, then b (a floor
 * before a ceiling when the sizes cannot tell them apart). At most `MAX_FACTOR_CANDIDATES`;
 * empty when none fits.
 */
function fitFactors(xs: readonly number[], vs: readonly number[], hints: FitHints = NO_HINTS): Factor[] {
  const fits = (f: Factor): boolean => xs.every((x, j) => factorAt(f, x) === vs[j]);
  if (xs.length >= 2) {
    const d1 = (vs[1]! - vs[0]!) / (xs[1]! - xs[0]!);
    let poly: [number, number, number] = [vs[0]! - d1 * xs[0]!, d1, 0];
    if (xs.length >= 3) {
      const d2 = ((vs[2]! - vs[1]!) / (xs[2]! - xs[1]!) - d1) / (xs[2]! - xs[0]!);
      poly = [vs[0]! - d1 * xs[0]! + d2 * xs[0]! * xs[1]!, d1 - d2 * (xs[0]! + xs[1]!), d2];
    }
    const ints = poly.map(asInteger);
    if (ints.every((c) => c !== undefined)) {
      const [c0, c1, c2] = ints as [number, number, number];
      const f = { a: c1, b: 0, d: 1, c: c0, square: c2 };
      if (fits(f)) return [f];
    }
  }
  const out: Factor[] = [];
  for (const hint of hints.factors) {
    const f = normalizeFactor(hint);
    if (fits(f) && !out.some((o) => o.a === f.a && o.b === f.b && o.d === f.d && o.c === f.c && o.square === f.square)) out.push(f);
  }
  if (xs.length < 3) return out;
  const generic = Array.from({ length: 63 }, (_, i) => i + 2);
  const isPowerOfTwo = (d: number): boolean => (d & (d - 1)) === 0;
  generic.sort((p, q) => Number(isPowerOfTwo(q)) - Number(isPowerOfTwo(p)) || p - q);
  const fromGraph = [...new Set(hints.divisors.filter((d) => Number.isSafeInteger(d) && d >= 2))].sort((p, q) => p - q);
  const divisors = [...fromGraph, ...generic.filter((d) => !fromGraph.includes(d))];
  for (const d of divisors) {
    for (let b = 0; b < d; b++) {
      const q = xs.map((x) => Math.floor((x + b) / d));
      const j = q.findIndex((v) => v !== q[0]);
      if (j < 0) continue;
      const a = (vs[j]! - vs[0]!) / (q[j]! - q[0]!);
      if (!Number.isInteger(a) || a === 0) continue;
      const f = { a, b, d, c: vs[0]! - a * q[0]!, square: 0 };
      if (fits(f) && !out.some((o) => o.a === f.a && o.b === f.b && o.d === f.d && o.c === f.c)) {
        out.push(f);
        if (out.length === MAX_FACTOR_CANDIDATES) return out;
      }
    }
  }
  return out;
}

/** A factor written in the dim grammar (`TensorSpec`), parenthesized unless it is one name or number. */
function formatFactor(f: Factor, name: string): string {
  const text = bareFactor(f, name);
  return text === name || /^[0-9]+$/.test(text) ? text : `(${text})`;
}

/** A factor written in the dim grammar, unparenthesized. */
function bareFactor(f: Factor, name: string): string {
  const parts: string[] = [];
  const push = (coefficient: number, body: string): void => {
    if (coefficient === 0) return;
    const abs = Math.abs(coefficient);
    const text = body === '' ? String(abs) : abs === 1 ? body : `${abs}*${body}`;
    parts.push(coefficient < 0 ? `-${text}` : parts.length > 0 ? `+${text}` : text);
  };
  push(f.square, `${name}*${name}`);
  const quotient = f.b === 0 ? `${name}/${f.d}` : `(${name}+${f.b})/${f.d}`;
  push(f.a, f.d === 1 ? name : f.a === 1 ? quotient : `(${quotient})`);
  push(f.c, '');
  return parts.length === 0 ? '0' : parts.join('');
}

/**
 * Symbolic form of one dim the polynomial form (`inferDim`) cannot write: a product of one
 * factor per axis it depends on (`fitFactors`, fitted through the points where only that axis
 * moves away from the first point) times an integer, e.g. `64*(height/4)*(width/4)` or
 * `((width+7)/8)`; each combination of the axes' candidate factors, simplest first, is checked
 * against every observation (points where several axes move included) by evaluating the
 * written expression, and the first that reproduces them all is taken. Undefined when none does.
 */
export function inferDimGeneral(values: readonly number[], points: readonly ShapePoint[], binding: DimBinding, hints: (axis: string) => FitHints = () => NO_HINTS): string | undefined {
  const base = points[0]!;
  const axes = axesOf(binding);
  const v0 = values[0]!;
  const candidates: { name: string; factors: Factor[] }[] = [];
  for (const axis of axes) {
    const xs: number[] = [];
    const vs: number[] = [];
    points.forEach((p, j) => {
      if (axes.some((o) => o !== axis && o.of(p) !== o.of(base))) return;
      const x = axis.of(p);
      if (xs.includes(x)) return;
      xs.push(x);
      vs.push(values[j]!);
    });
    if (vs.every((v) => v === v0)) continue;
    const factors = fitFactors(xs, vs, hints(axis.name));
    if (factors.length === 0) return undefined;
    candidates.push({ name: axis.name, factors });
  }
  if (candidates.length === 0) return undefined;
  const write = (chosen: readonly Factor[]): string | undefined => {
    if (chosen.length === 1) return bareFactor(chosen[0]!, candidates[0]!.name);
    // v = C · Π primitive(factor): divide each factor by the gcd of its coefficients
    let product = 1;
    const written: string[] = [];
    chosen.forEach((factor, k) => {
      const name = candidates[k]!.name;
      const g = gcd(gcd(factor.a, factor.c), factor.square) || 1;
      const primitive = { ...factor, a: factor.a / g, c: factor.c / g, square: factor.square / g };
      product *= factorAt(primitive, axes.find((x) => x.name === name)!.of(base));
      written.push(formatFactor(primitive, name));
    });
    if (product === 0 || v0 % product !== 0) return undefined;
    const constant = v0 / product;
    return [...(constant === 1 ? [] : [String(constant)]), ...written].join('*');
  };
  const reproduces = (expression: string): boolean =>
    points.every((p, j) => {
      const bindings = new Map(axes.map((a) => [a.name, a.of(p)]));
      return evalDimExpression(expression, bindings) === values[j];
    });
  // combinations in order of the sum of the candidates' ranks (simplest first)
  const sizes = candidates.map((c) => c.factors.length);
  const combos: number[][] = [[]];
  for (const size of sizes) combos.splice(0, combos.length, ...combos.flatMap((c) => Array.from({ length: size }, (_, i) => [...c, i])));
  combos.sort((p, q) => p.reduce((a, b) => a + b, 0) - q.reduce((a, b) => a + b, 0));
  for (const combo of combos) {
    const expression = write(combo.map((i, k) => candidates[k]!.factors[i]!));
    if (expression !== undefined && reproduces(expression)) return expression;
  }
  return undefined;
}

/** The axes a probe point gives (batch, the sequence axis, the other axes), each with its size at a point. */
function axesOf(binding: DimBinding): { name: string; of: (p: ShapePoint) => number }[] {
  const axes: { name: string; of: (p: ShapePoint) => number }[] = [{ name: binding.batchName, of: (p) => p.batch }];
  if (binding.seqName !== undefined) axes.push({ name: binding.seqName, of: (p) => p.seqLen });
  for (const [n, v] of binding.symbols) axes.push({ name: n, of: (p) => p.symbols?.[n] ?? v });
  return axes;
}

/**
 * The factor of one dim that depends on a single axis other than the batch (a frame count, a
 * downsampled width): the simplest `fitFactors` candidate (hints first) that reproduces the dim
 * at every point, with its axis; undefined when the dim is constant, depends on the batch or on
 * several axes, or no factor fits. `stride-rules.ts` composes such factors through strided ops.
 */
export function fitAxisFactor(values: readonly number[], points: readonly ShapePoint[], binding: DimBinding, hints: (axis: string) => FitHints): AxisFactor | undefined {
  const axes = axesOf(binding);
  const candidates = axes.filter((axis) => axis.name !== binding.batchName);
  for (const axis of candidates) {
    const byX = new Map<number, number>();
    const consistent = points.every((p, j) => {
      const x = axis.of(p);
      const v = byX.get(x);
      byX.set(x, values[j]!);
      return v === undefined || v === values[j];
    });
    if (!consistent) continue;
    const xs = [...byX.keys()];
    const vs = xs.map((x) => byX.get(x)!);
    if (vs.every((v) => v === vs[0])) return undefined;
    const factor = fitFactors(xs, vs, hints(axis.name))[0];
    return factor === undefined ? undefined : { axis: axis.name, factor };
  }
  return undefined;
}

/** An axis factor written in the dim grammar (`TensorSpec`), unparenthesized. */
export function formatAxisFactor(f: AxisFactor): string {
  return bareFactor(f.factor, f.axis);
}
