/**
 * `npm run checks`: the type checks of `npm run typecheck` (`tsc --noEmit` on the project and on
 * the dashboard page) and `npm run lint` (`eslint .`), run at the same time instead of one after
 * the other. Each is single-threaded, so on two cores on an otherwise idle machine they finish in
 * about the time of the slowest, eslint (measured with other processes busy: 53 s one after the
 * other and 43 s together at load 3-4; 42 s and 39 s at load 1.6-2, where the other processes
 * already held most of both cores). Each command's output is printed whole when it ends (never
 * interleaved), under a line naming it; the exit code is 1 when any of them failed, else 0.
 * The commands are found on the PATH, as npm scripts find them (`node_modules/.bin`).
 *
 * `--with-vitest [args…]` (`npm test`): `vitest run [args…]` runs beside them, its output live;
 * the checks' output follows once both are done. The tests wait on child processes and timers
 * part of the time, which the checks fill: a fresh clone's `npm test` took 254 s this way and
 * 271 s with the checks first (46 s, then vitest 224 s; 2-core machine, load 2-4, 2026-12-02).
 */
import { spawn } from 'node:child_process';

/**
 * The package's own scripts, so their flags live in one place (package.json): `typecheck`
 * (tsc on the project and the dashboard page, `--incremental` into `.cache/tsc/`) and `lint`.
 */
const COMMANDS: readonly (readonly [string, ...string[]])[] = [
  ['npm', 'run', '--silent', 'typecheck'],
  ['npm', 'run', '--silent', 'lint'],
];

/** Run `cmd`, collecting stdout and stderr together; resolves with its exit code (1 when it could not start or ended by a signal) and its output. */
function run(cmd: readonly [string, ...string[]]): Promise<{ code: number; output: string }> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    const child = spawn(cmd[0], cmd.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout.on('data', (c: Buffer) => chunks.push(c));
    child.stderr.on('data', (c: Buffer) => chunks.push(c));
    child.once('error', (err) => resolve({ code: 1, output: `${cmd[0]}: could not start: ${err.message}\n` }));
    child.once('close', (code) => resolve({ code: code ?? 1, output: Buffer.concat(chunks).toString('utf8') }));
  });
}

/** Run `cmd` with this process's stdout and stderr; resolves with its exit code (1 when it could not start or ended by a signal). */
function runLive(cmd: readonly [string, ...string[]]): Promise<number> {
  return new Promise((resolve) => {
    const child = spawn(cmd[0], cmd.slice(1), { stdio: ['ignore', 'inherit', 'inherit'] });
    child.once('error', (err) => {
      process.stderr.write(`${cmd[0]}: could not start: ${err.message}\n`);
      resolve(1);
    });
    child.once('close', (code) => resolve(code ?? 1));
  });
}

const at = process.argv.indexOf('--with-vitest');
const live = at < 0 ? Promise.resolve(0) : runLive(['vitest', 'run', ...process.argv.slice(at + 1)]);
const checks = Promise.all(
  COMMANDS.map(async (cmd) => {
    const started = performance.now();
    const { code, output } = await run(cmd);
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    const report = `> ${cmd.join(' ')}: ${code === 0 ? 'ok' : `failed (exit ${code})`} in ${seconds} s\n${output}`;
    // alone, each report as its command ends; beside vitest, after it (its output is live)
    if (at < 0) process.stdout.write(report);
    return { code, report };
  }),
);
const [liveCode, results] = await Promise.all([live, checks]);
if (at >= 0) for (const r of results) process.stdout.write(r.report);
process.exitCode = liveCode === 0 && results.every((r) => r.code === 0) ? 0 : 1;
