/**
 * End to end: 3 `abacus serve` nodes (sim:a100, abacus policy; the first node profiles and
 * trains a small predictor, the others load it from the shared cache) behind HAProxy 2.6
 * (`startLocalCluster`, the config of `src/deployment/haproxy.ts`), driven over HTTP and gRPC
 * through HAProxy with the project's clients; `abacus bench --target` through it; then one node
 * is killed (SIGKILL) mid-run. Checks: every request got exactly one answer (its own id echoed
 * once), the HTTP ones all succeed (a request lost with the node is replayed on a survivor),
 * HAProxy marks the node down, and the traffic sent after the kill shows up in the survivors'
 * own `/metrics`.
 *
 * Skipped, with the reason, where /usr/sbin/haproxy is missing (`.ci/run` installs it).
 */
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_HAPROXY_BIN, startLocalCluster, type LocalCluster } from '../../src/deployment/cluster.ts';
import { GrpcInferenceClient, HttpInferenceClient, type ClientInferResult, type InferenceClient } from '../../src/serve/client/index.ts';
import type { TensorMap } from '../../src/tensor.ts';
import { runAbacus } from '../helpers/cli.ts';
import { metricValue } from '../serve/child-serve.ts';

const HAVE_HAPROXY = existsSync(DEFAULT_HAPROXY_BIN);
const SEQ = 16;

let tmp: string;
let config: string;
let cluster: LocalCluster | undefined;

beforeAll(async () => {
  if (!HAVE_HAPROXY) return;
  tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-cluster-'));
  config = path.join(tmp, 'cluster.yaml');
  // a generous target: this test is about routing and node loss, not about QoS drops
  await fs.writeFile(config, ['device: sim:a100', 'policy: { name: abacus, drop: true }', 'services:', '  - name: bert', '    model: bert-small', '    qosTargetMs: 2000', '    batchSizes: [1]', `    seqLens: [${SEQ}]`].join('\n'));
  cluster = await startLocalCluster({
    config,
    nodes: 3,
    workDir: path.join(tmp, 'run'),
    httpPort: 0,
    grpcPort: 0,
    statsPort: 0,
    serveFlags: ['--profile-samples', '200', '--grace-ms', '2000'],
    env: { ...process.env, ABACUS_CACHE_DIR: path.join(tmp, 'cache'), ABACUS_LOG_LEVEL: 'warn' },
    haproxy: { checkIntervalMs: 300 },
  });
}, 400_000);

afterAll(async () => {
  await cluster?.stop(5000);
  if (tmp !== undefined) await fs.rm(tmp, { recursive: true, force: true });
}, 60_000);

function inputs(): TensorMap {
  const ids = new BigInt64Array(SEQ).fill(7n);
  return { input_ids: { dataType: 'int64', dims: [1, SEQ], data: ids }, attention_mask: { dataType: 'int64', dims: [1, SEQ], data: new BigInt64Array(SEQ).fill(1n) } };
}

/** Successful bert requests a node has answered, from its own /metrics; undefined when it does not answer. */
async function served(url: string): Promise<number | undefined> {
  try {
    const text = await (await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(5000) })).text();
    return metricValue(text, 'abacus_requests_total{model="bert",outcome="success"}');
  } catch {
    return undefined;
  }
}

