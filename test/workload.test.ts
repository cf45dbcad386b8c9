import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { VirtualClock } from '../src/clock/index.ts';
import { Rng } from '../src/rng.ts';
import { CLUSTER_TRACE_PATH } from '../src/reproduce/workloads.ts';
import { burstyArrivals, constantArrivals, formatArrivalSpec, LoadGenerator, loadArrivals, parseArrivalSpec, poissonArrivals, readLoadTrace, traceArrivals, type ArrivalProcess, type GeneratedQuery } from '../src/workload/index.ts';

const REFERENCE_TRACE = CLUSTER_TRACE_PATH;

function draw(p: ArrivalProcess, n: number, seed = 1): number[] {
  const rng = new Rng(seed);
  const out: number[] = [];
  let t = 0;
  for (let i = 0; i < n; i++) {
    t = p.next(t, rng);
    if (t === Infinity) break;
    out.push(t);
  }
  return out;
}

describe('arrival processes', () => {
  it('poisson: mean gap 1000/λ and coefficient of variation 1 (exponential gaps), within 4 standard errors', () => {
    const n = 100_000;
    const times = draw(poissonArrivals(50), n);
    const gaps = times.map((t, i) => t - (i === 0 ? 0 : times[i - 1]!));
    const mean = gaps.reduce((a, b) => a + b, 0) / n;
    const sd = Math.sqrt(gaps.reduce((a, g) => a + (g - mean) ** 2, 0) / (n - 1));
    // mean of n exponentials: standard error = 20 ms / sqrt(n) ≈ 0.063 ms
    expect(Math.abs(mean - 20)).toBeLessThan(4 * (20 / Math.sqrt(n)));
    expect(Math.abs(sd / mean - 1)).toBeLessThan(0.02);
    expect(times.every((t, i) => i === 0 || t >= times[i - 1]!)).toBe(true);
  });

  it('constant: exactly every 1000/λ ms', () => {
    expect(draw(constantArrivals(4), 3)).toEqual([250, 500, 750]);
  });

  it('bursty: long-run rate (on·Ton + off·Toff)/(Ton + Toff) and more dispersion than Poisson', () => {
    const p = burstyArrivals({ onQps: 200, offQps: 10, meanOnMs: 500, meanOffMs: 1500 });
    expect(p.meanQps).toBeCloseTo((200 * 500 + 10 * 1500) / 2000, 12);
    const times = draw(p, 200_000, 7);
    const rate = (times.length * 1000) / times.at(-1)!;
    expect(Math.abs(rate / p.meanQps - 1)).toBeLessThan(0.05);
    // counts per 100 ms window: index of dispersion > 1 for a modulated process (Poisson: 1)
    const counts = new Map<number, number>();
    for (const t of times) counts.set(Math.floor(t / 100), (counts.get(Math.floor(t / 100)) ?? 0) + 1);
    const windows = Math.floor(times.at(-1)! / 100);
    let sum = 0;
    let sq = 0;
    for (let w = 0; w < windows; w++) {
      const c = counts.get(w) ?? 0;
      sum += c;
      sq += c * c;
    }
    const m = sum / windows;
    expect((sq / windows - m * m) / m).toBeGreaterThan(3);
  });

  it('trace: per-minute counts follow the trace within 5 Poisson standard deviations; no arrivals after the end', () => {
    const p = traceArrivals({ perMinuteQps: [10, 0, 40], minuteMs: 1000 });
    const times = draw(p, 1_000_000, 3);
    const perMinute = [0, 0, 0];
    for (const t of times) perMinute[Math.floor(t / 1000)]!++;
    expect(perMinute[1]).toBe(0);
    for (const [minute, qps] of [[0, 10], [2, 40]] as const) expect(Math.abs(perMinute[minute]! - qps)).toBeLessThan(5 * Math.sqrt(qps));
    expect(times.at(-1)!).toBeLessThan(3000);
    expect(p.next(3000, new Rng(1))).toBe(Infinity);
  });

  it('rejects bad parameters with the parameter named', () => {
    expect(() => poissonArrivals(0)).toThrow(/poisson rateQps/);
    expect(() => constantArrivals(Number.NaN)).toThrow(/constant rateQps/);
    expect(() => burstyArrivals({ onQps: 1, offQps: -1, meanOnMs: 1, meanOffMs: 1 })).toThrow(/offQps/);
    expect(() => traceArrivals({ perMinuteQps: [] })).toThrow(/at least one minute/);
    expect(() => traceArrivals({ perMinuteQps: [0, 0] })).toThrow(/load > 0/);
    expect(() => traceArrivals({ perMinuteQps: [1, -2] })).toThrow(/perMinuteQps\[1\]/);
  });
});

