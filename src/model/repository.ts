/**
 * ModelRepository: the on-disk cache of partitioned models (zoo builds and imports).
 *
 * Layout: `<cacheDir>/<name>-<key>/` holds one ModelArtifact (see `artifact.ts`), where `key`
 * is 12 hex digits of a hash of everything that determines the bytes (model name, normalized
 * options, builder version; for imports the content of the file and its external data, the
 * operator count and the default sequence length). An entry is complete iff its directory
 * exists: it is written into a temporary sibling (`.abacus-tmp-*`) and renamed into place, so a
 * crash or a failed build never leaves a half-written entry, and a second run never rebuilds.
 * Only directories named like entries are ever read, and only an entry looked up by its exact
 * key is ever discarded (when broken); anything else in the cache directory is left alone.
 * Versions: another file imported under a taken name is the name's next version (1, 2, …), its
 * entries beside the earlier versions'; forced, it replaces the model instead (every version and
 * operator count) as version 1. One entry per (name, version, operator count). Version v ≥ 2 of
 * `name` is known as `name@v` everywhere a model is named by its spec (`versionedName`: listings,
 * the predictor, profiles), so two versions never share a predictor key; version 1 keeps `name`.
 *
 * Cache directory: `--cache-dir`, else `$ABACUS_CACHE_DIR`, else `<project>/.cache/models`.
 */
import { createHash } from 'node:crypto';
import { createReadStream, existsSync } from 'node:fs';
import { pipeline } from 'node:stream/promises';
import fs from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { artifactAt, MODEL_FILE, operatorFileName, SPEC_FILE, type ModelArtifact } from './artifact.ts';
import { onnx, type OnnxTypes } from './onnx/proto.ts';
import { importOnnxModel, partitionModel, type PartitionInput } from './onnx/partition.ts';
import type { ProbeInputs } from './onnx/shapes.ts';
import { decodeOnnxModel, hasExternalData } from './onnx/load.ts';
import { buildZooModel, isReservedZooName, isZooModelName, parseZooOptions, ZOO_MODEL_NAMES, type ZooBuild, type ZooModelName } from './zoo/index.ts';
import type { ModelSpec } from './spec.ts';
import { InvalidModelError } from '../errors.ts';
import { ensureDir } from '../fs.ts';

/**
 * Bump when a zoo builder or the partitioner changes what it emits: old cache entries are then
 * simply not found (and can be deleted by hand). 4: input domains (`TensorSpec.domain`, BERT's
 * vocabulary) in the spec.
 */
export const ZOO_BUILD_VERSION = 4;

/**
 * Bump when the importer changes what it emits for the same file (4: Constant nodes folded
 * into initializers; 5: several dynamic axes as symbols, dims with floor division,
 * data-dependent outputs; 6: floor divisions by powers of two preferred, so a dim fitted as
 * `(samples+23)/31` is now `samples/32+1`; 7: strided dims from the graph's strides, an
 * unwritable output dim served as `?data`, the batch of a recurrent state inferred, If
 * conditions carrying the probed value): old import entries are then not found and are
 * re-imported. Old `spec.json` files still load (every new field is optional).
 */
export const IMPORT_BUILD_VERSION = 7;

/** Default cache directory: `<project root>/.cache/models`. */
export function defaultCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  const fromEnv = env['ABACUS_CACHE_DIR'];
  if (fromEnv !== undefined && fromEnv !== '') return path.resolve(fromEnv);
  const projectRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
  return path.join(projectRoot, '.cache', 'models');
}

/** Whether an artifact was found in the cache or built by this call. */
export interface ArtifactResult {
  readonly artifact: ModelArtifact;
  readonly built: boolean;
}

export class ModelRepository {
  readonly cacheDir: string;

  constructor(options: { cacheDir?: string } = {}) {
    this.cacheDir = path.resolve(options.cacheDir ?? defaultCacheDir());
  }

