/**
 * Overlap opportunity on CPU (issue 2 §5): whole queries of two services launched as one
 * operator group vs one after the other, through OrtDevice (one executor process per
 * service, `threads` intra-op threads each, no spinning). Ratio group/sequential:
 * 1.0 = no overlap, 0.5 = perfect overlap of two equal queries.
 */
import { OrtDevice } from '../src/device/ort/index.ts';
import { measureOverlap, type OverlapMeasurement } from '../src/device/overlap.ts';
import { ModelRepository } from '../src/model/repository.ts';
import type { ZooModelName } from '../src/model/zoo/index.ts';

export interface OverlapPairResult extends OverlapMeasurement {
  pair: string;
  batch: number;
  seqLen: number;
  threads: number;
}

export async function benchOverlap(opts: {
  pairs: readonly (readonly [ZooModelName, ZooModelName])[];
  batches: readonly number[];
  seqLen: number;
  threads: number;
  repeat: number;
  cacheDir?: string;
  log: (s: string) => void;
}): Promise<OverlapPairResult[]> {
  const repo = new ModelRepository(opts.cacheDir === undefined ? {} : { cacheDir: opts.cacheDir });
  const results: OverlapPairResult[] = [];
  for (const [a, b] of opts.pairs) {
    const services = [
      { name: `${a}`, model: (await repo.zooArtifact(a)).artifact },
      { name: `${b}${a === b ? '#2' : ''}`, model: (await repo.zooArtifact(b)).artifact },
    ];
    const device = await OrtDevice.create({ intraOpNumThreads: opts.threads });
    try {
      await device.load(services);
      for (const batch of opts.batches) {
        const queries = services.map((service) => ({ service, batchSize: batch, seqLen: service.model.spec.dynamicAxes.seq === undefined ? 0 : opts.seqLen }));
        const m = await measureOverlap(device, queries, { repeat: opts.repeat, warmup: 1 });
        opts.log(`overlap ${a}+${b} batch ${batch}: group/sequential ${m.ratio.toFixed(3)}\n`);
        results.push({ ...m, pair: `${a}+${b}`, batch, seqLen: opts.seqLen, threads: opts.threads });
      }
    } finally {
      await device.close();
    }
  }
  return results;
}
