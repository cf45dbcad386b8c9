/**
 * Harder service mixes than a pair at batch 16 (`abacus reproduce mixes`, docs/mixes.md):
 * single-sample Poisson requests with dynamic batching on, on `sim:a100` and
 * `sim:h200:graph`, everything simulated (virtual time). Per mix and device, the peak goodput at
 * ≤ 1 % violations (`findPeakRate`) of barrier abacus, abacus without the group barrier, and the
 * batching baselines (Triton's dynamic batcher, Clockwork, FCFS and EDF with batching), beside the
 * mix's continuous co-run limit (`co-run.ts`).
 *
 * The mixes (`MIXES`):
 * - `beyond-pair`: the paper's four §7.4 triples at their QoS targets, and one set of four
 *   services (resnet101, resnet152, vgg19, bert at 150 ms);
 * - `tight`: two pairs (resnet50 + vgg16, inception_v3 + bert) with each service's QoS target
 *   1.5× and 2× its model's batch-1 solo latency on the device;
 * - `skewed`: resnet50 + resnet101 at 100 ms with 9 : 1 and 1 : 9 of the load;
 * - `heavy-light`: vgg19 at 80 ms beside bert at 5 ms (a heavy model and a light one with a tight
 *   target; where bert alone at batch 1 takes more than 5 ms / 1.2 on the device, bert's target is
 *   1.2× its solo latency instead, and the row says so in `qosMs`).
 * The headline mean (`meanRatioVsBestBaseline`) is abacus without the barrier ÷ the best
 * baseline of each mix (Triton included), over the `beyond-pair` and `tight` mixes.
 */
import type { ModelSpec } from '../model/spec.ts';
import type { Predictor } from '../predict/predictor.ts';
import type { ExperimentService } from '../runtime/experiment.ts';
import { BATCHING_LIMITS, BATCHING_MAX_BATCH_SIZE, BATCHING_SEQ_LEN, BATCHING_VARIANTS, groupLatencyMs, peakAndItsRun, queriesFor, type BatchingVariant } from './batching.ts';
import { coRunLimit, type CoRunLimit } from './co-run.ts';
import { simEnv } from './colocation.ts';
import type { PaperWorkload } from './workloads.ts';

/** What a mix stresses. */
export type MixKind = 'beyond-pair' | 'tight' | 'skewed' | 'heavy-light';

/** One service mix. */
export interface Mix {
  readonly id: string;
  readonly kind: MixKind;
  readonly models: readonly string[];
  /** QoS target per service, ms (absent: `qosFactor` × each model's batch-1 solo latency on the device). */
  readonly qosMs?: readonly number[];
  readonly qosFactor?: number;
  /** Share of the load per service (absent: equal). */
  readonly weights?: readonly number[];
}

/** bert's target in the heavy-light mix, ms. */
export const HEAVY_LIGHT_BERT_QOS_MS = 5;

/** The mixes (module docs); the §7.4 triples come from the paper's workloads. */
export function mixes(workloads: readonly PaperWorkload[]): Mix[] {
  const out: Mix[] = workloads.filter((w) => w.experiment === '7.4_beyond_pair').map((w) => ({ id: w.models.join('+'), kind: 'beyond-pair' as const, models: w.models, qosMs: w.models.map(() => w.qosMs) }));
  out.push({ id: 'resnet101+resnet152+vgg19+bert', kind: 'beyond-pair', models: ['resnet101', 'resnet152', 'vgg19', 'bert'], qosMs: [150, 150, 150, 150] });
  for (const factor of [1.5, 2]) {
    for (const models of [['resnet50', 'vgg16'], ['inception_v3', 'bert']]) out.push({ id: `${models.join('+')} @${factor}x`, kind: 'tight', models, qosFactor: factor });
  }
  out.push({ id: 'resnet50+resnet101 9:1', kind: 'skewed', models: ['resnet50', 'resnet101'], qosMs: [100, 100], weights: [9, 1] });
  out.push({ id: 'resnet50+resnet101 1:9', kind: 'skewed', models: ['resnet50', 'resnet101'], qosMs: [100, 100], weights: [1, 9] });
  out.push({ id: 'vgg19+bert@5ms', kind: 'heavy-light', models: ['vgg19', 'bert'], qosMs: [80, HEAVY_LIGHT_BERT_QOS_MS] });
  return out;
}

/**
 * The mixes a run takes: every one of `mixes`, or with `quick` 7 of the 12, every kind kept: the
 * first two §7.4 triples and the set of four, both tight pairs at 1.5× (not 2×), the 9 : 1 skew
 * (not its mirror) and the heavy-light mix; then the first `count` of those. The mixes were the
 * longest part of `reproduce all --quick` (docs/reproduction.md).
 */
