/**
 * Profile CSV files (`profile/dataset.ts` documents the schema): the header, one formatted
 * row, and a validating reader for `abacus train` and for the profiler's resume.
 *
 * Numbers: integers plainly (`18`), latencies with 6 decimals (ms, so 1 ns resolution).
 * Reader errors are RangeErrors whose message starts with `FILE:LINE:COLUMN:` (line 1-based,
 * the header is line 1; COLUMN a header name such as `batch_1`), then what is wrong.
 */
import fs from 'node:fs/promises';
import { parse } from 'csv-parse/sync';
import { stringify } from 'csv-stringify/sync';
import { checkSegment } from '../model/cost.ts';
import type { ModelSpec } from '../model/spec.ts';
import type { GroupSlot } from '../predict/predictor.ts';
import type { ProfileRow } from './dataset.ts';

/** Per-slot column stems, in order: `model_i,start_i,end_i,batch_i,seq_len_i`. */
export const SLOT_COLUMNS = ['model', 'start', 'end', 'batch', 'seq_len'] as const;
/**
 * The per-slot column a profile with thread counts adds after `seq_len_i` (docs/threads.md):
 * `threads_i`, the slot's intra-op threads, empty for the device's default.
 */
export const THREADS_COLUMN = 'threads';
/** Columns before the slots. */
export const LEAD_COLUMNS = ['sample', 'device', 'slots'] as const;
/** Columns after the slots. */
export const STAT_COLUMNS = ['median_ms', 'mean_ms', 'std_ms', 'runs'] as const;
/** Decimals written for latencies (ms). */
export const LATENCY_DECIMALS = 6;

/**
 * The header of a profile with at most `maxSlots` slots per group:
 * `sample,device,slots,model_0,start_0,end_0,batch_0,seq_len_0,…,median_ms,mean_ms,std_ms,runs`;
 * with `threads`, each slot's columns end in `threads_i`.
 * @throws RangeError for `maxSlots` not an integer ≥ 1.
 */
export function profileCsvHeader(maxSlots: number, threads = false): string[] {
  checkMaxSlots(maxSlots);
  const slots: string[] = [];
  for (let i = 0; i < maxSlots; i++) {
    for (const c of SLOT_COLUMNS) slots.push(`${c}_${i}`);
    if (threads) slots.push(`${THREADS_COLUMN}_${i}`);
  }
  return [...LEAD_COLUMNS, ...slots, ...STAT_COLUMNS];
}

/** The header line, `\n`-terminated. */
export function formatProfileHeader(maxSlots: number, threads = false): string {
  return stringify([profileCsvHeader(maxSlots, threads)], { record_delimiter: '\n' });
}

/**
 * One CSV line (with its `\n`) for `row` in a file with `maxSlots` slot columns; slot columns
 * beyond `row.slots.length` are empty.
 * @throws RangeError when the row has no slots or more than `maxSlots`.
 */
export function formatProfileRow(row: ProfileRow, maxSlots: number, threads = false): string {
  checkMaxSlots(maxSlots);
  if (row.slots.length < 1 || row.slots.length > maxSlots) throw new RangeError(`profile row ${row.sample} has ${row.slots.length} slots; a file with ${maxSlots} slot columns takes 1..${maxSlots}`);
  const cells: string[] = [String(row.sample), row.device, String(row.slots.length)];
  for (let i = 0; i < maxSlots; i++) {
    const s = row.slots[i];
    if (s === undefined) cells.push('', '', '', '', '');
    else cells.push(s.model, String(s.start), String(s.end), String(s.batch), String(s.seqLen));
    if (threads) cells.push(s?.intraOpThreads === undefined ? '' : String(s.intraOpThreads));
  }
  cells.push(row.medianMs.toFixed(LATENCY_DECIMALS), row.meanMs.toFixed(LATENCY_DECIMALS), row.stdMs.toFixed(LATENCY_DECIMALS), String(row.runs));
  return stringify([cells], { record_delimiter: '\n' });
}

/** Options of `readProfileCsv`. */
export interface ReadProfileCsvOptions {
  /** The models rows may name, by name (e.g. from `resolveModelSpec`). */
  readonly models: ReadonlyMap<string, ModelSpec>;
}

