/**
 * Charts for reports, built from data as vega-lite specs and rendered to SVG on the server
 * (no browser, no canvas, nothing fetched): `vegaLite.compile(spec).spec` → `vega.parse` →
 * a headless `vega.View` (`renderer: 'none'`) → `toSVG()`. Text widths are estimated by vega
 * when no canvas is installed, which is good enough for axis labels.
 *
 * - `latencyCdfSpec`: per series (e.g. per policy) the fraction of **offered** queries that
 *   completed within x ms. Rejected queries never complete, so a curve tops out at
 *   completed / offered; a vertical rule marks the QoS target.
 * - `groupedBarSpec`: one bar per (group, series), e.g. violation ratio per service and
 *   policy.
 * - `lineChartSpec`: one line (with points) per series over a quantitative x, e.g. goodput per
 *   trace minute per policy, or decision time per search ways; optional horizontal rule.
 *
 * Series get their colors in the order of `seriesOrder` (default: first appearance), so
 * charts of one report color each policy alike. Legend labels are never truncated. A labelled
 * horizontal rule (`yRule`) writes its label outside the plot, right of the rule's end, so it
 * never covers a bar or a line.
 */
import * as vega from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';

/** Colors by series position (Tableau 10, the vega default, fixed here so charts agree). */
const PALETTE = ['#4c78a8', '#f58518', '#54a24b', '#e45756', '#72b7b2', '#eeca3b', '#b279a2', '#ff9da6'] as const;

/** One curve of a latency CDF. */
export interface CdfSeries {
  /** Legend label (e.g. the policy). */
  readonly label: string;
  /** Latencies of the completed queries, ms (any order). */
  readonly latenciesMs: readonly number[];
  /** Queries offered (completed + rejected) — the denominator of the curve; ≥ latenciesMs.length. */
  readonly offered: number;
}

/** A point of a CDF: `fraction` of the offered queries completed within `latencyMs`. */
export interface CdfPoint {
  readonly series: string;
  readonly latencyMs: number;
  readonly fraction: number;
}

/**
 * The empirical CDF of a series over its offered queries, thinned to at most `maxPoints`
 * points (evenly spaced in rank, always keeping the first and the last completed query).
 * @throws RangeError when `offered` is smaller than the number of latencies, or `maxPoints` < 2.
 */
export function cdfPoints(series: CdfSeries, maxPoints = 200): CdfPoint[] {
  const n = series.latenciesMs.length;
  if (!(series.offered >= n)) throw new RangeError(`series '${series.label}': offered (${series.offered}) must be ≥ the number of latencies (${n})`);
  if (!Number.isInteger(maxPoints) || maxPoints < 2) throw new RangeError(`maxPoints must be an integer ≥ 2, got ${maxPoints}`);
  if (n === 0) return [];
  const sorted = [...series.latenciesMs].sort((a, b) => a - b);
  const ranks = new Set<number>();
  const steps = Math.min(n, maxPoints);
  for (let i = 0; i < steps; i++) ranks.add(Math.round((i * (n - 1)) / Math.max(1, steps - 1)));
  return [...ranks].sort((a, b) => a - b).map((r) => ({ series: series.label, latencyMs: sorted[r]!, fraction: (r + 1) / series.offered }));
}

function colorScale(labels: readonly string[]): { domain: string[]; range: string[] } {
  return { domain: [...labels], range: labels.map((_, i) => PALETTE[i % PALETTE.length]!) };
}

function uniqueInOrder(xs: readonly string[]): string[] {
  return [...new Set(xs)];
}

/**
 * A latency CDF chart: one step line per series, x = latency (ms), y = fraction of offered
 * queries completed within it, and a rule at the QoS target when given. The x axis runs to
 * `xMaxMs` (default: the largest latency plotted, at least 1.2 × QoS); longer latencies are
 * clipped at the edge.
 */
