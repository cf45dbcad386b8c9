/**
 * Online refinement (`src/predict/refine.ts`; DESIGN.md "Predictions are refined online", issue
 * 13 item 1). Golden values come from the EWMA formula computed by hand in each test:
 *
 *   α = 1 − 2^(−1/H);  m ← m + α (ln(measured/base) − m);  factor = exp(m)
 *
 * so after k observations of a constant ratio r from m = 0: factor = r^(1 − 2^(−k/H)).
 * Tolerance: relative 1e-12 where the test repeats the same arithmetic (pow / exp / log rounding
 * over ≤ 500 steps); the stated bound where it checks convergence. The drift run is a property
 * (refined MAPE < offline MAPE on the same drifted device), no tight numbers.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { ModelRepository } from '../src/model/repository.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import type { Group, Predictor } from '../src/predict/predictor.ts';
import { RefinedPredictor } from '../src/predict/refine.ts';
import { simEnv } from '../src/reproduce/colocation.ts';
import { runExperiment, type ExperimentService } from '../src/runtime/experiment.ts';
import type { Decision, GroupObservation, QueryController, RefinementStatus, WaitingQuery } from '../src/schedule/controller.ts';
import { AbacusController, createController } from '../src/schedule/index.ts';
import { SoloMemo } from '../src/schedule/heads.ts';
import { ServeMetrics } from '../src/serve/metrics.ts';
import { FakePredictor } from './schedule/fake-predictor.ts';
import { input, query } from './schedule/query.ts';

/** Same arithmetic repeated: floating-point rounding only. */
const REL_TOL = 1e-12;
const expectRel = (got: number, want: number, tol = REL_TOL): void => expect(Math.abs(got / want - 1), `${got} vs ${want}`).toBeLessThanOrEqual(tol);

const H = 50;
const ALPHA = 1 - Math.pow(2, -1 / H);

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

