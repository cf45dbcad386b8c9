/**
 * The `Dockerfile` (no Docker engine runs here): parsed, and checked against the CLI's own
 * definition of `abacus serve` (`buildProgram`: the ENTRYPOINT + CMD arguments must parse, and
 * EXPOSE must be the ports they give), against the HTTP front end (the health-check path is a
 * route), and the health-check script run against a real HTTP front end (ready → 0, not ready
 * → 1, nothing listening → 1). `.dockerignore` keeps what the image copies.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import type { Command } from 'commander';
import { buildProgram } from '../../src/cli/main.ts';
import type { ServeCliOptions } from '../../src/cli/serve.ts';
import { READY_PATH } from '../../src/deployment/haproxy.ts';
import { createHttpApp } from '../../src/serve/http/app.ts';
import type { InferenceBackend } from '../../src/serve/inference.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const run = promisify(execFile);

interface Instruction {
  readonly op: string;
  readonly args: string;
}
interface Stage {
  readonly from: string;
  readonly name?: string;
  readonly instructions: Instruction[];
}

/** Instructions of a Dockerfile by stage: comments dropped, `\` continuations joined. */
function parseDockerfile(text: string): { args: Instruction[]; stages: Stage[] } {
  const logical: string[] = [];
  let current = '';
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (current === '' && (line === '' || line.startsWith('#'))) continue;
    if (line.endsWith('\\')) current += `${line.slice(0, -1)} `;
    else {
      logical.push(current + line);
      current = '';
    }
  }
  const args: Instruction[] = [];
  const stages: Stage[] = [];
  for (const l of logical) {
    const m = /^(\S+)\s+(.*)$/.exec(l)!;
    const ins = { op: m[1]!.toUpperCase(), args: m[2]!.trim() };
    if (ins.op === 'FROM') {
      const f = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(ins.args)!;
      stages.push({ from: f[1]!, ...(f[2] === undefined ? {} : { name: f[2] }), instructions: [] });
    } else if (stages.length === 0) args.push(ins);
    else stages.at(-1)!.instructions.push(ins);
  }
  return { args, stages };
}

const dockerfile = parseDockerfile(fs.readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8'));
const runtime = dockerfile.stages.at(-1)!;
const last = (op: string): Instruction | undefined => runtime.instructions.filter((i) => i.op === op).at(-1);
/** A JSON (exec form) instruction argument. */
const execForm = (op: string): string[] => {
  const ins = last(op);
  expect(ins, op).toBeDefined();
  const parsed = JSON.parse(ins!.args) as unknown;
  expect(Array.isArray(parsed), `${op} is in exec form (a JSON array)`).toBe(true);
  return parsed as string[];
};

/** Parse `abacus <argv>` with the CLI's program, capturing the serve options instead of serving. */
async function parseServe(argv: readonly string[]): Promise<ServeCliOptions> {
  const program = buildProgram({ out: () => undefined, err: () => undefined, cacheOptions: () => ({}) });
  let captured: ServeCliOptions | undefined;
  const serve = program.commands.find((c: Command) => c.name() === 'serve')!;
  serve.action((opts: ServeCliOptions) => {
    captured = opts;
  });
  await program.parseAsync([...argv], { from: 'user' });
  expect(captured).toBeDefined();
  return captured!;
}

describe('Dockerfile', () => {
  it('is multi-stage on node:20-slim', () => {
    const base = dockerfile.args.find((a) => a.op === 'ARG' && a.args.startsWith('NODE_IMAGE='));
    expect(base?.args).toBe('NODE_IMAGE=node:20-slim');
    expect(dockerfile.stages.length).toBeGreaterThanOrEqual(2);
    for (const s of dockerfile.stages) expect(s.from).toBe('${NODE_IMAGE}');
  });

  it('runs as the unprivileged node user', () => {
    expect(last('USER')?.args).toBe('node');
  });

  it('starts `node bin/abacus.js serve` in exec form, and ENTRYPOINT + CMD parse with the CLI', async () => {
    const entry = execForm('ENTRYPOINT');
    expect(entry).toEqual(['node', 'bin/abacus.js', 'serve']);
    expect(fs.existsSync(path.join(ROOT, entry[1]!))).toBe(true);
    const cmd = execForm('CMD');
    const opts = await parseServe([...entry.slice(2), ...cmd]);
    expect(opts.host).toBe('0.0.0.0');
    expect(fs.existsSync(path.join(ROOT, opts.config))).toBe(true);
    // the ports the image exposes are the ones the server listens on
    const exposed = last('EXPOSE')!.args.split(/\s+/).map(Number).sort();
    expect(exposed).toEqual([opts.httpPort, opts.grpcPort].sort());
  });

  it('health-checks the readiness route on the HTTP port, with node (no curl in slim)', async () => {
    const hc = last('HEALTHCHECK')!.args;
    const cmd = JSON.parse(/CMD\s+(\[.*\])$/.exec(hc)![1]!) as string[];
    expect(cmd[0]).toBe('node');
    const script = fs.readFileSync(path.join(ROOT, cmd[1]!), 'utf8');
    const defaultUrl = new URL(/\?\? '([^']+)'/.exec(script)![1]!);
    const opts = await parseServe(['serve', ...execForm('CMD')]);
    expect(Number(defaultUrl.port)).toBe(opts.httpPort);
    expect(defaultUrl.pathname).toBe(READY_PATH);
    expect(createHttpApp({} as InferenceBackend).hasRoute({ method: 'GET', url: READY_PATH })).toBe(true);
    expect(hc).toMatch(/--start-period=\d+s/);
  });

  it('the health-check script exits 0 when ready, 1 when not ready or not listening', async () => {
    let ready = false;
    const backend = { isReady: () => ready, isLive: () => true } as unknown as InferenceBackend;
    const app = createHttpApp(backend);
    await app.listen({ host: '127.0.0.1', port: 0 });
    const port = (app.server.address() as AddressInfo).port;
    const script = path.join(ROOT, 'deploy', 'docker', 'healthcheck.mjs');
    const check = (url: string): Promise<number> =>
      run(process.execPath, [script], { env: { ...process.env, ABACUS_HEALTH_URL: url } }).then(
        () => 0,
        (e: { code?: number }) => e.code ?? -1,
      );
    try {
      expect(await check(`http://127.0.0.1:${port}${READY_PATH}`)).toBe(1);
      ready = true;
      expect(await check(`http://127.0.0.1:${port}${READY_PATH}`)).toBe(0);
    } finally {
      await app.close();
    }
    expect(await check(`http://127.0.0.1:${port}${READY_PATH}`)).toBe(1);
  });

  it('.dockerignore lets in every path the Dockerfile copies from the context', () => {
    const ignore = fs.readFileSync(path.join(ROOT, '.dockerignore'), 'utf8').split('\n').map((l) => l.trim());
    expect(ignore).toContain('**');
    const copied = dockerfile.stages.flatMap((s) => s.instructions.filter((i) => i.op === 'COPY' && !i.args.startsWith('--from')).flatMap((i) => i.args.split(/\s+/).slice(0, -1)));
    expect(copied.length).toBeGreaterThan(0);
    for (const p of copied) {
      expect(ignore.some((l) => l === `!${p}` || l === `!${p}/`), p).toBe(true);
      expect(fs.existsSync(path.join(ROOT, p)), p).toBe(true);
    }
  });
});
