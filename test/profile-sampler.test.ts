/**
 * profile/sampler.ts: the deterministic sample sequence — determinism (sample i independent of
 * what was drawn before), coverage of every model multiset of size 1..K round-robin (self-pairs
 * included), the controller-like slot rules, and construction errors.
 */
import os from 'node:os';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { ModelRepository } from '../src/model/repository.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import { multisetCount, ProfileSampler, sameSlots } from '../src/profile/index.ts';

let resnet50: ModelSpec;
let bert: ModelSpec;
let vgg16: ModelSpec;
beforeAll(async () => {
  const repo = new ModelRepository({ cacheDir: path.join(os.tmpdir(), `abacus-sampler-${process.pid}`) });
  [resnet50, bert, vgg16] = await Promise.all([repo.zooSpec('resnet50'), repo.zooSpec('bert'), repo.zooSpec('vgg16')]);
});

const opts = (over: Partial<ConstructorParameters<typeof ProfileSampler>[0]> = {}): ConstructorParameters<typeof ProfileSampler>[0] => ({
  models: [resnet50, bert, vgg16],
  maxGroupSize: 3,
  batchSizes: [1, 2, 4, 8],
  seqLens: [8, 16, 32, 64],
  seed: 7,
  ...over,
});

describe('multisetCount', () => {
  it('is Σ C(m+s−1, s) (counted by hand)', () => {
    expect(multisetCount(7, 2)).toBe(35); // 7 solos + 21 pairs + 7 self-pairs
    expect(multisetCount(2, 2)).toBe(5); // a, b, aa, ab, bb
    expect(multisetCount(3, 3)).toBe(19); // 3 + 6 + 10
    expect(multisetCount(4, 4)).toBe(69); // 4 + 10 + 20 + 35
    expect(multisetCount(1, 8)).toBe(8);
  });
});

