/** A thread-aware fake predictor for the thread-rule tests. */
import type { Group } from '../../src/predict/predictor.ts';
import { FakePredictor } from './fake-predictor.ts';

/** The fake predictor with each slot's cost divided by its thread count (1 when absent); records the counts asked. */
export class ThreadFake extends FakePredictor {
  readonly threadCalls: (number | undefined)[][][] = [];
  readonly threadFeature = true;
  override predict(groups: readonly Group[], out?: Float64Array): Float64Array {
    this.threadCalls.push(groups.map((g) => g.map((s) => s.intraOpThreads)));
    const scaled = groups.map((g) => g.map((s) => ({ ...s, batch: 1, end: s.start + (s.end - s.start) * s.batch })));
    const res = super.predict(scaled, out);
    groups.forEach((g, i) => {
      // one thread count per group under every rule here: divide the whole group's latency.
      res[i] = res[i]! / (g[0]!.intraOpThreads ?? 1);
    });
    return res;
  }
}
