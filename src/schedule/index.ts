/**
 * Query controllers: the contract (`controller.ts`), the policies, and `createController`,
 * which validates a policy's parameters (zod) and builds it.
 *
 * Parameters come from config files or CLI flags: numeric strings ('4') become numbers and
 * 'true' / 'false' become booleans; absent or undefined fields get the paper's defaults.
 */
import { z } from 'zod';
import type { Logger } from '../log.ts';
import type { GroupSlot, Predictor } from '../predict/predictor.ts';
import { RefinedPredictor } from '../predict/refine.ts';
import type { CpuNeighbours, PolicyName, QueryController } from './controller.ts';
import { AbacusController } from './abacus/index.ts';
import { StreamAbacusController } from './abacus/stream.ts';
import { ClockworkController } from './clockwork/index.ts';
import { OneAtATimeController, type OneAtATimePolicy } from './one-at-a-time/index.ts';
import { OverlapAllController } from './overlap-all/index.ts';
import { TritonController } from './triton/index.ts';
import { type LoneThreadChooser, ThreadAssigningController, ThreadedPredictor } from './threads.ts';
import { parseThreadRule, threadsFor, type ThreadRule } from '../threads.ts';
import { FALLBACK_DROP_QUANTILE, FallbackController, type StreamHooks } from './fallback.ts';

export type * from './controller.ts';
export { AbacusController, type AbacusParams } from './abacus/index.ts';
export { StreamAbacusController, type StreamAbacusParams } from './abacus/stream.ts';
export { ClockworkController, type ClockworkParams, windowPercentile } from './clockwork/index.ts';
export { OneAtATimeController, type OneAtATimeParams, type OneAtATimePolicy } from './one-at-a-time/index.ts';
export { OverlapAllController } from './overlap-all/index.ts';
export { TritonController, type TritonParams } from './triton/index.ts';
export { LoneThreadChooser, ThreadAssigningController, ThreadedPredictor, type LoneThreadOptions } from './threads.ts';
export { FallbackController, type FallbackStatus } from './fallback.ts';

export const POLICY_NAMES: readonly PolicyName[] = Object.freeze(['abacus', 'fcfs', 'sjf', 'edf', 'fcfs-batch', 'edf-batch', 'overlap-all', 'clockwork', 'triton'] as const);

/**
 * The policies that fuse a service's waiting queries into dynamic batches when the service has
 * `batching` (docs/batching.md "Policies that fuse"); the others run every request alone.
 */
export const FUSING_POLICIES: ReadonlySet<PolicyName> = new Set<PolicyName>(['abacus', 'fcfs-batch', 'edf-batch', 'clockwork', 'triton']);

/** One line per policy, for `--help` texts and docs (what it launches, in which order, with which batching). */
export const POLICY_SUMMARIES: Readonly<Record<PolicyName, string>> = Object.freeze({
  abacus: "deterministic overlap: most urgent queries whole + a searched cut of the next (SC'21); searched batch sizes",
  fcfs: 'one whole query at a time, earliest arrival first',
  sjf: 'one whole query at a time, shortest predicted first',
  edf: 'one whole query at a time, earliest deadline first',
  'fcfs-batch': 'fcfs, fusing every queued query of the service that fits (greedy, ≤ maxBatchSize)',
  'edf-batch': 'edf, fusing every queued query of the service that fits (greedy, ≤ maxBatchSize)',
  'overlap-all': 'every query at once, whole, overlapping at random (MPS / Triton instance groups)',
  clockwork: "EDF, measured estimates; largest batch meeting its earliest deadline, ≤ maxExecMs (OSDI'20)",
  triton: "Triton's dynamic batcher, 1 instance/model: services overlap, waits ≤ maxQueueDelayMs",
});

/**
 * Named policy variants: a policy with fixed parameters, accepted where a list of policies is
 * (`--policy` of bench, simulate and the co-location experiments; the batching experiments'
 * variants), so that both forms of one policy run side by side in one process.
 */