describe('ProfileSampler', () => {
  it('enumerates every multiset of size 1..K once, self-pairs and self-triples included', () => {
    const s = new ProfileSampler(opts());
    expect(s.combinations).toHaveLength(19);
    const keys = s.combinations.map((c) => c.join(','));
    expect(new Set(keys).size).toBe(19);
    for (const k of ['0', '1', '2', '0,0', '0,1', '1,1', '2,2', '0,0,0', '0,1,2', '1,1,2', '2,2,2']) expect(keys).toContain(k);
    for (const c of s.combinations) expect([...c].sort()).toEqual(c); // ascending
  });

  it('is deterministic: sample i is the same whatever was drawn before, and differs with the seed', () => {
    const a = new ProfileSampler(opts());
    const b = new ProfileSampler(opts());
    const forward = Array.from({ length: 200 }, (_, i) => a.sampleAt(i));
    const backward = Array.from({ length: 200 }, (_, i) => b.sampleAt(199 - i)).reverse();
    expect(backward).toEqual(forward);
    expect([...a.samples(50, 60)]).toEqual(forward.slice(50, 60));
    const other = new ProfileSampler(opts({ seed: 8 }));
    const same = forward.filter((x, i) => sameSlots(x.slots, other.sampleAt(i).slots)).length;
    expect(same).toBeLessThan(40); // single-slot groups of few choices may coincide, most differ
  });

  it('visits combinations round-robin: N samples cover each ⌊N/C⌋ or ⌈N/C⌉ times, with its models as the slots', () => {
    const s = new ProfileSampler(opts());
    const C = s.combinations.length;
    for (const N of [19, 100, 257]) {
      const counts = new Map<string, number>();
      for (let i = 0; i < N; i++) {
        const x = s.sampleAt(i);
        const models = x.slots.map((slot) => s.models.findIndex((m) => m.name === slot.model)).sort();
        expect(models).toEqual(s.combinations[x.combination]);
        counts.set(models.join(','), (counts.get(models.join(',')) ?? 0) + 1);
      }
      expect(counts.size).toBe(Math.min(N, C));
      for (const c of counts.values()) expect([Math.floor(N / C), Math.ceil(N / C)]).toContain(c);
    }
  });

  it('slot 0 runs to its end; every slot lies in [0, n) with start < end; batch and seq len from the lists', () => {
    const s = new ProfileSampler(opts());
    let resumed = 0;
    let partial = 0;
    let others = 0;
    const urgent = new Set<string>();
    for (let i = 0; i < 3000; i++) {
      const { slots } = s.sampleAt(i);
      expect(slots.length).toBeGreaterThanOrEqual(1);
      expect(slots.length).toBeLessThanOrEqual(3);
      slots.forEach((slot, j) => {
        const spec = s.models.find((m) => m.name === slot.model)!;
        const n = spec.operators.length;
        expect(Number.isInteger(slot.start) && slot.start >= 0 && slot.start < n).toBe(true);
        expect(Number.isInteger(slot.end) && slot.end > slot.start && slot.end <= n).toBe(true);
        expect([1, 2, 4, 8]).toContain(slot.batch);
        if (slot.model === 'bert') expect([8, 16, 32, 64]).toContain(slot.seqLen);
        else expect(slot.seqLen).toBe(0);
        if (j === 0) {
          expect(slot.end).toBe(n);
          if (slots.length > 1) urgent.add(slot.model);
        } else {
          others++;
          if (slot.end < n) partial++;
        }
        if (slot.start > 0) resumed++;
      });
    }
    const total = [...Array(3000).keys()].reduce((t, i) => t + s.sampleAt(i).slots.length, 0);
    // P(new) = ½; P(not to end | slot > 0) = ½ · P(end < n | uniform end in [start+1, n]) — below ½, above ¼ here
    expect(resumed / total).toBeGreaterThan(0.45);
    expect(resumed / total).toBeLessThan(0.55);
    expect(partial / others).toBeGreaterThan(0.3);
    expect(partial / others).toBeLessThan(0.5);
    expect([...urgent].sort()).toEqual(['bert', 'resnet50', 'vgg16']); // any model can be the urgent one
  });

  it('with shapes, a model draws only from its own batch sizes and sequence lengths; the others from the shared lists; the same samples without shapes', () => {
    const shapes = new Map([
      [bert.name, { batchSizes: [3], seqLens: [5, 6] }],
      [resnet50.name, { batchSizes: [16] }],
    ]);
    const own = new ProfileSampler(opts({ shapes }));
    const seen = new Map<string, { batches: Set<number>; seqs: Set<number> }>();
    for (let i = 0; i < 400; i++) {
      for (const s of own.sampleAt(i).slots) {
        const m = seen.get(s.model) ?? { batches: new Set<number>(), seqs: new Set<number>() };
        seen.set(s.model, m);
        m.batches.add(s.batch);
        m.seqs.add(s.seqLen);
      }
    }
    expect([...seen.get(bert.name)!.batches]).toEqual([3]);
    expect([...seen.get(bert.name)!.seqs].sort()).toEqual([5, 6]);
    expect([...seen.get(resnet50.name)!.batches]).toEqual([16]);
    expect([...seen.get(vgg16.name)!.batches].sort((a, b) => a - b)).toEqual([1, 2, 4, 8]);
    // no shapes (or an empty map): slot for slot the sampler of before
    const plain = new ProfileSampler(opts());
    const empty = new ProfileSampler(opts({ shapes: new Map() }));
    for (let i = 0; i < 50; i++) expect(empty.sampleAt(i)).toEqual(plain.sampleAt(i));
    expect(() => new ProfileSampler(opts({ shapes: new Map([[bert.name, { batchSizes: [0] }]]) }))).toThrow(RangeError);
  });

  it('uses the model default sequence length without seqLens, a fixed batch, and [0, 1) for one-operator models', () => {
    const fixed: ModelSpec = { ...resnet50, name: 'fixed4', inputs: resnet50.inputs.map((t) => ({ ...t, shape: [4, ...t.shape.slice(1)] })) };
    const single: ModelSpec = { ...vgg16, name: 'single', operators: vgg16.operators.slice(0, 1) };
    const s = new ProfileSampler({ models: [bert, fixed, single], maxGroupSize: 2, batchSizes: [1, 2], seed: 1 });
    for (let i = 0; i < 300; i++) {
      for (const slot of s.sampleAt(i).slots) {
        if (slot.model === 'bert') expect(slot.seqLen).toBe(bert.defaultSeqLen);
        if (slot.model === 'fixed4') expect(slot.batch).toBe(4);
        if (slot.model === 'single') expect([slot.start, slot.end]).toEqual([0, 1]);
      }
    }
  });

  it('rejects bad options with RangeError naming the option', () => {
    expect(() => new ProfileSampler(opts({ models: [] }))).toThrow(/models/);
    expect(() => new ProfileSampler(opts({ models: [resnet50, resnet50] }))).toThrow(/twice/);
    expect(() => new ProfileSampler(opts({ maxGroupSize: 0 }))).toThrow(/maxGroupSize/);
    expect(() => new ProfileSampler(opts({ maxGroupSize: 9 }))).toThrow(/maxGroupSize/);
    expect(() => new ProfileSampler(opts({ batchSizes: [] }))).toThrow(/batchSizes/);
    expect(() => new ProfileSampler(opts({ batchSizes: [0] }))).toThrow(/batchSizes/);
    expect(() => new ProfileSampler(opts({ seqLens: [8, 1024] }))).toThrow(/1024 exceeds bert's maximum sequence length 512/);
    expect(() => new ProfileSampler(opts({ seed: -1 }))).toThrow(/seed/);
    expect(() => new ProfileSampler(opts()).sampleAt(-1)).toThrow(RangeError);
  });
});
