/**
 * Model versions in a serving config (docs/serving.md "Model versions"): each service's
 * `versionPolicy` picks versions of its imported model (`ModelRepository.importModel` numbers
 * them), and each picked version becomes a service of its own — its own queue, QoS target,
 * predictor key (version v ≥ 2 of `m` is the model `m@v`) and device executor — that clients
 * reach by the service's name and the version (`/v2/models/{name}/versions/{v}/…`).
 *
 * A service that serves one version keeps its name as the runtime's service name; one that
 * serves several is `name@v` per version inside the server (metrics labels, the dashboard,
 * logs), while clients keep using `name` and the version.
 */
import { InvalidConfigError } from '../errors.ts';
import { parseModelRef } from '../model/catalog.ts';
import { importName, importVersion, type ModelRepository } from '../model/repository.ts';
import type { ServiceConfig, ServingConfig, VersionPolicy } from '../runtime/config.ts';

/** A service of the expanded config and the model name and version clients address it by. */
export interface ServedVersion {
  /** The name clients use (`model_name`, the URL). */
  readonly modelName: string;
  /** The version clients use, a decimal string (`"1"`, `"2"`, …). */
  readonly version: string;
}

/** `config` with one service per served version, and who each service is to clients. */
export interface VersionedConfig {
  readonly config: ServingConfig;
  /** By service name of the expanded config. */
  readonly versions: ReadonlyMap<string, ServedVersion>;
}

/**
 * The versions `policy` picks among `available` (ascending), ascending.
 * @throws RangeError naming a specific version that is not available.
 */
export function pickVersions(policy: VersionPolicy | undefined, available: readonly number[]): number[] {
  if (policy === undefined) return available.slice(-1);
  if ('latest' in policy) return available.slice(-policy.latest);
  if ('all' in policy) return [...available];
  const missing = policy.specific.filter((v) => !available.includes(v));
  if (missing.length > 0) throw new RangeError(`version${missing.length > 1 ? 's' : ''} ${missing.join(', ')} ${missing.length > 1 ? 'are' : 'is'} not imported (available: ${available.join(', ')})`);
  return [...new Set(policy.specific)].sort((a, b) => a - b);
}

/**
 * Expand every service by its `versionPolicy` (see the file docs). A zoo model has version 1
 * only; a model named with its version (`NAME@V`) is that version, and takes no policy.
 * @throws InvalidConfigError naming `services[i].versionPolicy` (or `.model`) for a version that
 *   is not imported, a policy on a zoo model asking for another version, or both `@V` and a policy.
 */
export async function expandVersions(repo: ModelRepository, config: ServingConfig): Promise<VersionedConfig> {
  const versions = new Map<string, ServedVersion>();
  const services: ServiceConfig[] = [];
  const imported = await repo.listImported();
  for (const [i, s] of config.services.entries()) {
    const field = `${config.source}: services[${i}]`;
    let ref;
    try {
      ref = parseModelRef(s.model);
    } catch (err) {
      throw new InvalidConfigError(`${field}.model: ${(err as Error).message}`, { cause: err });
    }
    const { versionPolicy: policy, ...rest } = s;
    let available: number[];
    if (ref.kind === 'zoo') available = [1];
    else if (ref.version !== undefined) {
      if (policy !== undefined) throw new InvalidConfigError(`${field}.versionPolicy: model '${s.model}' names its version; give either model: NAME@V or a versionPolicy, not both`);
      available = [ref.version];
    } else {
      available = [...new Set(imported.filter((a) => importName(a.spec) === ref.name).map((a) => importVersion(a.spec)))].sort((a, b) => a - b);
      // an unknown model: left to the model resolution, which names it and lists what there is
      if (available.length === 0) available = [1];
    }
    let picked: number[];
    try {
      picked = pickVersions(policy, available);
    } catch (err) {
      throw new InvalidConfigError(`${field}.versionPolicy: model '${s.model}': ${(err as Error).message}`, { cause: err });
    }
    const one = picked.length === 1;
    for (const v of picked) {
      const name = one ? s.name : `${s.name}@${v}`;
      // the model of this version: unchanged for a zoo model or a single latest version, `NAME@V[:N]` otherwise
      const model = ref.kind === 'zoo' || ref.version !== undefined || (one && policy === undefined) ? s.model : `${ref.name}@${v}${ref.operators === undefined ? '' : `:${ref.operators}`}`;
      services.push({ ...rest, name, model });
      versions.set(name, { modelName: s.name, version: String(v) });
    }
  }
  return { config: { ...config, services }, versions };
}
