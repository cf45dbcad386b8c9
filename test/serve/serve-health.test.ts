/**
 * `abacus serve` as a child process on `device: ort` with two tiny imported models:
 * - crash loop: one model's executor killed (SIGKILL) several times in a row, each as soon as it
 *   is back. The model goes READY → UNAVAILABLE → READY by itself; its ready endpoint and
 *   `/v2/health/ready` (strict readiness) follow; the restarts are in /metrics; the other model
 *   serves throughout; every request sent meanwhile got exactly one HTTP answer. Then the server
 *   is killed with SIGKILL and its executors end by themselves.
 * - SIGTERM while the first-start profile runs, while a zoo model is built, while a model is
 *   loaded and warmed up: exit 0, and none of its child processes is left; SIGKILL while
 *   profiling: its executors end by themselves.
 * No wall-clock asserts: every wait polls with a generous bound.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { buildSkipNet } from '../fixtures/tiny-models.ts';
import { ABACUS_BIN, cliSandbox } from '../helpers/cli.ts';
import { metricValue, startChildServer, writeConfig } from './child-serve.ts';

const sandbox = cliSandbox('abacus-serve-health-');

/** Import the tiny skip net as `alpha` and `beta` (once). */
let imported: Promise<void> | undefined;
const importModels = (): Promise<void> =>
  (imported ??= (async () => {
    for (const name of ['alpha', 'beta']) {
      const artifact = await buildSkipNet(path.join(sandbox.tmp, `fixture-${name}`), { name });
      const r = await sandbox.inProcess('models', 'import', artifact.modelPath, '--operators', '2', '--name', name);
      expect(r.code, r.stderr).toBe(0);
    }
  })());

/** Poll `cond` every 50 ms until it holds; throws naming `what` after `ms` (a generous bound, not an assertion on time). */
async function until(what: string, cond: () => boolean | Promise<boolean>, ms = 120_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Pids of the processes whose parent is `pid` (Linux /proc). */
async function childrenOf(pid: number): Promise<number[]> {
  const out: number[] = [];
  for (const entry of await fs.readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = await fs.readFile(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) out.push(Number(entry));
    } catch {
      // ended meanwhile
    }
  }
  return out;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

interface LogLine {
  msg?: string;
  service?: string;
  pid?: number;
}

/** The complete JSON lines of a log the server is still writing (a last line without its newline is left for the next read). */
async function logLines(file: string): Promise<LogLine[]> {
  const text = await fs.readFile(file, 'utf8');
  return text
    .slice(0, text.lastIndexOf('\n') + 1)
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as LogLine);
}

/** Consecutive duplicates dropped: the sequence of distinct values seen. */
function runs<T>(xs: readonly T[]): T[] {
  return xs.filter((x, i) => i === 0 || x !== xs[i - 1]);
}

const X = { inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 4, 8, 8], data: new Array<number>(256).fill(0.5) }] };

/**
 * `abacus serve` on `config` (HTTP on an ephemeral port, no gRPC, `--grace-ms 3000`, `extra`) with
 * its cache in `cacheDir`; `output()` is its stdout and stderr so far.
 */
