/**
 * The generated `haproxy.cfg` (`src/deployment/haproxy.ts`): what it says about health checks,
 * retries, buffers and the gRPC frontend, its argument errors, and that HAProxy 2.6 itself
 * accepts it (`haproxy -c`; skipped with the reason where /usr/sbin/haproxy is missing).
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { DEFAULT_HAPROXY_BIN } from '../../src/deployment/cluster.ts';
import { haproxyConfig, replayableRequestBytes, type HaproxyNode } from '../../src/deployment/haproxy.ts';
import { runAbacus, runAbacusInProcess } from '../helpers/cli.ts';

const run = promisify(execFile);
const HAVE_HAPROXY = existsSync(DEFAULT_HAPROXY_BIN);
const nodes: HaproxyNode[] = [1, 2, 3].map((i) => ({ name: `node${i}`, host: '127.0.0.1', httpPort: 9000 + i, grpcPort: 9100 + i }));

/** The lines of section `name` (`backend abacus_http_nodes`), trimmed, up to the next blank line. */
function section(text: string, name: string): string[] {
  const lines = text.split('\n');
  const at = lines.indexOf(name);
  expect(at, `section ${name}`).toBeGreaterThanOrEqual(0);
  const end = lines.indexOf('', at);
  return lines.slice(at + 1, end === -1 ? undefined : end).map((l) => l.trim()).filter((l) => !l.startsWith('#'));
}

describe('haproxyConfig', () => {
  const text = haproxyConfig({ nodes, httpPort: 8000, grpcPort: 8001, statsPort: 8404 });

  it('health-checks every node on /v2/health/ready and retries 503 and transport failures, never 504', () => {
    const http = section(text, 'backend abacus_http_nodes');
    expect(http).toContain('option httpchk GET /v2/health/ready');
    expect(http).toContain('http-check expect status 200');
    expect(http).toContain('retry-on conn-failure empty-response 503');
    expect(http.filter((l) => l.startsWith('server '))).toEqual(nodes.map((n) => `server ${n.name} 127.0.0.1:${n.httpPort} check inter 1000ms fall 2 rise 2`));
    expect(text).not.toMatch(/retry-on[^\n]*(504|all-retryable-errors|response-timeout)/);
    const defaults = section(text, 'defaults');
    expect(defaults).toContain('option http-buffer-request');
    expect(defaults).toContain('option redispatch 1');
    expect(defaults).toContain('retries 2');
  });

  it('serves gRPC over h2 on both sides, checked over HTTP/1.1 on the node\'s HTTP port', () => {
    expect(section(text, 'frontend abacus_grpc')).toContain('bind 127.0.0.1:8001 proto h2');
    const grpc = section(text, 'backend abacus_grpc_nodes');
    expect(grpc.filter((l) => l.startsWith('server '))).toEqual(nodes.map((n) => `server ${n.name} 127.0.0.1:${n.grpcPort} proto h2 check inter 1000ms fall 2 rise 2 port ${n.httpPort} check-proto h1`));
    expect(grpc).toContain('retry-on conn-failure empty-response');
  });

  it('states the replay buffer: tune.bufsize − tune.maxrewrite', () => {
    expect(section(text, 'global')).toEqual(expect.arrayContaining(['tune.bufsize 1048576', 'tune.maxrewrite 1024']));
    expect(replayableRequestBytes()).toBe(1_048_576 - 1024);
    expect(replayableRequestBytes({ bufsizeBytes: 65_536, maxrewriteBytes: 2048 })).toBe(63_488);
    // a binary-tensor resnet50 request (1×3×224×224 FP32) fits the default
    expect(replayableRequestBytes()).toBeGreaterThan(3 * 224 * 224 * 4 + 4096);
  });

  it('leaves the gRPC frontend out without grpcPort, and HTTP-only nodes out of the gRPC backend', () => {
    const httpOnly = haproxyConfig({ nodes, httpPort: 8000 });
    expect(httpOnly).not.toMatch(/abacus_grpc/);
    const mixed = haproxyConfig({ nodes: [nodes[0]!, { name: 'h', host: '10.0.0.2', httpPort: 8000 }], httpPort: 8000, grpcPort: 8001 });
    expect(section(mixed, 'backend abacus_grpc_nodes').filter((l) => l.startsWith('server '))).toHaveLength(1);
    expect(section(mixed, 'backend abacus_http_nodes').filter((l) => l.startsWith('server '))).toHaveLength(2);
  });

  it('refuses bad arguments naming the field', () => {
    expect(() => haproxyConfig({ nodes: [], httpPort: 8000 })).toThrow(/nodes must name at least one node/);
    expect(() => haproxyConfig({ nodes, httpPort: 70_000 })).toThrow(/httpPort must be a port/);
    expect(() => haproxyConfig({ nodes: [{ ...nodes[0]!, name: 'a b' }], httpPort: 8000 })).toThrow(/nodes\[0\]\.name/);
    expect(() => haproxyConfig({ nodes: [nodes[0]!, nodes[0]!], httpPort: 8000 })).toThrow(/nodes\[1\]\.name 'node1' is repeated/);
    expect(() => haproxyConfig({ nodes: [{ ...nodes[0]!, host: '1.2.3.4\n  server x' }], httpPort: 8000 })).toThrow(/nodes\[0\]\.host/);
    expect(() => haproxyConfig({ nodes, httpPort: 8000, bufsizeBytes: 8192 })).toThrow(/bufsizeBytes must be an integer ≥ 16384/);
    expect(() => haproxyConfig({ nodes, httpPort: 8000, maxrewriteBytes: 1 << 20 })).toThrow(/maxrewriteBytes/);
    expect(() => haproxyConfig({ nodes: [{ name: 'h', host: 'h', httpPort: 1 }], httpPort: 8000, grpcPort: 8001 })).toThrow(/no node has a grpcPort/);
    expect(() => haproxyConfig({ nodes, httpPort: 8000, adminSocket: 'haproxy.sock' })).toThrow(/adminSocket must be an absolute path/);
    expect(() => haproxyConfig({ nodes, httpPort: 8000, adminSocket: '/tmp/a b.sock' })).toThrow(/adminSocket/);
  });

  it('adds a runtime API socket (level user) only when asked', () => {
    expect(text).not.toMatch(/stats socket/);
    expect(section(haproxyConfig({ nodes, httpPort: 8000, adminSocket: '/run/abacus/haproxy.sock' }), 'global')).toContain('stats socket /run/abacus/haproxy.sock mode 600 level user');
  });

  it.skipIf(!HAVE_HAPROXY)(`is accepted by HAProxy 2.6 (haproxy -c)${HAVE_HAPROXY ? '' : ` — skipped: ${DEFAULT_HAPROXY_BIN} is missing`}`, async () => {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-haproxy-cfg-'));
    try {
      const file = path.join(dir, 'haproxy.cfg');
      await fs.writeFile(file, text);
      const { stdout } = await run(DEFAULT_HAPROXY_BIN, ['-c', '-f', file]);
      expect(stdout).toMatch(/Configuration file is valid/);
      await fs.writeFile(file, haproxyConfig({ nodes, httpPort: 8000, grpcPort: 8001, statsPort: 8404, adminSocket: path.join(dir, 'haproxy.sock') }));
      expect((await run(DEFAULT_HAPROXY_BIN, ['-c', '-f', file])).stdout).toMatch(/Configuration file is valid/);
      await fs.writeFile(file, `${text}\nbackend broken\n  retry-on sometimes\n`);
      await expect(run(DEFAULT_HAPROXY_BIN, ['-c', '-f', file])).rejects.toThrow();
    } finally {
      await fs.rm(dir, { recursive: true, force: true });
    }
  });
});

