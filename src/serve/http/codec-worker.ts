/**
 * Entry of a codec thread (`offload.ts`): runs each job it is sent (`codec-jobs.ts`) and posts
 * `{ seq, result }` back, its byte buffers transferred.
 */
import { parentPort } from 'node:worker_threads';
import { runJob, type CodecJob } from './codec-jobs.ts';

const port = parentPort;
if (port === null) throw new Error('codec-worker.ts runs as a worker thread (offload.ts)');
port.on('message', (message: { seq: number; job: CodecJob }) => {
  const result = runJob(message.job);
  port.postMessage({ seq: message.seq, result }, result.ok ? result.transfer : []);
});
