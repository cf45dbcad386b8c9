/**
 * The adaptive-runtime experiment (`abacus reproduce adaptive`, docs/adaptive.md "Measured";
 * beyond the paper): in virtual time on a `sim:` device, the device slows down by `factor` (×1.5) in the
 * middle of a run, and Abacus serves through it with and without online refinement of its
 * predictor (`predict/refine.ts`). A second scenario, on-time rejection
 * (`runRejectionScenario`), fills `AdaptiveJson.rejectionLateMs`.
 *
 * ## The drift run (`runDriftScenario`)
 *
 * Setup: resnet50 + bert, QoS 50 ms each, batch sizes 1/2/4/8/16 drawn uniformly, BERT sequence
 * lengths 16/32/64 (the `abacus simulate --models` defaults), Poisson arrivals shared equally,
 * seed 1, Abacus with its default parameters.
 *
 * Rate: the experiment runs at a rate abacus held at ≤ 1 % before the drift, scaled by 1/1.5
 * (docs/adaptive.md "The rate"). The
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
 *
 * ## On-time rejection (`runRejectionScenario`)
 *
 * One long query (resnet50, batch 16, the largest profiled) starts alone on the device; 1 ms later a short one (bert,
 * batch 1, seq 16) arrives behind it. Its hopeless instant is the first instant at which its
 * headroom is below its predicted solo latency plus the predicted time until the device can
 * take it (the long group's predicted remainder): abacus should answer it `qos_violation`
 * exactly then. Two cases:
 * - `atArrival`: its QoS target is its predicted solo latency + half the long group's predicted
 *   remainder at its arrival — hopeless on arrival;
 * - `duringOverrun`: on the device slowed ×1.5 from the start (the long group overruns its
 *   prediction by half), a target that fits behind the group as predicted, with its latest start
 *   (deadline − predicted solo) a quarter of the group's predicted latency after its predicted
 *   end — hopeless at that latest start, while the group still runs.
 * Each case also runs with the runtime deciding only when the device is idle (`decideAhead:
 * false`, how the runtime worked before): the query is then answered when the long group ends.
 * `rejectionLateMs` = the later of the two cases' (answer − hopeless instant), on the virtual
 * clock.
 */
import { driveUntilSettled } from '../clock/drive.ts';
import { nextInstantAfter } from '../clock/instant.ts';
import { VirtualClock } from '../clock/virtual.ts';
import { findPeakRate, runExperiment, type ExperimentEnv, type ExperimentResult, type ExperimentService } from '../runtime/experiment.ts';
import { ServingRuntime } from '../runtime/runtime.ts';
import { createController } from '../schedule/index.ts';
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
  /** Groups in the rolling MAPE (the window docs/adaptive.md "Measured" reports). */
  mapeWindowGroups: 500,
  /** Recovered: rolling MAPE ≤ this (the project's 5 % calibration bound, docs/adaptive.md "The guard"). */
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
   * How long after its hopeless instant a queued query was answered, ms, the later of the two
   * cases of the on-time rejection scenario (module docs; 0 on the virtual clock when rejections
   * are on time).
   */
  readonly rejectionLateMs: number;
  /** The on-time rejection scenario's two cases (module docs). */
  readonly rejection: { readonly atArrival: RejectionCaseJson; readonly duringOverrun: RejectionCaseJson };
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

