/**
 * Warm-up until steady (the project's target, docs/benchmarks.md "Targets and what was measured": the first 10 requests after ready within 1.5×
 * the steady median): `resnet50-small` on `ort` (this CPU), batch sizes 1, 2, 4, 8, served by
 * the runtime backend (`ort-backend.ts`), twice in this process — with the executors' warm-up
 * at the serving shapes (`warmupUntilSteady`, the default) and without it (the baseline: one
 * warm-up run per operator at batch 1, plus the backend's one query per batch size, what
 * serving did before).
 *
 * After ready: 10 requests one after another, cycling the batch sizes (the "first 10"), then
 * `steadyPerBatch` more per batch size, interleaved; each first request's latency (backend
 * `infer`, end to end) ÷ the median of the later ones at its batch size. Reported: the largest
 * and the median of those ratios per run, the start-up time (load → ready), and the load
 * average. The modes alternate, `rounds` runs each (the machine is shared: a change in its
 * load then hits both).
 */
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { openOrtServing, syntheticRequest } from './ort-backend.ts';

const BATCHES = [1, 2, 4, 8];

export interface WarmUpMode {
  readonly mode: 'until-steady' | 'baseline';
  readonly startMs: number;
  /** Per first request: batch, latency ms, ratio to the steady median at its batch. */
  readonly first: readonly { readonly batch: number; readonly ms: number; readonly ratio: number; readonly computeRatio: number }[];
  readonly maxRatio: number;
  readonly medianRatio: number;
  /** The same for the device's share: the response's `compute_ms` (measured in the executor) ÷ its steady median. */
  readonly maxComputeRatio: number;
  readonly medianComputeRatio: number;
  readonly steadyMedianMs: Readonly<Record<string, number>>;
}

export interface WarmUpResult {
  readonly model: string;
  readonly loadAverage1m: number;
  readonly modes: readonly WarmUpMode[];
}

const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? Number.NaN : s.length % 2 === 1 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};

export async function benchWarmUp(opts: { log?: (s: string) => void; model?: string; steadyPerBatch?: number; rounds?: number } = {}): Promise<WarmUpResult> {
  const log = opts.log ?? (() => undefined);
  const model = opts.model ?? 'resnet50-small';
  const steadyPerBatch = opts.steadyPerBatch ?? 15;
  const modes: WarmUpMode[] = [];
  // the modes alternate, `rounds` times each, so that a change in the machine's load hits both
  const order = Array.from({ length: opts.rounds ?? 2 }, () => ['baseline', 'until-steady'] as const).flat();
  for (const mode of order) {
    log(`warm-up: ${model} on ort, batch ${BATCHES.join('/')}, ${mode} …\n`);
    const serving = await openOrtServing(model, BATCHES, undefined, { warmupUntilSteady: mode === 'until-steady' });
    try {
      const time = async (batch: number, seed: number): Promise<{ ms: number; computeMs: number }> => {
        const t0 = performance.now();
        const response = await serving.backend.infer(syntheticRequest(serving.spec, batch, 0, seed));
        return { ms: performance.now() - t0, computeMs: Number(response.parameters['compute_ms']) };
      };
      const first: { batch: number; ms: number; computeMs: number }[] = [];
      for (let i = 0; i < 10; i++) {
        const batch = BATCHES[i % BATCHES.length]!;
        first.push({ batch, ...(await time(batch, i)) });
      }
      const steady = new Map<number, { ms: number; computeMs: number }[]>(BATCHES.map((b) => [b, []]));
      for (let i = 0; i < steadyPerBatch * BATCHES.length; i++) {
        const batch = BATCHES[i % BATCHES.length]!;
        steady.get(batch)!.push(await time(batch, 100 + i));
      }
      const steadyMedianMs = Object.fromEntries(BATCHES.map((b) => [String(b), median(steady.get(b)!.map((x) => x.ms))]));
      const steadyComputeMs = Object.fromEntries(BATCHES.map((b) => [String(b), median(steady.get(b)!.map((x) => x.computeMs))]));
      const ratios = first.map((f) => ({ batch: f.batch, ms: f.ms, ratio: f.ms / steadyMedianMs[String(f.batch)]!, computeRatio: f.computeMs / steadyComputeMs[String(f.batch)]! }));
      modes.push({
        mode,
        startMs: serving.startMs,
        first: ratios,
        maxRatio: Math.max(...ratios.map((r) => r.ratio)),
        medianRatio: median(ratios.map((r) => r.ratio)),
        maxComputeRatio: Math.max(...ratios.map((r) => r.computeRatio)),
        medianComputeRatio: median(ratios.map((r) => r.computeRatio)),
        steadyMedianMs,
      });
    } finally {
      await serving.close();
    }
  }
  return { model, loadAverage1m: os.loadavg()[0]!, modes };
}