export function mixesToRun(workloads: readonly PaperWorkload[], o: { readonly quick: boolean; readonly count?: number }): Mix[] {
  const all = mixes(workloads);
  const triples = all.filter((m) => m.kind === 'beyond-pair' && m.models.length === 3).slice(0, 2);
  const chosen = o.quick
    ? all.filter((m) => triples.includes(m) || (m.kind === 'beyond-pair' && m.models.length > 3) || (m.kind === 'tight' && m.qosFactor === 1.5) || (m.kind === 'skewed' && m.weights?.[0] === 9) || m.kind === 'heavy-light')
    : all;
  return chosen.slice(0, o.count);
}

/** The policies of the mixes: every batching variant but abacus without batching. */
export const MIX_VARIANTS: readonly BatchingVariant[] = BATCHING_VARIANTS.filter((v) => v.batching);

/** One (mix, device, policy) at its peak. */
export interface MixRow {
  readonly mix: string;
  readonly kind: MixKind;
  readonly device: string;
  readonly policy: string;
  /** QoS target per service, ms, joined with '/'. */
  readonly qosMs: string;
  readonly peakGoodputQps: number;
  readonly peakRateQps: number;
  readonly violationRatio: number;
  readonly meanBatch: number;
  readonly predictorMape: number;
  /** The mix's continuous co-run limit on the device, queries/s, and its batch. */
  readonly coRunLimitQps: number;
  readonly coRunBatch: number;
  readonly bracketed: boolean;
}

/** The QoS target of each service of `mix` on `deviceId`, ms (module docs). */
export async function mixQosMs(deviceId: string, mix: Mix, specs: ReadonlyMap<string, ModelSpec>): Promise<number[]> {
  const spec = (m: string): ModelSpec => {
    const s = specs.get(m);
    if (s === undefined) throw new RangeError(`mix ${mix.id}: no spec for model '${m}'`);
    return s;
  };
  if (mix.qosFactor !== undefined) return Promise.all(mix.models.map(async (m) => mix.qosFactor! * (await groupLatencyMs(deviceId, [spec(m)], 1, BATCHING_SEQ_LEN))));
  const qos = [...(mix.qosMs ?? [])];
  if (mix.kind === 'heavy-light') {
    const i = mix.models.indexOf('bert');
    const bertMs = await groupLatencyMs(deviceId, [spec('bert')], 1, BATCHING_SEQ_LEN);
    if (i >= 0 && 1.2 * bertMs > qos[i]!) qos[i] = 1.2 * bertMs;
  }
  return qos;
}

/** The services of a mix: batch-1 requests, BERT at `BATCHING_SEQ_LEN`, `BATCHING_LIMITS`, its targets and shares. */
export function mixServices(mix: Mix, specs: ReadonlyMap<string, ModelSpec>, qosMs: readonly number[]): ExperimentService[] {
  return mix.models.map((m, i) => {
    const spec = specs.get(m)!;
    return {
      name: mix.models.indexOf(m) === i ? m : `${m}-${i}`,
      spec,
      qosTargetMs: qosMs[i]!,
      maxQueueLength: 10_000,
      batchSizes: [1],
      batching: BATCHING_LIMITS,
      ...(spec.dynamicAxes.seq === undefined ? {} : { seqLens: [BATCHING_SEQ_LEN] }),
      ...(mix.weights === undefined ? {} : { weight: mix.weights[i]! }),
    };
  });
}

/** Options of the mixes' runs (`runMixes`, `runMixVariant`). */
export interface MixRunOptions {
  readonly variants: readonly BatchingVariant[];
  readonly queries: number;
  /** Every run lasts at least this many (smallest) QoS targets of arrivals. */
  readonly minSpanQos: number;
  readonly seed: number;
  readonly devices: readonly string[];
  readonly onProgress?: (line: string) => void;
}

/** What every variant of one mix on one device shares: the services' QoS targets (ms) and the mix's continuous co-run limit. */
export interface MixSetup {
  readonly qosMs: readonly number[];
  readonly limit: CoRunLimit;
}

/**
 * The setup of one mix on one device (`mixQosMs`, `coRunLimit`).
 * @throws RangeError for a model without a spec; what the device throws.
 */
export async function mixSetup(deviceId: string, mix: Mix, specs: ReadonlyMap<string, ModelSpec>): Promise<MixSetup> {
  const qos = await mixQosMs(deviceId, mix, specs);
  const services = mixServices(mix, specs, qos);
  const limit = await coRunLimit(deviceId, services.map((s) => s.spec), qos, BATCHING_MAX_BATCH_SIZE, BATCHING_SEQ_LEN, undefined, mix.weights);
  return { qosMs: qos, limit };
}

