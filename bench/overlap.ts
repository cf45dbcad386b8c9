/**
 * Overlap opportunity on CPU (docs/benchmarks.md "Split overhead and overlap on the CPU"): whole queries of two services launched as one
 * operator group vs one after the other, through OrtDevice (one executor process per
 * service, no spinning).
 *
 * Two baselines, both measured in this process:
 *  - `sequential, 1 thread`: the same executors (1 intra-op thread each) one query at a
 *    time. On a 2-core box this leaves a core idle, so group/sequential ≈ 0.5 partly
 *    measures that idle core;
 *  - `sequential, all cores`: executors with intra-op threads = cores, one query at a time —
 *    the fair FCFS baseline (what a one-query-at-a-time server would configure).
 * Ratios: group ÷ baseline (1.0 = overlap gains nothing; < 1 = overlap wins).
 */
import os from 'node:os';
import { OrtDevice } from '../src/device/ort/index.ts';
import { measureOverlap, measureSequential, type OverlapMeasurement, type OverlapQuery } from '../src/device/overlap.ts';
import { ModelRepository } from '../src/model/repository.ts';
import type { ZooModelName } from '../src/model/zoo/index.ts';

export interface OverlapPairResult extends OverlapMeasurement {
  pair: string;
  batch: number;
  seqLen: number;
  threads: number;
  /** Cores used by the fair baseline's executors. */
  allCoresThreads: number;
  /** Sum of solo latencies with intra-op threads = cores, ms. */
  sequentialAllCoresMs: number;
  /** groupMs / sequentialAllCoresMs. */
  ratioVsAllCores: number;
}

export async function benchOverlap(opts: {
  pairs: readonly (readonly [ZooModelName, ZooModelName])[];
  batches: readonly number[];
  seqLen: number;
  threads: number;
  repeat: number;
  cacheDir?: string;
  /** Zoo options per model (tests use small variants); full size when absent. */
  zooOptions?: Partial<Record<ZooModelName, Record<string, number>>>;
  log: (s: string) => void;
}): Promise<OverlapPairResult[]> {
  const repo = new ModelRepository(opts.cacheDir === undefined ? {} : { cacheDir: opts.cacheDir });
  const cores = os.cpus().length;
  const results: OverlapPairResult[] = [];
  for (const [a, b] of opts.pairs) {
    const services = [
      { name: `${a}`, model: (await repo.zooArtifact(a, opts.zooOptions?.[a] ?? {})).artifact },
      { name: `${b}${a === b ? '#2' : ''}`, model: (await repo.zooArtifact(b, opts.zooOptions?.[b] ?? {})).artifact },
    ];
    const perBatch: { batch: number; m: OverlapMeasurement; queries: OverlapQuery[] }[] = [];
    const device = await OrtDevice.create({ intraOpNumThreads: opts.threads });
    try {
      await device.load(services);
      for (const batch of opts.batches) {
        const queries = services.map((service) => ({ service, batchSize: batch, seqLen: service.model.spec.dynamicAxes.seq === undefined ? 0 : opts.seqLen }));
        perBatch.push({ batch, queries, m: await measureOverlap(device, queries, { repeat: opts.repeat, warmup: 1 }) });
      }
    } finally {
      await device.close();
    }
    // The fair baseline's executors start after the first ones are gone (one copy of the weights).
    const wide = await OrtDevice.create({ intraOpNumThreads: cores });
    try {
      await wide.load(services);
      for (const { batch, queries, m } of perBatch) {
        const fair = await measureSequential(wide, queries, { repeat: opts.repeat, warmup: 1 });
        const ratioVsAllCores = m.groupMs / fair.sequentialMs;
        opts.log(`overlap ${a}+${b} batch ${batch}: group/sequential ${m.ratio.toFixed(3)}, group/sequential(all cores) ${ratioVsAllCores.toFixed(3)}\n`);
        results.push({ ...m, pair: `${a}+${b}`, batch, seqLen: opts.seqLen, threads: opts.threads, allCoresThreads: cores, sequentialAllCoresMs: fair.sequentialMs, ratioVsAllCores });
      }
    } finally {
      await wide.close();
    }
  }
  return results;
}
