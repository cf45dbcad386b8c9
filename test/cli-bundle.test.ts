/**
 * The CLI's prebuilt bundle (docs/design.md "CLI start-up"): `freshBundle` uses a bundle only
 * when it was built from the same checkout and its inputs (the files under `src/`, `package.json`,
 * `tsconfig.json`, the build script) are as they were when it was built, and the CLI answers the
 * same with and without it; code running the sources starts its children from a fresh bundle too.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BUILD_INPUTS, BUNDLE_DIR, BUNDLE_ENTRY, BUNDLE_MANIFEST, freshBundle, inputTimes } from '../bin/cli-bundle.js';
import { ABACUS_BIN } from './helpers/cli.ts';
import { bundledEntry } from '../src/bundle.ts';

const run = promisify(execFile);

describe('freshBundle (bin/cli-bundle.js)', () => {
  let root: string;
  const builtAtMs = Date.parse('2026-06-01T12:00:00Z');
  /** Set a file's modification time, seconds relative to the build. */
  const touch = (file: string, secondsAfterBuild: number): void => {
    const at = new Date(builtAtMs + secondsAfterBuild * 1000);
    fs.utimesSync(file, at, at);
  };
  let savedNoBundle: string | undefined;
  /** Record the checkout as it is now as the bundle's build inputs. */
  const writeManifest = (manifest: object = { root, builtAtMs, inputs: inputTimes(root) }): void => {
    fs.writeFileSync(path.join(root, BUNDLE_DIR, BUNDLE_MANIFEST), JSON.stringify(manifest));
  };

  beforeEach(() => {
    savedNoBundle = process.env.ABACUS_NO_BUNDLE;
    delete process.env.ABACUS_NO_BUNDLE;
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'abacus-cli-bundle-'));
    fs.mkdirSync(path.join(root, 'src', 'cli'), { recursive: true });
    fs.writeFileSync(path.join(root, 'src', 'cli', 'run.ts'), 'export {};\n');
    fs.writeFileSync(path.join(root, 'src', 'a.ts'), 'export {};\n');
    for (const f of BUILD_INPUTS) {
      fs.mkdirSync(path.dirname(path.join(root, f)), { recursive: true });
      fs.writeFileSync(path.join(root, f), '{}\n');
    }
    fs.mkdirSync(path.join(root, BUNDLE_DIR), { recursive: true });
    fs.writeFileSync(path.join(root, BUNDLE_DIR, BUNDLE_ENTRY), 'export {};\n');
    for (const f of ['src/cli/run.ts', 'src/a.ts', ...BUILD_INPUTS]) touch(path.join(root, f), -60);
    writeManifest();
  });
  afterEach(() => {
    fs.rmSync(root, { recursive: true, force: true });
    if (savedNoBundle === undefined) delete process.env.ABACUS_NO_BUNDLE;
    else process.env.ABACUS_NO_BUNDLE = savedNoBundle;
  });

  it('is the entry of a bundle built after every source', () => {
    expect(freshBundle(root)).toBe(path.join(root, BUNDLE_DIR, BUNDLE_ENTRY));
  });

  it('is stale once any file under src/, however deep, or a build input outside it changed after the build began', () => {
    touch(path.join(root, 'src', 'cli', 'run.ts'), 1);
    expect(freshBundle(root)).toBeUndefined();
    touch(path.join(root, 'src', 'cli', 'run.ts'), -60);
    expect(freshBundle(root)).toBeDefined();
    for (const f of BUILD_INPUTS) {
      touch(path.join(root, f), 5);
      expect(freshBundle(root)).toBeUndefined();
      touch(path.join(root, f), -60);
    }
    expect(freshBundle(root)).toBeDefined();
  });

  it('is stale once a source is added, deleted, renamed or put back with an older time', () => {
    const a = path.join(root, 'src', 'a.ts');
    fs.writeFileSync(path.join(root, 'src', 'new.ts'), 'export {};\n');
    touch(path.join(root, 'src', 'new.ts'), -1);
    expect(freshBundle(root)).toBeUndefined();
    fs.rmSync(path.join(root, 'src', 'new.ts'));
    expect(freshBundle(root)).toBeDefined();
    fs.renameSync(a, path.join(root, 'src', 'b.ts'));
    expect(freshBundle(root)).toBeUndefined();
    fs.renameSync(path.join(root, 'src', 'b.ts'), a);
    fs.rmSync(a);
    expect(freshBundle(root)).toBeUndefined();
    fs.writeFileSync(a, 'export const changed = 1;\n');
    touch(a, -3600);
    expect(freshBundle(root)).toBeUndefined();
    fs.renameSync(path.join(root, 'src', 'cli'), path.join(root, 'src', 'command'));
    touch(a, -60);
    expect(freshBundle(root)).toBeUndefined();
  });

  it('is not used when built in another checkout, missing, unreadable, or when ABACUS_NO_BUNDLE is set', () => {
    const manifest = path.join(root, BUNDLE_DIR, BUNDLE_MANIFEST);
    const inputs = inputTimes(root);
    writeManifest({ root: '/elsewhere', builtAtMs, inputs });
    expect(freshBundle(root)).toBeUndefined();
    fs.writeFileSync(manifest, '{ not json');
    expect(freshBundle(root)).toBeUndefined();
    writeManifest({ root, builtAtMs });
    expect(freshBundle(root)).toBeUndefined();
    writeManifest({ root, builtAtMs, inputs });
    expect(freshBundle(root)).toBeDefined();
    process.env.ABACUS_NO_BUNDLE = '1';
    expect(freshBundle(root)).toBeUndefined();
    process.env.ABACUS_NO_BUNDLE = '0';
    expect(freshBundle(root)).toBeDefined();
    delete process.env.ABACUS_NO_BUNDLE;
    fs.rmSync(path.join(root, BUNDLE_DIR, BUNDLE_ENTRY));
    expect(freshBundle(root)).toBeUndefined();
    expect(freshBundle(path.join(root, 'no-such-checkout'))).toBeUndefined();
  });
});

