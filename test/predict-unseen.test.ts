/**
 * `OpenPredictor` (predict/unseen.ts): admitting a model the predictor was not trained on, by the
 * `flop` rebuild or the cost fallback. The base here is a hand-written predictor whose solo
 * latency is an exact linear law of the segment costs, so the fitted fallback has a known answer.
 */
import { describe, expect, it } from 'vitest';
import type { ModelSpec } from '../src/model/spec.ts';
import { segmentCosts } from '../src/predict/features.ts';
import type { Group, Predictor } from '../src/predict/predictor.ts';
import { RefinedPredictor } from '../src/predict/refine.ts';
import { calibrationSlots, CostFallback, nnlsRelative, OpenPredictor } from '../src/predict/unseen.ts';
import { CNN, TX } from './predict-fixtures.ts';

/** The law: c0 + ck·kernels + cg·GFLOP + cm·MB (ms). */
const LAW = [0.5, 0.01, 2, 0.1] as const;
function lawMs(spec: ModelSpec, start: number, end: number, batch: number, seqLen: number): number {
  const c = segmentCosts(spec, start, end, batch, seqLen);
  return LAW[0] + LAW[1] * c.kernels + LAW[2] * c.gflop + LAW[3] * c.mb;
}

/** A `full`-style base that knows only `specs`: solo = the law; a group = 0.8 × the sum of its slots' solo latencies. */
function lawPredictor(specs: readonly ModelSpec[], kind = 'law'): Predictor & { calls: number } {
  const byName = new Map(specs.map((s) => [s.name, s]));
  return {
    kind,
    deviceId: 'sim:a100',
    models: specs.map((s) => s.name).sort(),
    maxSlots: 3,
    calls: 0,
    predict(groups: readonly Group[], out?: Float64Array): Float64Array {
      this.calls++;
      const res = out ?? new Float64Array(groups.length);
      groups.forEach((g, i) => {
        if (g.length > 3) throw new RangeError(`group ${i} has ${g.length} slots`);
        let sum = 0;
        for (const s of g) {
          const spec = byName.get(s.model);
          if (spec === undefined) throw new RangeError(`group ${i}: model '${s.model}' is not known to the predictor`);
          sum += lawMs(spec, s.start, s.end, s.batch, s.seqLen);
        }
        res[i] = g.length > 1 ? 0.8 * sum : sum;
      });
      return res;
    },
  };
}

describe('nnlsRelative', () => {
  it('recovers exact non-negative coefficients and never returns a negative one', () => {
    const x = [
      [1, 2, 3, 0],
      [1, 5, 1, 2],
      [1, 7, 4, 1],
      [1, 1, 9, 3],
      [1, 3, 2, 8],
    ];
    const truth = [0.5, 0.25, 2, 0.1];
    const y = x.map((r) => r.reduce((a, v, j) => a + v * truth[j]!, 0));
    const c = nnlsRelative(x, y);
    c.forEach((v, j) => expect(v).toBeCloseTo(truth[j]!, 6));
    // y decreasing in column 1: the unconstrained fit would give it a negative coefficient
    const y2 = x.map((r) => 10 - r[1]! + 0.001 * r[2]!);
    for (const v of nnlsRelative(x, y2)) expect(v).toBeGreaterThanOrEqual(0);
  });
});

