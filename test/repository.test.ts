/**
 * The model cache: what it reads, what it rebuilds, what it never touches.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { importVersion, ModelRepository, repairHintOf } from '../src/model/repository.ts';
import { ensureDir } from '../src/fs.ts';
import { SMALL_VARIANTS } from './helpers/small-variants.ts';

let tmp: string;
let repo: ModelRepository;
beforeEach(async () => {
  tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-repo-'));
  repo = new ModelRepository({ cacheDir: path.join(tmp, 'cache') });
});
afterEach(async () => {
  await fs.rm(tmp, { recursive: true, force: true });
});

const exists = async (p: string): Promise<boolean> =>
  fs.access(p).then(
    () => true,
    () => false,
  );

describe('ModelRepository', () => {
  it('rebuilds an entry whose operator file was deleted, and reports it as not cached meanwhile', async () => {
    const { artifact } = await repo.zooArtifact('resnet50', SMALL_VARIANTS.resnet50);
    expect(await repo.isZooCached('resnet50', SMALL_VARIANTS.resnet50)).toBe(true);
    await fs.rm(artifact.operatorPaths[5]!);
    expect(await repo.isZooCached('resnet50', SMALL_VARIANTS.resnet50)).toBe(false);
    const again = await repo.zooArtifact('resnet50', SMALL_VARIANTS.resnet50);
    expect(again.built).toBe(true);
    expect(await exists(again.artifact.operatorPaths[5]!)).toBe(true);
  });

  it('never reads or deletes directories that are not its entries', async () => {
    const { artifact } = await repo.zooArtifact('resnet50', SMALL_VARIANTS.resnet50);
    // a foreign directory with a broken spec.json, and an export-like directory without model.onnx
    const foreign = path.join(repo.cacheDir, 'notes');
    await fs.mkdir(foreign);
    await fs.writeFile(path.join(foreign, 'spec.json'), '{ not json');
    const exportLike = path.join(repo.cacheDir, 'exported.operators');
    await fs.mkdir(exportLike);
    await fs.copyFile(path.join(artifact.dir, 'spec.json'), path.join(exportLike, 'spec.json'));
    const userTemp = path.join(repo.cacheDir, '.tmp-user-file');
    await fs.writeFile(userTemp, 'mine');
    const old = new Date(Date.now() - 3 * 3600_000);
    await fs.utimes(userTemp, old, old);

    expect(await repo.listImported()).toEqual([]);
    await repo.zooArtifact('vgg16', SMALL_VARIANTS.vgg16); // a write: runs the stale-temp sweep
    expect(await exists(path.join(foreign, 'spec.json'))).toBe(true);
    expect(await exists(path.join(exportLike, 'spec.json'))).toBe(true);
    expect(await exists(userTemp)).toBe(true);
  });

  it('sweeps its own stale temporary build directories only', async () => {
    await fs.mkdir(repo.cacheDir, { recursive: true });
    const stale = path.join(repo.cacheDir, '.abacus-tmp-resnet50-abc');
    const fresh = path.join(repo.cacheDir, '.abacus-tmp-vgg16-def');
    await fs.mkdir(stale);
    await fs.mkdir(fresh);
    const old = new Date(Date.now() - 3 * 3600_000);
    await fs.utimes(stale, old, old);
    await repo.zooArtifact('resnet50', SMALL_VARIANTS.resnet50);
    expect(await exists(stale)).toBe(false);
    expect(await exists(fresh)).toBe(true); // maybe another process's build in progress
  });

  it('force rebuilds the entry of the same file (a corrupt operator file is whole again); the repair hint names the command and the folder', async () => {
    const a = (await repo.zooArtifact('resnet50', SMALL_VARIANTS.resnet50)).artifact;
    const file = path.join(tmp, 'fixme.onnx');
    await fs.copyFile(a.modelPath, file);
    const first = await repo.importModel(file, { operators: 2 });
    const op = first.artifact.operatorPaths[1]!;
    const whole = await fs.readFile(op);
    await fs.writeFile(op, 'this is not an ONNX model');
    // without force: found (its files exist), nothing rebuilt
    expect((await repo.importModel(file, { operators: 2 })).built).toBe(false);
    expect(await fs.readFile(op, 'utf8')).toBe('this is not an ONNX model');
    const forced = await repo.importModel(file, { operators: 2, force: true });
    expect(forced.built).toBe(true);
    expect(forced.artifact.dir).toBe(first.artifact.dir);
    expect((await fs.readFile(op)).equals(whole)).toBe(true);
    expect((await repo.listImported()).map((x) => x.dir)).toEqual([first.artifact.dir]);
    const folder = path.basename(first.artifact.dir);
    expect(repairHintOf(forced.artifact)).toBe(`re-import it with \`abacus models import ${file} --name fixme --operators 2 --force\`, or delete the folder ${folder} of the model cache and import it again`);
    expect(repairHintOf(forced.artifact)).not.toContain(path.dirname(first.artifact.dir));
    expect(repairHintOf(a)).toBe(`delete the folder ${path.basename(a.dir)} of the model cache: it is rebuilt on the next start`);
  });

  it('versions: another file under a taken name is the next version; forced, it replaces every version and operator count', async () => {
    const a = (await repo.zooArtifact('resnet50', SMALL_VARIANTS.resnet50)).artifact;
    const b = (await repo.zooArtifact('resnet50', { ...SMALL_VARIANTS.resnet50, seed: 7 })).artifact;
    const c = (await repo.zooArtifact('resnet50', { ...SMALL_VARIANTS.resnet50, seed: 8 })).artifact;
    const file = path.join(tmp, 'mine.onnx');
    await fs.copyFile(a.modelPath, file);
    const first = await repo.importModel(file, { operators: 3 });
    const firstFour = await repo.importModel(file, { operators: 4 });
    expect(firstFour.built).toBe(true);
    // the same file again: found, not rebuilt
    expect((await repo.importModel(file, { operators: 3 })).built).toBe(false);
    await fs.copyFile(b.modelPath, file); // same name, other weights: version 2
    const v2 = await repo.importModel(file, { operators: 3 });
    expect(v2.built).toBe(true);
    expect(v2.artifact.spec.name).toBe('mine@2');
    expect(importVersion(v2.artifact.spec)).toBe(2);
    expect((await repo.listImported()).map((x) => [x.spec.name, x.spec.operators.length, x.dir])).toEqual([
      ['mine', 3, first.artifact.dir],
      ['mine', 4, firstFour.artifact.dir],
      ['mine@2', 3, v2.artifact.dir],
    ]);
    // the latest version by default, an earlier one by number; the same file again is the same version
    expect((await repo.findImported('mine')).dir).toBe(v2.artifact.dir);
    expect((await repo.findImported('mine', 4, 1)).dir).toBe(firstFour.artifact.dir);
    await expect(repo.findImported('mine', undefined, 1)).rejects.toThrow(/several times \(3, 4 operators\)/);
    await expect(repo.findImported('mine', undefined, 3)).rejects.toThrow(/has no version 3 \(imported versions: 1, 2\)/);
    expect((await repo.importModel(file, { operators: 3 })).built).toBe(false);
    expect(repairHintOf(v2.artifact)).toMatch(/import .* again under the name mine \(it then becomes the latest version\)/);
    // forced: replaces every version and operator count, as version 1
    await fs.copyFile(c.modelPath, file);
    const forced = await repo.importModel(file, { operators: 3, force: true });
    expect(forced.built).toBe(true);
    expect((await repo.listImported()).map((x) => [x.spec.name, x.spec.operators.length, x.dir])).toEqual([['mine', 3, forced.artifact.dir]]);
    const four = await repo.importModel(file, { operators: 4 });
    expect((await repo.findImported('mine', 3)).dir).toBe(forced.artifact.dir);
    expect((await repo.findImported('mine', 4)).dir).toBe(four.artifact.dir);
    await expect(repo.findImported('mine')).rejects.toThrow(/several times \(3, 4 operators\)/);
    await expect(repo.findImported('nope')).rejects.toThrow(/unknown model 'nope'/);
  });
});

describe('ensureDir', () => {
  it('creates missing parents, tolerates concurrent callers, and fails on a file in the way', async () => {
    const dir = path.join(tmp, 'a', 'b', 'c');
    await Promise.all(Array.from({ length: 8 }, () => ensureDir(dir)));
    expect((await fs.stat(dir)).isDirectory()).toBe(true);
    await fs.writeFile(path.join(tmp, 'file'), 'x');
    await expect(ensureDir(path.join(tmp, 'file', 'sub'))).rejects.toMatchObject({ code: 'ENOTDIR' });
  });
});
