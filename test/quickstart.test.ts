/**
 * End-to-end: the README's quick start "1. Serve your own ONNX model", run as a user would. The
 * commands, the config and the requests are read from README.md itself, so the README and this
 * test cannot drift apart: every `npx abacus …` line runs as `node bin/abacus.js …` in a fresh
 * folder (the user's working directory) with its own model cache; `abacus serve` runs as a child
 * process (on ephemeral ports instead of 8000/8001, and profiling 100 operator groups instead of
 * the default 1,000: that profile was half the file's CPU, and the answers do not depend on the
 * predictor's accuracy); every `curl` line is sent with fetch to that
 * server, with curl's `-H` and `-d` as headers and body; the README's shown answers are compared
 * with the real ones (exactly where they are whole, by their fields where they are cut short).
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { cliSandbox } from './helpers/cli.ts';
import { startChildServer } from './serve/child-serve.ts';

const README = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'README.md');
const SECTION = '### 1. Serve your own ONNX model';

/** Split one shell command line into words: whitespace-separated, '…' and "…" quoted (no escapes, no variables). */
function shellWords(line: string): string[] {
  const words: string[] = [];
  const re = /'([^']*)'|"([^"]*)"|(\S+)/g;
  for (let m = re.exec(line); m !== null; m = re.exec(line)) words.push(m[1] ?? m[2] ?? m[3]!);
  return words;
}

interface QuickStart {
  /** `npx abacus …` lines before the serve command, as argument lists (without `npx abacus`). */
  readonly setup: string[][];
  /** The serve command's arguments after `serve` (includes `--config FILE`). */
  readonly serve: string[];
  /** The config file's content (the section's `yaml` block). */
  readonly config: string;
  /** `curl …` lines, as words. */
  readonly curls: string[][];
  /** The shown answers: lines of the plain code block after the curl block. */
  readonly answers: string[];
}

/** The quick start's section of the README, split into what a user would type and what they would see. */
function readQuickStart(readme: string): QuickStart {
  const start = readme.indexOf(SECTION);
  if (start < 0) throw new Error(`README.md has no section '${SECTION}'`);
  const next = readme.indexOf('\n### ', start + SECTION.length);
  const text = readme.slice(start, next < 0 ? undefined : next);
  const blocks = [...text.matchAll(/```(\w*)\n([\s\S]*?)```/g)].map((m) => ({ lang: m[1]!, lines: m[2]!.split('\n').filter((l) => l.trim() !== '' && !l.trim().startsWith('#')) }));
  const sh = blocks.filter((b) => b.lang === 'sh').flatMap((b) => b.lines);
  const abacus = sh.filter((l) => l.startsWith('npx abacus ')).map((l) => shellWords(l).slice(2));
  const serveIndex = abacus.findIndex((a) => a[0] === 'serve');
  const config = blocks.find((b) => b.lang === 'yaml');
  const curlBlock = blocks.findIndex((b) => b.lang === 'sh' && b.lines.some((l) => l.startsWith('curl ')));
  const answers = blocks.slice(curlBlock + 1).find((b) => b.lang === '');
  if (serveIndex < 0 || config === undefined || curlBlock < 0 || answers === undefined) throw new Error('README quick start: expected sh blocks with npx abacus … serve and curl lines, a yaml config and a block of answers');
  return {
    setup: abacus.slice(0, serveIndex),
    serve: abacus[serveIndex]!.slice(1),
    config: `${config.lines.join('\n')}\n`,
    curls: sh.filter((l) => l.startsWith('curl ')).map(shellWords),
    answers: answers.lines,
  };
}

/** Send one README curl command (`-s`, `-H 'K: V'`, `-d 'BODY'`, a `localhost:8000/…` URL) to `baseUrl` with fetch; the response text. */
async function curl(words: readonly string[], baseUrl: string): Promise<{ status: number; text: string }> {
  const headers: Record<string, string> = {};
  let body: string | undefined;
  let url: string | undefined;
  for (let i = 1; i < words.length; i++) {
    const w = words[i]!;
    if (w === '-s') continue;
    if (w === '-H') {
      const [k, ...v] = words[++i]!.split(':');
      headers[k!.trim()] = v.join(':').trim();
    } else if (w === '-d') {
      body = words[++i];
    } else if (w.startsWith('localhost:8000/')) {
      url = `${baseUrl}${w.slice('localhost:8000'.length)}`;
    } else {
      throw new Error(`README quick start: curl word '${w}' is not understood by this test`);
    }
  }
  if (url === undefined) throw new Error(`README quick start: curl without a localhost:8000 URL: ${words.join(' ')}`);
  const res = await fetch(url, body === undefined ? { headers } : { method: 'POST', headers, body });
  return { status: res.status, text: await res.text() };
}