describe('RefinedPredictor: the correction', () => {
  it('starts at factor 1: predictions are the base predictions, in the caller\'s array', () => {
    const r = new RefinedPredictor(new FakePredictor());
    const out = new Float64Array(3);
    expect(r.predict([A, AB, B], out)).toBe(out);
    expect([...out]).toEqual([10, 25, 20]);
    expect(r.globalFactor).toBe(1);
    expect([r.kind, r.deviceId, r.models, r.maxSlots]).toEqual(['fake', 'test:fake', ['a', 'b', 'c', 'd'], 8]);
  });

  it('measured 1.5× the base: the factor follows r^(1 − 2^(−k/H)) and converges to 1.5', () => {
    const r = new RefinedPredictor(new FakePredictor());
    expectRel(r.alpha, ALPHA);
    feed(r, A, 1.5, 1);
    expectRel(r.factorOf(A), Math.pow(1.5, ALPHA)); // m = α ln 1.5
    feed(r, A, 1.5, H - 1);
    expectRel(r.factorOf(A), Math.sqrt(1.5), 1e-12); // one half-life: half of the log way
    expectRel(r.predict([A])[0]!, 10 * Math.sqrt(1.5));
    feed(r, A, 1.5, 9 * H);
    // ten half-lives: 1.5^(1 − 2^−10) = 1.5 × (1 − 3.96e-4); within 4e-4 of 1.5, still below it
    expectRel(r.factorOf(A), Math.pow(1.5, 1 - Math.pow(2, -10)), 1e-12);
    expect(Math.abs(r.factorOf(A) / 1.5 - 1)).toBeLessThanOrEqual(4e-4);
    expect(r.factorOf(A)).toBeLessThan(1.5);
    expect(r.observedGroups).toBe(10 * H);
  });

  it('keys are independent (model set and group size); a new key starts from the global factor', () => {
    const r = new RefinedPredictor(new FakePredictor());
    feed(r, A, 2, 2 * H); // key {a}/1 and global: m = ln 2 × (1 − 2^−2) = 0.75 ln 2
    expectRel(r.factorOf(A), Math.pow(2, 0.75));
    expectRel(r.globalFactor, Math.pow(2, 0.75));
    // unseen keys use the global factor: {b}/1, {a,b}/2, {a}/2 (same model set, other size)
    for (const g of [B, AB, AA]) expectRel(r.factorOf(g), Math.pow(2, 0.75));
    feed(r, AB, 0.5, 2 * H); // {a,b}/2 starts at 0.75 ln 2: m = 0.75 ln 2 × 2^−2 − ln 2 × (1 − 2^−2) = −0.5625 ln 2
    expectRel(r.factorOf(AB), Math.pow(2, -0.5625));
    expectRel(r.globalFactor, Math.pow(2, -0.5625)); // the global mean saw the same sequence
    expectRel(r.factorOf(A), Math.pow(2, 0.75)); // untouched by the pair's observations
    expectRel(r.factorOf(B), Math.pow(2, -0.5625)); // still unseen: global
    expect(r.keys).toBe(2);
    expect(r.keyOf(AB)).toBe(r.keyOf([slot('b', 3), slot('a', 7, 4)])); // a set: slot order, cut and batch do not matter
    expect(r.keyOf(AA)).not.toBe(r.keyOf(A));
  });

  it('factorOfSolo is factorOf a one-slot group', () => {
    const r = new RefinedPredictor(new FakePredictor());
    feed(r, A, 2, 7);
    feed(r, AB, 0.5, 3);
    for (const m of ['a', 'b', 'c']) expect(r.factorOfSolo(m)).toBe(r.factorOf([slot(m)]));
    expect(r.factorOfSolo('nope')).toBe(r.globalFactor);
  });

  it('caps the keys: past maxKeys a new key is not held and uses the global factor', () => {
    const r = new RefinedPredictor(new FakePredictor(), { maxKeys: 2 });
    feed(r, A, 2, 10);
    feed(r, B, 2, 10);
    feed(r, AB, 4, 10);
    expect(r.keys).toBe(2);
    expect(r.factorOf(AB)).toBe(r.globalFactor);
    expect(r.factorOf(A)).not.toBe(r.globalFactor);
  });

  it('models past the 30 with a key bit use the global factor', () => {
    const names = Array.from({ length: 32 }, (_, i) => `m${String(i).padStart(2, '0')}`);
    const base: Predictor = { kind: 'const', deviceId: 'test', models: names, maxSlots: 4, predict: (gs, out = new Float64Array(gs.length)) => out.fill(10, 0, gs.length) };
    const r = new RefinedPredictor(base);
    expect(r.keyOf([slot('m29')])).toBeGreaterThanOrEqual(0);
    expect(r.keyOf([slot('m29'), slot('m30')])).toBe(-1);
    feed(r, [slot('m31')], 2, 5);
    expect(r.keys).toBe(0);
    expectRel(r.factorOf([slot('m31')]), Math.pow(2, 1 - Math.pow(1 - ALPHA, 5)));
  });

  it('ignores non-finite or ≤ 0 values; clamps |ln ratio| at ln 10', () => {
    const r = new RefinedPredictor(new FakePredictor());
    for (const [p, m] of [[0, 10], [-1, 10], [10, 0], [10, -5], [NaN, 10], [10, Infinity], [Infinity, 10]] as const) r.observe(A, p, m);
    expect(r.observedGroups).toBe(0);
    expect(r.globalFactor).toBe(1);
    expect(r.rollingMape).toBe(0);
    r.observe(A, 10, 1e6); // ratio 1e5 counts as 10
    expectRel(r.factorOf(A), Math.pow(10, ALPHA));
  });

  it('rejects bad options with a RangeError naming them', () => {
    const p = new FakePredictor();
    expect(() => new RefinedPredictor(p, { halfLifeGroups: 0 })).toThrow(/RefineOptions\.halfLifeGroups must be a finite number > 0, got 0/);
    expect(() => new RefinedPredictor(p, { halfLifeGroups: Infinity })).toThrow(RangeError);
    expect(() => new RefinedPredictor(p, { maxKeys: 1.5 })).toThrow(/RefineOptions\.maxKeys must be an integer ≥ 1, got 1\.5/);
    expect(() => new RefinedPredictor(p, { mapeWindow: 0 })).toThrow(/RefineOptions\.mapeWindow must be an integer ≥ 1/);
  });
});

describe('RefinedPredictor: rolling MAPE', () => {
  /** Reference: the same formula, written again as a plain loop over (base, measured) pairs. */
  function reference(pairs: readonly (readonly [number, number])[], window: number): { refined: number; base: number } {
    let m = 0;
    const ape: [number, number][] = [];
    for (const [b, y] of pairs) {
      ape.push([Math.abs(b * Math.exp(m) - y) / y, Math.abs(b - y) / y]);
      m += ALPHA * (Math.log(y / b) - m);
    }
    const last = ape.slice(-window);
    return { refined: last.reduce((s, x) => s + x[0], 0) / last.length, base: last.reduce((s, x) => s + x[1], 0) / last.length };
  }

  it('over the last N groups: the refined prediction before each update, and the base', () => {
    const r = new RefinedPredictor(new FakePredictor(), { mapeWindow: 4 });
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
    const r = new RefinedPredictor(new FakePredictor(), { mapeWindow: 7 });
    const pairs: (readonly [number, number])[] = [];
    for (let i = 0; i < 1000; i++) pairs.push([10, 10 * (1.5 + 0.4 * Math.sin(i))]);
    for (const [b, y] of pairs) r.observe(A, b, y);
    const ref = reference(pairs, 7);
    expectRel(r.rollingMape, ref.refined, 1e-9);
    expectRel(r.rollingBaseMape, ref.base, 1e-9);
  });
});