describe('abacus with and without the bundle', () => {
  it('prints the same help either way (the bundle when this checkout has a fresh one, else tsx both times)', async () => {
    const outputs: string[] = [];
    for (const noBundle of [false, true]) {
      const env = { ...process.env };
      if (noBundle) env.ABACUS_NO_BUNDLE = '1';
      else delete env.ABACUS_NO_BUNDLE;
      outputs.push((await run(process.execPath, [ABACUS_BIN, '--help'], { env })).stdout);
    }
    expect(outputs[0]).toContain('serve');
    expect(outputs[1]).toBe(outputs[0]);
  });
});

describe('bundledEntry (src/bundle.ts), running the sources', () => {
  const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
  const source = (rel: string): URL => pathToFileURL(path.join(repo, 'src', rel));

  it("starts an entry's children from this checkout's bundle exactly while it is fresh; never a module that is not an entry", () => {
    const fresh = freshBundle(repo) !== undefined;
    const executor = bundledEntry(source('device/ort/executor-process.ts'));
    if (fresh) expect(executor?.href).toBe(pathToFileURL(path.join(repo, BUNDLE_DIR, 'executor-process.js')).href);
    else expect(executor).toBeUndefined();
    expect(bundledEntry(source('serve/http/codec-worker.ts')) !== undefined).toBe(fresh);
    expect(bundledEntry(source('serve/backend.ts'))).toBeUndefined();
    const saved = process.env.ABACUS_NO_BUNDLE;
    process.env.ABACUS_NO_BUNDLE = '1';
    try {
      expect(bundledEntry(source('device/ort/executor-process.ts'))).toBeUndefined();
    } finally {
      if (saved === undefined) delete process.env.ABACUS_NO_BUNDLE;
      else process.env.ABACUS_NO_BUNDLE = saved;
    }
  });
});
