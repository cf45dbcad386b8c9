/**
 * `npm run build:cli` (and `npm ci` / `npm install`, as the `prepare` script): bundle the CLI's
 * sources into `.cache/cli/` of this checkout with esbuild, so that `bin/abacus.js` starts
 * without tsx's loader (docs/design.md#cli-start-up). Each module loaded through tsx's
 * hooks costs a millisecond or two, and `abacus serve` loads about 290 ESM modules (145 of
 * `src/`): importing it took 0.7 s through tsx and 0.3 s bundled, plus 0.2 s to register tsx
 * (2-core development machine, load ~1.5, 2026-12-02).
 *
 * `src/cli/run.ts` is the entry, with the executor process and the worker threads
 * (`src/bundle.ts`, `BUNDLE_ENTRIES`), which code running from the bundle starts from there too;
 * the command modules `run.ts` imports on demand become chunks, so a command loads only its own
 * code. The npm packages stay external (loaded from `node_modules`).
 * Every other file a module finds next to itself through `import.meta.url` (the `.proto`,
 * reference CSVs, dashboard assets) stays where it is: each module's
 * `import.meta.url` is replaced by its source file's URL, so the bundle belongs to this checkout
 * (`bin/cli-bundle.js` uses it only when built from the same path, and only while its inputs keep
 * the modification times recorded here).
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build, type Plugin } from 'esbuild';
import { BUNDLE_DIR, BUNDLE_MANIFEST, inputTimes } from '../bin/cli-bundle.js';
import { BUNDLE_ENTRIES } from '../src/bundle.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** Replaces `import.meta.url` in every TypeScript module by its source file's URL (file docs). */
const sourceUrls: Plugin = {
  name: 'source-import-meta-url',
  setup(b) {
    b.onLoad({ filter: /\.ts$/ }, async (args) => {
      const text = await fs.promises.readFile(args.path, 'utf8');
      return { contents: text.replaceAll('import.meta.url', JSON.stringify(pathToFileURL(args.path).href)), loader: 'ts' };
    });
  },
};

const outdir = path.join(ROOT, BUNDLE_DIR);
// Built beside it, then swapped in: a CLI running from the bundle (a server restarting an
// executor, starting a codec thread) keeps finding its entries while this runs, and a failed
// build leaves the previous bundle as it was (`bin/cli-bundle.js` decides whether it is fresh).
const staging = `${outdir}.building-${process.pid}`;
// Taken before the build reads a source: a file saved while it runs leaves the bundle stale.
const builtAtMs = Date.now();
const inputs = inputTimes(ROOT);
await fs.promises.rm(staging, { recursive: true, force: true });
try {
  await build({
    entryPoints: Object.fromEntries(Object.entries(BUNDLE_ENTRIES).map(([name, source]) => [name, path.join(ROOT, 'src', source)])),
    define: { ABACUS_CLI_BUNDLE_DIR: JSON.stringify(outdir) },
    outdir: staging,
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    packages: 'external',
    // stack traces name the sources' lines; the sources are in the checkout, so the maps need
    // not carry them (a third of the size, and less for Node to read at each start)
    sourcemap: 'linked',
    sourcesContent: false,
    logLevel: 'warning',
    plugins: [sourceUrls],
  });
} catch {
  // esbuild has printed its errors
  await fs.promises.rm(staging, { recursive: true, force: true });
  process.stderr.write('abacus: the CLI bundle was not built\n');
  process.exit(1);
}
await fs.promises.writeFile(path.join(staging, BUNDLE_MANIFEST), `${JSON.stringify({ root: ROOT, builtAtMs, inputs })}\n`);
const previous = `${outdir}.previous-${process.pid}`;
await fs.promises.rename(outdir, previous).catch((err: NodeJS.ErrnoException) => {
  if (err.code !== 'ENOENT') throw err;
});
await fs.promises.rename(staging, outdir);
await fs.promises.rm(previous, { recursive: true, force: true });
process.stdout.write(`abacus: CLI bundle written to ${path.relative(ROOT, outdir)}\n`);