/** One variant's peak on one mix and device: its row and the number of runs the peak search took. */
export async function runMixVariant(
  deviceId: string,
  mix: Mix,
  specs: ReadonlyMap<string, ModelSpec>,
  predictor: Predictor,
  setup: MixSetup,
  v: BatchingVariant,
  o: Pick<MixRunOptions, 'queries' | 'minSpanQos' | 'seed'>,
): Promise<{ row: MixRow; runs: number }> {
  const qos = setup.qosMs;
  const services = mixServices(mix, specs, qos);
  const minQos = Math.min(...qos);
  const env = simEnv(deviceId, services, predictor, o.seed);
  const policyParams = { ...(v.policy === 'abacus' ? { ways: 2, slackMs: 5 } : {}), ...v.params };
  const base = { services, policy: v.policy, policyParams, queries: o.queries, seed: o.seed, queriesFor: (rateQps: number) => queriesFor(rateQps, minQos, o.queries, o.minSpanQos) };
  const { peak, at } = await peakAndItsRun(env, { ...base, startQps: setup.limit.qps / 4 });
  const row: MixRow = {
    mix: mix.id,
    kind: mix.kind,
    device: deviceId,
    policy: v.id,
    qosMs: qos.map((x) => x.toFixed(1)).join('/'),
    peakGoodputQps: peak.peakGoodputQps,
    peakRateQps: peak.peakRateQps,
    violationRatio: at.overall.violationRatio,
    meanBatch: at.meanBatch,
    predictorMape: at.predictorMape,
    coRunLimitQps: setup.limit.qps,
    coRunBatch: setup.limit.batch,
    bracketed: peak.bracketed,
  };
  return { row, runs: peak.tried.length };
}

/** How `runMixes` runs its units: in this thread or in a pool of threads (`reproduce/units.ts`); each unit is independent and deterministic. */
export interface MixUnits {
  setup(deviceId: string, mix: Mix): Promise<MixSetup>;
  variant(deviceId: string, mix: Mix, setup: MixSetup, v: BatchingVariant): Promise<{ row: MixRow; runs: number }>;
}

/**
 * Every mix on every device under every variant, the units started at once (`units` decides how
 * many run together); rows in device, mix, variant order whatever order the units finish in.
 */
export async function runMixes(list: readonly Mix[], units: MixUnits, o: Pick<MixRunOptions, 'variants' | 'devices' | 'onProgress'>): Promise<MixRow[]> {
  const perMix = await Promise.all(
    o.devices.flatMap((device) =>
      list.map(async (mix) => {
        const setup = await units.setup(device, mix);
        return Promise.all(
          o.variants.map(async (v) => {
            const { row, runs } = await units.variant(device, mix, setup, v);
            o.onProgress?.(`mixes: ${device} ${mix.id} ${v.id}: peak ${row.peakGoodputQps.toFixed(1)} q/s (${runs} runs)\n`);
            return row;
          }),
        );
      }),
    ),
  );
  return perMix.flat();
}

/** Headline of one device (`--json` `mixes[device]`). */
export interface MixesHeadline {
  /** Abacus without the barrier ÷ the best baseline (Triton included) of each mix, mean over the beyond-pair and tight mixes. */
  readonly meanRatioVsBestBaseline: number | null;
  /** The same ratio over every mix. */
  readonly meanRatioVsBestBaselineAll: number | null;
  readonly rows: readonly MixRow[];
}

/** Policies a mix's best baseline is taken from. */
export const MIX_BASELINES: readonly string[] = ['triton', 'clockwork', 'fcfs-batch', 'edf-batch'];

/** Per device: each mix's ratio and the headline means. */
export function mixesHeadline(rows: readonly MixRow[]): Record<string, MixesHeadline> {
  const out: Record<string, MixesHeadline> = {};
  for (const device of [...new Set(rows.map((r) => r.device))]) {
    const mine = rows.filter((r) => r.device === device);
    const ratios: { kind: MixKind; ratio: number }[] = [];
    for (const mix of [...new Set(mine.map((r) => r.mix))]) {
      const of = mine.filter((r) => r.mix === mix);
      const nb = of.find((r) => r.policy === 'abacus-no-barrier');
      const best = Math.max(0, ...of.filter((r) => MIX_BASELINES.includes(r.policy)).map((r) => r.peakGoodputQps));
      if (nb !== undefined && best > 0) ratios.push({ kind: nb.kind, ratio: nb.peakGoodputQps / best });
    }
    const mean = (xs: number[]): number | null => (xs.length === 0 ? null : xs.reduce((a, b) => a + b, 0) / xs.length);
    out[device] = {
      meanRatioVsBestBaseline: mean(ratios.filter((r) => r.kind === 'beyond-pair' || r.kind === 'tight').map((r) => r.ratio)),
      meanRatioVsBestBaselineAll: mean(ratios.map((r) => r.ratio)),
      rows: mine,
    };
  }
  return out;
}