function spawnServe(config: string, cacheDir: string, extra: readonly string[]): { child: ChildProcess; output: () => string; exit: Promise<number | null>; pid: number } {
  const child = spawn(process.execPath, [ABACUS_BIN, 'serve', '--config', config, '--host', '127.0.0.1', '--http-port', '0', '--no-grpc', '--grace-ms', '3000', ...extra], {
    env: { ...process.env, ABACUS_CACHE_DIR: cacheDir, ABACUS_LOG_LEVEL: 'warn' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout?.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (out += d.toString()));
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, output: () => out, exit, pid: child.pid! };
}

/**
 * Start a server, send SIGTERM once `phase` is reached, check exit 0 and that every child it had
 * is gone; logs the phase the signal met (the server may have moved on by then). `building` and
 * `warming up`: zoo model resnet50-small on a fresh cache (built first, then loaded and warmed up
 * at five batch sizes, triton: no predictor); `training`: alpha and beta profiled at a sample
 * count no other test uses (a fresh predictor), signalled once the MLP trains.
 */
async function signalWhile(phase: 'building' | 'warming up' | 'training'): Promise<void> {
  const training = phase === 'training';
  if (training) await importModels();
  const cacheDir = training ? sandbox.cacheDir : path.join(sandbox.tmp, `cache-${phase.replace(' ', '-')}`);
  const services = training ? ['  - model: alpha', '    qosTargetMs: 60000', '  - model: beta', '    qosTargetMs: 60000'] : ['  - model: resnet50-small', '    qosTargetMs: 60000', '    batchSizes: [1, 2, 4, 8, 16]'];
  const config = await writeConfig(sandbox.tmp, `phase-${phase.replace(' ', '-')}.yaml`, ['device: ort', `policy: ${training ? '{ name: fcfs, drop: false }' : 'triton'}`, 'services:', ...services]);
  const { child, output, exit, pid } = spawnServe(config, cacheDir, training ? ['--profile-samples', '24'] : []);
  try {
    let executors: number[] = [];
    if (phase === 'building') await until('the model build', () => /building resnet50-small/.test(output()));
    else if (training) await until('the training', () => /training an MLP predictor/.test(output()));
    else await until('an executor to start', async () => (executors = await childrenOf(pid)).length >= 1 || /ready: /.test(output()));
    executors = [...new Set([...executors, ...(await childrenOf(pid))])];
    child.kill('SIGTERM');
    expect(await exit, output()).toBe(0);
    await until('no child process of the server left', () => executors.every((p) => !alive(p)), 60_000);
    const met = /while starting \(building models\)/.test(output()) ? 'building' : /ready: /.test(output()) ? 'serving' : /predictor trained in/.test(output()) ? 'loading and warming up' : training ? 'training' : 'loading and warming up';
    console.log(`SIGTERM sent while ${phase}: met the server ${met}, exit 0, ${executors.length} executor(s) gone`);
  } finally {
    if (child.exitCode === null) child.kill('SIGKILL');
  }
}

/** Start a server whose first start profiles (an empty cache, many samples), send `signal` while it profiles, check that it ends and leaves no child. */
async function profileThen(signal: 'SIGTERM' | 'SIGKILL'): Promise<void> {
  await importModels();
  const config = await writeConfig(sandbox.tmp, `profiling-${signal}.yaml`, ['device: ort', 'policy: { name: fcfs, drop: false }', 'services:', '  - model: alpha', '    qosTargetMs: 60000', '  - model: beta', '    qosTargetMs: 60000']);
  const { child, output, exit, pid } = spawnServe(config, sandbox.cacheDir, ['--profile-samples', '100000']);
  try {
    // profiling: the executors of the profiling device run, and samples are being written
    let executors: number[] = [];
    const profiled = async (): Promise<boolean> => {
      const files = await fs.readdir(path.join(sandbox.tmp, 'cache-predictors'), { recursive: true }).catch(() => []);
      return files.some((f) => f.endsWith('profile.csv'));
    };
    await until('the profile to run', async () => /no cached predictor: profiling/.test(output()) && (await profiled()) && (executors = await childrenOf(pid)).length >= 2);
    child.kill(signal);
    const code = await exit;
    if (signal === 'SIGTERM') {
      expect(code).toBe(0);
      expect(output()).toMatch(/abacus serve: stopped/);
    }
    await until('no child process of the server left', () => executors.every((p) => !alive(p)), 60_000);
  } finally {
    if (child.exitCode === null) child.kill('SIGKILL');
  }
}

describe('abacus serve (child process, ort): health follows executor crashes; shutdown in every phase', () => {
  it('crash loop: READY → UNAVAILABLE → READY by itself, endpoints agree, restarts counted, one answer per request; SIGKILL of the server ends its executors', async () => {
    await importModels();
    const config = await writeConfig(sandbox.tmp, 'health.yaml', ['device: ort', 'policy: triton', 'services:', '  - model: alpha', '    qosTargetMs: 60000', '  - model: beta', '    qosTargetMs: 60000']);
    const logFile = path.join(sandbox.tmp, 'health.log');
    const server = await startChildServer(config, { cacheDir: sandbox.cacheDir, flags: ['--grace-ms', '2000', '--no-grpc'], logLevel: 'debug', stderrFile: logFile });
    const url = server.httpUrl;
    const statusOf = async (p: string): Promise<number> => (await fetch(`${url}${p}`)).status;
    const alphaPids = async (): Promise<number[]> => (await logLines(logFile)).filter((l) => l.service === 'alpha' && (l.msg === 'executor loaded' || l.msg === 'executor restarted') && typeof l.pid === 'number').map((l) => l.pid!);
    try {
      expect(await statusOf('/v2/health/ready')).toBe(200);
      // observers: the model's state in the index, its ready endpoint, the server's
      const seen: { state: string; model: number; server: number }[] = [];
      let observing = true;
      const observer = (async () => {
        while (observing) {
          // a server gone (the test failed and stopped it) ends the loop, not the run
          if (server.child.exitCode !== null || server.child.signalCode !== null) return;
          const index = (await (await fetch(`${url}/v2/repository/index`, { method: 'POST' })).json()) as { name: string; state: string }[];
          const state = index.find((m) => m.name === 'alpha')?.state ?? '?';
          seen.push({ state, model: await statusOf('/v2/models/alpha/ready'), server: await statusOf('/v2/health/ready') });
          await new Promise((r) => setTimeout(r, 20));
        }
      })().catch(() => undefined);
      // load: requests to both models, each must get exactly one HTTP answer
      const answers: { model: string; status: number | string }[] = [];
      let loading = true;
      const load = (async () => {
        let i = 0;
        while (loading && server.child.exitCode === null && server.child.signalCode === null) {
          const model = i++ % 2 === 0 ? 'alpha' : 'beta';
          try {
            const r = await fetch(`${url}/v2/models/${model}/infer`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(X) });
            await r.text();
            answers.push({ model, status: r.status });
          } catch (e) {
            answers.push({ model, status: `no answer: ${String(e)}` });
          }
        }
      })();

      // the sequence starts from what the observers read before the first kill
      await until('a first observation', () => seen.length >= 1);
      const kills = 5;
      for (let k = 0; k < kills; k++) {
        let pids: number[] = [];
        await until(`alpha's executor #${k + 1}`, async () => (pids = await alphaPids()).length === k + 1);
        process.kill(pids[k]!, 'SIGKILL'); // as soon as it is back
      }
      // then kill the next executors while they start: failed restarts, tried again after a
      // backoff that doubles each time (250 ms, 500 ms, …). At least two, and on until the
      // observers have read alpha UNAVAILABLE with both endpoints saying not ready: however slow
      // this machine, a long enough backoff holds the state still for a whole observation.
      const spawned = async (): Promise<number[]> => (await logLines(logFile)).filter((l) => l.service === 'alpha' && l.msg === 'executor spawned' && typeof l.pid === 'number').map((l) => l.pid!);
      const observedDown = (): boolean => seen.some((s) => s.state === 'UNAVAILABLE' && s.model !== 200 && s.server !== 200);
      for (let j = 0; j < 2 || (!observedDown() && j < 8); j++) {
        // spawns so far: the first load and one per death (a kill that lands after it loaded is a death too)
        let pids: number[] = [];
        await until(`alpha's executor spawn #${kills + 1 + j}`, async () => (pids = await spawned()).length >= kills + 1 + j);
        process.kill(pids[kills + j]!, 'SIGKILL');
      }
      await until('alpha back', async () => (await alphaPids()).length >= kills + 1);
      await until('alpha READY and the server ready', async () => (await statusOf('/v2/models/alpha/ready')) === 200 && (await statusOf('/v2/health/ready')) === 200);
      const ok = await fetch(`${url}/v2/models/alpha/infer`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(X) });
      expect(ok.status).toBe(200);
      // two more observations: the second began after alpha was seen READY (no wait of a fixed length)
      const seenAtReady = seen.length;
      await until('two more observations', () => seen.length >= seenAtReady + 2);
      observing = false;
      loading = false;
      await Promise.all([observer, load]);

      // the state sequence: READY, then UNAVAILABLE (restarting), then READY again
      const states = runs(seen.map((s) => s.state));
      expect(states[0]).toBe('READY');
      expect(states).toContain('UNAVAILABLE');
      expect(states.at(-1)).toBe('READY');
      expect(states.every((s) => s === 'READY' || s === 'UNAVAILABLE')).toBe(true);
      // the endpoints agree with the state they were read with (strict readiness: the server too)
      const modelReady = runs(seen.map((s) => s.model === 200));
      expect(modelReady).toEqual(expect.arrayContaining([true, false]));
      expect(modelReady.at(-1)).toBe(true);
      expect(seen.some((s) => s.server !== 200)).toBe(true);
      expect(seen.filter((s) => s.state === 'UNAVAILABLE').some((s) => s.model !== 200 && s.server !== 200)).toBe(true);
      // every request got one answer: 200, or 503 while its model was down; beta served throughout
      expect(answers.filter((a) => typeof a.status === 'string')).toEqual([]);
      expect(answers.every((a) => a.status === 200 || a.status === 503)).toBe(true);
      expect(answers.filter((a) => a.model === 'beta').every((a) => a.status === 200)).toBe(true);
      // the restarts and the state are in /metrics
      const metrics = await (await fetch(`${url}/metrics`)).text();
      const lines = await logLines(logFile);
      const restarts = lines.filter((l) => l.service === 'alpha' && l.msg === 'restarting executor').length;
      expect(restarts).toBeGreaterThanOrEqual(kills);
      expect(metricValue(metrics, 'abacus_executor_restarts_total{model="alpha"}')).toBe(restarts);
      expect(lines.some((l) => l.service === 'alpha' && l.msg === 'executor restart failed; retrying after backoff')).toBe(true);
      expect(metricValue(metrics, 'abacus_executor_restarts_total{model="beta"}')).toBe(0);
      expect(metricValue(metrics, 'abacus_model_state{model="alpha",state="READY"}')).toBe(1);
      expect(metricValue(metrics, 'abacus_ready')).toBe(1);
      console.log(`crash loop: ${answers.length} requests (${answers.filter((a) => a.status === 503).length} answered 503), states ${states.join(' → ')}`);

      // SIGKILL of the server: its executors end by themselves (IPC disconnect)
      const executors = await childrenOf(server.pid);
      expect(executors.length).toBeGreaterThanOrEqual(2);
      server.child.kill('SIGKILL');
      await server.exit;
      await until('the executors to end after the server was killed', () => executors.every((p) => !alive(p)), 60_000);
    } finally {
      await server.stop(1000);
    }
  }, 300_000);

  for (const phase of ['building', 'warming up', 'training'] as const) {
    it(`SIGTERM while ${phase}: exit 0, no child process left`, async () => {
      await signalWhile(phase);
    }, 300_000);
  }

  for (const signal of ['SIGTERM', 'SIGKILL'] as const) {
    it(`${signal} during the first-start profile: ${signal === 'SIGTERM' ? 'exit 0, ' : ''}no child process left`, async () => {
      await profileThen(signal);
    }, 300_000);
  }
});
