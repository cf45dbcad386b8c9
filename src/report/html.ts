/**
 * A self-contained HTML report: one file that opens offline. Figures are inline SVG (rendered
 * on the server, `plots.ts`), tables are HTML tables, the style is an inline `<style>`, and
 * the numbers behind the figures can be embedded as JSON (`<script type="application/json">`,
 * inert: no script runs). Nothing references a URL.
 *
 * Text is escaped; only `svg` strings are inserted as markup (they come from `renderSvg`).
 */

/** A table: header and rows of cells (numbers are printed as given by the caller). */
export interface ReportTable {
  readonly header: readonly string[];
  readonly rows: readonly (readonly string[])[];
}

/** A section of the report: text, tables and figures, in that order. */
export interface ReportSection {
  readonly title: string;
  readonly paragraphs?: readonly string[];
  readonly tables?: readonly { readonly caption?: string; readonly table: ReportTable }[];
  readonly figures?: readonly { readonly svg: string; readonly caption?: string }[];
}

export interface ReportInput {
  readonly title: string;
  /** Paragraphs under the title (plain text). */
  readonly intro?: readonly string[];
  /** A one-line result shown prominently under the intro. */
  readonly headline?: string;
  /** Label / value pairs. */
  readonly settings?: readonly (readonly [string, string])[];
  readonly sections: readonly ReportSection[];
  /** Embedded as `<script type="application/json" id="report-data">` (the numbers behind the figures). */
  readonly data?: unknown;
}

/** Escape text for HTML element content and attribute values. */
export function escapeHtml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;').replace(/'/g, '&#39;');
}

const NUMERIC = /^[−+-]?[\d,]*\.?\d+(e[+-]?\d+)?\s*%?$|^–$/;

function tableHtml(table: ReportTable, caption?: string): string {
  const numeric = table.header.map((_, j) => table.rows.length > 0 && table.rows.every((r) => NUMERIC.test((r[j] ?? '').trim())));
  const cls = (j: number): string => (numeric[j] ? ' class="num"' : '');
  const head = table.header.map((h, j) => `<th${cls(j)}>${escapeHtml(h)}</th>`).join('');
  const body = table.rows.map((r) => `<tr>${table.header.map((_, j) => `<td${cls(j)}>${escapeHtml(r[j] ?? '')}</td>`).join('')}</tr>`).join('\n');
  return `<table>${caption === undefined ? '' : `<caption>${escapeHtml(caption)}</caption>`}\n<thead><tr>${head}</tr></thead>\n<tbody>\n${body}\n</tbody></table>`;
}

/** JSON safe inside a `<script>` element (no `</script>`, no `<!--`). */
function scriptJson(data: unknown): string {
  return JSON.stringify(data).replace(/</g, '\\u003c').replace(/\u2028/g, '\\u2028').replace(/\u2029/g, '\\u2029');
}

const STYLE = `
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2rem auto; max-width: 70rem; padding: 0 1rem; color: #222; line-height: 1.45; }
h1 { font-size: 1.6rem; margin-bottom: .3rem; }
h2 { font-size: 1.2rem; margin-top: 2rem; border-bottom: 1px solid #ddd; padding-bottom: .2rem; }
.headline { font-size: 1.15rem; background: #f3f6fa; border-left: 4px solid #4c78a8; padding: .5rem .8rem; }
table { border-collapse: collapse; margin: .8rem 0; font-size: .9rem; }
caption { text-align: left; font-weight: 600; padding-bottom: .3rem; }
th, td { border-bottom: 1px solid #e3e3e3; padding: .25rem .7rem; text-align: left; vertical-align: top; }
th { background: #fafafa; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
dl.settings { display: grid; grid-template-columns: max-content 1fr; gap: .2rem 1rem; font-size: .92rem; }
dl.settings dt { font-weight: 600; }
dl.settings dd { margin: 0; }
.figures { display: flex; flex-wrap: wrap; gap: 1.5rem; align-items: flex-start; }
figure { margin: 0; max-width: 100%; overflow-x: auto; }
figcaption { font-size: .85rem; color: #555; max-width: 26rem; }
`;

/** The whole page as one string. */
export function renderReportHtml(input: ReportInput): string {
  const parts: string[] = [];
  parts.push(`<h1>${escapeHtml(input.title)}</h1>`);
  for (const p of input.intro ?? []) parts.push(`<p>${escapeHtml(p)}</p>`);
  if (input.headline !== undefined) parts.push(`<p class="headline">${escapeHtml(input.headline)}</p>`);
  if (input.settings !== undefined && input.settings.length > 0) {
    parts.push('<h2>Settings</h2>', '<dl class="settings">', ...input.settings.map(([k, v]) => `<dt>${escapeHtml(k)}</dt><dd>${escapeHtml(v)}</dd>`), '</dl>');
  }
  for (const s of input.sections) {
    parts.push(`<h2>${escapeHtml(s.title)}</h2>`);
    for (const p of s.paragraphs ?? []) parts.push(`<p>${escapeHtml(p)}</p>`);
    for (const t of s.tables ?? []) parts.push(tableHtml(t.table, t.caption));
    if (s.figures !== undefined && s.figures.length > 0) {
      parts.push('<div class="figures">');
      for (const f of s.figures) parts.push(`<figure>${f.svg}${f.caption === undefined ? '' : `<figcaption>${escapeHtml(f.caption)}</figcaption>`}</figure>`);
      parts.push('</div>');
    }
  }
  if (input.data !== undefined) parts.push(`<script type="application/json" id="report-data">${scriptJson(input.data)}</script>`);
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(input.title)}</title>
<style>${STYLE}</style>
</head>
<body>
${parts.join('\n')}
</body>
</html>
`;
}
