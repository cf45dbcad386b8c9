/**
 * The QueryController conformance suite (test/schedule/conformance.ts) against every policy,
 * with its defaults and with the parameter settings that change its code paths.
 */
import type { QueryController } from '../src/schedule/controller.ts';
import { MEASURED_KEPT, WINDOW_GROUPS } from '../src/schedule/fallback.ts';
import { createController } from '../src/schedule/index.ts';
import { CASE, describeControllerConformance } from './schedule/conformance.ts';
import { OPERATORS } from './schedule/fake-predictor.ts';

/**
 * `c` driven into its calibration fallback, with `MEASURED_KEPT` measured solo runs of every model
 * at batch 1 and 2 spread over 5–35 ms: so decisions judge heads on fast and slow runs, and pass
 * over at-risk heads for safe queries behind them (`fallback.ts`, "Choosing a safe query").
 */
function inFallbackWithSpread(c: QueryController): QueryController {
  const run = (id: string, model: string, batch: number, ms: number, predictedMs: number): void =>
    c.observe({ segments: [{ queryId: id, service: 's0', model, start: 0, end: OPERATORS[model]!, operators: OPERATORS[model]!, batch, seqLen: 0, latencyMs: ms }], groupLatencyMs: ms, predictedMs });
  for (let i = 0; i < WINDOW_GROUPS; i++) run(`enter${i}`, 'a', 1, 30, 5);
  for (const model of Object.keys(OPERATORS)) for (const batch of [1, 2]) for (let i = 0; i < MEASURED_KEPT; i++) run(`m-${model}-${batch}-${i}`, model, batch, 5 + 10 * (i % 4), 30);
  if (c.fallback?.active !== true) throw new Error('the conformance set-up did not enter the fallback');
  return c;
}

describeControllerConformance('abacus (defaults: ways 2, slack 5 ms, drop)', (p) => createController('abacus', {}, p));
describeControllerConformance('abacus ways 4, slack 0, drop', (p) => createController('abacus', { ways: 4, slackMs: 0 }, p));
describeControllerConformance('abacus ways 3, slack 0.5, no drop', (p) => createController('abacus', { ways: 3, slackMs: 0.5, drop: false }, p));
describeControllerConformance('abacus refine (online correction on)', (p) => createController('abacus', { refine: true }, p));
describeControllerConformance('abacus refine, calibration fallback', (p) => createController('abacus', { refine: true, fallback: true }, p));
describeControllerConformance('abacus calibration fallback, in it, with measured runs that spread (safe choices)', (p) => inFallbackWithSpread(createController('abacus', { fallback: true }, p)));
for (const policy of ['fcfs', 'sjf', 'edf'] as const) {
  describeControllerConformance(`${policy} (drop)`, (p) => createController(policy, {}, p));
  describeControllerConformance(`${policy} (no drop)`, (p) => createController(policy, { drop: false }, p));
}
describeControllerConformance('overlap-all', () => createController('overlap-all'));
describeControllerConformance('clockwork (window 10, p99)', (p) => createController('clockwork', {}, p));
describeControllerConformance('clockwork (window 3, p50)', (p) => createController('clockwork', { window: 3, percentile: 50 }, p));

// ---- Batching baselines: greedy fusion, Clockwork's batch choice, Triton's dynamic batcher ----
for (const policy of ['fcfs-batch', 'edf-batch'] as const) {
  describeControllerConformance(`${policy} (drop)`, (p) => createController(policy, {}, p));
  describeControllerConformance(`${policy} (no drop)`, (p) => createController(policy, { drop: false }, p));
}
describeControllerConformance('clockwork (maxExecMs 4: batches mostly too long)', (p) => createController('clockwork', { maxExecMs: 4 }, p));
describeControllerConformance('triton (drop)', () => createController('triton'));
describeControllerConformance('triton (no drop)', () => createController('triton', { drop: false }));
const WAITS = 'a head waits while launching it would make a running segment late, or while overlapping it gains nothing and it can afford to wait (abacus/stream.ts steps 3c and 4)';
describeControllerConformance('abacus without the group barrier (drop, no hold)', (p) => createController('abacus', { barrier: false, hold: false }, p), { skip: { [CASE.progress]: WAITS } });
describeControllerConformance('abacus without the group barrier (no drop, no hold)', (p) => createController('abacus', { barrier: false, hold: false, drop: false }, p), { skip: { [CASE.progress]: WAITS } });
describeControllerConformance('abacus without the group barrier (hold)', (p) => createController('abacus', { barrier: false }, p), {
  skip: { [CASE.progress]: WAITS, [CASE.fused]: 'a partial batch waits for more samples while its members can afford it, whatever maxQueueDelayMs says (abacus/stream.ts step 3b)' },
});
