/**
 * How `abacus cluster` (`startLocalCluster`, `src/cli/cluster.ts`) fails, as the user sees it:
 * a frontend port in use or a bad config is a one-line `error:` before anything starts; HAProxy
 * that cannot bind a port taken after that check, or that exits before it serves, is an `error:`
 * quoting its output (or saying `no output`); a node that exits before it is ready is an
 * `error:` quoting its log; while serving, a killed node is a line on stderr (HAProxy routes
 * around it), and the last node or HAProxy ending is an `error:` with exit 1. Nothing is left
 * running. One `sim:a100` node (bert-small) each; the first start profiles into a shared cache.
 *
 * Skipped, with the reason, where /usr/sbin/haproxy is missing (`.ci/run` installs it).
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import fs from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ClusterError, DEFAULT_HAPROXY_BIN, freePort, startLocalCluster } from '../../src/deployment/cluster.ts';
import { ABACUS_BIN, runAbacusInProcess } from '../helpers/cli.ts';

const HAVE_HAPROXY = existsSync(DEFAULT_HAPROXY_BIN);

/**
 * Every node trains its predictor on 500 profiled groups instead of the default 10,000 (the first
 * node start profiles into the shared cache: ~5 s instead of ~19 s at load 5): how the cluster
 * fails does not depend on the predictor, and the QoS target (2 s) is far above any latency.
 */
const PROFILE = ['--profile-samples', '500'];

let tmp: string;
let config: string;
let cacheDir: string;

beforeAll(async () => {
  if (!HAVE_HAPROXY) return;
  tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-cluster-fail-'));
  cacheDir = path.join(tmp, 'cache');
  config = path.join(tmp, 'cluster.yaml');
  await fs.writeFile(config, ['device: sim:a100', 'policy: { name: abacus, drop: true }', 'services:', '  - name: bert', '    model: bert-small', '    qosTargetMs: 2000', '    batchSizes: [1]', '    seqLens: [16]'].join('\n'));
});

afterAll(async () => {
  if (tmp !== undefined) await fs.rm(tmp, { recursive: true, force: true });
});

/** A plain TCP listener on 127.0.0.1 (no SO_REUSEPORT, so HAProxy cannot share its port). */
async function holdPort(port = 0): Promise<{ port: number; close: () => Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((s) => void sockets.add(s));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
  return {
    port: (server.address() as net.AddressInfo).port,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise((r) => server.close(r));
    },
  };
}

/** Whether process `pid` still runs (a zombie does not). */
function alive(pid: number): boolean {
  try {
    return !/^State:\s+Z/m.test(readFileSync(`/proc/${pid}/status`, 'utf8'));
  } catch {
    return false;
  }
}