export const POLICY_VARIANTS: Readonly<Record<string, { readonly policy: PolicyName; readonly params: Readonly<Record<string, unknown>> }>> = Object.freeze({
  'abacus-no-barrier': { policy: 'abacus', params: Object.freeze({ barrier: false }) },
});

/** Whether `createController` needs a predictor for `policy` (every policy but overlap-all and triton, which predict nothing). */
export function policyNeedsPredictor(policy: string): boolean {
  return policy !== 'overlap-all' && policy !== 'triton';
}

export function isPolicyName(s: string): s is PolicyName {
  return (POLICY_NAMES as readonly string[]).includes(s);
}

interface FieldSpec {
  readonly type: z.ZodType;
  /** "an integer in [2, 64]" */
  readonly text: string;
  readonly def: number | boolean | string;
  readonly kind: 'number' | 'boolean' | 'string';
}

const MAX_WAYS = 64;

const DROP: FieldSpec = { type: z.boolean(), text: 'a boolean', def: true, kind: 'boolean' };

/**
 * Intra-op threads per segment, decided per group (`threads.ts`, `schedule/threads.ts`;
 * docs/threads.md): 'device' (the device's default, as before), 'fixed:N', 'split:C' (each of k
 * segments max(1, ⌊C/k⌋): a lone query every core) or 'adapt:C' (as split:C; a lone query at the
 * count its recent measured latencies favour, `LoneThreadChooser`).
 */
const THREADS: FieldSpec = {
  type: z.string().refine((t) => {
    try {
      parseThreadRule(t);
      return true;
    } catch {
      return false;
    }
  }),
  text: "'device', 'fixed:N', 'split:C' or 'adapt:C' (N, C integers in [1, 1024])",
  def: 'device',
  kind: 'string',
};

/** Per policy: its parameters, their valid ranges and the defaults (Abacus SC'21 A100 runs; Clockwork OSDI'20). */
const FIELDS: Readonly<Record<PolicyName, Readonly<Record<string, FieldSpec>>>> = {
  abacus: {
    ways: { type: z.number().int().min(2).max(MAX_WAYS), text: `an integer in [2, ${MAX_WAYS}]`, def: 2, kind: 'number' },
    slackMs: { type: z.number().min(0).max(1e9), text: 'a number of ms in [0, 1e9]', def: 5, kind: 'number' },
    drop: DROP,
    /** Online refinement of the predictor from measured group latencies (`predict/refine.ts`); off: the offline predictor alone, as in the paper. */
    refine: { type: z.boolean(), text: 'a boolean', def: false, kind: 'boolean' },
    /** One query at a time, dropping on measured latencies, while measured groups overrun their predictions (`fallback.ts`); off: the paper's controller. */
    fallback: { type: z.boolean(), text: 'a boolean', def: false, kind: 'boolean' },
    /** With `refine`: inflate the predictions of overlapped groups while out of calibration (`predict/refine.ts` "Guard"). */
    guard: { type: z.boolean(), text: 'a boolean', def: true, kind: 'boolean' },
    /** The paper's group barrier (one group at a time); false: each service on its own stream, every launch predicted against the running segments (`abacus/stream.ts`). */
    barrier: { type: z.boolean(), text: 'a boolean', def: true, kind: 'boolean' },
    /** Without the barrier: a partial batch waits for more samples while its members can afford it (`abacus/stream.ts` step 3b); ignored with the barrier. */
    hold: { type: z.boolean(), text: 'a boolean', def: true, kind: 'boolean' },
    threads: THREADS,
    /**
     * With `fallback`: also one query at a time while the machine's other processes leave about
     * one core free (`fallback.ts` "Interference", `device/neighbours.ts`); off: predictions only.
     */
    interference: { type: z.boolean(), text: 'a boolean', def: false, kind: 'boolean' },
    /**
     * With `fallback`: intra-op threads of each fallback launch (one query with nothing beside it);
     * 0: the thread rule's count for a lone query. Lets abacus without the barrier, whose streams
     * run `fixed:N`, give a fallback launch every core as the strong baseline does (`fallback.ts`).
     */
    fallbackThreads: { type: z.number().int().min(0).max(1024), text: 'an integer in [0, 1024] (0: the thread rule\'s count for a lone query)', def: 0, kind: 'number' },
  },
  fcfs: { drop: DROP, threads: THREADS },
  sjf: { drop: DROP, threads: THREADS },
  edf: { drop: DROP, threads: THREADS },
  'fcfs-batch': { drop: DROP, threads: THREADS },
  'edf-batch': { drop: DROP, threads: THREADS },
  'overlap-all': {},
  clockwork: {
    window: { type: z.number().int().min(1).max(10_000), text: 'an integer in [1, 10000]', def: 10, kind: 'number' },
    percentile: { type: z.number().gt(0).max(100), text: 'a number in (0, 100]', def: 99, kind: 'number' },
    /** Clockwork's `max_exec` (its scheduler's `max_allowable_exec_time`). */
    maxExecMs: { type: z.number().gt(0).max(1e9), text: 'a number of ms in (0, 1e9]', def: 25, kind: 'number' },
    threads: THREADS,
  },
  /** `drop`: Triton's queue policy `timeout_action: REJECT`, timeout = the QoS target. */
  triton: { drop: DROP },
};

