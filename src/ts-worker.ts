/**
 * A `worker_threads` Worker running a TypeScript module. The sources run through tsx's ESM
 * loader (`bin/abacus.js`), which a thread inherits neither from its parent's loader nor from
 * its `--import`: the thread registers tsx itself, then imports `entry`. Used by the HTTP codec
 * threads (`serve/http/offload.ts`) and the reproduction pool (`reproduce/pool.ts`).
 */
import { Worker, type ResourceLimits } from 'node:worker_threads';

/** Code of a thread: register tsx's loader, then load the entry (CommonJS, `eval`). */
const BOOT = `
const { workerData } = require('node:worker_threads');
import(workerData.tsxApi).then((tsx) => { tsx.register(); return import(workerData.entry); });
`;

/**
 * Start a thread running `entry` (a `.ts` file URL).
 * @param data given to the entry as `workerData.data` (structured clone)
 * @param resourceLimits the thread's heap limits [V8's defaults]
 */
export function startTsWorker(entry: URL, options: { readonly data?: unknown; readonly resourceLimits?: ResourceLimits } = {}): Worker {
  return new Worker(BOOT, {
    eval: true,
    ...(options.resourceLimits === undefined ? {} : { resourceLimits: options.resourceLimits }),
    workerData: { tsxApi: import.meta.resolve('tsx/esm/api'), entry: entry.href, data: options.data },
  });
}
