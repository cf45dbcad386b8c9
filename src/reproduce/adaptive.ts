/**
 * The adaptive-runtime experiment (issue 13 item 7, `abacus reproduce adaptive`; beyond the
 * paper): in virtual time on a `sim:` device, the device slows down by `factor` (×1.5) in the
 * middle of a run, and Abacus serves through it with and without online refinement of its
 * predictor (`predict/refine.ts`). A second scenario, on-time rejection, fills
 * `AdaptiveJson.rejectionLateMs` (to come with the runtime's rejection timers; see
 * `runAdaptive`).
 *
 * ## The drift run (`runDriftScenario`)
 *
 * Setup: resnet50 + bert, QoS 50 ms each, batch sizes 1/2/4/8/16 drawn uniformly, BERT sequence
 * lengths 16/32/64 (the `abacus simulate --models` defaults), Poisson arrivals shared equally,
 * seed 1, Abacus with its default parameters.
 *
 * Rate: the issue asks for "a rate abacus held at ≤ 1 % before the drift, scaled by 1/1.5". The
 * QoS target does not stretch with the device, so the drifted device at rate R and QoS Q is the
 * undrifted device at rate factor·R and QoS Q / factor (every time × factor), not at QoS Q: the
 * rate is therefore `peak(undrifted device, QoS Q / factor) / factor`, the peak found by
 * `findPeakRate` (≤ 1 % violations). The literal reading, `peak(undrifted, QoS Q) / factor`, is
 * reported beside it (`literalRateQps`) and run too: there even a predictor that knows the
 * drifted device cannot hold 1 % (docs/adaptive.md).
 *
 * The drift starts at the expected arrival time of the middle query, (queries / 2) / rate.
 *
 * ## Metrics (from the run's group and query records)
 *
 * - APE of a group: |predicted − measured| / measured, the prediction the controller planned
 *   with (refined, and inflated while the guard is on).
 * - `groupsToRecover`: counting the groups launched at or after the change 1, 2, …, the first j
 *   whose rolling MAPE over the last min(j, 500) of them is ≤ 5 % (only groups after the change,
 *   so the calibrated groups before it cannot dilute the error); null when no j is.
 * - `mapeAfterRecovery`: MAPE over the last 500 groups of the run.
 * - `violationRatioAfterRecovery`: (late + rejected) / queries arriving at or after the recovery
 *   instant — the launch of the refined run's j-th group (the change itself when it never
 *   recovers) — the same instant for both runs, so both are judged on the same arrivals.
 */
import { findPeakRate, runExperiment, type ExperimentEnv, type ExperimentResult, type ExperimentService } from '../runtime/experiment.ts';
import { metQos, type GroupRecord, type QueryRecord } from '../runtime/records.ts';
import type { ModelSpec } from '../model/spec.ts';
import type { Predictor } from '../predict/predictor.ts';
import { simEnv } from './colocation.ts';

/** The drift run's setup (module docs). */
export const ADAPTIVE_SETUP = Object.freeze({
  models: Object.freeze(['resnet50', 'bert']),
  qosMs: 50,
  batchSizes: Object.freeze([1, 2, 4, 8, 16]),
  seqLens: Object.freeze([16, 32, 64]),
  factor: 1.5,
  /** Groups in the rolling MAPE (issue 13). */
  mapeWindowGroups: 500,
  /** Recovered: rolling MAPE ≤ this (issue 13). */
  recoveredMape: 0.05,
});

/** One run of the drift scenario, as `--json` carries it. */
export interface DriftRunJson {
  /** MAPE (fraction) over the last 500 groups of the run. */
  readonly mapeAfterRecovery: number;
  /** Groups after the change until the rolling MAPE of the groups after it is ≤ 5 %; null when never. */
  readonly groupsToRecover: number | null;
  /** Violation ratio of the queries arriving at or after the recovery instant (module docs). */
  readonly violationRatioAfterRecovery: number;
  /** Violation ratios of the queries arriving before / at or after the change. */
  readonly violationRatioBeforeChange: number;
  readonly violationRatioAfterChange: number;
  /** MAPE (fraction) of every group of the run. */
  readonly mapeOverall: number;
  readonly groups: number;
  readonly groupsAfterChange: number;
}

