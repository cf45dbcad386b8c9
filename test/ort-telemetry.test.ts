/**
 * onnxruntime's usage telemetry stays off (docs/devices.md "Telemetry"): a CLI run that creates
 * sessions (an import runs the shape probe and verifies every operator with onnxruntime) writes
 * nothing under the home folder. Without `ORT_DISABLE_TELEMETRY=1` onnxruntime-node 1.30 creates
 * `~/.cache/Microsoft/DeveloperTools/.onnxruntime/onnxruntime.db` in the same run (seen here).
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { onnx } from 'onnx-proto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ABACUS_BIN } from './helpers/cli.ts';
import { buildSkipGraph } from './onnx-fixtures.ts';

const run = promisify(execFile);
let tmp = '';
beforeAll(async () => {
  tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-telemetry-'));
});
afterAll(async () => {
  await fs.rm(tmp, { recursive: true, force: true });
});

/** Every file below `dir`, relative. */
async function filesBelow(dir: string): Promise<string[]> {
  const entries = await fs.readdir(dir, { recursive: true, withFileTypes: true });
  return entries.filter((e) => e.isFile()).map((e) => path.relative(dir, path.join(e.parentPath, e.name)));
}

describe('onnxruntime telemetry', () => {
  it('abacus models import (sessions in the CLI process) writes nothing under HOME when the environment does not mention ORT_DISABLE_TELEMETRY', async () => {
    const home = path.join(tmp, 'home');
    await fs.mkdir(home);
    const file = path.join(tmp, 'skip.onnx');
    await fs.writeFile(file, onnx.ModelProto.encode(buildSkipGraph().model).finish());
    const env: NodeJS.ProcessEnv = { ...process.env, HOME: home, ABACUS_CACHE_DIR: path.join(tmp, 'cache') };
    delete env['ORT_DISABLE_TELEMETRY'];
    const { stdout } = await run(process.execPath, [ABACUS_BIN, 'models', 'import', file, '--operators', '2', '--name', 'skip', '--json'], { env, maxBuffer: 16 << 20 });
    expect((JSON.parse(stdout) as { name: string }).name).toBe('skip');
    expect(await filesBelow(home)).toEqual([]);
  });
});
