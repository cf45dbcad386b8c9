/**
 * The paper's published numbers that `abacus reproduce` compares against (Cui et al., "Enable
 * simultaneous DNN services based on deterministic operator overlap and precise latency
 * prediction", SC'21), each with where it comes from. Only numbers stated in the paper's text
 * (abstract / §7), read off its figures (approximate), or in the authors' artifact README
 * (github.com/MachineLearningSystem/Abacus, "Evaluation") are listed; per-pair bar heights of
 * the figures are not available to us as numbers.
 */

/** One published number (or statement) and its source. */
export interface PaperClaim {
  /** What is compared, in words. */
  readonly what: string;
  /** The paper's value as printed (text, since some are ranges or statements). */
  readonly paper: string;
  /** The number we compare against, when the claim is numeric. */
  readonly value?: number;
  readonly source: string;
}

/** §7.2: QoS violations, Abacus vs the best of FCFS/SJF/EDF. */
export const PAPER_QOS: readonly PaperClaim[] = [
  { what: 'Abacus 99th-percentile latency', paper: '≤ QoS target in every pair (Fig. 13)', source: 'SC\'21 §7.2, Fig. 13 (artifact README: "7.2 Ensuring QoS, Figure 13 & 14")' },
  { what: 'QoS violations, Abacus vs the best baseline, mean over pairs', paper: '−51.3 %', value: -0.513, source: 'SC\'21 abstract and §7.2, Fig. 14' },
];

/** §7.3: peak throughput at QoS. */
export const PAPER_THROUGHPUT: readonly PaperClaim[] = [
  { what: 'peak goodput, Abacus ÷ best of FCFS/SJF/EDF, mean over pairs', paper: '+29.8 % (1.298×)', value: 1.298, source: 'SC\'21 abstract and §7.3, Fig. 15' },
];

/** §7.4: beyond pair-wise co-location. */
export const PAPER_BEYOND_PAIR: readonly PaperClaim[] = [
  { what: 'Abacus 99th percentile in triplet- and quadruplet-wise deployments', paper: 'within QoS; higher peak throughput than FCFS/SJF/EDF (Figs. 16, 17)', source: 'SC\'21 §7.4 (artifact README: "Beyond Pair-wise Co-location, Figure 16 & 17")' },
];

/** §7.5: MIG. */
export const PAPER_MIG: readonly PaperClaim[] = [
  {
    what: 'Abacus on A100 MIG instances',
    paper: '99th-percentile latency of the co-located services within QoS, and higher peak throughput than the baselines, on MIG 1g and 2g instances (Figs. 18, 19); we could not find the figures\' values in text form',
    source: 'SC\'21 §7.5 "Integrating with MIGs", Figs. 18 & 19 (as listed by the artifact README)',
  },
];

/** §7.6: the 16-node cluster. */
export const PAPER_CLUSTER: readonly PaperClaim[] = [
  { what: 'cluster throughput at p99 ≤ QoS, Abacus vs Clockwork', paper: '≈ 8.6k vs 7.3k queries/s (≈ 1.18×)', value: 8600 / 7300, source: 'SC\'21 cluster experiment figure (values read off the figure)' },
];

/** §7.7: decision time vs search ways. */
export const PAPER_SEARCH: readonly PaperClaim[] = [
  { what: 'time to determine an operator group, 1–16 search ways', paper: '≈ 0.07–0.09 ms, nearly flat', value: 0.09, source: 'SC\'21 multi-way search figure (artifact README: "Effectiveness of Multi-way Search, Figure 20"; values read off the figure)' },
];
