/**
 * Open-loop load generator (docs/design.md#workload-report-and-reproduce): sends queries at the times an arrival process
 * draws, on an injected `Clock`, and never waits for responses — so a slow server cannot slow
 * the offered load down (no coordinated omission; Tene, "How NOT to measure latency", 2015).
 * Each query's intended send time is fixed by the arrival process before it is sent; the
 * generator's own lateness (actual − intended send time, 0 on a virtual clock) is measured and
 * reported, and the runtime should take the intended time as the query's arrival.
 *
 * Per query a service is drawn by weight, then a batch size and a sequence length from that
 * service's distributions, from one seeded generator: the same seed gives the same queries.
 */
import type { Clock } from '../clock/clock.ts';
import { Rng } from '../rng.ts';
import type { ArrivalProcess } from './arrivals.ts';

/** A discrete distribution: `values[i]` with probability `weights[i] / Σ weights` (uniform without weights). */
export interface Discrete {
  readonly values: readonly number[];
  readonly weights?: readonly number[];
}

/** One service's share of the load and the shape of its queries. */
export interface ServiceLoad {
  readonly service: string;
  /** Relative share of the queries (> 0; default 1). */
  readonly weight?: number;
  /** Batch sizes (integers ≥ 1). */
  readonly batchSizes: Discrete;
  /** Sequence lengths (integers ≥ 1) for sequence models; absent: seqLen 0. */
  readonly seqLens?: Discrete;
}

/** One generated query. */
export interface GeneratedQuery {
  /** 0-based, in send order. */
  readonly index: number;
  readonly service: string;
  /** Intended send time on the generator's clock, ms (use it as the arrival time). */
  readonly arrivalMs: number;
  readonly batch: number;
  /** 0 for services without `seqLens`. */
  readonly seqLen: number;
}

export interface LoadGeneratorOptions {
  readonly clock: Clock;
  readonly arrivals: ArrivalProcess;
  readonly services: readonly ServiceLoad[];
  readonly seed: number;
  /** Stop after this many queries (integer ≥ 1). At least one of `maxQueries`/`durationMs` is required. */
  readonly maxQueries?: number;
  /** Stop at this offset from `start()`, ms (> 0). */
  readonly durationMs?: number;
}

/** What `run()` resolves with. */
export interface GeneratorReport {
  readonly sent: number;
  /** Clock time from start to the last send, ms. */
  readonly spanMs: number;
  /** Offered load actually generated: sent ÷ span (start to last send), queries/s (0 for fewer than 2 queries). */
  readonly offeredQps: number;
  /** Lateness of sends behind their intended time, ms: mean, p99 and max (0 on a virtual clock). */
  readonly latenessMs: { readonly mean: number; readonly p99: number; readonly max: number };
}

function checkDiscrete(name: string, d: Discrete, min: number): number[] {
  if (d.values.length === 0) throw new RangeError(`${name}.values must not be empty`);
  d.values.forEach((v, i) => {
    if (!Number.isInteger(v) || v < min) throw new RangeError(`${name}.values[${i}] must be an integer ≥ ${min}, got ${String(v)}`);
  });
  const weights = d.weights ?? d.values.map(() => 1);
  if (weights.length !== d.values.length) throw new RangeError(`${name}.weights must have one weight per value (${d.values.length}), got ${weights.length}`);
  weights.forEach((w, i) => {
    if (!Number.isFinite(w) || w < 0) throw new RangeError(`${name}.weights[${i}] must be a finite number ≥ 0, got ${String(w)}`);
  });
  const total = weights.reduce((a, b) => a + b, 0);
  if (!(total > 0)) throw new RangeError(`${name}.weights must not all be 0`);
  let acc = 0;
  return weights.map((w) => (acc += w / total));
}

function pick(cdf: readonly number[], u: number): number {
  for (let i = 0; i < cdf.length - 1; i++) if (u < cdf[i]!) return i;
  return cdf.length - 1;
}

