/**
 * The `abacus` process entry (`bin/abacus.js`): parse `process.argv`, run the command, set
 * `process.exitCode` (0 success, 1 runtime error with its message on stderr, 2 usage error).
 *
 * Only the named command's module is loaded (`abacus models …` does not load the server, the
 * reproduction or the demo): about 0.4 s instead of 0.9 s of start-up per run (measured with
 * tsx, load 2). Help, an unknown command or no command loads every command (`buildProgram` in
 * `main.ts`), so that the listing and commander's suggestions are the same as ever.
 */
import type { Command } from 'commander';
import { CommanderError, InvalidArgumentError } from 'commander';
import { baseProgram } from './base-program.ts';
import { AbacusError } from '../errors.ts';
import { UsageError } from './usage.ts';
import type { CliContext } from './context.ts';

/** Loaders of each command's registration, by command name. */
const COMMANDS: Readonly<Record<string, (program: Command, ctx: CliContext) => Promise<void>>> = {
  models: async (p, ctx) => (await import('./models.ts')).registerModelsCommand(p, ctx),
  demo: async (p, ctx) => (await import('./demo.ts')).registerDemoCommand(p, ctx),
  simulate: async (p, ctx) => {
    const simulate = (await import('./simulate.ts')).registerSimulateCommand(p, ctx);
    (await import('./experiment.ts')).registerExperimentCommands(p, simulate, ctx);
  },
  profile: async (p, ctx) => (await import('./profile.ts')).registerProfileCommand(p, ctx),
  train: async (p, ctx) => (await import('./train.ts')).registerTrainCommand(p, ctx),
  reproduce: async (p, ctx) => (await import('./reproduce.ts')).registerReproduceCommand(p, ctx),
  serve: async (p, ctx) => (await import('./serve.ts')).registerServeCommand(p, ctx),
  cluster: async (p, ctx) => (await import('./cluster.ts')).registerClusterCommand(p, ctx),
};

/**
 * The command `args` (after node and the script) name: the first word that is not an option or
 * the value of `--cache-dir`; undefined when there is none, or help or the version is asked
 * for before it.
 */
export function commandOf(args: readonly string[]): string | undefined {
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === '--cache-dir') i++;
    else if (a === '-h' || a === '--help' || a === '--version' || a === 'help') return undefined;
    else if (!a.startsWith('-')) return a;
  }
  return undefined;
}

/** The program for `argv` (as `process.argv`): only the named command when it is a known one (`bench` is registered with `simulate`), else every command. */
export async function programFor(argv: readonly string[], given: CliContext): Promise<Command> {
  const name = commandOf(argv.slice(2));
  const key = name === 'bench' ? 'simulate' : name;
  const load = key !== undefined && Object.hasOwn(COMMANDS, key) ? COMMANDS[key] : undefined;
  if (load === undefined) return (await import('./main.ts')).buildProgram(given);
  const { progressReporter } = await import('./profile.ts');
  const ctx: CliContext = given.progress !== undefined ? given : { ...given, progress: () => progressReporter(given) };
  const program = baseProgram(ctx);
  await load(program, ctx);
  return program;
}

/** An error from the file system (EACCES, ENOENT, EISDIR, ENAMETOOLONG, …): the user's path, not our bug. */
function isFileSystemError(err: unknown): err is NodeJS.ErrnoException {
  return err instanceof Error && typeof (err as NodeJS.ErrnoException).code === 'string' && typeof (err as NodeJS.ErrnoException).syscall === 'string';
}

/** What one run of the CLI writes to and which model cache it uses when `--cache-dir` is not given. */
export interface CliIo {
  out(text: string): void;
  err(text: string): void;
  /** The model cache without `--cache-dir`; absent: `$ABACUS_CACHE_DIR` or the project's `.cache/models`. */
  readonly cacheDir?: string;
}

/**
 * Run the CLI on `argv` (as `process.argv`: node, the script, then the arguments) and resolve
 * with its exit code: 0 success, 1 runtime error (its message written to `io.err`), 2 usage
 * error. Never rejects for a command's failure. `main` runs it on the process; tests run it in
 * process on argument errors, which would otherwise each pay a child's start-up.
 */
export async function runCli(argv: readonly string[], io: CliIo): Promise<number> {
  const holder: { program?: Command } = {};
  const ctx: CliContext = {
    out: (s) => io.out(s),
    err: (s) => io.err(s),
    cacheOptions: () => {
      const dir = holder.program?.opts<{ cacheDir?: string }>().cacheDir ?? io.cacheDir;
      return dir === undefined ? {} : { cacheDir: dir };
    },
  };
  const program = await programFor(argv, ctx);
  holder.program = program;
  try {
    await program.parseAsync([...argv]);
    return 0;
  } catch (err) {
    // Commander re-throws a parser's InvalidArgumentError as a plain CommanderError after
    // printing it; an InvalidArgumentError that arrives here came from an action, unprinted.
    if (err instanceof UsageError || err instanceof InvalidArgumentError) {
      ctx.err(`error: ${err.message}\n`);
      return 2;
    }
    if (err instanceof CommanderError) return err.exitCode === 0 ? 0 : 2;
    // loaded only now, when an error needs it; a CLI started from a bundle rebuilt since may no
    // longer find that chunk, and then the error is still reported, by its message
    const ClusterError = await import('../deployment/cluster.ts').then((m) => m.ClusterError, () => undefined);
    if (err instanceof AbacusError || (ClusterError !== undefined && err instanceof ClusterError) || err instanceof RangeError || err instanceof TypeError || isFileSystemError(err)) {
      ctx.err(`error: ${err.message}\n`);
      return 1;
    }
    ctx.err(`internal error: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
    return 1;
  }
}

/** Run the CLI on `argv` (as `process.argv`) with the process's stdout and stderr; sets `process.exitCode`. */
export async function main(argv: readonly string[]): Promise<void> {
  const code = await runCli(argv, { out: (s) => process.stdout.write(s), err: (s) => process.stderr.write(s) });
  // on success, an exit code a command set itself (130: profile interrupted) stands
  if (code !== 0) process.exitCode = code;
}
