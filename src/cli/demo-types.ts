/**
 * The demo's option and output types (`abacus demo --json`; docs/demo.md lists the fields).
 */
import type { RoundSpread } from '../report/rounds.ts';
import type { RunJson } from './run-json.ts';

/** `abacus demo`'s parsed options. */
export interface DemoOptions {
  models?: string[];
  rate?: number;
  load: number;
  queries: number;
  qosMs?: number[];
  qosFactor: number;
  out: string;
  seed: number;
  rounds: number;
  small?: boolean;
  threads: number;
  profileSamples: number;
  refine: boolean;
  barrier?: boolean;
  json?: boolean;
}

/** One policy run of a round, as `--json` prints it. */
export interface DemoRoundRun {
  /** `fcfs (1 thread)`, `fcfs (2 threads)`, `abacus`. */
  readonly label: string;
  readonly policy: string;
  readonly threadsPerExecutor: number;
  readonly goodputQps: number;
  readonly violationRatio: number;
  readonly p99Ms: number;
  readonly meanGroupSize: number;
  /** Share of its groups abacus's calibration fallback decided (one query at a time); 0 for fcfs. */
  readonly fallbackShare: number;
}

/** One round: every policy variant under the same arrivals (one seed), one after the other. */
export interface DemoRound {
  /** 1-based. */
  readonly round: number;
  readonly seed: number;
  /** 1-minute load average when the round started and ended (`uptime`'s first number). */
  readonly loadAverage1mStart: number;
  readonly loadAverage1mEnd: number;
  /** Group ÷ sequential of one batch-1 query per service, measured just before the round (median of 5). */
  readonly overlapRatio: number;
  readonly runs: readonly DemoRoundRun[];
  /** abacus goodput ÷ the baseline fcfs's goodput in this round; null when that fcfs had no goodput. */
  readonly abacusOverFcfsGoodput: number | null;
}

/** The `--json` output. */
export interface DemoJson {
  /** Per policy variant, pooled over the rounds (every query of every round; rates over the summed spans); `label` names the variant. */
  readonly runs: readonly (RunJson & { label: string; threadsPerExecutor: number })[];
  /**
   * abacus goodput ÷ the better fcfs's goodput: the median over the rounds of the per-round
   * ratio against `baseline`; null when some round's baseline had no goodput. Reported whether
   * or not `meaningful`.
   */
  readonly abacusOverFcfsGoodput: number | null;
  /** The per-round ratios behind it, in round order. */
  readonly abacusOverFcfsGoodputRounds: readonly (number | null)[];
  /** Median, min, max and (max − min) ÷ median of the per-round ratios; null with `abacusOverFcfsGoodput`. */
  readonly abacusOverFcfsGoodputSpread: RoundSpread | null;
  /** Label of the better fcfs: the variant with the higher goodput over all rounds. */
  readonly baseline: string;
  /** Median over rounds of abacus ÷ each fcfs variant, by label (null as above). */
  readonly abacusOverFcfsGoodputByBaseline: Readonly<Record<string, number | null>>;
  /** Whether abacus ran with the paper's group barrier (`--barrier`); default false: a stream per service. */
  readonly abacusBarrier: boolean;
  /** Whether abacus refined its predictor online (with `--barrier`, unless `--no-refine`; never without the barrier). */
  readonly abacusRefines: boolean;
  /**
   * Share of abacus's groups (all rounds) decided by its calibration fallback: one query at a
   * time, because measured groups overran their predictions or other processes crowded the cores
   * (docs/adaptive.md, docs/interference.md).
   * At ≥ `FALLBACK_HEADLINE_SHARE` the headline says so.
   */
  readonly abacusFallbackShare: number;
  /** Whether the conditions let the ratio mean something (`demo-verdict.ts`); stdout and the report headline it only then. */
  readonly meaningful: boolean;
  /** Why not, when not meaningful (the reasons joined by '; '); null when meaningful. */
  readonly reason: string | null;
  readonly reasons: readonly string[];
  /** The conditions the verdict read, with its thresholds. */
  readonly conditions: {
    readonly cores: number;
    /** 1-minute load average before the first round, and the largest at any round's start or end. */
    readonly loadAverage1mStart: number;
    readonly loadAverage1mMax: number;
    /** Median group ÷ sequential over the rounds (1 = no overlap gain). */
    readonly overlapRatio: number;
    readonly thresholds: { readonly busyLoadPerCore: number; readonly maxRelativeSpread: number; readonly noOverlapRatio: number; readonly minRounds: number };
    /** The load the predictor was profiled under (absent for a predictor cached before that was recorded), and the cache's note on it. */
    readonly predictor: { readonly profiledLoadAverage1m?: number; readonly profiledCores?: number; readonly profiledUnderLoad?: boolean; readonly note?: string };
  };
  readonly rounds: readonly DemoRound[];
  readonly report: string;
  readonly rateQps: number;
  /** Queries per policy run in each round. */
  readonly queries: number;
  /** Seed of round 1; round k uses seed + k − 1. */
  readonly seed: number;
  readonly predictor: string;
  readonly services: readonly { service: string; model: string; qosTargetMs: number; soloP50Ms: number; soloMeanMs: number }[];
  /** Median over the rounds of one batch-1 query per service as one group ÷ the same ones one after the other (1 = no overlap gain). */
  readonly overlapRatio: number;
  readonly machine: { cpus: number; availableParallelism: number; cpuModel: string; onnxruntime: string; node: string; threadsPerExecutor: number; allCoresThreads: number; loadAverage1m: number };
  /** Wall time of the whole command, s (in report.html's data: until the results, before the report was rendered). */
  readonly elapsedS: number;
}
