/**
 * The independent units of the simulated experiments, as data a pool thread can be sent
 * (`pool.ts`): one co-location set under every policy, one pair's or mix's setup on a device, one
 * peak search of one pair or mix on one device under one policy, one cluster trace replay. Each unit builds its own seeded
 * simulated device and virtual clock, so its result depends on the unit alone, never on which
 * thread ran it or what ran before: the experiments' numbers are the same with any number of
 * threads (docs/reproduction.md "Time today").
 *
 * A unit names its predictor by file (`PredictorRef`); the thread loads each file once.
 */
import type { ModelSpec } from '../model/spec.ts';
import { loadPredictor } from '../predict/file.ts';
import type { Predictor } from '../predict/predictor.ts';
import { batchingSetup, predictorErrorByBatch, runBatchingVariant, type BatchingRow, type HoldoutRow, type BatchingRunOptions, type BatchingSetup, type BatchingUnits, type BatchingVariant } from './batching.ts';
import { runCluster, type ClusterOptions, type ClusterResult } from './cluster.ts';
import { runWorkload, type ColocationRow } from './colocation.ts';
import { mixSetup, runMixVariant, type Mix, type MixRow, type MixRunOptions, type MixSetup, type MixUnits } from './mixes.ts';
import type { PaperWorkload } from './workloads.ts';

/** A trained predictor file (`predictor.json`) and what it is loaded for. */
export interface PredictorRef {
  readonly file: string;
  readonly deviceId: string;
  /** Names of the models it must know (their specs come from the unit's environment). */
  readonly models: readonly string[];
}

/** Options of a co-location set (`runWorkload`). */
export interface ColocationUnitOptions {
  readonly policies: readonly string[];
  readonly queries: number;
  readonly seed: number;
  readonly findPeak: boolean;
  readonly batchSizes?: readonly number[];
}

/** A unit of a simulated experiment (see the file docs). */
export type SimUnit =
  | { readonly kind: 'colocation'; readonly deviceId: string; readonly workload: PaperWorkload; readonly predictor: PredictorRef; readonly options: ColocationUnitOptions }
  | { readonly kind: 'batching-setup'; readonly deviceId: string; readonly workload: PaperWorkload }
  | { readonly kind: 'batching-holdout'; readonly deviceId: string; readonly models: readonly string[]; readonly predictors: Readonly<Record<string, PredictorRef>>; readonly options: { readonly samples: number; readonly seed: number; readonly csv: string } }
  | { readonly kind: 'batching-variant'; readonly deviceId: string; readonly workload: PaperWorkload; readonly setup: BatchingSetup; readonly variant: BatchingVariant; readonly predictor: PredictorRef; readonly options: Omit<BatchingRunOptions, 'variants' | 'onProgress'> }
  | { readonly kind: 'cluster-replay'; readonly options: Omit<ClusterOptions, 'predictor'>; readonly predictor: PredictorRef }
  | { readonly kind: 'mix-setup'; readonly deviceId: string; readonly mix: Mix }
  | { readonly kind: 'mix-variant'; readonly deviceId: string; readonly mix: Mix; readonly setup: MixSetup; readonly variant: BatchingVariant; readonly predictor: PredictorRef; readonly options: Pick<MixRunOptions, 'queries' | 'minSpanQos' | 'seed'> };

/** What each kind of unit returns. */
export interface SimUnitResults {
  colocation: ColocationRow[];
  'batching-setup': BatchingSetup;
  'batching-holdout': HoldoutRow[];
  'batching-variant': { row: BatchingRow; runs: number };
  'cluster-replay': ClusterResult;
  'mix-setup': MixSetup;
  'mix-variant': { row: MixRow; runs: number };
}

/** What a unit needs besides itself: the model specs and its predictor. */
export interface UnitEnv {
  readonly specs: ReadonlyMap<string, ModelSpec>;
  predictor(ref: PredictorRef): Promise<Predictor>;
}

/** Runs units somewhere (a `UnitPool` in this thread or in threads); `label` names the unit in errors. */
export interface UnitRunner {
  run(unit: SimUnit, label: string): Promise<unknown>;
}

/**
 * Run one unit.
 * @throws what the unit's simulation throws (device errors, unknown models).
 */