function coerce(v: unknown): unknown {
  if (typeof v === 'string') {
    const t = v.trim();
    if (t === 'true') return true;
    if (t === 'false') return false;
    if (t !== '') {
      const n = Number(t);
      return Number.isNaN(n) ? v : n;
    }
  }
  return v;
}

/**
 * Each policy's parameter schema, built once: a zod schema compiles itself on its first parse
 * (zod 4), and building one per call made every `createController` cost about 0.8 ms (measured:
 * 2,000 parses of abacus parameters, load ~10), which experiments that build a controller per
 * run and the tests paid thousands of times.
 */
const SCHEMAS: ReadonlyMap<PolicyName, z.ZodType> = new Map(POLICY_NAMES.map((policy) => [policy, paramsSchema(FIELDS[policy])]));

/** The strict object schema of a policy's parameters, each coerced from a string and optional. */
function paramsSchema(fields: Readonly<Record<string, FieldSpec>>): z.ZodType {
  const shape: Record<string, z.ZodType> = {};
  for (const [key, spec] of Object.entries(fields)) shape[key] = z.preprocess(coerce, spec.type.optional());
  return z.strictObject(shape);
}

function describe(v: unknown): string {
  if (typeof v === 'string') return `'${v}'`;
  if (typeof v === 'number' || typeof v === 'boolean' || v === null || v === undefined) return String(v);
  return typeof v;
}

/**
 * Validate a policy's raw parameters and fill the defaults.
 * @returns every parameter of `policy` (abacus: ways, slackMs, drop, refine, fallback, guard, barrier, hold, threads, interference, fallbackThreads;
 *   fcfs/sjf/edf, fcfs-batch/edf-batch: drop, threads; triton: drop; clockwork: window,
 *   percentile, maxExecMs, threads; overlap-all: none).
 * @throws RangeError for an unknown policy (naming the valid ones) and for a value out of
 *   range (naming the parameter and its range); TypeError for a value of the wrong type or a
 *   parameter the policy does not have (naming it and the valid ones).
 */