describe('LoadGenerator', () => {
  const services = [
    { service: 'a', weight: 3, batchSizes: { values: [1, 4] } },
    { service: 'b', batchSizes: { values: [2] }, seqLens: { values: [8, 16], weights: [1, 0] } },
  ];

  async function generate(seed: number, onSend?: (q: GeneratedQuery, clock: VirtualClock) => void) {
    const clock = new VirtualClock();
    const sent: GeneratedQuery[] = [];
    const gen = new LoadGenerator({ clock, arrivals: poissonArrivals(100), services, seed, maxQueries: 2000 });
    const done = gen.run((q) => {
      sent.push(q);
      onSend?.(q, clock);
    });
    await clock.run();
    return { report: await done, sent, clock };
  }

  it('sends exactly maxQueries at the drawn times, open loop, with zero lateness on a virtual clock', async () => {
    const responses: number[] = [];
    // every query takes 1 s to answer: a closed-loop client would send 1 query/s, an open-loop one keeps 100/s
    const { report, sent } = await generate(5, (q, clock) => {
      clock.setTimer(1000, () => responses.push(q.index));
    });
    expect(report.sent).toBe(2000);
    expect(sent.map((q) => q.index)).toEqual([...Array(2000).keys()]);
    expect(Math.abs(report.offeredQps / 100 - 1)).toBeLessThan(0.1);
    expect(report.latenessMs).toEqual({ mean: 0, p99: 0, max: 0 });
    expect(responses).toHaveLength(2000);
    const shareA = sent.filter((q) => q.service === 'a').length / sent.length;
    expect(Math.abs(shareA - 0.75)).toBeLessThan(0.05);
    expect(sent.filter((q) => q.service === 'b').every((q) => q.batch === 2 && q.seqLen === 8)).toBe(true);
    expect(sent.filter((q) => q.service === 'a').every((q) => (q.batch === 1 || q.batch === 4) && q.seqLen === 0)).toBe(true);
  });

  it('same seed → same queries; another seed → different ones', async () => {
    const x = await generate(9);
    const y = await generate(9);
    const z = await generate(10);
    expect(y.sent).toEqual(x.sent);
    expect(z.sent).not.toEqual(x.sent);
  });

  it('stops at durationMs; a throwing send rejects run()', async () => {
    const clock = new VirtualClock();
    const gen = new LoadGenerator({ clock, arrivals: constantArrivals(10), services, seed: 1, durationMs: 1000 });
    const done = gen.run(() => undefined);
    await clock.run();
    expect((await done).sent).toBe(9); // arrivals at 100, 200, …, 900 ms; 1000 is not < 1000
    const clock2 = new VirtualClock();
    const bad = new LoadGenerator({ clock: clock2, arrivals: constantArrivals(10), services, seed: 1, maxQueries: 5 }).run(() => {
      throw new Error('boom');
    });
    const drive = clock2.run();
    await expect(bad).rejects.toThrow('boom');
    await drive;
  });

  it('rejects bad options with the field named', () => {
    const clock = new VirtualClock();
    const arrivals = poissonArrivals(1);
    expect(() => new LoadGenerator({ clock, arrivals, services: [], seed: 1, maxQueries: 1 })).toThrow(/services must not be empty/);
    expect(() => new LoadGenerator({ clock, arrivals, services, seed: 1 })).toThrow(/maxQueries or durationMs/);
    expect(() => new LoadGenerator({ clock, arrivals, services: [{ service: 'a', batchSizes: { values: [0] } }], seed: 1, maxQueries: 1 })).toThrow(/services\[a\]\.batchSizes\.values\[0\]/);
    expect(() => new LoadGenerator({ clock, arrivals, services: [{ service: 'a', batchSizes: { values: [1], weights: [1, 2] } }], seed: 1, maxQueries: 1 })).toThrow(/one weight per value/);
  });
});

