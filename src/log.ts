/**
 * Structured JSON logs (pino) on stderr, so stdout stays free for command results and `--json`.
 * Create one logger per process entry point and pass it down (no global logger).
 */
import { pino, type Logger } from 'pino';

export type { Logger };

/**
 * A logger writing JSON lines to stderr. Level from `$ABACUS_LOG_LEVEL`, else `defaultLevel`
 * (the CLI uses `warn` so that only executor failures and restarts interrupt its output).
 */
export function createLogger(options: { defaultLevel?: string; env?: NodeJS.ProcessEnv } = {}): Logger {
  const env = options.env ?? process.env;
  return pino({ level: env['ABACUS_LOG_LEVEL'] ?? options.defaultLevel ?? 'info', base: { pid: process.pid } }, pino.destination(2));
}
