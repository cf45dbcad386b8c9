#!/usr/bin/env node
// Entry point of the `abacus` CLI. The sources are TypeScript: `npm ci` bundles them into
// .cache/cli/ (scripts/build-cli.ts), which starts in about half the time; while that bundle is
// missing or older than a file under src/, they run through tsx's loader instead, so
// `npx abacus …` always runs the code as it is (docs/design.md#cli-start-up).
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { freshBundle } from './cli-bundle.js';

// onnxruntime's usage telemetry (a queue of events under ~/.cache/Microsoft/DeveloperTools and a
// /tmp/mat-debug-PID.log per process) stays off unless the user set ORT_DISABLE_TELEMETRY
// themselves; executor processes inherit it (docs/devices.md "Telemetry").
process.env.ORT_DISABLE_TELEMETRY ??= '1';
const bundle = freshBundle(path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..'));
if (bundle !== undefined) {
  // stack traces name the sources, not the bundle's lines (its source maps sit beside it)
  process.setSourceMapsEnabled(true);
  const { main } = await import(pathToFileURL(bundle).href);
  await main(process.argv);
} else {
  const { register } = await import('tsx/esm/api');
  register();
  const { main } = await import('../src/cli/run.ts');
  await main(process.argv);
}
