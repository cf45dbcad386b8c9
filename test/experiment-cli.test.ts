/**
 * End-to-end: `abacus simulate` and `abacus bench` run as a user runs them, on a fresh cache:
 * no predictor given, so each profiles the device and trains one first (small sample counts
 * here), then compares policies; the second run reuses the cached predictor.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import os from 'node:os';
import { describe, expect, it } from 'vitest';
import { cliSandbox } from './helpers/cli.ts';
import type { ExperimentJson } from '../src/cli/experiment.ts';


const sandbox = cliSandbox('abacus-exp-', { cacheName: 'models' });
const abacus = sandbox.abacus;
/** The same CLI in this process: the errors of input and the short runs after the first ones (a child's start-up through tsx costs about a second of CPU). */
const here = sandbox.inProcess;

describe('abacus simulate', () => {
  it('profiles and trains a predictor on first use, compares policies, and reuses the predictor', async () => {
    const args = ['simulate', '--models', 'resnet50,vgg16', '--qos-ms', '50', '--rate', '80', '--queries', '400', '--profile-samples', '600', '--policy', 'abacus,fcfs,overlap-all'];
    const first = await abacus(...args);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stderr).toMatch(/no cached predictor: profiling 600 operator groups/);
    expect(first.stdout).toMatch(/policy\s+rate q\/s/);
    const second = await abacus(...args, '--json');
    expect(second.code, second.stderr).toBe(0);
    const json = JSON.parse(second.stdout) as ExperimentJson;
    expect(json.predictor).toContain(path.join(sandbox.tmp, 'predictors'));
    expect(json.runs.map((r) => r.policy)).toEqual(['abacus', 'fcfs', 'overlap-all']);
    for (const r of json.runs) {
      expect(r.rateQps).toBe(80);
      expect(r.violationRatio).toBeGreaterThanOrEqual(0);
      expect(r.violationRatio).toBeLessThanOrEqual(1);
      expect(r.services.map((s) => s.service)).toEqual(['resnet50', 'vgg16']);
      expect(r.goodputQps).toBeGreaterThan(0);
    }
    expect(json.runs.find((r) => r.policy === 'overlap-all')!.predictorMape).toBeNull();
    // the same seed gives the same simulation (here in this process)
    const third = JSON.parse((await here(...args, '--json')).stdout) as ExperimentJson;
    expect(third.runs).toEqual(json.runs);
  }, 240_000);

  it('--find-peak reports a peak goodput per policy', async () => {
    const r = await abacus('simulate', '--models', 'resnet50,vgg16', '--qos-ms', '50', '--rate', '40', '--queries', '300', '--profile-samples', '600', '--policy', 'abacus,fcfs', '--find-peak', '--json');
    expect(r.code, r.stderr).toBe(0);
    const json = JSON.parse(r.stdout) as ExperimentJson;
    for (const run of json.runs) {
      expect(run.peakGoodputQps).toBeGreaterThan(0);
      expect(run.violationRatio).toBeLessThanOrEqual(0.01);
    }
  }, 240_000);

  it('single-sample requests: triton fuses them with --dynamic-batching, and warns and runs them alone without it', async () => {
    const args = ['simulate', '--models', 'resnet50,vgg16', '--qos-ms', '50', '--request-batch', '1', '--rate', '2000', '--queries', '400', '--policy', 'triton', '--json'];
    const on = await abacus(...args, '--dynamic-batching', '--max-batch-size', '8');
    expect(on.code, on.stderr).toBe(0);
    const fused = (JSON.parse(on.stdout) as ExperimentJson).runs[0]!;
    expect(fused.meanBatch).toBeGreaterThan(1);
    expect(fused.meanBatch).toBeLessThanOrEqual(8);
    expect(on.stderr).not.toMatch(/warning/);
    const off = await here(...args);
    expect(off.code, off.stderr).toBe(0);
    expect((JSON.parse(off.stdout) as ExperimentJson).runs[0]!.meanBatch).toBe(1);
    expect(off.stderr).toMatch(/warning: triton fuses queries only for services with dynamic batching, and none has it here/);
  }, 120_000);

  it('bad input: a real device, a missing QoS, a bad policy, a bad config field', async () => {
    expect((await here('simulate', '--device', 'ort', '--models', 'resnet50', '--qos-ms', '5')).stderr).toMatch(/needs a simulated device/);
    expect((await here('simulate', '--models', 'resnet50')).stderr).toMatch(/--qos-ms needs one value or one per model/);
    const bad = await abacus('simulate', '--models', 'resnet50', '--qos-ms', '5', '--policy', 'lifo');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/unknown policy 'lifo'/);
    const cfg = path.join(sandbox.tmp, 'bad.yaml');
    await fs.writeFile(cfg, 'device: sim:a100\nservices:\n  - model: resnet50\n    qosTargetMs: fast\n');
    const r = await here('simulate', '--config', cfg);
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`${cfg}: services[0].qosTargetMs`);
    // the config's policy is the one that runs; its parameters are checked before anything runs
    await fs.writeFile(cfg, 'device: sim:a100\npolicy: {name: fcfs, ways: 3}\nservices:\n  - model: resnet50\n    qosTargetMs: 50\n');
    expect((await here('simulate', '--config', cfg)).stderr).toContain(`${cfg}: policy: fcfs has no parameter 'ways'`);
    await fs.writeFile(cfg, 'device: sim:a100\npolicy: magic\nservices:\n  - model: resnet50\n    qosTargetMs: 50\n');
    expect((await here('simulate', '--config', cfg)).stderr).toContain(`${cfg}: policy: unknown policy 'magic'`);
    await fs.writeFile(cfg, 'device: sim:a100\nservices:\n  - model: resnet49\n    qosTargetMs: 50\n');
    expect((await here('simulate', '--config', cfg)).stderr).toContain(`${cfg}: services[0].model: unknown model 'resnet49'`);
    await fs.writeFile(cfg, 'device: sim:a100\nservices:\n  - model: resnet50\n    qosTargetMs: 50\n    seqLens: [16]\n');
    expect((await here('simulate', '--config', cfg)).stderr).toContain(`${cfg}: services[0].seqLens: resnet50 has no sequence axis`);
    const both = await here('simulate', '--config', cfg, '--batch-sizes', '4');
    expect(both.code).toBe(2);
    expect(both.stderr).toMatch(/--config replaces/);
    expect((await here('simulate', '--models', 'resnet50,bert', '--qos-ms', '50', '--seq-lens', '1000')).stderr).toMatch(/--seq-lens: sequence length 1000 exceeds bert's maximum 512/);
  }, 120_000);

  // overlap-all needs no predictor, so these runs start at once.
  const load = ['simulate', '--models', 'resnet50,vgg16', '--qos-ms', '50', '--rate', '100', '--queries', '300', '--policy', 'overlap-all'];

  it('--arrivals: constant, bursty and a trace at the same mean rate; bursts raise the violations of the same mean load', async () => {
    const runOf = async (...extra: string[]): Promise<ExperimentJson> => {
      const r = await here(...load, ...extra, '--json');
      expect(r.code, r.stderr).toBe(0);
      return JSON.parse(r.stdout) as ExperimentJson;
    };
    const poisson = await runOf();
    expect(poisson.arrivals).toBe('poisson');
    const constant = await runOf('--arrivals', 'constant');
    expect(constant.arrivals).toBe('constant');
    const bursty = await runOf('--arrivals', 'bursty:onMs=200,offMs=800');
    expect(bursty.arrivals).toBe('bursty:onMs=200,offMs=800,offRatio=0');
    // bursts at 5× the mean rate (on 200 ms of every 1000, silent otherwise) queue where the same mean load spread out does not
    expect(bursty.runs[0]!.violationRatio).toBeGreaterThan(poisson.runs[0]!.violationRatio);
    expect(bursty.runs[0]!.p99Ms).toBeGreaterThan(constant.runs[0]!.p99Ms);
    for (const j of [poisson, constant, bursty]) expect(j.runs[0]!.offered).toBe(300);
    // a trace of 2 minutes of 250 ms at mean 100 q/s offers about 50 queries, then stops: the run ends with it
    const trace = path.join(sandbox.tmp, 'load.csv');
    await fs.writeFile(trace, 'minute,offered_load_qps\n0,1\n1,3\n');
    const text = await here(...load, '--arrivals', `trace:${trace},minuteMs=250`);
    expect(text.code, text.stderr).toBe(0);
    expect(text.stderr).toContain(`arrivals: trace ${trace}: 2 minutes, mean 2.00 queries/s, scaled ×50.0 to a mean of 100 queries/s; one trace minute lasts 250 ms`);
    expect(text.stderr).toMatch(/warning: the trace offers about 50 queries at 100 queries\/s \(2 minutes of 250 ms\): each run ends with the trace, before --queries 300/);
    expect(text.stdout).toContain(`300 queries per run (trace:${trace},minuteMs=250)`);
    const traced = await runOf('--arrivals', `trace:${trace},minuteMs=250`);
    expect(traced.runs[0]!.offered).toBeGreaterThan(0);
    expect(traced.runs[0]!.offered).toBeLessThan(300);
  }, 120_000);

  it('arrivals in the config (the flag overrides it); bad values name the flag or the config field', async () => {
    const cfg = path.join(sandbox.tmp, 'arrivals.yaml');
    await fs.writeFile(cfg, 'device: sim:a100\npolicy: overlap-all\narrivals: { kind: bursty, onMs: 200, offMs: 800 }\nservices:\n  - model: resnet50\n    qosTargetMs: 50\n');
    const fromConfig = await here('simulate', '--config', cfg, '--queries', '100', '--json');
    expect(fromConfig.code, fromConfig.stderr).toBe(0);
    expect((JSON.parse(fromConfig.stdout) as ExperimentJson).arrivals).toBe('bursty:onMs=200,offMs=800,offRatio=0');
    const overridden = await here('simulate', '--config', cfg, '--queries', '100', '--arrivals', 'constant', '--json');
    expect((JSON.parse(overridden.stdout) as ExperimentJson).arrivals).toBe('constant');
    const bad = await here(...load, '--arrivals', 'bursty:onMs=-5');
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--arrivals: bursty onMs must be a number of ms > 0, got -5');
    const unknown = await here(...load, '--arrivals', 'lifo');
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("--arrivals: unknown arrival process 'lifo' (valid: poisson, constant, bursty[:onMs=MS,offMs=MS,offRatio=R] or trace:FILE[,minuteMs=MS])");
    const missing = await here(...load, '--arrivals', `trace:${path.join(sandbox.tmp, 'none.csv')}`);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/error: --arrivals: cannot read the trace .*none\.csv: ENOENT/);
    await fs.writeFile(cfg, 'device: sim:a100\npolicy: overlap-all\narrivals: trace:none.csv\nservices:\n  - model: resnet50\n    qosTargetMs: 50\n');
    const missingInConfig = await here('simulate', '--config', cfg, '--queries', '100');
    expect(missingInConfig.code).toBe(1);
    expect(missingInConfig.stderr).toContain(`error: ${cfg}: arrivals: cannot read the trace ${path.join(sandbox.tmp, 'none.csv')}`);
  }, 120_000);

  it('config keys: a snake_case field is unknown (naming the camelCase one); an old policy spelling runs with a warning', async () => {
    const cfg = path.join(sandbox.tmp, 'casing.yaml');
    await fs.writeFile(cfg, 'device: sim:a100\npolicy: overlap-all\nservices:\n  - model: resnet50\n    qos_target_ms: 50\n');
    const snake = await here('simulate', '--config', cfg);
    expect(snake.code).toBe(1);
    expect(snake.stderr).toContain(`error: ${cfg}: services[0]: unknown field(s) 'qos_target_ms' (config keys are camelCase: 'qosTargetMs'?)`);
    expect(snake.stderr).not.toMatch(/qosTargetMs: Invalid input/);
    await fs.writeFile(cfg, 'device: sim:a100\npolicy: { name: abacus, slack_ms: 3 }\nservices:\n  - model: resnet50\n    qosTargetMs: 50\n');
    const old = await here('simulate', '--config', cfg, '--policy', 'overlap-all', '--queries', '50');
    expect(old.code, old.stderr).toBe(0);
    expect(old.stderr).toContain(`warning: ${cfg}: policy.slack_ms is the old spelling of policy.slackMs (config keys are camelCase); it still works, but write slackMs`);
  }, 120_000);
});