/** `--json` `adaptive`. */
export interface AdaptiveJson extends DriftRunJson {
  readonly withoutRefinement: DriftRunJson;
  /**
   * How long after its hopeless instant a queued query was answered, ms (0 on the virtual clock
   * when rejections are on time). null here: filled by the on-time rejection scenario, a second
   * function beside `runDriftScenario` (see `runAdaptive`).
   */
  readonly rejectionLateMs: number | null;
  /** The drift run's device id, rate and where the rate came from. */
  readonly deviceId: string;
  readonly rateQps: number;
  /** peak(undrifted, QoS / factor): the rate is this / factor. */
  readonly peakBeforeQps: number;
  /** peak(undrifted, QoS) / factor, the literal reading, and both variants' violation ratio after recovery at it. */
  readonly literalRateQps: number;
  readonly literal: { readonly withRefinement: DriftRunJson; readonly withoutRefinement: DriftRunJson };
  readonly changeAtMs: number;
  /** The instant violations after recovery count from, ms (module docs). */
  readonly recoveredAtMs: number;
  readonly queries: number;
}

/** What a drift run's records say (module docs, "Metrics"); `recoveredAtMs`: the instant to count violations from, or undefined to use this run's own. */
export function driftMetrics(records: { readonly groups: readonly GroupRecord[]; readonly queries: readonly QueryRecord[] }, changeAtMs: number, recoveredAtMs?: number): DriftRunJson & { readonly recoveredAtMs: number } {
  const { window, recovered } = { window: ADAPTIVE_SETUP.mapeWindowGroups, recovered: ADAPTIVE_SETUP.recoveredMape };
  const ape = (g: GroupRecord): number => (g.predictedMs === undefined ? NaN : Math.abs(g.predictedMs - g.measuredMs) / g.measuredMs);
  const groups = records.groups;
  const after = groups.filter((g) => g.launchMs >= changeAtMs);
  let groupsToRecover: number | null = null;
  let sum = 0;
  for (let j = 1; j <= after.length; j++) {
    sum += ape(after[j - 1]!);
    if (j > window) sum -= ape(after[j - 1 - window]!);
    if (sum / Math.min(j, window) <= recovered) {
      groupsToRecover = j;
      break;
    }
  }
  const own = groupsToRecover === null ? changeAtMs : after[groupsToRecover - 1]!.launchMs;
  const from = recoveredAtMs ?? own;
  const mean = (xs: readonly GroupRecord[]): number => (xs.length === 0 ? NaN : xs.reduce((s, g) => s + ape(g), 0) / xs.length);
  const violation = (qs: readonly QueryRecord[]): number => (qs.length === 0 ? NaN : qs.filter((q) => !metQos(q)).length / qs.length);
  const qs = records.queries;
  return {
    mapeAfterRecovery: mean(groups.slice(-window)),
    groupsToRecover,
    violationRatioAfterRecovery: violation(qs.filter((q) => q.arrivalMs >= from)),
    violationRatioBeforeChange: violation(qs.filter((q) => q.arrivalMs < changeAtMs)),
    violationRatioAfterChange: violation(qs.filter((q) => q.arrivalMs >= changeAtMs)),
    mapeOverall: mean(groups),
    groups: groups.length,
    groupsAfterChange: after.length,
    recoveredAtMs: own,
  };
}

/** Options of `runAdaptive`. */
export interface AdaptiveOptions {
  /** The undrifted device, e.g. `sim:a100`. */
  readonly deviceId: string;
  /** Queries per run [4000]. */
  readonly queries: number;
  readonly seed: number;
  /** Bisection steps of the peak searches [6]. */
  readonly bisections?: number;
  readonly onProgress?: (line: string) => void;
}

/** The services of the drift run (module docs). */
export function adaptiveServices(specs: ReadonlyMap<string, ModelSpec>): ExperimentService[] {
  return ADAPTIVE_SETUP.models.map((m) => {
    const spec = specs.get(m);
    if (spec === undefined) throw new RangeError(`adaptive: no spec for model '${m}'`);
    return { name: m, spec, qosTargetMs: ADAPTIVE_SETUP.qosMs, maxQueueLength: 10_000, batchSizes: ADAPTIVE_SETUP.batchSizes, ...(spec.dynamicAxes.seq === undefined ? {} : { seqLens: ADAPTIVE_SETUP.seqLens }) };
  });
}

