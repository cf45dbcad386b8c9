/**
 * The dashboard's server side (`serve/dashboard/hub.ts`, `routes.ts`) and the record feed
 * (`runtime/feed.ts`): subscription only while a page is connected, bounded updates, the window
 * statistics against hand-computed values, slow pages skipped then dropped, the SSE route, and
 * the committed bundle being the build of `dashboard/main.ts`.
 */
import { readFileSync } from 'node:fs';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { RecordFeed } from '../src/runtime/feed.ts';
import type { GroupRecord, QueryRecord } from '../src/runtime/records.ts';
import { DashboardHub, nearestRank, type DashboardSink, type DashboardSource } from '../src/serve/dashboard/hub.ts';
import type { DashboardHello, DashboardUpdate } from '../src/serve/dashboard/protocol.ts';
import { dashboardAssetUrl, registerDashboardRoutes } from '../src/serve/dashboard/routes.ts';
import { createHttpApp } from '../src/serve/http/app.ts';
import { buildDashboardBundle } from '../scripts/dashboard-bundle.ts';
import { FakeBackend } from './serve/fake-backend.ts';
import { WallClock } from '../src/clock/index.ts';
import { SimDevice } from '../src/device/sim/index.ts';
import { artifactAt } from '../src/model/artifact.ts';
import { resolveModelSpec } from '../src/model/catalog.ts';
import { ModelRepository } from '../src/model/repository.ts';
import { createController } from '../src/schedule/index.ts';
import { RuntimeBackend } from '../src/serve/backend.ts';
import type { FeedEvent } from '../src/runtime/feed.ts';
import { fixedPredictor } from './helpers/fixed-predictor.ts';

afterEach(() => {
  vi.useRealTimers();
});

function source(nowMs: { v: number }, extra: Partial<DashboardSource> = {}): DashboardSource {
  return {
    servedModels: () => [
      { name: 'a', qosTargetMs: 10 },
      { name: 'b', qosTargetMs: 20 },
    ],
    queueLength: (s) => (s === 'a' ? 3 : 0),
    refinement: undefined,
    clockNowMs: () => nowMs.v,
    isReady: () => true,
    ...extra,
  };
}

class ArraySink implements DashboardSink {
  readonly events: { event: string; data: unknown }[] = [];
  buffered = 0;
  ended = false;
  send(event: string, data: string): void {
    this.events.push({ event, data: JSON.parse(data) });
  }
  bufferedBytes(): number {
    return this.buffered;
  }
  end(): void {
    this.ended = true;
  }
  updates(): DashboardUpdate[] {
    return this.events.filter((e) => e.event === 'update').map((e) => e.data as DashboardUpdate);
  }
}

const group = (index: number, launchMs: number, measuredMs: number, predictedMs?: number): GroupRecord => ({
  index,
  launchMs,
  measuredMs,
  predictedMs,
  segments: [{ queryId: `q${index}`, service: 'a', start: 0, end: 4, batch: 2, seqLen: 0, members: ['x', 'y'] }],
});

const query = (id: string, service: string, arrivalMs: number, endMs: number, outcome: 'completed' | 'rejected', reason?: QueryRecord['reason']): QueryRecord => ({
  id,
  service,
  arrivalMs,
  batch: 1,
  seqLen: 0,
  qosTargetMs: service === 'a' ? 10 : 20,
  groups: [],
  outcome,
  endMs,
  ...(reason === undefined ? {} : { reason, detail: `why ${id}` }),
});

describe('RecordFeed', () => {
  it('calls observers only while subscribed and removes one that throws', () => {
    const errors: unknown[] = [];
    const feed = new RecordFeed((e) => errors.push(e));
    expect(feed.watched).toBe(false);
    feed.group(group(0, 0, 1), 1); // nobody: nothing happens
    const seen: string[] = [];
    const off = feed.subscribe((e) => seen.push(e.kind));
    feed.subscribe(() => {
      throw new Error('boom');
    });
    feed.group(group(1, 0, 1), 1);
    feed.query(query('q', 'a', 0, 1, 'completed'));
    expect(seen).toEqual(['group', 'query']);
    expect(errors).toHaveLength(1);
    off();
    expect(feed.watched).toBe(false);
  });
});

