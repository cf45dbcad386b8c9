/**
 * The arrival process of a load run as users write it: `--arrivals` on `abacus simulate` /
 * `abacus bench`, or `arrivals` in the serving config. One grammar for both:
 *
 * ```
 * poisson                                   exponential gaps (default; the paper's load, §7.1)
 * constant                                  one query every 1000/rate ms
 * bursty[:onMs=500,offMs=1500,offRatio=0]   on/off bursts (Markov-modulated Poisson)
 * trace:FILE[,minuteMs=60000]               a per-minute load trace replayed (Poisson per minute)
 * ```
 *
 * Every process offers `rate` queries/s on average (the run's `--rate`), so `--find-peak`
 * scales a bursty load or a trace as it scales a Poisson one; the shape only redistributes the
 * same mean load over time:
 *
 * - `bursty`: on periods of mean `onMs` ms, off periods of mean `offMs` ms (exponential
 *   lengths), the off rate `offRatio` × the on rate (0: silent off periods, in [0, 1]); the on
 *   rate is solved so the long-run mean is `rate`: onQps = rate·(onMs + offMs) / (onMs +
 *   offRatio·offMs). Defaults (a choice, not from the paper): half-second bursts at 4× the
 *   mean rate, silent in between — ten QoS windows of a 50 ms target, long enough for a burst
 *   to build a queue.
 * - `trace`: a CSV `minute,offered_load_qps` (the format of the cluster trace,
 *   `workload/trace-file.ts`), scaled so its mean over all minutes is `rate`; one trace minute
 *   lasts `minuteMs` ms (60,000 = real time; smaller compresses the trace). No arrivals after
 *   the last minute: a run may end before its query count.
 */
import path from 'node:path';
import { burstyArrivals, constantArrivals, poissonArrivals, traceArrivals, type ArrivalProcess } from './arrivals.ts';
import { readLoadTrace } from './trace-file.ts';

/** Defaults of `bursty` (see the file comment). */
export const DEFAULT_BURSTY = Object.freeze({ onMs: 500, offMs: 1500, offRatio: 0 });

/** Default length of one trace minute, ms: real time. */
export const DEFAULT_TRACE_MINUTE_MS = 60_000;

/** A parsed arrival process, before a rate is applied. */
export type ArrivalSpec =
  | { readonly kind: 'poisson' }
  | { readonly kind: 'constant' }
  | { readonly kind: 'bursty'; readonly onMs: number; readonly offMs: number; readonly offRatio: number }
  | { readonly kind: 'trace'; readonly file: string; readonly minuteMs: number };

/** The kinds `parseArrivalSpec` accepts. */
export const ARRIVAL_KINDS: readonly ArrivalSpec['kind'][] = ['poisson', 'constant', 'bursty', 'trace'];

/** Grammar of the text form, for help texts and errors. */
export const ARRIVALS_SYNTAX = 'poisson, constant, bursty[:onMs=MS,offMs=MS,offRatio=R] or trace:FILE[,minuteMs=MS]';

/** `key=value` parameters of a spec, each parsed as a finite number. */
function parseParams(field: string, kind: string, parts: readonly string[], allowed: readonly string[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const part of parts) {
    const eq = part.indexOf('=');
    const key = eq < 0 ? part.trim() : part.slice(0, eq).trim();
    const text = eq < 0 ? '' : part.slice(eq + 1).trim();
    if (!allowed.includes(key)) throw new RangeError(`${field}: ${kind} has no parameter '${key}' (valid: ${allowed.join(', ')})`);
    if (out.has(key)) throw new RangeError(`${field}: ${kind} parameter '${key}' is given twice`);
    const value = Number(text);
    if (text === '' || !Number.isFinite(value)) throw new RangeError(`${field}: ${kind} parameter '${key}' must be a number, got '${text}'`);
    out.set(key, value);
  }
  return out;
}

/**
 * Check a spec's numbers and fill nothing in (the spec is complete).
 * @throws RangeError naming `field` and the parameter out of range.
 */
