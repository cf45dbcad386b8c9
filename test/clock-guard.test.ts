/**
 * Guard for "one scheduler, two clocks" (docs/design.md#two-clocks): nothing in the time-dependent
 * folders reads wall time or sets real timers directly; they take a `Clock` (src/clock).
 *
 * Two independent checks: the scoped eslint rules in eslint.config.js, and the source scan
 * below (which also runs where lint is skipped). Both are shown able to fail on synthetic
 * offending code. Folders that do not exist yet are simply empty; whatever is there is checked.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ESLint, Linter } from 'eslint';
import tseslint from 'typescript-eslint';
import { afterAll, describe, expect, it } from 'vitest';

const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

/** Folders (relative to the repository root) whose code must go through a Clock. */
const GUARDED_DIRS = ['src/schedule', 'src/runtime', 'src/workload', 'src/device/sim'];

interface Pattern {
  readonly name: string;
  readonly re: RegExp;
  /** Matched against code with comments and string literals blanked, or comments only. */
  readonly on: 'code' | 'codeWithStrings';
}

const TIMER_MODULE = String.raw`(?:node:)?(?:timers|timers/promises|perf_hooks)`;

/** The same things eslint.config.js restricts for these folders. */
const PATTERNS: readonly Pattern[] = [
  { name: 'Date.now', re: /\bDate\s*\.\s*now\b/g, on: 'code' },
  { name: 'new Date()', re: /\bnew\s+Date\s*\(\s*\)/g, on: 'code' },
  { name: 'Date() call', re: /(?<![\w$.])(?<!\bnew\s+)Date\s*\(/g, on: 'code' },
  { name: 'performance', re: /(?<![\w$.])performance\s*\./g, on: 'code' },
  { name: 'real timer', re: /(?<![\w$.])(?:setTimeout|setInterval|setImmediate)\b/g, on: 'code' },
  { name: 'real timer', re: /\b(?:globalThis|global)\s*\.\s*(?:setTimeout|setInterval|setImmediate|performance)\b/g, on: 'code' },
  { name: 'process.hrtime/uptime', re: /\bprocess\s*\.\s*(?:hrtime|uptime)\b/g, on: 'code' },
  { name: 'timers/perf_hooks import', re: new RegExp(String.raw`\bfrom\s*['"]${TIMER_MODULE}['"]`, 'g'), on: 'codeWithStrings' },
  {
    name: 'timers/perf_hooks import',
    re: new RegExp(String.raw`\b(?:import|require)\s*\(\s*['"]${TIMER_MODULE}['"]`, 'g'),
    on: 'codeWithStrings',
  },
];

/**
 * Blank (to spaces, keeping newlines so offsets keep their line) the comments of a TS source,
 * and in `code` also the text of string and template literals (not the `${…}` expressions).
 * Regex literals are not recognized; one containing a quote can hide code up to the end of its
 * line — eslint still sees it.
 */
function blankSource(source: string): { code: string; codeWithStrings: string } {
  const code = source.split('');
  const withStrings = source.split('');
  const blankCode = (k: number): void => {
    if (source[k] !== '\n') code[k] = ' ';
  };
  const blankBoth = (k: number): void => {
    blankCode(k);
    if (source[k] !== '\n') withStrings[k] = ' ';
  };
  const n = source.length;
  /** Brace depth at which each open template `${` began. */
  const templateStack: number[] = [];
  let depth = 0;

  /** Scan template text from `i`; returns the index after the closing backtick or after `${`. */
  const templateText = (start: number): number => {
    let i = start;
    while (i < n) {
      const c = source[i];
      if (c === '\\') {
        blankCode(i);
        blankCode(i + 1);
        i += 2;
      } else if (c === '`') {
        return i + 1;
      } else if (c === '$' && source[i + 1] === '{') {
        templateStack.push(depth);
        depth++;
        return i + 2;
      } else {
        blankCode(i);
        i++;
      }
    }
    return n;
  };

  let i = 0;
  while (i < n) {
    const c = source[i];
    const d = source[i + 1];
    if (c === '/' && d === '/') {
      while (i < n && source[i] !== '\n') blankBoth(i++);
    } else if (c === '/' && d === '*') {
      const end = source.indexOf('*/', i + 2);
      const stop = end < 0 ? n : end + 2;
      while (i < stop) blankBoth(i++);
    } else if (c === "'" || c === '"') {
      i++;
      while (i < n && source[i] !== c && source[i] !== '\n') {
        if (source[i] === '\\') blankCode(i++);
        blankCode(i++);
      }
      i++;
    } else if (c === '`') {
      i = templateText(i + 1);
    } else if (c === '{') {
      depth++;
      i++;
    } else if (c === '}') {
      depth--;
      i++;
      if (templateStack.length > 0 && depth === templateStack[templateStack.length - 1]) {
        templateStack.pop();
        i = templateText(i);
      }
    } else {
      i++;
    }
  }
  return { code: code.join(''), codeWithStrings: withStrings.join('') };
}

/** Direct wall-time / real-timer uses in one file, as `file:line: what — source line`, in line order. */
function scanSource(file: string, source: string): string[] {
  const views = blankSource(source);
  const lines = source.split('\n');
  const hits: { line: number; text: string }[] = [];
  for (const pattern of PATTERNS) {
    const text = views[pattern.on];
    for (const m of text.matchAll(pattern.re)) {
      const line = text.slice(0, m.index).split('\n').length;
      hits.push({ line, text: `${file}:${line}: ${pattern.name} — ${(lines[line - 1] ?? '').trim()}` });
    }
  }
  hits.sort((a, b) => a.line - b.line || a.text.localeCompare(b.text));
  return hits.map((h) => h.text);
}

/** Scan every `.ts` file under the guarded folders of `root` (missing folders are empty). */
function scanTree(root: string, dirs: readonly string[] = GUARDED_DIRS): { files: string[]; violations: string[] } {
  const files: string[] = [];
  for (const dir of dirs) {
    const abs = path.join(root, dir);
    if (!fs.existsSync(abs)) continue;
    for (const entry of fs.readdirSync(abs, { recursive: true, encoding: 'utf8' })) {
      const full = path.join(abs, entry);
      if (/\.[cm]?ts$/.test(entry) && fs.statSync(full).isFile()) files.push(path.relative(root, full).split(path.sep).join('/'));
    }
  }
  files.sort();
  const violations = files.flatMap((f) => scanSource(f, fs.readFileSync(path.join(root, f), 'utf8')));
  return { files, violations };
}

describe('clock guard: source scan', () => {
  it('finds no direct wall-time or real-timer use in src/{schedule,runtime,workload,device/sim}', () => {
    const { violations } = scanTree(REPO_ROOT);
    expect(violations, `use the Clock passed in (src/clock) instead:\n${violations.join('\n')}`).toEqual([]);
  });

  it('flags each forbidden pattern, naming the line', () => {
    const source = [
      "import { setTimeout as wait } from 'node:timers/promises';", // 1
      "import { performance as perf } from 'perf_hooks';", // 2
      'const a = Date.now();', // 3
      'const b = new Date();', // 4
      'const c = Date();', // 5
      'const d = performance.now();', // 6
      'setTimeout(() => {}, 5);', // 7
      'const e = setInterval(tick, 1);', // 8
      'setImmediate(go);', // 9
      'globalThis.setTimeout(go, 1);', // 10
      'const f = process.hrtime.bigint();', // 11
      "const g = await import('node:timers');", // 12
      'const h = `${Date.now()} ms`;', // 13
    ].join('\n');
    const hits = scanSource('src/runtime/bad.ts', source);
    const lines = hits.map((h) => Number(/^src\/runtime\/bad\.ts:(\d+):/.exec(h)?.[1]));
    expect([...new Set(lines)]).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]);
    expect(hits).toContain('src/runtime/bad.ts:3: Date.now — const a = Date.now();');
  });

  it('ignores comments, strings, Clock calls and Date used as a value type or formatter', () => {
    const source = [
      '/** Never call Date.now() or setTimeout here; use the clock. */',
      '// performance.now() would break determinism',
      "const msg = 'Date.now() and setTimeout(…) are banned';",
      'const tpl = `setImmediate is banned: ${clock.now()} ms`;',
      'clock.setTimer(5, () => {});',
      'await clock.sleep(1);',
      'const stamp = new Date(startEpochMs + clock.now()).toISOString();',
      'const t = Date.parse(text);',
      'const perf = { performance: 1 }; const setTimeoutMs = 4; socket.setTimeout(5);',
      "import { x } from './timers.ts';",
    ].join('\n');
    expect(scanSource('src/runtime/ok.ts', source)).toEqual([]);
  });

  describe('on a synthetic tree', () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'abacus-clock-guard-'));
    afterAll(() => fs.rmSync(root, { recursive: true, force: true }));

    it('passes when the folders are missing, and fails naming file:line when one offends', () => {
      expect(scanTree(root)).toEqual({ files: [], violations: [] });
      fs.mkdirSync(path.join(root, 'src/device/sim/deep'), { recursive: true });
      fs.writeFileSync(path.join(root, 'src/device/sim/deep/engine.ts'), 'export const t0 = 1;\n// fine\nexport const t1 = performance.now();\n');
      fs.writeFileSync(path.join(root, 'src/device/sim/ok.ts'), 'export const ok = 1;\n');
      const { files, violations } = scanTree(root);
      expect(files).toEqual(['src/device/sim/deep/engine.ts', 'src/device/sim/ok.ts']);
      expect(violations).toEqual(['src/device/sim/deep/engine.ts:3: performance — export const t1 = performance.now();']);
    });
  });
});

