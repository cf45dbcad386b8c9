/**
 * Model names as users write them on the command line and in configs, resolved to specs and
 * artifacts through a `ModelRepository`:
 *
 * - a zoo name (`resnet50`, `bert`, …): the full-size model;
 * - a zoo name with `-small` (`resnet50-small`, `bert-small`): the small variant (same
 *   operators, lower resolution and fewer channels; `SMALL_ZOO_OPTIONS`) — what tests and quick
 *   CPU runs use. Its spec is renamed to the `-small` name, so profiles and predictor files
 *   never confuse it with the full model;
 * - `resnet50-demo`, `bert-demo`: the `npm start` demo's mid-size variants
 *   (`DEMO_ZOO_OPTIONS`), renamed the same way;
 * - an imported model's name (`abacus models import`): its latest version; `NAME@V` for
 *   version V (`NAME@1` is `NAME`'s first); `:N` after either to pick the import made with N
 *   operators when there are several (`NAME:N`, `NAME@V:N`).
 */
import { artifactAt, type ModelArtifact } from './artifact.ts';
import type { ModelRepository } from './repository.ts';
import type { ModelSpec } from './spec.ts';
import { isZooModelName, ZOO_MODEL_NAMES, type ZooModelName } from './zoo/index.ts';

/** Suffix that selects a zoo model's small variant (one of `ZOO_VARIANT_SUFFIXES`, reserved for imports). */
export const SMALL_SUFFIX = '-small';

/**
 * Zoo options of the small variants: same architecture and operator count, inputs of 64 px
 * (Inception: 75, its minimum), a quarter of the channels, a 4-layer 256-wide BERT. On the 2
 * cores here one query at batch 1 takes a few ms.
 */
export const SMALL_ZOO_OPTIONS: Readonly<Record<ZooModelName, Readonly<Record<string, number>>>> = {
  resnet50: { resolution: 64, widthMultiplier: 0.25 },
  resnet101: { resolution: 64, widthMultiplier: 0.25 },
  resnet152: { resolution: 64, widthMultiplier: 0.25 },
  inception_v3: { resolution: 75, widthMultiplier: 0.25 },
  vgg16: { resolution: 64, widthMultiplier: 0.25 },
  vgg19: { resolution: 64, widthMultiplier: 0.25 },
  bert: { layers: 4, hidden: 256, heads: 4, vocabSize: 30522, maxPositions: 128, defaultSeqLen: 32 },
};

/** Suffix of the demo's mid-size variants (one of `ZOO_VARIANT_SUFFIXES`, reserved for imports). */
export const DEMO_SUFFIX = '-demo';

/**
 * The demo's variants: the zoo architectures (same operators as the full models) sized so
 * that one query at batch 1–2 takes ~10–25 ms on one core of the 2-core development machine
 * (measured: resnet50-demo 9–12 ms at batch 1, 19 ms at batch 2; bert-demo at seq 64 13 ms at
 * batch 1, 24 ms at batch 2).
 */
export const DEMO_ZOO_OPTIONS: Readonly<Partial<Record<ZooModelName, Readonly<Record<string, number>>>>> = {
  resnet50: { resolution: 128, widthMultiplier: 0.5 },
  bert: { layers: 8, hidden: 256, heads: 4, vocabSize: 8192, maxPositions: 128, defaultSeqLen: 64 },
};

/** A model name split into what it refers to. */
export type ModelRef =
  | { readonly kind: 'zoo'; readonly name: string; readonly zoo: ZooModelName; readonly options: Readonly<Record<string, number>> }
  | { readonly kind: 'import'; readonly name: string; readonly operators?: number; readonly version?: number };

/**
 * Parse a model name (see the file comment).
 * @throws RangeError for an empty name or a bad `:N` or `@V` part.
 */