/**
 * An open-loop generator. `run(send)` calls `send` synchronously at each arrival (never awaits
 * it; a `send` that throws stops the generator and `run` rejects with that error).
 */
export class LoadGenerator {
  private readonly options: LoadGeneratorOptions;
  private readonly serviceCdf: number[];
  private readonly batchCdfs: number[][];
  private readonly seqCdfs: (number[] | undefined)[];

  /** @throws RangeError naming the option that is out of range. */
  constructor(options: LoadGeneratorOptions) {
    if (options.services.length === 0) throw new RangeError('LoadGenerator: services must not be empty');
    if (options.maxQueries === undefined && options.durationMs === undefined) throw new RangeError('LoadGenerator: give maxQueries or durationMs');
    if (options.maxQueries !== undefined && (!Number.isInteger(options.maxQueries) || options.maxQueries < 1)) {
      throw new RangeError(`LoadGenerator: maxQueries must be an integer ≥ 1, got ${String(options.maxQueries)}`);
    }
    if (options.durationMs !== undefined && !(Number.isFinite(options.durationMs) && options.durationMs > 0)) {
      throw new RangeError(`LoadGenerator: durationMs must be a finite number > 0, got ${String(options.durationMs)}`);
    }
    this.options = options;
    this.serviceCdf = checkDiscrete('services', { values: options.services.map((_, i) => i), weights: options.services.map((s) => s.weight ?? 1) }, 0);
    this.batchCdfs = options.services.map((s) => checkDiscrete(`services[${s.service}].batchSizes`, s.batchSizes, 1));
    this.seqCdfs = options.services.map((s) => (s.seqLens === undefined ? undefined : checkDiscrete(`services[${s.service}].seqLens`, s.seqLens, 1)));
  }

  /** Generate and send every query; resolves after the last send (not after responses). */
  run(send: (query: GeneratedQuery) => void): Promise<GeneratorReport> {
    const { clock, arrivals, services, maxQueries, durationMs } = this.options;
    const rng = new Rng(this.options.seed);
    const startMs = clock.now();
    const limitMs = durationMs === undefined ? Infinity : startMs + durationMs;
    const lateness: number[] = [];
    let sent = 0;
    let lastMs = startMs;
    return new Promise<GeneratorReport>((resolve, reject) => {
      const finish = (): void => {
        const sorted = lateness.sort((a, b) => a - b);
        const p99 = sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.ceil(0.99 * sorted.length) - 1)]!;
        const mean = sorted.length === 0 ? 0 : sorted.reduce((a, b) => a + b, 0) / sorted.length;
        const spanMs = lastMs - startMs;
        resolve({ sent, spanMs, offeredQps: sent >= 2 && spanMs > 0 ? (sent * 1000) / spanMs : 0, latenessMs: { mean, p99, max: sorted.at(-1) ?? 0 } });
      };
      let offsetMs = 0;
      const scheduleNext = (): void => {
        if (maxQueries !== undefined && sent >= maxQueries) return finish();
        offsetMs = arrivals.next(offsetMs, rng);
        const intendedMs = startMs + offsetMs;
        if (!(intendedMs < limitMs)) return finish();
        clock.setTimer(Math.max(0, intendedMs - clock.now()), () => {
          const s = pick(this.serviceCdf, rng.nextUnit());
          const batchValues = services[s]!.batchSizes.values;
          const seqCdf = this.seqCdfs[s];
          const query: GeneratedQuery = {
            index: sent,
            service: services[s]!.service,
            arrivalMs: intendedMs,
            batch: batchValues[pick(this.batchCdfs[s]!, rng.nextUnit())]!,
            seqLen: seqCdf === undefined ? 0 : services[s]!.seqLens!.values[pick(seqCdf, rng.nextUnit())]!,
          };
          lateness.push(Math.max(0, clock.now() - intendedMs));
          lastMs = intendedMs;
          sent++;
          try {
            send(query);
          } catch (err) {
            reject(err instanceof Error ? err : new Error(String(err)));
            return;
          }
          scheduleNext();
        });
      };
      scheduleNext();
    });
  }
}
