/**
 * CPU pinning of the overload benchmark's processes (`bench/serve-child.ts` `pinned`): the command
 * line it builds, the lists it refuses, and, where util-linux's taskset and /proc exist, a node
 * process that really runs on the CPU it was given.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { describe, expect, it } from 'vitest';
import { pinned } from '../bench/serve-child.ts';

const hasTaskset = spawnSync('taskset', ['--version']).status === 0 && fs.existsSync('/proc/self/status');

describe('pinned', () => {
  it('leaves node unpinned without a list, and prefixes taskset -c with one', () => {
    expect(pinned(undefined, ['a.js', '--x'])).toEqual([process.execPath, ['a.js', '--x']]);
    expect(pinned('0-3,6', ['a.js'])).toEqual(['taskset', ['-c', '0-3,6', process.execPath, 'a.js']]);
  });

  it('refuses a list taskset would misread, naming the form it wants', () => {
    for (const bad of ['', 'all', '0-', '1,,2', '0;rm -rf /', '-1']) expect(() => pinned(bad, [])).toThrow(/CPU list is numbers and ranges.*got/);
  });

  it.skipIf(!hasTaskset)('a pinned node process runs on that CPU only (skipped without taskset or /proc)', () => {
    const [command, args] = pinned('0', ['-e', "process.stdout.write(require('fs').readFileSync('/proc/self/status', 'utf8').match(/Cpus_allowed_list:\\s*(\\S+)/)[1])"]);
    expect(execFileSync(command, args, { encoding: 'utf8' })).toBe('0');
  });
});
