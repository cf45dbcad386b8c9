/**
 * Read a per-minute offered-load trace CSV, the format of
 * `src/reproduce/reference/cluster-load-trace.csv`: a header `minute,offered_load_qps`, then one
 * row per minute, minutes 0, 1, 2, … in order.
 */
import { readFile } from 'node:fs/promises';
import { parse } from 'csv-parse/sync';

/**
 * The per-minute loads (queries/s) of a trace file, index = minute.
 * @throws RangeError naming the file, line and column for a missing header column, a
 *   non-numeric or negative load, a minute out of sequence, or an empty trace.
 */
export async function readLoadTrace(file: string): Promise<number[]> {
  const text = await readFile(file, 'utf8');
  const records = parse(text, { relax_column_count: true, skip_empty_lines: true, trim: true });
  const header = records[0];
  if (header === undefined) throw new RangeError(`${file}: empty trace file (expected a header minute,offered_load_qps)`);
  const minuteCol = header.indexOf('minute');
  const loadCol = header.indexOf('offered_load_qps');
  for (const [name, col] of [['minute', minuteCol], ['offered_load_qps', loadCol]] as const) {
    if (col < 0) throw new RangeError(`${file}:1: missing column '${name}' (header: ${header.join(',')})`);
  }
  const loads: number[] = [];
  for (let i = 1; i < records.length; i++) {
    const row = records[i]!;
    const line = i + 1;
    const minute = Number(row[minuteCol]);
    const load = Number(row[loadCol]);
    if (row[minuteCol] === undefined || !Number.isInteger(minute) || minute !== loads.length) {
      throw new RangeError(`${file}:${line}: column 'minute' must be ${loads.length} (minutes in order from 0), got '${row[minuteCol] ?? ''}'`);
    }
    if (row[loadCol] === undefined || row[loadCol] === '' || !Number.isFinite(load) || load < 0) {
      throw new RangeError(`${file}:${line}: column 'offered_load_qps' must be a number ≥ 0, got '${row[loadCol] ?? ''}'`);
    }
    loads.push(load);
  }
  if (loads.length === 0) throw new RangeError(`${file}: the trace has no minutes`);
  return loads;
}
