/**
 * Calibration of the simulated A100 against the reference (docs/devices.md "Calibration against
 * the A100 reference"): the goals with the
 * shipped constants, the artifacts, the fitting procedure, the reference parser, and
 * `abacus simulate calibrate [--json]`.
 */
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { buildProgram, type CliContext } from '../src/cli/main.ts';
import {
  A100_SXM4_40GB,
  BUNDLED_REFERENCE_PATH,
  CALIBRATION_GOALS,
  DEFAULT_SIM_CONSTANTS,
  FIT_PARAMETERS,
  FIT_START,
  artifactReason,
  calibrate,
  fitConstants,
  fitObjective,
  loadReference,
  parseReferenceCsv,
  referenceModels,
  type CalibrationReport,
  type ReferenceData,
} from '../src/device/sim/index.ts';
import { ModelRepository } from '../src/model/repository.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import { isZooModelName } from '../src/model/zoo/index.ts';

const target = { profile: A100_SXM4_40GB, mode: 'eager' as const };
let ref: ReferenceData;
const specs = new Map<string, ModelSpec>();
let report: CalibrationReport;

beforeAll(async () => {
  ref = await loadReference();
  const repo = new ModelRepository();
  for (const name of referenceModels(ref)) {
    if (!isZooModelName(name)) throw new Error(name);
    specs.set(name, await repo.zooSpec(name));
  }
  report = calibrate(specs, ref, { ...target, constants: DEFAULT_SIM_CONSTANTS });
});

const key = (p: { models: readonly [string, string] }): string => p.models.join('+');

describe('calibration goals with the shipped constants (sim:a100, eager)', () => {
  it('every solo latency at batch 1/4/16 is within ±25 % of the reference', () => {
    expect(report.solo).toHaveLength(21);
    for (const s of report.solo) expect(Math.abs(s.latencyMs / s.referenceMs - 1), `${s.model} batch ${s.batch}: ${s.latencyMs} vs ${s.referenceMs} ms`).toBeLessThanOrEqual(CALIBRATION_GOALS.soloRelativeError);
  });

  it('at least 17 of the 21 pair overlap ratios at batch 4 are within ±0.15, and every miss is a reference artifact', () => {
    expect(report.pairs).toHaveLength(21);
    const misses = report.pairs.filter((p) => Math.abs(p.ratio - p.referenceRatio) > CALIBRATION_GOALS.pairRatioError);
    expect(21 - misses.length).toBeGreaterThanOrEqual(CALIBRATION_GOALS.pairsWithin);
    for (const p of misses) expect(p.artifact, key(p)).toBe(true);
    expect(report.summary).toMatchObject({ soloWithinGoal: 21, soloTotal: 21, pairsTotal: 21, met: true });
  });

  it('flags as artifacts exactly the pairs beyond the physical bounds by more than 5 %', () => {
    const flagged = report.pairs.filter((p) => p.artifact).map(key).sort();
    // By hand from the CSV (batch 4): faster than the slower member alone by > 5 %, or slower than both in series by > 5 %.
    expect(flagged).toEqual(['inception_v3+bert', 'resnet101+vgg16', 'resnet101+vgg19', 'resnet50+vgg16', 'resnet50+vgg19', 'vgg16+vgg19'].sort());
    const ib = report.pairs.find((p) => key(p) === 'inception_v3+bert')!;
    expect(ib.artifactReason).toMatch(/slower than both members run back to back/);
    const vv = report.pairs.find((p) => key(p) === 'vgg16+vgg19')!;
    expect(vv.artifactReason).toMatch(/20\.2% faster than its slower member alone \(9\.69 ms\)/);
  });

  it('the simulated ratios respect the physical bounds the artifacts break', () => {
    for (const p of report.pairs) {
      const [a, b] = p.models;
      const soloA = report.solo.find((s) => s.model === a && s.batch === p.batch)!.latencyMs;
      const soloB = report.solo.find((s) => s.model === b && s.batch === p.batch)!.latencyMs;
      expect(p.groupMs).toBeGreaterThanOrEqual(Math.max(soloA, soloB));
      expect(p.groupMs).toBeLessThanOrEqual(soloA + soloB);
    }
  });

  it('launch-bound ResNets are flat in batch size, as in the reference; BERT is not', () => {
    const solo = (m: string, b: number): number => report.solo.find((s) => s.model === m && s.batch === b)!.latencyMs;
    expect(Math.abs(solo('resnet50', 16) / solo('resnet50', 1) - 1)).toBeLessThan(0.01);
    expect(solo('bert', 16) / solo('bert', 1)).toBeGreaterThan(3);
  });
});

