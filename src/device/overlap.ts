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

function wholeQuery(q: OverlapQuery, queryId: string, seed: number): Segment {
  return {
    service: q.service.name,
    queryId,
    start: 0,
    end: q.service.model.spec.operators.length,
    batchSize: q.batchSize,
    seqLen: q.seqLen,
    input: { kind: 'synthetic', seed },
  };
}

function checkOk(result: GroupResult): void {
  for (const s of result.segments) {
    if (!s.ok) throw s.error;
  }
}

/**
 * Measure `repeat` rounds (after `warmup` untimed rounds). Each round runs every query alone,
 * then all of them as one group; the order alternates between rounds so drift (thermal, cache)
 * hits both modes alike.
 * @throws the device's error when a segment fails.
 */
export async function measureOverlap(device: Device, queries: readonly OverlapQuery[], opts: { repeat: number; warmup?: number }): Promise<OverlapMeasurement> {
  if (queries.length < 1) throw new RangeError('measureOverlap needs at least one query');
  if (!Number.isInteger(opts.repeat) || opts.repeat < 1) throw new RangeError(`repeat must be an integer ≥ 1, got ${opts.repeat}`);
  const solo: number[][] = queries.map(() => []);
  const sequential: number[] = [];
  const group: number[] = [];
  const ratios: number[] = [];
  const warmup = opts.warmup ?? 1;
  let id = 0;
  for (let round = 0; round < warmup + opts.repeat; round++) {
    const timed = round >= warmup;
    const runSolo = async (): Promise<number> => {
      let sum = 0;
      for (let i = 0; i < queries.length; i++) {
        const r = await device.runGroup([wholeQuery(queries[i]!, `overlap-${id++}`, SEED)]);
        checkOk(r);
        if (timed) solo[i]!.push(r.groupLatencyMs);
        sum += r.groupLatencyMs;
      }
      return sum;
    };
    const runGroup = async (): Promise<number> => {
      const r = await device.runGroup(queries.map((q) => wholeQuery(q, `overlap-${id++}`, SEED)));
      checkOk(r);
      return r.groupLatencyMs;
    };
    let seqMs: number;
    let groupMs: number;
    if (round % 2 === 0) {
      seqMs = await runSolo();
      groupMs = await runGroup();
    } else {
      groupMs = await runGroup();
      seqMs = await runSolo();
    }
    if (timed) {
      sequential.push(seqMs);
      group.push(groupMs);
      ratios.push(groupMs / seqMs);
    }
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
 * @throws the device's error when a segment fails.
 */
export async function measureSequential(device: Device, queries: readonly OverlapQuery[], opts: { repeat: number; warmup?: number }): Promise<{ soloMs: number[]; sequentialMs: number }> {
  if (!Number.isInteger(opts.repeat) || opts.repeat < 1) throw new RangeError(`repeat must be an integer ≥ 1, got ${opts.repeat}`);
  const solo: number[][] = queries.map(() => []);
  const sums: number[] = [];
  const warmup = opts.warmup ?? 1;
  for (let round = 0; round < warmup + opts.repeat; round++) {
    let sum = 0;
    for (let i = 0; i < queries.length; i++) {
      const r = await device.runGroup([wholeQuery(queries[i]!, `sequential-${round}-${i}`, SEED)]);
      checkOk(r);
      if (round >= warmup) solo[i]!.push(r.groupLatencyMs);
      sum += r.groupLatencyMs;
    }
    if (round >= warmup) sums.push(sum);
  }
  return { soloMs: solo.map(median), sequentialMs: median(sums) };
}
