/**
 * Online refinement (`src/predict/refine.ts`; docs/design.md#online-refinement,
 * docs/adaptive.md). Golden values are computed independently in each test: by hand (stated in
 * comments), or by a reference written again as a plain loop (the ridge formula on plain means,
 * the nearest-rank quantile). With at most 1/α = 72 observations of a row (H = 50) the weights
 * max(α, 1/n) are 1/n, so every mean is a plain arithmetic mean.
 *
 *   r = measured / base, u = 1 / base;  a = (E[ur] − E[u]E[r]) / (Var u + λ E[u²]);  b = E[r] − a E[u]
 *   refined = base × clamp(b + a · clamp(u, u_min, u_max), 1/10, 10) × guard
 *
 * Tolerance: relative 1e-12 where the test repeats the same arithmetic in another order
 * (rounding only); the stated bound where it checks a property (fit vs the true device).
 */
import { beforeAll, describe, expect, it } from 'vitest';
import type { Logger } from '../src/log.ts';
import { ModelRepository } from '../src/model/repository.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import type { Group, Predictor } from '../src/predict/predictor.ts';
import { DETECTOR_THRESHOLD, INTERCEPT_RIDGE, RefinedPredictor } from '../src/predict/refine.ts';
import { simEnv } from '../src/reproduce/colocation.ts';
import { runExperiment, type ExperimentService } from '../src/runtime/experiment.ts';
import type { Decision, GroupObservation, QueryController, RefinementStatus, WaitingQuery } from '../src/schedule/controller.ts';
import { AbacusController, createController } from '../src/schedule/index.ts';
import { SoloMemo } from '../src/schedule/heads.ts';
import { ServeMetrics } from '../src/serve/metrics.ts';
import { crudeSimPredictor, FakePredictor } from './schedule/fake-predictor.ts';
import { input, query } from './schedule/query.ts';

/** Same arithmetic repeated: floating-point rounding only. */
const REL_TOL = 1e-12;
const expectRel = (got: number, want: number, tol = REL_TOL): void => expect(Math.abs(got / want - 1), `${got} vs ${want}`).toBeLessThanOrEqual(tol);

const H = 50;
const ALPHA = 1 - Math.pow(2, -1 / H);

/** Fake predictor: a slot costs end × batch ms (start 0, model a or c: 1 ms/op … see fake-predictor.ts). */
const slot = (model: string, end = 10, batch = 1): Group[number] => ({ model, start: 0, end, batch, seqLen: 0 });
const A: Group = [slot('a')]; // fake: 10 ms
const AB: Group = [slot('a'), slot('b')]; // fake: max(10, 20) + 0.5 × 10 = 25 ms
const AA: Group = [slot('a'), slot('a', 5)];
const B: Group = [slot('b')]; // 20 ms

/** Feed `n` observations of `group` measured at `ratio` × the base prediction. */
function feed(r: RefinedPredictor, group: Group, ratio: number, n: number): void {
  for (let i = 0; i < n; i++) {
    const baseMs = r.base.predict([group])[0]!;
    r.observe(group, baseMs, ratio * baseMs);
  }
}

/** Reference fit: the module's formula on plain means of (u, r) pairs. */
function referenceFit(pairs: readonly (readonly [number, number])[]): { a: number; b: number } {
  const n = pairs.length;
  const m = (f: (p: readonly [number, number]) => number): number => pairs.reduce((s, p) => s + f(p), 0) / n;
  const mU = m(([x]) => 1 / x);
  const mR = m(([x, y]) => y / x);
  const mUU = m(([x]) => 1 / (x * x));
  const mUR = m(([x, y]) => y / (x * x));
  const a = (mUR - mU * mR) / (mUU - mU * mU + INTERCEPT_RIDGE * mUU);
  return { a, b: mR - a * mU };
}

