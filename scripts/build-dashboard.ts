/**
 * `npm run build:dashboard`: bundle the dashboard page's script (`dashboard/main.ts` with
 * chart.js) into `src/serve/dashboard/assets/dashboard.js` with esbuild — minified, one IIFE,
 * no source map, so the committed file is the same on every machine. The bundle is committed
 * (the server needs no build step and works offline); `test/dashboard-bundle.test.ts` fails
 * when it is out of date. `--check`: exit 1 (and write nothing) when the committed file differs.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { buildDashboardBundle } from './dashboard-bundle.ts';

const out = fileURLToPath(new URL('../src/serve/dashboard/assets/dashboard.js', import.meta.url));
const code = await buildDashboardBundle();
if (process.argv.includes('--check')) {
  let current = '';
  try {
    current = readFileSync(out, 'utf8');
  } catch {
    // missing: out of date
  }
  if (current !== code) {
    process.stderr.write(`${out} is out of date: run npm run build:dashboard\n`);
    process.exit(1);
  }
  process.stdout.write(`${out} is up to date (${code.length} bytes)\n`);
} else {
  writeFileSync(out, code);
  process.stdout.write(`wrote ${out} (${code.length} bytes)\n`);
}
