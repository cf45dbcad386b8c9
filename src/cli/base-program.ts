/** The `abacus` program's name, description, global options and output settings, without commands (`main.ts` `buildProgram` adds every command, `run.ts` only the one it runs). */
import { readFileSync } from 'node:fs';
import { Command } from 'commander';
import type { CliContext } from './context.ts';

function packageVersion(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version?: string };
  return pkg.version ?? '0.0.0';
}

/** The program with its global options and no command. */
export function baseProgram(ctx: CliContext): Command {
  return new Command('abacus')
    .description('Abacus-TS: serve several DNNs on one device with deterministic operator overlap and QoS targets')
    .option('--cache-dir <dir>', 'model cache directory (default $ABACUS_CACHE_DIR or <project>/.cache/models)')
    .showHelpAfterError()
    .enablePositionalOptions()
    .version(packageVersion(), '--version', 'print the version')
    .configureOutput({ writeOut: (s) => ctx.out(s), writeErr: (s) => ctx.err(s) })
    .exitOverride();
}
