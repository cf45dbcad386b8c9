/**
 * `abacus` command line (commander): every command. Every command that prints results accepts
 * `--json`. Exit codes: 0 success, 1 runtime error (message on stderr), 2 usage error. The
 * process entry, `main`, is in `run.ts` (it loads only the command it runs).
 */
import type { Command } from 'commander';
import { registerModelsCommand } from './models.ts';
import { registerDemoCommand } from './demo.ts';
import { registerSimulateCommand } from './simulate.ts';
import { progressReporter, registerProfileCommand } from './profile.ts';
import { registerTrainCommand } from './train.ts';
import { registerExperimentCommands } from './experiment.ts';
import { registerReproduceCommand } from './reproduce.ts';
import { registerServeCommand } from './serve.ts';
import { registerClusterCommand } from './cluster.ts';
import { baseProgram } from './base-program.ts';
import type { CliContext } from './context.ts';

export type { CliContext } from './context.ts';

/** Build the program (exposed for tests). A context without `progress` gets the CLI's (a bar on a terminal, else lines on stderr). */
export function buildProgram(given: CliContext): Command {
  const ctx: CliContext = given.progress !== undefined ? given : { ...given, progress: () => progressReporter(given) };
  const program = baseProgram(ctx);
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
