/**
 * The paper's co-location experiments on a simulated accelerator (docs/reproduction.md; Abacus SC'21
 * §7.2–7.4), run through the same runtime, controllers and predictor as real serving:
 *
 * - `qos` (§7.2): each pair at its QoS target under Poisson load (50 queries/s), every policy:
 *   99th-percentile latency ÷ QoS target and violation ratio;
 * - `throughput` (§7.3): each pair's peak goodput at ≤ 1 % violations per policy
 *   (`findPeakRate`), and Abacus ÷ the best of fcfs/sjf/edf;
 * - `beyond-pair` (§7.4): the paper's 3-way sets, as `qos`.
 *
 * Query shapes (not given in the workloads file; our assumption, stated in the report): batch
 * sizes drawn uniformly from {1, 2, 4, 8, 16}, BERT sequence lengths from {8, 16, 32, 64},
 * services share the offered load equally.
 */
import { VirtualClock } from '../clock/virtual.ts';
import { SimDevice } from '../device/sim/index.ts';
import { artifactAt } from '../model/artifact.ts';
import type { ModelSpec } from '../model/spec.ts';
import type { Predictor } from '../predict/predictor.ts';
import { findPeakRate, runExperiment, type ExperimentEnv, type ExperimentResult, type ExperimentService } from '../runtime/experiment.ts';
import { POLICY_VARIANTS } from '../schedule/index.ts';
import type { PaperWorkload } from './workloads.ts';

/** Batch sizes and sequence lengths of the simulated queries (see the file comment). */
export const PAPER_BATCH_SIZES: readonly number[] = [1, 2, 4, 8, 16];
export const PAPER_SEQ_LENS: readonly number[] = [8, 16, 32, 64];

/** The policies compared with Abacus (the paper's baselines) and the extra ones. */
export const BASELINES = ['fcfs', 'sjf', 'edf'] as const;


/** One workload × policy. */
export interface ColocationRow {
  readonly set: string;
  readonly policy: string;
  readonly qosMs: number;
  readonly rateQps: number;
  readonly violationRatio: number;
  readonly p99Ms: number;
  readonly p99OverQos: number;
  readonly goodputQps: number;
  readonly meanGroupSize: number;
  readonly predictorMape: number;
  /** Peak goodput at ≤ 1 % violations, queries/s (throughput experiment only). */
  readonly peakGoodputQps?: number;
}

/** Services of a workload: one per model (a model twice gets `-1` suffixed names), batch sizes `batchSizes` [PAPER_BATCH_SIZES]. */
export function workloadServices(w: PaperWorkload, specs: ReadonlyMap<string, ModelSpec>, batchSizes: readonly number[] = PAPER_BATCH_SIZES): ExperimentService[] {
  return w.models.map((m, i) => {
    const spec = specs.get(m);
    if (spec === undefined) throw new RangeError(`workload ${w.models.join('+')}: no spec for model '${m}'`);
    return {
      name: w.models.indexOf(m) === i ? m : `${m}-${i}`,
      spec,
      qosTargetMs: w.qosMs,
      maxQueueLength: 10_000,
      batchSizes,
      ...(spec.dynamicAxes.seq === undefined ? {} : { seqLens: PAPER_SEQ_LENS }),
    };
  });
}

/** A fresh simulated device (seeded) with the services loaded, per run. */
export function simEnv(deviceId: string, services: readonly ExperimentService[], predictor: Predictor, seed: number): ExperimentEnv {
  return {
    predictor,
    open: async () => {
      const clock = new VirtualClock();
      const device = await SimDevice.create({ clock, id: deviceId, seed });
      await device.load(services.map((s) => ({ name: s.name, model: artifactAt('/nonexistent', s.spec) })));
      return { clock, device, release: () => device.close() };
    },
  };
}

function row(set: string, w: PaperWorkload, r: ExperimentResult, peakGoodputQps?: number, policy = r.policy): ColocationRow {
  return {
    set,
    policy,
    qosMs: w.qosMs,
    rateQps: r.rateQps,
    violationRatio: r.overall.violationRatio,
    p99Ms: r.overall.p99Ms,
    p99OverQos: r.overall.p99Ms / w.qosMs,
    goodputQps: r.overall.goodputQps,
    meanGroupSize: r.meanGroupSize,
    predictorMape: r.predictorMape,
    ...(peakGoodputQps === undefined ? {} : { peakGoodputQps }),
  };
}

/**
 * Run one workload under each policy: at its offered load, or (`findPeak`) the peak search
 * starting from it. The paper's `search_ways` / `slack_ms` parameterize Abacus. `batchSizes`
 * overrides the query batch sizes [PAPER_BATCH_SIZES].
 */
export async function runWorkload(
  deviceId: string,
  w: PaperWorkload,
  specs: ReadonlyMap<string, ModelSpec>,
  predictor: Predictor,
  options: { policies: readonly string[]; queries: number; seed: number; findPeak: boolean; batchSizes?: readonly number[] },
): Promise<ColocationRow[]> {
  const services = workloadServices(w, specs, options.batchSizes);
  const env = simEnv(deviceId, services, predictor, options.seed);
  const set = w.models.join('+');
  const rows: ColocationRow[] = [];
  for (const policy of options.policies) {
    const variant = POLICY_VARIANTS[policy];
    const name = variant?.policy ?? policy;
    const policyParams = name === 'abacus' ? { ways: w.searchWays, slackMs: w.slackMs, ...variant?.params } : {};
    const base = { services, policy: name, policyParams, queries: options.queries, seed: options.seed };
    if (options.findPeak) {
      const peak = await findPeakRate(env, { ...base, startQps: w.offeredLoadQps / 2 });
      const at = peak.atPeak ?? (await runExperiment(env, { ...base, rateQps: w.offeredLoadQps }));
      rows.push(row(set, w, at, peak.peakGoodputQps, policy));
    } else {
      rows.push(row(set, w, await runExperiment(env, { ...base, rateQps: w.offeredLoadQps }), undefined, policy));
    }
  }
  return rows;
}
