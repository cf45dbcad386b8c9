// The CLI's prebuilt bundle (docs/design.md#cli-start-up): where it lives and whether it
// may be used. Plain JavaScript, Node's modules only: bin/abacus.js reads it before any
// TypeScript loader is registered. The build is scripts/build-cli.ts.
import fs from 'node:fs';
import path from 'node:path';

/** The bundle's folder, relative to the repository root. */
export const BUNDLE_DIR = path.join('.cache', 'cli');
/** Its entry (the bundled `src/cli/run.ts`), in that folder. */
export const BUNDLE_ENTRY = 'run.js';
/** What the build records (`{ root, builtAtMs, inputs }`, `inputs` from `inputTimes`), in that folder. */
export const BUNDLE_MANIFEST = 'build.json';

/** Files outside `src/` that shape the bundle: a change to one makes it stale too. */
export const BUILD_INPUTS = Object.freeze(['package.json', 'tsconfig.json', path.join('scripts', 'build-cli.ts')]);

/**
 * The modification time (ms) of every file the bundle is built from: each file under `src/`
 * (recursively) and `BUILD_INPUTS`, by path relative to `root`. The build records it before
 * reading a source; the bundle is fresh while it is the same: an edited, added, deleted or
 * renamed file, or one put back with an older time (`cp -p`, `rsync -a`, `tar x`), differs.
 * @param {string} root the repository root
 * @returns {Record<string, number>}
 */
export function inputTimes(root) {
  /** @type {Record<string, number>} */
  const times = {};
  /** @param {string} dir */
  const walk = (dir) => {
    for (const entry of fs.readdirSync(path.join(root, dir), { withFileTypes: true })) {
      const rel = path.join(dir, entry.name);
      if (entry.isDirectory()) walk(rel);
      else times[rel] = fs.statSync(path.join(root, rel)).mtimeMs;
    }
  };
  walk('src');
  for (const file of BUILD_INPUTS) times[file] = fs.statSync(path.join(root, file)).mtimeMs;
  return times;
}

/**
 * The path of this checkout's CLI bundle entry when it may be used, else undefined: the
 * environment does not set `ABACUS_NO_BUNDLE` (to anything but `0`), the bundle and its manifest exist, it was built
 * from `root` (the sources' URLs are baked into it), and its inputs (`inputTimes`) are as they
 * were when its build started, none modified since. Never throws: anything unreadable means
 * "no bundle", and the CLI runs its sources through tsx.
 * @param {string} root the repository root
 * @returns {string | undefined}
 */
export function freshBundle(root) {
  if (process.env.ABACUS_NO_BUNDLE && process.env.ABACUS_NO_BUNDLE !== '0') return undefined;
  try {
    const dir = path.join(root, BUNDLE_DIR);
    const manifest = JSON.parse(fs.readFileSync(path.join(dir, BUNDLE_MANIFEST), 'utf8'));
    const entry = path.join(dir, BUNDLE_ENTRY);
    const recorded = manifest.inputs;
    if (manifest.root !== root || typeof manifest.builtAtMs !== 'number' || typeof recorded !== 'object' || recorded === null || !fs.existsSync(entry)) return undefined;
    const now = inputTimes(root);
    const names = Object.keys(now);
    if (names.length !== Object.keys(recorded).length) return undefined;
    return names.every((name) => recorded[name] === now[name] && now[name] < manifest.builtAtMs) ? entry : undefined;
  } catch {
    return undefined;
  }
}
