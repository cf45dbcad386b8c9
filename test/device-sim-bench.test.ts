/**
 * The simulator speed benchmark's code path (bench/sim-speed.ts) on a short simulated span, so
 * `npm run bench -- --only sim` cannot rot unnoticed. No timing is asserted (benchmarks are
 * not tests): only that the counts are consistent and the figures finite and positive.
 */
import { expect, it } from 'vitest';
import { benchSimSpeed } from '../bench/sim-speed.ts';

it('sim-speed reports operator executions per second for a 4-way uncontrolled overlap', async () => {
  const r = await benchSimSpeed({ simulatedMs: 200 });
  expect(r.services).toEqual(['resnet50', 'inception_v3', 'vgg16', 'bert']);
  expect(r.queries).toBeGreaterThan(4);
  expect(r.operators).toBeGreaterThanOrEqual(r.queries * 12);
  expect(r.simulatedMs).toBeGreaterThanOrEqual(200);
  for (const x of [r.wallMs, r.operatorsPerSecond, r.operatorsPer10s, r.speedup]) expect(Number.isFinite(x) && x > 0, String(x)).toBe(true);
  // Same seed, same simulation.
  const again = await benchSimSpeed({ simulatedMs: 200 });
  expect([again.queries, again.operators, again.simulatedMs]).toEqual([r.queries, r.operators, r.simulatedMs]);
});