describe('RuntimeBackend → RecordFeed', () => {
  it('passes every group and every query outcome (with its rejection reason) to the feed', async () => {
    const spec = await resolveModelSpec(new ModelRepository(), 'resnet50-small');
    const clock = new WallClock();
    const device = await SimDevice.create({ clock, id: 'sim:a100', seed: 1 });
    await device.load([{ name: 'resnet', model: artifactAt('/nonexistent', spec) }]);
    const feed = new RecordFeed();
    const backend = new RuntimeBackend({ models: [{ name: 'resnet', spec, qosTargetMs: 500, maxQosMs: 5000, batchSizes: [1], maxQueueLength: 10 }], platform: 'abacus_sim', feed });
    await backend.start({ clock, device, controller: createController('fcfs', { drop: true }, fixedPredictor([spec.name], 0.05)) });
    try {
      const events: FeedEvent[] = [];
      feed.subscribe((e) => events.push(e));
      const input = { name: 'input', datatype: 'FP32', shape: [1, 3, 64, 64], data: { kind: 'raw' as const, bytes: new Uint8Array(3 * 64 * 64 * 4) } };
      await backend.infer({ modelName: 'resnet', requestId: 'a', inputs: [input] });
      await expect(backend.infer({ modelName: 'resnet', requestId: 'b', inputs: [input], parameters: { qos_ms: 0.001 } })).rejects.toThrow(/qos_violation/);
      const groups = events.filter((e) => e.kind === 'group');
      const queries = events.flatMap((e) => (e.kind === 'query' ? [e.record] : []));
      expect(groups.length).toBeGreaterThanOrEqual(1);
      expect(groups[0]!.record.segments[0]!.service).toBe('resnet');
      expect(queries.map((q) => [q.outcome, q.reason])).toEqual([
        ['completed', undefined],
        ['rejected', 'qos_violation'],
      ]);
      expect(backend.queueLength('resnet')).toBe(0);
      expect(backend.clockNowMs()).toBeGreaterThan(0);
      expect(backend.servedModels()).toEqual([{ name: 'resnet', qosTargetMs: 500 }]);
    } finally {
      await backend.shutdown(1000);
    }
  }, 60_000);
});

