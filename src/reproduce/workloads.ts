/**
 * The paper's co-location sets (`src/reproduce/reference/paper-workloads.csv`, from the Abacus
 * paper's evaluation, §7.2–7.4): per experiment (§7.2 `7.2_qos`, §7.3
 * `7.3_throughput`, §7.4 `7.4_beyond_pair`) the models, their QoS target, the offered load,
 * the number of queries and the controller's search ways and slack.
 */
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { parse } from 'csv-parse/sync';

/** The paper's cluster load trace, bundled at `src/reproduce/reference/cluster-load-trace.csv` (Abacus paper §7.6). */
export const CLUSTER_TRACE_PATH = fileURLToPath(new URL('./reference/cluster-load-trace.csv', import.meta.url));

/** The bundled copy of the paper's workloads. */
export const PAPER_WORKLOADS_PATH = fileURLToPath(new URL('./reference/paper-workloads.csv', import.meta.url));

/** One co-location set of the paper. */
export interface PaperWorkload {
  /** `7.2_qos`, `7.3_throughput`, `7.4_beyond_pair`. */
  readonly experiment: string;
  /** Zoo model names, one service each. */
  readonly models: readonly string[];
  /** QoS target of every service of the set, ms. */
  readonly qosMs: number;
  /** Offered load over all services, queries/s. */
  readonly offeredLoadQps: number;
  readonly queries: number;
  readonly searchWays: number;
  readonly slackMs: number;
}

const COLUMNS = ['experiment', 'models', 'qos_ms', 'offered_load_qps', 'queries', 'search_ways', 'slack_ms'] as const;

/**
 * Read a workloads CSV (the bundled copy by default).
 * @throws RangeError naming the file, line and column for a missing column or a bad number.
 */
export async function readPaperWorkloads(file = PAPER_WORKLOADS_PATH): Promise<PaperWorkload[]> {
  const records = parse(await readFile(file, 'utf8'), { skip_empty_lines: true, trim: true });
  const header = records[0] ?? [];
  const col = Object.fromEntries(COLUMNS.map((c) => [c, header.indexOf(c)])) as Record<(typeof COLUMNS)[number], number>;
  for (const c of COLUMNS) if (col[c] < 0) throw new RangeError(`${file}:1: missing column '${c}'`);
  return records.slice(1).map((row, i) => {
    const num = (c: (typeof COLUMNS)[number]): number => {
      const x = Number(row[col[c]]);
      if (row[col[c]] === undefined || row[col[c]] === '' || !Number.isFinite(x) || x <= 0) throw new RangeError(`${file}:${i + 2}:${c}: expected a number > 0, got '${row[col[c]] ?? ''}'`);
      return x;
    };
    return {
      experiment: row[col.experiment] ?? '',
      models: (row[col.models] ?? '').split('+'),
      qosMs: num('qos_ms'),
      offeredLoadQps: num('offered_load_qps'),
      queries: num('queries'),
      searchWays: num('search_ways'),
      slackMs: num('slack_ms'),
    };
  });
}
