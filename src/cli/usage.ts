/**
 * A usage error found after parsing, inside a command's action (a flag combination that
 * cannot work): printed as `error: …` with exit code 2, like commander's own parse errors.
 * Flag parsers called by commander throw commander's `InvalidArgumentError` instead.
 */
export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'UsageError';
  }
}