/** `abacus cluster …` as a child whose output is collected as it comes. */
function startCli(args: readonly string[]): { stdout: () => string; stderr: () => string; code: Promise<number | null>; kill: () => void } {
  const child = spawn(process.execPath, [ABACUS_BIN, 'cluster', '--config', config, ...PROFILE, ...args], { env: { ...process.env, ABACUS_CACHE_DIR: cacheDir, ABACUS_LOG_LEVEL: 'warn' }, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (err += d.toString()));
  const code = new Promise<number | null>((resolve) => child.once('close', (c) => resolve(c)));
  return { stdout: () => out, stderr: () => err, code, kill: () => child.kill('SIGTERM') };
}

describe.skipIf(!HAVE_HAPROXY)(`abacus cluster failures (${HAVE_HAPROXY ? DEFAULT_HAPROXY_BIN : `skipped: ${DEFAULT_HAPROXY_BIN} is missing; apt-get install haproxy`})`, () => {
  it('a missing config is one error line, exit 1, before anything starts', async () => {
    const workDir = path.join(tmp, 'no-config');
    // in this process, as the next: nothing starts (a child's start-up through tsx costs about a second of CPU)
    const r = await runAbacusInProcess(['cluster', ...PROFILE, '--config', path.join(tmp, 'nonexistent.yaml'), '--nodes', '1', '--http-port', '0', '--no-grpc', '--work-dir', workDir], { cacheDir });
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).toMatch(/^error: .*nonexistent\.yaml: cannot read the config: ENOENT[^\n]*\n$/);
    expect(r.stdout).toBe('');
    expect(existsSync(workDir)).toBe(false);
  });

  it('frontend ports in use are an error before any node starts, never "ready"', async () => {
    const http = await holdPort();
    const grpc = await holdPort();
    const workDir = path.join(tmp, 'port-in-use');
    try {
      const r = await runAbacusInProcess(['cluster', ...PROFILE, '--config', config, '--nodes', '1', '--http-port', String(http.port), '--grpc-port', String(grpc.port), '--work-dir', workDir], { cacheDir });
      expect(r.code, r.stderr).toBe(1);
      expect(r.stderr).toBe(`error: haproxy: cannot bind 127.0.0.1:${http.port} for the HTTP frontend, 127.0.0.1:${grpc.port} for the gRPC frontend (address in use); stop what listens there or pick another port (0: any free port)\n`);
      expect(r.stdout).not.toMatch(/ready/);
      expect(existsSync(path.join(workDir, 'node1.log'))).toBe(false);
    } finally {
      await http.close();
      await grpc.close();
    }
  });

  it('a node that exits before it is ready: error quoting its log, exit 1', async () => {
    const bad = path.join(tmp, 'bad-model.yaml');
    await fs.writeFile(bad, (await fs.readFile(config, 'utf8')).replace('bert-small', 'no-such-model'));
    // in this process, as the two below: the node and HAProxy are child processes all the same,
    // and the last two tests run `abacus cluster` itself as one
    const r = await runAbacusInProcess(['cluster', ...PROFILE, '--config', bad, '--nodes', '1', '--http-port', '0', '--no-grpc', '--work-dir', path.join(tmp, 'bad-node')], { cacheDir });
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).not.toMatch(/internal error/);
    expect(r.stderr).toMatch(/error: node node1 exited 1 before it got ready; its output \(last lines of its stdout and .*node1\.log\):\n {2}.*unknown model 'no-such-model'/);
  }, 120_000);

  it('a HAProxy that exits before it serves: error quoting its output, or saying there was none', async () => {
    const r = await runAbacusInProcess(['cluster', ...PROFILE, '--config', config, '--nodes', '1', '--http-port', '0', '--no-grpc', '--haproxy', '/bin/false', '--work-dir', path.join(tmp, 'false')], { cacheDir });
    expect(r.code, r.stderr).toBe(1);
    expect(r.stderr).toMatch(/\nerror: haproxy \(\/bin\/false\) exited 1 before it served; its output: no output \(.*haproxy\.log is empty\)\n$/);
    const noisy = path.join(tmp, 'noisy-haproxy.sh');
    await fs.writeFile(noisy, '#!/bin/sh\necho "first line"\necho "[ALERT] something went wrong" >&2\nexit 3\n', { mode: 0o755 });
    const r2 = await runAbacusInProcess(['cluster', ...PROFILE, '--config', config, '--nodes', '1', '--http-port', '0', '--no-grpc', '--haproxy', noisy, '--work-dir', path.join(tmp, 'noisy')], { cacheDir });
    expect(r2.code, r2.stderr).toBe(1);
    expect(r2.stderr).toContain(`error: haproxy (${noisy}) exited 3 before it served; its output (last lines of ${path.join(tmp, 'noisy', 'haproxy.log')}):\n  first line\n  [ALERT] something went wrong\n`);
  }, 240_000);

  it('a port taken after the check: HAProxy cannot bind, the error quotes its log, the node is stopped', async () => {
    const port = await freePort();
    const workDir = path.join(tmp, 'taken-late');
    let held: Awaited<ReturnType<typeof holdPort>> | undefined;
    const taking: Promise<void>[] = [];
    let nodeUrl: string | undefined;
    try {
      const outcome = await startLocalCluster({
        config,
        nodes: 1,
        workDir,
        httpPort: port,
        serveFlags: PROFILE,
        env: { ...process.env, ABACUS_CACHE_DIR: cacheDir, ABACUS_LOG_LEVEL: 'warn' },
        // node1 is ready and HAProxy not yet started: take the port now
        onLine: (line) => {
          const m = /^node1 ready at (\S+)/.exec(line);
          if (m !== null) {
            nodeUrl = m[1];
            taking.push(holdPort(port).then((h) => void (held = h)));
          }
        },
      }).then(
        async (c) => {
          await c.stop(2000);
          return 'started';
        },
        (e: unknown) => e,
      );
      await Promise.all(taking);
      expect(outcome).toBeInstanceOf(ClusterError);
      const err = outcome as ClusterError;
      expect(err.code).toBe('haproxy_bind');
      expect(err.message).toContain(`haproxy: cannot bind 127.0.0.1:${port} (address in use) — see ${path.join(workDir, 'haproxy.log')}:\n`);
      expect(err.message).toMatch(/\[ALERT\].*cannot bind socket \(Address already in use\)/);
      expect(nodeUrl).toBeDefined();
      await expect(fetch(`${nodeUrl!}/v2/health/ready`)).rejects.toThrow();
    } finally {
      await held?.close();
    }
  }, 120_000);

  it('while serving: a killed node is a stderr line and HAProxy routes around it; the last one is an error, exit 1', async () => {
    const cli = startCli(['--nodes', '2', '--http-port', '0', '--no-grpc', '--work-dir', path.join(tmp, 'kill-nodes')]);
    try {
      await expect.poll(cli.stdout, { timeout: 120_000, interval: 200 }).toMatch(/ready: 2 nodes/);
      const pid = (name: string): number => Number(new RegExp(`${name} pid (\\d+)`).exec(cli.stdout())![1]);
      const haproxyPid = Number(/haproxy pid (\d+)/.exec(cli.stderr())![1]);
      const url = /HTTP (http:\S+)/.exec(cli.stdout())![1]!;
      process.kill(pid('node1'), 'SIGKILL');
      await expect.poll(cli.stderr, { timeout: 30_000, interval: 100 }).toContain('abacus cluster: node node1 exited (signal SIGKILL); 1 of 2 nodes left; HAProxy routes around it\n');
      // still serving through the survivor
      await expect.poll(async () => (await fetch(`${url}/v2/health/ready`)).status, { timeout: 30_000, interval: 200 }).toBe(200);
      process.kill(pid('node2'), 'SIGKILL');
      expect(await cli.code).toBe(1);
      expect(cli.stderr()).toContain('abacus cluster: node node2 exited (signal SIGKILL); 0 of 2 nodes left; none left to serve\n');
      expect(cli.stderr()).toMatch(/\nerror: no node left: the last, node2, exited \(signal SIGKILL\); its output/);
      expect(alive(haproxyPid)).toBe(false);
    } finally {
      cli.kill();
      await cli.code;
    }
  }, 240_000);

  it('while serving: HAProxy ending is an error, exit 1, and the nodes are stopped', async () => {
    const cli = startCli(['--nodes', '1', '--http-port', '0', '--no-grpc', '--work-dir', path.join(tmp, 'kill-haproxy')]);
    try {
      await expect.poll(cli.stdout, { timeout: 120_000, interval: 200 }).toMatch(/ready: 1 nodes/);
      const nodePid = Number(/node1 pid (\d+)/.exec(cli.stdout())![1]);
      process.kill(Number(/haproxy pid (\d+)/.exec(cli.stderr())![1]), 'SIGKILL');
      expect(await cli.code).toBe(1);
      expect(cli.stderr()).toMatch(/\nerror: haproxy \(\/usr\/sbin\/haproxy\) exited \(signal SIGKILL\) while serving; its output/);
      expect(alive(nodePid)).toBe(false);
    } finally {
      cli.kill();
      await cli.code;
    }
  }, 240_000);
});
