// @ts-check
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['node_modules/**', '.cache/**', 'dist/**', 'bin/**', 'eslint.config.js', 'src/device/ort/*.js', 'src/serve/dashboard/assets/**', 'deploy/**/*.mjs'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/no-explicit-any': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
    },
  },
  {
    files: ['src/**/*.ts'],
    rules: { 'no-console': 'error' },
  },
  {
    // One scheduler, two clocks (docs/design.md#two-clocks): time-dependent code reads time and sets timers only
    // through a Clock (src/clock). test/clock-guard.test.ts scans the same folders for the same
    // patterns. Later blocks that set these rule names for these files replace this list.
    files: ['src/schedule/**/*.ts', 'src/runtime/**/*.ts', 'src/workload/**/*.ts', 'src/device/sim/**/*.ts'],
    rules: {
      'no-restricted-globals': [
        'error',
        ...['setTimeout', 'setInterval', 'setImmediate', 'clearTimeout', 'clearInterval', 'clearImmediate', 'performance'].map(
          (name) => ({ name, message: 'Use the Clock passed in (src/clock): now(), setTimer(), clearTimer(), sleep().' }),
        ),
      ],
      'no-restricted-properties': [
        'error',
        { object: 'Date', property: 'now', message: 'Use clock.now() (src/clock).' },
        { object: 'process', property: 'hrtime', message: 'Use clock.now() (src/clock).' },
        { object: 'process', property: 'uptime', message: 'Use clock.now() (src/clock).' },
        ...['setTimeout', 'setInterval', 'setImmediate', 'performance'].flatMap((property) =>
          ['globalThis', 'global'].map((object) => ({ object, property, message: 'Use the Clock passed in (src/clock).' })),
        ),
      ],
      'no-restricted-syntax': [
        'error',
        { selector: "NewExpression[callee.name='Date'][arguments.length=0]", message: 'new Date() reads wall time; use clock.now() (src/clock).' },
        { selector: "CallExpression[callee.name='Date']", message: 'Date() reads wall time; use clock.now() (src/clock).' },
      ],
      'no-restricted-imports': [
        'error',
        {
          paths: ['timers', 'node:timers', 'timers/promises', 'node:timers/promises', 'perf_hooks', 'node:perf_hooks'].map((name) => ({
            name,
            message: 'Use the Clock passed in (src/clock), not real timers or performance.',
          })),
        },
      ],
    },
  },
  {
    files: ['test/**/*.ts', 'bench/**/*.ts', 'scripts/**/*.ts', '*.config.ts', 'eslint.config.js'],
    rules: {
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-non-null-assertion': 'off',
    },
  },
);
