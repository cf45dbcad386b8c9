/**
 * Executor memory under cycling shapes (the project's target, docs/benchmarks.md "Targets and what was measured": RSS growth ≤ 10 % over 10,000
 * requests after warm-up): `bert-small` on `ort` (this CPU), batch sizes 1, 2, 4 × sequence
 * lengths 8, 16, 32 (nine input shapes), served by the runtime backend (`ort-backend.ts`), the
 * executor warmed up at every serving shape (the default). Requests go `concurrency` at a time,
 * the shape cycling request by request; the executor's RSS (`OrtDevice.residentBytes`: reported
 * by the executor with each result) is sampled after warm-up and every `sampleEvery` requests.
 *
 * Reported, each on a fresh executor, for the defaults (a full V8 GC in the executor every 50
 * segments, `OrtDeviceOptions.gcEverySegments`; ORT's arena and memory pattern on) and for
 * `gcEverySegments: 0` (the behaviour before: V8 decides when to collect), and with
 * `arenaOff` also ORT's arena and memory pattern off (`cpuMemArena` / `memPattern`): RSS after
 * warm-up, at the end and at its largest, growth end ÷ after-warm-up − 1, the samples, and the
 * median request latency (what each setting costs).
 */
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import type { OrtDeviceOptions } from '../src/device/ort/index.ts';
import { openOrtServing, syntheticRequest } from './ort-backend.ts';

const BATCHES = [1, 2, 4];
const SEQ_LENS = [8, 16, 32];
const MIB = 1024 * 1024;

export interface ExecutorMemoryResult {
  readonly model: string;
  readonly loadAverage1m: number;
  readonly runs: readonly ExecutorMemoryRun[];
}

export interface ExecutorMemoryRun {
  readonly settings: string;
  /** Median end-to-end request latency, ms. */
  readonly medianMs: number;
  readonly requests: number;
  readonly failed: number;
  readonly afterWarmUpMiB: number;
  readonly endMiB: number;
  readonly maxMiB: number;
  /** end ÷ after warm-up − 1. */
  readonly growth: number;
  /** [requests done, RSS MiB] samples. */
  readonly samples: readonly (readonly [number, number])[];
}

export async function benchExecutorMemory(opts: { log?: (s: string) => void; requests?: number; concurrency?: number; sampleEvery?: number; arenaOff?: boolean } = {}): Promise<ExecutorMemoryResult> {
  const model = 'bert-small';
  const runs: ExecutorMemoryRun[] = [];
  runs.push(await run(model, 'defaults (a full GC every 50 segments; ORT arena and mem pattern on)', {}, opts));
  runs.push(await run(model, 'gcEverySegments 0 (V8 decides: the behaviour before)', { gcEverySegments: 0 }, opts));
  if (opts.arenaOff === true) runs.push(await run(model, 'ORT arena and mem pattern off, gcEverySegments 0', { cpuMemArena: false, memPattern: false, gcEverySegments: 0 }, opts));
  return { model, loadAverage1m: os.loadavg()[0]!, runs };
}

async function run(model: string, settings: ExecutorMemoryRun['settings'], deviceOptions: OrtDeviceOptions, opts: { log?: (s: string) => void; requests?: number; concurrency?: number; sampleEvery?: number }): Promise<ExecutorMemoryRun> {
  const log = opts.log ?? (() => undefined);
  const requests = opts.requests ?? 10_000;
  const concurrency = opts.concurrency ?? 4;
  const sampleEvery = opts.sampleEvery ?? 500;
  log(`executor memory: ${model} on ort (${settings}), batch ${BATCHES.join('/')} × seq ${SEQ_LENS.join('/')}, ${requests} requests, ${concurrency} at a time …\n`);
  const serving = await openOrtServing(model, BATCHES, SEQ_LENS, deviceOptions);
  try {
    const rss = (): number => (serving.device.residentBytes().get('m') ?? Number.NaN) / MIB;
    const shapes = BATCHES.flatMap((b) => SEQ_LENS.map((s) => [b, s] as const));
    const afterWarmUp = rss();
    const samples: [number, number][] = [[0, afterWarmUp]];
    let next = 0;
    let done = 0;
    let failed = 0;
    const latencies: number[] = [];
    const worker = async (): Promise<void> => {
      while (next < requests) {
        const i = next++;
        const [batch, seq] = shapes[i % shapes.length]!;
        const t0 = performance.now();
        try {
          await serving.backend.infer(syntheticRequest(serving.spec, batch, seq, i));
          latencies.push(performance.now() - t0);
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
    latencies.sort((a, b) => a - b);
    return { settings, medianMs: latencies[Math.floor(latencies.length / 2)] ?? Number.NaN, requests, failed, afterWarmUpMiB: afterWarmUp, endMiB: end, maxMiB: Math.max(...samples.map((s) => s[1]), end), growth: end / afterWarmUp - 1, samples };
  } finally {
    await serving.close();
  }
}
