/**
 * End-to-end: the `abacus` CLI run as a user runs it (`node bin/abacus.js …`), with its own
 * cache directory. Errors of input and arguments run the same CLI in this process
 * (`sandbox.inProcess`): each child's start-up through tsx costs about a second of CPU.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { cliSandbox } from './helpers/cli.ts';


const sandbox = cliSandbox('abacus-cli-');
const abacus = sandbox.abacus;
const here = sandbox.inProcess;

const SMALL_RESNET = ['--resolution', '32', '--width-multiplier', '0.125'];

describe('abacus models', () => {
  it('--json lists the seven zoo models with the paper operator counts, and their -small and -demo variants', async () => {
    const r = await abacus('models', '--json');
    expect(r.code).toBe(0);
    const rows = JSON.parse(r.stdout) as { name: string; operators: number; gflops: number; params: number; cached: boolean; variantOf?: string }[];
    const byName = Object.fromEntries(rows.map((x) => [x.name, x]));
    const zoo = ['bert', 'inception_v3', 'resnet101', 'resnet152', 'resnet50', 'vgg16', 'vgg19'];
    expect(rows.filter((x) => x.variantOf === undefined).map((x) => x.name).sort()).toEqual(zoo);
    expect(rows.filter((x) => x.variantOf !== undefined).map((x) => x.name).sort()).toEqual([...zoo.map((n) => `${n}-small`), 'resnet50-demo', 'bert-demo'].sort());
    expect(byName['resnet50-small']).toMatchObject({ variantOf: 'resnet50', operators: 18 });
    expect(byName['bert-demo']).toMatchObject({ variantOf: 'bert', operators: 8 });
    expect(byName['resnet50-demo']!.gflops).toBeLessThan(byName['resnet50']!.gflops);
    expect(byName['resnet50']).toMatchObject({ operators: 18, params: 25_557_032, cached: false });
    expect(byName['resnet101']!.operators).toBe(35);
    expect(byName['resnet152']!.operators).toBe(52);
    expect(byName['inception_v3']!.operators).toBe(14);
    expect(byName['vgg16']!.operators).toBe(19);
    expect(byName['vgg19']!.operators).toBe(22);
    expect(byName['bert']!.operators).toBe(12);
    // torchvision 4.09 GMAC ×2 = 8.18 GFLOP; 15.47 GMAC ×2 = 30.94 GFLOP (±1.5%)
    expect(Math.abs(byName['resnet50']!.gflops - 8.18) / 8.18).toBeLessThan(0.015);
    expect(Math.abs(byName['vgg16']!.gflops - 30.94) / 30.94).toBeLessThan(0.015);
  });

  it('the table form names every model and the cache directory', async () => {
    const r = await abacus('models');
    expect(r.code).toBe(0);
    for (const name of ['resnet50', 'resnet101', 'resnet152', 'inception_v3', 'vgg16', 'vgg19', 'bert', 'resnet50-small', 'resnet50-demo', 'bert-small', 'bert-demo']) expect(r.stdout).toContain(name);
    expect(r.stdout).toContain(sandbox.cacheDir);
  });

  it('show prints per-operator metadata', async () => {
    const r = await abacus('models', 'show', 'bert', '--layers', '2', '--hidden', '64', '--heads', '2', '--seq-len', '16', '--json');
    expect(r.code).toBe(0);
    const spec = JSON.parse(r.stdout) as { operators: { name: string; nodeCount: number; gflops: { c2: number } }[] };
    expect(spec.operators).toHaveLength(2);
    expect(spec.operators[0]!.nodeCount).toBeGreaterThan(spec.operators[1]!.nodeCount); // embeddings folded into the first
    expect(spec.operators[1]!.gflops.c2).toBeGreaterThan(0); // attention is quadratic in seq
  });

  it('show and export take every name the other commands take: -small and -demo variants too', async () => {
    for (const name of ['resnet50-demo', 'bert-small']) {
      const r = await (name === 'bert-small' ? here : abacus)('models', 'show', name, '--json');
      expect(r.code, r.stderr).toBe(0);
      expect((JSON.parse(r.stdout) as { name: string }).name).toBe(name);
    }
    const text = await here('models', 'show', 'resnet50-demo');
    expect(text.stdout).toMatch(/^resnet50-demo: 18 operators/);
    const out = path.join(sandbox.tmp, 'variant', 'small.onnx');
    const exported = await abacus('models', 'export', 'resnet50-small', '--out', out);
    expect(exported.code, exported.stderr).toBe(0);
    const spec = JSON.parse(await fs.readFile(path.join(sandbox.tmp, 'variant', 'small.operators', 'spec.json'), 'utf8')) as { name: string; operators: unknown[] };
    expect(spec.name).toBe('resnet50-small');
    expect(spec.operators).toHaveLength(18);
    // a variant is a preset: zoo flags go with the full-size name; --operators is for imports
    const flags = await here('models', 'show', 'resnet50-small', '--resolution', '96');
    expect(flags.code).toBe(1);
    expect(flags.stderr).toContain('error: zoo options apply to the full-size zoo models: resnet50-small is a preset of resnet50 (resolution 64, widthMultiplier 0.25); give them with resnet50 instead');
    expect((await here('models', 'show', 'bert-demo', '--operators', '3')).stderr).toContain('--operators picks among the imports of an imported model; bert-demo is a zoo model');
    const unknown = await here('models', 'show', 'resnet49');
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/unknown model 'resnet49'/);
    // an import may not take a variant's name (it could never be reached)
    const taken = await here('models', 'import', out, '--operators', '3', '--name', 'resnet50-small');
    expect(taken.code).toBe(1);
    expect(taken.stderr).toMatch(/'resnet50-small' is a zoo model's name \(a -small or -demo variant\); choose another name/);
  });

  it('export writes the whole model and its operators; a second run uses the cache', async () => {
    const out = path.join(sandbox.tmp, 'export', 'r50.onnx');
    const first = await abacus('models', 'export', 'resnet50', ...SMALL_RESNET, '--out', out);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toContain('built');
    const ops = (await fs.readdir(path.join(sandbox.tmp, 'export', 'r50.operators'))).filter((f) => f.startsWith('op-'));
    expect(ops).toHaveLength(18);
    expect((await fs.stat(out)).size).toBeGreaterThan(1000);
    const second = await abacus('models', 'export', 'resnet50', ...SMALL_RESNET, '--out', out);
    expect(second.stdout).toContain('from cache');
  });

  it('import partitions an ONNX file and reports the operators', async () => {
    const out = path.join(sandbox.tmp, 'imp', 'r50.onnx');
    expect((await abacus('models', 'export', 'resnet50', ...SMALL_RESNET, '--out', out)).code).toBe(0);
    const r = await abacus('models', 'import', out, '--operators', '5', '--name', 'r50-5', '--json');
    expect(r.code, r.stderr).toBe(0);
    const spec = JSON.parse(r.stdout) as { name: string; operators: unknown[] };
    expect(spec.name).toBe('r50-5');
    expect(spec.operators).toHaveLength(5);

    // listed, shown and run on onnxruntime like a zoo model
    const list = JSON.parse((await abacus('models', '--json')).stdout) as { name: string; source: string; operators: number }[];
    expect(list.find((m) => m.name === 'r50-5')).toMatchObject({ source: 'import', operators: 5 });
    const show = await abacus('models', 'show', 'r50-5', '--json');
    expect(show.code, show.stderr).toBe(0);
    expect((JSON.parse(show.stdout) as { operators: unknown[] }).operators).toHaveLength(5);
    // its operator groups measured beside a zoo model's (the server runs imported models through
    // the same executors: test/serve/serve-types.test.ts, serve-axes.test.ts)
    const csv = path.join(sandbox.tmp, 'imp', 'profile.csv');
    const profile = await abacus('profile', '--device', 'ort', '--models', 'r50-5,bert-small', '--samples', '6', '--batch-sizes', '1,2', '--repeat', '1', '--warmup', '0', '--out', csv, '--json');
    expect(profile.code, profile.stderr).toBe(0);
    expect(JSON.parse(profile.stdout)).toMatchObject({ device: 'ort:cpu', samples: 6, measured: 6, skipped: 0 });
    const rows = (await fs.readFile(csv, 'utf8')).trim().split('\n').slice(1);
    expect(rows).toHaveLength(6);
    expect(rows.some((row) => row.includes(',r50-5,'))).toBe(true);
  });

  it('import names are checked: no zoo names, no paths', async () => {
    const good = path.join(sandbox.tmp, 'imp', 'r50.onnx');
    for (const name of ['resnet50', '../evil', '.tmp', 'x'.repeat(65)]) {
      const r = await here('models', 'import', good, '--operators', '3', '--name', name);
      expect(r.code, name).toBe(1);
      expect(r.stderr).toMatch(/name/);
    }
  });

  it('export to a directory or an impossible path fails with a clear error and no stack trace', async () => {
    const dir = path.join(sandbox.tmp, 'adir');
    await fs.mkdir(dir, { recursive: true });
    for (const out of [dir, '/proc/abacus-test.onnx']) {
      const r = await here('models', 'export', 'resnet50', ...SMALL_RESNET, '--out', out);
      expect(r.code, out).toBe(1);
      expect(r.stderr).toMatch(/^error: /);
      expect(r.stderr).not.toMatch(/internal error|\n\s+at /);
    }
  });

  it('sequence lengths beyond the model maximum, or for models without one, are errors', async () => {
    const tooLong = await abacus('models', 'show', 'bert', '--seq-len', '513');
    expect(tooLong.code).toBe(1);
    expect(tooLong.stderr).toMatch(/maximum sequence length 512/);
    const noSeq = await here('models', 'show', 'resnet50', '--seq-len', '8');
    expect(noSeq.code).toBe(1);
    expect(noSeq.stderr).toMatch(/no sequence axis/);
  });

  it('--version prints the package version', async () => {
    const r = await abacus('--version');
    expect(r.code).toBe(0);
    expect(r.stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/);
  });

  it('bad input: clear errors, exit code 1, nothing half-written in the cache', async () => {
    const junk = path.join(sandbox.tmp, 'junk.onnx');
    await fs.writeFile(junk, 'this is not a protobuf, just text\n');
    const before = await fs.readdir(sandbox.cacheDir).catch(() => []);
    const r = await here('models', 'import', junk, '--operators', '3');
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/junk\.onnx/);
    expect(r.stderr).not.toMatch(/\n\s+at /); // no stack trace
    expect(await fs.readdir(sandbox.cacheDir).catch(() => [])).toEqual(before);

    const good = path.join(sandbox.tmp, 'imp', 'r50.onnx');
    const tooMany = await here('models', 'import', good, '--operators', '100000');
    expect(tooMany.code).toBe(1);
    expect(tooMany.stderr).toMatch(/operators/);
    const zero = await here('models', 'import', good, '--operators', '0');
    expect(zero.code).toBeGreaterThan(0);
    expect(zero.stderr).toMatch(/operators/);

    const unknown = await here('models', 'show', 'alexnet');
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/unknown model 'alexnet'.*resnet50/);
    const badOpt = await here('models', 'show', 'resnet50', '--layers', '3');
    expect(badOpt.code).toBe(1);
    expect(badOpt.stderr).toMatch(/layers/);
  });
});

// ---- Batching baselines: the policies in --help ----
describe('abacus bench / simulate / serve --help', () => {
  it('lists every policy with its summary, the batching variants included', async () => {
    for (const command of ['bench', 'simulate', 'serve']) {
      const r = await (command === 'serve' ? abacus : here)(command, '--help');
      expect(r.code, r.stderr).toBe(0);
      for (const [name, summary] of [
        ['fcfs-batch', 'fcfs, fusing every queued query of the service that fits (greedy, ≤ maxBatchSize)'],
        ['edf-batch', 'edf, fusing every queued query of the service that fits (greedy, ≤ maxBatchSize)'],
        ['triton', "Triton's dynamic batcher, 1 instance/model: services overlap, waits ≤ maxQueueDelayMs"],
        ['clockwork', 'largest batch meeting its earliest deadline, ≤ maxExecMs'],
      ]) {
        const line = r.stdout.split('\n').find((l) => l.startsWith(`  ${name} `));
        expect(line, `${command} --help: ${name}`).toContain(summary);
      }
    }
  });
});
