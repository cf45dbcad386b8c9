/**
 * device/ort robustness: what happens when a message cannot be sent, an executor does not
 * load or a segment does not finish in time, a query is released on the wrong service, loads
 * race each other or `close()`, the query book would grow without bound, and an executor
 * crashes on every restart — plus the logs that make all of it visible.
 *
 * No wall-clock assertions: timeouts are exercised with a deadline that cannot be met (1 ms
 * for spawning a Node process) or with an injected stall that never ends on its own. The segment
 * deadline of the stall case is timed by the test (`segmentDeadlineTimer`): it fires the stalled
 * segment's deadline itself and no other, so healthy segments cannot hit theirs however busy the
 * machine, and the test does not wait the deadline out.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import type { DeviceService, SegmentResult, ServiceHealthEvent } from '../src/device/device.ts';
import { OrtDevice } from '../src/device/ort/index.ts';
import type { DeadlineTimer } from '../src/device/ort/deadline-timer.ts';
import { STALL_MS } from '../src/device/ort/protocol.ts';
import { BadRequestError, DeviceFailureError, DeviceUnavailableError } from '../src/errors.ts';
import type { Logger } from '../src/log.ts';
import type { HostTensor } from '../src/tensor.ts';
import { maxAbsDiff, okResult, randomInputs, seg } from './device/conformance.ts';
import { buildSkipNet, buildTinyBert, makeFixtureDir } from './fixtures/tiny-models.ts';

interface LogLine {
  readonly level: number;
  readonly msg: string;
  readonly service?: string;
  readonly pid?: number;
  readonly [key: string]: unknown;
}

/** A debug-level pino logger that keeps every line; `onLine` runs synchronously per line. */
function captureLogs(onLine?: (line: LogLine) => void): { logger: Logger; lines: LogLine[] } {
  const lines: LogLine[] = [];
  const logger = pino(
    { level: 'debug' },
    {
      write(s: string): void {
        const line = JSON.parse(s) as LogLine;
        lines.push(line);
        onLine?.(line);
      },
    },
  );
  return { logger, lines };
}

/** segmentTimeoutMs of the stall case, in ms: named in the errors; the test fires the deadline itself. */
const STALL_DEADLINE_MS = 5000;

