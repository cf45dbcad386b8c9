/**
 * End-to-end: `abacus demo` (what `npm start` runs) as a user runs it, on a fresh cache with
 * tiny settings (the `-small` models, few profile samples and queries, 2 rounds): it builds
 * the models, profiles and trains the predictors (recording the load they were profiled
 * under), runs fcfs with one thread and with every core and abacus in interleaved rounds,
 * prints the table (or JSON) and writes report.html; a second run reuses the cached predictors.
 * No timing and no verdict is asserted (a loaded 2-core machine): only the structure and the
 * arithmetic that ties the fields together.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cliSandbox, runAbacusInProcess } from './helpers/cli.ts';
import type { DemoJson } from '../src/cli/demo.ts';


const sandbox = cliSandbox('abacus-demo-', { cacheName: 'models', cwd: true });
const abacus = sandbox.abacus;

const TINY = ['demo', '--small', '--queries', '40', '--profile-samples', '40', '--rounds', '2'];

describe('abacus demo', () => {
  it('profiles, trains, runs fcfs (one thread and every core) and abacus in rounds, prints JSON and writes the report; a second run reuses the predictors and prints the tables', async () => {
    const out = path.join(sandbox.tmp, 'out', 'demo.html');
    const first = await abacus(...TINY, '--out', out, '--json');
    expect(first.code, first.stderr).toBe(0);
    expect(first.stderr).toMatch(/\[1\/5\] models/);
    expect(first.stderr).toMatch(/no cached predictor: profiling 40 operator groups/);
    const json = JSON.parse(first.stdout) as DemoJson;
    expect(json.report).toBe(out);
    const cores = os.availableParallelism();
    const fcfsLabels = cores === 1 ? ['fcfs (1 thread)'] : ['fcfs (1 thread)', `fcfs (${cores} threads)`];
    expect(json.runs.map((r) => r.label)).toEqual([...fcfsLabels, 'abacus']);
    expect(json.runs.map((r) => r.policy)).toEqual([...fcfsLabels.map(() => 'fcfs'), 'abacus']);
    // abacus without the barrier (the default): each service's stream at --threads (1)
    expect(json.runs.map((r) => r.threadsPerExecutor)).toEqual(cores === 1 ? [1, 1] : [1, cores, 1]);
    expect(json.abacusFallbackShare).toBeGreaterThanOrEqual(0);
    expect(json.abacusFallbackShare).toBeLessThanOrEqual(1);
    for (const r of json.runs) {
      expect(r.rateQps).toBe(json.rateQps);
      expect(r.offered).toBe(2 * 40); // pooled over 2 rounds
      expect(r.violationRatio).toBeGreaterThanOrEqual(0);
      expect(r.violationRatio).toBeLessThanOrEqual(1);
      expect(r.services.map((s) => s.service)).toEqual(['resnet50-small', 'bert-small']);
    }
    for (const r of json.runs.filter((x) => x.policy === 'fcfs')) expect(r.meanGroupSize).toBe(1); // one query at a time

    // rounds: A B C A B C, same labels each round, seeds seed, seed + 1; load averages recorded
    expect(json.rounds.map((r) => [r.round, r.seed])).toEqual([[1, 1], [2, 2]]);
    for (const r of json.rounds) {
      expect(r.runs.map((x) => x.label)).toEqual([...fcfsLabels, 'abacus']);
      expect(r.loadAverage1mStart).toBeGreaterThanOrEqual(0);
      expect(r.loadAverage1mEnd).toBeGreaterThanOrEqual(0);
      expect(r.overlapRatio).toBeGreaterThan(0);
      const abacusRun = r.runs.find((x) => x.label === 'abacus')!;
      const base = r.runs.find((x) => x.label === json.baseline)!;
      if (base.goodputQps > 0) expect(r.abacusOverFcfsGoodput).toBeCloseTo(abacusRun.goodputQps / base.goodputQps, 9);
      else expect(r.abacusOverFcfsGoodput).toBeNull();
    }
    // the baseline is the fcfs with the higher pooled goodput
    const fcfsRuns = json.runs.filter((r) => r.policy === 'fcfs');
    expect(json.baseline).toBe(fcfsRuns.reduce((a, b) => (b.goodputQps > a.goodputQps ? b : a)).label);
    expect(json.abacusOverFcfsGoodputRounds).toEqual(json.rounds.map((r) => r.abacusOverFcfsGoodput));
    if (json.abacusOverFcfsGoodputRounds.every((x) => x !== null)) {
      const [a, b] = json.abacusOverFcfsGoodputRounds as number[];
      expect(json.abacusOverFcfsGoodput).toBeCloseTo((a! + b!) / 2, 9); // median of two
      expect(json.abacusOverFcfsGoodputSpread!.min).toBe(Math.min(a!, b!));
      expect(json.abacusOverFcfsGoodputSpread!.max).toBe(Math.max(a!, b!));
    } else {
      expect(json.abacusOverFcfsGoodput).toBeNull();
    }
    expect(Object.keys(json.abacusOverFcfsGoodputByBaseline)).toEqual(fcfsLabels);
    // abacus runs without the group barrier by default (--barrier: with it, refined online), and the report says so
    expect(json.abacusBarrier).toBe(false);
    expect(json.abacusRefines).toBe(false);
    // meaningful flag with its reasons; conditions with the thresholds
    expect(typeof json.meaningful).toBe('boolean');
    if (json.meaningful) expect(json.reason).toBeNull();
    else expect(json.reason).toBe(json.reasons.join('; '));
    expect(json.reasons.length === 0).toBe(json.meaningful);
    expect(json.conditions.cores).toBe(cores);
    expect(json.conditions.loadAverage1mMax).toBe(Math.max(...json.rounds.flatMap((r) => [r.loadAverage1mStart, r.loadAverage1mEnd])));
    expect(json.conditions.thresholds).toEqual({ busyLoadPerCore: 2, maxRelativeSpread: 0.25, noOverlapRatio: 0.9, minRounds: 2 });
    expect(json.overlapRatio).toBe(json.conditions.overlapRatio);
    // the predictor was profiled now: its load average is recorded in the cache and the JSON
    expect(json.conditions.predictor.profiledCores).toBe(cores);
    expect(json.conditions.predictor.profiledLoadAverage1m).toBeGreaterThanOrEqual(0);
    const stored = JSON.parse(await fs.readFile(path.join(path.dirname(json.predictor), 'conditions.json'), 'utf8')) as { start: { loadAverage1m: number; cores: number }; underLoad: boolean };
    expect(stored.start).toEqual({ loadAverage1m: json.conditions.predictor.profiledLoadAverage1m, cores });
    expect(stored.underLoad).toBe(json.conditions.predictor.profiledUnderLoad);
    // QoS rule: 4 × solo p50, rounded up to 1 ms
    for (const s of json.services) expect(s.qosTargetMs).toBe(Math.ceil(4 * s.soloP50Ms));
    expect(json.machine.cpus).toBe(os.cpus().length);
    expect(json.machine.onnxruntime).toMatch(/^\d+\.\d+/);

    const html = await fs.readFile(out, 'utf8');
    expect(html).toContain('<svg');
    expect(html).toContain('resnet50-small: latency CDF');
    expect(html).toContain('<caption>Per policy</caption>');
    expect(html).toContain('<caption>Per round</caption>');
    expect(html).toMatch(json.meaningful ? /class="headline">Abacus goodput ÷ fcfs/ : /class="headline">NOT A MEANINGFUL RESULT: /);
    expect(html).toContain('without the group barrier (--barrier: with it)');
    expect(html).toMatch(/measured on this machine(&#39;|')s CPU/i);
    expect(html).not.toMatch(/<script[^>]*\bsrc=|<link\b/i);

    // second run: cached models and predictor, default --out in the working directory; abacus with the barrier
    const second = await abacus(...TINY, '--rate', String(json.rateQps), '--qos-ms', '50,60', '--barrier');
    expect(second.code, second.stderr).toBe(0);
    expect(second.stdout).toMatch(/abacus with the group barrier, every core for a lone query/);
    expect(await fs.readFile(path.join(sandbox.tmp, 'report.html'), 'utf8')).toContain('refined online from the measured group latencies');
    expect(second.stderr).not.toMatch(/built in/);
    // cached, unless the first profile was taken under load and the machine is quiet now (then it says so and profiles again)
    if (!/profiled under load .* profiling again/.test(second.stderr)) expect(second.stderr).not.toMatch(/no cached predictor/);
    expect(second.stdout).toMatch(/policy\s+threads \/ executor\s+p50 ms\s+p99 ms\s+violations %\s+goodput q\/s/);
    expect(second.stdout).toMatch(/^fcfs \(1 thread\)\s/m);
    expect(second.stdout).toMatch(/^abacus\s/m);
    expect(second.stdout).toMatch(/resnet50-small\s+50\s+fcfs \(1 thread\)/);
    expect(second.stdout).toMatch(/^round\s+seed\s+load avg start\s+load avg end/m);
    expect(second.stdout).toMatch(/^Abacus goodput ÷ fcfs \(\d+ threads?\) goodput \(the better fcfs\) = \d+\.\d\d, median of 2 rounds, range \d+\.\d\d–\d+\.\d\d|^NOT A MEANINGFUL RESULT: .+\.\nMeasured anyway, not a result: /m);
    expect((await fs.stat(path.join(sandbox.tmp, 'report.html'))).size).toBeGreaterThan(1000);
  }, 120_000);

  it('bad flags are usage errors', async () => {
    // in this process: a child's start-up through tsx would cost about a second of CPU each
    const here = (...args: string[]): ReturnType<typeof runAbacusInProcess> => runAbacusInProcess(args, { cacheDir: sandbox.cacheDir });
    const one = await here('demo', '--models', 'resnet50-small');
    expect(one.code).toBe(2);
    expect(one.stderr).toMatch(/--models needs at least two models/);
    const qos = await here('demo', '--small', '--qos-ms', '1,2,3');
    expect(qos.code).toBe(2);
    expect(qos.stderr).toMatch(/--qos-ms needs one value or one per model/);
    const rounds = await here('demo', '--small', '--rounds', '0');
    expect(rounds.code).toBe(2);
    expect(rounds.stderr).toMatch(/--rounds/);
    const refine = await here('demo', '--small', '--no-refine');
    expect(refine.code).toBe(2);
    expect(refine.stderr).toMatch(/--no-refine applies to abacus with the group barrier \(--barrier\)/);
  });
});
