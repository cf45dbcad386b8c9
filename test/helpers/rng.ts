import { mulberry32 } from '../../src/model/synthetic.ts';

/** Deterministic PRNG in [0, 1) for property-style and fuzz tests: the project's mulberry32 (`model/synthetic.ts`) scaled. */
export function rng(seed: number): () => number {
  const next = mulberry32(seed);
  return () => next() / 4294967296;
}