const WARN = 40;
const synth = (seed: number) => ({ kind: 'synthetic', seed }) as const;

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Poll `cond` every 20 ms until it holds (the test's own timeout bounds the wait). */
async function until(cond: () => boolean): Promise<void> {
  while (!cond()) await new Promise((r) => setTimeout(r, 20));
}

function failed(r: SegmentResult | undefined): Extract<SegmentResult, { ok: false }> {
  if (!r) throw new Error('missing segment result');
  if (r.ok) throw new Error(`segment of ${r.queryId} succeeded, expected an error`);
  return r;
}

describe('OrtDevice robustness (onnxruntime-node, cpu)', () => {
  let fixtures: { dir: string; cleanup: () => Promise<void> };
  let cnn: DeviceService;
  let nlp: DeviceService;
  const devices: OrtDevice[] = [];
  const track = (d: OrtDevice): OrtDevice => {
    devices.push(d);
    return d;
  };

  beforeAll(async () => {
    fixtures = await makeFixtureDir();
    cnn = { name: 'cnn', model: await buildSkipNet(path.join(fixtures.dir, 'cnn')) };
    nlp = { name: 'nlp', model: await buildTinyBert(path.join(fixtures.dir, 'nlp')) };
  });

  afterAll(async () => {
    await Promise.all(devices.map((d) => d.close()));
    await fixtures?.cleanup();
  });

  it('a segment whose message cannot be sent resolves with a DeviceFailureError; the executor stays up', async () => {
    const device = track(await OrtDevice.create({ warmupRuns: 0 }));
    await device.load([cnn]);
    const inputs = randomInputs(cnn.model.spec, 1, 0, 1);
    // Passes validation, but structured clone refuses the function: child.send throws synchronously.
    const unsendable = { x: { ...inputs['x']!, note: () => 'not cloneable' } as HostTensor };
    const r = await device.runGroup([seg(cnn, 'unsendable', 0, 4, { kind: 'tensors', tensors: unsendable })]);
    const bad = failed(r.segments[0]);
    expect(bad.error).toBeInstanceOf(DeviceFailureError);
    expect(bad.error.message).toMatch(/query unsendable: segment \[0, 4\) could not be sent to its executor, nothing ran/);
    expect(bad.error.message).toMatch(/could not be cloned/);
    // Same executor, still serving; the query id is free again after its one error result.
    okResult((await device.runGroup([seg(cnn, 'after-unsendable', 0, 4, { kind: 'tensors', tensors: inputs })])).segments[0]);
    expect(device.executorRestarts('cnn')).toBe(0);

    // SharedArrayBuffer-backed inputs: Node 20's advanced serialization copies them; either way
    // the segment gets exactly one result (here: the same outputs as a plain buffer).
    const plain = inputs['x']!.data as Float32Array;
    const shared = new Float32Array(new SharedArrayBuffer(plain.byteLength));
    shared.set(plain);
    const [a, b] = (
      await device.runGroup([
        seg(cnn, 'plain', 0, 4, { kind: 'tensors', tensors: inputs }),
        seg(cnn, 'shared', 0, 4, { kind: 'tensors', tensors: { x: { ...inputs['x']!, data: shared } } }),
      ])
    ).segments;
    if (!b) throw new Error('missing result');
    if (b.ok) expect(maxAbsDiff(b.outputs!, okResult(a).outputs!).diff).toBe(0);
    else expect(b.error).toBeInstanceOf(DeviceFailureError);
  });

  it('load that does not finish within loadTimeoutMs fails with DeviceFailureError and leaves no executor', async () => {
    const { logger, lines } = captureLogs();
    // 1 ms cannot cover forking a Node process, so the deadline always wins.
    const device = track(await OrtDevice.create({ loadTimeoutMs: 1, logger }));
    const p = device.load([cnn]);
    await expect(p).rejects.toBeInstanceOf(DeviceFailureError);
    await expect(p).rejects.toThrow(/executor of service cnn did not load within 1 ms \(loadTimeoutMs\)/);
    expect(device.services).toEqual([]);
    const pids = lines.filter((l) => l.msg === 'executor spawned').map((l) => l.pid!);
    expect(pids).toHaveLength(1);
    await vi.waitFor(() => expect(isAlive(pids[0]!)).toBe(false), { timeout: 30_000, interval: 20 });
    expect(lines.some((l) => l.level === WARN && l.msg.includes('load timed out') && l.service === 'cnn')).toBe(true);
  });

  it('the CUDA probe is bounded by loadTimeoutMs too', async () => {
    const p = OrtDevice.create({ executionProvider: 'cuda', loadTimeoutMs: 1 });
    await expect(p).rejects.toBeInstanceOf(DeviceUnavailableError);
    await expect(p).rejects.toThrow(/probe did not answer within 1 ms/);
  });

  it('rejects out-of-range timeouts and caps, naming the option', async () => {
    await expect(OrtDevice.create({ loadTimeoutMs: 0 })).rejects.toThrow(/loadTimeoutMs 0 .*\[1, 2147483647\]/);
    await expect(OrtDevice.create({ segmentTimeoutMs: -1 })).rejects.toThrow(/segmentTimeoutMs -1 .*\[0, 2147483647\]/);
    await expect(OrtDevice.create({ maxLostQueries: 0 })).rejects.toThrow(RangeError);
    await expect(OrtDevice.create({ maxKeptQueries: 1.5 })).rejects.toThrow(/maxKeptQueries/);
    await expect(OrtDevice.create({ logger: {} as Logger })).rejects.toThrow(TypeError);
    await expect(OrtDevice.create({ segmentDeadlineTimer: 5 as unknown as DeadlineTimer })).rejects.toThrow(/segmentDeadlineTimer must be a function/);
  });

  it('a segment over segmentTimeoutMs kills its executor: it and the queued ones fail, kept state is lost, the executor restarts', async () => {
    expect(STALL_MS).toBeGreaterThan(10 * STALL_DEADLINE_MS); // the stall outlives the deadline
    const { logger, lines } = captureLogs();
    // the deadlines armed and not yet cancelled, by query; only the stalled segment's is fired
    const armed = new Map<string, { fire: () => void; delayMs: number }>();
    const segmentDeadlineTimer: DeadlineTimer = (delayMs, fire, { queryId }) => {
      const entry = { fire, delayMs };
      armed.set(queryId, entry);
      return () => {
        if (armed.get(queryId) === entry) armed.delete(queryId);
      };
    };
    const device = track(await OrtDevice.create({ segmentTimeoutMs: STALL_DEADLINE_MS, segmentDeadlineTimer, warmupRuns: 1, logger }));
    await device.load([cnn, nlp]);
    okResult((await device.runGroup([seg(cnn, 'kept', 0, 2, synth(1))])).segments[0]);
    expect(armed.has('kept')).toBe(false); // armed while it ran, cancelled by its result
    await device.injectExecutorFault('cnn', 'stall-in-next-segment');
    const running = device.runGroup([seg(cnn, 'stuck', 0, 4, synth(2)), seg(cnn, 'queued', 0, 4, synth(3)), seg(nlp, 'bystander', 0, 3, synth(4))]);
    await vi.waitFor(() => expect(armed.has('stuck')).toBe(true), { timeout: 60_000, interval: 10 });
    expect(armed.get('stuck')!.delayMs).toBe(STALL_DEADLINE_MS);
    armed.get('stuck')!.fire();
    const r = await running;
    const stuck = failed(r.segments[0]);
    expect(stuck.error).toBeInstanceOf(DeviceFailureError);
    expect(stuck.error.message).toContain(`service cnn, query stuck: segment [0, 4) exceeded segmentTimeoutMs ${STALL_DEADLINE_MS} ms`);
    const queued = failed(r.segments[1]);
    expect(queued.error).toBeInstanceOf(DeviceFailureError);
    expect(queued.error.message).toMatch(new RegExp(`query queued .*because query stuck exceeded segmentTimeoutMs ${STALL_DEADLINE_MS} ms`));
    okResult(r.segments[2]);
    const resumed = failed((await device.runGroup([seg(cnn, 'kept', 2, 4, { kind: 'resume' })])).segments[0]);
    expect(resumed.error.message).toMatch(new RegExp(`state was lost .*exceeded segmentTimeoutMs ${STALL_DEADLINE_MS} ms`));
    okResult((await device.runGroup([seg(cnn, 'after-timeout', 0, 4, synth(5))])).segments[0]);
    expect(device.executorRestarts('cnn')).toBe(1);
    const kill = lines.find((l) => l.level === WARN && l.msg.startsWith('executor killed'));
    expect(kill).toMatchObject({ service: 'cnn', signal: 'SIGKILL', segmentTimeout: true });
    expect(lines.some((l) => l.msg === 'executor restarted' && l.service === 'cnn' && typeof l['loadMs'] === 'number')).toBe(true);
  });

  it('releaseQuery on the wrong service throws RangeError naming the owner, also while the query runs', async () => {
    const device = track(await OrtDevice.create({ warmupRuns: 0 }));
    await device.load([cnn, nlp]);
    const running = device.runGroup([seg(cnn, 'mine', 0, 2, synth(1))]);
    await expect(device.releaseQuery('nlp', 'mine')).rejects.toThrow(/query 'mine' belongs to service 'cnn', not 'nlp'/);
    okResult((await running).segments[0]);
    await expect(device.releaseQuery('nlp', 'mine')).rejects.toThrow(RangeError);
    okResult((await device.runGroup([seg(cnn, 'mine', 2, 4, { kind: 'resume' })])).segments[0]);
    // A lost query belongs to its service too.
    okResult((await device.runGroup([seg(cnn, 'lost-one', 0, 2, synth(1))])).segments[0]);
    await device.injectExecutorFault('cnn', 'kill');
    await expect(device.releaseQuery('nlp', 'lost-one')).rejects.toThrow(/belongs to service 'cnn'/);
    await expect(device.runGroup([seg(nlp, 'lost-one', 1, 3, { kind: 'resume' })])).rejects.toThrow(BadRequestError);
    await device.releaseQuery('cnn', 'lost-one');
    await expect(device.runGroup([seg(cnn, 'lost-one', 2, 4, { kind: 'resume' })])).rejects.toThrow(/no kept state/);
  });

  it('a token id beyond the embedding table is a bad_request result (the input is at fault), and the device stays usable', async () => {
    const device = track(await OrtDevice.create({ warmupRuns: 0 }));
    await device.load([nlp]);
    const ids: HostTensor = { dataType: 'int64', dims: [1, 4], data: BigInt64Array.from([1n, 2n, 99_999_999n, 3n]) };
    const r = (await device.runGroup([seg(nlp, 'oov', 0, 3, { kind: 'tensors', tensors: { input_ids: ids } }, 1, 4)])).segments[0]!;
    expect(r.ok).toBe(false);
    if (!r.ok) {
      expect(r.error).toBeInstanceOf(BadRequestError);
      expect(r.error.message).toMatch(/out of data bounds/);
    }
    okResult((await device.runGroup([seg(nlp, 'fine', 0, 3, synth(5), 1, 4)])).segments[0]);
  });

  it('concurrent load() of one name: the second throws RangeError at once, one executor is started', async () => {
    const { logger, lines } = captureLogs();
    const device = track(await OrtDevice.create({ warmupRuns: 0, logger }));
    const first = device.load([cnn]);
    const second = device.load([cnn]);
    await expect(second).rejects.toThrow(RangeError);
    await expect(second).rejects.toThrow(/'cnn' is already loaded or listed twice \(or being loaded/);
    await first;
    expect(device.services).toEqual(['cnn']);
    expect(lines.filter((l) => l.msg === 'executor spawned' && l.service === 'cnn')).toHaveLength(1);
    okResult((await device.runGroup([seg(cnn, 'q', 0, 4, synth(1))])).segments[0]);
  });

  it('close() during load() ends the executors that load is starting; load rejects with DeviceUnavailableError', async () => {
    const ref: { device?: OrtDevice; closing?: Promise<void> } = {};
    const pids: number[] = [];
    // Close synchronously when the second executor has been spawned (no timing involved).
    const { logger } = captureLogs((line) => {
      if (line.msg !== 'executor spawned') return;
      pids.push(line.pid!);
      if (pids.length === 2) ref.closing = ref.device!.close();
    });
    const device = track(await OrtDevice.create({ logger }));
    ref.device = device;
    const loading = device.load([cnn, nlp]);
    await expect(loading).rejects.toBeInstanceOf(DeviceUnavailableError);
    expect(ref.closing).toBeDefined();
    await ref.closing;
    expect(pids).toHaveLength(2);
    for (const pid of pids) expect(isAlive(pid)).toBe(false);
    expect(device.services).toEqual([]);
  });

  it('kept and lost queries are capped (maxKeptQueries, maxLostQueries): oldest evicted / forgotten first', async () => {
    const device = track(await OrtDevice.create({ warmupRuns: 0, maxKeptQueries: 2, maxLostQueries: 2 }));
    await device.load([cnn]);
    // Kept cap: the third unfinished query evicts the first, which then resumes to an error result.
    for (const q of ['k1', 'k2', 'k3']) okResult((await device.runGroup([seg(cnn, q, 0, 2, synth(1))])).segments[0]);
    expect(await device.executorKeptQueries('cnn')).toEqual(['k2', 'k3']); // freed in the executor too
    const evicted = failed((await device.runGroup([seg(cnn, 'k1', 2, 4, { kind: 'resume' })])).segments[0]);
    expect(evicted.error.message).toMatch(/evicted: more than maxKeptQueries 2/);
    okResult((await device.runGroup([seg(cnn, 'k2', 2, 4, { kind: 'resume' })])).segments[0]);
    okResult((await device.runGroup([seg(cnn, 'k3', 2, 4, { kind: 'resume' })])).segments[0]);
    // Lost cap: l1 evicted (lost), then l2 and l3 lost in a kill → 3 lost, the oldest (l1) forgotten.
    for (const q of ['l1', 'l2', 'l3']) okResult((await device.runGroup([seg(cnn, q, 0, 2, synth(1))])).segments[0]);
    await device.injectExecutorFault('cnn', 'kill');
    await expect(device.runGroup([seg(cnn, 'l1', 2, 4, { kind: 'resume' })])).rejects.toThrow(/no kept state/);
    for (const q of ['l2', 'l3']) expect(failed((await device.runGroup([seg(cnn, q, 2, 4, { kind: 'resume' })])).segments[0]).error.message).toMatch(/state was lost/);
  });

  it('logs unexpected exits with service, signal and output tail, and restarts', async () => {
    const { logger, lines } = captureLogs();
    const device = track(await OrtDevice.create({ warmupRuns: 0, logger }));
    await device.load([cnn]);
    const loaded = lines.find((l) => l.msg === 'executor loaded' && l.service === 'cnn');
    expect(loaded?.['loadMs']).toBeGreaterThan(0);
    expect(lines.some((l) => l.msg === 'services loaded')).toBe(true);
    await device.injectExecutorFault('cnn', 'kill');
    const exit = lines.find((l) => l.level === WARN && l.msg.startsWith('executor ended unexpectedly'));
    expect(exit).toMatchObject({ service: 'cnn', signal: 'SIGKILL', code: null });
    expect(exit).toHaveProperty('outputTail');
    expect(lines.some((l) => l.level === WARN && l.msg === 'restarting executor' && l.service === 'cnn')).toBe(true);
    okResult((await device.runGroup([seg(cnn, 'q', 0, 4, synth(1))])).segments[0]);
  });

  it('an executor whose restarts fail is retried after a backoff, forever, and comes back by itself; health events follow', async () => {
    const dir = path.join(fixtures.dir, 'flaky');
    const flaky: DeviceService = { name: 'flaky', model: await buildSkipNet(dir) };
    const { logger, lines } = captureLogs();
    const device = track(await OrtDevice.create({ warmupRuns: 0, logger, restartBackoff: { initialMs: 50, maxMs: 200 } }));
    const events: ServiceHealthEvent[] = [];
    device.watchHealth((e) => events.push(e));
    await device.load([flaky, nlp]);
    const file = flaky.model.operatorPaths[0]!;
    const good = await fs.readFile(file);
    await fs.writeFile(file, 'not an onnx model'); // every restart now fails to load
    await device.injectExecutorFault('flaky', 'kill');
    expect(events[0]).toMatchObject({ service: 'flaky', up: false, restarts: 1 });

    // Restarts keep failing (more than the old limit of 3), each followed by a backoff.
    await until(() => lines.filter((l) => l.level === WARN && l.msg === 'executor restart failed; retrying after backoff').length >= 5);
    const backoffs = lines.filter((l) => l.msg === 'executor restart failed; retrying after backoff').map((l) => l['nextRestartInMs']);
    expect(backoffs.slice(0, 4)).toEqual([50, 100, 200, 200]);
    expect(events.every((e) => !e.up)).toBe(true);
    expect(events.at(-1)?.reason).toMatch(/flaky is down: \d+ consecutive restarts failed.*next restart is in/);
    // Meanwhile: its segments fail (at once during a backoff), other services are unaffected.
    const r = await device.runGroup([seg(flaky, 'down', 0, 4, synth(1)), seg(nlp, 'fine', 0, 3, synth(1))]);
    expect(failed(r.segments[0]).error).toBeInstanceOf(DeviceFailureError);
    okResult(r.segments[1]);
    expect(lines.some((l) => l.msg === 'restarting executor after backoff')).toBe(true);

    // Fixed files: the executor comes back without a new load.
    await fs.writeFile(file, good);
    await until(() => events.at(-1)?.up === true);
    okResult((await device.runGroup([seg(flaky, 'back', 0, 4, synth(1)), seg(nlp, 'fine', 0, 3, synth(1))])).segments[0]);
    expect(events.filter((e) => e.up)).toHaveLength(1);
    expect(device.executorRestarts('flaky')).toBe(1);
    await expect(device.load([flaky])).rejects.toThrow(RangeError);
  });
});
