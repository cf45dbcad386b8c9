/**
 * report/plots.ts: CDF points by hand, and charts rendered headless to SVG that show what was
 * plotted (one line per series with its legend label, the QoS rule, the axis titles, one bar
 * per (group, series)).
 */
import { describe, expect, it } from 'vitest';
import { cdfPoints, groupedBarSpec, latencyCdfSpec, lineChartSpec, renderSvg } from '../src/report/plots.ts';

describe('cdfPoints', () => {
  it('is the empirical CDF over the offered queries (hand-computed)', () => {
    // 3 completed of 4 offered: the curve tops out at 3/4
    expect(cdfPoints({ label: 'a', latenciesMs: [3, 1, 2], offered: 4 })).toEqual([
      { series: 'a', latencyMs: 1, fraction: 0.25 },
      { series: 'a', latencyMs: 2, fraction: 0.5 },
      { series: 'a', latencyMs: 3, fraction: 0.75 },
    ]);
    expect(cdfPoints({ label: 'a', latenciesMs: [], offered: 5 })).toEqual([]);
  });

  it('thins long series to maxPoints, keeping the first and the last query', () => {
    const latenciesMs = Array.from({ length: 1000 }, (_, i) => 1000 - i); // 1000 … 1
    const pts = cdfPoints({ label: 'b', latenciesMs, offered: 1000 }, 10);
    expect(pts).toHaveLength(10);
    expect(pts[0]).toEqual({ series: 'b', latencyMs: 1, fraction: 0.001 });
    expect(pts[9]).toEqual({ series: 'b', latencyMs: 1000, fraction: 1 });
    for (let i = 1; i < pts.length; i++) expect(pts[i]!.latencyMs).toBeGreaterThan(pts[i - 1]!.latencyMs);
  });

  it('rejects offered < completed and a bad maxPoints', () => {
    expect(() => cdfPoints({ label: 'c', latenciesMs: [1, 2], offered: 1 })).toThrow(RangeError);
    expect(() => cdfPoints({ label: 'c', latenciesMs: [1], offered: 1 }, 1)).toThrow(/maxPoints/);
  });
});

describe('renderSvg', () => {
  it('draws a latency CDF: one line per series, legend labels, QoS rule, axis titles', async () => {
    const spec = latencyCdfSpec({
      title: 'svc: latency CDF',
      qosMs: 40,
      series: [
        { label: 'fcfs', latenciesMs: [10, 20, 30, 50, 70], offered: 6 },
        { label: 'abacus', latenciesMs: [8, 12, 15, 22, 35, 38], offered: 6 },
      ],
    });
    const svg = await renderSvg(spec);
    expect(svg.startsWith('<svg')).toBe(true);
    const lines = svg.match(/<path[^>]*aria-roledescription="line mark"[^>]*>/g) ?? [];
    expect(lines).toHaveLength(2);
    expect(lines.some((l) => l.includes('series: fcfs'))).toBe(true);
    expect(lines.some((l) => l.includes('series: abacus'))).toBe(true);
    // the two series get different colors
    const strokes = lines.map((l) => /stroke="([^"]+)"/.exec(l)?.[1]);
    expect(new Set(strokes).size).toBe(2);
    expect(svg).toMatch(/role-legend-label[\s\S]*>fcfs</);
    expect(svg).toMatch(/>abacus</);
    expect(svg).toContain('QoS 40 ms');
    expect(svg).toContain('latency (ms)');
    expect(svg).toContain('fraction of offered queries');
    expect(svg).toContain('svc: latency CDF');
  });

  it('draws grouped bars: one bar per (group, series), values as labels', async () => {
    const data = [
      { group: 'resnet', series: 'fcfs', value: 12.5 },
      { group: 'resnet', series: 'abacus', value: 2.25 },
      { group: 'bert', series: 'fcfs', value: 30 },
      { group: 'bert', series: 'abacus', value: 4 },
    ];
    const svg = await renderSvg(groupedBarSpec({ title: 'violations', yTitle: 'violation ratio (%)', data }));
    expect(svg.match(/aria-roledescription="bar"/g) ?? []).toHaveLength(4);
    expect(svg).toContain('violation ratio (%)');
    for (const label of ['resnet', 'bert', '12.5', '2.3', '30.0', '4.0']) expect(svg).toContain(`>${label}<`);
  });
});

