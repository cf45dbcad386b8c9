/** The policy list of `--help` (bench, simulate, serve): every policy with its one-line summary (`schedule/index.ts` POLICY_SUMMARIES). */
import { POLICY_NAMES, POLICY_SUMMARIES } from '../schedule/index.ts';

/** Text appended to a command's `--help`: one line per policy, then how batching policies get their queries. */
export function policyHelpText(): string {
  const width = Math.max(...POLICY_NAMES.map((n) => n.length));
  const lines = POLICY_NAMES.map((n) => `  ${n.padEnd(width)}  ${POLICY_SUMMARIES[n]}`);
  return [
    '',
    'Policies:',
    ...lines,
    '',
    'abacus, fcfs-batch, edf-batch, clockwork and triton fuse the queued queries of a service only when',
    'it batches dynamically (maxBatchSize, maxQueueDelayMs, preferredBatchSizes); else each runs alone.',
  ].join('\n');
}
