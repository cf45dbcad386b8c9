/**
 * The esbuild build of the dashboard page's script (`dashboard/main.ts` → one minified IIFE with
 * chart.js, ES2020 for current browsers). Shared by `build-dashboard.ts` and the test that the
 * committed bundle is up to date. Deterministic for a given esbuild and chart.js version.
 */
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

/** The bundle's text. @throws what esbuild throws on a compile error (with its messages). */
export async function buildDashboardBundle(): Promise<string> {
  const result = await build({
    entryPoints: [fileURLToPath(new URL('../dashboard/main.ts', import.meta.url))],
    bundle: true,
    minify: true,
    format: 'iife',
    target: 'es2020',
    platform: 'browser',
    write: false,
    legalComments: 'eof',
    logLevel: 'silent',
    absWorkingDir: fileURLToPath(new URL('..', import.meta.url)),
  });
  const file = result.outputFiles[0];
  if (file === undefined) throw new Error('esbuild produced no output for dashboard/main.ts');
  return file.text;
}