function checked(spec: ArrivalSpec, field: string): ArrivalSpec {
  if (spec.kind === 'bursty') {
    if (!(spec.onMs > 0)) throw new RangeError(`${field}: bursty onMs must be a number of ms > 0, got ${spec.onMs}`);
    if (!(spec.offMs > 0)) throw new RangeError(`${field}: bursty offMs must be a number of ms > 0, got ${spec.offMs}`);
    if (!(spec.offRatio >= 0 && spec.offRatio <= 1)) throw new RangeError(`${field}: bursty offRatio (off rate ÷ on rate) must be in [0, 1], got ${spec.offRatio}`);
  }
  if (spec.kind === 'trace') {
    if (spec.file.trim() === '') throw new RangeError(`${field}: trace needs a file: trace:FILE[,minuteMs=MS]`);
    if (!(spec.minuteMs > 0 && Number.isFinite(spec.minuteMs))) throw new RangeError(`${field}: trace minuteMs must be a number of ms > 0, got ${spec.minuteMs}`);
  }
  return spec;
}

/**
 * Parse the text form (see the file comment). `field` names the source in errors (`--arrivals`,
 * `config.yaml: arrivals`); `baseDir` resolves a relative trace file (default: the working
 * directory).
 * @throws RangeError naming `field` for an unknown kind, an unknown or repeated parameter, a
 *   value that is not a number or out of range, or a trace without a file.
 */
export function parseArrivalSpec(text: string, field: string, baseDir = process.cwd()): ArrivalSpec {
  const trimmed = text.trim();
  const colon = trimmed.indexOf(':');
  const kind = colon < 0 ? trimmed : trimmed.slice(0, colon);
  const rest = colon < 0 ? undefined : trimmed.slice(colon + 1);
  switch (kind) {
    case 'poisson':
    case 'constant':
      if (rest !== undefined) throw new RangeError(`${field}: ${kind} takes no parameters (the rate is --rate), got '${trimmed}'`);
      return { kind };
    case 'bursty': {
      const params = parseParams(field, kind, rest === undefined || rest.trim() === '' ? [] : rest.split(','), ['onMs', 'offMs', 'offRatio']);
      return checked({ kind, onMs: params.get('onMs') ?? DEFAULT_BURSTY.onMs, offMs: params.get('offMs') ?? DEFAULT_BURSTY.offMs, offRatio: params.get('offRatio') ?? DEFAULT_BURSTY.offRatio }, field);
    }
    case 'trace': {
      if (rest === undefined || rest.trim() === '') throw new RangeError(`${field}: trace needs a file: trace:FILE[,minuteMs=MS]`);
      // Trailing `,key=value` parts are parameters; the file is what comes before them (it may contain commas).
      const parts = rest.split(',');
      let firstParam = parts.length;
      while (firstParam > 1 && /^\s*[A-Za-z]+\s*=/.test(parts[firstParam - 1]!)) firstParam--;
      const file = parts.slice(0, firstParam).join(',').trim();
      const params = parseParams(field, kind, parts.slice(firstParam), ['minuteMs']);
      return checked({ kind, file: file === '' ? '' : path.resolve(baseDir, file), minuteMs: params.get('minuteMs') ?? DEFAULT_TRACE_MINUTE_MS }, field);
    }
    default:
      throw new RangeError(`${field}: unknown arrival process '${kind}' (valid: ${ARRIVALS_SYNTAX})`);
  }
}

/**
 * Validate an arrival spec given as an object (the config's `arrivals: { kind: bursty, onMs: …
 * }` form), filling the defaults; a relative trace `file` is resolved against `baseDir`.
 * @throws RangeError naming `field` and the bad member.
 */