describe('RefinedPredictor: the correction', () => {
  it("starts as the identity: predictions are the base predictions, in the caller's array", () => {
    const r = new RefinedPredictor(new FakePredictor());
    const out = new Float64Array(3);
    expect(r.predict([A, AB, B], out)).toBe(out);
    expect([...out]).toEqual([10, 25, 20]);
    expect(r.fitOf(A)).toEqual({ a: 0, b: 1 });
    expect([r.kind, r.deviceId, r.models, r.maxSlots]).toEqual(['fake', 'test:fake', ['a', 'b', 'c', 'd'], 8]);
    expect([r.guardActive, r.guardFactor, r.restarts, r.recentMape]).toEqual([false, 1, 0, 0]);
  });

  it('one shape measured 1.5× the base: the factor is the mean ratio, exactly 1.5 from the first observation (running-mean start)', () => {
    const r = new RefinedPredictor(new FakePredictor());
    expectRel(r.alpha, ALPHA);
    feed(r, A, 1.5, 1);
    expect(r.fitOf(A)).toEqual({ a: 0, b: 1.5 }); // a single latency: Var u = 0, so a = 0 and b = E[r]
    expect(r.predict([A])[0]).toBe(15);
    feed(r, A, 1.5, 3 * H);
    expect(r.predict([A])[0]).toBe(15);
    expect(r.observedGroups).toBe(3 * H + 1);
  });

  it('after 1/α observations the means are EWMAs: the weight of an observation halves every H observations', () => {
    const r = new RefinedPredictor(new FakePredictor(), { detectChanges: false, guard: false });
    feed(r, A, 1, 100); // n = 100 > 1/α ≈ 72.6: w = α from here on
    feed(r, A, 2, H);
    // E[r] = 1 + (2 − 1) × (1 − (1 − α)^H) = 1 + 0.5 (one half-life)
    expectRel(r.fitOf(A).b, 1.5, 1e-12);
  });

  it('several latencies measured 1.5 × base − 0.73 ms (a fixed part that does not slow down): the ridge fit recovers the affine device', () => {
    const r = new RefinedPredictor(new FakePredictor(), { detectChanges: false });
    const shapes: Group[] = [[slot('a', 2)], [slot('a', 4)], [slot('a', 8)], [slot('a', 10, 2)]]; // base 2, 4, 8, 20 ms
    const pairs: [number, number][] = [];
    for (let k = 0; k < 10; k++) {
      for (const g of shapes) {
        const x = r.base.predict([g])[0]!;
        r.observe(g, x, 1.5 * x - 0.73);
        pairs.push([x, 1.5 * x - 0.73]);
      }
    }
    const ref = referenceFit(pairs);
    const fit = r.fitOf(A);
    expectRel(fit.a, ref.a, 1e-12);
    expectRel(fit.b, ref.b, 1e-12);
    // property: the ridge (λ = 0.01) costs at most 2 % of the truth at any observed latency
    for (const g of shapes) {
      const x = r.base.predict([g])[0]!;
      expect(Math.abs(r.predict([g])[0]! / (1.5 * x - 0.73) - 1)).toBeLessThanOrEqual(0.02);
    }
    // not extrapolated: below the smallest observed base (2 ms) the factor at 2 ms holds
    const at2 = r.predict([[slot('a', 2)]])[0]! / 2;
    expectRel(r.predict([[slot('a', 1)]])[0]!, at2, 1e-12);
    // and above the largest (20 ms) the factor at 20 ms
    const at20 = r.predict([[slot('a', 10, 2)]])[0]! / 20;
    expectRel(r.predict([[slot('a', 10, 4)]])[0]!, 40 * at20, 1e-12);
  });

  it('keys are independent (model set and group size); unseen keys use the global fit', () => {
    const r = new RefinedPredictor(new FakePredictor());
    feed(r, A, 2, 10); // key {a}/1 and global: mean ratio 2
    expect(r.fitOf(A)).toEqual({ a: 0, b: 2 });
    for (const g of [B, AB, AA]) expect(r.fitOf(g)).toEqual({ a: 0, b: 2 }); // {b}/1, {a,b}/2, {a}/2: global
    feed(r, AB, 0.5, 10); // the pair's own key: 0.5; the global: mean of 10 × 2 and 10 × 0.5
    expect(r.fitOf(AB).b).toBe(0.5);
    expectRel(r.fitOf(B).b, 1.25);
    expect(r.fitOf(A).b).toBe(2); // untouched by the pair's observations
    expect(r.keys).toBe(2);
    expect(r.keyOf(AB)).toBe(r.keyOf([slot('b', 3), slot('a', 7, 4)])); // a set: slot order, cut and batch do not matter
    expect(r.keyOf(AA)).not.toBe(r.keyOf(A));
  });

  it('soloMs is refineMs of a one-slot group; baseSoloMs inverts it on every piece (clamped range, affine middle, guard)', () => {
    const r = new RefinedPredictor(new FakePredictor(), { detectChanges: false });
    for (let k = 0; k < 5; k++) {
      for (const e of [2, 5, 10]) {
        const g = [slot('a', e)];
        r.observe(g, e, 1.5 * e - 0.73);
      }
    }
    feed(r, B, 3, 4);
    expect(r.fitOf(A).a).toBeLessThan(0);
    for (const m of ['a', 'b', 'c']) for (const x of [0.5, 2, 3.3, 7, 10, 50]) expect(r.soloMs(m, x)).toBe(r.refineMs([slot(m)], x));
    for (const m of ['a', 'b', 'c', 'nope']) {
      for (const x of [0.5, 1, 2, 3.3, 7, 10, 50, 400]) expectRel(r.baseSoloMs(m, r.soloMs(m, x)), x, 1e-12);
    }
  });

  it('caps the keys: past maxKeys a new key is not held and uses the global fit', () => {
    const r = new RefinedPredictor(new FakePredictor(), { maxKeys: 2, detectChanges: false });
    feed(r, A, 2, 10);
    feed(r, B, 2, 10);
    feed(r, AB, 4, 10);
    expect(r.keys).toBe(2);
    expect(r.fitOf(AB)).toEqual(r.fitOf([slot('c'), slot('d')])); // never seen: global
    expect(r.fitOf(A).b).toBe(2);
  });

  it('models past the 30 with a key bit use the global fit', () => {
    const names = Array.from({ length: 32 }, (_, i) => `m${String(i).padStart(2, '0')}`);
    const base: Predictor = { kind: 'const', deviceId: 'test', models: names, maxSlots: 4, predict: (gs, out = new Float64Array(gs.length)) => out.fill(10, 0, gs.length) };
    const r = new RefinedPredictor(base);
    expect(r.keyOf([slot('m29')])).toBeGreaterThanOrEqual(0);
    expect(r.keyOf([slot('m29'), slot('m30')])).toBe(-1);
    feed(r, [slot('m31')], 2, 5);
    expect(r.keys).toBe(0);
    expect(r.predict([[slot('m31')]])[0]).toBe(20);
  });

  it('ignores non-finite or ≤ 0 values; clamps the ratio at 10', () => {
    const r = new RefinedPredictor(new FakePredictor());
    for (const [p, m] of [[0, 10], [-1, 10], [10, 0], [10, -5], [NaN, 10], [10, Infinity], [Infinity, 10]] as const) r.observe(A, p, m);
    expect(r.observedGroups).toBe(0);
    expect(r.fitOf(A)).toEqual({ a: 0, b: 1 });
    expect(r.rollingMape).toBe(0);
    r.observe(A, 10, 1e6); // ratio 1e5 counts as 10
    expect(r.fitOf(A).b).toBe(10);
  });

  it('rejects bad options with a RangeError naming them', () => {
    const p = new FakePredictor();
    expect(() => new RefinedPredictor(p, { halfLifeGroups: 0 })).toThrow(/RefineOptions\.halfLifeGroups must be a finite number > 0, got 0/);
    expect(() => new RefinedPredictor(p, { halfLifeGroups: Infinity })).toThrow(RangeError);
    expect(() => new RefinedPredictor(p, { maxKeys: 1.5 })).toThrow(/RefineOptions\.maxKeys must be an integer ≥ 1, got 1\.5/);
    expect(() => new RefinedPredictor(p, { mapeWindow: 0 })).toThrow(/RefineOptions\.mapeWindow must be an integer ≥ 1/);
    expect(() => new RefinedPredictor(p, { guardWindow: 9 })).toThrow(/RefineOptions\.guardWindow must be an integer ≥ 10, got 9/);
    expect(() => new RefinedPredictor(p, { guardInMape: 0.2, guardOutMape: 0.1 })).toThrow(/0 < guardInMape < guardOutMape/);
    expect(() => new RefinedPredictor(p, { guardQuantile: 0 })).toThrow(/RefineOptions\.guardQuantile must be in \(0, 1\]/);
  });
});

