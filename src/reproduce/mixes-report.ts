/**
 * The mixes experiment in `abacus reproduce`: its stored outcome, its stdout table, and its
 * report section (`reproduce/mixes.ts` runs it).
 */
import type { ReportSection } from '../report/html.ts';
import { groupedBarSpec, renderSvg, type BarDatum } from '../report/plots.ts';
import { MIX_BASELINES, mixesHeadline, type MixRow } from './mixes.ts';

/** `results.json` `mixes`. */
export interface MixesOutcome {
  readonly device: string;
  readonly quick: boolean;
  readonly queries: number;
  readonly seed: number;
  readonly wallSeconds: number;
  readonly devices: readonly string[];
  readonly variants: readonly string[];
  readonly rows: readonly MixRow[];
}

/** The goal of the mixes' headline mean per device (abacus without the barrier ÷ the best baseline). */
export const MIXES_TARGET = 1.2;

const f = (x: number | null | undefined, d = 2): string => (x === null || x === undefined || !Number.isFinite(x) ? '–' : x.toFixed(d));

/** Per device: the table's header and rows (peak goodput per policy, the co-run limit, the ratio). */
export function mixesTables(o: Pick<MixesOutcome, 'devices' | 'variants' | 'rows'>): { device: string; header: string[]; rows: string[][] }[] {
  return o.devices.map((device) => {
    const mine = o.rows.filter((r) => r.device === device);
    const mixes = [...new Set(mine.map((r) => r.mix))];
    const rows = mixes.map((mix) => {
      const of = mine.filter((r) => r.mix === mix);
      const by = new Map(of.map((r) => [r.policy, r]));
      const best = of.filter((r) => MIX_BASELINES.includes(r.policy)).sort((a, b) => b.peakGoodputQps - a.peakGoodputQps)[0];
      const nb = by.get('abacus-no-barrier');
      const first = of[0]!;
      return [
        mix,
        first.kind,
        first.qosMs,
        ...o.variants.map((v) => f(by.get(v)?.peakGoodputQps, 1)),
        `${f(first.coRunLimitQps, 1)} (b${first.coRunBatch})`,
        `${f(nb !== undefined && best !== undefined && best.peakGoodputQps > 0 ? nb.peakGoodputQps / best.peakGoodputQps : NaN)} (${best?.policy ?? '–'})`,
      ];
    });
    return { device, header: ['mix', 'kind', 'QoS ms', ...o.variants, 'co-run limit q/s (batch)', 'no barrier ÷ best baseline'], rows };
  });
}

/** The report section. */
export async function mixesSection(o: MixesOutcome): Promise<ReportSection> {
  const headline = mixesHeadline(o.rows);
  const figures = [];
  for (const device of o.devices) {
    const data: BarDatum[] = o.rows.filter((r) => r.device === device).map((r) => ({ group: r.mix, series: r.policy, value: r.peakGoodputQps }));
    figures.push({
      svg: await renderSvg(groupedBarSpec({ title: `Harder mixes: peak goodput at ≤ 1 % violations, ${device} (simulated)`, yTitle: 'queries/s (log scale)', data, seriesOrder: [...o.variants], valueLabels: false, labelAngle: -45, logY: true, width: 1000 })),
      caption: `${device}: peak goodput per mix and policy, single-sample requests with dynamic batching (simulated). A missing bar: no rate met ≤ 1 % violations.`,
    });
  }
  return {
    title: 'Harder mixes: 3 and 4 services, tight QoS, skewed load, heavy beside light (simulated)',
    paragraphs: [
      'Beyond the paper. Single-sample Poisson requests with dynamic batching (at most 16 samples) on sim:a100 and sim:h200:graph, every result simulated. Policies: barrier abacus (the paper\'s), abacus without the group barrier, and the batching baselines. The co-run limit runs every service\'s batches back to back on its own stream (docs/batching.md).',
      ...o.devices.map((d) => `${d}: abacus without the barrier ÷ the best baseline (Triton included), mean over the 3-4-service and tight-QoS mixes: ${f(headline[d]?.meanRatioVsBestBaseline)} (goal ≥ ${MIXES_TARGET}); over every mix: ${f(headline[d]?.meanRatioVsBestBaselineAll)}.`),
    ],
    tables: mixesTables(o).map((t) => ({ caption: `${t.device}: peak goodput (q/s) per mix and policy`, table: { header: t.header, rows: t.rows } })),
    figures,
  };
}
