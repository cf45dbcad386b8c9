/**
 * `abacus serve` as a child process for end-to-end tests: write a config, start the CLI with
 * `--http-port 0 --grpc-port 0` (ephemeral ports, read back from the announced lines), wait for
 * ready, and stop it (SIGTERM, then SIGKILL if it does not exit).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs/promises';
import path from 'node:path';
import { ABACUS_BIN } from '../helpers/cli.ts';

export interface ChildServer {
  readonly child: ChildProcess;
  readonly pid: number;
  /** `http://127.0.0.1:PORT` (`https://…` with `--tls-cert`). */
  readonly httpUrl: string;
  /** `127.0.0.1:PORT` (undefined with `--no-grpc`). */
  readonly grpcAddress: string | undefined;
  readonly stdout: () => string;
  /** The child's stderr so far (empty when it goes to `stderrFile`). */
  readonly stderr: () => string;
  /** Resolves with the exit code (null when killed by a signal). */
  readonly exit: Promise<number | null>;
  /** SIGTERM; SIGKILL after `killAfterMs` [15000] if still running. Resolves with the exit code. */
  stop(killAfterMs?: number): Promise<number | null>;
}

/** A config file in `dir` from YAML lines; returns its path. */
export async function writeConfig(dir: string, name: string, lines: readonly string[]): Promise<string> {
  const file = path.join(dir, name);
  await fs.writeFile(file, `${lines.join('\n')}\n`);
  return file;
}

/**
 * Start `abacus serve --config CONFIG --host 127.0.0.1 --http-port 0 --grpc-port 0 …flags`
 * with `ABACUS_CACHE_DIR=cacheDir`, and wait (up to `readyTimeoutMs`) for the ready line.
 * @throws Error with the child's output when it exits or does not get ready in time.
 */
export async function startChildServer(config: string, options: { cacheDir: string; flags?: readonly string[]; readyTimeoutMs?: number; logLevel?: string; stderrFile?: string }): Promise<ChildServer> {
  // The logs go to a file when asked: the server's pino writes are synchronous, and a pipe to a
  // busy test process would stall the server's event loop whenever the pipe is full.
  const logFile = options.stderrFile === undefined ? undefined : await fs.open(options.stderrFile, 'w');
  const child = spawn(process.execPath, [ABACUS_BIN, 'serve', '--config', config, '--host', '127.0.0.1', '--http-port', '0', '--grpc-port', '0', ...(options.flags ?? [])], {
    env: { ...process.env, ABACUS_CACHE_DIR: options.cacheDir, ABACUS_LOG_LEVEL: options.logLevel ?? 'warn' },
    stdio: ['ignore', 'pipe', logFile === undefined ? 'pipe' : logFile.fd],
  });
  await logFile?.close();
  let out = '';
  let err = '';
  child.stdout?.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (err += d.toString()));
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const stop = async (killAfterMs = 15_000): Promise<number | null> => {
    if (child.exitCode !== null || child.signalCode !== null) return exit;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), killAfterMs);
    try {
      return await exit;
    } finally {
      clearTimeout(timer);
    }
  };
  const deadline = Date.now() + (options.readyTimeoutMs ?? 120_000);
  try {
    while (!/abacus serve: ready: /.test(out)) {
      if (child.exitCode !== null) throw new Error(`abacus serve exited ${child.exitCode}:\n${out}\n${err}`);
      if (Date.now() > deadline) throw new Error(`abacus serve did not get ready in time:\n${out}\n${err}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  } catch (e) {
    await stop(1000);
    throw e;
  }
  const httpUrl = /HTTP listening on (https?:\/\/127\.0\.0\.1:\d+)/.exec(out)?.[1];
  const grpcAddress = /gRPC listening on (127\.0\.0\.1:\d+)/.exec(out)?.[1];
  if (httpUrl === undefined || child.pid === undefined) {
    await stop(1000);
    throw new Error(`no HTTP listening line: ${out}`);
  }
  return { child, pid: child.pid, httpUrl, grpcAddress, stdout: () => out, stderr: () => err, exit, stop };
}

/** Resident set size of a process in bytes (Linux `/proc/PID/status` VmRSS); undefined elsewhere. */
export async function rssBytes(pid: number): Promise<number | undefined> {
  try {
    const status = await fs.readFile(`/proc/${pid}/status`, 'utf8');
    const kb = /^VmRSS:\s+(\d+)\s+kB/m.exec(status)?.[1];
    return kb === undefined ? undefined : Number(kb) * 1024;
  } catch {
    return undefined;
  }
}

/** CPU time (user + system) a process has used, ms (Linux `/proc/PID/stat`, 100 ticks/s); undefined elsewhere. */
export async function cpuMs(pid: number): Promise<number | undefined> {
  try {
    const stat = await fs.readFile(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) * 10;
  } catch {
    return undefined;
  }
}

/** The value of one Prometheus sample line `name{labels} value` in `text` (0 when absent). */
export function metricValue(text: string, series: string): number {
  for (const line of text.split('\n')) {
    if (line.startsWith(`${series} `)) return Number(line.slice(series.length + 1));
  }
  return 0;
}
