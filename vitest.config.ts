import { configDefaults, defineConfig } from 'vitest/config';

/** Tests that assert a wall-clock bound of the system under load run alone, after the rest (groupOrder 1). */
const ALONE = ['test/serve/overload.test.ts'];

export default defineConfig({
  test: {
    testTimeout: 120_000,
    hookTimeout: 300_000,
    pool: 'forks',
    maxWorkers: 2,
    projects: [
      { extends: true, test: { name: 'main', include: ['test/**/*.test.ts'], exclude: [...configDefaults.exclude, ...ALONE] } },
      { extends: true, test: { name: 'alone', include: ALONE, sequence: { groupOrder: 1 } } },
    ],
  },
});