describe('DashboardHub', () => {
  it('observes the feed only while a page is connected, and sends hello then the kept history', () => {
    const feed = new RecordFeed();
    const now = { v: 100 };
    const hub = new DashboardHub({ feed, source: source(now) });
    expect(feed.watched).toBe(false);
    const sink = new ArraySink();
    const detach = hub.attach(sink);
    expect(feed.watched).toBe(true);
    expect(hub.observing).toBe(true);
    for (let i = 0; i < 5; i++) feed.group(group(i, i * 10, 8, 9), i * 10 + 8);
    detach();
    expect(feed.watched).toBe(false);
    expect(hub.pageCount).toBe(0);
    feed.group(group(9, 90, 8), 98); // unobserved: not kept
    const sink2 = new ArraySink();
    hub.attach(sink2);
    expect(sink2.events[0]!.event).toBe('hello');
    const hello = sink2.events[0]!.data as DashboardHello;
    expect(hello.services.map((s) => s.name)).toEqual(['a', 'b']);
    expect(hello.mode).toBe('live');
    const first = sink2.updates()[0]!;
    expect(first.groups.map((g) => g.index)).toEqual([0, 1, 2, 3, 4]);
    expect(first.groups[0]!.segments[0]).toEqual({ queryId: 'q0', service: 'a', start: 0, end: 4, batch: 2, members: 2 });
    hub.close('test');
  });

  it('bounds each update to maxGroupsPerUpdate (the newest) and counts the rest as skipped', () => {
    const feed = new RecordFeed();
    const hub = new DashboardHub({ feed, source: source({ v: 0 }), maxGroupsPerUpdate: 3, keepGroups: 10 });
    const sink = new ArraySink();
    hub.attach(sink);
    for (let i = 0; i < 8; i++) feed.group(group(i, i, 1), i + 1);
    hub.flush();
    const u = sink.updates().at(-1)!;
    expect(u.groups.map((g) => g.index)).toEqual([5, 6, 7]);
    expect(u.skippedGroups).toBe(5);
    hub.flush();
    expect(sink.updates().at(-1)!.groups).toEqual([]);
    for (let i = 8; i < 30; i++) feed.group(group(i, i, 1), i + 1); // more than the ring keeps
    hub.flush();
    const v = sink.updates().at(-1)!;
    expect(v.groups.map((g) => g.index)).toEqual([27, 28, 29]);
    expect(v.skippedGroups).toBe(19);
    hub.close('test');
  });

  it('computes p99 (nearest rank) and the violation ratio over the sliding window; cancelled queries count in neither', () => {
    const feed = new RecordFeed();
    const now = { v: 20_000 };
    const hub = new DashboardHub({ feed, source: source(now), windowMs: 10_000 });
    const sink = new ArraySink();
    hub.attach(sink);
    // outside the window (ended at 5000 < 20000 − 10000): ignored
    feed.query(query('old', 'a', 4000, 5000, 'completed'));
    // service a: 100 completions with latencies 1..100 ms (qos 10: 90 late), 10 rejections, 5 cancelled
    for (let i = 1; i <= 100; i++) feed.query(query(`c${i}`, 'a', 15_000, 15_000 + i, 'completed'));
    for (let i = 0; i < 10; i++) feed.query(query(`r${i}`, 'a', 15_000, 15_005, 'rejected', 'qos_violation'));
    for (let i = 0; i < 5; i++) feed.query(query(`x${i}`, 'a', 15_000, 15_005, 'rejected', 'cancelled'));
    hub.flush();
    const u = sink.updates().at(-1)!;
    const a = u.services.find((s) => s.service === 'a')!;
    // nearest rank: ceil(0.99 × 100) = 99th smallest = 99 ms
    expect(a).toMatchObject({ ended: 110, completed: 100, late: 90, rejected: 10, p99Ms: 99, queueDepth: 3, qosTargetMs: 10 });
    expect(a.violationRatio).toBeCloseTo(100 / 110, 12);
    const b = u.services.find((s) => s.service === 'b')!;
    expect(b).toMatchObject({ ended: 0, p99Ms: null, violationRatio: null });
    expect(u.rejections.map((r) => r.queryId)).toEqual(['r0', 'r1', 'r2', 'r3', 'r4', 'r5', 'r6', 'r7', 'r8', 'r9']);
    expect(u.rejections[0]).toEqual({ queryId: 'r0', service: 'a', reason: 'qos_violation', detail: 'why r0', atMs: 15_005, waitedMs: 5 });
    // the window slides: 10 s later everything is out
    now.v = 30_000;
    hub.flush();
    expect(sink.updates().at(-1)!.services[0]!.ended).toBe(0);
    hub.close('test');
  });

  it('reports the predictor error from the records, or the online refinement when the controller refines', () => {
    const feed = new RecordFeed();
    const hub = new DashboardHub({ feed, source: source({ v: 0 }) });
    const sink = new ArraySink();
    hub.attach(sink);
    expect(sink.updates()[0]!.predictor).toEqual({ source: null, rollingMapePct: null, groups: 0 });
    feed.group(group(0, 0, 10, 11), 10); // 10 %
    feed.group(group(1, 10, 20, 15), 30); // 25 %
    feed.group(group(2, 30, 5), 35); // not predicted
    hub.flush();
    const p = sink.updates().at(-1)!.predictor;
    expect(p.source).toBe('records');
    expect(p.groups).toBe(2);
    expect(p.rollingMapePct).toBeCloseTo(17.5, 10);
    hub.close('test');
    const refined = new DashboardHub({ feed, source: source({ v: 0 }, { refinement: { rollingMape: 0.042, rollingBaseMape: 0.1, observedGroups: 77, guardActive: true, guardFactor: 1.3 } }) });
    const s2 = new ArraySink();
    refined.attach(s2);
    expect(s2.updates()[0]!.predictor).toEqual({ source: 'refinement', rollingMapePct: 4.2, groups: 77, guardActive: true, guardFactor: 1.3 });
    refined.close('test');
  });

  it('skips a page whose connection is backed up and disconnects it after dropAfterMs', () => {
    vi.useFakeTimers();
    const feed = new RecordFeed();
    const hub = new DashboardHub({ feed, source: source({ v: 0 }), maxBufferedBytes: 1000, dropAfterMs: 5000, flushMs: 200 });
    const slow = new ArraySink();
    const fast = new ArraySink();
    hub.attach(slow);
    hub.attach(fast);
    slow.buffered = 5000;
    feed.group(group(0, 0, 1), 1);
    vi.advanceTimersByTime(1000);
    expect(slow.updates()).toHaveLength(1); // only the one sent on connect
    expect(fast.updates().length).toBeGreaterThanOrEqual(5);
    slow.buffered = 0; // caught up: gets the groups it missed
    vi.advanceTimersByTime(200);
    expect(slow.updates().at(-1)!.groups.map((g) => g.index)).toEqual([0]);
    slow.buffered = 5000;
    vi.advanceTimersByTime(6000);
    expect(slow.ended).toBe(true);
    expect(hub.pageCount).toBe(1);
    expect(fast.ended).toBe(false);
    hub.close('bye now');
    expect(fast.events.at(-1)).toEqual({ event: 'bye', data: { reason: 'bye now' } });
    expect(fast.ended).toBe(true);
    expect(feed.watched).toBe(false);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('refuses bad bounds with a RangeError naming the option', () => {
    expect(() => new DashboardHub({ feed: new RecordFeed(), source: source({ v: 0 }), flushMs: 0 })).toThrow(/flushMs must be an integer > 0/);
    expect(() => new DashboardHub({ feed: new RecordFeed(), source: source({ v: 0 }), speed: -1 })).toThrow(/speed must be > 0/);
  });

  it('nearestRank: the ceil(p·n)-th smallest', () => {
    expect(nearestRank([], 0.99)).toBeUndefined();
    expect(nearestRank([5], 0.99)).toBe(5);
    expect(nearestRank([3, 1, 2, 4], 0.5)).toBe(2);
    expect(nearestRank([3, 1, 2, 4], 0.99)).toBe(4);
  });
});

describe('dashboard routes', () => {
  it('serve the page and script from the package, and the event stream as text/event-stream', async () => {
    const feed = new RecordFeed();
    const hub = new DashboardHub({ feed, source: source({ v: 0 }) });
    const app = createHttpApp(new FakeBackend(), { dashboard: hub });
    try {
      const page = await app.inject({ url: '/dashboard' });
      expect(page.statusCode).toBe(200);
      expect(page.headers['content-type']).toMatch(/^text\/html/);
      expect(page.body).toContain('<script src="/dashboard/dashboard.js"></script>');
      expect(page.body).not.toMatch(/https?:\/\//); // nothing from elsewhere
      const js = await app.inject({ url: '/dashboard/dashboard.js' });
      expect(js.statusCode).toBe(200);
      expect(js.headers['content-type']).toMatch(/^text\/javascript/);
      await app.listen({ host: '127.0.0.1', port: 0 });
      const address = app.server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      const ac = new AbortController();
      const r = await fetch(`http://127.0.0.1:${port}/dashboard/events`, { signal: ac.signal });
      expect(r.headers.get('content-type')).toMatch(/^text\/event-stream/);
      const reader = r.body!.getReader();
      let text = '';
      while (!text.includes('event: update')) text += new TextDecoder().decode((await reader.read()).value);
      expect(text).toMatch(/event: hello\ndata: \{"mode":"live"/);
      expect(hub.pageCount).toBe(1);
      ac.abort();
      await vi.waitFor(() => expect(hub.pageCount).toBe(0));
      // an open page does not hold the server's close up
      const r2 = await fetch(`http://127.0.0.1:${port}/dashboard/events`);
      const reader2 = r2.body!.getReader();
      await reader2.read();
      await app.close();
      let rest = '';
      for (;;) {
        const c = await reader2.read();
        if (c.done) break;
        rest += new TextDecoder().decode(c.value);
      }
      expect(rest).toMatch(/event: bye\ndata: \{"reason":"the server is shutting down"\}/);
    } finally {
      await app.close();
    }
  });

  it('the committed bundle is the esbuild build of dashboard/main.ts (else: npm run build:dashboard)', async () => {
    const committed = readFileSync(dashboardAssetUrl('dashboard.js'), 'utf8');
    expect(committed === (await buildDashboardBundle())).toBe(true);
    expect(typeof registerDashboardRoutes).toBe('function');
  }, 120_000);
});