export function parseModelRef(text: string): ModelRef {
  const name = typeof text === 'string' ? text.trim() : '';
  if (name === '') throw new RangeError(`model name must be non-empty (zoo: ${ZOO_MODEL_NAMES.join(', ')}, with ${SMALL_SUFFIX} for small variants; or an imported model)`);
  if (isZooModelName(name)) return { kind: 'zoo', name, zoo: name, options: {} };
  if (name.endsWith(SMALL_SUFFIX)) {
    const base = name.slice(0, -SMALL_SUFFIX.length);
    if (isZooModelName(base)) return { kind: 'zoo', name, zoo: base, options: SMALL_ZOO_OPTIONS[base] };
  }
  if (name.endsWith(DEMO_SUFFIX)) {
    const base = name.slice(0, -DEMO_SUFFIX.length);
    const options = isZooModelName(base) ? DEMO_ZOO_OPTIONS[base] : undefined;
    if (isZooModelName(base) && options !== undefined) return { kind: 'zoo', name, zoo: base, options };
  }
  const [versioned, count, ...rest] = name.split(':');
  const [importName, versionText, ...more] = (versioned ?? '').split('@');
  if (rest.length > 0 || more.length > 0 || importName === undefined || importName === '') throw new RangeError(`model name '${name}' must be NAME, NAME@V, NAME:N or NAME@V:N`);
  let version: number | undefined;
  if (versionText !== undefined) {
    version = /^[0-9]{1,6}$/.test(versionText) ? Number(versionText) : Number.NaN;
    if (!Number.isInteger(version) || version < 1) throw new RangeError(`model name '${name}': V in NAME@V must be a positive integer, got '${versionText}'`);
  }
  const withVersion = version === undefined ? {} : { version };
  if (count === undefined) return { kind: 'import', name: importName, ...withVersion };
  const operators = Number(count);
  if (!Number.isInteger(operators) || operators < 1) throw new RangeError(`model name '${name}': N in NAME:N must be a positive integer, got '${count}'`);
  return { kind: 'import', name: importName, operators, ...withVersion };
}

/**
 * Every zoo name a command accepts, in listing order: each zoo model, then its `-small` and
 * (where there is one) `-demo` variant. `abacus models` lists these.
 */
export function zooCatalog(): readonly (ModelRef & { readonly kind: 'zoo' })[] {
  return ZOO_MODEL_NAMES.flatMap((zoo) => {
    const demo = DEMO_ZOO_OPTIONS[zoo];
    return [
      { kind: 'zoo', name: zoo, zoo, options: {} } as const,
      { kind: 'zoo', name: `${zoo}${SMALL_SUFFIX}`, zoo, options: SMALL_ZOO_OPTIONS[zoo] } as const,
      ...(demo === undefined ? [] : [{ kind: 'zoo', name: `${zoo}${DEMO_SUFFIX}`, zoo, options: demo } as const]),
    ];
  });
}

const renamed = (spec: ModelSpec, name: string): ModelSpec => (spec.name === name ? spec : { ...spec, name });

/**
 * The ModelSpec of a model name without building weights (fast).
 * @throws RangeError for an unknown name (listing the zoo), as `findImported` does.
 */
export async function resolveModelSpec(repo: ModelRepository, text: string): Promise<ModelSpec> {
  const ref = parseModelRef(text);
  if (ref.kind === 'zoo') return renamed(await repo.zooSpec(ref.zoo, ref.options), ref.name);
  return (await repo.findImported(ref.name, ref.operators, ref.version)).spec;
}

/**
 * The artifact of a model name, building and caching a zoo model when missing. `onBuild` is
 * called before a build starts (for progress output).
 * @throws RangeError for an unknown name.
 */
export async function resolveModelArtifact(repo: ModelRepository, text: string, onBuild?: (name: string) => void): Promise<{ artifact: ModelArtifact; built: boolean }> {
  const ref = parseModelRef(text);
  if (ref.kind === 'import') return { artifact: await repo.findImported(ref.name, ref.operators, ref.version), built: false };
  if (onBuild !== undefined && !(await repo.isZooCached(ref.zoo, ref.options))) onBuild(ref.name);
  const { artifact, built } = await repo.zooArtifact(ref.zoo, ref.options);
  return { artifact: ref.name === artifact.spec.name ? artifact : artifactAt(artifact.dir, renamed(artifact.spec, ref.name)), built };
}