describe('clock guard: eslint rules', () => {
  const RESTRICTING_RULES = ['no-restricted-globals', 'no-restricted-properties', 'no-restricted-syntax', 'no-restricted-imports'];

  it('are configured for every guarded folder and not for src/clock', async () => {
    const eslint = new ESLint({ cwd: REPO_ROOT });
    for (const dir of GUARDED_DIRS) {
      const config = (await eslint.calculateConfigForFile(`${dir}/any/file.ts`)) as Linter.Config;
      for (const rule of RESTRICTING_RULES) expect(config.rules?.[rule], `${rule} for ${dir}`).toBeDefined();
    }
    const clockConfig = (await eslint.calculateConfigForFile('src/clock/wall.ts')) as Linter.Config;
    expect(clockConfig.rules?.['no-restricted-globals']).toBeUndefined();
  });

  it('report the synthetic offending code line by line', async () => {
    const eslint = new ESLint({ cwd: REPO_ROOT });
    const config = (await eslint.calculateConfigForFile('src/runtime/loop.ts')) as Linter.Config;
    const rules = Object.fromEntries(RESTRICTING_RULES.map((r) => [r, config.rules![r]!]));
    const source = [
      "import { setTimeout as wait } from 'node:timers/promises';", // 1
      'export const a = Date.now();', // 2
      'export const b = new Date();', // 3
      'export const c = performance.now();', // 4
      'setTimeout(() => {}, 5);', // 5
      'globalThis.setImmediate(() => {});', // 6
      'export const d = process.hrtime.bigint();', // 7
      'export const ok = new Date(5).getTime() + Date.parse("2020-01-01");', // 8
      'export { wait };', // 9
    ].join('\n');
    const messages = new Linter({ configType: 'flat' }).verify(
      source,
      [{ files: ['**/*.ts'], languageOptions: { parser: tseslint.parser }, rules }],
      'src/runtime/loop.ts',
    );
    expect(messages.filter((m) => m.fatal === true)).toEqual([]);
    expect([...new Set(messages.map((m) => m.line))]).toEqual([1, 2, 3, 4, 5, 6, 7]);
  });
});
