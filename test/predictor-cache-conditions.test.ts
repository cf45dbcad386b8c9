/**
 * The predictor cache records the load a real-device predictor was profiled under and acts on
 * it at the next lookup (docs/demo.md "The predictor and the load it was profiled under"): a busy profile meeting a quiet machine is profiled
 * again; a quiet profile meeting a busy machine is kept with a note; matching conditions reuse
 * it silently. The load readings are injected (`sampleLoad`), so the outcome does not depend on
 * what else this machine is doing; the profiling itself is real (tiny model, few samples).
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { CliContext } from '../src/cli/context.ts';
import type { LoadSample } from '../src/deployment/load-conditions.ts';
import { cachedPredictor, type PredictorRequest } from '../src/deployment/predictor-cache.ts';
import { resolveModelArtifact } from '../src/model/catalog.ts';
import { ModelRepository } from '../src/model/repository.ts';

const tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-pred-cond-'));
afterAll(() => fs.rm(tmp, { recursive: true, force: true }));

const QUIET: LoadSample = { loadAverage1m: 0.2, cores: 2 };
const BUSY: LoadSample = { loadAverage1m: 3, cores: 2 }; // 1.5 per core > 0.5

describe('predictor cache: profiling load conditions', () => {
  it('records them, profiles again when a busy profile meets a quiet machine, keeps a quiet one on a busy machine', async () => {
    const repo = new ModelRepository({ cacheDir: path.join(tmp, 'models') });
    const { artifact } = await resolveModelArtifact(repo, 'resnet50-small');
    let stderr = '';
    const ctx: CliContext = { out: () => undefined, err: (s) => void (stderr += s), cacheOptions: () => ({}) };
    const request = (load: LoadSample): PredictorRequest => ({ deviceId: 'ort:cpu', models: [artifact], batchSizes: [1], seqLens: [], maxGroupSize: 1, samples: 12, repeat: 1, sampleLoad: () => load });
    const profiled = (): number => stderr.split('no cached predictor: profiling').length - 1;

    // profiled busy: recorded as under load
    const first = await cachedPredictor(ctx, repo, request(BUSY));
    expect(profiled()).toBe(1);
    expect(first.conditions).toMatchObject({ start: BUSY, end: BUSY, underLoad: true });
    const stored = JSON.parse(await fs.readFile(path.join(path.dirname(first.source), 'conditions.json'), 'utf8')) as unknown;
    expect(stored).toMatchObject({ start: BUSY, underLoad: true });
    expect(stderr).toMatch(/profiled under load \(load average 3 on 2 cores/);

    // still busy: reused as is
    const again = await cachedPredictor(ctx, repo, request(BUSY));
    expect(profiled()).toBe(1);
    expect(again.note).toBeUndefined();
    expect(again.source).toBe(first.source);

    // quiet now: profiled again, fresh (not resumed from the busy rows), and said so
    const quiet = await cachedPredictor(ctx, repo, request(QUIET));
    expect(profiled()).toBe(2);
    expect(quiet.note).toMatch(/profiled under load .* quiet now .*: profiling again/);
    expect(quiet.conditions).toMatchObject({ start: QUIET, underLoad: false });
    const rows = (await fs.readFile(path.join(path.dirname(first.source), 'profile.csv'), 'utf8')).trim().split('\n');
    expect(rows).toHaveLength(1 + 12); // header + this profile's samples only

    // a quiet profile on a busy machine: kept, with a note
    const kept = await cachedPredictor(ctx, repo, request(BUSY));
    expect(profiled()).toBe(2);
    expect(kept.note).toMatch(/profiled on a quiet machine .* under load now .*keeping the quiet profile/);
    expect(kept.conditions).toMatchObject({ start: QUIET, underLoad: false });

    // conditions unknown (cached before they were recorded): kept, with a note
    await fs.rm(path.join(path.dirname(first.source), 'conditions.json'));
    const unknown = await cachedPredictor(ctx, repo, request(QUIET));
    expect(profiled()).toBe(2);
    expect(unknown.conditions).toBeUndefined();
    expect(unknown.note).toMatch(/profiling load is unknown/);

    // `loadBefore` (one reading before the command's own work) judges the lookup and starts a new profile; the end is read after it
    await fs.rm(unknown.source);
    const before = await cachedPredictor(ctx, repo, { ...request(BUSY), loadBefore: QUIET });
    expect(profiled()).toBe(3);
    expect(before.conditions).toMatchObject({ start: QUIET, end: BUSY, underLoad: false });
    const judged = await cachedPredictor(ctx, repo, { ...request(BUSY), loadBefore: QUIET });
    expect(profiled()).toBe(3);
    expect(judged.note).toBeUndefined(); // quiet profile, quiet before: no note although the reading now is busy
  }, 120_000);
});

describe('predictor cache: training epochs', () => {
  it('a predictor trained for other than the default 60 epochs has a cache entry of its own; 60 given is the default entry', async () => {
    const repo = new ModelRepository({ cacheDir: path.join(tmp, 'models-epochs') });
    const { artifact } = await resolveModelArtifact(repo, 'resnet50-small');
    let stderr = '';
    const ctx: CliContext = { out: () => undefined, err: (s) => void (stderr += s), cacheOptions: () => ({}) };
    const request = (epochs?: number): PredictorRequest => ({ deviceId: 'sim:a100', models: [artifact], batchSizes: [1, 2], seqLens: [], maxGroupSize: 2, samples: 40, repeat: 1, ...(epochs === undefined ? {} : { epochs }) });
    const byDefault = await cachedPredictor(ctx, repo, request());
    const explicit = await cachedPredictor(ctx, repo, request(60));
    const fewer = await cachedPredictor(ctx, repo, request(5));
    expect(explicit.source).toBe(byDefault.source);
    expect(fewer.source).not.toBe(byDefault.source);
    expect(stderr.split('no cached predictor: profiling').length - 1).toBe(2);
    const hyperOf = async (file: string): Promise<unknown> => (JSON.parse(await fs.readFile(file, 'utf8')) as { training: { hyper: { epochs: number } } }).training.hyper.epochs;
    expect([await hyperOf(byDefault.source), await hyperOf(fewer.source)]).toEqual([60, 5]);
  });
});
