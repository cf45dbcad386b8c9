/**
 * What an executor child's death means, in words (docs/devices.md#executors-deviceort): the
 * errors its waiting segments, load and stats requests get, the reason the owner hears (lost
 * kept states, health), and the log line — for an unexpected exit, a kill for the segment
 * deadline (`segmentTimeoutMs`), a kill for the memory limit (`memoryLimitBytes`), or `close()`.
 *
 * Pure functions of a `ChildDeath`; `ExecutorHandle` gathers the facts and delivers the results.
 */
import type { AbacusError } from '../../errors.ts';
import { DeviceFailureError, DeviceUnavailableError } from '../../errors.ts';

const MB = 1024 * 1024;

/** `bytes` as mebibytes with one decimal, e.g. "12.5 MB". */
export function mb(bytes: number): string {
  return `${(bytes / MB).toFixed(1)} MB`;
}

/** The facts of one child's end, as the handle saw them. */
export interface ChildDeath {
  readonly service: string;
  /** How it ended: `exitDescription` (exit code or signal) or "spawn failed: …". */
  readonly how: string;
  /** The handle was closed (the end was asked for). */
  readonly closed: boolean;
  /** Killed by the parent because this segment passed `segmentTimeoutMs`; undefined otherwise. */
  readonly deadline: { readonly reqId: number; readonly queryId: string } | undefined;
  /** The segment deadline, ms. */
  readonly segmentTimeoutMs: number;
  /** Killed by the parent because it reported this resident set size, bytes, above the limit; undefined otherwise. */
  readonly rssOverLimitBytes: number | undefined;
  /** The memory limit, bytes. */
  readonly memoryLimitBytes: number;
  /** The child's output tail as a message suffix (`OutputTail.suffix()`, "" when it wrote nothing). */
  readonly outputSuffix: string;
}

function memoryWhy(d: ChildDeath, rss: number): string {
  return `its resident memory ${mb(rss)} exceeded the limit of ${mb(d.memoryLimitBytes)} (executorMemoryLimitMb)`;
}

/** The cause in a few words, for the log and the health reason. */
export function deathSummary(d: ChildDeath): string {
  if (d.deadline !== undefined) return `executor killed: query ${d.deadline.queryId} exceeded segmentTimeoutMs ${d.segmentTimeoutMs} ms`;
  if (d.rssOverLimitBytes !== undefined) return `executor killed: ${memoryWhy(d, d.rssOverLimitBytes)}`;
  return `executor ended unexpectedly (${d.how})`;
}

/** The error of a start whose child ended while loading. */
export function loadErrorOf(d: ChildDeath): AbacusError {
  return d.closed ? new DeviceUnavailableError(`executor of service ${d.service} was closed while loading`) : new DeviceFailureError(`executor of service ${d.service} ended (${d.how}) while loading${d.outputSuffix}`);
}

/** The error of segment `reqId` (query `queryId`, operators [start, end)) that was queued or running in the child. */
export function segmentErrorOf(d: ChildDeath, reqId: number, p: { readonly queryId: string; readonly start: number; readonly end: number }): AbacusError {
  const svc = d.service;
  const ms = d.segmentTimeoutMs;
  if (d.closed) return new DeviceUnavailableError(`device closed while query ${p.queryId} of service ${svc} was running`);
  if (d.deadline !== undefined && reqId === d.deadline.reqId) {
    return new DeviceFailureError(`service ${svc}, query ${p.queryId}: segment [${p.start}, ${p.end}) exceeded segmentTimeoutMs ${ms} ms; its executor was killed (SIGKILL) and is restarting, the query's state is lost`);
  }
  if (d.deadline !== undefined) {
    return new DeviceFailureError(
      `executor of service ${svc} was killed (SIGKILL) while query ${p.queryId} was queued or running, because query ${d.deadline.queryId} exceeded segmentTimeoutMs ${ms} ms; the query's state is lost`,
    );
  }
  if (d.rssOverLimitBytes !== undefined) {
    return new DeviceFailureError(`executor of service ${svc} was killed (SIGKILL) and is restarting while query ${p.queryId} was queued or running: ${memoryWhy(d, d.rssOverLimitBytes)}; the query's state is lost`);
  }
  return new DeviceFailureError(`executor of service ${svc} ended (${d.how}) while running query ${p.queryId}; the query's state is lost${d.outputSuffix}`);
}

/** The error of a stats request the child did not answer. */
export function statsErrorOf(d: ChildDeath): AbacusError {
  return d.closed ? new DeviceUnavailableError(`executor of service ${d.service} was closed before it answered`) : new DeviceFailureError(`executor of service ${d.service} ended (${d.how}) before it answered`);
}

/** Why the service's kept query states are gone (`onStateLost`). */
export function stateLostReasonOf(d: ChildDeath): string {
  const svc = d.service;
  if (d.deadline !== undefined) return `executor of service ${svc} was killed because query ${d.deadline.queryId} exceeded segmentTimeoutMs ${d.segmentTimeoutMs} ms`;
  if (d.rssOverLimitBytes !== undefined) return `executor of service ${svc} was killed: ${memoryWhy(d, d.rssOverLimitBytes)}`;
  return `executor of service ${svc} ended (${d.how})`;
}