describe('RefinedPredictor: change detection', () => {
  it('a ×1.5 step after 100 calibrated groups restarts the fits at the 4th group after it; then the factor is exactly the new ratio', () => {
    const logged: unknown[][] = [];
    const logger = { info: (...args: unknown[]) => logged.push(args) } as unknown as Logger;
    const r = new RefinedPredictor(new FakePredictor(), { guard: false, logger });
    feed(r, A, 1, 100);
    // By hand: before the restart b_i = 1.5 − 0.5 (1 − α)^(i−1), e_i = ln(1.5 / b_i), d_i = d_{i−1} + α_d (e_i − d_{i−1}),
    // α_d = 1 − 2^(−1/8) = 0.0830: d = 0.0337, 0.0639, 0.0912 (≤ ln 1.1 = 0.0953), 0.1156 (> ln 1.1) at the 4th group.
    expect(DETECTOR_THRESHOLD).toBeCloseTo(Math.log(1.1), 15);
    feed(r, A, 1.5, 3);
    expect(r.restarts).toBe(0);
    expect(r.fitOf(A).b).toBeLessThan(1.1);
    feed(r, A, 1.5, 1);
    expect(r.restarts).toBe(1);
    expect(r.fitOf(A)).toEqual({ a: 0, b: 1.5 }); // restarted from the triggering observation (running mean)
    expect(B.length === 1 && r.fitOf(B).b).toBe(1.5); // the global fit restarted too
    expect(logged.map((l) => l[1])).toEqual(['predictor refinement restarted: the device changed']);
    expect(logged[0]![0]).toMatchObject({ observedGroups: 103, threshold: 1.1 });
  });

  it('noise of ±3 % never restarts (1000 groups); without detection the same step is learned at the EWMA rate', () => {
    const r = new RefinedPredictor(new FakePredictor(), { guard: false });
    for (let i = 0; i < 1000; i++) r.observe(A, 10, 10 * (1 + 0.03 * Math.sin(i * 1.7)));
    expect(r.restarts).toBe(0);
    const slow = new RefinedPredictor(new FakePredictor(), { guard: false, detectChanges: false });
    feed(slow, A, 1, 100);
    feed(slow, A, 1.5, 4);
    // E[r] = 1 + 0.5 (1 − (1 − α)^4)
    expectRel(slow.fitOf(A).b, 1 + 0.5 * (1 - Math.pow(1 - ALPHA, 4)), 1e-12);
  });
});

