/**
 * CPU time of processes from Linux's `/proc` (`proc(5)`: fields 14 and 15 of `/proc/PID/stat`,
 * utime and stime, in clock ticks of 1/100 s on Linux's usual `CLK_TCK`). The benchmarks use it
 * to say where a machine's cores went: the client, the server's front end, its executors.
 * Elsewhere than Linux every figure is NaN.
 */
import fs from 'node:fs/promises';

/** Clock ticks per second of `/proc/PID/stat` (`getconf CLK_TCK`: 100 on Linux x86-64 and arm64). */
const TICKS_PER_S = 100;

/** Fields of `/proc/PID/stat` after the command name (which may hold spaces), or undefined when unreadable. */
async function statFields(pid: number): Promise<string[] | undefined> {
  try {
    const stat = await fs.readFile(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return undefined;
  }
}

/** CPU time (user + system) of process `pid` so far, ms; NaN when it cannot be read. */
export async function processCpuMs(pid: number): Promise<number> {
  const f = await statFields(pid);
  // after the name: state is field 3 (index 0), utime field 14 (index 11), stime field 15 (index 12)
  return f === undefined ? NaN : ((Number(f[11]) + Number(f[12])) * 1000) / TICKS_PER_S;
}

/** Pids of the live direct children of `pid` (field 4 of each `/proc/N/stat`); empty when `/proc` cannot be read. */
export async function childPids(pid: number): Promise<number[]> {
  let entries: string[];
  try {
    entries = await fs.readdir('/proc');
  } catch {
    return [];
  }
  const out: number[] = [];
  for (const e of entries) {
    if (!/^\d+$/.test(e)) continue;
    const f = await statFields(Number(e));
    if (f !== undefined && Number(f[1]) === pid) out.push(Number(e));
  }
  return out;
}

/** CPU time so far of a server process and of its children (its executors), ms each. */
export interface TreeCpuMs {
  readonly selfMs: number;
  /** Sum over the children alive now, keyed by pid (a child that exits between two samples drops out). */
  readonly childrenMs: ReadonlyMap<number, number>;
}

/** Sample `pid` and its direct children. */
export async function treeCpuMs(pid: number): Promise<TreeCpuMs> {
  const childrenMs = new Map<number, number>();
  for (const c of await childPids(pid)) childrenMs.set(c, await processCpuMs(c));
  return { selfMs: await processCpuMs(pid), childrenMs };
}

/**
 * CPU ms spent between two samples of one tree: `selfMs` and `childrenMs` (summed over the
 * children present in both samples; a restarted executor's new process is not counted).
 */
export function treeCpuDelta(before: TreeCpuMs, after: TreeCpuMs): { selfMs: number; childrenMs: number } {
  let children = 0;
  for (const [pid, ms] of after.childrenMs) {
    const was = before.childrenMs.get(pid);
    if (was !== undefined) children += ms - was;
  }
  return { selfMs: after.selfMs - before.selfMs, childrenMs: children };
}
