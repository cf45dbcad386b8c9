/**
 * The import graph of `src/` keeps the layers of docs/design.md#layers: each folder
 * imports only the folders below it (the table here), so the front end reaches devices only
 * through the runtime, the predictor trains without the profiler, the runtime reports nothing
 * itself, and the assembly of a deployment (`deployment/`: config → services, predictor,
 * device, serving backend) sits under the CLI, never importing it back; `cli/` only parses
 * arguments and prints. No module imports itself back through others (no cycle), `src/cli/` included.
 *
 * Imports are read from the sources (static `import … from`, `export … from` and `import(…)`
 * with a relative specifier), type-only ones included: a layer must not even name another's
 * types. Shown able to fail on a synthetic graph.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const SRC = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'src');

/** Folders of src/ (and root files, by name) each folder may import; anything not listed is forbidden. */
const ALLOWED: Readonly<Record<string, readonly string[]>> = {
  clock: [],
  workload: ['clock', 'rng.ts', 'errors.ts'],
  model: ['errors.ts', 'fs.ts', 'ort-tensor.ts', 'tensor.ts', 'log.ts'],
  device: ['threads.ts', 'clock', 'model', 'errors.ts', 'log.ts', 'ort-tensor.ts', 'rng.ts', 'stats.ts', 'tensor.ts', 'fs.ts', 'bundle.ts'],
  predict: ['threads.ts', 'model', 'errors.ts', 'log.ts', 'rng.ts', 'stats.ts', 'fs.ts'],
  profile: ['threads.ts', 'clock', 'device', 'model', 'predict', 'errors.ts', 'fs.ts', 'rng.ts', 'stats.ts', 'log.ts'],
  schedule: ['threads.ts', 'clock', 'predict', 'errors.ts', 'log.ts', 'stats.ts'],
  runtime: ['threads.ts', 'clock', 'device', 'model', 'predict', 'schedule', 'workload', 'errors.ts', 'tensor.ts', 'stats.ts', 'log.ts'],
  serve: ['threads.ts', 'clock', 'model', 'runtime', 'schedule', 'workload', 'errors.ts', 'log.ts', 'tensor.ts', 'stats.ts', 'ts-worker.ts'],
  report: ['runtime', 'stats.ts', 'errors.ts'],
  deployment: ['threads.ts', 'clock', 'device', 'model', 'predict', 'profile', 'schedule', 'runtime', 'serve', 'workload', 'errors.ts', 'fs.ts', 'log.ts', 'rng.ts', 'stats.ts', 'tensor.ts'],
  reproduce: ['threads.ts', 'clock', 'device', 'model', 'predict', 'profile', 'report', 'rng.ts', 'runtime', 'schedule', 'workload', 'errors.ts', 'stats.ts', 'ts-worker.ts'],
};

const IMPORT = /(?:^|[\s;])(?:import|export)\s[^'"`;]*?from\s*['"](\.[^'"]+)['"]|import\(\s*['"](\.[^'"]+)['"]\s*\)/g;

/** Every `.ts` module of `dir`, by path relative to `dir`, with the modules it imports (relative paths, resolved). */
function readGraph(dir: string): Map<string, Set<string>> {
  const graph = new Map<string, Set<string>>();
  const walk = (d: string): void => {
    for (const e of fs.readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith('.ts')) {
        const deps = new Set<string>();
        for (const m of fs.readFileSync(p, 'utf8').matchAll(IMPORT)) deps.add(path.relative(dir, path.resolve(path.dirname(p), m[1] ?? m[2]!)));
        graph.set(path.relative(dir, p), deps);
      }
    }
  };
  walk(dir);
  return graph;
}

/** Top-level folder (or root file name) of a path relative to src/. */
const top = (rel: string): string => rel.split(path.sep)[0]!;

function layerViolations(graph: Map<string, Set<string>>): string[] {
  const out: string[] = [];
  for (const [from, deps] of graph) {
    const allowed = ALLOWED[top(from)];
    if (allowed === undefined) continue; // cli, root files: may import anything below them
    for (const to of deps) {
      if (top(to) !== top(from) && !allowed.includes(top(to))) out.push(`${from} → ${to}`);
    }
  }
  return out.sort();
}

/** Strongly connected components with more than one module (Tarjan). */
function cycles(graph: Map<string, Set<string>>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const out: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, next);
    low.set(v, next++);
    stack.push(v);
    onStack.add(v);
    for (const w of graph.get(v) ?? []) {
      if (!graph.has(w)) continue;
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const c: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        c.push(w);
      } while (w !== v);
      if (c.length > 1) out.push(c.sort());
    }
  };
  for (const v of graph.keys()) if (!index.has(v)) visit(v);
  return out;
}

describe('the import graph of src/', () => {
  const graph = readGraph(SRC);

  it('reads the sources (a sanity check of the scan)', () => {
    expect(graph.size).toBeGreaterThan(100);
    expect(graph.get(path.join('runtime', 'runtime.ts'))).toContain(path.join('schedule', 'controller.ts'));
  });

  it('each folder imports only the layers below it', () => {
    expect(layerViolations(graph)).toEqual([]);
  });

  it('no cycle', () => {
    expect(cycles(graph)).toEqual([]);
  });

  it('fails on a back-arrow and on a cycle (synthetic graph)', () => {
    const bad = new Map<string, Set<string>>([
      [path.join('serve', 'a.ts'), new Set([path.join('device', 'device.ts')])],
      [path.join('runtime', 'x.ts'), new Set([path.join('runtime', 'y.ts')])],
      [path.join('runtime', 'y.ts'), new Set([path.join('runtime', 'x.ts')])],
      [path.join('device', 'device.ts'), new Set()],
    ]);
    expect(layerViolations(bad)).toEqual([`${path.join('serve', 'a.ts')} → ${path.join('device', 'device.ts')}`]);
    expect(cycles(bad)).toEqual([[path.join('runtime', 'x.ts'), path.join('runtime', 'y.ts')]]);
  });
});
