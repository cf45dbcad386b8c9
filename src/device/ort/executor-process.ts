/**
 * Entry of an executor child process (forked by `ExecutorHandle` with `--import tsx`, IPC
 * with `serialization: 'advanced'`). Hosts one `SegmentExecutor` and runs its messages
 * strictly one after another in arrival order: two segments of the same service never use
 * the sessions at once, and a `release` takes effect after the runs sent before it.
 *
 * Every `loaded` and `result` message carries the process's resident set size (`rssBytes`), which
 * the parent shows as a gauge and holds against its memory limit (`ExecutorHandle`).
 *
 * The process exits when the parent disconnects (parent gone or device closed) or when its parent
 * process changes (the parent died, even by SIGKILL), so executors never outlive their device. Protocol: `protocol.ts`.
 */
import process from 'node:process';
import { InferenceSession, listSupportedBackends } from 'onnxruntime-node';

// onnxruntime's usage telemetry stays off unless the user's environment says otherwise (read at
// the first session, after this line; `bin/abacus.js` sets the same for the parent).
process.env['ORT_DISABLE_TELEMETRY'] ??= '1';
import { describeError } from '../../errors.ts';
import { ExecutorLoadError, SegmentExecutor, sessionOptions } from './executor.ts';
import type { ChildMessage, FaultMessage, ParentMessage, ProbeMessage } from './protocol.ts';
import { FAULT_EXIT_CODE, STALL_MS } from './protocol.ts';

async function probe(msg: ProbeMessage): Promise<ChildMessage> {
  const backends = listSupportedBackends().map((b) => b.name);
  const ep = msg.session.executionProvider;
  if (!backends.includes(ep)) {
    return { t: 'probe-result', backends, error: `this onnxruntime-node build has no '${ep}' backend (it has: ${backends.join(', ')})` };
  }
  try {
    const session = await InferenceSession.create(msg.model, sessionOptions(msg.session));
    await session.release();
    return { t: 'probe-result', backends };
  } catch (err) {
    return { t: 'probe-result', backends, error: describeError(err) };
  }
}

/** Run an armed fault after the first operator of a segment. */
function injectFault(fault: Exclude<FaultMessage['fault'], 'hold-memory'>): void {
  switch (fault) {
    case 'exit-in-next-segment':
      process.exit(FAULT_EXIT_CODE);
      break;
    case 'stall-in-next-segment':
      // Block the thread like a hung native kernel: no message is answered until the parent kills us.
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, STALL_MS);
      break;
  }
}

/** How often an executor checks that its parent is still there, ms (an orphan lives at most about this long). */
const PARENT_WATCH_MS = 500;

function main(): void {
  const sendRaw = process.send?.bind(process);
  if (!sendRaw) {
    process.exitCode = 2;
    throw new Error('executor-process must be started with an IPC channel (child_process.fork)');
  }
  const send = (m: ChildMessage): void => {
    // A failed send means the parent is gone; 'disconnect' ends this process.
    sendRaw(m, undefined, {}, () => undefined);
  };

  let executor: SegmentExecutor | undefined;
  let armed: Exclude<FaultMessage['fault'], 'hold-memory'> | undefined;
  /** What 'hold-memory' faults allocated: kept referenced until the process ends. */
  const held: Buffer[] = [];
  const rssBytes = (): number => process.memoryUsage.rss();
  /** `global.gc` (the child runs with --expose-gc); undefined without the flag. */
  const gc = (globalThis as { gc?: () => void }).gc;
  let gcEvery = 0;
  let segmentsSinceGc = 0;
  let queue: Promise<void> = Promise.resolve();
  /** Jobs enqueued and not finished (the one running included). */
  let queued = 0;
  /**
   * A due collection runs once the queue is empty: right after a segment's result was sent when
   * nothing waits, else after the jobs queued behind it (a segment waiting to start is not
   * delayed by it), at the latest after 4 × gcEvery segments.
   */
  const collectIfIdle = (): void => {
    // under a queue that never empties, collect anyway after 4 × gcEvery segments
    if (gcEvery > 0 && segmentsSinceGc >= gcEvery && (queued === 0 || segmentsSinceGc >= 4 * gcEvery)) {
      segmentsSinceGc = 0;
      gc?.();
    }
  };
  const enqueue = (job: () => Promise<void>): void => {
    queued++;
    const counted = async (): Promise<void> => {
      try {
        await job();
      } finally {
        queued--;
      }
      collectIfIdle();
    };
    queue = queue.then(counted).catch((err: unknown) => {
      // Defensive: jobs report their own errors; anything reaching here is a bug in the executor.
      process.exitCode = 1;
      throw err;
    });
  };

  process.on('disconnect', () => {
    process.exit(0);
  });
  // Backs up 'disconnect': once the parent is gone (even killed with SIGKILL) this process is
  // re-parented, so a changed ppid ends it too, whatever became of the IPC channel.
  const parentPid = process.ppid;
  setInterval(() => {
    if (process.ppid !== parentPid) process.exit(0);
  }, PARENT_WATCH_MS).unref();

  process.on('message', (raw: unknown) => {
    const msg = raw as ParentMessage;
    switch (msg.t) {
      case 'load':
        enqueue(async () => {
          try {
            executor = await SegmentExecutor.create(msg);
            gcEvery = msg.gcEverySegments;
            if (gcEvery > 0) gc?.(); // warm-up's garbage: RSS after load is then the baseline
            send({ t: 'loaded', rssBytes: rssBytes(), ...(executor.warmupReport === undefined ? {} : { warmup: executor.warmupReport }) });
          } catch (err) {
            const error = err instanceof ExecutorLoadError ? err.wire : { code: 'invalid_model' as const, message: describeError(err) };
            send({ t: 'load-failed', error });
          }
        });
        break;
      case 'run':
        enqueue(async () => {
          if (!executor) {
            send({ t: 'result', reqId: msg.reqId, ok: false, error: { code: 'device_failure', message: `query ${msg.queryId}: executor has no model loaded` } });
            return;
          }
          const fault = armed;
          armed = undefined;
          const hooks = fault ? { afterOperator: () => injectFault(fault) } : {};
          const result = await executor.run(msg, hooks);
          send({ ...result, rssBytes: rssBytes() });
          segmentsSinceGc++; // collected once idle (collectIfIdle)
        });
        break;
      case 'release':
        enqueue(() => {
          executor?.release(msg.queryId);
          return Promise.resolve();
        });
        break;
      case 'stats':
        enqueue(() => {
          send({ t: 'stats', reqId: msg.reqId, keptQueries: executor?.keptQueryIds() ?? [], sessionThreads: executor?.sessionThreadCounts() ?? [] });
          return Promise.resolve();
        });
        break;
      case 'fault':
        // Queued like a run, so it arms the first segment sent after it.
        enqueue(() => {
          // 'hold-memory' acts at once (filled, so every page is resident); the others arm the next segment
          if (msg.fault === 'hold-memory') held.push(Buffer.alloc(msg.bytes ?? 0, 1));
          else armed = msg.fault;
          return Promise.resolve();
        });
        break;
      case 'probe':
        enqueue(async () => {
          send(await probe(msg));
        });
        break;
    }
  });
}

main();