describe('RefinedPredictor: the guard', () => {
  /** Reference: one shape, multiplicative running mean; the guard by its definition (window 50, ≥ 10, out > 0.1, in ≤ 0.05, q 0.9 nearest rank). */
  function reference(ratios: readonly number[]): { active: boolean; factor: number; transitions: string[] } {
    let sum = 0;
    const ape: number[] = [];
    const q: number[] = [];
    let active = false;
    let factor = 1;
    const transitions: string[] = [];
    ratios.forEach((ratio, i) => {
      const b = i === 0 ? 1 : sum / i;
      ape.push(Math.abs(b - ratio) / ratio);
      q.push(ratio / b);
      sum += ratio;
      const w = ape.slice(-50);
      const mape = w.reduce((s, x) => s + x, 0) / w.length;
      const quant = (): number => Math.max(1, [...q.slice(-50)].sort((x, y) => x - y)[Math.ceil(0.9 * w.length) - 1]!);
      if (w.length < 10) return;
      if (!active && mape > 0.1) {
        active = true;
        factor = quant();
        transitions.push('out');
      } else if (active && mape <= 0.05) {
        active = false;
        factor = 1;
        transitions.push('in');
      } else if (active) factor = quant();
    });
    return { active, factor, transitions };
  }

  it('out of calibration above 10 % over the window: overlapped groups × the 0.9 quantile of measured ÷ refined, one-slot groups not; back at ≤ 5 %; both logged', () => {
    const logged: [Record<string, unknown>, string][] = [];
    const logger = { info: (o: Record<string, unknown>, m: string) => logged.push([o, m]) } as unknown as Logger;
    const r = new RefinedPredictor(new FakePredictor(), { detectChanges: false, logger });
    const ratios = Array.from({ length: 20 }, (_, i) => [1.3, 0.8, 1.1, 0.7][i % 4]!); // noisy, mean 0.975
    for (const x of ratios) r.observe(A, 10, 10 * x);
    const ref = reference(ratios);
    expect(ref.transitions).toEqual(['out']);
    expect(r.guardActive).toBe(true);
    expectRel(r.guardFactor, ref.factor, 1e-12);
    expect(r.guardFactor).toBeGreaterThan(1.2);
    expectRel(r.predict([A])[0]!, 10 * r.fitOf(A).b, 1e-12); // one slot: not inflated (a ≈ 0: one latency)
    expect(r.soloMs('a', 10)).toBe(r.predict([A])[0]!);
    expectRel(r.predict([AB])[0]!, 25 * r.fitOf(AB).b * ref.factor, 1e-12); // overlapped: inflated
    expectRel(r.refineMs(AB, 25), r.predict([AB])[0]!, 1e-12);
    expect(logged[0]![1]).toBe('predictor out of calibration: guard on');
    expect(logged[0]![0]).toMatchObject({ window: 10, outAbove: 0.1, inAtOrBelow: 0.05 });
    // calibrated again: a long run at the mean ratio brings the window MAPE down to ≤ 5 %
    const calm = Array.from({ length: 200 }, () => 0.975);
    for (const x of calm) r.observe(A, 10, 10 * x);
    const ref2 = reference([...ratios, ...calm]);
    expect(ref2.transitions).toEqual(['out', 'in']);
    expect([r.guardActive, r.guardFactor]).toEqual([false, 1]);
    expect(logged.map((l) => l[1])).toEqual(['predictor out of calibration: guard on', 'predictor calibrated again: guard off']);
    expect(r.recentMape).toBeLessThanOrEqual(0.05);
  });

  it('off (guard: false): never inflates', () => {
    const r = new RefinedPredictor(new FakePredictor(), { detectChanges: false, guard: false });
    for (let i = 0; i < 40; i++) r.observe(A, 10, 10 * [1.3, 0.8, 1.1, 0.7][i % 4]!);
    expect([r.guardActive, r.guardFactor]).toEqual([false, 1]);
  });
});

