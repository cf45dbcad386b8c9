/** Small helpers over an executor child process: its output tail, exit description, liveness, and sends that never reject. */
import type { ChildProcess } from 'node:child_process';
import { describeError } from '../../errors.ts';
import type { ParentMessage } from './protocol.ts';

/** Keeps the last `limit` characters a child wrote to stdout/stderr. */
export class OutputTail {
  private buffer = '';
  constructor(private readonly limit: number) {}
  attach(child: ChildProcess): void {
    const push = (chunk: Buffer): void => {
      this.buffer = (this.buffer + chunk.toString('utf8')).slice(-this.limit);
    };
    child.stdout?.on('data', push);
    child.stderr?.on('data', push);
  }
  text(): string {
    return this.buffer.trim();
  }
  suffix(): string {
    const t = this.text();
    return t ? `; executor output (tail): ${t}` : '';
  }
}

export function exitDescription(code: number | null, signal: NodeJS.Signals | null): string {
  return signal ? `signal ${signal}` : `exit code ${String(code)}`;
}

export function isAlive(child: ChildProcess): boolean {
  return child.exitCode === null && child.signalCode === null;
}

/**
 * Send a message. Never rejects: resolves `undefined` once the channel took it, or the reason
 * it did not (channel closed, or a value structured clone cannot copy — `child.send` throws
 * that synchronously, before anything is written).
 */
export function sendTo(child: ChildProcess, msg: ParentMessage): Promise<string | undefined> {
  if (!child.connected) return Promise.resolve('the IPC channel is closed');
  return new Promise((resolve) => {
    try {
      child.send(msg, (err) => resolve(err ? describeError(err) : undefined));
    } catch (err) {
      resolve(describeError(err));
    }
  });
}

