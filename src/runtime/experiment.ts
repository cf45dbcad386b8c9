/**
 * One load experiment, the unit of `abacus bench` and `abacus simulate`: offer an
 * open-loop arrival process to a `ServingRuntime` for N queries under one policy, wait until
 * every query has its outcome, and summarize (`runtime/stats.ts`). `findPeakRate` searches the
 * highest rate whose violation ratio stays ≤ a bound (the paper's "peak throughput at QoS",
 * §7.3).
 *
 * The same code runs on a real device with the wall clock and on a simulated device with the
 * virtual clock: `ExperimentEnv.open` hands out the clock and a device with the services
 * loaded, and says whether the clock must be driven (`VirtualClock`).
 */
import type { Clock } from '../clock/clock.ts';
import { driveUntilSettled } from '../clock/drive.ts';
import { VirtualClock } from '../clock/virtual.ts';
import type { Device } from '../device/device.ts';
import { neighboursBeside } from '../device/neighbours.ts';
import type { Predictor } from '../predict/predictor.ts';
import { GroupStatsCollector, StatsCollector, type ServingStats } from './stats.ts';
import { createController } from '../schedule/index.ts';
import type { CpuNeighbours, DecisionStats, QueryController, Rejection, ScheduleInput } from '../schedule/controller.ts';
import { poissonArrivals, type ArrivalProcess } from '../workload/arrivals.ts';
import { LoadGenerator, type GeneratorReport, type ServiceLoad } from '../workload/generator.ts';
import { ServingRuntime, type QueryOutcome, type RuntimeService } from './runtime.ts';
import type { RecordFeed } from './feed.ts';
import type { GroupRecord, QueryRecord } from './records.ts';

/** A service of an experiment: the runtime's view plus the shape of its load. */
export interface ExperimentService extends RuntimeService {
  /** Batch sizes drawn uniformly per query. */
  readonly batchSizes: readonly number[];
  /** Sequence lengths drawn uniformly (sequence models only). */
  readonly seqLens?: readonly number[];
  /** Share of the offered load (default 1: services share the rate equally). */
  readonly weight?: number;
}

/** Where an experiment runs: a fresh clock and a device with every service loaded. */
export interface ExperimentEnv {
  /** Open a clock and a device for one run; `release` is called when the run is over. */
  open(): Promise<{ clock: Clock; device: Device; release(): Promise<void> }>;
  readonly predictor: Predictor | undefined;
}

export interface ExperimentOptions {
  readonly services: readonly ExperimentService[];
  readonly policy: string;
  readonly policyParams?: Readonly<Record<string, unknown>>;
  /** abacus with `interference`: what the other processes want of the CPU [a `ProcNeighbours` that counts the device's executors as ours]. */
  readonly neighbours?: CpuNeighbours;
  /** Total offered load over all services, queries/s. */
  readonly rateQps: number;
  readonly queries: number;
  readonly seed: number;
  /** Arrival process for a rate (default Poisson, the paper's). */
  readonly arrivals?: (rateQps: number) => ArrivalProcess;
  /** Return the run's query and group records in `ExperimentResult.records` (for CDFs and reports) [false]. */
  readonly keepRecords?: boolean;
  /** `RuntimeOptions.decideAhead` [true]; false is the idle-gap benchmark's baseline. */
  readonly decideAhead?: boolean;
  /** Where every query and group record goes as it ends (a dashboard observes it); absent: nowhere. */
  readonly feed?: RecordFeed;
}

/** Summary of one run. */
export interface ExperimentResult {
  readonly policy: string;
  readonly rateQps: number;
  readonly overall: ServingStats;
  readonly services: readonly ({ readonly service: string } & ServingStats)[];
  /** Mean segments per launched group (1: no co-location). */
  readonly meanGroupSize: number;
  /** Mean samples per launched segment (> the mean request batch when queries were fused). */
  readonly meanBatch: number;
  readonly groups: number;
  /** MAPE of the controller's predictions against measured group latency (fraction); NaN when the policy does not predict. */
  readonly predictorMape: number;
  /**
   * Between groups (one group at a time): the device's idle time while queries waited over its
   * busy time (`GroupStatsCollector.idleGapRatio`), the part of the busy time outside the
   * longest segment's operators (`outsideOperatorsRatio`), and the share of groups launched as
   * decided ahead (`decidedAheadShare`); fractions, NaN when there were no groups.
   */
  readonly between: { readonly idleGapRatio: number; readonly outsideOperatorsRatio: number; readonly decidedAheadShare: number };
  /** Share of groups decided by abacus's calibration fallback (`schedule/fallback.ts`); 0 without it, NaN for no groups. */
  readonly fallbackShare: number;
  readonly generator: GeneratorReport;
  /** Decisions made and predictor calls, summed. */
  readonly decisions: { readonly count: number; readonly predictorCalls: number; readonly groupsScored: number };
  /** Every query and group of the run, when `options.keepRecords` was set. */
  readonly records?: { readonly queries: readonly QueryRecord[]; readonly groups: readonly GroupRecord[] };
}

