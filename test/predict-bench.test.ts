/**
 * The predictor benchmark's code path (`bench/predictor.ts`) on a few hundred simulated groups
 * of the small variants, so `npm run bench -- --only predictor` cannot rot unnoticed. No timing
 * is asserted (benchmarks are not tests): only that every reported quantity is finite and > 0.
 */
import { expect, it } from 'vitest';
import { benchPredictor } from '../bench/predictor.ts';

it('reports call latency and training time for mlp and linear', async () => {
  const r = await benchPredictor({ samples: 300, calls: 200, epochs: 1, models: ['resnet50-small', 'bert-small'] });
  expect(r.calls.map((c) => c.kind)).toEqual(['mlp', 'linear']);
  expect(r.training.map((t) => t.kind)).toEqual(['mlp', 'linear']);
  for (const c of r.calls) for (const x of [c.medianUs, c.p99Us, c.calls]) expect(Number.isFinite(x) && x > 0, String(x)).toBe(true);
  for (const t of r.training) for (const x of [t.samples, t.trainSeconds, t.holdoutMape!, t.holdoutMaeMs!]) expect(Number.isFinite(x) && x > 0, String(x)).toBe(true);
});