/**
 * Read and validate profile CSV files; the rows of all files, in file order.
 * @throws RangeError with `FILE:LINE:COLUMN: …` for: an empty file or no header; a missing
 *   (named) or unexpected header column; a line with the wrong number of cells (also a
 *   truncated last line); a non-numeric or non-integer cell; an unknown model (listing the
 *   known ones); `slots` outside 1..K; `start`/`end` outside the model's operators; batch < 1;
 *   a negative seq_len, one above the model's maximum, or one > 0 for a model without a
 *   sequence axis; a non-empty cell of a slot beyond `slots`; a latency that is negative or
 *   not finite; runs < 1; malformed CSV (an unclosed quote).
 * File system errors (ENOENT, …) propagate as they are.
 */
export async function readProfileCsv(paths: readonly string[], options: { models: ReadonlyMap<string, ModelSpec> }): Promise<ProfileRow[]> {
  const rows: ProfileRow[] = [];
  for (const file of paths) {
    const text = await fs.readFile(file, 'utf8');
    const parsed = parseProfileCsv(text, file, options.models);
    for (const row of parsed.rows) rows.push(row);
  }
  return rows;
}

/** What `parseProfileCsv` found. */
export interface ParsedProfileCsv {
  /** Slot columns of the header (K). */
  readonly maxSlots: number;
  /** Whether the header has `threads_i` columns. */
  readonly threads: boolean;
  readonly rows: ProfileRow[];
  /** With `dropTruncatedTail`: the unterminated last line that was dropped ('' when none). */
  readonly droppedTail: string;
  /** With `dropTruncatedTail`: the text that was parsed (`text` without `droppedTail`). */
  readonly kept: string;
}

/**
 * Parse one profile CSV text (see `readProfileCsv` for the checks). With `dropTruncatedTail`
 * (the profiler's resume: every row it writes ends with `\n`, so a last line without one was
 * cut short by a kill) a last line without `\n` is dropped before parsing instead of checked.
 * @param file name used in messages.
 * @throws RangeError as `readProfileCsv` does. With `dropTruncatedTail`, a text that is empty
 *   after dropping is still "empty file" (callers check `kept === ''` first).
 */
