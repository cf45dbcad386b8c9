// The CLI's prebuilt bundle (docs/design.md#cli-start-up): where it lives and whether it
// may be used. Plain JavaScript, Node's modules only: bin/abacus.js reads it before any
// TypeScript loader is registered. The build is scripts/build-cli.ts.
import fs from 'node:fs';
import path from 'node:path';

/** The bundle's folder, relative to the repository root. */
export const BUNDLE_DIR = path.join('.cache', 'cli');
/** Its entry (the bundled `src/cli/run.ts`), in that folder. */
export const BUNDLE_ENTRY = 'run.js';
/** What the build records (`{ root, builtAtMs }`), in that folder. */
export const BUNDLE_MANIFEST = 'build.json';

/**
 * Whether any file under `dir` (recursively) was modified at or after `sinceMs`.
 * @param {string} dir
 * @param {number} sinceMs
 * @returns {boolean}
 */
function changedSince(dir, sinceMs) {
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory() ? changedSince(p, sinceMs) : fs.statSync(p).mtimeMs >= sinceMs) return true;
  }
  return false;
}

/**
 * The path of this checkout's CLI bundle entry when it may be used, else undefined: the
 * environment does not set `ABACUS_NO_BUNDLE`, the bundle and its manifest exist, it was built
 * from `root` (the sources' URLs are baked into it), and no file under `src/` nor
 * `package.json` changed since its build started. Never throws: anything unreadable means
 * "no bundle", and the CLI runs its sources through tsx.
 * @param {string} root the repository root
 * @returns {string | undefined}
 */
export function freshBundle(root) {
  if (process.env.ABACUS_NO_BUNDLE) return undefined;
  try {
    const dir = path.join(root, BUNDLE_DIR);
    const manifest = JSON.parse(fs.readFileSync(path.join(dir, BUNDLE_MANIFEST), 'utf8'));
    const entry = path.join(dir, BUNDLE_ENTRY);
    if (manifest.root !== root || typeof manifest.builtAtMs !== 'number' || !fs.existsSync(entry)) return undefined;
    if (fs.statSync(path.join(root, 'package.json')).mtimeMs >= manifest.builtAtMs) return undefined;
    return changedSince(path.join(root, 'src'), manifest.builtAtMs) ? undefined : entry;
  } catch {
    return undefined;
  }
}