/** Wraps a controller to count decisions and sum their stats. */
function counting(inner: QueryController): { controller: QueryController; totals: { count: number; predictorCalls: number; groupsScored: number } } {
  const totals = { count: 0, predictorCalls: 0, groupsScored: 0 };
  const add = (s: DecisionStats): void => {
    totals.count++;
    totals.predictorCalls += s.predictorCalls;
    totals.groupsScored += s.groupsScored;
  };
  return {
    totals,
    controller: {
      policy: inner.policy,
      launchWhileBusy: inner.launchWhileBusy,
      ...(inner.oneGroupPerService === undefined ? {} : { oneGroupPerService: inner.oneGroupPerService }),
      decide(input: ScheduleInput) {
        const d = inner.decide(input);
        add(d.stats);
        return d;
      },
      observe: (o) => inner.observe(o),
      ...(inner.rejected === undefined ? {} : { rejected: (r: readonly Rejection[]) => inner.rejected!(r) }),
    },
  };
}

/**
 * The load generator's view of services: weight (default 1), batch sizes, and sequence lengths
 * for sequence models. Shared with the remote load driver (`serve/client/bench.ts`).
 */
export function serviceLoads(services: readonly Pick<ExperimentService, 'name' | 'spec' | 'batchSizes' | 'seqLens' | 'weight'>[]): ServiceLoad[] {
  return services.map((s) => ({
    service: s.name,
    weight: s.weight ?? 1,
    batchSizes: { values: s.batchSizes },
    ...(s.seqLens === undefined || s.spec.dynamicAxes.seq === undefined ? {} : { seqLens: { values: s.seqLens } }),
  }));
}

/**
 * Check an offered load (shared with `serve/client/bench.ts`).
 * @throws RangeError for a rate that is not a finite number of queries/s > 0, or a query count that is not an integer ≥ 1.
 */
export function checkLoad(rateQps: number, queries: number): void {
  if (!(Number.isFinite(rateQps) && rateQps > 0)) throw new RangeError(`rate must be a finite number of queries/s > 0, got ${rateQps}`);
  if (!Number.isInteger(queries) || queries < 1) throw new RangeError(`queries must be an integer ≥ 1, got ${queries}`);
}

/**
 * Run one experiment to completion (every query answered).
 * @throws RangeError for a bad rate, query count, or policy parameter; what the device throws
 *   at open.
 */
export async function runExperiment(env: ExperimentEnv, options: ExperimentOptions): Promise<ExperimentResult> {
  checkLoad(options.rateQps, options.queries);
  // the device's executors are ours, not neighbours (abacus `interference`); known once it is open
  const beside = neighboursBeside();
  const { controller, totals } = counting(createController(options.policy, options.policyParams ?? {}, env.predictor, { neighbours: options.neighbours ?? beside.neighbours }));
  const opened = await env.open();
  beside.attach(opened.device);
  const { clock, device } = opened;
  const feed = options.feed;
  try {
    // Statistics accumulate as queries end, so a million-query simulation keeps no records
    // unless asked to (`keepRecords`).
    const overall = new StatsCollector();
    const perService = new Map(options.services.map((s) => [s.name, new StatsCollector()]));
    const groupStats = new GroupStatsCollector();
    const runtime = new ServingRuntime({
      clock,
      device,
      controller,
      services: options.services,
      keepRecords: options.keepRecords === true,
      ...(options.decideAhead === undefined ? {} : { decideAhead: options.decideAhead }),
      onQueryEnd: (q) => {
        overall.add(q);
        perService.get(q.service)?.add(q);
        feed?.query(q);
      },
      onGroupEnd: (g) => {
        groupStats.add(g);
        feed?.group(g, clock.now());
      },
    });
    const arrivals = (options.arrivals ?? poissonArrivals)(options.rateQps);
    const generator = new LoadGenerator({ clock, arrivals, services: serviceLoads(options.services), seed: options.seed, maxQueries: options.queries });
    const work = (async (): Promise<GeneratorReport> => {
      const answered: Promise<QueryOutcome>[] = [];
      const report = await generator.run((q) => answered.push(runtime.submit({ service: q.service, batch: q.batch, seqLen: q.seqLen, arrivalMs: q.arrivalMs })));
      await Promise.all(answered);
      return report;
    })();
    const report = clock instanceof VirtualClock ? await driveUntilSettled(clock, work) : await work;
    const span = overall.spanMs;
    return {
      policy: options.policy,
      rateQps: options.rateQps,
      overall: overall.stats(span),
      services: options.services.map((s) => ({ service: s.name, ...perService.get(s.name)!.stats(span) })),
      meanGroupSize: groupStats.meanGroupSize,
      meanBatch: groupStats.meanSegmentBatch,
      groups: groupStats.groups,
      predictorMape: groupStats.predictorMape,
      between: { idleGapRatio: groupStats.idleGapRatio, outsideOperatorsRatio: groupStats.outsideOperatorsRatio, decidedAheadShare: groupStats.decidedAheadShare },
      fallbackShare: groupStats.fallbackShare,
      generator: report,
      decisions: { ...totals },
      ...(options.keepRecords === true ? { records: { queries: runtime.queries, groups: runtime.groups } } : {}),
    };
  } finally {
    await opened.release();
  }
}