/** HAProxy's view of a server (`status` column of `/stats;csv`: UP, DOWN, …). */
async function haproxyStatus(statsUrl: string, backend: string, server: string): Promise<string | undefined> {
  const csv = await (await fetch(`${statsUrl}/stats;csv`)).text();
  const [header, ...rows] = csv.split('\n');
  const cols = header!.replace(/^# /, '').split(',');
  const row = rows.map((r) => r.split(',')).find((r) => r[0] === backend && r[1] === server);
  return row?.[cols.indexOf('status')];
}

interface Sent {
  readonly id: string;
  readonly protocol: 'http' | 'grpc';
  readonly sentAfterKill: boolean;
  answers: ClientInferResult[];
}

describe.skipIf(!HAVE_HAPROXY)(`3 abacus serve nodes behind HAProxy (${HAVE_HAPROXY ? DEFAULT_HAPROXY_BIN : `skipped: ${DEFAULT_HAPROXY_BIN} is missing; apt-get install haproxy`})`, () => {
  it('abacus bench --target runs through HAProxy over HTTP and gRPC', async () => {
    const c = cluster!;
    for (const target of [c.httpUrl, `grpc://${c.grpcAddress!}`]) {
      const r = await runAbacus(['bench', '--target', target, '--config', config, '--rate', '20', '--queries', '30', '--json'], { cacheDir: path.join(tmp, 'cache') });
      expect(r.code, r.stderr).toBe(0);
      const json = JSON.parse(r.stdout) as { runs: { completed?: number; offered?: number }[] };
      expect(json.runs).toHaveLength(1);
      expect(JSON.stringify(json.runs[0])).toMatch(/bert/);
    }
    // the load went to every node
    for (const n of c.nodes) expect(await served(n.httpUrl), n.name).toBeGreaterThan(0);
  }, 120_000);

  it('a node killed mid-run: every request answered once, HTTP ones all succeed, traffic moves to the survivors', async () => {
    const c = cluster!;
    const clients: Record<'http' | 'grpc', InferenceClient> = { http: new HttpInferenceClient(c.httpUrl, { timeoutMs: 20_000 }), grpc: new GrpcInferenceClient(c.grpcAddress!, { timeoutMs: 20_000 }) };
    const victim = c.nodes[1]!;
    const survivors = c.nodes.filter((n) => n !== victim);
    const sent: Sent[] = [];
    const pending: Promise<void>[] = [];
    let killed = false;
    const send = (protocol: 'http' | 'grpc'): void => {
      const s: Sent = { id: `${protocol}-${sent.length}`, protocol, sentAfterKill: killed, answers: [] };
      sent.push(s);
      pending.push(clients[protocol].infer({ model: 'bert', inputs: inputs(), id: s.id }).then((r) => void s.answers.push(r)));
    };
    try {
      const tick = async (n: number): Promise<void> => {
        for (let i = 0; i < n; i++) {
          send('http');
          send('grpc');
          await new Promise((r) => setTimeout(r, 40));
        }
      };
      await tick(40);
      const beforeKill = await Promise.all(c.nodes.map((n) => served(n.httpUrl)));
      // aim the kill at a moment it holds queries: burst, and kill once its own /metrics shows a
      // queue. Whether it held any when the signal landed depends on timing (a busy machine may
      // answer a burst before /metrics is read), so nothing below assumes it did.
      let depthAtKill = 0;
      for (let attempt = 0; attempt < 8 && !killed; attempt++) {
        for (let i = 0; i < 30; i++) {
          send('http');
          send('grpc');
        }
        const burst = Promise.all(pending).then(() => true);
        for (let poll = 0; poll < 50 && depthAtKill === 0; poll++) {
          const text = await (await fetch(`${victim.httpUrl}/metrics`)).text();
          depthAtKill = metricValue(text, 'abacus_queue_depth{model="bert"}');
          if (depthAtKill > 0) break; // kill at once, no await in between
          if (await Promise.race([burst, new Promise((r) => setTimeout(() => r(false), 1))])) break;
        }
        // the burst may have been answered while /metrics was read (a busy machine): then it holds nothing; burst again
        const holding = sent.some((s) => s.answers.length === 0);
        if ((depthAtKill > 0 && holding) || attempt === 7) {
          victim.kill('SIGKILL');
          killed = true;
        } else {
          depthAtKill = 0;
          await Promise.all(pending);
        }
      }
      // requests without an answer at the instant of the kill: the only ones the kill can fail
      const heldAtKill = new Set(sent.filter((s) => s.answers.length === 0).map((s) => s.id));
      const survivorsAtKill = await Promise.all(survivors.map((n) => served(n.httpUrl)));
      await tick(60);
      await Promise.all(pending);
      expect(await victim.exit).toBe(null); // killed by the signal
      // HAProxy took it out of both backends
      await expect.poll(() => haproxyStatus(c.statsUrl!, 'abacus_http_nodes', victim.name), { timeout: 10_000 }).toMatch(/DOWN/);
      await expect.poll(() => haproxyStatus(c.statsUrl!, 'abacus_grpc_nodes', victim.name), { timeout: 10_000 }).toMatch(/DOWN/);

      // exactly one answer per request, with its own id
      expect(sent.filter((s) => s.answers.length !== 1)).toEqual([]);
      for (const s of sent) {
        const a = s.answers[0]!;
        if (a.ok) expect(a.id).toBe(s.id);
      }
      const failures = sent.filter((s) => !s.answers[0]!.ok).map((s) => ({ id: s.id, ...(s.answers[0] as object) }));
      // HTTP: a request the dead node held is replayed (empty-response), a new one never goes there
      expect(failures.filter((f) => f.id.startsWith('http'))).toEqual([]);
      // gRPC: only calls the node held when it died may fail (HAProxy cannot replay a stream the
      // node had started answering); everything sent after the kill succeeds
      expect(failures.filter((f) => sent.find((s) => s.id === f.id)!.sentAfterKill)).toEqual([]);
      expect(failures.filter((f) => !heldAtKill.has(f.id))).toEqual([]);

      // before the kill every node served; after it the survivors served what was sent
      expect(beforeKill.every((v) => v !== undefined && v > 0)).toBe(true);
      const after = await Promise.all(survivors.map((n) => served(n.httpUrl)));
      const survivorsGained = after.reduce((t, v, i) => t! + v! - survivorsAtKill[i]!, 0)!;
      const okAfterKill = sent.filter((s) => s.sentAfterKill && s.answers[0]!.ok).length;
      expect(okAfterKill).toBe(120);
      expect(survivorsGained).toBeGreaterThanOrEqual(okAfterKill);
      for (const [i, n] of survivors.entries()) expect(after[i]! - survivorsAtKill[i]!, n.name).toBeGreaterThan(0);
      expect(await served(victim.httpUrl)).toBeUndefined();
    } finally {
      await Promise.all(Object.values(clients).map((cl) => cl.close()));
    }
  }, 180_000);

  it('a missing HAProxy fails at once, naming it; a frontend port in use fails before any node starts', async () => {
    const env = { ...process.env, ABACUS_CACHE_DIR: path.join(tmp, 'cache'), ABACUS_LOG_LEVEL: 'warn' };
    await expect(startLocalCluster({ config, nodes: 1, workDir: path.join(tmp, 'missing'), httpPort: 0, haproxyBin: path.join(tmp, 'no-such-haproxy'), env })).rejects.toThrow(/no-such-haproxy is not an executable file \(ENOENT\)/);
    // a port HAProxy cannot bind (held by a socket without SO_REUSEPORT): found before any node starts
    // (a port taken after that check: cluster-failures.test.ts)
    const workDir = path.join(tmp, 'refused');
    const sockets = new Set<net.Socket>();
    const holder = net.createServer((socket) => void sockets.add(socket));
    await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
    const taken = (holder.address() as net.AddressInfo).port;
    let started: LocalCluster | undefined;
    try {
      const outcome = await startLocalCluster({ config, nodes: 1, workDir, httpPort: taken, env }).then(
        (c) => ((started = c), 'started'),
        (e: unknown) => (e as Error).message,
      );
      expect(outcome).toContain(`haproxy: cannot bind 127.0.0.1:${taken} for the HTTP frontend (address in use)`);
    } finally {
      await started?.stop(2000);
      for (const socket of sockets) socket.destroy();
      await new Promise((r) => holder.close(r));
    }
    const clusterPids = new Set(cluster!.nodes.map((n) => String(n.pid)));
    const leftovers: string[] = [];
    for (const pid of (await fs.readdir('/proc')).filter((d) => /^\d+$/.test(d))) {
      const cmd = (await fs.readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => '')).replaceAll('\0', ' ');
      if (cmd.includes(workDir) || (cmd.includes('abacus.js serve') && cmd.includes(config) && !clusterPids.has(pid))) leftovers.push(`${pid}: ${cmd}`);
    }
    expect(leftovers).toEqual([]);
  }, 120_000);
});