/** Abacus' peak rate (≤ 1 % violations) on the undrifted device with every QoS target × `qosScale`, queries/s. */
async function peakRate(o: AdaptiveOptions, specs: ReadonlyMap<string, ModelSpec>, predictor: Predictor, qosScale: number): Promise<number> {
  const services = adaptiveServices(specs).map((s) => ({ ...s, qosTargetMs: s.qosTargetMs * qosScale }));
  const peak = await findPeakRate(simEnv(o.deviceId, services, predictor, o.seed), { services, policy: 'abacus', queries: o.queries, seed: o.seed, startQps: 50, ...(o.bisections === undefined ? {} : { bisections: o.bisections }) });
  if (!(peak.peakRateQps > 0)) throw new Error(`adaptive: abacus held no rate at ≤ 1 % violations on ${o.deviceId} (QoS × ${qosScale})`);
  return peak.peakRateQps;
}

/**
 * The drift run at `rateQps` with and without refinement (module docs).
 * @returns both runs' metrics; violations after recovery of both counted from the refined run's recovery instant.
 */
export async function runDriftScenario(
  o: AdaptiveOptions,
  specs: ReadonlyMap<string, ModelSpec>,
  predictor: Predictor,
  rateQps: number,
): Promise<{ deviceId: string; changeAtMs: number; recoveredAtMs: number; withRefinement: DriftRunJson; withoutRefinement: DriftRunJson }> {
  const changeAtMs = Math.round((o.queries / 2 / rateQps) * 1000);
  const deviceId = `${o.deviceId}:drift-${ADAPTIVE_SETUP.factor}x@${changeAtMs}ms`;
  const services = adaptiveServices(specs);
  const env: ExperimentEnv = simEnv(deviceId, services, predictor, o.seed);
  const run = (refine: boolean): Promise<ExperimentResult> => runExperiment(env, { services, policy: 'abacus', policyParams: { refine }, rateQps, queries: o.queries, seed: o.seed, keepRecords: true });
  const refined = await run(true);
  const { recoveredAtMs, ...withRefinement } = driftMetrics(refined.records!, changeAtMs);
  const { recoveredAtMs: _unused, ...withoutRefinement } = driftMetrics((await run(false)).records!, changeAtMs, recoveredAtMs);
  return { deviceId, changeAtMs, recoveredAtMs, withRefinement, withoutRefinement };
}

/**
 * The whole experiment: the rate (module docs), the drift run at it and at the literal rate.
 * The on-time rejection scenario is the second function to add beside `runDriftScenario`; until
 * then `rejectionLateMs` is null.
 * @throws Error when abacus holds no rate at ≤ 1 % on the undrifted device; what the runs throw.
 */
export async function runAdaptive(o: AdaptiveOptions, specs: ReadonlyMap<string, ModelSpec>, predictor: Predictor): Promise<AdaptiveJson> {
  const f = ADAPTIVE_SETUP.factor;
  o.onProgress?.(`adaptive: abacus peak on ${o.deviceId} at QoS ${ADAPTIVE_SETUP.qosMs / f} ms and ${ADAPTIVE_SETUP.qosMs} ms …\n`);
  const peakBeforeQps = await peakRate(o, specs, predictor, 1 / f);
  const literalRateQps = (await peakRate(o, specs, predictor, 1)) / f;
  const rateQps = peakBeforeQps / f;
  o.onProgress?.(`adaptive: drift ×${f} at mid-run, ${rateQps.toFixed(1)} q/s (peak at QoS / ${f}: ${peakBeforeQps.toFixed(1)} q/s), with and without refinement …\n`);
  const main = await runDriftScenario(o, specs, predictor, rateQps);
  o.onProgress?.(`adaptive: the same at the literal rate ${literalRateQps.toFixed(1)} q/s …\n`);
  const literal = await runDriftScenario(o, specs, predictor, literalRateQps);
  return {
    ...main.withRefinement,
    withoutRefinement: main.withoutRefinement,
    rejectionLateMs: null,
    deviceId: main.deviceId,
    rateQps,
    peakBeforeQps,
    literalRateQps,
    literal: { withRefinement: literal.withRefinement, withoutRefinement: literal.withoutRefinement },
    changeAtMs: main.changeAtMs,
    recoveredAtMs: main.recoveredAtMs,
    queries: o.queries,
  };
}
