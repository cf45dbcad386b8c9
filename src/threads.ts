/**
 * Thread rules: how many intra-op threads each segment of an operator group gets (docs/threads.md,
 * "cores as a decision"). A bottom-level helper: the query controllers apply a rule to
 * the groups they decide (`schedule/threads.ts`), the profiler to the groups it samples
 * (`profile/sampler.ts`), so that the predictor learns latencies at the thread counts serving
 * will use.
 *
 * Rules (text form in brackets, as in policy parameters and CLI flags):
 * - `device` ['device']: segments carry no thread count; each runs with its device's default
 *   (`OrtDeviceOptions.intraOpNumThreads`). Today's behaviour.
 * - `fixed` ['fixed:N']: every segment gets N threads, whatever the group.
 * - `split` ['split:C']: a group of k segments gives each max(1, ⌊C / k⌋) threads: a query
 *   alone gets all C cores, two overlapped queries split them. This is VELTAIR's idea (Liu et
 *   al., ASPLOS'22, which cites Abacus: adapt the parallelism of co-located DNN queries on a
 *   CPU to what runs beside them) in its simplest deterministic form: cores are split evenly,
 *   never below one thread (with k > C the segments oversubscribe the cores).
 * - `adapt` ['adapt:C']: as `split:C` for a group of k ≥ 2 segments; a query alone runs at the
 *   count among `loneCandidates` (C, ⌊C/2⌋, ⌊C/4⌋, …, 1) whose recent measured latencies say it
 *   is fastest now (`schedule/threads.ts`, `LoneThreadChooser`): on a quiet machine every core,
 *   beside a busy neighbour perhaps one core, since a second intra-op thread then waits for a
 *   core the neighbour holds (docs/threads.md). `threadsFor` gives the `split:C` count (C for a
 *   lone group), the start before anything is measured.
 */

/** A thread rule (see the file comment). */
export type ThreadRule = { readonly kind: 'device' } | { readonly kind: 'fixed'; readonly threads: number } | { readonly kind: 'split' | 'adapt'; readonly cores: number };

/** Largest thread count or core budget a rule may name (far beyond any CPU here; bounds the sessions a device may create). */
export const MAX_RULE_THREADS = 1024;

/** The default rule: the device's own thread count. */
export const DEVICE_THREADS: ThreadRule = Object.freeze({ kind: 'device' });

/**
 * Parse `device`, `fixed:N`, `split:C` or `adapt:C` (N, C integers in [1, 1024]).
 * @param field what to name in the error (a parameter or flag).
 * @throws RangeError naming `field`, the value and the valid forms.
 */
export function parseThreadRule(text: string, field = 'threads'): ThreadRule {
  const t = text.trim();
  if (t === 'device') return DEVICE_THREADS;
  const m = /^(fixed|split|adapt):(\d+)$/.exec(t);
  const n = m === null ? NaN : Number(m[2]);
  if (m === null || !Number.isInteger(n) || n < 1 || n > MAX_RULE_THREADS) {
    throw new RangeError(`${field} '${text}' must be 'device', 'fixed:N' (N threads per segment), 'split:C' (C cores split evenly over the group's segments) or 'adapt:C' (as split:C, a lone query at the measured fastest count), N and C integers in [1, ${MAX_RULE_THREADS}]`);
  }
  return m[1] === 'fixed' ? { kind: 'fixed', threads: n } : { kind: m[1] as 'split' | 'adapt', cores: n };
}

/** The text form of a rule (`parseThreadRule`'s inverse). */
export function formatThreadRule(rule: ThreadRule): string {
  switch (rule.kind) {
    case 'device':
      return 'device';
    case 'fixed':
      return `fixed:${rule.threads}`;
    case 'split':
    case 'adapt':
      return `${rule.kind}:${rule.cores}`;
  }
}

/**
 * Intra-op threads per segment of a group of `groupSize` segments under `rule`; undefined for
 * `device` (the device's default).
 * @throws RangeError for a group size that is not an integer ≥ 1.
 */
export function threadsFor(rule: ThreadRule, groupSize: number): number | undefined {
  if (!Number.isInteger(groupSize) || groupSize < 1) throw new RangeError(`threadsFor: group size ${groupSize} must be an integer ≥ 1`);
  switch (rule.kind) {
    case 'device':
      return undefined;
    case 'fixed':
      return rule.threads;
    case 'split':
    case 'adapt':
      return Math.max(1, Math.floor(rule.cores / groupSize));
  }
}

/**
 * The thread counts a query alone may run with under `rule`, descending: for `adapt:C`, C,
 * ⌊C/2⌋, ⌊C/4⌋, … down to 1 (distinct; halving keeps the candidates few on a large machine:
 * 5 for 16 cores); for any other rule its one count for a group of one (empty for `device`).
 */
export function loneCandidates(rule: ThreadRule): number[] {
  if (rule.kind !== 'adapt') {
    const n = threadsFor(rule, 1);
    return n === undefined ? [] : [n];
  }
  const out: number[] = [];
  for (let n = rule.cores; n >= 1; n = Math.floor(n / 2)) out.push(n);
  return out;
}

/**
 * The distinct thread counts `rule` gives to groups of 1..`maxGroupSize` segments (with `adapt`,
 * every `loneCandidates` count too), ascending (empty for `device`): what a device should have
 * sessions for (`OrtDeviceOptions.preloadIntraOpThreads`).
 */
export function threadCountsOf(rule: ThreadRule, maxGroupSize: number): number[] {
  const out = new Set<number>();
  for (let k = 1; k <= maxGroupSize; k++) {
    const n = threadsFor(rule, k);
    if (n !== undefined) out.add(n);
  }
  for (const n of loneCandidates(rule)) out.add(n);
  return [...out].sort((a, b) => a - b);
}

/**
 * What an `OrtDevice` needs to run groups of 1..`maxGroupSize` segments under `rules`: the
 * thread counts to preload (`threadCountsOf` over all rules) and a `maxIntraOpThreads` of at
 * least the largest of them and of `cores` (the machine's, `os.availableParallelism()`).
 */
export function threadDeviceOptions(rules: readonly ThreadRule[], maxGroupSize: number, cores: number): { preloadIntraOpThreads: number[]; maxIntraOpThreads: number } {
  const counts = [...new Set(rules.flatMap((r) => threadCountsOf(r, maxGroupSize)))].sort((a, b) => a - b);
  return { preloadIntraOpThreads: counts, maxIntraOpThreads: Math.min(MAX_RULE_THREADS, Math.max(cores, ...counts)) };
}

/**
 * Parse a comma-separated list of rules (`fixed:1,split:2`); duplicates dropped, order kept.
 * @throws RangeError naming `field` for an empty list or a bad rule.
 */
export function parseThreadRules(text: string, field = 'threads'): ThreadRule[] {
  const items = text.split(',').map((t) => t.trim());
  if (items.length === 0 || items.some((t) => t === '')) throw new RangeError(`${field} '${text}' must be a comma-separated list of rules (device, fixed:N, split:C, adapt:C)`);
  const seen = new Set<string>();
  const out: ThreadRule[] = [];
  for (const t of items) {
    const rule = parseThreadRule(t, field);
    const key = formatThreadRule(rule);
    if (!seen.has(key)) out.push(rule);
    seen.add(key);
  }
  return out;
}
