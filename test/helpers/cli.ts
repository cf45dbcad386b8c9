/** Run the `abacus` CLI as a user does (`node bin/abacus.js …`) for end-to-end tests. */
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll } from 'vitest';
import { runCli } from '../../src/cli/run.ts';

const run = promisify(execFile);

/** The CLI entry point. */
export const ABACUS_BIN = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'bin', 'abacus.js');

export interface CliResult {
  /** Exit code (0 success, 1 runtime error, 2 usage error, 130 interrupted). */
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Run `abacus ...args` with `ABACUS_CACHE_DIR` set to `cacheDir`; never throws for a non-zero
 * exit (the code is in the result).
 */
export async function runAbacus(args: readonly string[], options: { cacheDir: string; cwd?: string }): Promise<CliResult> {
  try {
    const { stdout, stderr } = await run(process.execPath, [ABACUS_BIN, ...args], {
      env: { ...process.env, ABACUS_CACHE_DIR: options.cacheDir },
      maxBuffer: 64 << 20,
      ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
    });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: typeof e.code === 'number' ? e.code : -1, stdout: e.stdout ?? '', stderr: e.stderr ?? '' };
  }
}

/**
 * `abacus ...args` in this process (`runCli`, the same code `bin/abacus.js` runs) with `cacheDir`
 * as its model cache: the exit code and what it wrote, without a child's start-up (about 0.7 s
 * and 1 s of CPU each through tsx, `node bin/abacus.js models --json`, load 0.6). For argument
 * and input errors and other short runs; each command keeps at least one real spawn
 * (`runAbacus`) in its tests. Never rejects for a non-zero exit.
 */
export async function runAbacusInProcess(args: readonly string[], options: { cacheDir: string }): Promise<CliResult> {
  let stdout = '';
  let stderr = '';
  const code = await runCli(['node', ABACUS_BIN, ...args], { out: (s) => (stdout += s), err: (s) => (stderr += s), cacheDir: options.cacheDir });
  return { code, stdout, stderr };
}

/** A temporary folder for one CLI test file, with its model cache inside (see `cliSandbox`). */
export interface CliSandbox {
  /** The folder (set in `beforeAll`, removed in `afterAll`). */
  readonly tmp: string;
  /** `ABACUS_CACHE_DIR` of every run: `<tmp>/<cacheName>`. */
  readonly cacheDir: string;
  /** `abacus ...args` with this sandbox's cache (and, with `cwd`, run inside `tmp`). */
  readonly abacus: (...args: string[]) => Promise<CliResult>;
  /** `abacus ...args` in this process with this sandbox's cache (`runAbacusInProcess`; not with `cwd`). */
  readonly inProcess: (...args: string[]) => Promise<CliResult>;
}

/**
 * Register `beforeAll`/`afterAll` hooks that create and remove a temporary folder named
 * `<prefix>XXXXXX`, and return accessors for it and a CLI runner using its cache.
 */
export function cliSandbox(prefix: string, options: { cacheName?: string; cwd?: boolean } = {}): CliSandbox {
  let tmp: string | undefined;
  const folder = (): string => {
    if (tmp === undefined) throw new Error('cliSandbox: used before beforeAll ran');
    return tmp;
  };
  beforeAll(async () => {
    tmp = await fs.mkdtemp(path.join(os.tmpdir(), prefix));
  });
  afterAll(async () => {
    if (tmp !== undefined) await fs.rm(tmp, { recursive: true, force: true });
  });
  const sandbox: CliSandbox = {
    get tmp() {
      return folder();
    },
    get cacheDir() {
      return path.join(folder(), options.cacheName ?? 'cache');
    },
    abacus: (...args) => runAbacus(args, { cacheDir: sandbox.cacheDir, ...(options.cwd === true ? { cwd: folder() } : {}) }),
    inProcess: (...args) => {
      if (options.cwd === true) throw new Error('cliSandbox: inProcess cannot run inside tmp (the process has one working directory)');
      return runAbacusInProcess(args, { cacheDir: sandbox.cacheDir });
    },
  };
  return sandbox;
}
