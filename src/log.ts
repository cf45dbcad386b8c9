/**
 * Structured JSON logs (pino) on stderr, so stdout stays free for command results and `--json`.
 * Create one logger per process entry point and pass it down (no global logger).
 */
import { pino, type Logger } from 'pino';

export type { Logger };

/** A logger writing JSON lines to stderr. Level from `$ABACUS_LOG_LEVEL` (default `info`). */
export function createLogger(env: NodeJS.ProcessEnv = process.env): Logger {
  return pino({ level: env['ABACUS_LOG_LEVEL'] ?? 'info', base: { pid: process.pid } }, pino.destination(2));
}