describe("README quick start: serve your own ONNX model", () => {
  const sandbox = cliSandbox('abacus-quickstart-', { cwd: true });

  it('imports, configures, serves and answers as the README shows', async () => {
    const qs = readQuickStart(await fs.readFile(README, 'utf8'));
    expect(qs.setup.map((a) => a.slice(0, 2).join(' '))).toEqual(['models export', 'models import', 'models show']);

    for (const args of qs.setup) {
      const r = await sandbox.abacus(...args);
      expect(r.code, `abacus ${args.join(' ')}\n${r.stderr}`).toBe(0);
    }

    const configIndex = qs.serve.indexOf('--config');
    expect(configIndex).toBeGreaterThanOrEqual(0);
    const configFile = path.join(sandbox.tmp, qs.serve[configIndex + 1]!);
    await fs.writeFile(configFile, qs.config);
    const flags = qs.serve.filter((_w, i) => i !== configIndex && i !== configIndex + 1);
    expect(flags).not.toContain('--profile-samples'); // the README's serve command profiles the default number
    flags.push('--profile-samples', '100');

    const server = await startChildServer(configFile, { cacheDir: sandbox.cacheDir, flags, readyTimeoutMs: 240_000 });
    try {
      expect(qs.curls).toHaveLength(qs.answers.length);
      for (const [i, words] of qs.curls.entries()) {
        const { status, text } = await curl(words, server.httpUrl);
        expect(status, text).toBe(200);
        const shown = qs.answers[i]!;
        if (!shown.includes('…')) {
          expect(JSON.parse(text)).toEqual(JSON.parse(shown));
          continue;
        }
        // Cut short in the README (the output values and timings differ per run): compare the fields shown.
        const got = JSON.parse(text) as { model_name: string; model_version: string; parameters: Record<string, number>; outputs: { name: string; datatype: string; shape: number[]; data: number[] }[] };
        const field = (re: RegExp): string | undefined => re.exec(shown)?.[1];
        expect(got.model_name).toBe(field(/"model_name":"([^"]+)"/));
        expect(got.model_version).toBe(field(/"model_version":"([^"]+)"/));
        expect(Object.keys(got.parameters).sort()).toEqual([...shown.matchAll(/"(queue_ms|compute_ms|operator_groups|executed_batch_size)":/g)].map((m) => m[1]).sort());
        const out = got.outputs[0]!;
        expect(out.name).toBe(field(/"outputs":\[\{"name":"([^"]+)"/));
        expect(out.datatype).toBe(field(/"outputs":\[\{"name":"[^"]+","datatype":"([^"]+)"/));
        expect(JSON.stringify(out.shape)).toBe(field(/"outputs":\[\{[^}]*?"shape":(\[[^\]]*\])/));
        expect(out.data).toHaveLength(out.shape.reduce((a, b) => a * b, 1));
        expect(out.data.every(Number.isFinite)).toBe(true);
      }
    } finally {
      expect(await server.stop()).toBe(0);
    }
    const model = /^\s*-?\s*model:\s*(\S+)/m.exec(qs.config)?.[1];
    expect(server.stdout()).toContain(`ready: ${model ?? '?'}`);
  }, 300_000);
});

describe('README and docs/: relative links', () => {
  /** GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces to `-`. */
  const anchor = (heading: string): string => heading.trim().toLowerCase().replace(/[^\p{L}\p{N}_\- ]/gu, '').replace(/ /g, '-');

  it('point at files and headings that exist', async () => {
    const root = path.dirname(README);
    const pages = ['README.md', ...(await fs.readdir(path.join(root, 'docs'))).filter((f) => f.endsWith('.md')).map((f) => path.join('docs', f))];
    const broken: string[] = [];
    for (const page of pages) {
      const text = (await fs.readFile(path.join(root, page), 'utf8')).replace(/```[\s\S]*?```/g, '');
      for (const [, link] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
        if (/^[a-z]+:/i.test(link!)) {
          broken.push(`${page}: ${link!} (a reference outside the repository)`);
          continue;
        }
        const [file, hash] = link!.split('#') as [string, string | undefined];
        const target = file === '' ? path.join(root, page) : path.join(root, path.dirname(page), file);
        const content = await fs.readFile(target, 'utf8').catch(() => undefined);
        if (content === undefined) broken.push(`${page}: ${link!} (no such file)`);
        else if (hash !== undefined && ![...content.matchAll(/^#+\s+(.*)$/gm)].some((m) => anchor(m[1]!) === hash)) broken.push(`${page}: ${link!} (no such heading)`);
      }
    }
    expect(broken).toEqual([]);
  });
});
