/**
 * The CLI bundle's entries (docs/design.md#cli-start-up). `scripts/build-cli.ts` bundles each
 * module of `BUNDLE_ENTRIES` into `.cache/cli/<name>.js` and defines `ABACUS_CLI_BUNDLE_DIR` as
 * that folder; code running from the bundle then starts its executor processes and worker
 * threads from the bundle too, without tsx's loader. Running the sources (tsx, vitest), the
 * constant is not defined and every child starts from its source through tsx, as before.
 */
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

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
 * The bundled file URL of the module at `source` (a `.ts` file URL under `src/`) when this code
 * runs from the bundle and that module is one of its entries; undefined otherwise (start it
 * from its source, through tsx).
 */
export function bundledEntry(source: URL): URL | undefined {
  if (typeof ABACUS_CLI_BUNDLE_DIR !== 'string') return undefined;
  const relative = path.relative(SRC_ROOT, fileURLToPath(source)).split(path.sep).join('/');
  const name = Object.keys(BUNDLE_ENTRIES).find((n) => BUNDLE_ENTRIES[n] === relative);
  return name === undefined ? undefined : pathToFileURL(path.join(ABACUS_CLI_BUNDLE_DIR, `${name}.js`));
}
