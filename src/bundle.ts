/**
 * The CLI bundle's entries (docs/design.md#cli-start-up). `scripts/build-cli.ts` bundles each
 * module of `BUNDLE_ENTRIES` into `.cache/cli/<name>.js` and defines `ABACUS_CLI_BUNDLE_DIR` as
 * that folder; code running from the bundle then starts its executor processes and worker
 * threads from the bundle too, without tsx's loader. Code running the sources (tsx, vitest) does
 * the same while this checkout's bundle is fresh (`freshBundle` in `bin/cli-bundle.js`: built
 * here, from the sources as they are now); else its children start from their sources through
 * tsx, so an edited source is never shadowed by an old bundle.
 */
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { BUNDLE_DIR, freshBundle } from '../bin/cli-bundle.js';

/** Defined by the bundle's build (esbuild `define`): the bundle's folder. Not defined when running the sources. */
declare const ABACUS_CLI_BUNDLE_DIR: string | undefined;

/** The bundle's entries: output name → module under `src/`. */
export const BUNDLE_ENTRIES: Readonly<Record<string, string>> = Object.freeze({
  run: 'cli/run.ts',
  'executor-process': 'device/ort/executor-process.ts',
  'reproduce-worker': 'cli/reproduce-worker.ts',
  'codec-worker': 'serve/http/codec-worker.ts',
});

const SRC_ROOT = path.dirname(fileURLToPath(import.meta.url));

/**
 * The folder of the bundle children should start from: the one this code runs from, else this
 * checkout's bundle while it is fresh (checked at each call: a walk of `src/`, about 2 ms, once
 * per child started), else undefined.
 */
function bundleDir(): string | undefined {
  if (typeof ABACUS_CLI_BUNDLE_DIR === 'string') return ABACUS_CLI_BUNDLE_DIR;
  const root = path.dirname(SRC_ROOT);
  return freshBundle(root) === undefined ? undefined : path.join(root, BUNDLE_DIR);
}

/**
 * The bundled file URL of the module at `source` (a `.ts` file URL under `src/`) when that
 * module is one of the bundle's entries and a bundle may be used (`bundleDir`): a child started
 * from there skips tsx's loader (an onnxruntime executor: about 0.15 s of CPU to start against
 * 0.5 s through tsx, 2-core machine). Undefined otherwise: start it from its source, through tsx.
 */
export function bundledEntry(source: URL): URL | undefined {
  const relative = path.relative(SRC_ROOT, fileURLToPath(source)).split(path.sep).join('/');
  const name = Object.keys(BUNDLE_ENTRIES).find((n) => BUNDLE_ENTRIES[n] === relative);
  if (name === undefined) return undefined;
  const dir = bundleDir();
  return dir === undefined ? undefined : pathToFileURL(path.join(dir, `${name}.js`));
}