  /** Cache directory of a zoo model with the given raw options (validated). */
  zooEntryDir(name: ZooModelName, rawOptions: Record<string, unknown> = {}): string {
    const options = parseZooOptions(name, rawOptions);
    const key = hashKey({ name, options, version: ZOO_BUILD_VERSION });
    return path.join(this.cacheDir, `${name}-${key}`);
  }

  /** True when the zoo model with these options is built on disk and complete. */
  async isZooCached(name: ZooModelName, rawOptions: Record<string, unknown> = {}): Promise<boolean> {
    return (await readEntrySpec(this.zooEntryDir(name, rawOptions))) !== undefined;
  }

  /**
   * ModelSpec of a zoo model without materializing weights (fast; used by `abacus models`).
   * Reads the cached spec when present.
   * @throws RangeError/TypeError for invalid options (message names the field).
   */
  async zooSpec(name: ZooModelName, rawOptions: Record<string, unknown> = {}): Promise<ModelSpec> {
    const dir = this.zooEntryDir(name, rawOptions);
    const cached = await readEntryOrDiscard(dir);
    if (cached) return cached;
    const built = buildZooModel(name, parseZooOptions(name, rawOptions), { withWeights: false });
    const { spec } = await partitionModel(zooPartitionInput(built));
    return spec;
  }

  /**
   * The zoo model's artifact, building and caching it (whole model + operators) when missing.
   * @throws RangeError/TypeError for invalid options.
   */
  async zooArtifact(name: ZooModelName, rawOptions: Record<string, unknown> = {}): Promise<ArtifactResult> {
    const dir = this.zooEntryDir(name, rawOptions);
    const cached = await readEntryOrDiscard(dir);
    if (cached) return { artifact: artifactAt(dir, cached), built: false };
    const built = buildZooModel(name, parseZooOptions(name, rawOptions), { withWeights: true });
    const { spec, operatorModels } = await partitionModel(zooPartitionInput(built));
    const artifact = await this.writeEntry(dir, spec, built.model, operatorModels);
    return { artifact, built: true };
  }

  /**
   * Import an ONNX file, partition it into `operators` operators and cache the result under
   * `imports`. Nothing is written unless the whole import succeeds.
   *
   * Versions: importing a different file (other content of the `.onnx` file or of its external
   * data) under a name some import already has adds the name's next version (the highest so far
   * + 1); the same file as an existing version adds to (or replaces, at the same operator count)
   * that version's entries. `force` replaces the model: every entry of that name of another file
   * (every version and operator count) is removed once the new one is written, which is then
   * version 1, so nothing keeps serving the old model. `force` also rebuilds the entry of the
   * same file and settings (a cache entry whose operator files were corrupted on disk): the new
   * entry is built first, then the old one is removed and the new one published, so a failed
   * rebuild leaves the old entry as it was.
   * @throws InvalidModelError for unreadable/invalid models; RangeError for a bad `operators` or
   *   a bad name.
   */
  async importModel(file: string, opts: { operators: number; name?: string; defaultSeqLen?: number; force?: boolean; probe?: ProbeInputs }): Promise<ArtifactResult> {
    const defaultName = path.basename(file).replace(/\.onnx$/i, '');
    const name = checkModelName(opts.name ?? defaultName, opts.name === undefined ? `the model name taken from the file name (give one with --name)` : 'name');
    let contentHash: string;
    try {
      contentHash = await importContentHash(file);
    } catch (err) {
      throw new InvalidModelError(`cannot read ONNX file ${file}: ${(err as Error).message}`, { cause: err });
    }
    const sameName = (await this.listImported()).filter((a) => importName(a.spec) === name);
    const sameFile = sameName.find((a) => isSameContent(a.spec, contentHash));
    const version = opts.force === true ? 1 : sameFile !== undefined ? importVersion(sameFile.spec) : Math.max(0, ...sameName.map((a) => importVersion(a.spec))) + 1;
    const dir = path.join(this.cacheDir, `${name}-${hashKey({ contentHash, operators: opts.operators, name, defaultSeqLen: opts.defaultSeqLen ?? null, version: ZOO_BUILD_VERSION, importVersion: IMPORT_BUILD_VERSION, ...(opts.probe === undefined ? {} : { probe: opts.probe }) })}`);
    const found = await readEntryOrDiscard(dir);
    if (found && opts.force !== true) return { artifact: versioned(artifactAt(dir, found)), built: false };
    // forced: rebuilt even when the entry is there (its files may be corrupt; `found` only checks they exist)
    const cached = opts.force === true ? undefined : found;
    let artifact: ModelArtifact;
    if (cached) artifact = versioned(artifactAt(dir, cached));
    else {
      const { spec, model, operatorModels } = await importOnnxModel(file, {
        operators: opts.operators,
        name,
        ...(opts.defaultSeqLen === undefined ? {} : { defaultSeqLen: opts.defaultSeqLen }),
        ...(opts.probe === undefined ? {} : { probe: opts.probe }),
      });
      const source = spec.source.kind === 'import' ? { ...spec.source, contentSha256: contentHash, ...(version > 1 ? { version } : {}) } : spec.source;
      if (found) await discardEntry(dir);
      artifact = versioned(await this.writeEntry(dir, { ...spec, source }, model, operatorModels));
    }
    // The new entry replaces: with force every entry of another file; always the same file at the same operator count.
    for (const old of sameName) {
      if (old.dir === artifact.dir) continue;
      const sameContent = isSameContent(old.spec, contentHash);
      if ((opts.force === true && !sameContent) || (sameContent && old.spec.operators.length === artifact.spec.operators.length)) await discardEntry(old.dir);
    }
    return { artifact, built: cached === undefined };
  }

