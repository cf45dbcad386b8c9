/**
 * Entry of a reproduce thread (`reproduce-pool.ts`): runs the units it is sent, predictors
 * through the same cache as the parent (its progress lines go back to the parent's stderr).
 */
import { ModelRepository } from '../model/repository.ts';
import { serveUnits } from '../reproduce/pool-worker.ts';
import { unitEnv } from '../reproduce/units.ts';
import { runReproduceUnit, type ReproduceUnit, type ReproduceWorkerData } from './reproduce-pool.ts';

serveUnits((data, say) => {
  const { specs, cacheDir } = data as ReproduceWorkerData;
  const repo = new ModelRepository({ cacheDir });
  const ctx = { err: say, cacheOptions: () => ({ cacheDir }) };
  const env = unitEnv(specs);
  return (unit) => runReproduceUnit(unit as ReproduceUnit, ctx, repo, env);
});