describe('abacus bench', () => {
  it('serves two small models on onnxruntime (CPU) in real time under each policy, fcfs also with every core', async () => {
    const r = await abacus('bench', '--device', 'ort', '--models', 'resnet50-small,bert-small', '--qos-ms', '200', '--batch-sizes', '1,2', '--seq-lens', '16', '--rate', '40', '--queries', '40', '--profile-samples', '60', '--policy', 'abacus,fcfs', '--json');
    expect(r.code, r.stderr).toBe(0);
    const json = JSON.parse(r.stdout) as ExperimentJson;
    expect(json.device).toBe('ort');
    const cores = os.availableParallelism();
    // the strong one-at-a-time baseline: fcfs once with --threads (1) and once with every core
    expect(json.runs.map((x) => [x.policy, x.label, x.threadsPerExecutor])).toEqual(
      cores > 1 ? [['abacus', undefined, 1], ['fcfs', 'fcfs (1 thread)', 1], ['fcfs', `fcfs (${cores} threads)`, cores]] : [['abacus', undefined, 1], ['fcfs', undefined, 1]],
    );
    for (const run of json.runs) {
      expect(run.services).toHaveLength(2);
      // every query got an outcome: completed ones count in throughput
      expect(run.throughputQps).toBeGreaterThan(0);
      expect(Number.isFinite(run.p99Ms)).toBe(true);
    }
  }, 300_000);
});
