/**
 * The output of `abacus reproduce` as it goes (docs/reproduction.md "Interrupted runs"): after
 * every experiment, `results.json` and `report.html` in the output folder are rewritten with the
 * experiments finished so far, and the report marks the others as not run yet. A run stopped
 * part-way (Ctrl-C, a crash, a machine that went away) therefore leaves the finished experiments
 * on disk; a run that completes leaves the same files as if they had been written once at the end.
 *
 * Both files are replaced atomically (written to a temporary sibling, then renamed), so a stop
 * while they are written leaves the previous complete version, never a truncated one.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { renderReproduceReport, writeResults, type ReproduceResults } from './report.ts';

/** The name of one experiment in `results.json`. */
export type ExperimentKey = keyof ReproduceResults;

export interface ExperimentSequence<K extends ExperimentKey> {
  /** Output folder (must exist): `results.json` and `report.html` are written here. */
  readonly out: string;
  /** The experiments, in the order they run. */
  readonly experiments: readonly K[];
  /** The results the experiments add to; `run` stores each outcome in it under the experiment's key. */
  readonly results: ReproduceResults;
  /** Run one experiment and store its outcome in `results[exp]`. What it throws ends the sequence (the files keep the experiments before it). */
  run(exp: K): Promise<void>;
  /** Told after the files hold `exp`, the `done`-th experiment (1-based), with the report's path. */
  onSaved?(exp: K, done: number, reportFile: string): void;
}

/** Path of the report in an output folder. */
export function reportPath(out: string): string {
  return path.join(out, 'report.html');
}

/**
 * Write `results.json` and `report.html` for `results`, the report marking `pending` as not run
 * yet. Returns the report's path.
 * @throws what writing the files or rendering the report throws.
 */
export async function saveProgress(out: string, results: ReproduceResults, pending: readonly string[]): Promise<string> {
  await writeResults(out, results);
  const file = reportPath(out);
  const tmp = `${file}.tmp-${process.pid}`;
  await fs.writeFile(tmp, await renderReproduceReport(results, pending));
  await fs.rename(tmp, file);
  return file;
}

/**
 * Run the experiments one after the other, saving the results and the report after each.
 * @throws what `run` or saving throws; the files then hold the experiments finished before.
 */
export async function runExperimentSequence<K extends ExperimentKey>(seq: ExperimentSequence<K>): Promise<void> {
  for (let i = 0; i < seq.experiments.length; i++) {
    const exp = seq.experiments[i]!;
    await seq.run(exp);
    const file = await saveProgress(seq.out, seq.results, seq.experiments.slice(i + 1));
    seq.onSaved?.(exp, i + 1, file);
  }
}
