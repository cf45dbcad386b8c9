/**
 * report/html.ts: the page embeds the rendered SVG, the tables and the settings, escapes text,
 * embeds the data as inert JSON, and references nothing outside the file (opens offline).
 */
import { describe, expect, it } from 'vitest';
import { escapeHtml, renderReportHtml } from '../src/report/html.ts';
import { latencyCdfSpec, renderSvg } from '../src/report/plots.ts';

describe('renderReportHtml', () => {
  it('embeds the SVG, the tables and the settings; no external references', async () => {
    const svg = await renderSvg(latencyCdfSpec({ title: 'svc', qosMs: 20, series: [{ label: 'fcfs', latenciesMs: [5, 10, 25], offered: 3 }] }));
    const html = renderReportHtml({
      title: 'Demo <report>',
      intro: ['Measured on this machine\'s CPU.'],
      headline: 'Abacus goodput ÷ fcfs goodput = 1.25',
      settings: [['rate', '40 queries/s']],
      sections: [
        {
          title: 'Results',
          tables: [{ caption: 'Per policy', table: { header: ['policy', 'p99 ms', 'violations %'], rows: [['fcfs', '80.5', '12.00'], ['abacus', '41.0', '0.50']] } }],
          figures: [{ svg, caption: 'CDF' }],
        },
      ],
      data: { note: '</script><script>alert(1)</script>', xs: [1, 2] },
    });
    expect(html.startsWith('<!DOCTYPE html>')).toBe(true);
    expect(html).toContain(svg);
    expect(html).toContain('<title>Demo &lt;report&gt;</title>');
    expect(html).toContain('<caption>Per policy</caption>');
    expect(html).toMatch(/<th>policy<\/th><th class="num">p99 ms<\/th>/);
    expect(html).toContain('<td>abacus</td><td class="num">41.0</td><td class="num">0.50</td>');
    expect(html).toContain('<dt>rate</dt><dd>40 queries/s</dd>');
    expect(html).toContain('Abacus goodput ÷ fcfs goodput = 1.25');
    // no script or stylesheet from anywhere else, no URL attributes at all
    expect(html).not.toMatch(/<script[^>]*\bsrc=/i);
    expect(html).not.toMatch(/<link\b/i);
    expect(html).not.toMatch(/\b(src|href)\s*=\s*["']?https?:/i);
    expect(html).not.toMatch(/@import|url\(\s*["']?https?:/i);
    // the only scripts are inert JSON, and the data cannot close its element
    const scripts = html.match(/<script[^>]*>/g) ?? [];
    expect(scripts).toEqual(['<script type="application/json" id="report-data">']);
    const json = /<script type="application\/json" id="report-data">([\s\S]*?)<\/script>/.exec(html)![1]!;
    expect(JSON.parse(json)).toEqual({ note: '</script><script>alert(1)</script>', xs: [1, 2] });
  });

  it('escapes text', () => {
    expect(escapeHtml(`a<b>&"c"'`)).toBe('a&lt;b&gt;&amp;&quot;c&quot;&#39;');
  });
});
