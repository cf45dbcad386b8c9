import type { ProfileProgress } from '../profile/profiler.ts';

/**
 * What the assembly needs from whoever runs it (the CLI, a test, a benchmark): where to say
 * what it is doing (models being built, a predictor being profiled, warnings), the model cache
 * to use, and optionally a progress display for a long profile.
 */
export interface DeploymentContext {
  /** Progress lines and warnings for the person waiting (the CLI's stderr). */
  err(text: string): void;
  /** `{ cacheDir }` of the model cache when one was chosen (`--cache-dir`). */
  cacheOptions(): { cacheDir?: string };
  /** A progress display for a profile; absent: none. */
  progress?(): { update(p: ProfileProgress): void; stop(): void };
}
