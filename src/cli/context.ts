import type { DeploymentContext } from '../deployment/context.ts';

/** What subcommands need from the process (`main.ts` builds it), injectable for tests: the assembly's context plus stdout. */
export interface CliContext extends DeploymentContext {
  out(text: string): void;
}
