/**
 * A latency predictor for tests on `sim:a100`, exact per measured shape (test helper).
 */
import { measureSoloOnSim } from '../../src/deployment/solo-measure.ts';
import { artifactAt } from '../../src/model/artifact.ts';
import type { ModelSpec } from '../../src/model/spec.ts';
import type { Predictor } from '../../src/predict/predictor.ts';

/**
 * A predictor calibrated per shape on the simulator without drift: each whole query's measured
 * solo latency (model, batch, sequence length), a segment its share of the operators, a group its
 * longest slot + half the rest. The streams' correction is one factor per kind of launch, so it
 * needs a predictor right per shape up to a common factor (the crude one of the barrier test is
 * off by 2–9× depending on the shape, which only a refiner keyed by model learns).
 * @param shapes the whole-query shapes to measure (`seqLen` 0 for models without a sequence axis); a
 *   slot of another shape is predicted NaN.
 */
export async function measuredTablePredictor(specs: ReadonlyMap<string, ModelSpec>, shapes: readonly { model: string; batch: number; seqLen: number }[]): Promise<Predictor> {
  const table = new Map<string, number>();
  for (const spec of specs.values()) {
    const slots = shapes.filter((s) => s.model === spec.name).map((s) => ({ ...s, start: 0, end: spec.operators.length }));
    const measured = await measureSoloOnSim('sim:a100', 5, artifactAt('/nonexistent', spec), slots);
    slots.forEach((s, i) => table.set(`${s.model}/${s.batch}/${s.seqLen}`, measured[i]!.latencyMs));
  }
  return {
    kind: 'table',
    deviceId: 'sim:a100',
    models: [...specs.keys()].sort(),
    maxSlots: 8,
    predict(groups, out = new Float64Array(groups.length)) {
      groups.forEach((g, i) => {
        const ms = g.map((s) => (table.get(`${s.model}/${s.batch}/${s.seqLen}`) ?? Number.NaN) * ((s.end - s.start) / specs.get(s.model)!.operators.length));
        const longest = Math.max(...ms);
        out[i] = longest + 0.5 * (ms.reduce((a, b) => a + b, 0) - longest);
      });
      return out;
    },
  };
}