describe('artifactReason (golden values by hand)', () => {
  it('faster than the slower member: 7.78 vs 8.972 ms is 13.3 % faster', () => {
    expect(artifactReason(7.78, 8.972, 8.192)).toBe('the pair (7.78 ms) is 13.3% faster than its slower member alone (8.97 ms)');
  });
  it('slower than both in series: 15.432 vs 10.81 + 3.566 = 14.376 ms is 7.3 % slower', () => {
    expect(artifactReason(15.432, 10.81, 3.566)).toBe('the pair (15.43 ms) is 7.3% slower than both members run back to back (14.38 ms)');
  });
  it('within 5 % of the bounds is no artifact', () => {
    expect(artifactReason(24.493, 17.373, 25.177)).toBeUndefined(); // 2.7 % faster than the slower
    expect(artifactReason(10, 8, 4)).toBeUndefined();
  });
});

describe('fitting procedure', () => {
  it('the shipped constants are the documented fit from FIT_START, rounded to 3 significant digits', () => {
    const fit = fitConstants(specs, ref, target, FIT_START);
    for (const p of FIT_PARAMETERS) {
      const fitted = p.get(fit.constants);
      expect(Number(fitted.toPrecision(3)), p.name).toBe(p.get(DEFAULT_SIM_CONSTANTS));
    }
    expect(fit.constants.launchUs.graph).toEqual(DEFAULT_SIM_CONSTANTS.launchUs.graph);
    expect(fit.constants.memoryEfficiency).toBe(DEFAULT_SIM_CONSTANTS.memoryEfficiency);
    expect(fitObjective(specs, ref, target, DEFAULT_SIM_CONSTANTS)).toBeLessThan(fit.objective * 1.01);
    expect(fitObjective(specs, ref, target, FIT_START)).toBeGreaterThan(fit.objective * 100);
    // a synchronous fit of about 3,900 objective evaluations (3 s of CPU alone, quiet): 65 s wall
    // with four busy loops beside the suite, so the limit only catches a fit that never ends
  }, 600_000);

  it('every fitted constant lies inside its plausible range', () => {
    for (const p of FIT_PARAMETERS) {
      const v = p.get(DEFAULT_SIM_CONSTANTS);
      expect(v, p.name).toBeGreaterThanOrEqual(p.min);
      expect(v, p.name).toBeLessThanOrEqual(p.max);
    }
  });
});

describe('reference CSV', () => {
  it('the bundled reference is the file the shipped constants were fitted to (its SHA-256)', () => {
    // src/device/sim/reference/a100-group-latency.csv, derived from the Abacus authors' published
    // predictor; a changed file needs a refit (`abacus simulate calibrate --fit`) and a new hash here
    expect(createHash('sha256').update(readFileSync(BUNDLED_REFERENCE_PATH)).digest('hex')).toBe('1a0551eda133a5bef041a48652461e0a4fe474fbc578bba0ef1e282ec309e0fa');
  });

  it('parses solo and pair rows: 42 solo, 63 pairs, seven models', () => {
    expect(ref.solo).toHaveLength(42);
    expect(ref.pairs).toHaveLength(63);
    expect(referenceModels(ref).sort()).toEqual(['bert', 'inception_v3', 'resnet101', 'resnet152', 'resnet50', 'vgg16', 'vgg19']);
    expect(ref.solo[0]).toEqual({ model: 'resnet50', batch: 1, seqLen: 0, latencyMs: 9.14 });
  });

  it('rejects malformed files naming the line and the field', () => {
    const header = 'model_a,start_a,end_a,batch_a,seq_len_a,model_b,start_b,end_b,batch_b,seq_len_b,latency_ms';
    expect(() => parseReferenceCsv('a,b\n')).toThrow(/line 1 must be the header/);
    expect(() => parseReferenceCsv(`${header}\nresnet50,0,18,1,0,,,,,\n`)).toThrow(/line 2: expected 11 fields/);
    expect(() => parseReferenceCsv(`${header}\nresnet50,0,18,x,0,,,,,,9\n`)).toThrow(/line 2: batch_a 'x'/);
    expect(() => parseReferenceCsv(`${header}\nresnet50,0,18,1,0,bert,0,12,2,32,9\n`)).toThrow(/batch_b must equal batch_a/);
  });
});