export function parseProfileCsv(text: string, file: string, models: ReadonlyMap<string, ModelSpec>, options: { dropTruncatedTail?: boolean } = {}): ParsedProfileCsv {
  let kept = text;
  let droppedTail = '';
  if (options.dropTruncatedTail && text.length > 0 && !text.endsWith('\n')) {
    const cut = text.lastIndexOf('\n') + 1;
    kept = text.slice(0, cut);
    droppedTail = text.slice(cut);
  }
  const at = (line: number, column?: string): string => `${file}:${line}:${column === undefined ? '' : `${column}:`}`;
  if (kept.trim() === '') throw new RangeError(`${at(1)} empty file: no header (expected ${profileCsvHeader(1).join(',')} for groups of one slot)`);
  let records: { record: string[]; info: { lines: number } }[];
  try {
    // with `info: true` each record is `{ record, info }` (the typings do not model that option)
    records = parse(kept, { info: true, relax_column_count: true, skip_empty_lines: true, bom: true }) as unknown as { record: string[]; info: { lines: number } }[];
  } catch (err) {
    const line = typeof (err as { lines?: unknown }).lines === 'number' ? (err as { lines: number }).lines : 1;
    throw new RangeError(`${at(line)} malformed CSV: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
  }
  const first = records[0];
  if (first === undefined) throw new RangeError(`${at(1)} empty file: no header`);
  const header = first.record;
  const headerLine = first.info.lines;
  const maxSlots = header.filter((c) => /^model_\d+$/.test(c)).length;
  const threads = header.includes(`${THREADS_COLUMN}_0`);
  const expected = profileCsvHeader(Math.max(1, maxSlots), threads);
  for (const column of expected) {
    if (!header.includes(column)) throw new RangeError(`${at(headerLine, column)} missing column '${column}' in the header (expected: ${expected.join(',')})`);
  }
  for (let i = 0; i < header.length; i++) {
    if (header[i] !== expected[i]) {
      throw new RangeError(`${at(headerLine, header[i])} unexpected column '${header[i]}' at position ${i + 1} (expected '${expected[i] ?? 'end of line'}'; the header must be ${expected.join(',')})`);
    }
  }
  const known = (): string => [...models.keys()].sort().join(', ') || 'none';
  const rows: ProfileRow[] = [];
  for (let r = 1; r < records.length; r++) {
    const { record: cells, info } = records[r]!;
    const line = info.lines;
    if (cells.length !== header.length) {
      const column = cells.length < header.length ? header[cells.length]! : `cell ${cells.length}`;
      throw new RangeError(`${at(line, column)} the line has ${cells.length} cells but the header ${header.length} (truncated or extra cells?)`);
    }
    const cell = (column: string): string => cells[header.indexOf(column)] ?? '';
    const int = (column: string, min: number): number => {
      const text = cell(column);
      if (!/^\s*[+-]?\d+\s*$/.test(text)) throw new RangeError(`${at(line, column)} '${text}' is not an integer`);
      const value = Number(text);
      if (!Number.isSafeInteger(value)) throw new RangeError(`${at(line, column)} '${text}' is not a safe integer`);
      if (value < min) throw new RangeError(`${at(line, column)} ${value} must be ≥ ${min}`);
      return value;
    };
    const ms = (column: string): number => {
      const text = cell(column);
      if (!/^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$/.test(text)) throw new RangeError(`${at(line, column)} '${text}' is not a number`);
      const value = Number(text);
      if (!Number.isFinite(value)) throw new RangeError(`${at(line, column)} '${text}' is not finite`);
      if (value < 0) throw new RangeError(`${at(line, column)} latency ${value} ms must be ≥ 0`);
      return value;
    };
    const sample = int('sample', 0);
    const device = cell('device');
    if (device.trim() === '') throw new RangeError(`${at(line, 'device')} the device id is empty`);
    const slotCount = int('slots', 1);
    if (slotCount > maxSlots) throw new RangeError(`${at(line, 'slots')} ${slotCount} slots but the header has slot columns for ${maxSlots}`);
    const slots: GroupSlot[] = [];
    for (let i = 0; i < maxSlots; i++) {
      if (i >= slotCount) {
        for (const c of threads ? [...SLOT_COLUMNS, THREADS_COLUMN] : SLOT_COLUMNS) {
          const column = `${c}_${i}`;
          if (cell(column) !== '') throw new RangeError(`${at(line, column)} '${cell(column)}' in slot ${i}, beyond slots = ${slotCount}: must be empty`);
        }
        continue;
      }
      const model = cell(`model_${i}`);
      const spec = models.get(model);
      if (spec === undefined) throw new RangeError(`${at(line, `model_${i}`)} unknown model '${model}' (known: ${known()})`);
      const start = int(`start_${i}`, 0);
      const end = int(`end_${i}`, 0);
      try {
        checkSegment(spec, start, end);
      } catch (err) {
        const column = start >= spec.operators.length ? `start_${i}` : `end_${i}`;
        throw new RangeError(`${at(line, column)} ${err instanceof Error ? err.message : String(err)}`, { cause: err });
      }
      const batch = int(`batch_${i}`, 1);
      const seqLen = int(`seq_len_${i}`, 0);
      if (spec.dynamicAxes.seq === undefined && spec.dynamicAxes.symbols === undefined && seqLen !== 0) throw new RangeError(`${at(line, `seq_len_${i}`)} ${seqLen}: ${model} has no sequence axis, seq_len must be 0`); // a model with several axes: its size (`querySize`)
      if (spec.maxSeqLen !== undefined && seqLen > spec.maxSeqLen) throw new RangeError(`${at(line, `seq_len_${i}`)} ${seqLen} exceeds ${model}'s maximum sequence length ${spec.maxSeqLen}`);
      const threadsCell = threads ? cell(`${THREADS_COLUMN}_${i}`) : '';
      const intraOpThreads = threadsCell.trim() === '' ? undefined : int(`${THREADS_COLUMN}_${i}`, 1);
      slots.push(intraOpThreads === undefined ? { model, start, end, batch, seqLen } : { model, start, end, batch, seqLen, intraOpThreads });
    }
    const medianMs = ms('median_ms');
    const meanMs = ms('mean_ms');
    const stdMs = ms('std_ms');
    const runs = int('runs', 1);
    rows.push({ sample, device, slots, medianMs, meanMs, stdMs, runs });
  }
  return { maxSlots, threads, rows, droppedTail, kept };
}

function checkMaxSlots(maxSlots: number): void {
  if (!Number.isSafeInteger(maxSlots) || maxSlots < 1) throw new RangeError(`maxSlots ${String(maxSlots)} must be an integer ≥ 1`);
}