export function parseControllerParams(policy: string, raw: Readonly<Record<string, unknown>> = {}): Record<string, number | boolean | string> {
  if (!isPolicyName(policy)) throw new RangeError(`policy must be one of ${POLICY_NAMES.join(', ')}; got '${policy}'`);
  const fields = FIELDS[policy];
  const parsed = (SCHEMAS.get(policy) ?? paramsSchema(fields)).safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues.find((i) => i.code === 'unrecognized_keys') ?? parsed.error.issues[0];
    const valid = Object.keys(fields);
    if (issue?.code === 'unrecognized_keys') {
      // `slack_ms` (a snake_case spelling) for `slackMs`: name the camelCase parameter.
      const camel = issue.keys.map((k) => k.replace(/_([a-z])/g, (_m, c: string) => c.toUpperCase())).filter((k, i) => k !== issue.keys[i] && valid.includes(k));
      throw new TypeError(
        `${policy} has no parameter '${issue.keys.join("', '")}' (${valid.length > 0 ? `valid: ${valid.join(', ')}` : 'it takes none'}${camel.length > 0 ? `; parameters are camelCase: '${camel.join("', '")}'` : ''})`,
      );
    }
    const key = String(issue?.path[0] ?? '?');
    const spec = fields[key];
    const value = raw[key];
    const message = `${policy} parameter '${key}' must be ${spec?.text ?? 'valid'}, got ${describe(value)}`;
    // Wrong kind of value -> TypeError; right kind, out of range or not integral -> RangeError.
    throw spec !== undefined && typeof coerce(value) === spec.kind ? new RangeError(message) : new TypeError(message);
  }
  const values = parsed.data as Record<string, number | boolean | string | undefined>;
  const out: Record<string, number | boolean | string> = {};
  for (const [key, spec] of Object.entries(fields)) out[key] = values[key] ?? spec.def;
  return out;
}

/** What a controller may take beside its parameters and predictor. */
export interface ControllerOptions {
  /** abacus with `refine`: where the refinement logs going out of calibration, recovering and restarting (info); with `fallback`: its switches. */
  readonly logger?: Logger;
  /**
   * abacus with `interference` (required then): what the other processes want of the CPU, told
   * apart from the device's own executors (`device/neighbours.ts` `ProcNeighbours` given
   * `Device.processIds`).
   */
  readonly neighbours?: CpuNeighbours;
}

/**
 * Build the controller of `policy` with validated `params` (see `parseControllerParams`).
 * With a `threads` rule other than 'device', the controller scores through a
 * `ThreadedPredictor` and is wrapped in a `ThreadAssigningController` (`schedule/threads.ts`).
 * @param predictor used by every policy but overlap-all and triton (which may be given none;
 *   `policyNeedsPredictor`).
 * @throws RangeError / TypeError from `parseControllerParams`; TypeError when the policy needs
 *   a predictor and none is given.
 */
export function createController(policy: string, params: Readonly<Record<string, unknown>> = {}, predictor?: Predictor, options: ControllerOptions = {}): QueryController {
  const p = parseControllerParams(policy, params);
  const drop = p['drop'] === true;
  if (policy === 'overlap-all') return new OverlapAllController();
  if (policy === 'triton') return new TritonController({ drop });
  if (predictor === undefined) throw new TypeError(`policy '${policy}' needs a predictor`);
  const rule = parseThreadRule(String(p['threads'] ?? 'device'));
  if (p['interference'] === true && p['fallback'] !== true) throw new RangeError("abacus parameter 'interference' is a trigger of the calibration fallback: it needs 'fallback: true'");
  if (p['interference'] === true && options.neighbours === undefined) throw new RangeError("abacus parameter 'interference' needs what the other processes want of the CPU (ControllerOptions.neighbours; runExperiment and abacus serve pass a ProcNeighbours)");
  if (Number(p['fallbackThreads'] ?? 0) > 0 && p['fallback'] !== true) throw new RangeError("abacus parameter 'fallbackThreads' sets the calibration fallback's thread count: it needs 'fallback: true'");
  const threaded = rule.kind === 'device' ? undefined : new ThreadedPredictor(predictor, rule);
  const scoring = threaded ?? predictor;
  const chooser = threaded?.chooser;
  if (policy === 'abacus' && p['barrier'] === false) {
    if (p['refine'] === true) throw new RangeError("abacus parameter 'refine' needs the group barrier: without it (barrier: false) abacus corrects its launch estimates by their own measured ratios (abacus/stream.ts, 'Correction')");
    if (rule.kind === 'split' || rule.kind === 'adapt') throw new RangeError(`abacus threads '${String(p['threads'])}' splits cores among one group's segments; without the group barrier (barrier: false) every launch is a group of one: use 'fixed:N' or 'device'`);
    const stream = new StreamAbacusController(scoring, { ways: Number(p['ways']), drop, hold: p['hold'] === true });
    const head = p['fallback'] === true ? withFallback(stream, scoring, rule, undefined, p, options, stream) : stream;
    return rule.kind === 'device' ? head : new ThreadAssigningController(head, rule);
  }
  let head = headController(policy, p, scoring, options);
  if (policy === 'abacus' && p['fallback'] === true) {
    const abacus = head as AbacusController;
    head = withFallback(abacus, abacus.refiner ?? scoring, rule, chooser, p, options);
  }
  return rule.kind === 'device' ? head : new ThreadAssigningController(head, rule, chooser);
}