describe('readLoadTrace', () => {
  it('reads the paper trace: 120 minutes of offered load', async () => {
    const loads = await readLoadTrace(REFERENCE_TRACE);
    expect(loads).toHaveLength(120);
    expect(loads[0]).toBe(8357);
    expect(loads[1]).toBe(9005);
  });

  it('names file, line and column of bad input', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'abacus-trace-'));
    const write = (name: string, text: string): string => {
      const f = path.join(dir, name);
      fs.writeFileSync(f, text);
      return f;
    };
    await expect(readLoadTrace(write('empty.csv', ''))).rejects.toThrow(/empty\.csv: empty trace file/);
    await expect(readLoadTrace(write('nocol.csv', 'minute,qps\n0,1\n'))).rejects.toThrow(/nocol\.csv:1: missing column 'offered_load_qps'/);
    await expect(readLoadTrace(write('nan.csv', 'minute,offered_load_qps\n0,1\n1,abc\n'))).rejects.toThrow(/nan\.csv:3: column 'offered_load_qps'.*'abc'/);
    await expect(readLoadTrace(write('order.csv', 'minute,offered_load_qps\n0,1\n2,1\n'))).rejects.toThrow(/order\.csv:3: column 'minute' must be 1/);
    await expect(readLoadTrace(write('none.csv', 'minute,offered_load_qps\n'))).rejects.toThrow(/no minutes/);
    fs.rmSync(dir, { recursive: true, force: true });
  });
});