describe('RefinedPredictor: rolling MAPE', () => {
  /** Reference: one shape, so the fit is multiplicative: b = the mean ratio so far (weights max(α, 1/n)). */
  function reference(pairs: readonly (readonly [number, number])[], window: number): { refined: number; base: number } {
    let m = 1;
    const ape: [number, number][] = [];
    pairs.forEach(([b, y], i) => {
      ape.push([Math.abs(b * m - y) / y, Math.abs(b - y) / y]);
      m += Math.max(ALPHA, 1 / (i + 1)) * (y / b - m);
    });
    const last = ape.slice(-window);
    return { refined: last.reduce((s, x) => s + x[0], 0) / last.length, base: last.reduce((s, x) => s + x[1], 0) / last.length };
  }

  it('over the last N groups: the refined prediction before each update (without the guard), and the base', () => {
    const r = new RefinedPredictor(new FakePredictor(), { mapeWindow: 4, detectChanges: false });
    const measured = [20, 10, 5, 10, 40, 10];
    const pairs = measured.map((y) => [10, y] as const);
    for (const [b, y] of pairs) r.observe(A, b, y);
    // base APEs 0.5, 0, 1, 0, 0.75, 0 → last 4: (1 + 0 + 0.75 + 0) / 4
    expect(r.rollingBaseMape).toBeCloseTo(0.4375, 12);
    const ref = reference(pairs, 4);
    expectRel(r.rollingMape, ref.refined);
    expect(r.rollingMape).not.toBeCloseTo(r.rollingBaseMape, 3); // the correction moved it
  });

  it('stays exact over many wraps (sums recomputed once per wrap)', () => {
    const r = new RefinedPredictor(new FakePredictor(), { mapeWindow: 7, detectChanges: false });
    const pairs: (readonly [number, number])[] = [];
    for (let i = 0; i < 1000; i++) pairs.push([10, 10 * (1.5 + 0.4 * Math.sin(i))]);
    for (const [b, y] of pairs) r.observe(A, b, y);
    const ref = reference(pairs, 7);
    expectRel(r.rollingMape, ref.refined, 1e-9);
    expectRel(r.rollingBaseMape, ref.base, 1e-9);
  });
});