export async function runSimUnit(unit: SimUnit, env: UnitEnv): Promise<SimUnitResults[SimUnit['kind']]> {
  switch (unit.kind) {
    case 'colocation':
      return runWorkload(unit.deviceId, unit.workload, env.specs, await env.predictor(unit.predictor), unit.options);
    case 'batching-setup':
      return batchingSetup(unit.deviceId, unit.workload, env.specs);
    case 'batching-holdout': {
      const predictors: Record<string, Predictor> = {};
      for (const [label, ref] of Object.entries(unit.predictors)) predictors[label] = await env.predictor(ref);
      return predictorErrorByBatch(unit.deviceId, unit.models.map((m) => specOf(env, m)), predictors, unit.options);
    }
    case 'batching-variant':
      return runBatchingVariant(unit.deviceId, unit.workload, env.specs, await env.predictor(unit.predictor), unit.setup, unit.variant, unit.options);
    case 'cluster-replay':
      return runCluster({ ...unit.options, predictor: await env.predictor(unit.predictor) });
    case 'mix-setup':
      return mixSetup(unit.deviceId, unit.mix, env.specs);
    case 'mix-variant':
      return runMixVariant(unit.deviceId, unit.mix, env.specs, await env.predictor(unit.predictor), unit.setup, unit.variant, unit.options);
  }
}

function specOf(env: UnitEnv, model: string): ModelSpec {
  const spec = env.specs.get(model);
  if (spec === undefined) throw new RangeError(`no spec for model '${model}'`);
  return spec;
}

/**
 * A unit environment whose predictors are loaded from their files once each (`loaded` may hold
 * some already, by file).
 */
export function unitEnv(specs: ReadonlyMap<string, ModelSpec>, loaded: Map<string, Promise<Predictor>> = new Map()): UnitEnv {
  return {
    specs,
    predictor: (ref) => {
      let p = loaded.get(ref.file);
      if (p === undefined) {
        const models = new Map(
          ref.models.map((m) => {
            const spec = specs.get(m);
            if (spec === undefined) throw new RangeError(`predictor ${ref.file}: no spec for model '${m}'`);
            return [m, spec] as const;
          }),
        );
        p = loadPredictor(ref.file, { deviceId: ref.deviceId, models });
        loaded.set(ref.file, p);
      }
      return p;
    },
  };
}

/** Run a unit of a known kind on `runner`, typed by its kind. */
export async function runUnit<K extends SimUnit['kind']>(runner: UnitRunner, unit: Extract<SimUnit, { kind: K }>, label: string): Promise<SimUnitResults[K]> {
  return (await runner.run(unit, label)) as SimUnitResults[K];
}

/** The batching experiment's units on `runner` (`runBatching`), each device's variants with its predictor. */
export function batchingUnits(runner: UnitRunner, predictorOf: (deviceId: string) => Promise<PredictorRef>, options: Omit<BatchingRunOptions, 'variants' | 'onProgress'>): BatchingUnits {
  const pair = (w: PaperWorkload): string => w.models.join('+');
  return {
    setup: (deviceId, workload) => runUnit(runner, { kind: 'batching-setup', deviceId, workload }, `batching: ${pair(workload)} on ${deviceId}, saturation and co-run limit`),
    variant: async (deviceId, workload, setup, variant) =>
      runUnit(runner, { kind: 'batching-variant', deviceId, workload, setup, variant, predictor: await predictorOf(deviceId), options }, `batching: ${pair(workload)} on ${deviceId} under ${variant.id}`),
  };
}

/** The mixes experiment's units on `runner` (`runMixes`), each device's variants with its predictor. */
export function mixUnits(runner: UnitRunner, predictorOf: (deviceId: string) => Promise<PredictorRef>, options: Pick<MixRunOptions, 'queries' | 'minSpanQos' | 'seed'>): MixUnits {
  return {
    setup: (deviceId, mix) => runUnit(runner, { kind: 'mix-setup', deviceId, mix }, `mixes: ${mix.id} on ${deviceId}, QoS targets and co-run limit`),
    variant: async (deviceId, mix, setup, variant) => runUnit(runner, { kind: 'mix-variant', deviceId, mix, setup, variant, predictor: await predictorOf(deviceId), options }, `mixes: ${mix.id} on ${deviceId} under ${variant.id}`),
  };
}