describe('lineChartSpec', () => {
  it('draws one line per series with its legend label, the axis titles and the rule', async () => {
    const data = [
      { series: 'abacus', x: 0, y: 8600 },
      { series: 'abacus', x: 1, y: 8700 },
      { series: 'clockwork-style', x: 0, y: 7300 },
      { series: 'clockwork-style', x: 1, y: 7250 },
    ];
    const svg = await renderSvg(lineChartSpec({ title: 'goodput per minute', xTitle: 'trace minute', yTitle: 'queries/s', data, yRule: { y: 8000, label: 'target 8000' }, points: true }));
    const lines = svg.match(/<path[^>]*aria-roledescription="line mark"[^>]*>/g) ?? [];
    expect(lines).toHaveLength(2);
    expect(lines.some((l) => l.includes('series: abacus'))).toBe(true);
    expect(lines.some((l) => l.includes('series: clockwork-style'))).toBe(true);
    expect(new Set(lines.map((l) => /stroke="([^"]+)"/.exec(l)?.[1])).size).toBe(2);
    expect(svg).toMatch(/role-legend-label[\s\S]*>abacus</);
    for (const text of ['goodput per minute', 'trace minute', 'queries/s', 'target 8000']) expect(svg).toContain(text);
    // the plotted values: a point mark per datum, described by its x, y and series
    expect(svg.match(/aria-roledescription="point"/g) ?? []).toHaveLength(4);
    expect(svg).toContain('trace minute: 1; queries/s: 8700; series: abacus');
    expect(svg).toContain('trace minute: 1; queries/s: 7250; series: clockwork-style');
  });

  it('grouped bars take a labelled rule and can leave the value labels out', async () => {
    const data = [
      { group: 'R50+V16', series: 'abacus', value: 0.8 },
      { group: 'R50+V16', series: 'fcfs', value: 1.3 },
    ];
    const svg = await renderSvg(groupedBarSpec({ title: 'p99 ÷ QoS', yTitle: 'ratio', data, valueLabels: false, yRule: { y: 1, label: 'QoS target' }, labelAngle: -45 }));
    expect(svg.match(/aria-roledescription="bar"/g) ?? []).toHaveLength(2);
    expect(svg).toContain('QoS target');
    expect(svg).not.toContain('>1.3<');
  });

  it("a rule's label sits right of the plot (x ≥ its width), clear of the bars; legend labels are not cut", async () => {
    const data = [{ group: 'R50+V16', series: 'abacus ÷ best baseline of fcfs, sjf and edf', value: 1.4 }];
    const svg = await renderSvg(groupedBarSpec({ title: 'ratio', yTitle: 'ratio', data, yRule: { y: 1.298, label: 'paper mean 1.298' }, width: 200 }));
    const label = /<text[^>]*transform="translate\(([\d.]+),[\d.]+\)"[^>]*>paper mean 1\.298</.exec(svg);
    expect(label, 'the rule label').not.toBeNull();
    expect(Number(label![1])).toBeGreaterThanOrEqual(200);
    expect(svg).toContain('>abacus ÷ best baseline of fcfs, sjf and edf<');
    expect(svg).not.toContain('…');
  });

  it('a percent axis: fractions on the y axis labelled in %, the values above the bars too, the highest label inside the plot', async () => {
    const data = [
      { group: 'V16+V19', series: 'abacus', value: 0.0067 },
      { group: 'V16+V19', series: 'fcfs', value: 0.01 },
    ];
    const spec = groupedBarSpec({ title: 'violations', yTitle: 'violations (% of offered queries)', data, valueFormat: '.2~%', yFormat: '.2~%' });
    const svg = await renderSvg(spec);
    for (const text of ['>0.67%<', '>1%<', '>0.4%<']) expect(svg).toContain(text);
    // the y scale reaches 10 % above the highest bar (0.011), so its label fits inside
    expect(JSON.stringify(spec)).toContain('"domainMax":0.011');
  });
});

describe('lineChartSpec x axis', () => {
  it('spans the data, not from 0; integer x gets integer ticks only', async () => {
    const data = [1, 2, 4, 16].map((x) => ({ series: 'median', x, y: 10 + x }));
    const svg = await renderSvg(lineChartSpec({ title: 'decision time', xTitle: 'search ways', yTitle: 'µs', data, xIntegers: true }));
    const axes = [...svg.matchAll(/role-axis-label[\s\S]*?<\/g><\/g>/g)].map((m) => [...m[0].matchAll(/>([^<]+)<\/text>/g)].map((t) => t[1]!));
    const xLabels = axes[0]!.filter((t) => t !== 'search ways');
    expect(xLabels[0]).toBe('1');
    expect(xLabels.at(-1)).toBe('16');
    expect(xLabels.every((t) => /^\d+$/.test(t))).toBe(true);
    expect(xLabels).not.toContain('0');
  });
});