describe('SoloMemo with a refinement scale', () => {
  it('keeps base values and returns them refined by the current scale', () => {
    let factor = 2;
    const memo = new SoloMemo(16, { soloMs: (m, x) => (m === 'a' ? factor * x + 1 : x), baseSoloMs: (m, y) => (m === 'a' ? (y - 1) / factor : y) });
    const qa = query('x', 'S1', 'a', { arrivalMs: 0, qosTargetMs: 10 });
    const qb = query('y', 'S2', 'b', { arrivalMs: 0, qosTargetMs: 10 });
    const [ka, kb] = [memo.key(qa), memo.key(qb)];
    memo.set(ka, 21); // refined 21 = 2 × 10 + 1: base 10
    memo.set(kb, 7);
    factor = 3;
    expect(memo.get(ka)).toBe(31);
    expect(memo.get(kb)).toBe(7);
  });
});

describe('abacus with refine', () => {
  const NOW = 100;
  const q = (id: string, service: string, model: string, headroomMs: number): WaitingQuery => query(id, service, model, { arrivalMs: NOW - 10, qosTargetMs: headroomMs + 10 });
  const observation = (ratio: number, model = 'a'): GroupObservation => ({
    segments: [{ queryId: 'o', service: 'S1', model, start: 0, end: 10, operators: 10, batch: 1, seqLen: 0, latencyMs: (model === 'a' ? 10 : 20) * ratio }],
    groupLatencyMs: (model === 'a' ? 10 : 20) * ratio,
    predictedMs: 999, // not used: the refiner learns against the base prediction
  });

  it('off (the default): no refiner, observe changes nothing, decisions identical', () => {
    const plain = createController('abacus', {}, new FakePredictor());
    const off = createController('abacus', { refine: false }, new FakePredictor()) as AbacusController;
    expect(off.refiner).toBeUndefined();
    const inp = input(NOW, [[q('x', 'S1', 'a', 30)], [q('y', 'S2', 'b', 95)]]);
    const seq = (c: QueryController): Decision[] => {
      const first = c.decide(inp);
      for (let i = 0; i < 20; i++) c.observe(observation(1.5));
      return [first, c.decide(inp)]; // the second hits the solo memo: stats differ, the decision not
    };
    const [a, b] = [seq(off), seq(plain)];
    expect(a).toEqual(b);
    expect({ ...a[1]!, stats: undefined }).toEqual({ ...a[0]!, stats: undefined });
  });

  it('on: learns from the base prediction of the executed group; predictions follow, the memo is refreshed', () => {
    const c = createController('abacus', { refine: 'true' }, new FakePredictor()) as AbacusController;
    expect(c.refiner).toBeInstanceOf(RefinedPredictor);
    const inp = input(NOW, [[q('x', 'S1', 'a', 1000)]]);
    expect(c.decide(inp).predictedMs).toBe(10); // identity
    c.decide(inp); // the solo prediction is now memoized
    for (let i = 0; i < H; i++) c.observe(observation(1.5));
    expect(c.refiner!.refineMs(A, 10)).toBe(15); // against base 10, not the 999 reported
    const d = c.decide(inp);
    expect(d.stats.soloMemoHits).toBe(1); // still remembered: the memo keeps the base value, refined on the way out
    expect(d.predictedMs).toBe(15);
    c.observe({ segments: [], groupLatencyMs: 5 }); // no segment: not observed
    expect(c.refiner!.observedGroups).toBe(H);
  });

  it('guard on: a pair that fits at the refined predictions is not launched, the most urgent query runs alone', () => {
    // a (10 ms) with headroom 30 and b (20 ms) with 95: {a, b} = 25 ms fits the budget of 30 without the guard.
    const c = createController('abacus', { refine: true }, new FakePredictor()) as AbacusController;
    const inp = input(NOW, [[q('x', 'S1', 'a', 30)], [q('y', 'S2', 'b', 95)]]);
    expect(c.decide(inp).group.map((s) => s.queryId)).toEqual(['x', 'y']);
    // b measured alternately 1.4× and 0.7× its base: noise, no bias (mean 1.05), recent MAPE > 10 %
    for (let i = 0; i < 12; i++) c.observe(observation(i % 2 === 0 ? 1.4 : 0.7, 'b'));
    const refiner = c.refiner!;
    expect(refiner.guardActive).toBe(true);
    expect(refiner.guardFactor).toBeGreaterThan(1.3);
    expect(c.refinement).toMatchObject({ guardActive: true, guardFactor: refiner.guardFactor });
    const d = c.decide(inp);
    // the pair now predicts > 30 ms (25 × its global fit × the guard); x alone fits
    expect(refiner.predict([[{ model: 'a', start: 0, end: 10, batch: 1, seqLen: 0 }, { model: 'b', start: 0, end: 10, batch: 1, seqLen: 0 }]])[0]!).toBeGreaterThan(30);
    expect(d.group[0]!.queryId).toBe('x');
    expect(d.group.some((s) => s.queryId === 'y' && s.end === 10)).toBe(false);
  });
});

