import { configDefaults, defineConfig } from 'vitest/config';

/** Tests that load the whole machine (a 10× overload storm) run alone, after the rest (groupOrder 1), so that they do not slow the others down. */
const ALONE = ['test/serve/overload.test.ts', 'test/serve/overload-admission.test.ts'];

export default defineConfig({
  test: {
    testTimeout: 120_000,
    hookTimeout: 300_000,
    pool: 'forks',
    maxWorkers: 2,
    // onnxruntime's usage telemetry off in tests too, as `bin/abacus.js` sets it for the CLI
    env: { ORT_DISABLE_TELEMETRY: '1' },
    projects: [
      { extends: true, test: { name: 'main', include: ['test/**/*.test.ts'], exclude: [...configDefaults.exclude, ...ALONE] } },
      { extends: true, test: { name: 'alone', include: ALONE, sequence: { groupOrder: 1 } } },
    ],
  },
});
