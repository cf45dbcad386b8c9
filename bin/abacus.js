#!/usr/bin/env node
// Entry point of the `abacus` CLI. The sources are TypeScript run through tsx's loader, so
// `npx abacus …` works right after `npm ci` with no build step.
import { register } from 'tsx/esm/api';

// onnxruntime's usage telemetry (a queue of events under ~/.cache/Microsoft/DeveloperTools and a
// /tmp/mat-debug-PID.log per process) stays off unless the user set ORT_DISABLE_TELEMETRY
// themselves; executor processes inherit it (docs/devices.md "Telemetry").
process.env.ORT_DISABLE_TELEMETRY ??= '1';
register();
const { main } = await import('../src/cli/run.ts');
await main(process.argv);
