/**
 * Overlap measurement on any Device: whole queries of several services launched as one
 * operator group vs the same queries one after the other. Used by `abacus demo` and by
 * `bench/overlap.ts`; the ratio group/sequential is the overlap opportunity (1.0 = none,
 * 1/k = perfect overlap of k equal queries).
 */
import type { Device, DeviceService, GroupResult, Segment } from './device.ts';
import { median } from '../stats.ts';

/** One query per service to co-run. */
export interface OverlapQuery {
  readonly service: DeviceService;
  readonly batchSize: number;
  /** Sequence length for sequence models, 0 otherwise. */
  readonly seqLen: number;
}

/** Medians over the repetitions, all in ms. */
export interface OverlapMeasurement {
  /** Per query, group latency when it runs alone (same order as the queries). */
  readonly soloMs: readonly number[];
  /** Sum of the solo group latencies of one repetition (one after the other). */
  readonly sequentialMs: number;
  /** Latency of the group holding every query. */
  readonly groupMs: number;
  /** groupMs / sequentialMs, from the per-repetition ratios' median. */
  readonly ratio: number;
  /** Smallest and largest per-repetition ratio (the spread a busy machine adds). */
  readonly ratioMin: number;
  readonly ratioMax: number;
  readonly repeat: number;
}

/** One input seed for every round: executors cache synthetic inputs, so the warm-up round pays their generation and timed rounds do not. */
const SEED = 1;

function wholeQuery(q: OverlapQuery, queryId: string): Segment {
  return {
    service: q.service.name,
    queryId,
    start: 0,
    end: q.service.model.spec.operators.length,
    batchSize: q.batchSize,
    seqLen: q.seqLen,
    input: { kind: 'synthetic', seed: SEED },
  };
}

function checkOk(result: GroupResult): GroupResult {
  for (const s of result.segments) {
    if (!s.ok) throw s.error;
  }
  return result;
}

function checkRepeat(repeat: number): void {
  if (!Number.isInteger(repeat) || repeat < 1) throw new RangeError(`repeat must be an integer ≥ 1, got ${repeat}`);
}

/** Query ids unique within one measurement. */
function idSource(prefix: string): () => string {
  let n = 0;
  return () => `${prefix}-${n++}`;
}

/** Run every query alone, one group each; returns each group's latency (ms), in query order. */
async function runSoloRound(device: Device, queries: readonly OverlapQuery[], nextId: () => string): Promise<number[]> {
  const out: number[] = [];
  for (const q of queries) out.push(checkOk(await device.runGroup([wholeQuery(q, nextId())])).groupLatencyMs);
  return out;
}

const sum = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0);

/**
 * Measure `repeat` rounds (after `warmup` untimed rounds). Each round runs every query alone,
 * then all of them as one group; the order alternates between rounds so drift (thermal, cache)
 * hits both modes alike.
 * @throws RangeError for no queries or a bad `repeat`; the device's error when a segment fails.
 */
export async function measureOverlap(device: Device, queries: readonly OverlapQuery[], opts: { repeat: number; warmup?: number }): Promise<OverlapMeasurement> {
  if (queries.length < 1) throw new RangeError('measureOverlap needs at least one query');
  checkRepeat(opts.repeat);
  const solo: number[][] = queries.map(() => []);
  const sequential: number[] = [];
  const group: number[] = [];
  const ratios: number[] = [];
  const warmup = opts.warmup ?? 1;
  const nextId = idSource('overlap');
  const runGroup = async (): Promise<number> => checkOk(await device.runGroup(queries.map((q) => wholeQuery(q, nextId())))).groupLatencyMs;
  for (let round = 0; round < warmup + opts.repeat; round++) {
    let soloMs: number[];
    let groupMs: number;
    if (round % 2 === 0) {
      soloMs = await runSoloRound(device, queries, nextId);
      groupMs = await runGroup();
    } else {
      groupMs = await runGroup();
      soloMs = await runSoloRound(device, queries, nextId);
    }
    if (round < warmup) continue;
    soloMs.forEach((ms, i) => solo[i]!.push(ms));
    sequential.push(sum(soloMs));
    group.push(groupMs);
    ratios.push(groupMs / sum(soloMs));
  }
  return {
    soloMs: solo.map(median),
    sequentialMs: median(sequential),
    groupMs: median(group),
    ratio: median(ratios),
    ratioMin: Math.min(...ratios),
    ratioMax: Math.max(...ratios),
    repeat: opts.repeat,
  };
}

/**
 * Median latency of each query run alone, one group per query (the FCFS baseline), over
 * `repeat` rounds after `warmup` untimed rounds. Returns ms per query and their sum.
 * @throws RangeError for a bad `repeat`; the device's error when a segment fails.
 */
export async function measureSequential(device: Device, queries: readonly OverlapQuery[], opts: { repeat: number; warmup?: number }): Promise<{ soloMs: number[]; sequentialMs: number }> {
  checkRepeat(opts.repeat);
  const solo: number[][] = queries.map(() => []);
  const sums: number[] = [];
  const warmup = opts.warmup ?? 1;
  const nextId = idSource('sequential');
  for (let round = 0; round < warmup + opts.repeat; round++) {
    const soloMs = await runSoloRound(device, queries, nextId);
    if (round < warmup) continue;
    soloMs.forEach((ms, i) => solo[i]!.push(ms));
    sums.push(sum(soloMs));
  }
  return { soloMs: solo.map(median), sequentialMs: median(sums) };
}
