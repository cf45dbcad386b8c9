/**
 * Profile datasets: what `abacus profile` writes and `abacus train` reads (docs/design.md#predictor, docs/predictor.md). Types
 * only; CSV reading and writing live in `profile/csv.ts`.
 *
 * CSV schema (one row per measured operator group, header required, columns in this order):
 *
 *     sample,device,slots,model_0,start_0,end_0,batch_0,seq_len_0,…,model_{K-1},…,seq_len_{K-1},
 *     median_ms,mean_ms,std_ms,runs
 *
 * - `sample`: index of the sample in the profiler's deterministic sample sequence (resume key);
 * - `device`: device id (`sim:a100`, `ort:cpu`);
 * - `slots`: segments in the group, 1..K; slot columns beyond `slots` are empty;
 * - `model_i,start_i,end_i,batch_i,seq_len_i`: segment i, operators `[start, end)`, batch size,
 *   sequence length (0 for models without a sequence axis). Slot order is as sampled (the
 *   first slot is the urgent query that runs to its end); predictors reorder canonically;
 * - `threads_i` (only in profiles made with thread rules, docs/threads.md; after `seq_len_i`):
 *   the intra-op threads slot i ran with, empty for the device's default;
 * - `median_ms,mean_ms,std_ms`: group latency statistics over the timed runs after dropping
 *   the fastest and the slowest (when at least 3 runs), in ms;
 * - `runs`: number of timed runs.
 */
// The row type belongs to the predictor's contract (what training reads), one layer down.
export type { ProfileRow } from '../predict/predictor.ts';
