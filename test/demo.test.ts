/**
 * End-to-end: `abacus demo` (what `npm start` runs) as a user runs it, on a fresh cache with
 * tiny settings (the `-small` models, few profile samples and queries): it builds the models,
 * profiles and trains a predictor, runs fcfs and abacus under the same load, prints the
 * table (or JSON) and writes report.html; a second run reuses the cached predictor.
 * No timing is asserted (a loaded 2-core machine).
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cliSandbox } from './helpers/cli.ts';
import type { DemoJson } from '../src/cli/demo.ts';


const sandbox = cliSandbox('abacus-demo-', { cacheName: 'models', cwd: true });
const abacus = sandbox.abacus;

const TINY = ['demo', '--small', '--queries', '40', '--profile-samples', '40'];

describe('abacus demo', () => {
  it('profiles, trains, runs fcfs and abacus, prints JSON and writes the report; a second run reuses the predictor and prints the table', async () => {
    const out = path.join(sandbox.tmp, 'out', 'demo.html');
    const first = await abacus(...TINY, '--out', out, '--json');
    expect(first.code, first.stderr).toBe(0);
    expect(first.stderr).toMatch(/\[1\/5\] models/);
    expect(first.stderr).toMatch(/no cached predictor: profiling 40 operator groups/);
    const json = JSON.parse(first.stdout) as DemoJson;
    expect(json.report).toBe(out);
    expect(json.runs.map((r) => r.policy)).toEqual(['fcfs', 'abacus']);
    for (const r of json.runs) {
      expect(r.rateQps).toBe(json.rateQps);
      expect(r.violationRatio).toBeGreaterThanOrEqual(0);
      expect(r.violationRatio).toBeLessThanOrEqual(1);
      expect(r.services.map((s) => s.service)).toEqual(['resnet50-small', 'bert-small']);
    }
    const [fcfs, abacusRun] = json.runs;
    expect(fcfs!.meanGroupSize).toBe(1); // one query at a time
    if (json.abacusOverFcfsGoodput !== null) expect(json.abacusOverFcfsGoodput).toBeCloseTo(abacusRun!.goodputQps / fcfs!.goodputQps, 9);
    // QoS rule: 4 × solo p50, rounded up to 1 ms
    for (const s of json.services) expect(s.qosTargetMs).toBe(Math.ceil(4 * s.soloP50Ms));
    expect(json.machine.cpus).toBe(os.cpus().length);
    expect(json.machine.onnxruntime).toMatch(/^\d+\.\d+/);

    const html = await fs.readFile(out, 'utf8');
    expect(html).toContain('<svg');
    expect(html).toContain('resnet50-small: latency CDF');
    expect(html).toContain('<caption>Per policy</caption>');
    expect(html).toMatch(/measured on this machine(&#39;|')s CPU/i);
    expect(html).not.toMatch(/<script[^>]*\bsrc=|<link\b/i);

    // second run: cached models and predictor, default --out in the working directory
    const second = await abacus(...TINY, '--rate', String(json.rateQps), '--qos-ms', '50,60');
    expect(second.code, second.stderr).toBe(0);
    expect(second.stderr).not.toMatch(/no cached predictor|built in/);
    expect(second.stdout).toMatch(/policy\s+p50 ms\s+p99 ms\s+violations %\s+goodput q\/s/);
    expect(second.stdout).toMatch(/^fcfs\s/m);
    expect(second.stdout).toMatch(/^abacus\s/m);
    expect(second.stdout).toMatch(/resnet50-small\s+50\s+fcfs/);
    expect(second.stdout).toMatch(/Abacus goodput ÷ fcfs goodput = \d+\.\d\d|fcfs had no goodput/);
    expect((await fs.stat(path.join(sandbox.tmp, 'report.html'))).size).toBeGreaterThan(1000);
  }, 120_000);

  it('bad flags are usage errors', async () => {
    const one = await abacus('demo', '--models', 'resnet50-small');
    expect(one.code).toBe(2);
    expect(one.stderr).toMatch(/--models needs at least two models/);
    const qos = await abacus('demo', '--small', '--qos-ms', '1,2,3');
    expect(qos.code).toBe(2);
    expect(qos.stderr).toMatch(/--qos-ms needs one value or one per model/);
  });
});
