/**
 * Executor memory under cycling shapes (issue 14 item 8; goal: RSS growth ≤ 10 % over 10,000
 * requests after warm-up): `bert-small` on `ort` (this CPU), batch sizes 1, 2, 4 × sequence
 * lengths 8, 16, 32 (nine input shapes), served by the runtime backend (`ort-backend.ts`), the
 * executor warmed up at every serving shape (the default). Requests go `concurrency` at a time,
 * the shape cycling request by request; the executor's RSS (`OrtDevice.residentBytes`: reported
 * by the executor with each result) is sampled after warm-up and every `sampleEvery` requests.
 *
 * Reported: RSS after warm-up, at the end and at its largest, growth end ÷ after-warm-up − 1,
 * with the ORT arena settings as they are (`enableCpuMemArena` / `enableMemPattern`: ORT's
 * defaults, on).
 */
import os from 'node:os';
import { openOrtServing, syntheticRequest } from './ort-backend.ts';

const BATCHES = [1, 2, 4];
const SEQ_LENS = [8, 16, 32];
const MIB = 1024 * 1024;

export interface ExecutorMemoryResult {
  readonly model: string;
  readonly requests: number;
  readonly failed: number;
  readonly loadAverage1m: number;
  readonly afterWarmUpMiB: number;
  readonly endMiB: number;
  readonly maxMiB: number;
  /** end ÷ after warm-up − 1. */
  readonly growth: number;
  /** [requests done, RSS MiB] samples. */
  readonly samples: readonly (readonly [number, number])[];
}

export async function benchExecutorMemory(opts: { log?: (s: string) => void; requests?: number; concurrency?: number; sampleEvery?: number } = {}): Promise<ExecutorMemoryResult> {
  const log = opts.log ?? (() => undefined);
  const requests = opts.requests ?? 10_000;
  const concurrency = opts.concurrency ?? 4;
  const sampleEvery = opts.sampleEvery ?? 500;
  const model = 'bert-small';
  log(`executor memory: ${model} on ort, batch ${BATCHES.join('/')} × seq ${SEQ_LENS.join('/')}, ${requests} requests, ${concurrency} at a time …\n`);
  const serving = await openOrtServing(model, BATCHES, SEQ_LENS, {});
  try {
    const rss = (): number => (serving.device.residentBytes().get('m') ?? Number.NaN) / MIB;
    const shapes = BATCHES.flatMap((b) => SEQ_LENS.map((s) => [b, s] as const));
    const afterWarmUp = rss();
    const samples: [number, number][] = [[0, afterWarmUp]];
    let next = 0;
    let done = 0;
    let failed = 0;
    const worker = async (): Promise<void> => {
      while (next < requests) {
        const i = next++;
        const [batch, seq] = shapes[i % shapes.length]!;
        try {
          await serving.backend.infer(syntheticRequest(serving.spec, batch, seq, i));
        } catch {
          failed++;
        }
        done++;
        if (done % sampleEvery === 0) {
          samples.push([done, rss()]);
          log(`  ${done} requests: executor RSS ${rss().toFixed(1)} MiB\n`);
        }
      }
    };
    await Promise.all(Array.from({ length: concurrency }, worker));
    const end = rss();
    return { model, requests, failed, loadAverage1m: os.loadavg()[0]!, afterWarmUpMiB: afterWarmUp, endMiB: end, maxMiB: Math.max(...samples.map((s) => s[1]), end), growth: end / afterWarmUp - 1, samples };
  } finally {
    await serving.close();
  }
}
