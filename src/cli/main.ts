/**
 * `abacus` command line (commander). Every command that prints results accepts `--json`.
 * Exit codes: 0 success, 1 runtime error (message on stderr), 2 usage error.
 */
import { readFileSync } from 'node:fs';
import { Command, CommanderError, InvalidArgumentError } from 'commander';
import { AbacusError } from '../errors.ts';
import { ClusterError } from '../deployment/cluster.ts';
import { registerModelsCommand } from './models.ts';
import { registerDemoCommand } from './demo.ts';
import { registerSimulateCommand } from './simulate.ts';
import { progressReporter, registerProfileCommand } from './profile.ts';
import { registerTrainCommand } from './train.ts';
import { registerExperimentCommands } from './experiment.ts';
import { registerReproduceCommand } from './reproduce.ts';
import { registerServeCommand } from './serve.ts';
import { registerClusterCommand } from './cluster.ts';
import { UsageError } from './usage.ts';
import type { CliContext } from './context.ts';

export type { CliContext } from './context.ts';

function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: string };
  return pkg.version ?? '0.0.0';
}

/** Build the program (exposed for tests). A context without `progress` gets the CLI's (a bar on a terminal, else lines on stderr). */
export function buildProgram(given: CliContext): Command {
  const ctx: CliContext = given.progress !== undefined ? given : { ...given, progress: () => progressReporter(given) };
  const program = new Command('abacus')
    .description('Abacus-TS: serve several DNNs on one device with deterministic operator overlap and QoS targets')
    .option('--cache-dir <dir>', 'model cache directory (default $ABACUS_CACHE_DIR or <project>/.cache/models)')
    .showHelpAfterError()
    .enablePositionalOptions()
    .version(packageVersion(), '--version', 'print the version')
    .configureOutput({ writeOut: (s) => ctx.out(s), writeErr: (s) => ctx.err(s) })
    .exitOverride();
  registerModelsCommand(program, ctx);
  registerDemoCommand(program, ctx);
  const simulate = registerSimulateCommand(program, ctx);
  registerProfileCommand(program, ctx);
  registerTrainCommand(program, ctx);
  registerExperimentCommands(program, simulate, ctx);
  registerReproduceCommand(program, ctx);
  registerServeCommand(program, ctx);
  registerClusterCommand(program, ctx);
  return program;
}

/** An error from the file system (EACCES, ENOENT, EISDIR, ENAMETOOLONG, …): the user's path, not our bug. */
function isFileSystemError(err: unknown): err is NodeJS.ErrnoException {
  return err instanceof Error && typeof (err as NodeJS.ErrnoException).code === 'string' && typeof (err as NodeJS.ErrnoException).syscall === 'string';
}

/** Run the CLI on `argv` (as `process.argv`); sets `process.exitCode`. */
export async function main(argv: readonly string[]): Promise<void> {
  const holder: { program?: Command } = {};
  const ctx: CliContext = {
    out: (s) => process.stdout.write(s),
    err: (s) => process.stderr.write(s),
    cacheOptions: () => {
      const dir = holder.program?.opts<{ cacheDir?: string }>().cacheDir;
      return dir === undefined ? {} : { cacheDir: dir };
    },
  };
  const program = buildProgram(ctx);
  holder.program = program;
  try {
    await program.parseAsync([...argv]);
  } catch (err) {
    // Commander re-throws a parser's InvalidArgumentError as a plain CommanderError after
    // printing it; an InvalidArgumentError that arrives here came from an action, unprinted.
    if (err instanceof UsageError || err instanceof InvalidArgumentError) {
      ctx.err(`error: ${err.message}\n`);
      process.exitCode = 2;
      return;
    }
    if (err instanceof CommanderError) {
      process.exitCode = err.exitCode === 0 ? 0 : 2;
      return;
    }
    if (err instanceof AbacusError || err instanceof ClusterError || err instanceof RangeError || err instanceof TypeError || isFileSystemError(err)) {
      ctx.err(`error: ${err.message}\n`);
      process.exitCode = 1;
      return;
    }
    ctx.err(`internal error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    process.exitCode = 1;
  }
}