/** Result of `findPeakRate`. */
export interface PeakResult {
  /** Highest rate tried whose violation ratio stayed ≤ the bound, queries/s (0 when none). */
  readonly peakRateQps: number;
  /** Goodput at that rate, queries/s (the paper's "throughput at QoS"). */
  readonly peakGoodputQps: number;
  /** The run at the peak (undefined when no rate met the bound). */
  readonly atPeak: ExperimentResult | undefined;
  /** False when the search found no rate meeting the bound, or none missing it, within its steps: the result is a bound. */
  readonly bracketed: boolean;
  /** Every rate tried, in order, with its violation ratio. */
  readonly tried: readonly { readonly rateQps: number; readonly violationRatio: number; readonly goodputQps: number }[];
}

/**
 * Peak rate at QoS: find a bracket [good, bad] of rates around the highest rate whose violation
 * ratio (over all services' queries, as the paper defines it) stays ≤ `maxViolationRatio`
 * (default 0.01, the paper's 1 %) — doubling up from `startQps` while it holds, or halving down
 * while it does not (at most `maxSteps` steps each way, default 40: 10¹² between the extremes) — then bisect it for
 * `bisections` steps (default 6: within 1/64 of the bracket). Each rate is one
 * `runExperiment` with the same seed, of `queries` queries or `queriesFor(rate)` when given (e.g. to make fast
 * runs last long enough for an overloaded queue to show). `bracketed` is false when no good or no bad rate was
 * found within `maxSteps` (the answer is then a bound, not a peak).
 */
export async function findPeakRate(
  env: ExperimentEnv,
  options: Omit<ExperimentOptions, 'rateQps'> & { startQps: number; maxViolationRatio?: number; bisections?: number; maxSteps?: number; queriesFor?: (rateQps: number) => number },
): Promise<PeakResult> {
  const bound = options.maxViolationRatio ?? 0.01;
  const maxSteps = options.maxSteps ?? 40;
  const tried: { rateQps: number; violationRatio: number; goodputQps: number }[] = [];
  let best: ExperimentResult | undefined;
  const attempt = async (rateQps: number): Promise<boolean> => {
    const r = await runExperiment(env, { ...options, rateQps, queries: options.queriesFor?.(rateQps) ?? options.queries });
    tried.push({ rateQps, violationRatio: r.overall.violationRatio, goodputQps: r.overall.goodputQps });
    const ok = r.overall.violationRatio <= bound;
    if (ok && (best === undefined || rateQps > best.rateQps)) best = r;
    return ok;
  };
  let good: number | undefined;
  let bad: number | undefined;
  if (await attempt(options.startQps)) {
    let rate = options.startQps;
    good = rate;
    for (let i = 0; i < maxSteps && bad === undefined; i++) {
      rate *= 2;
      if (await attempt(rate)) good = rate;
      else bad = rate;
    }
  } else {
    let rate = options.startQps;
    bad = rate;
    for (let i = 0; i < maxSteps && good === undefined; i++) {
      rate /= 2;
      if (await attempt(rate)) good = rate;
      else bad = rate;
    }
  }
  const bracketed = good !== undefined && bad !== undefined;
  for (let i = 0; bracketed && i < (options.bisections ?? 6); i++) {
    const mid = (good! + bad!) / 2;
    if (await attempt(mid)) good = mid;
    else bad = mid;
  }
  const atPeak = best;
  return { peakRateQps: atPeak?.rateQps ?? 0, peakGoodputQps: atPeak?.overall.goodputQps ?? 0, atPeak, tried, bracketed };
}