describe('arrival specs (--arrivals, config arrivals)', () => {
  it('parses every kind with defaults, resolves a relative trace file, and formats back with every parameter', () => {
    expect(parseArrivalSpec('poisson', '--arrivals')).toEqual({ kind: 'poisson' });
    expect(parseArrivalSpec(' constant ', '--arrivals')).toEqual({ kind: 'constant' });
    expect(parseArrivalSpec('bursty', '--arrivals')).toEqual({ kind: 'bursty', onMs: 500, offMs: 1500, offRatio: 0 });
    expect(parseArrivalSpec('bursty:', '--arrivals')).toEqual({ kind: 'bursty', onMs: 500, offMs: 1500, offRatio: 0 });
    const b = parseArrivalSpec('bursty:offRatio=0.25, onMs=100', '--arrivals');
    expect(b).toEqual({ kind: 'bursty', onMs: 100, offMs: 1500, offRatio: 0.25 });
    expect(formatArrivalSpec(b)).toBe('bursty:onMs=100,offMs=1500,offRatio=0.25');
    expect(parseArrivalSpec(formatArrivalSpec(b), '--arrivals')).toEqual(b);
    const t = parseArrivalSpec('trace:loads,2024.csv,minuteMs=250', '--arrivals', '/data');
    expect(t).toEqual({ kind: 'trace', file: '/data/loads,2024.csv', minuteMs: 250 });
    expect(formatArrivalSpec(t)).toBe('trace:/data/loads,2024.csv,minuteMs=250');
    expect(parseArrivalSpec('trace:/abs/t.csv', '--arrivals', '/data')).toEqual({ kind: 'trace', file: '/abs/t.csv', minuteMs: 60_000 });
  });

  it('bad values: an error naming the field and what is wrong', () => {
    const cases: [string, string][] = [
      ['lifo', "--arrivals: unknown arrival process 'lifo' (valid: poisson, constant, bursty"],
      ['', "--arrivals: unknown arrival process ''"],
      ['poisson:rate=3', '--arrivals: poisson takes no parameters'],
      ['bursty:peak=3', "--arrivals: bursty has no parameter 'peak' (valid: onMs, offMs, offRatio)"],
      ['bursty:onMs', "--arrivals: bursty parameter 'onMs' must be a number, got ''"],
      ['bursty:onMs=1,onMs=2', "--arrivals: bursty parameter 'onMs' is given twice"],
      ['bursty:offMs=0', '--arrivals: bursty offMs must be a number of ms > 0, got 0'],
      ['bursty:offRatio=1.5', '--arrivals: bursty offRatio (off rate ÷ on rate) must be in [0, 1], got 1.5'],
      ['trace', '--arrivals: trace needs a file'],
      ['trace:', '--arrivals: trace needs a file'],
      ['trace:t.csv,minuteMs=0', '--arrivals: trace minuteMs must be a number of ms > 0, got 0'],
      ['trace:t.csv,speed=2', "--arrivals: trace has no parameter 'speed' (valid: minuteMs)"],
    ];
    for (const [text, message] of cases) expect(() => parseArrivalSpec(text, '--arrivals'), text).toThrow(message);
  });

  it('bursty at a mean rate: on rate solved so the long-run mean is the rate (by hand: 100·2000/(500 + 0.2·1500) = 250 q/s on, 50 off)', async () => {
    const f = await loadArrivals({ kind: 'bursty', onMs: 500, offMs: 1500, offRatio: 0.2 }, '--arrivals');
    const bursty = f.create(100);
    expect(bursty.meanQps).toBeCloseTo(100, 9);
    // the same by the process' own formula: (250·500 + 50·1500) / 2000 = 100
    expect(burstyArrivals({ onQps: 250, offQps: 50, meanOnMs: 500, meanOffMs: 1500 }).meanQps).toBeCloseTo(100, 9);
    const times = draw(bursty, 200_000, 5);
    expect(Math.abs((times.length * 1000) / times.at(-1)! / 100 - 1)).toBeLessThan(0.05);
  });

  it('trace at a mean rate: scaled so the mean over its minutes is the rate; a bad or missing file names the field', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'abacus-spec-'));
    try {
      const file = path.join(dir, 't.csv');
      fs.writeFileSync(file, 'minute,offered_load_qps\n0,10\n1,30\n');
      const f = await loadArrivals({ kind: 'trace', file, minuteMs: 1000 }, '--arrivals');
      expect(f.trace).toEqual({ minutes: 2, meanQps: 20 });
      // mean 20 q/s scaled to 100: 50 q/s in minute 0, 150 q/s in minute 1 (1000 ms each)
      const times = draw(f.create(100), 1_000_000, 9);
      const perMinute = [0, 0];
      for (const t of times) perMinute[Math.floor(t / 1000)]!++;
      for (const [minute, expected] of [[0, 50], [1, 150]] as const) expect(Math.abs(perMinute[minute]! - expected)).toBeLessThan(5 * Math.sqrt(expected));
      await expect(loadArrivals({ kind: 'trace', file: path.join(dir, 'none.csv'), minuteMs: 1000 }, '--arrivals')).rejects.toThrow(/^--arrivals: cannot read the trace .*none\.csv: ENOENT/);
      fs.writeFileSync(file, 'minute,qps\n0,1\n');
      await expect(loadArrivals({ kind: 'trace', file, minuteMs: 1000 }, 'c.yaml: arrivals')).rejects.toThrow(/^c\.yaml: arrivals: .*t\.csv:1: missing column 'offered_load_qps'/);
      fs.writeFileSync(file, 'minute,offered_load_qps\n0,0\n');
      await expect(loadArrivals({ kind: 'trace', file, minuteMs: 1000 }, '--arrivals')).rejects.toThrow(/--arrivals: the trace .*t\.csv has no minute with load > 0/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
