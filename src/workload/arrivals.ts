/**
 * Open-loop arrival processes (docs/design.md#workload-report-and-reproduce): when queries arrive, independent of when
 * earlier ones are answered. Every process here is a (possibly non-homogeneous) Poisson
 * process with a piecewise-constant rate, or a deterministic one:
 *
 * - `poisson`: constant rate λ, exponential gaps (the paper's load, §7.1);
 * - `constant`: one arrival every 1000/λ ms;
 * - `bursty`: a two-state on/off Markov-modulated Poisson process: rate `onQps` for an
 *   exponentially distributed on-period (mean `meanOnMs`), then `offQps` for an off-period
 *   (mean `meanOffMs`), alternating; starts in the on state;
 * - `trace`: a per-minute offered-load trace (`src/reproduce/reference/cluster-load-trace.csv`,
 *   the paper's cluster experiment §7.6) replayed as a Poisson process whose rate is the
 *   trace's value × `scale` during each minute; `minuteMs` compresses time (60,000 = real).
 *
 * Non-homogeneous arrivals are drawn exactly by inversion of the cumulative rate: draw
 * E ~ Exp(1) and walk forward through the constant-rate pieces until their integrated rate
 * reaches E (Ross, "Simulation", 5th ed., §5.5). No thinning, no approximation.
 *
 * Instances are stateful (a bursty process remembers its phase); create one per generator.
 */
import type { Rng } from '../rng.ts';

export interface ArrivalProcess {
  /** `poisson`, `constant`, `bursty` or `trace`. */
  readonly kind: string;
  /** Long-run mean offered load, queries/s (trace: mean over the trace). */
  readonly meanQps: number;
  /**
   * Absolute time (ms) of the next arrival after one at `tMs` (use 0 for the first), drawn with
   * `rng`; `Infinity` when the process has no more arrivals (a trace that ended). Calls must
   * come with non-decreasing `tMs`.
   */
  next(tMs: number, rng: Rng): number;
}

const exp1 = (rng: Rng): number => -Math.log(rng.nextUnit());

function positive(name: string, value: number, allowZero = false): number {
  if (typeof value !== 'number' || !Number.isFinite(value) || value < 0 || (!allowZero && value === 0)) {
    throw new RangeError(`${name} must be a finite number ${allowZero ? '≥' : '>'} 0, got ${String(value)}`);
  }
  return value;
}

/**
 * Poisson arrivals at `rateQps` queries/s: exponential gaps of mean 1000/rate ms.
 * @throws RangeError for a rate that is not finite and > 0.
 */
export function poissonArrivals(rateQps: number): ArrivalProcess {
  const rate = positive('poisson rateQps', rateQps) / 1000;
  return { kind: 'poisson', meanQps: rateQps, next: (t, rng) => t + exp1(rng) / rate };
}

/**
 * One arrival every 1000/`rateQps` ms, the first at 1000/rate ms.
 * @throws RangeError for a rate that is not finite and > 0.
 */
export function constantArrivals(rateQps: number): ArrivalProcess {
  const gapMs = 1000 / positive('constant rateQps', rateQps);
  return { kind: 'constant', meanQps: rateQps, next: (t) => t + gapMs };
}

/** Parameters of `burstyArrivals`. */
export interface BurstyOptions {
  /** Rate in the on state, queries/s (> 0). */
  readonly onQps: number;
  /** Rate in the off state, queries/s (≥ 0). */
  readonly offQps: number;
  /** Mean length of an on period, ms (> 0). */
  readonly meanOnMs: number;
  /** Mean length of an off period, ms (> 0). */
  readonly meanOffMs: number;
}

/**
 * Two-state on/off Markov-modulated Poisson arrivals (see the file comment).
 * @throws RangeError naming the option that is out of range.
 */
export function burstyArrivals(options: BurstyOptions): ArrivalProcess {
  const onRate = positive('bursty onQps', options.onQps) / 1000;
  const offRate = positive('bursty offQps', options.offQps, true) / 1000;
  const meanOn = positive('bursty meanOnMs', options.meanOnMs);
  const meanOff = positive('bursty meanOffMs', options.meanOffMs);
  let on = true;
  let phaseEndMs: number | undefined;
  return {
    kind: 'bursty',
    meanQps: ((options.onQps * meanOn + options.offQps * meanOff) / (meanOn + meanOff)),
    next(t, rng) {
      phaseEndMs ??= exp1(rng) * meanOn;
      let need = exp1(rng);
      let now = t;
      for (;;) {
        const rate = on ? onRate : offRate;
        const span = phaseEndMs - now;
        if (rate > 0 && need <= rate * span) return now + need / rate;
        need -= rate * span;
        now = phaseEndMs;
        on = !on;
        phaseEndMs = now + exp1(rng) * (on ? meanOn : meanOff);
      }
    },
  };
}

/** Parameters of `traceArrivals`. */
export interface TraceOptions {
  /** Offered load per trace minute, queries/s (≥ 0 each, at least one > 0). */
  readonly perMinuteQps: readonly number[];
  /** Multiplier applied to every value, e.g. 1/16 for one of the trace's 16 nodes (default 1). */
  readonly scale?: number;
  /** Length of one trace minute in ms of (simulated) time (default 60,000). */
  readonly minuteMs?: number;
}

/**
 * Replay a per-minute load trace as a piecewise-constant-rate Poisson process; no arrivals
 * after the last minute.
 * @throws RangeError for an empty trace, a negative or non-finite value, an all-zero trace,
 *   or a bad `scale` / `minuteMs`.
 */
export function traceArrivals(options: TraceOptions): ArrivalProcess {
  const scale = positive('trace scale', options.scale ?? 1);
  const minuteMs = positive('trace minuteMs', options.minuteMs ?? 60_000);
  const qps = options.perMinuteQps;
  if (qps.length === 0) throw new RangeError('trace perMinuteQps must have at least one minute');
  qps.forEach((v, i) => positive(`trace perMinuteQps[${i}]`, v, true));
  if (!qps.some((v) => v > 0)) throw new RangeError('trace perMinuteQps must have a minute with load > 0');
  const ratesPerMs = qps.map((v) => (v * scale) / 1000);
  const endMs = qps.length * minuteMs;
  return {
    kind: 'trace',
    meanQps: (qps.reduce((a, b) => a + b, 0) / qps.length) * scale,
    next(t, rng) {
      let need = exp1(rng);
      let now = t;
      while (now < endMs) {
        const minute = Math.floor(now / minuteMs);
        const pieceEnd = Math.min(endMs, (minute + 1) * minuteMs);
        const rate = ratesPerMs[minute]!;
        if (rate > 0 && need <= rate * (pieceEnd - now)) return now + need / rate;
        need -= rate * (pieceEnd - now);
        now = pieceEnd;
      }
      return Infinity;
    },
  };
}