describe('CostFallback', () => {
  it('fitted to a base that follows the law exactly, it recovers the law (scale 1, MAPE ~0) and estimates an unseen model by it', () => {
    const base = lawPredictor([CNN, TX]);
    const fb = CostFallback.fit(base, new Map([['cnn', CNN], ['tx', TX]]));
    expect(fb.scale).toBeCloseTo(1, 6);
    expect(fb.calibrationMape).toBeLessThan(1e-6);
    // 1e-3 relative: the fixtures' MB are tiny (bytes / 1e6), so the 1e-9 ridge moves the MB coefficient a little
    fb.coefficients.forEach((v, j) => expect(Math.abs(v - LAW[j]!) / LAW[j]!).toBeLessThan(1e-3));
    // the law's value for a shape it was not fitted on (relative tolerance 1e-5)
    const est = fb.soloMs(TX, 0, 2, 3, 12);
    expect(Math.abs(est - lawMs(TX, 0, 2, 3, 12)) / lawMs(TX, 0, 2, 3, 12)).toBeLessThan(1e-5);
  });

  it('scales up so that the estimate is at least the base on 90% of the calibration points', () => {
    // a base 30% slower on every other point than the law: the fit lies in between, the scale lifts it
    const law = lawPredictor([CNN, TX]);
    let i = 0;
    const noisy: Predictor = { ...law, predict: (g, out) => law.predict(g, out).map((v) => (i++ % 2 === 0 ? v : 1.3 * v)) };
    const fb = CostFallback.fit(noisy, new Map([['cnn', CNN], ['tx', TX]]));
    expect(fb.scale).toBeGreaterThan(1);
    i = 0;
    const groups: Group[] = [];
    for (const spec of [CNN, TX]) for (const b of [1, 2, 4, 8, 16]) groups.push([{ model: spec.name, start: 0, end: spec.operators.length, batch: b, seqLen: 0 }]);
    const y = noisy.predict(groups);
    const covered = groups.filter((g, k) => fb.soloMs(g[0]!.model === 'cnn' ? CNN : TX, 0, g[0]!.end, g[0]!.batch, 0) >= y[k]! * (1 - 1e-9)).length;
    expect(covered / groups.length).toBeGreaterThanOrEqual(0.9);
  });

  it('fitted to measured solo runs of the model itself, it recovers the law of those runs', () => {
    const measured = calibrationSlots(TX).map((s) => ({ ...s, latencyMs: lawMs(TX, s.start, s.end, s.batch, s.seqLen) }));
    // TX: 2 operators → one cut; 3 segments × 5 batches × seq 0, 16, 64
    expect(measured).toHaveLength(3 * 5 * 3);
    const fb = CostFallback.fromMeasurements(TX, measured);
    expect(fb.calibrationMape).toBeLessThan(1e-6);
    expect(Math.abs(fb.soloMs(TX, 1, 2, 3, 40) / lawMs(TX, 1, 2, 3, 40) - 1)).toBeLessThan(1e-5);
    expect(() => CostFallback.fromMeasurements(TX, measured.slice(0, 3))).toThrow(/at least 4 solo measurements of tx, got 3/);
    expect(() => CostFallback.fromMeasurements(TX, [...measured.slice(0, 4), { ...measured[0]!, latencyMs: 0 }])).toThrow(/measurement 4 of tx: latencyMs 0 must be a finite number > 0/);
  });

  it('refuses to fit without a spec of a model the base scores', () => {
    expect(() => CostFallback.fit(lawPredictor([CNN]), new Map([['tx', TX]]))).toThrow(/no calibration data for a cost fallback: none of the given specs \(tx\) is a model the predictor scores \(cnn\)/);
  });
});