  /**
   * Every imported model in the cache (one entry per file content × operator count), sorted
   * by name, version, then operator count; version v ≥ 2 named `name@v` (`versionedName`).
   */
  async listImported(): Promise<ModelArtifact[]> {
    let names: string[];
    try {
      names = await fs.readdir(this.cacheDir);
    } catch {
      return [];
    }
    const out: ModelArtifact[] = [];
    for (const entry of names) {
      if (!ENTRY_NAME.test(entry)) continue;
      const dir = path.join(this.cacheDir, entry);
      const spec = await readEntrySpec(dir);
      if (spec?.source?.kind === 'import') out.push(versioned(artifactAt(dir, spec)));
    }
    return out.sort((a, b) => importName(a.spec).localeCompare(importName(b.spec)) || importVersion(a.spec) - importVersion(b.spec) || a.spec.operators.length - b.spec.operators.length);
  }

  /**
   * The imported model called `name`: version `version` (default: its latest), with
   * `operators` operators when several counts of that version were imported.
   * @throws RangeError when there is none, no such version, or several and `operators` does not pick one.
   */
  async findImported(name: string, operators?: number, version?: number): Promise<ModelArtifact> {
    const named = (await this.listImported()).filter((a) => importName(a.spec) === name);
    if (named.length === 0) throw new RangeError(`unknown model '${name}': not a zoo model (${ZOO_MODEL_NAMES.join(', ')}) and not imported (see abacus models)`);
    const versions = [...new Set(named.map((a) => importVersion(a.spec)))];
    const want = version ?? Math.max(...versions);
    if (!versions.includes(want)) throw new RangeError(`model '${name}' has no version ${want} (imported versions: ${versions.join(', ')})`);
    const all = named.filter((a) => importVersion(a.spec) === want);
    const matching = operators === undefined ? all : all.filter((a) => a.spec.operators.length === operators);
    if (matching.length === 1) return matching[0]!;
    const counts = all.map((a) => a.spec.operators.length).join(', ');
    if (matching.length === 0) throw new RangeError(`model '${name}' was imported with ${counts} operators, not ${operators}`);
    throw new RangeError(`model '${name}' was imported several times (${counts} operators): pick one (models show: --operators N; demo: --models ${name}:N)`);
  }