export function latencyCdfSpec(options: {
  readonly title: string;
  readonly series: readonly CdfSeries[];
  readonly qosMs?: number;
  readonly xMaxMs?: number;
  readonly seriesOrder?: readonly string[];
  readonly width?: number;
  readonly height?: number;
  readonly maxPoints?: number;
}): TopLevelSpec {
  const points = options.series.flatMap((s) => cdfPoints(s, options.maxPoints));
  const largest = points.reduce((m, p) => Math.max(m, p.latencyMs), 0);
  const xMax = options.xMaxMs ?? Math.max(largest, (options.qosMs ?? 0) * 1.2, 1);
  const order = options.seriesOrder ?? uniqueInOrder(options.series.map((s) => s.label));
  const height = options.height ?? 240;
  const line = {
    data: { values: points },
    mark: { type: 'line', interpolate: 'step-after', clip: true, strokeWidth: 2 },
    encoding: {
      x: { field: 'latencyMs', type: 'quantitative', title: 'latency (ms)', scale: { domain: [0, xMax], nice: false } },
      y: { field: 'fraction', type: 'quantitative', title: 'fraction of offered queries', scale: { domain: [0, 1] } },
      color: { field: 'series', type: 'nominal', title: null, scale: colorScale(order), legend: { orient: 'top-left', labelLimit: 0 } },
    },
  } as const;
  const layers: unknown[] = [line];
  if (options.qosMs !== undefined) {
    const qos = { values: [{ qosMs: options.qosMs, label: `QoS ${formatMs(options.qosMs)} ms` }] };
    layers.push(
      { data: qos, mark: { type: 'rule', strokeDash: [4, 3], color: '#555' }, encoding: { x: { field: 'qosMs', type: 'quantitative' } } },
      // bottom right of the rule: a CDF has passed most of its rise by the QoS target, so that corner is empty
      { data: qos, mark: { type: 'text', align: 'left', dx: 4, dy: -4, baseline: 'bottom', color: '#555' }, encoding: { x: { field: 'qosMs', type: 'quantitative' }, y: { value: height }, text: { field: 'label' } } },
    );
  }
  return {
    title: options.title,
    width: options.width ?? 360,
    height,
    layer: layers,
  } as TopLevelSpec;
}

/** A bar of a grouped bar chart. */
export interface BarDatum {
  /** Position on the x axis (e.g. the service). */
  readonly group: string;
  /** Bar within the group, colored (e.g. the policy). */
  readonly series: string;
  readonly value: number;
}

/** Legend of every chart here: above the plot, labels never cut (vega's `labelLimit` 0: no limit). */
const LEGEND = { orient: 'top', labelLimit: 0 } as const;

/**
 * Grouped bars: x = group, one colored bar per series inside it, value printed above each bar.
 * With value labels, the y axis reaches 10 % above the highest bar so the label of the highest
 * bar stays inside the plot.
 */
export function groupedBarSpec(options: {
  readonly title: string;
  readonly yTitle: string;
  readonly data: readonly BarDatum[];
  readonly xTitle?: string;
  readonly seriesOrder?: readonly string[];
  /** d3-format of the value labels ['.1f']. */
  readonly valueFormat?: string;
  /** d3-format of the y axis' tick labels (e.g. '.1~%' for fractions shown as percent) [vega's default]. */
  readonly yFormat?: string;
  /** Print each value above its bar [true]. */
  readonly valueLabels?: boolean;
  /** Angle of the group labels, degrees [0]; e.g. -40 for many long labels. */
  readonly labelAngle?: number;
  /** A dashed horizontal rule with a label (e.g. y = 1 for "at the QoS target"). */
  readonly yRule?: { readonly y: number; readonly label: string };
  /** Logarithmic y axis (values spanning decades; bars start at the smallest positive value, values ≤ 0 are left out) [false]. */
  readonly logY?: boolean;
  readonly width?: number;
  readonly height?: number;
}): TopLevelSpec {
  const order = options.seriesOrder ?? uniqueInOrder(options.data.map((d) => d.series));
  const groups = uniqueInOrder(options.data.map((d) => d.group));
  const data = options.logY === true ? options.data.filter((d) => d.value > 0) : options.data;
  const labels = options.valueLabels !== false;
  const highest = Math.max(0, ...data.map((d) => d.value).filter((v) => Number.isFinite(v)), options.yRule?.y ?? 0);
  const scale = options.logY === true ? { type: 'log' } : labels && highest > 0 ? { domainMin: 0, domainMax: highest * 1.1 } : undefined;
  const encoding = {
    x: { field: 'group', type: 'nominal', title: options.xTitle ?? null, sort: groups, axis: { labelAngle: options.labelAngle ?? 0 } },
    xOffset: { field: 'series', type: 'nominal', sort: order },
    y: { field: 'value', type: 'quantitative', title: options.yTitle, ...(scale === undefined ? {} : { scale }), ...(options.yFormat === undefined ? {} : { axis: { format: options.yFormat } }) },
    color: { field: 'series', type: 'nominal', title: null, scale: colorScale(order), legend: LEGEND },
  };
  return {
    title: options.title,
    width: options.width ?? Math.max(200, 90 * groups.length),
    height: options.height ?? 220,
    data: { values: data.map((d) => ({ ...d })) },
    encoding,
    layer: [
      { mark: { type: 'bar' } },
      ...(labels ? [{ mark: { type: 'text', dy: -4, baseline: 'bottom', fontSize: 10 }, encoding: { text: { field: 'value', type: 'quantitative', format: options.valueFormat ?? '.1f' } } }] : []),
      // the rule spans the chart: the bars' x, offset and color encodings do not apply to it
      ...(options.yRule === undefined ? [] : yRuleLayers(options.yRule, { x: null, xOffset: null, color: null })),
    ],
  } as TopLevelSpec;
}