describe('OpenPredictor', () => {
  const cnnSolo: Group = [{ model: 'cnn', start: 0, end: 3, batch: 2, seqLen: 0 }];
  const txSolo: Group = [{ model: 'tx', start: 1, end: 2, batch: 4, seqLen: 16 }];

  it('before any admission it is its base', () => {
    const base = lawPredictor([CNN]);
    const open = new OpenPredictor(base, { specs: new Map([['cnn', CNN]]) });
    expect(open.models).toEqual(['cnn']);
    expect([...open.predict([cnnSolo])]).toEqual([...base.predict([cnnSolo])]);
    expect(() => open.predict([txSolo])).toThrow(/model 'tx' is not known/);
  });

  it('a full-feature base: the unseen model gets the cost fallback; groups without it are unchanged, groups with it add its solo estimate', () => {
    const base = lawPredictor([CNN]);
    const open = new OpenPredictor(base, { specs: new Map([['cnn', CNN]]) });
    const before = open.predict([cnnSolo, [...cnnSolo, { model: 'cnn', start: 1, end: 2, batch: 1, seqLen: 0 }]]);
    const a = open.admit(TX);
    expect(a).toMatchObject({ model: 'tx', how: 'cost-fallback' });
    expect(a.note).toMatch(/^predicted by the cost fallback .* until it is profiled/);
    expect(open.admission('tx')).toBe(a);
    expect(open.admit(TX)).toBe(a); // idempotent
    expect(open.models).toEqual(['cnn', 'tx']);
    const fb = open.costFallbackOf('tx')!;
    const txMs = fb.soloMs(TX, 1, 2, 4, 16);
    const [cnnOnly, pair, txOnly, mixed] = open.predict([cnnSolo, [...cnnSolo, { model: 'cnn', start: 1, end: 2, batch: 1, seqLen: 0 }], txSolo, [txSolo[0]!, cnnSolo[0]!]]);
    expect(cnnOnly).toBe(before[0]);
    expect(pair).toBe(before[1]);
    expect(txOnly).toBeCloseTo(txMs, 12);
    expect(mixed).toBeCloseTo(base.predict([cnnSolo])[0]! + txMs, 12); // serial: no overlap credit
    // the base's law fitted on one model only (cnn): the estimate of tx is within a factor of 3 of the law here
    const ratio = txMs / lawMs(TX, 1, 2, 4, 16);
    expect(ratio).toBeGreaterThan(1 / 3);
    expect(ratio).toBeLessThan(3);
    // allocation-free use with `out` is honoured
    const out = new Float64Array(4);
    expect(open.predict([txSolo], out)).toBe(out);
  });

  it('admitted with measurements: its own fit, and the note says where they were measured', () => {
    const open = new OpenPredictor(lawPredictor([CNN]), { specs: new Map([['cnn', CNN]]) });
    // a device 1.5× the law for tx
    const measured = calibrationSlots(TX).map((s) => ({ ...s, latencyMs: 1.5 * lawMs(TX, s.start, s.end, s.batch, s.seqLen) }));
    const a = open.admit(TX, { measured, measuredOn: 'a private copy of sim:a100' });
    expect(a.note).toMatch(/^predicted by the cost fallback \(FLOPs, bytes and kernels fitted to 45 solo runs of it measured on a private copy of sim:a100, 0\.0% MAPE on them\)/);
    expect(open.predict([txSolo])[0]! / (1.5 * lawMs(TX, 1, 2, 4, 16))).toBeCloseTo(1, 5);
  });

  it('a fallback slot is validated like a base slot', () => {
    const open = new OpenPredictor(lawPredictor([CNN]), { specs: new Map([['cnn', CNN]]) });
    open.admit(TX);
    expect(() => open.predict([[{ model: 'tx', start: 0, end: 3, batch: 1, seqLen: 0 }]])).toThrow(/group 0 slot 0 \(tx\): segment \[0, 3\) must satisfy 0 ≤ start < end ≤ 2/);
    expect(() => open.predict([[cnnSolo[0]!, { model: 'tx', start: 0, end: 1, batch: 0, seqLen: 0 }]])).toThrow(/group 0 slot 1 \(tx\): batch 0 must be an integer ≥ 1/);
    expect(() => open.predict([[...cnnSolo, ...txSolo, ...txSolo, ...txSolo]])).toThrow(/group 0 has 4 slots; a group has 1\.\.3/);
    // a base slot's error names the caller's group
    expect(() => open.predict([txSolo, [...txSolo, { model: 'nope', start: 0, end: 1, batch: 1, seqLen: 0 }]])).toThrow(/^group 1 without its fallback slots: group 0: model 'nope' is not known/);
  });

  it('a flop-feature base: the rebuild scores the model itself and replaces the base', () => {
    const base = lawPredictor([CNN], 'flop');
    const seen: string[][] = [];
    const open = new OpenPredictor(base, {
      specs: new Map([['cnn', CNN]]),
      rebuild: (specs) => {
        seen.push([...specs.keys()].sort());
        return lawPredictor([...specs.values()], 'flop');
      },
    });
    expect(open.admit(TX)).toMatchObject({ how: 'flop-predictor', note: expect.stringMatching(/flop-feature predictor/) as unknown });
    expect(seen).toEqual([['cnn', 'tx']]);
    expect(open.costFallbackOf('tx')).toBeUndefined();
    expect(open.predict([txSolo])[0]).toBeCloseTo(lawMs(TX, 1, 2, 4, 16), 12);
    expect(open.predict([cnnSolo])[0]).toBe(base.predict([cnnSolo])[0]);
  });

  it('a trained model is admitted as trained; another variant under a known name is refused', () => {
    const open = new OpenPredictor(lawPredictor([CNN]), { specs: new Map([['cnn', CNN]]) });
    expect(open.admit(CNN)).toEqual({ model: 'cnn', how: 'trained', note: '' });
    const shorter: ModelSpec = { ...CNN, operators: CNN.operators.slice(0, 2) };
    expect(() => open.admit(shorter)).toThrow(/model 'cnn' is scored with 3 operators, the loaded one has 2/);
  });
});

describe('online refinement of an admitted model (refine.ts numbers models the base admits later)', () => {
  it('learns the fallback\'s error for the new model apart from the trained one', () => {
    const open = new OpenPredictor(lawPredictor([CNN]), { specs: new Map([['cnn', CNN]]) });
    const refiner = new RefinedPredictor(open, { detectChanges: false, guard: false });
    open.admit(TX);
    expect(refiner.models).toEqual(['cnn', 'tx']);
    const cnn: Group = [{ model: 'cnn', start: 0, end: 3, batch: 1, seqLen: 0 }];
    const tx: Group = [{ model: 'tx', start: 0, end: 2, batch: 1, seqLen: 0 }];
    const [cnnBase, txBase] = open.predict([cnn, tx]);
    // the device: cnn as predicted, tx twice the fallback's estimate (one shape each: the fit is b = the ratio, a = 0)
    for (let i = 0; i < 30; i++) {
      refiner.observe(cnn, cnnBase!, cnnBase!);
      refiner.observe(tx, txBase!, 2 * txBase!);
    }
    const [cnnRefined, txRefined] = refiner.predict([cnn, tx]);
    // relative 1e-9: the same arithmetic (means of equal ratios), rounding only
    expect(Math.abs(cnnRefined! / cnnBase! - 1)).toBeLessThan(1e-9);
    expect(Math.abs(txRefined! / (2 * txBase!) - 1)).toBeLessThan(1e-9);
    expect(refiner.soloMs('tx', txBase!) / (2 * txBase!)).toBeCloseTo(1, 9);
  });
});
