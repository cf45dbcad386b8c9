/** Engine timelines for the simulator's tests (`device-sim*.test.ts`). */
import { SimEngine, type OpCost } from '../../src/device/sim/index.ts';

/** Run jobs (executor, costs, submit time) on a fresh engine; returns [start, end] per job. */
export function engineRun(jobs: readonly { ex: number; costs: OpCost[]; at?: number }[]): [number, number][] {
  const engine = new SimEngine();
  const n = Math.max(...jobs.map((j) => j.ex)) + 1;
  for (let i = 0; i < n; i++) engine.addExecutor();
  const out: [number, number][] = jobs.map(() => [NaN, NaN]);
  jobs.forEach((j, i) => engine.submit({ executor: j.ex, costs: j.costs, start: 0, end: j.costs.length, onDone: (s, e) => (out[i] = [s, e]) }, j.at ?? 0));
  engine.runToIdle();
  return out;
}
