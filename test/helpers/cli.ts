/** Run the `abacus` CLI as a user does (`node bin/abacus.js …`) for end-to-end tests. */
import { execFile } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

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