  /** Atomically write an artifact to `dir` (temp sibling + rename). */
  async writeEntry(dir: string, spec: ModelSpec, model: OnnxTypes.IModelProto, operatorModels: readonly OnnxTypes.IModelProto[]): Promise<ModelArtifact> {
    await writeArtifactAtomically(dir, spec, model, operatorModels);
    return artifactAt(dir, spec);
  }
}

/** What `partitionModel` needs for a zoo build: the builder's own operator tags and metadata. */
function zooPartitionInput(built: ZooBuild): PartitionInput {
  return {
    name: built.name,
    model: built.model,
    operatorOfNode: built.operatorOfNode,
    operatorNames: built.operatorNames,
    nonTrainable: built.nonTrainable,
    dynamicAxes: built.dynamicAxes,
    defaultSeqLen: built.defaultSeqLen,
    ...(built.options['maxPositions'] === undefined ? {} : { maxSeqLen: built.options['maxPositions'] }),
    source: { kind: 'zoo', options: built.options },
  };
}

/**
 * Write spec + whole model + operator models into `dir` atomically. If `dir` appears
 * concurrently (another process built the same entry), the other copy wins and ours is dropped.
 */
export async function writeArtifactAtomically(
  dir: string,
  spec: ModelSpec,
  model: OnnxTypes.IModelProto,
  operatorModels: readonly OnnxTypes.IModelProto[],
): Promise<void> {
  if (operatorModels.length !== spec.operators.length) {
    throw new RangeError(`operatorModels has ${operatorModels.length} entries, spec ${spec.name} has ${spec.operators.length} operators`);
  }
  const parent = path.dirname(dir);
  await ensureDir(parent);
  await sweepStaleTemps(parent);
  const tmp = await fs.mkdtemp(path.join(parent, `${TEMP_PREFIX}${path.basename(dir)}-`));
  try {
    await writeDurably(path.join(tmp, MODEL_FILE), onnx.ModelProto.encode(model).finish());
    for (let k = 0; k < operatorModels.length; k++) {
      await writeDurably(path.join(tmp, operatorFileName(k)), onnx.ModelProto.encode(operatorModels[k]!).finish());
    }
    await writeDurably(path.join(tmp, SPEC_FILE), JSON.stringify(spec, null, 2));
    try {
      await fs.rename(tmp, dir);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if ((code === 'ENOTEMPTY' || code === 'EEXIST') && existsSync(path.join(dir, SPEC_FILE))) {
        await fs.rm(tmp, { recursive: true, force: true });
        return;
      }
      throw err;
    }
  } catch (err) {
    await fs.rm(tmp, { recursive: true, force: true });
    throw err;
  }
}

/**
 * Write and fsync a file: the rename that publishes an entry then never exposes unwritten
 * data after a crash, and the kernel's write-back of hundreds of MB does not run later, in
 * the middle of whatever is measured next (seen here: a demo right after a build measured
 * 0.88 instead of 0.56 for group/sequential).
 */
