/**
 * profile/csv.ts: header, row format, round trip through `readProfileCsv`, and every bad input
 * named with FILE:LINE:COLUMN.
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ModelRepository } from '../src/model/repository.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import { formatProfileHeader, formatProfileRow, parseProfileCsv, profileCsvHeader, readProfileCsv, type ProfileRow } from '../src/profile/index.ts';

let tmp: string;
let models: Map<string, ModelSpec>;
beforeAll(async () => {
  tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-profile-csv-'));
  const repo = new ModelRepository({ cacheDir: path.join(tmp, 'cache') });
  models = new Map([
    ['resnet50', await repo.zooSpec('resnet50')], // 18 operators, no sequence axis
    ['bert', await repo.zooSpec('bert')], // 12 operators, seq ≤ 512
  ]);
});
afterAll(async () => {
  await fs.rm(tmp, { recursive: true, force: true });
});

const ROWS: ProfileRow[] = [
  { sample: 0, device: 'sim:a100', slots: [{ model: 'resnet50', start: 0, end: 18, batch: 4, seqLen: 0 }], medianMs: 2.5, meanMs: 2.512345, stdMs: 0.01, runs: 5 },
  {
    sample: 1,
    device: 'sim:a100',
    slots: [
      { model: 'bert', start: 3, end: 12, batch: 2, seqLen: 64 },
      { model: 'resnet50', start: 7, end: 9, batch: 1, seqLen: 0 },
    ],
    medianMs: 11.000001,
    meanMs: 11.25,
    stdMs: 0,
    runs: 5,
  },
];

const HEADER2 = 'sample,device,slots,model_0,start_0,end_0,batch_0,seq_len_0,model_1,start_1,end_1,batch_1,seq_len_1,median_ms,mean_ms,std_ms,runs';
/** A valid two-slot file: header (line 1), row 0 (line 2), row 1 (line 3). */
const VALID = HEADER2 + '\n' + '0,sim:a100,1,resnet50,0,18,4,0,,,,,,2.500000,2.512345,0.010000,5\n' + '1,sim:a100,2,bert,3,12,2,64,resnet50,7,9,1,0,11.000001,11.250000,0.000000,5\n';

let fileNo = 0;
async function write(text: string): Promise<string> {
  const file = path.join(tmp, `f${fileNo++}.csv`);
  await fs.writeFile(file, text);
  return file;
}

/** VALID with cell `column` of data line `line` (2 or 3) replaced by `value`. */
function withCell(line: number, column: string, value: string): string {
  const lines = VALID.split('\n');
  const cells = lines[line - 1]!.split(',');
  cells[HEADER2.split(',').indexOf(column)] = value;
  lines[line - 1] = cells.join(',');
  return lines.join('\n');
}

describe('profile CSV format', () => {
  it('header: the dataset.ts schema for K slots', () => {
    expect(profileCsvHeader(2).join(',')).toBe(HEADER2);
    expect(profileCsvHeader(1)).toEqual(['sample', 'device', 'slots', 'model_0', 'start_0', 'end_0', 'batch_0', 'seq_len_0', 'median_ms', 'mean_ms', 'std_ms', 'runs']);
    expect(profileCsvHeader(4)).toHaveLength(3 + 4 * 5 + 4);
    expect(() => profileCsvHeader(0)).toThrow(RangeError);
  });

  it('rows: integers plainly, latencies with 6 decimals, empty cells beyond the slots, one line with \\n', () => {
    expect(formatProfileHeader(2) + ROWS.map((r) => formatProfileRow(r, 2)).join('')).toBe(VALID);
    expect(() => formatProfileRow(ROWS[1]!, 1)).toThrow(/2 slots/);
  });

  it('round trip: what is written reads back equal, several files concatenated', async () => {
    const a = await write(VALID);
    const b = await write(formatProfileHeader(1) + formatProfileRow({ ...ROWS[0]!, sample: 7, device: 'ort:cpu' }, 1));
    const rows = await readProfileCsv([a, b], { models });
    expect(rows).toEqual([...ROWS, { ...ROWS[0], sample: 7, device: 'ort:cpu' }]);
  });

  it('accepts a last line without \\n, CRLF line ends and blank lines', async () => {
    expect(await readProfileCsv([await write(VALID.slice(0, -1))], { models })).toEqual(ROWS);
    expect(await readProfileCsv([await write(VALID.replaceAll('\n', '\r\n'))], { models })).toEqual(ROWS);
  });
});

