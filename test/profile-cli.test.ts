/**
 * End-to-end: `abacus profile` run as a user runs it (`node bin/abacus.js …`), with its own
 * cache directory: --json output, resume, usage errors (exit 2), runtime errors (exit 1), and
 * Ctrl-C (SIGINT: exit 130, a valid CSV, resumable).
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ABACUS_BIN, cliSandbox } from './helpers/cli.ts';
import { CommanderError } from 'commander';
import { buildProgram, type CliContext } from '../src/cli/main.ts';
import { ModelRepository } from '../src/model/repository.ts';
import { readProfileCsv } from '../src/profile/index.ts';


const sandbox = cliSandbox('abacus-profile-cli-');
const abacus = sandbox.abacus;
/** The same CLI in this process, for errors (a child's start-up through tsx costs about a second of CPU). */
const here = sandbox.inProcess;

const SIM = ['profile', '--device', 'sim:a100', '--models', 'resnet50,bert', '--batch-sizes', '1,2,4', '--seq-lens', '8,16'];

describe('abacus profile', () => {
  it('--json on sim: measures, then a rerun skips everything; the CSV reads back', async () => {
    const out = path.join(sandbox.tmp, 'sim', 'p.csv');
    const first = await abacus(...SIM, '--samples', '25', '--repeat', '3', '--out', out, '--json');
    expect(first.code, first.stderr).toBe(0);
    const json = JSON.parse(first.stdout) as Record<string, unknown>;
    expect(Object.keys(json).sort()).toEqual(['device', 'measured', 'out', 'samples', 'skipped', 'wallMs']);
    expect(json).toMatchObject({ out, device: 'sim:a100', samples: 25, measured: 25, skipped: 0 });
    expect(first.stderr).toContain('profile: 25/25 samples (100%)'); // plain progress: stderr is not a TTY
    const second = await abacus(...SIM, '--samples', '25', '--repeat', '3', '--out', out, '--json');
    expect(second.code, second.stderr).toBe(0);
    expect(JSON.parse(second.stdout)).toMatchObject({ measured: 0, skipped: 25 });
    const repo = new ModelRepository({ cacheDir: sandbox.cacheDir });
    const rows = await readProfileCsv([out], { models: new Map([['resnet50', await repo.zooSpec('resnet50')], ['bert', await repo.zooSpec('bert')]]) });
    expect(rows).toHaveLength(25);
    expect(Math.max(...rows.map((r) => r.slots.length))).toBe(2); // default --max-group-size: number of models
    // other options on the same file: a clear error
    const other = await here(...SIM, '--samples', '25', '--repeat', '3', '--seed', '9', '--out', out);
    expect(other.code).toBe(1);
    expect(other.stderr).toMatch(/error: .*the options differ from those the file was made with/);
  });

  it('usage errors exit 2, runtime errors exit 1 with a message', async () => {
    const out = path.join(sandbox.tmp, 'bad.csv');
    const usage = await abacus(...SIM, '--samples', '5', '--out', out, '--batch-sizes', '0');
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain('--batch-sizes expects an integer ≥ 1');
    const seq = await here(...SIM, '--samples', '5', '--out', out, '--seq-lens', '1024');
    expect(seq.code).toBe(1);
    expect(seq.stderr).toMatch(/error: .*1024 exceeds bert's maximum sequence length 512/);
  });

  it('flag checks (in process): each bad flag is a commander usage error naming the flag', async () => {
    const err: string[] = [];
    const ctx: CliContext = { out: () => {}, err: (s) => err.push(s), cacheOptions: () => ({ cacheDir: sandbox.cacheDir }) };
    const parse = async (...extra: string[]): Promise<unknown> => {
      err.length = 0;
      return buildProgram(ctx)
        .parseAsync(['node', 'abacus', ...SIM, '--samples', '5', '--out', path.join(sandbox.tmp, 'never.csv'), ...extra])
        .then(() => undefined, (e: unknown) => e);
    };
    const cases: [string[], string][] = [
      [['--batch-sizes', '1,,2'], '--batch-sizes expects a comma-separated list'],
      [['--max-group-size', '9'], '--max-group-size expects an integer in [1, 8]'],
      [['--repeat', 'x'], '--repeat expects an integer ≥ 1'],
      [['--warmup', '-1'], '--warmup expects an integer ≥ 0'],
      [['--models', 'resnet50,resnet50'], "--models lists 'resnet50' twice"],
      [['--device', 'gpu'], '--device expects ort, ort:cpu'],
      [['--device', 'sim:a200'], "names no known GPU 'a200'"],
    ];
    for (const [extra, message] of cases) {
      const e = await parse(...extra);
      expect(e, extra.join(' ')).toBeInstanceOf(CommanderError);
      expect(err.join(''), extra.join(' ')).toContain(message);
    }
    const noOut = await buildProgram(ctx).parseAsync(['node', 'abacus', 'profile', '--device', 'sim:a100', '--models', 'resnet50', '--samples', '5', '--batch-sizes', '1']).catch((e: unknown) => e);
    expect(noOut).toBeInstanceOf(CommanderError);
    await expect(parse('--models', 'resnet50,nosuchnet')).resolves.toBeInstanceOf(RangeError);
    const threads = await parse('--threads', '2');
    expect(threads).toBeInstanceOf(RangeError);
    expect((threads as Error).message).toContain('--threads applies to ort devices only');
  });

  it('Ctrl-C stops after the sample in progress: exit 130, a valid CSV, and the same command resumes', async () => {
    const out = path.join(sandbox.tmp, 'sigint.csv');
    const args = [ABACUS_BIN, ...SIM, '--models', 'resnet50,resnet152,vgg19,bert', '--max-group-size', '3', '--samples', '20000', '--out', out];
    const child = spawn(process.execPath, args, { env: { ...process.env, ABACUS_CACHE_DIR: sandbox.cacheDir }, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    await new Promise<void>((resolve, reject) => {
      child.stderr.on('data', (chunk: Buffer) => {
        stderr += chunk.toString();
        if (/profile: \d+\/20000/.test(stderr)) resolve(); // 10% done: well under way
      });
      child.on('exit', () => reject(new Error(`exited before the first progress line: ${stderr}`)));
    });
    child.kill('SIGINT');
    expect(await exited).toBe(130);
    const m = /interrupted: (\d+) of 20000 samples in (.*); rerun the same command to resume/.exec(stderr);
    expect(m, stderr).not.toBeNull();
    const repo = new ModelRepository({ cacheDir: sandbox.cacheDir });
    const specs = new Map<string, Awaited<ReturnType<typeof repo.zooSpec>>>();
    for (const name of ['resnet50', 'resnet152', 'vgg19', 'bert'] as const) specs.set(name, await repo.zooSpec(name));
    const rows = await readProfileCsv([out], { models: specs });
    expect(rows.length).toBe(Number(m![1]));
    expect(rows.length).toBeGreaterThanOrEqual(2000);
    expect(rows.length).toBeLessThan(20000);
    // resume, with fewer samples than the file holds: nothing to measure
    const again = await abacus(...SIM, '--models', 'resnet50,resnet152,vgg19,bert', '--max-group-size', '3', '--samples', '100', '--out', out, '--json');
    expect(again.code, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ measured: 0, skipped: 100 });
  });
});
