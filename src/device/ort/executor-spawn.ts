/**
 * Starting onnxruntime executor children (docs/design.md#device, docs/devices.md): the fork of
 * `executor-process.ts` under tsx's ESM loader with V8-serialized IPC, and the throwaway child
 * that probes an execution provider before a device relies on it.
 *
 * Owns no process beyond a call: `spawnExecutorProcess` hands the child to its caller
 * (`ExecutorHandle` owns it from then on); `probeExecutionProvider` kills its probe child before
 * it returns. Inputs: the session options and one model's ONNX bytes (probe). Outputs: the
 * child, or the backends the onnxruntime-node build lists and the provider's error, if any.
 */
import { fork } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { exitDescription, isAlive, OutputTail, sendTo } from './child-io.ts';
import type { ChildMessage, SessionConfig } from './protocol.ts';
import { bundledEntry } from '../../bundle.ts';

/** Characters of child stdout/stderr kept for error messages and logs. */
export const OUTPUT_TAIL_CHARS = 2000;

const EXECUTOR_ENTRY = fileURLToPath(new URL('./executor-process.ts', import.meta.url));

/**
 * Fork an executor child. Children do not inherit the parent's TS loader (vitest, tsx's
 * `register()`), so tsx's ESM loader is passed explicitly as `--import <file URL>`; where a
 * CLI bundle may be used (`bundledEntry`: running from it, or a fresh one of this checkout), the
 * child starts from the bundled entry without it.
 */
export function spawnExecutorProcess(): ChildProcess {
  // a usable CLI bundle (`bundle.ts`): the child starts from its bundled entry, no loader
  const bundled = bundledEntry(pathToFileURL(EXECUTOR_ENTRY));
  // (with its source maps, so that its stack traces name the sources as the parent's do)
  const startFlags = bundled === undefined ? ['--import', pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href] : ['--enable-source-maps'];
  return fork(bundled === undefined ? EXECUTOR_ENTRY : fileURLToPath(bundled), [], {
    // --expose-gc: the executor collects garbage every `gcEverySegments` segments (protocol.ts)
    execArgv: [...startFlags, '--expose-gc'],
    serialization: 'advanced',
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
}

/**
 * Ask a throwaway child whether an execution provider works here: lists the backends of the
 * onnxruntime-node build and creates one session on `model` (ONNX bytes) with `session`.
 * Done in a child so a provider that crashes natively cannot take the caller down.
 * @param timeoutMs how long to wait for the answer (the child is killed afterwards).
 * @returns `error` set (ORT's message, or the timeout) when the provider is unusable.
 */
export async function probeExecutionProvider(session: SessionConfig, model: Uint8Array, timeoutMs: number): Promise<{ backends: readonly string[]; error?: string }> {
  const child = spawnExecutorProcess();
  const tail = new OutputTail(OUTPUT_TAIL_CHARS);
  tail.attach(child);
  let timer: NodeJS.Timeout | undefined;
  try {
    return await new Promise((resolve) => {
      timer = setTimeout(() => resolve({ backends: [], error: `the provider probe did not answer within ${timeoutMs} ms (loadTimeoutMs)${tail.suffix()}` }), timeoutMs);
      child.on('message', (raw: unknown) => {
        const m = raw as ChildMessage;
        if (m.t === 'probe-result') resolve(m.error === undefined ? { backends: m.backends } : { backends: m.backends, error: m.error });
      });
      child.once('close', (code, signal) => resolve({ backends: [], error: `probe process ended (${exitDescription(code, signal)})${tail.suffix()}` }));
      child.once('error', (err) => resolve({ backends: [], error: `probe process failed: ${err.message}` }));
      void sendTo(child, { t: 'probe', session, model }).then((failure) => {
        if (failure !== undefined) resolve({ backends: [], error: `the probe could not be sent: ${failure}` });
      });
    });
  } finally {
    clearTimeout(timer);
    if (isAlive(child)) child.kill('SIGKILL');
  }
}
