/**
 * `abacus serve` as a child process for the benchmarks: start it on a config with ephemeral
 * ports, wait for its ready line, read back the HTTP URL and gRPC address, stop it with SIGTERM.
 * Its JSON log lines go to a file (a pipe that the busy benchmark process does not read fast
 * enough would stall the server's event loop).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ABACUS_BIN = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'bin', 'abacus.js');

export interface BenchServer {
  readonly child: ChildProcess;
  /** `http://127.0.0.1:PORT`. */
  readonly httpUrl: string;
  /** `127.0.0.1:PORT`; undefined with `--no-grpc`. */
  readonly grpcAddress: string | undefined;
  /** SIGTERM, then SIGKILL after `killAfterMs` [10 s]; resolves when it exited. */
  stop(killAfterMs?: number): Promise<void>;
}

/**
 * A node process's command line, pinned to `cpus` with util-linux's `taskset -c` (which execs
 * node: the pid is node's, and its children, the executors, inherit the affinity).
 * @param cpus a CPU list as taskset reads it (`0-3`, `0,2,4-5`); undefined: not pinned.
 * @returns [command, args].
 * @throws RangeError for a list that is not digits, commas and dashes.
 */
export function pinned(cpus: string | undefined, nodeArgs: readonly string[]): [string, string[]] {
  if (cpus === undefined) return [process.execPath, [...nodeArgs]];
  if (!/^\d+(-\d+)?(,\d+(-\d+)?)*$/.test(cpus)) throw new RangeError(`a CPU list is numbers and ranges separated by commas (taskset -c), e.g. '0-3' or '0,2,4-5'; got '${cpus}'`);
  return ['taskset', ['-c', cpus, process.execPath, ...nodeArgs]];
}

/**
 * Start `abacus serve --config CONFIG --host 127.0.0.1 --http-port 0 [--grpc-port 0] …flags`.
 * @param logFile where its stderr (the JSON log) goes
 * @param readyTimeoutMs how long a first start (model build, profiling) may take [30 min]
 * @param cpus pin the server and its executors to these CPUs (`pinned`) [not pinned]; RangeError for a list `pinned` refuses
 * @throws Error quoting its output when it exits before ready or does not get ready in time.
 */
export async function startBenchServer(config: string, options: { logFile: string; flags?: readonly string[]; env?: NodeJS.ProcessEnv; readyTimeoutMs?: number; log?: (s: string) => void; cpus?: string }): Promise<BenchServer> {
  const flags = options.flags ?? [];
  const [command, args] = pinned(options.cpus, [ABACUS_BIN, 'serve', '--config', config, '--host', '127.0.0.1', '--http-port', '0', ...(flags.includes('--no-grpc') ? [] : ['--grpc-port', '0']), ...flags]);
  const handle = await fs.open(options.logFile, 'w');
  const child = spawn(command, args, {
    env: { ...process.env, ...(options.env ?? {}) },
    stdio: ['ignore', 'pipe', handle.fd],
  });
  await handle.close();
  let out = '';
  child.stdout?.on('data', (d: Buffer) => {
    out += d.toString();
    options.log?.(d.toString());
  });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = async (killAfterMs = 10_000): Promise<void> => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), killAfterMs);
    await exited;
    clearTimeout(timer);
  };
  const deadline = Date.now() + (options.readyTimeoutMs ?? 30 * 60_000);
  while (!/abacus serve: ready: /.test(out)) {
    if (child.exitCode !== null || Date.now() > deadline) {
      await stop(1000);
      const tail = (await fs.readFile(options.logFile, 'utf8')).slice(-4000);
      throw new Error(`abacus serve ${child.exitCode !== null ? `exited ${child.exitCode}` : 'did not get ready in time'}:\n${out}\n${tail}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const httpUrl = /HTTP listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(out)?.[1];
  if (httpUrl === undefined) {
    await stop(1000);
    throw new Error(`abacus serve printed no HTTP listening line:\n${out}`);
  }
  return { child, httpUrl, grpcAddress: /gRPC listening on (127\.0\.0\.1:\d+)/.exec(out)?.[1], stop };
}
