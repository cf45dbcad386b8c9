/**
 * House rules that hold for the whole repository: every `docs/<page>.md` a source, test, bench or
 * script file mentions exists (a page that moves must not leave its readers behind; links
 * between the pages themselves are checked in `quickstart.test.ts`), and no source, test or
 * documentation file is over 600 lines.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = path.resolve(import.meta.dirname, '..');
const tracked = (...patterns: string[]): string[] =>
  execFileSync('git', ['ls-files', '--cached', '--others', '--exclude-standard', '--', ...patterns], { cwd: ROOT, encoding: 'utf8' })
    .split('\n')
    .filter((f) => f !== '' && existsSync(path.join(ROOT, f)));

describe('house rules', () => {
  it('every docs/<page>.md the code mentions exists', () => {
    const missing: string[] = [];
    for (const file of tracked('src', 'test', 'bench', 'scripts')) {
      if (!/\.(ts|mts|js|proto|yaml)$/.test(file)) continue;
      for (const m of readFileSync(path.join(ROOT, file), 'utf8').matchAll(/(?<![\w/])docs\/([\w-]+\.md)/g)) {
        if (!existsSync(path.join(ROOT, 'docs', m[1]!))) missing.push(`${file}: docs/${m[1]}`);
      }
    }
    expect(missing).toEqual([]);
  });

  it('no source, test or documentation file is over 600 lines', () => {
    const long = tracked('src', 'test', 'bench', 'scripts', 'dashboard', 'docs', 'README.md')
      .filter((f) => /\.(ts|mts|js|md|css|html)$/.test(f))
      .map((f) => ({ f, lines: readFileSync(path.join(ROOT, f), 'utf8').split('\n').length - 1 }))
      .filter(({ lines }) => lines > 600)
      .map(({ f, lines }) => `${f}: ${lines}`);
    expect(long).toEqual([]);
  });
});
