#!/usr/bin/env node
// Entry point of the `abacus` CLI. The sources are TypeScript run through tsx's loader, so
// `npx abacus …` works right after `npm ci` with no build step.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../src/cli/main.ts');
await main(process.argv);