describe('abacus simulate calibrate', () => {
  const runCli = async (...args: string[]): Promise<string> => {
    let out = '';
    const ctx: CliContext = { out: (s) => (out += s), err: () => undefined, cacheOptions: () => ({}) };
    await buildProgram(ctx).parseAsync(['node', 'abacus', ...args]);
    return out;
  };

  it('--json prints {"solo": [{model, batch, latencyMs, referenceMs}], "pairs": [{models, batch, ratio, referenceRatio, artifact}]}', async () => {
    const json = JSON.parse(await runCli('simulate', 'calibrate', '--device', 'sim:a100', '--json')) as {
      device: string;
      solo: Record<string, unknown>[];
      pairs: Record<string, unknown>[];
      summary: { met: boolean };
    };
    expect(json.device).toBe('sim:a100');
    expect(json.solo).toHaveLength(21);
    expect(json.pairs).toHaveLength(21);
    for (const s of json.solo) expect(Object.keys(s).sort()).toEqual(['batch', 'latencyMs', 'model', 'referenceMs']);
    for (const p of json.pairs) {
      expect(Object.keys(p).filter((k) => k !== 'artifactReason').sort()).toEqual(['artifact', 'batch', 'models', 'ratio', 'referenceRatio']);
      expect(typeof p['artifact']).toBe('boolean');
      expect(p['batch']).toBe(4);
    }
    expect(json.solo[0]).toMatchObject({ model: 'resnet50', batch: 1, referenceMs: 9.14 });
    expect(json.summary.met).toBe(true);
  });

  it('prints tables, the artifacts with their reason, and whether the goals are met', async () => {
    const text = await runCli('simulate', 'calibrate');
    expect(text).toContain('inception_v3 + bert');
    expect(text).toMatch(/faster than its slower member alone/);
    expect(text).toMatch(/solo: 21\/21 within ±25%.*pairs: 1[7-9]\/21 within ±0\.15.*goals met/);
  });

  it('rejects a device other than sim:a100 (eager) and sim:h200:graph without --reference: the bundled references only exist for them', async () => {
    for (const id of ['sim:h100', 'sim:h200', 'sim:a100:graph', 'sim:a100:mig-2g', 'sim:v100:eager']) {
      await expect(runCli('simulate', 'calibrate', '--device', id), id).rejects.toThrow(/references .*only exists for sim:a100 \(eager\) and sim:h200:graph.*--reference/);
    }
    // sim:a100:eager is sim:a100; with --reference any device may be compared with it.
    expect(JSON.parse(await runCli('simulate', 'calibrate', '--device', 'sim:a100:eager', '--json'))).toMatchObject({ device: 'sim:a100' });
    expect(JSON.parse(await runCli('simulate', 'calibrate', '--device', 'sim:h100', '--reference', BUNDLED_REFERENCE_PATH, '--json'))).toMatchObject({ device: 'sim:h100' });
  });

  it('rejects an unknown device id', async () => {
    await expect(runCli('simulate', 'calibrate', '--device', 'sim:tpu')).rejects.toThrow(/sim:tpu/);
  });
});
