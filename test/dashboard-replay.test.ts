/**
 * `abacus simulate --dashboard` (docs/dashboard.md): the replay of a finished virtual-clock run
 * (`serve/dashboard/replay.ts`) — queue depth from the records, every group delivered or counted
 * as skipped, `status: done` at the end — and the CLI serving it until SIGTERM.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RecordFeed } from '../src/runtime/feed.ts';
import type { GroupRecord, QueryRecord } from '../src/runtime/records.ts';
import { DashboardHub, type DashboardSink } from '../src/serve/dashboard/hub.ts';
import type { DashboardUpdate } from '../src/serve/dashboard/protocol.ts';
import { DashboardReplay } from '../src/serve/dashboard/replay.ts';
import { ABACUS_BIN } from './helpers/cli.ts';

let tmp: string;
beforeAll(async () => {
  tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-replay-'));
});
afterAll(async () => {
  await fs.rm(tmp, { recursive: true, force: true });
});

const q = (id: string, arrivalMs: number, groups: number[], endMs: number): QueryRecord => ({ id, service: 'a', arrivalMs, batch: 1, seqLen: 0, qosTargetMs: 10, groups, outcome: 'completed', endMs });
const g = (index: number, launchMs: number, measuredMs: number): GroupRecord => ({ index, launchMs, measuredMs, predictedMs: measuredMs, segments: [{ queryId: `q${index}`, service: 'a', start: 0, end: 3, batch: 1, seqLen: 0 }] });

describe('DashboardReplay', () => {
  it('derives the queue depth from arrivals and first launches, and ends with status done', async () => {
    // q0 arrives at 0, launched at 1 (group 0, ends 3); q1 arrives at 2, waits until group 1 at 3 (ends 5)
    const replay = new DashboardReplay([{ name: 'a', qosTargetMs: 10 }], { queries: [q('q0', 0, [0], 3), q('q1', 2, [1], 5)], groups: [g(0, 1, 2), g(1, 3, 2)] }, 1);
    expect(replay.spanMs).toBe(5);
    const depths: [number | undefined, number][] = [];
    const sink: DashboardSink = { send: () => undefined, bufferedBytes: () => 0, end: () => undefined };
    const hub = new DashboardHub({ feed: new RecordFeed(), source: replay, mode: 'replay', flushMs: 1000 });
    hub.attach(sink);
    // drive by hand (not started: nothing reaches the hub): the depth after each event
    const events = (replay as unknown as { events: { atMs: number; apply: () => void }[] }).events;
    for (const e of events) {
      e.apply();
      depths.push([e.atMs, replay.queueLength('a')]);
    }
    expect(depths).toEqual([
      [0, 1], // q0 arrives
      [1, 0], // q0 launched
      [2, 1], // q1 arrives
      [3, 0], // q1 launched (before group 0's end is shown at the same instant)
      [3, 0], // group 0 ends
      [3, 0], // q0 ends
      [5, 0], // group 1 ends
      [5, 0], // q1 ends
    ]);
    hub.close('test');
    // run for real (fast): the groups reach a page and the last update says done
    const again = new DashboardReplay([{ name: 'a', qosTargetMs: 10 }], { queries: [q('q0', 0, [0], 3), q('q1', 2, [1], 5)], groups: [g(0, 1, 2), g(1, 3, 2)] }, 1e6);
    const got: DashboardUpdate[] = [];
    const hub2 = new DashboardHub({ feed: new RecordFeed(), source: again, mode: 'replay', onPage: () => again.start(hub2) });
    hub2.attach({ send: (e, d) => e === 'update' && got.push(JSON.parse(d) as DashboardUpdate), bufferedBytes: () => 0, end: () => undefined });
    await again.done;
    expect(got.flatMap((u) => u.groups.map((x) => x.index))).toEqual([0, 1]);
    expect(got.at(-1)!.status).toBe('done');
    expect(got.at(-1)!.nowMs).toBe(5);
    expect(got.at(-1)!.services[0]).toMatchObject({ ended: 2, completed: 2, queueDepth: 0 });
    hub2.close('test');
  });

  it('refuses a speed that is not a finite number > 0', () => {
    expect(() => new DashboardReplay([], { queries: [], groups: [] }, 0)).toThrow(/speed must be a finite number > 0/);
  });
});

describe('abacus simulate --dashboard', () => {
  it('replays the run on /dashboard/events (every group sent or counted as skipped), then stops on SIGTERM', async () => {
    // fcfs reports the predictor's error too, so a predictor is trained first: on 300 profiled
    // groups (the replay does not depend on its quality) instead of the default 10,000
    const child = spawn(
      process.execPath,
      [ABACUS_BIN, 'simulate', '--models', 'resnet50-small,vgg19-small', '--qos-ms', '40,60', '--batch-sizes', '1', '--policy', 'fcfs', '--queries', '200', '--rate', '100', '--profile-samples', '300', '--dashboard', '--dashboard-port', '0', '--dashboard-speed', '5'],
      { env: { ...process.env, ABACUS_CACHE_DIR: path.join(tmp, 'cache'), ABACUS_LOG_LEVEL: 'warn' }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      const deadline = Date.now() + 240_000;
      let m: RegExpExecArray | null;
      while ((m = /dashboard at (http:\/\/127\.0\.0\.1:\d+)\/dashboard — replays the fcfs run \((\d+) groups/.exec(out)) === null) {
        if (child.exitCode !== null || Date.now() > deadline) throw new Error(`no dashboard line: ${out}\n${err}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      const [, url, groupsText] = m;
      const page = await fetch(`${url}/dashboard`);
      expect(page.status).toBe(200);
      const r = await fetch(`${url}/dashboard/events`);
      const reader = r.body!.getReader();
      let text = '';
      while (!text.includes('"status":"done"')) {
        const c = await reader.read();
        if (c.done) throw new Error(`the stream ended before the replay did: ${text.slice(-500)}`);
        text += new TextDecoder().decode(c.value);
      }
      await reader.cancel();
      const updates = [...text.matchAll(/event: update\ndata: (.*)\n/g)].map((x) => JSON.parse(x[1]!) as DashboardUpdate);
      // the update sent on connecting (before the replay starts) and the one saying done, at least
      expect(updates.length).toBeGreaterThan(1);
      const sent = updates.reduce((n, u) => n + u.groups.length + u.skippedGroups, 0);
      expect(sent).toBe(Number(groupsText));
      const last = updates.at(-1)!;
      expect(last.services.map((s) => s.service)).toEqual(['resnet50-small', 'vgg19-small']);
      expect(last.services[0]!.ended).toBeGreaterThan(0);
      // virtual time moves forward through the updates: none before the replay starts, never
      // back, the run's end at the last (how many updates lie between is the wall clock's say)
      expect(updates[0]!.nowMs).toBeNull();
      const nows = updates.map((u) => u.nowMs).filter((x): x is number => x !== null);
      expect(nows).toEqual([...nows].sort((a, b) => a - b));
      expect(nows.at(-1)!).toBeGreaterThan(0);
      child.kill('SIGTERM');
      expect(await exit).toBe(0);
      expect(out).toMatch(/dashboard stopped/);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  }, 300_000);
});