/** One case of the on-time rejection scenario (module docs); times on the virtual clock, ms. */
export interface RejectionCaseJson {
  readonly deviceId: string;
  /** The long group's predicted and simulated latency. */
  readonly longPredictedMs: number;
  readonly longMeasuredMs: number;
  readonly shortArrivalMs: number;
  readonly shortQosTargetMs: number;
  /** Its predicted solo latency. */
  readonly shortSoloMs: number;
  readonly hopelessAtMs: number;
  /** When it was answered, and how (`qos_violation` expected). */
  readonly answeredAtMs: number;
  readonly outcome: string;
  /** answeredAtMs − hopelessAtMs. */
  readonly lateMs: number;
  /** The same with the runtime deciding only when the device is idle. */
  readonly answeredAtMsDecidingWhenIdle: number;
  readonly lateMsDecidingWhenIdle: number;
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

/** One long and one short query on `deviceId`, as in the module docs; `shortQos` sets the short one's QoS target from the predictions. */
async function rejectionRun(deviceId: string, specs: ReadonlyMap<string, ModelSpec>, predictor: Predictor, seed: number, decideAhead: boolean, shortQos: (p: { soloMs: number; longPredictedEndMs: number; arrivalMs: number }) => number) {
  const services = adaptiveServices(specs);
  const [longService, shortService] = services as [ExperimentService, ExperimentService];
  const opened = await simEnv(deviceId, services, predictor, seed).open();
  const clock = opened.clock as VirtualClock;
  try {
    const runtime = new ServingRuntime({ clock, device: opened.device, controller: createController('abacus', {}, predictor), services, decideAhead });
    const long = runtime.submit({ service: longService.name, batch: 16, id: 'long' });
    await driveUntilSettled(clock, clock.sleep(1));
    const seqLen = ADAPTIVE_SETUP.seqLens[0]!;
    const soloMs = predictor.predict([[{ model: shortService.spec.name, start: 0, end: shortService.spec.operators.length, batch: 1, seqLen }]])[0]!;
    const g = runtime.groups[0]!;
    const arrivalMs = clock.now();
    const qosTargetMs = shortQos({ soloMs, longPredictedEndMs: g.launchMs + g.predictedMs!, arrivalMs });
    const short = await driveUntilSettled(clock, runtime.submit({ service: shortService.name, batch: 1, seqLen, id: 'short', qosTargetMs }));
    await driveUntilSettled(clock, long);
    return { longPredictedMs: g.predictedMs!, longMeasuredMs: g.measuredMs, arrivalMs, qosTargetMs, soloMs, answeredAtMs: short.record.endMs!, outcome: short.ok ? 'completed' : short.reason };
  } finally {
    await opened.release();
  }
}

/**
 * The on-time rejection scenario (module docs): both cases, each deciding ahead (the runtime's
 * default) and only when idle.
 * @throws Error when a case's short query was not hopeless as set up (the long group too short).
 */
export async function runRejectionScenario(deviceId: string, specs: ReadonlyMap<string, ModelSpec>, predictor: Predictor, seed: number): Promise<{ atArrival: RejectionCaseJson; duringOverrun: RejectionCaseJson }> {
  const run = async (id: string, shortQos: (p: { soloMs: number; longPredictedEndMs: number; arrivalMs: number }) => number, hopelessAt: (r: { arrivalMs: number; qosTargetMs: number; soloMs: number }) => number): Promise<RejectionCaseJson> => {
    const ahead = await rejectionRun(id, specs, predictor, seed, true, shortQos);
    const idle = await rejectionRun(id, specs, predictor, seed, false, shortQos);
    const hopelessAtMs = hopelessAt(ahead);
    return {
      deviceId: id,
      longPredictedMs: ahead.longPredictedMs,
      longMeasuredMs: ahead.longMeasuredMs,
      shortArrivalMs: ahead.arrivalMs,
      shortQosTargetMs: ahead.qosTargetMs,
      shortSoloMs: ahead.soloMs,
      hopelessAtMs,
      answeredAtMs: ahead.answeredAtMs,
      outcome: ahead.outcome,
      lateMs: ahead.answeredAtMs - hopelessAtMs,
      answeredAtMsDecidingWhenIdle: idle.answeredAtMs,
      lateMsDecidingWhenIdle: idle.answeredAtMs - hopelessAtMs,
    };
  };
  const atArrival = await run(
    deviceId,
    ({ soloMs, longPredictedEndMs, arrivalMs }) => soloMs + (longPredictedEndMs - arrivalMs) / 2,
    ({ arrivalMs }) => arrivalMs,
  );
  const duringOverrun = await run(
    `${deviceId}:drift-${ADAPTIVE_SETUP.factor}x@0ms`,
    ({ soloMs, longPredictedEndMs, arrivalMs }) => longPredictedEndMs * 1.25 + soloMs - arrivalMs,
    // the first instant after its latest start (heads.ts hopelessAtMs)
    ({ arrivalMs, qosTargetMs, soloMs }) => nextInstantAfter(arrivalMs + qosTargetMs - soloMs),
  );
  for (const c of [atArrival, duringOverrun]) {
    if (c.outcome !== 'qos_violation') throw new Error(`adaptive: the on-time rejection scenario on ${c.deviceId}: the short query ended ${c.outcome}, not qos_violation (${JSON.stringify(c)})`);
  }
  return { atArrival, duringOverrun };
}

/**
 * The whole experiment: the rate (module docs), the drift run at it and at the literal rate,
 * and the on-time rejection scenario.
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
  o.onProgress?.(`adaptive: on-time rejection behind a long group …\n`);
  const rejection = await runRejectionScenario(o.deviceId, specs, predictor, o.seed);
  return {
    ...main.withRefinement,
    withoutRefinement: main.withoutRefinement,
    rejectionLateMs: Math.max(rejection.atArrival.lateMs, rejection.duringOverrun.lateMs),
    rejection,
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
