/** What subcommands need from the process (`main.ts` builds it), injectable for tests. */
export interface CliContext {
  out(text: string): void;
  err(text: string): void;
  /** `{ cacheDir }` when `--cache-dir` was given. */
  cacheOptions(): { cacheDir?: string };
}
