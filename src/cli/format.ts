/** Plain-text table for CLI output: columns padded to the widest cell, numbers right-aligned. */
export function formatTable(header: readonly string[], rows: readonly (readonly (string | number)[])[]): string {
  const cells = [header.map(String), ...rows.map((r) => r.map((c) => (typeof c === 'number' ? formatNumber(c) : c)))];
  const numeric = header.map((_, j) => rows.length > 0 && rows.every((r) => typeof r[j] === 'number'));
  const widths = header.map((_, j) => Math.max(...cells.map((r) => (r[j] ?? '').length)));
  const line = (r: readonly string[]): string =>
    r.map((c, j) => (numeric[j] ? c.padStart(widths[j]!) : c.padEnd(widths[j]!))).join('  ').trimEnd();
  return [line(cells[0]!), widths.map((w) => '-'.repeat(w)).join('  '), ...cells.slice(1).map(line)].join('\n') + '\n';
}

/** Numbers for humans: integers with thousands separators, others with 3 significant decimals. */
export function formatNumber(x: number): string {
  if (Number.isInteger(x)) return x.toLocaleString('en-US');
  if (Math.abs(x) >= 100) return x.toFixed(1);
  if (Math.abs(x) >= 1) return x.toFixed(2);
  return x.toFixed(3);
}