describe('refinement on a drifted simulator (virtual time)', () => {
  const specs = new Map<string, ModelSpec>();
  beforeAll(async () => {
    const repo = new ModelRepository();
    for (const name of ['resnet50', 'bert'] as const) specs.set(name, await repo.zooSpec(name));
  });

  const crude = crudeSimPredictor;

  it('resnet50 + bert, ×1.5 at mid-run: the predictor MAPE with refinement is lower than without', async () => {
    const services: ExperimentService[] = ['resnet50', 'bert'].map((name) => ({
      name,
      spec: specs.get(name)!,
      qosTargetMs: 50,
      maxQueueLength: 10_000,
      batchSizes: [1, 2, 4],
      ...(name === 'bert' ? { seqLens: [16, 32, 64] } : {}),
    }));
    const run = async (refine: boolean): Promise<number> => {
      const r = await runExperiment(simEnv('sim:a100:drift-1.5x@5000ms', services, crude(), 3), { services, policy: 'abacus', policyParams: { refine }, rateQps: 100, queries: 1000, seed: 3 });
      expect(r.groups).toBeGreaterThan(500);
      return r.predictorMape;
    };
    const without = await run(false);
    const withRefine = await run(true);
    expect(withRefine).toBeLessThan(without);
  }, 60_000);
});

describe('/metrics: abacus_predictor_rolling_mape and the guard', () => {
  it('reads the refinement at scrape time; no series without one', async () => {
    const metrics = new ServeMetrics({ models: ['m'], processMetrics: false });
    const source: { status: RefinementStatus | undefined } = { status: undefined };
    metrics.bind({ queueDepth: () => 0, ready: () => true, refinement: () => source.status });
    expect(await metrics.registry.metrics()).not.toMatch(/abacus_predictor_(rolling_mape|guard_active|guard_factor)\{/);
    const c = createController('abacus', { refine: true }, new FakePredictor());
    for (const ratio of [2, 1]) c.observe({ segments: [{ queryId: 'o', service: 'S1', model: 'a', start: 0, end: 10, operators: 10, batch: 1, seqLen: 0, latencyMs: 10 * ratio }], groupLatencyMs: 10 * ratio });
    source.status = c.refinement;
    // base 10 vs 20 and 10: offline APEs 0.5, 0 → 0.25; refined: 0.5 (identity), then 20 vs 10 (mean ratio 2): 1 → 0.75
    const text = await metrics.registry.metrics();
    expect(text).toContain('abacus_predictor_rolling_mape{predictor="offline"} 0.25');
    expect(text).toContain('abacus_predictor_rolling_mape{predictor="refined"} 0.75');
    expect(text).toContain('abacus_predictor_guard_active{guard="inflate_quantile"} 0');
    expect(text).toContain('abacus_predictor_guard_factor{guard="inflate_quantile"} 1');
    expect(createController('abacus', {}, new FakePredictor()).refinement).toBeUndefined();
  });
});
