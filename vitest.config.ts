import { configDefaults, defineConfig } from 'vitest/config';

/** Tests that load the whole machine (a 10× overload storm) run alone, after the rest (groupOrder 1), so that they do not slow the others down. */
const ALONE = ['test/serve/overload.test.ts', 'test/serve/overload-admission.test.ts'];

/**
 * In-process unit tests of the runtime, the schedulers, the simulated device, the predictors and
 * tensors: their files share one module graph per worker (`isolate: false`) instead of each
 * importing it afresh. These files hold no module-level state, mock nothing and pass in any order
 * together (`vitest run --project unit`, 35 files, isolated then shared, back to back twice at
 * load 3.0-3.6: 34.2 / 33.4 s -> 26.2 / 26.1 s wall, 60 / 59 s -> 47 / 47 s CPU). Other files
 * keep the default isolation.
 */
const SHARED_MODULES = ['test/runtime*.test.ts', 'test/schedule*.test.ts', 'test/device-sim*.test.ts', 'test/predict-{bench,features,file,linear,mlp,refine,threads,unseen}.test.ts', 'test/predictor-*.test.ts', 'test/tensor*.test.ts'];

/**
 * Every other file shares its worker's module graph too (`isolate: false` on `main`): none mocks
 * a module, stubs a global or the environment, or leaves fake timers on (clock and dashboard-hub
 * restore real timers), and the sources hold no module-level state. Importing the serving stack
 * afresh for each file cost about half a second of CPU per file: the 18 in-process files of
 * test/serve/ took 13.9 s of CPU and 13.7 s wall isolated, 6.3 s and 7.7 s shared (load 6).
 */

export default defineConfig({
  test: {
    testTimeout: 120_000,
    hookTimeout: 300_000,
    pool: 'forks',
    maxWorkers: 2,
    // onnxruntime's usage telemetry off in tests too, as `bin/abacus.js` sets it for the CLI
    env: { ORT_DISABLE_TELEMETRY: '1' },
    projects: [
      { extends: true, test: { name: 'main', include: ['test/**/*.test.ts'], exclude: [...configDefaults.exclude, ...ALONE, ...SHARED_MODULES], isolate: false } },
      { extends: true, test: { name: 'unit', include: SHARED_MODULES, isolate: false } },
      { extends: true, test: { name: 'alone', include: ALONE, sequence: { groupOrder: 1 } } },
    ],
  },
});