/**
 * A dashed horizontal rule at `rule.y` with its label just right of the plot, level with the
 * rule (outside the bars and lines; the chart grows to fit it): two layers for a layered
 * chart; `reset` overrides encodings the chart's other layers share (e.g. `null`).
 */
function yRuleLayers(rule: { readonly y: number; readonly label: string }, reset: Readonly<Record<string, null>> = {}): unknown[] {
  const data = { values: [{ y: rule.y, label: rule.label }] };
  const y = { field: 'y', type: 'quantitative' };
  return [
    { data, mark: { type: 'rule', strokeDash: [4, 3], color: '#555' }, encoding: { ...reset, y } },
    { data, mark: { type: 'text', align: 'left', dx: 4, baseline: 'middle', color: '#555' }, encoding: { ...reset, x: { value: 'width' }, y, text: { field: 'label' } } },
  ];
}

/** A point of a line chart. */
export interface LinePoint {
  /** Line the point belongs to (legend label). */
  readonly series: string;
  readonly x: number;
  readonly y: number;
}

/**
 * Lines over a quantitative x: one colored line per series (points marked when `points`), in
 * `seriesOrder` (default: first appearance). The x axis spans the data (it does not start at 0
 * unless the data does). `yRule` draws a dashed horizontal rule with its label (e.g. the QoS
 * target).
 */
export function lineChartSpec(options: {
  readonly title: string;
  readonly xTitle: string;
  readonly yTitle: string;
  readonly data: readonly LinePoint[];
  readonly seriesOrder?: readonly string[];
  readonly yRule?: { readonly y: number; readonly label: string };
  /** Draw a point mark at every datum [false]. */
  readonly points?: boolean;
  /** x takes integer values (e.g. search ways): ticks at integers only, no fractional labels [false]. */
  readonly xIntegers?: boolean;
  readonly width?: number;
  readonly height?: number;
}): TopLevelSpec {
  const order = options.seriesOrder ?? uniqueInOrder(options.data.map((d) => d.series));
  const xs = options.data.map((d) => d.x).filter((x) => Number.isFinite(x));
  const layers: unknown[] = [
    {
      data: { values: options.data.map((d) => ({ ...d })) },
      mark: { type: 'line', point: options.points === true, strokeWidth: 2 },
      encoding: {
        x: {
          field: 'x',
          type: 'quantitative',
          title: options.xTitle,
          scale: xs.length > 0 ? { domain: [Math.min(...xs), Math.max(...xs)], nice: false, zero: false } : { zero: false },
          ...(options.xIntegers === true ? { axis: { tickMinStep: 1, format: 'd' } } : {}),
        },
        y: { field: 'y', type: 'quantitative', title: options.yTitle },
        color: { field: 'series', type: 'nominal', title: null, scale: colorScale(order), legend: LEGEND },
      },
    },
  ];
  if (options.yRule !== undefined) layers.push(...yRuleLayers(options.yRule));
  return { title: options.title, width: options.width ?? 480, height: options.height ?? 240, layer: layers } as TopLevelSpec;
}

/**
 * Render a vega-lite spec to a standalone SVG string, headless.
 * @throws what vega-lite or vega throw for an invalid spec.
 */
export async function renderSvg(spec: TopLevelSpec): Promise<string> {
  const compiled = compile(spec).spec;
  const view = new vega.View(vega.parse(compiled), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}

function formatMs(x: number): string {
  return Number.isInteger(x) ? String(x) : x.toFixed(1);
}
