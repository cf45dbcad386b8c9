/** A fixed-cost predictor for runtime and serving tests (no profiling, deterministic). */
import type { Group, Predictor } from '../../src/predict/predictor.ts';

/** A predictor with a fixed cost: `msPerOperator` × operators × √batch; groups cost their longest slot × 1.1. */
export function fixedPredictor(models: readonly string[], msPerOperator: number): Predictor {
  return {
    kind: 'fixed',
    deviceId: 'sim:a100',
    models: [...models].sort(),
    maxSlots: 8,
    predict(groups: readonly Group[], out = new Float64Array(groups.length)) {
      groups.forEach((g, i) => {
        let longest = 0;
        for (const s of g) longest = Math.max(longest, (s.end - s.start) * msPerOperator * Math.sqrt(s.batch));
        out[i] = longest * (g.length > 1 ? 1.1 : 1);
      });
      return out;
    },
  };
}
