/**
 * The predictors each experiment of `abacus reproduce` asks for (`reproduce.ts`), listed ahead so
 * that with several workers they are profiled and trained side by side before the experiments
 * need them (`ReproducePool.prefetch`). A plan missing here is still built when first asked;
 * one listed and never asked costs a build.
 */
import { ADAPTIVE_SETUP } from '../reproduce/adaptive.ts';
import { BATCHING_ALL_BATCH_SIZES, batchingPairs, BATCHING_DEVICES, BATCHING_SEQ_LEN, BATCHING_TRAIN_BATCH_SIZES } from '../reproduce/batching.ts';
import { CLUSTER_SET } from '../reproduce/cluster.ts';
import { PAPER_BATCH_SIZES, PAPER_SEQ_LENS } from '../reproduce/colocation.ts';
import { MIG_BATCH_SIZES, MIG_DEVICES, MIG_PAIRS } from '../reproduce/mig.ts';
import { mixesToRun } from '../reproduce/mixes.ts';
import type { PaperWorkload } from '../reproduce/workloads.ts';
import { MIX_MAX_GROUP } from './reproduce-mixes.ts';
import type { PredictorPlan } from './reproduce-pool.ts';

/** Where the co-location experiments' sets come from in the workloads file. */
export const SOURCE = { qos: '7.2_qos', throughput: '7.3_throughput', 'beyond-pair': '7.4_beyond_pair' } as const;

/** What the plans depend on besides the experiment. */
export interface PlanOptions {
  readonly deviceId: string;
  readonly quick: boolean;
  /** batching: the first n pairs; mixes: the first n mixes. */
  readonly pairs?: number;
  /** batching and mixes [`BATCHING_DEVICES`]. */
  readonly devices?: readonly string[];
}

const distinct = (xs: readonly string[]): string[] => [...new Set(xs)];

/** The predictors experiment `exp` asks for, in the order it asks. */
export function predictorPlans(exp: string, workloads: readonly PaperWorkload[], o: PlanOptions): PredictorPlan[] {
  const plan = (deviceId: string, models: readonly string[], maxGroupSize: number, batchSizes: readonly number[] = PAPER_BATCH_SIZES, seqLens: readonly number[] = PAPER_SEQ_LENS): PredictorPlan => ({ deviceId, models, maxGroupSize, batchSizes, seqLens });
  const devices = o.devices ?? BATCHING_DEVICES;
  switch (exp) {
    case 'qos':
    case 'throughput':
    case 'beyond-pair': {
      const sets = workloads.filter((w) => w.experiment === SOURCE[exp]);
      return sets.length === 0 ? [] : [plan(o.deviceId, distinct(sets.flatMap((w) => w.models)), Math.max(...sets.map((w) => w.models.length)))];
    }
    case 'mig': {
      const models = distinct((o.quick ? MIG_PAIRS.slice(0, 2) : MIG_PAIRS).flatMap((p) => p.split('+')));
      return MIG_DEVICES.map((d) => plan(d.id, models, 2, MIG_BATCH_SIZES));
    }
    case 'cluster':
    case 'search':
      return [plan(o.deviceId, CLUSTER_SET.models, CLUSTER_SET.models.length)];
    case 'batching': {
      const models = distinct(batchingPairs(workloads, { quick: o.quick, ...(o.pairs === undefined ? {} : { pairs: o.pairs }) }).flatMap((w) => w.models));
      return devices.flatMap((d) => [plan(d, models, 2, BATCHING_TRAIN_BATCH_SIZES, [BATCHING_SEQ_LEN]), plan(d, models, 2, BATCHING_ALL_BATCH_SIZES, [BATCHING_SEQ_LEN])]);
    }
    case 'mixes': {
      const models = distinct(mixesToRun(workloads, { quick: o.quick, ...(o.pairs === undefined ? {} : { count: o.pairs }) }).flatMap((m) => m.models));
      return devices.map((d) => plan(d, models, MIX_MAX_GROUP, BATCHING_TRAIN_BATCH_SIZES, [BATCHING_SEQ_LEN]));
    }
    case 'adaptive':
      return [plan(o.deviceId, ADAPTIVE_SETUP.models, ADAPTIVE_SETUP.models.length, PAPER_BATCH_SIZES, ADAPTIVE_SETUP.seqLens)];
    default:
      return [];
  }
}