describe('abacus cluster --print-haproxy-config', () => {
  it('prints the config for the --node list (HTTP-only nodes left out of gRPC), and refuses bad nodes with a usage error', async () => {
    const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-cluster-cli-'));
    try {
      const ok = await runAbacus(['cluster', '--print-haproxy-config', '--node', '10.0.0.11:8000:8001', '--node', 'node-b.local:8000', '--http-port', '9000', '--bufsize-bytes', '65536'], { cacheDir: dir });
      expect(ok.code, ok.stderr).toBe(0);
      expect(ok.stdout).toContain('server node1 10.0.0.11:8000 check');
      expect(ok.stdout).toContain('server node2 node-b.local:8000 check');
      expect(ok.stdout).toContain('bind 127.0.0.1:9000');
      expect(ok.stdout).toContain('tune.bufsize 65536');
      expect(section(ok.stdout, 'backend abacus_grpc_nodes').filter((l) => l.startsWith('server '))).toEqual(['server node1 10.0.0.11:8001 proto h2 check inter 1000ms fall 2 rise 2 port 8000 check-proto h1']);
      // the usage errors in this process: a child's start-up through tsx costs about a second of CPU
      const bad = await runAbacusInProcess(['cluster', '--print-haproxy-config', '--node', '10.0.0.11'], { cacheDir: dir });
      expect(bad.code).toBe(2);
      expect(bad.stderr).toMatch(/--node expects HOST:HTTP_PORT\[:GRPC_PORT\], got '10\.0\.0\.11'/);
      const none = await runAbacusInProcess(['cluster', '--print-haproxy-config'], { cacheDir: dir });
      expect(none.code).toBe(2);
      expect(none.stderr).toMatch(/needs at least one --node/);
      const small = await runAbacusInProcess(['cluster', '--print-haproxy-config', '--node', 'h:1', '--bufsize-bytes', '1000'], { cacheDir: dir });
      expect(small.code).toBe(2);
      expect(small.stderr).toMatch(/--bufsize-bytes must be ≥ 16384/);
    } finally {
      await fs.rm(dir, { recursive: true, force: true });
    }
  });
});