describe('SoloMemo with a refinement scale', () => {
  it('keeps base values and returns them × the current solo factor of their model', () => {
    let factor = 2;
    const memo = new SoloMemo(16, { factorOfSolo: (m) => (m === 'a' ? factor : 1) });
    const qa = query('x', 'S1', 'a', { arrivalMs: 0, qosTargetMs: 10 });
    const qb = query('y', 'S2', 'b', { arrivalMs: 0, qosTargetMs: 10 });
    const [ka, kb] = [memo.key(qa), memo.key(qb)];
    memo.set(ka, 20); // refined 20 at factor 2: base 10
    memo.set(kb, 7);
    factor = 3;
    expect(memo.get(ka)).toBe(30);
    expect(memo.get(kb)).toBe(7);
  });
});

describe('abacus with refine', () => {
  const NOW = 100;
  const q = (id: string, service: string, model: string, headroomMs: number): WaitingQuery => query(id, service, model, { arrivalMs: NOW - 10, qosTargetMs: headroomMs + 10 });
  const observation = (ratio: number): GroupObservation => ({
    segments: [{ queryId: 'o', service: 'S1', model: 'a', start: 0, end: 10, operators: 10, batch: 1, seqLen: 0, latencyMs: 10 * ratio }],
    groupLatencyMs: 10 * ratio,
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

  it('on: learns from the base prediction of the executed group; predictions scale, the memo is refreshed', () => {
    const c = createController('abacus', { refine: 'true' }, new FakePredictor()) as AbacusController;
    expect(c.refiner).toBeInstanceOf(RefinedPredictor);
    const inp = input(NOW, [[q('x', 'S1', 'a', 1000)]]);
    expect(c.decide(inp).predictedMs).toBe(10); // factor 1
    c.decide(inp); // the solo prediction is now memoized
    for (let i = 0; i < H; i++) c.observe(observation(1.5));
    expectRel(c.refiner!.factorOf(A), Math.sqrt(1.5)); // against base 10, not the 999 reported
    const d = c.decide(inp);
    expect(d.stats.soloMemoHits).toBe(1); // still remembered: the memo keeps the base value, scaled on the way out
    expectRel(d.predictedMs!, 10 * Math.sqrt(1.5));
    c.observe({ segments: [], groupLatencyMs: 5 }); // no segment: not observed
    expect(c.refiner!.observedGroups).toBe(H);
  });
});

describe('refinement on a drifted simulator (virtual time)', () => {
  const specs = new Map<string, ModelSpec>();
  beforeAll(async () => {
    const repo = new ModelRepository();
    for (const name of ['resnet50', 'bert'] as const) specs.set(name, await repo.zooSpec(name));
  });

  /** A crude offline predictor (no profiling): ms per operator × √batch, longest slot × 1.1 for a pair. */
  const crude = (): Predictor => ({
    kind: 'crude',
    deviceId: 'sim:a100',
    models: ['bert', 'resnet50'],
    maxSlots: 8,
    predict(groups, out = new Float64Array(groups.length)) {
      groups.forEach((g, i) => {
        let longest = 0;
        for (const s of g) longest = Math.max(longest, (s.end - s.start) * 0.05 * Math.sqrt(s.batch));
        out[i] = longest * (g.length > 1 ? 1.1 : 1);
      });
      return out;
    },
  });

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

describe('/metrics: abacus_predictor_rolling_mape', () => {
  it('reads the refinement at scrape time; no series without one', async () => {
    const metrics = new ServeMetrics({ models: ['m'], processMetrics: false });
    const source: { status: RefinementStatus | undefined } = { status: undefined };
    metrics.bind({ queueDepth: () => 0, ready: () => true, refinement: () => source.status });
    expect(await metrics.registry.metrics()).not.toMatch(/abacus_predictor_rolling_mape\{/);
    const c = createController('abacus', { refine: true }, new FakePredictor());
    for (const ratio of [2, 1]) c.observe({ segments: [{ queryId: 'o', service: 'S1', model: 'a', start: 0, end: 10, operators: 10, batch: 1, seqLen: 0, latencyMs: 10 * ratio }], groupLatencyMs: 10 * ratio });
    source.status = c.refinement;
    // base 10 vs 20 and 10: offline APEs 0.5, 0 → 0.25; refined: 0.5, then |10·2^α − 10| / 10
    const text = await metrics.registry.metrics();
    expect(text).toContain('abacus_predictor_rolling_mape{predictor="offline"} 0.25');
    const refined = Number(/abacus_predictor_rolling_mape\{predictor="refined"\} (\S+)/.exec(text)?.[1]);
    expectRel(refined, (0.5 + (Math.pow(2, ALPHA) - 1)) / 2, 1e-12);
    expect(createController('abacus', {}, new FakePredictor()).refinement).toBeUndefined();
  });
});
