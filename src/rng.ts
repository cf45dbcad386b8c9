/**
 * Seeded pseudo-random numbers for every layer that needs them (the simulator's noise, workload
 * arrivals, profiling samples, training shuffles): xoshiro128** (Blackman & Vigna,
 * https://prng.di.unimi.it/xoshiro128starstar.c) seeded through splitmix32, normal variates by
 * Box–Muller. Pure 32-bit integer arithmetic, so the same seed gives the same sequence, bit for
 * bit, on every platform. One instance per user (a device, a generator, a training run): no shared state.
 */

/** splitmix32 step: a well-mixed 32-bit value from a 32-bit state. */
function splitmix32(state: number): number {
  let z = (state + 0x9e3779b9) | 0;
  z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
  z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
  return (z ^ (z >>> 16)) >>> 0;
}

/** A saved `Rng` state. */
export interface RngState {
  readonly s: readonly [number, number, number, number];
  readonly spareNormal: number | undefined;
}

export class Rng {
  private s0: number;
  private s1: number;
  private s2: number;
  private s3: number;
  private spareNormal: number | undefined;

  /**
   * @param seed any finite number; its integer part modulo 2³² seeds the generator (and the
   *   fractional part is mixed in so that 1 and 1.5 differ).
   * @throws RangeError for a non-finite seed.
   */
  constructor(seed: number) {
    if (typeof seed !== 'number' || !Number.isFinite(seed)) throw new RangeError(`Rng seed must be a finite number, got ${String(seed)}`);
    let x = (Math.floor(seed) >>> 0) ^ Math.floor((seed - Math.floor(seed)) * 0x100000000);
    const next = (): number => {
      x = (x + 0x9e3779b9) | 0;
      return splitmix32(x);
    };
    this.s0 = next();
    this.s1 = next();
    this.s2 = next();
    this.s3 = next();
    if ((this.s0 | this.s1 | this.s2 | this.s3) === 0) this.s0 = 1;
  }

  /** The generator's full state (for `restore`): four words and the kept normal variate. */
  save(): RngState {
    return { s: [this.s0, this.s1, this.s2, this.s3], spareNormal: this.spareNormal };
  }

  /** Return to a state from `save` (the same sequence follows, bit for bit). */
  restore(state: RngState): void {
    [this.s0, this.s1, this.s2, this.s3] = state.s;
    this.spareNormal = state.spareNormal;
  }

  /** Uniform 32-bit unsigned integer. */
  nextUint32(): number {
    const result = Math.imul(rotl(Math.imul(this.s1, 5), 7), 9) >>> 0;
    const t = this.s1 << 9;
    this.s2 ^= this.s0;
    this.s3 ^= this.s1;
    this.s1 ^= this.s2;
    this.s0 ^= this.s3;
    this.s2 ^= t;
    this.s3 = rotl(this.s3, 11);
    return result;
  }

  /** Uniform in (0, 1): never exactly 0 (safe under `Math.log`). */
  nextUnit(): number {
    return (this.nextUint32() + 0.5) / 0x100000000;
  }

  /** Standard normal (mean 0, variance 1), Box–Muller, the second variate kept for the next call. */
  nextNormal(): number {
    const spare = this.spareNormal;
    if (spare !== undefined) {
      this.spareNormal = undefined;
      return spare;
    }
    const r = Math.sqrt(-2 * Math.log(this.nextUnit()));
    const theta = 2 * Math.PI * this.nextUnit();
    this.spareNormal = r * Math.sin(theta);
    return r * Math.cos(theta);
  }
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}

/**
 * Multiplicative noise with mean 1 and coefficient of variation `cv`: a log-normal factor
 * exp(σ·z − σ²/2) with σ² = ln(1 + cv²), so E[factor] = 1 and sd/mean = cv exactly. Returns 1
 * without drawing when `cv` is 0.
 */
export class LogNormalNoise {
  private readonly sigma: number;
  private readonly mu: number;

  constructor(
    readonly rng: Rng,
    readonly cv: number,
  ) {
    if (typeof cv !== 'number' || !Number.isFinite(cv) || cv < 0 || cv > 1) throw new RangeError(`noise coefficient of variation ${String(cv)} must be in [0, 1]`);
    const variance = Math.log(1 + cv * cv);
    this.sigma = Math.sqrt(variance);
    this.mu = -variance / 2;
  }

  /** Next factor (> 0, mean 1). */
  next(): number {
    if (this.sigma === 0) return 1;
    return Math.exp(this.mu + this.sigma * this.rng.nextNormal());
  }
}
