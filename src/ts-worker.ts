/**
 * A `worker_threads` Worker running a TypeScript module. The sources run through tsx's ESM
 * loader (`bin/abacus.js`), which a thread inherits neither from its parent's loader nor from
 * its `--import`: the thread registers tsx itself, then imports `entry`. Where a CLI bundle may be
 * used (`bundle.ts`: running from it, or a fresh one of this checkout), a thread whose entry is
 * bundled starts from there instead. Used by the
 * HTTP codec threads (`serve/http/offload.ts`) and the reproduction pool (`reproduce/pool.ts`).
 */
import { Worker, type ResourceLimits } from 'node:worker_threads';
import { bundledEntry } from './bundle.ts';

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
  const limits = options.resourceLimits === undefined ? {} : { resourceLimits: options.resourceLimits };
  // a usable CLI bundle: the thread starts from its bundled entry, no loader needed
  const bundled = bundledEntry(entry);
  // (source maps on, as in the parent: a thread does not inherit `process.setSourceMapsEnabled`)
  if (bundled !== undefined) {
    return new Worker(bundled, { ...limits, execArgv: [...process.execArgv, '--enable-source-maps'], workerData: { data: options.data } });
  }
  return new Worker(BOOT, {
    eval: true,
    ...limits,
    workerData: { tsxApi: import.meta.resolve('tsx/esm/api'), entry: entry.href, data: options.data },
  });
}