export function arrivalSpecOf(raw: Readonly<Record<string, unknown>>, field: string, baseDir = process.cwd()): ArrivalSpec {
  const kind = raw['kind'];
  if (typeof kind !== 'string' || !(ARRIVAL_KINDS as readonly string[]).includes(kind)) {
    throw new RangeError(`${field}.kind: must be one of ${ARRIVAL_KINDS.join(', ')}, got ${JSON.stringify(kind) ?? 'nothing'}`);
  }
  const allowed: Record<string, readonly string[]> = { poisson: [], constant: [], bursty: ['onMs', 'offMs', 'offRatio'], trace: ['file', 'minuteMs'] };
  for (const key of Object.keys(raw)) {
    if (key !== 'kind' && !allowed[kind]!.includes(key)) throw new RangeError(`${field}: unknown field '${key}' for ${kind} (valid: kind${allowed[kind]!.map((k) => `, ${k}`).join('')})`);
  }
  const num = (key: string, def: number): number => {
    const v = raw[key];
    if (v === undefined) return def;
    if (typeof v !== 'number' || !Number.isFinite(v)) throw new RangeError(`${field}.${key}: must be a number, got ${JSON.stringify(v)}`);
    return v;
  };
  switch (kind) {
    case 'poisson':
    case 'constant':
      return { kind };
    case 'bursty':
      return checked({ kind, onMs: num('onMs', DEFAULT_BURSTY.onMs), offMs: num('offMs', DEFAULT_BURSTY.offMs), offRatio: num('offRatio', DEFAULT_BURSTY.offRatio) }, field);
    default: {
      const file = raw['file'];
      if (typeof file !== 'string' || file.trim() === '') throw new RangeError(`${field}.file: trace needs a file name, got ${JSON.stringify(file) ?? 'nothing'}`);
      return checked({ kind: 'trace', file: path.resolve(baseDir, file), minuteMs: num('minuteMs', DEFAULT_TRACE_MINUTE_MS) }, field);
    }
  }
}

/** The text form of a spec with every parameter spelled out (for output and `--json`). */
export function formatArrivalSpec(spec: ArrivalSpec): string {
  switch (spec.kind) {
    case 'poisson':
    case 'constant':
      return spec.kind;
    case 'bursty':
      return `bursty:onMs=${spec.onMs},offMs=${spec.offMs},offRatio=${spec.offRatio}`;
    case 'trace':
      return `trace:${spec.file},minuteMs=${spec.minuteMs}`;
  }
}

/** A spec made ready to run: the process for a mean rate, and what a trace holds. */
export interface ArrivalsFactory {
  readonly spec: ArrivalSpec;
  /** A fresh process (they are stateful) offering `rateQps` queries/s on average. @throws RangeError for a rate that is not finite and > 0. */
  readonly create: (rateQps: number) => ArrivalProcess;
  /** Trace only: its minutes and its own mean load, queries/s. */
  readonly trace?: { readonly minutes: number; readonly meanQps: number };
}

/**
 * Make `spec` runnable; a trace file is read now.
 * @throws RangeError naming `field` and the file, line and column of a bad trace (or one it
 *   cannot read, with the system's reason).
 */
export async function loadArrivals(spec: ArrivalSpec, field: string): Promise<ArrivalsFactory> {
  switch (spec.kind) {
    case 'poisson':
      return { spec, create: poissonArrivals };
    case 'constant':
      return { spec, create: constantArrivals };
    case 'bursty': {
      const { onMs, offMs, offRatio } = spec;
      return {
        spec,
        create: (rateQps) => {
          const onQps = (rateQps * (onMs + offMs)) / (onMs + offRatio * offMs);
          return burstyArrivals({ onQps, offQps: offRatio * onQps, meanOnMs: onMs, meanOffMs: offMs });
        },
      };
    }
    case 'trace': {
      let perMinuteQps: number[];
      try {
        perMinuteQps = await readLoadTrace(spec.file);
      } catch (err) {
        const reason = err instanceof Error ? err.message : String(err);
        throw new RangeError(`${field}: ${reason.startsWith(spec.file) ? reason : `cannot read the trace ${spec.file}: ${reason}`}`, { cause: err });
      }
      const meanQps = perMinuteQps.reduce((a, b) => a + b, 0) / perMinuteQps.length;
      if (!(meanQps > 0)) throw new RangeError(`${field}: the trace ${spec.file} has no minute with load > 0`);
      return {
        spec,
        trace: { minutes: perMinuteQps.length, meanQps },
        create: (rateQps) => traceArrivals({ perMinuteQps, scale: rateQps / meanQps, minuteMs: spec.minuteMs }),
      };
    }
  }
}
