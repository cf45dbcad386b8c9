/**
 * The CLI's prebuilt bundle (docs/design.md "CLI start-up"): `freshBundle` uses a bundle only
 * when it was built from the same checkout and nothing under `src/` (nor `package.json`) changed
 * since, and the CLI answers the same with and without it.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { BUNDLE_DIR, BUNDLE_ENTRY, BUNDLE_MANIFEST, freshBundle } from '../bin/cli-bundle.js';
import { ABACUS_BIN } from './helpers/cli.ts';

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

  beforeEach(() => {
    savedNoBundle = process.env.ABACUS_NO_BUNDLE;
    delete process.env.ABACUS_NO_BUNDLE;
    root = fs.mkdtempSync(path.join(os.tmpdir(), 'abacus-cli-bundle-'));
    fs.mkdirSync(path.join(root, 'src', 'cli'), { recursive: true });
    fs.writeFileSync(path.join(root, 'src', 'cli', 'run.ts'), 'export {};\n');
    fs.writeFileSync(path.join(root, 'src', 'a.ts'), 'export {};\n');
    fs.writeFileSync(path.join(root, 'package.json'), '{}\n');
    fs.mkdirSync(path.join(root, BUNDLE_DIR), { recursive: true });
    fs.writeFileSync(path.join(root, BUNDLE_DIR, BUNDLE_ENTRY), 'export {};\n');
    fs.writeFileSync(path.join(root, BUNDLE_DIR, BUNDLE_MANIFEST), JSON.stringify({ root, builtAtMs }));
    for (const f of ['src/cli/run.ts', 'src/a.ts', 'package.json']) touch(path.join(root, f), -60);
  });
  afterEach(() => {
    fs.rmSync(root, { recursive: true, force: true });
    if (savedNoBundle === undefined) delete process.env.ABACUS_NO_BUNDLE;
    else process.env.ABACUS_NO_BUNDLE = savedNoBundle;
  });

  it('is the entry of a bundle built after every source', () => {
    expect(freshBundle(root)).toBe(path.join(root, BUNDLE_DIR, BUNDLE_ENTRY));
  });

  it('is stale once any file under src/, however deep, or package.json changed after the build began', () => {
    touch(path.join(root, 'src', 'cli', 'run.ts'), 1);
    expect(freshBundle(root)).toBeUndefined();
    touch(path.join(root, 'src', 'cli', 'run.ts'), -60);
    fs.writeFileSync(path.join(root, 'src', 'new.ts'), 'export {};\n');
    touch(path.join(root, 'src', 'new.ts'), 0);
    expect(freshBundle(root)).toBeUndefined();
    touch(path.join(root, 'src', 'new.ts'), -1);
    expect(freshBundle(root)).toBeDefined();
    touch(path.join(root, 'package.json'), 5);
    expect(freshBundle(root)).toBeUndefined();
  });

  it('is not used when built in another checkout, missing, unreadable, or when ABACUS_NO_BUNDLE is set', () => {
    const manifest = path.join(root, BUNDLE_DIR, BUNDLE_MANIFEST);
    fs.writeFileSync(manifest, JSON.stringify({ root: '/elsewhere', builtAtMs }));
    expect(freshBundle(root)).toBeUndefined();
    fs.writeFileSync(manifest, '{ not json');
    expect(freshBundle(root)).toBeUndefined();
    fs.writeFileSync(manifest, JSON.stringify({ root, builtAtMs }));
    expect(freshBundle(root)).toBeDefined();
    process.env.ABACUS_NO_BUNDLE = '1';
    expect(freshBundle(root)).toBeUndefined();
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