/** abacus with `fallback`: `inner` wrapped in the calibration fallback, asking `predictor` for its exit test (`fallback.ts`). */
function withFallback(
  inner: QueryController,
  predictor: Predictor,
  rule: ThreadRule,
  chooser: LoneThreadChooser | undefined,
  p: Readonly<Record<string, number | boolean | string>>,
  options: ControllerOptions,
  streams?: StreamHooks,
): FallbackController {
  const logger = options.logger;
  const launchThreads = Number(p['fallbackThreads'] ?? 0);
  const threadsAlone = chooser === undefined ? threadsFor(rule, 1) : (slot: GroupSlot) => chooser.threadsFor(slot);
  return new FallbackController(inner, predictor, {
    ...(threadsAlone === undefined ? {} : { threadsAlone }),
    ...(launchThreads > 0 ? { launchThreads } : {}),
    ...(streams === undefined ? {} : { streams }),
    ...(p['interference'] === true && options.neighbours !== undefined ? { neighbours: options.neighbours } : {}),
    drop: p['drop'] === true,
    onSwitch: (active, status) =>
      logger?.info(
        { ...status },
        status.crowded === true
          ? 'abacus fallback on: other processes leave about one core; one query at a time at one thread'
          : status.contended === true
            ? 'abacus fallback on: other processes contend for every core; one query at a time'
            : active
            ? 'abacus fallback on: measured groups overrun their predictions; one query at a time'
            : 'abacus fallback off: overlapping',
      ),
  });
}

/** A head policy (all but overlap-all and triton) with validated parameters `p`. */
function headController(policy: string, p: Readonly<Record<string, number | boolean | string>>, predictor: Predictor, options: ControllerOptions): QueryController {
  const drop = p['drop'] === true;
  switch (policy as Exclude<PolicyName, 'overlap-all' | 'triton'>) {
    case 'abacus':
      return new AbacusController(predictor, { ways: Number(p['ways']), slackMs: Number(p['slackMs']), drop, ...(p['fallback'] === true ? { dropQuantile: FALLBACK_DROP_QUANTILE } : {}) }, p['refine'] === true ? new RefinedPredictor(predictor, { guard: p['guard'] !== false, ...(options.logger === undefined ? {} : { logger: options.logger }) }) : undefined);
    case 'fcfs':
    case 'sjf':
    case 'edf':
    case 'fcfs-batch':
    case 'edf-batch':
      return new OneAtATimeController(policy as OneAtATimePolicy, predictor, { drop });
    case 'clockwork':
      return new ClockworkController(predictor, { window: Number(p['window']), percentile: Number(p['percentile']), maxExecMs: Number(p['maxExecMs']) });
  }
}