async function writeDurably(file: string, data: Uint8Array | string): Promise<void> {
  const handle = await fs.open(file, 'w');
  try {
    await handle.writeFile(data);
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** Names of cache entries: a model name, `-`, 12 hex digits of the key. */
const ENTRY_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]*-[0-9a-f]{12}$/;
/** Prefix of temporary build directories (never a valid entry name). */
const TEMP_PREFIX = '.abacus-tmp-';

/**
 * The spec of the complete entry in `dir`, or undefined when there is none or it is broken
 * (unparsable spec, missing files). Never modifies anything.
 */
async function readEntrySpec(dir: string): Promise<ModelSpec | undefined> {
  let text: string;
  try {
    text = await fs.readFile(path.join(dir, SPEC_FILE), 'utf8');
  } catch {
    return undefined;
  }
  try {
    const spec = JSON.parse(text) as ModelSpec;
    if (typeof spec === 'object' && spec !== null && Array.isArray(spec.operators) && typeof spec.source === 'object' && (await hasAllFiles(dir, spec))) return spec;
  } catch {
    // unparsable: broken
  }
  return undefined;
}

/**
 * The spec of the entry at exactly `dir` (a key this repository computed). A broken entry
 * there (disk corruption, a file deleted by hand) is discarded so that the caller rebuilds it.
 */
async function readEntryOrDiscard(dir: string): Promise<ModelSpec | undefined> {
  const spec = await readEntrySpec(dir);
  if (spec === undefined && existsSync(dir)) await discardEntry(dir);
  return spec;
}

/**
 * Remove an entry: first renamed to a unique temporary name (atomic, so no reader sees it
 * half-deleted and a concurrent rebuild can publish at once), then deleted. Best effort.
 */
async function discardEntry(dir: string): Promise<void> {
  const trash = path.join(path.dirname(dir), `${TEMP_PREFIX}trash-${path.basename(dir)}-${process.pid}-${Date.now()}`);
  try {
    await fs.rename(dir, trash);
    await fs.rm(trash, { recursive: true, force: true });
  } catch {
    // already gone, or not ours to delete: a later lookup tries again
  }
}

/** True when every file of the artifact is present (a file deleted by hand → rebuild). */
async function hasAllFiles(dir: string, spec: ModelSpec): Promise<boolean> {
  const files = [MODEL_FILE, ...spec.operators.map((op) => operatorFileName(op.index))];
  for (const f of files) {
    try {
      await fs.access(path.join(dir, f));
    } catch {
      return false;
    }
  }
  return true;
}

/**
 * Content hash of an import: the model file plus every external-data file it references, so
 * changing `weights.bin` next to the model is a different cache entry. Files are streamed into
 * the hash; only the model file is decoded (to find the external-data locations).
 * @throws the file system's error when the model file cannot be read.
 */
async function importContentHash(file: string): Promise<string> {
  const hash = createHash('sha256');
  await pipeline(createReadStream(file), hash, { end: false });
  let locations: string[] = [];
  try {
    const model = decodeOnnxModel(await fs.readFile(file), file);
    if (hasExternalData(model)) locations = externalDataLocations(model);
  } catch {
    // not decodable: the import itself reports the error
  }
  for (const location of [...new Set(locations)].sort()) {
    hash.update(`\0${location}\0`);
    try {
      await pipeline(createReadStream(path.resolve(path.dirname(file), location)), hash, { end: false });
    } catch {
      hash.update('missing');
    }
  }
  return hash.digest('hex');
}

/** True when an imported entry was made from the file content `contentHash` (`importContentHash`). */
/** The name a model was imported under (without the `@v` of a later version). */
export function importName(spec: ModelSpec): string {
  return spec.name.split('@')[0]!;
}

/** The version of an imported model (1 for zoo models and imports before versions). */
export function importVersion(spec: ModelSpec): number {
  return spec.source.kind === 'import' ? (spec.source.version ?? 1) : 1;
}

/** How version `version` of the model `name` is named by its spec: `name` for version 1, else `name@version`. */
export function versionedName(name: string, version: number): string {
  return version <= 1 ? name : `${name}@${version}`;
}

/** `artifact` with its spec named by its version (`versionedName`). */
function versioned(artifact: ModelArtifact): ModelArtifact {
  const v = importVersion(artifact.spec);
  return v <= 1 ? artifact : artifactAt(artifact.dir, { ...artifact.spec, name: versionedName(importName(artifact.spec), v) });
}

function isSameContent(spec: ModelSpec, contentHash: string): boolean {
  // Older entries lack contentSha256; without external data the content hash is the file's sha256.
  return spec.source.kind === 'import' && (spec.source.contentSha256 ?? spec.source.sha256) === contentHash;
}

function externalDataLocations(model: OnnxTypes.IModelProto): string[] {
  const out: string[] = [];
  for (const t of model.graph?.initializer ?? []) {
    for (const entry of t.externalData ?? []) if (entry.key === 'location' && entry.value) out.push(entry.value);
  }
  return out;
}

/** Age after which a leftover `.abacus-tmp-*` build directory (from a killed build) is deleted. */
const STALE_TEMP_MS = 60 * 60 * 1000;

/** Remove `.abacus-tmp-*` directories under `parent` older than STALE_TEMP_MS. Best effort. */
async function sweepStaleTemps(parent: string): Promise<void> {
  let names: string[];
  try {
    names = await fs.readdir(parent);
  } catch {
    return;
  }
  const now = Date.now();
  for (const name of names) {
    if (!name.startsWith(TEMP_PREFIX)) continue;
    const full = path.join(parent, name);
    try {
      const st = await fs.stat(full);
      if (now - st.mtimeMs > STALE_TEMP_MS) await fs.rm(full, { recursive: true, force: true });
    } catch {
      // raced with another sweeper or a finishing build
    }
  }
}

function hashKey(value: unknown): string {
  return createHash('sha256').update(JSON.stringify(value)).digest('hex').slice(0, 12);
}

/**
 * How to repair the cache entry of `artifact` when its files fail to load (corrupt on disk):
 * one sentence naming the command, and the entry's folder by its name in the model cache (not
 * the full path, which the cache directory option decides). For an import, re-importing with
 * `--force` rebuilds the entry (`importModel`); a deleted entry is rebuilt on its next use
 * (zoo) or import.
 */
export function repairHintOf(artifact: Pick<ModelArtifact, 'spec' | 'dir'>): string {
  const folder = path.basename(artifact.dir);
  const { spec } = artifact;
  if (spec.source.kind === 'import' && importVersion(spec) > 1) {
    return `delete the folder ${folder} of the model cache and import ${spec.source.file} again under the name ${importName(spec)} (it then becomes the latest version)`;
  }
  if (spec.source.kind === 'import') {
    return `re-import it with \`abacus models import ${spec.source.file} --name ${spec.name} --operators ${spec.operators.length} --force\`, or delete the folder ${folder} of the model cache and import it again`;
  }
  return `delete the folder ${folder} of the model cache: it is rebuilt on the next start`;
}

/** Valid served-model names: a letter or digit, then letters, digits, `_`, `.`, `-`; at most 64. */
export const MODEL_NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

/**
 * Names no served model may take, each with why: a fixed word of an HTTP route at the place of a
 * model name (`src/serve/http/app.ts`), which a model of that name would shadow. Only
 * `GET /v2/models/stats` (Triton's statistics of every model) is such a route: the other
 * `/v2/models/…` words follow the name (`/v2/models/NAME/ready`). Exact match (routes are
 * case-sensitive).
 */
export const RESERVED_MODEL_NAMES: ReadonlyMap<string, string> = new Map([['stats', 'GET /v2/models/stats is the statistics of every model']]);

/** Why `name` is reserved for the server (`RESERVED_MODEL_NAMES`), or undefined when it is not. */
export function reservedModelName(name: string): string | undefined {
  return RESERVED_MODEL_NAMES.get(name);
}

/**
 * @returns `name` when it is a valid name for an imported model.
 * @throws RangeError naming `what` when it does not match MODEL_NAME_PATTERN or is a zoo name
 *   (a variant's too: `resnet50-small`).
 */
export function checkModelName(name: string, what = 'name'): string {
  if (!MODEL_NAME_PATTERN.test(name)) {
    throw new RangeError(`${what} '${name}' is not a valid model name: 1–64 characters, letters, digits, '_', '.', '-', starting with a letter or digit`);
  }
  if (isReservedZooName(name)) throw new RangeError(`${what} '${name}' is a zoo model's name${isZooModelName(name) ? '' : ' (a -small or -demo variant)'}; choose another name for the import`);
  return name;
}