describe('readProfileCsv: bad input names file, line and column', () => {
  /** Expect a RangeError whose message starts with FILE:LINE:COLUMN: and contains `what`. */
  async function expectError(text: string, line: number, column: string | undefined, what: RegExp | string): Promise<void> {
    const file = await write(text);
    const err = await readProfileCsv([file], { models }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(RangeError);
    const message = (err as Error).message;
    expect(message.startsWith(`${file}:${line}:${column === undefined ? '' : `${column}:`}`), message).toBe(true);
    if (typeof what === 'string') expect(message).toContain(what);
    else expect(message).toMatch(what);
  }

  it('empty file, whitespace only', async () => {
    await expectError('', 1, undefined, 'empty file');
    await expectError('\n\n', 1, undefined, 'empty file');
  });

  it('missing column in the header (named), unexpected column', async () => {
    await expectError(VALID.replace(',batch_1,', ','), 1, 'batch_1', "missing column 'batch_1'");
    await expectError(VALID.replace(',median_ms,', ','), 1, 'median_ms', "missing column 'median_ms'");
    await expectError('x,y\n1,2\n', 1, 'sample', "missing column 'sample'");
    await expectError(VALID.replace(',runs\n', ',runs,extra\n'), 1, 'extra', "unexpected column 'extra'");
    await expectError(VALID.replace('sample,device', 'device,sample'), 1, 'device', "unexpected column 'device' at position 1");
  });

  it('wrong cell count, also a truncated last line', async () => {
    await expectError(VALID.replace(',0.010000,5\n', ',0.010000\n'), 2, 'runs', 'the line has 16 cells but the header 17');
    await expectError(VALID.slice(0, VALID.length - 12), 3, 'std_ms', 'the line has 15 cells but the header 17');
    await expectError(VALID.replace(',5\n1,', ',5,9\n1,'), 2, 'cell 18', '18 cells');
  });

  it('non-numeric and non-integer cells', async () => {
    await expectError(withCell(2, 'start_0', 'abc'), 2, 'start_0', "'abc' is not an integer");
    await expectError(withCell(3, 'batch_1', '2.5'), 3, 'batch_1', "'2.5' is not an integer");
    await expectError(withCell(2, 'sample', ''), 2, 'sample', "'' is not an integer");
    await expectError(withCell(3, 'median_ms', 'fast'), 3, 'median_ms', "'fast' is not a number");
    await expectError(withCell(3, 'std_ms', 'NaN'), 3, 'std_ms', 'is not a number');
    await expectError(withCell(2, 'mean_ms', 'Infinity'), 2, 'mean_ms', 'is not a number');
    await expectError(withCell(2, 'mean_ms', '1e999'), 2, 'mean_ms', 'not finite');
  });

  it('unknown model, listing the known ones', async () => {
    await expectError(withCell(3, 'model_1', 'resnet5O'), 3, 'model_1', "unknown model 'resnet5O' (known: bert, resnet50)");
  });

  it('slot count out of range', async () => {
    await expectError(withCell(2, 'slots', '0'), 2, 'slots', '0 must be ≥ 1');
    await expectError(withCell(2, 'slots', '3'), 2, 'slots', '3 slots but the header has slot columns for 2');
  });

  it("start/end outside the model's operators", async () => {
    await expectError(withCell(2, 'start_0', '18'), 2, 'start_0', 'segment start 18 of resnet50 must be an integer in [0, 17]');
    await expectError(withCell(2, 'end_0', '19'), 2, 'end_0', 'segment end 19 of resnet50 must be an integer in [1, 18]');
    await expectError(withCell(3, 'end_1', '7'), 3, 'end_1', 'segment end 7 of resnet50 must be an integer in [8, 18]');
    await expectError(withCell(3, 'start_0', '-1'), 3, 'start_0', '-1 must be ≥ 0');
  });

  it('batch < 1, negative or impossible seq_len', async () => {
    await expectError(withCell(2, 'batch_0', '0'), 2, 'batch_0', '0 must be ≥ 1');
    await expectError(withCell(3, 'seq_len_0', '-8'), 3, 'seq_len_0', '-8 must be ≥ 0');
    await expectError(withCell(3, 'seq_len_0', '1024'), 3, 'seq_len_0', "1024 exceeds bert's maximum sequence length 512");
    await expectError(withCell(2, 'seq_len_0', '32'), 2, 'seq_len_0', 'resnet50 has no sequence axis');
  });

  it('non-empty cells beyond `slots`', async () => {
    await expectError(withCell(2, 'batch_1', '4'), 2, 'batch_1', "'4' in slot 1, beyond slots = 1: must be empty");
    await expectError(withCell(2, 'model_1', 'bert'), 2, 'model_1', 'beyond slots = 1');
  });

  it('latency negative or not finite, runs < 1, empty device', async () => {
    await expectError(withCell(2, 'median_ms', '-0.5'), 2, 'median_ms', 'latency -0.5 ms must be ≥ 0');
    await expectError(withCell(3, 'runs', '0'), 3, 'runs', '0 must be ≥ 1');
    await expectError(withCell(3, 'device', ''), 3, 'device', 'device id is empty');
  });

  it('malformed CSV (an unclosed quote)', async () => {
    await expectError(VALID + '2,"sim:a100,1\n', 4, undefined, 'malformed CSV');
  });

  it('a missing file is the file system error, not a RangeError', async () => {
    await expect(readProfileCsv([path.join(tmp, 'nope.csv')], { models })).rejects.toMatchObject({ code: 'ENOENT' });
  });
});

describe('parseProfileCsv for resuming', () => {
  it('drops an unterminated last line instead of failing on it', () => {
    const cut = VALID.slice(0, VALID.length - 12);
    const parsed = parseProfileCsv(cut, 'x.csv', models, { dropTruncatedTail: true });
    expect(parsed.rows).toEqual([ROWS[0]]);
    expect(parsed.kept).toBe(VALID.split('\n').slice(0, 2).join('\n') + '\n');
    expect(parsed.droppedTail).toBe(cut.slice(parsed.kept.length));
    expect(parseProfileCsv(VALID, 'x.csv', models, { dropTruncatedTail: true }).droppedTail).toBe('');
  });
});
