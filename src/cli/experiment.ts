/**
 * `abacus bench` and `abacus simulate`: co-located services under open-loop load,
 * one run per policy, on the configured device.
 *
 * - `bench` runs on any device in real time (WallClock): `ort` executes the models on this
 *   machine's CPU; a `sim:` device is simulated in real time.
 * - `simulate` runs on a `sim:` device with the virtual clock (a discrete-event simulation:
 *   hours of traffic in seconds). Both take `--find-peak`: the highest rate whose violation
 *   ratio stays ≤ 1 % (peak goodput at QoS, the paper's §7.3 metric).
 *
 * Services come from `--config FILE` (`runtime/config.ts`) or from flags (`--device`,
 * `--models`, `--qos-ms`, …). Without a predictor file (`--predictor` or the config's), the
 * device is profiled and an MLP trained first, cached under `.cache/predictors/` by device,
 * models, batch sizes and sequence lengths, so a second run starts at once
 * (`ensurePredictor`, `deployment/services.ts`: the assembly layer this command parses flags for).
 *
 * The load is open-loop at `--rate` queries/s on average; `--arrivals` (or the config's
 * `arrivals`) shapes it over time: poisson (default), constant, bursty or a replayed per-minute
 * trace (`workload/arrival-spec.ts`).
 *
 * `bench --target http://HOST:PORT | grpc://HOST:PORT` instead drives a running server
 * (`abacus serve`) open-loop through an inference client (`serve/client/bench.ts`) and prints the
 * same table and `--json` (policy `server`; group size and predictor error are the server's).
 */
import os from 'node:os';
import { InvalidArgumentError, type Command } from 'commander';
import { formatThreadRule, parseThreadRule, type ThreadRule } from '../threads.ts';
import { WallClock } from '../clock/index.ts';
import { InvalidConfigError } from '../errors.ts';
import { resolveModelSpec } from '../model/catalog.ts';
import { ModelRepository } from '../model/repository.ts';
import type { ModelSpec } from '../model/spec.ts';
import { DEFAULT_BATCHING, loadServingConfig, parseServingConfig, type ServingConfig } from '../runtime/config.ts';
import { findPeakRate, runExperiment, type ExperimentResult } from '../runtime/experiment.ts';
import { isPolicyName, parseControllerParams, POLICY_NAMES, POLICY_VARIANTS, policyNeedsPredictor } from '../schedule/index.ts';
import { policyHelpText } from './policies.ts';
import { formatTable } from './format.ts';
import type { CliContext } from './context.ts';
import { positiveInt } from './models.ts';
import { sampleLoad } from '../deployment/load-conditions.ts';
import { withDeviceDefaults } from '../deployment/policy-defaults.ts';
import { openBenchVariants } from '../deployment/bench-variants.ts';
import { ensurePredictor, profileThreadRules, resolveServices, runThreadRules, warnThreadMismatch } from '../deployment/services.ts';
import { UsageError } from './usage.ts';
import { RecordFeed } from '../runtime/feed.ts';
import { DashboardHub } from '../serve/dashboard/hub.ts';
import type { DashboardService } from '../serve/dashboard/protocol.ts';
import { DashboardReplay } from '../serve/dashboard/replay.ts';
import { startDashboardServer } from '../serve/dashboard/server.ts';
import { setTimeout as sleep } from 'node:timers/promises';
import { AbacusError } from '../errors.ts';
import { createInferenceClient, InferenceClientError, type InferenceClient } from '../serve/client/index.ts';
import { readAuthToken, readCaFile } from '../serve/security.ts';
import { runRemoteBench, type RemoteBenchResult, type RemoteBenchService } from '../serve/client/bench.ts';
import { ARRIVALS_SYNTAX, formatArrivalSpec, loadArrivals, parseArrivalSpec, type ArrivalSpec, type ArrivalsFactory } from '../workload/arrival-spec.ts';
import { runJson, type ExperimentJson, type RunJson } from './run-json.ts';

export { runJson, type ExperimentJson, type RunJson, type RunSummary } from './run-json.ts';


/** Flags of `bench` / `simulate`. */
export interface ExperimentCliOptions {
  config?: string;
  device?: string;
  models?: string[];
  qosMs?: number[];
  batchSizes?: number[];
  /** Every request carries this many samples (`--batch-sizes N` by another name; BERT then defaults to seq 32). */
  requestBatch?: number;
  seqLens?: number[];
  /** Turn dynamic batching on for every service (with --models); implied by the two flags after it. */
  dynamicBatching?: boolean;
  maxBatchSize?: number;
  maxQueueDelayMs?: number;
  predictor?: string;
  allowUnseen?: boolean;
  /** Absent: the config's policy (with --config), else abacus,fcfs,sjf,edf. */
  policy?: string[];
  rate: number;
  /** How arrivals are spread over time (`--arrivals`); absent: the config's, else Poisson. */
  arrivals?: ArrivalSpec;
  queries: number;
  seed: number;
  ways?: number;
  slackMs?: number;
  /** abacus: online refinement of the predictor (policy parameter `refine`). */
  refine?: boolean;
  drop: boolean;
  findPeak?: boolean;
  /** After the runs, replay the first run on the dashboard (`--dashboard`), at `dashboardSpeed` × its pace, on `dashboardPort`. */
  dashboard?: boolean;
  dashboardSpeed?: number;
  dashboardPort?: number;
  dashboardHost?: string;
  profileSamples?: number;
  threads?: number;
  /**
   * Intra-op threads per segment, decided per group (`--thread-rule`; docs/threads.md): the
   * `threads` parameter of every policy that has one (abacus, fcfs/sjf/edf and -batch, clockwork).
   */
  threadRule?: ThreadRule;
  json?: boolean;
  /** bench only: drive a running server at this URL (http://HOST:PORT or grpc://HOST:PORT) instead of serving in-process. */
  target?: string;
  /** With `target`: send each service's QoS target as the request's `qos_ms`. */
  sendQos?: boolean;
  /** With `target`: per-request timeout, ms. */
  timeoutMs?: number;
  /** With `target`: a file holding the server's bearer token (`abacus serve --auth-token-file`). */
  authTokenFile?: string;
  /** With `target`: CA certificates (PEM) a `grpcs://` server's certificate must chain to. */
  tlsCa?: string;
  /** bench on a real device: also run every one-at-a-time policy with every core (`--no-all-cores`: false) [true]. */
  allCores?: boolean;
}

/** A comma-separated list of integers ≥ 1 (`integer`) or of numbers > 0. */
function numberList(flag: string, integer: boolean): (value: string) => number[] {
  return (value: string) => {
    const items = value.split(',').map((s) => s.trim());
    const xs = items.map((s) => Number(s));
    if (items.some((s) => s === '') || xs.some((x) => !Number.isFinite(x) || (integer ? !Number.isInteger(x) || x < 1 : x <= 0))) {
      throw new InvalidArgumentError(`${flag} expects a comma-separated list of ${integer ? 'integers ≥ 1' : 'numbers > 0'}, got '${value}'`);
    }
    return xs;
  };
}

function finiteNumber(flag: string): (value: string) => number {
  return (value: string) => {
    const x = Number(value);
    if (value.trim() === '' || !Number.isFinite(x)) throw new InvalidArgumentError(`${flag} expects a number, got '${value}'`);
    return x;
  };
}

function nonNegativeNumber(flag: string): (value: string) => number {
  return (value: string) => {
    const x = Number(value);
    if (value.trim() === '' || !Number.isFinite(x) || x < 0) throw new InvalidArgumentError(`${flag} expects a number ≥ 0, got '${value}'`);
    return x;
  };
}

function positiveNumber(flag: string): (value: string) => number {
  return (value: string) => {
    const x = Number(value);
    if (value.trim() === '' || !Number.isFinite(x) || x <= 0) throw new InvalidArgumentError(`${flag} expects a number > 0, got '${value}'`);
    return x;
  };
}

/** The controller name of a `--policy` entry (a variant's policy, `POLICY_VARIANTS`). */
function basePolicy(entry: string): string {
  return POLICY_VARIANTS[entry]?.policy ?? entry;
}

function parsePolicies(value: string): string[] {
  const names = value.split(',').map((s) => s.trim());
  const valid = [...POLICY_NAMES, ...Object.keys(POLICY_VARIANTS)];
  for (const n of names) if (!isPolicyName(n) && POLICY_VARIANTS[n] === undefined) throw new InvalidArgumentError(`--policy: unknown policy '${n}' (valid: ${valid.join(', ')})`);
  return [...new Set(names)];
}

function addExperimentFlags(cmd: Command, defaults: { device: string; batchSizes: string }): Command {
  return cmd
    .option('--config <file>', 'serving config (YAML or JSON): device, predictor, policy, services')
    .option('--device <id>', `device when no --config: ort (CPU) or sim:<gpu>… (default ${defaults.device})`)
    .option('--models <a,b>', 'models to co-locate when no --config (zoo names, <zoo>-small, imported)', (v: string) => v.split(',').map((s) => s.trim()))
    .option('--qos-ms <ms[,ms]>', 'QoS target(s) with --models: one value or one per model', numberList('--qos-ms', false))
    .option('--batch-sizes <list>', `batch sizes drawn per query with --models (default ${defaults.batchSizes})`, numberList('--batch-sizes', true))
    .option('--request-batch <n>', 'every request carries n samples (as --batch-sizes n; sequence models then default to --seq-lens 32, as the A100 and H200 reference rows)', positiveInt('--request-batch'))
    .option('--seq-lens <list>', 'sequence lengths drawn per query for sequence models (default 16,32,64)', numberList('--seq-lens', true))
    .option('--dynamic-batching', 'with --models: let the policy fuse queued queries of a service into one batch (maxBatchSize 16, Clockwork\'s max_batch); a batching policy needs it')
    .option('--max-batch-size <n>', 'with --models: dynamic batching with at most n samples per fused batch', positiveInt('--max-batch-size'))
    .option('--max-queue-delay-ms <ms>', 'with --models: dynamic batching; how long triton may hold a query to form a larger batch (default 0)', nonNegativeNumber('--max-queue-delay-ms'))
    .option('--predictor <file>', 'predictor.json (abacus train); default: the config\'s, else profile and train one (cached)')
    .option('--allow-unseen', 'let a flop-feature predictor score models it was not trained on')
    .option('--policy <list>', `policies to compare (${POLICY_NAMES.join(', ')}, or ${Object.keys(POLICY_VARIANTS).join(', ')}: abacus with barrier false; default: the config's policy, else abacus,fcfs,sjf,edf)`, parsePolicies)
    .option('--rate <qps>', 'mean offered load over all services, queries/s', positiveNumber('--rate'), 50)
    .option(
      '--arrivals <process>',
      `how arrivals spread over time at the mean --rate: ${ARRIVALS_SYNTAX} (default: the config's arrivals, else poisson). bursty: on/off periods of mean onMs/offMs ms (default 500/1500), off rate = offRatio × on rate (default 0); trace: a CSV minute,offered_load_qps scaled to mean --rate, one minute lasting minuteMs ms (default 60000)`,
      (v: string) => {
        try {
          return parseArrivalSpec(v, '--arrivals');
        } catch (err) {
          throw new InvalidArgumentError((err as Error).message);
        }
      },
    )
    .option('--queries <n>', 'queries per run', positiveInt('--queries'), 1000)
    .option('--seed <n>', 'seed of the load (and of the simulator)', finiteNumber('--seed'), 1)
    .option('--ways <n>', 'abacus: multi-way search width', positiveInt('--ways'))
    .option('--slack-ms <ms>', 'abacus: stop searching when budget − predicted < slack', finiteNumber('--slack-ms'))
    .option('--refine', 'abacus: refine the predictor online from measured group latencies (default: on for ort, with the calibration fallback; off for sim devices, the offline predictor alone)')
    .option('--no-drop', 'do not reject hopeless queries early (every policy with a drop parameter: abacus, fcfs, sjf, edf, fcfs-batch, edf-batch, triton)')
    .option('--profile-samples <n>', 'samples when a predictor has to be trained first', positiveInt('--profile-samples'))
    .option('--threads <n>', 'ort: intra-op threads per executor (the default of segments without a thread rule)', positiveInt('--threads'))
    .option(
      '--thread-rule <rule>',
      'intra-op threads per segment, decided per group, for every policy with a threads parameter: device (default: --threads), fixed:N, split:C (each of k segments max(1, floor(C/k)): a lone query gets all C cores, fcfs then gives every core to the running query), or adapt:C (as split:C, a lone query at the count its recent measured latencies favour)',
      (v: string) => {
        try {
          return parseThreadRule(v, '--thread-rule');
        } catch (err) {
          throw new InvalidArgumentError((err as Error).message);
        }
      },
    )
    .option('--json', 'print {"runs": [...]} as JSON')
    .option('--dashboard', 'after the runs, replay the first one on the live dashboard at http://HOST:PORT/dashboard until Ctrl-C (docs/dashboard.md)')
    .option('--dashboard-speed <x>', 'with --dashboard: replay speed, run-clock ms per wall ms (default 1: the run\'s own pace)', positiveNumber('--dashboard-speed'))
    .option('--dashboard-port <port>', 'with --dashboard: HTTP port (default 8000; 0: any free port, printed)', (v: string) => {
      const x = Number(v);
      if (!/^\s*\d+\s*$/.test(v) || x > 65_535) throw new InvalidArgumentError(`--dashboard-port expects a port in [0, 65535], got '${v}'`);
      return x;
    })
    .option('--dashboard-host <addr>', 'with --dashboard: interface to bind (default 127.0.0.1)')
    .addHelpText('after', policyHelpText());
}

/** The config from `--config` (its deprecation warnings printed to stderr) or from the flags. */
async function servingConfigOf(ctx: CliContext, opts: ExperimentCliOptions, defaultDevice: string): Promise<ServingConfig> {
  if (opts.config !== undefined) {
    if (opts.models !== undefined || opts.device !== undefined || opts.qosMs !== undefined || opts.batchSizes !== undefined || opts.requestBatch !== undefined || opts.seqLens !== undefined || batchingFlagsGiven(opts)) {
      throw new UsageError('--config replaces --device, --models, --qos-ms, --batch-sizes, --request-batch, --seq-lens and the batching flags; give one or the other');
    }
    const config = await loadServingConfig(opts.config);
    for (const w of config.warnings) ctx.err(`warning: ${w}\n`);
    return config;
  }
  if (opts.requestBatch !== undefined && opts.batchSizes !== undefined) throw new UsageError('--request-batch N is --batch-sizes N: give one of them');
  if (opts.models === undefined || opts.models.length === 0) throw new UsageError('give --config FILE, or --models a,b with --qos-ms');
  const qos = opts.qosMs ?? [];
  if (qos.length !== 1 && qos.length !== opts.models.length) throw new UsageError(`--qos-ms needs one value or one per model (${opts.models.length}), got ${qos.length}`);
  const services = opts.models.map((model, i) => ({
    name: opts.models!.indexOf(model) === i ? model : `${model}-${i}`,
    model,
    qosTargetMs: qos.length === 1 ? qos[0]! : qos[i]!,
    batchSizes: opts.requestBatch !== undefined ? [opts.requestBatch] : (opts.batchSizes ?? [1, 2, 4, 8, 16]),
    seqLens: opts.seqLens ?? (opts.requestBatch !== undefined ? [SINGLE_REQUEST_SEQ_LEN] : [16, 32, 64]),
    ...(batchingFlagsGiven(opts) ? { dynamicBatching: { maxBatchSize: opts.maxBatchSize ?? DEFAULT_BATCHING.maxBatchSize, maxQueueDelayMs: opts.maxQueueDelayMs ?? 0 } } : {}),
  }));
  return parseServingConfig({ device: opts.device ?? defaultDevice, services }, 'flags');
}

/**
 * The arrival process of the runs: `--arrivals`, else the config's `arrivals`, else Poisson; a
 * trace file is read now, and (unless `--json`) a line on stderr says how it is scaled, with a
 * warning when it runs out before `--queries`.
 * @throws RangeError naming --arrivals, or InvalidConfigError naming the config's arrivals, for a
 *   trace that cannot be read or is malformed.
 */
async function arrivalsOf(ctx: CliContext, opts: ExperimentCliOptions, config: ServingConfig): Promise<ArrivalsFactory> {
  const fromFlag = opts.arrivals !== undefined;
  const spec: ArrivalSpec = opts.arrivals ?? config.arrivals ?? { kind: 'poisson' };
  const field = fromFlag ? '--arrivals' : `${config.source}: arrivals`;
  let factory: ArrivalsFactory;
  try {
    factory = await loadArrivals(spec, field);
  } catch (err) {
    if (!fromFlag && err instanceof RangeError) throw new InvalidConfigError(err.message, { cause: err });
    throw err;
  }
  if (factory.trace !== undefined && spec.kind === 'trace' && opts.json !== true) {
    const { minutes, meanQps } = factory.trace;
    ctx.err(`arrivals: trace ${spec.file}: ${minutes} minutes, mean ${fmt(meanQps, 2)} queries/s, scaled ×${(opts.rate / meanQps).toPrecision(3)} to a mean of ${opts.rate} queries/s; one trace minute lasts ${spec.minuteMs} ms\n`);
    const offered = (opts.rate * minutes * spec.minuteMs) / 1000;
    if (opts.findPeak !== true && opts.queries > offered) {
      ctx.err(`warning: the trace offers about ${Math.round(offered)} queries at ${opts.rate} queries/s (${minutes} minutes of ${spec.minuteMs} ms): each run ends with the trace, before --queries ${opts.queries} (raise --rate or minuteMs for more)\n`);
    }
  }
  return factory;
}

/** Policies that exist for dynamic batching: without `batching` on any service they run every query alone. */
const BATCHING_ONLY_POLICIES: readonly string[] = ['fcfs-batch', 'edf-batch', 'triton'];

/** Sequence length of `--request-batch` loads unless `--seq-lens` says otherwise: the A100 reference surface's and the H200 measurements' BERT rows. */
const SINGLE_REQUEST_SEQ_LEN = 32;

function batchingFlagsGiven(opts: ExperimentCliOptions): boolean {
  return opts.dynamicBatching === true || opts.maxBatchSize !== undefined || opts.maxQueueDelayMs !== undefined;
}

/** Parameters of `entry` (a policy, or a variant: `POLICY_VARIANTS`) from the config (when it names that policy), the variant and the flags. */
function policyParams(entry: string, config: ServingConfig, opts: ExperimentCliOptions): Record<string, unknown> {
  const policy = basePolicy(entry);
  const params: Record<string, unknown> = { ...(config.policy.name === policy ? config.policy.params : {}), ...POLICY_VARIANTS[entry]?.params };
  if (policy === 'abacus') {
    if (opts.ways !== undefined) params['ways'] = opts.ways;
    if (opts.slackMs !== undefined) params['slackMs'] = opts.slackMs;
    if (opts.refine === true) params['refine'] = true;
  }
  if (opts.threadRule !== undefined && 'threads' in parseControllerParams(policy)) params['threads'] = formatThreadRule(opts.threadRule);
  if (!opts.drop && 'drop' in parseControllerParams(policy)) params['drop'] = false;
  return withDeviceDefaults(policy, params, config.device.startsWith('sim'));
}

const fmt = (x: number, digits = 1): string => (Number.isFinite(x) ? x.toFixed(digits) : '–');
/** Run the comparison (used by both commands and by tests). */
export async function runExperimentCommand(ctx: CliContext, opts: ExperimentCliOptions, mode: { virtual: boolean; defaultDevice: string }): Promise<ExperimentJson> {
  if (opts.target !== undefined) return runRemoteBenchCommand(ctx, opts);
  if (opts.sendQos === true || opts.timeoutMs !== undefined || opts.authTokenFile !== undefined || opts.tlsCa !== undefined) throw new UsageError('--send-qos, --timeout-ms, --auth-token-file and --tls-ca go with --target');
  if (opts.dashboard === true && opts.findPeak === true) throw new UsageError('--dashboard replays one run: it does not go with --find-peak');
  const config = await servingConfigOf(ctx, opts, mode.defaultDevice);
  if (mode.virtual && !config.device.startsWith('sim')) throw new InvalidConfigError(`abacus simulate needs a simulated device (sim:a100, …), got '${config.device}'; use abacus bench for real devices`);
  const repo = new ModelRepository(ctx.cacheOptions());
  if (opts.config !== undefined && !isPolicyName(config.policy.name)) throw new InvalidConfigError(`${config.source}: policy: unknown policy '${config.policy.name}' (valid: ${POLICY_NAMES.join(', ')})`);
  const policies = opts.policy ?? (opts.config !== undefined ? [config.policy.name] : ['abacus', 'fcfs', 'sjf', 'edf']);
  // Every policy's parameters are checked before anything runs (a bad one must not cost a run first).
  for (const policy of policies) {
    try {
      parseControllerParams(basePolicy(policy), policyParams(policy, config, opts));
    } catch (err) {
      if (config.policy.name === policy && opts.config !== undefined && (err instanceof RangeError || err instanceof TypeError)) throw new InvalidConfigError(`${config.source}: policy: ${err.message}`, { cause: err });
      throw err;
    }
  }
  const arrivals = await arrivalsOf(ctx, opts, config);
  const shape = arrivals.spec.kind === 'poisson' ? '' : ` (${formatArrivalSpec(arrivals.spec)})`;
  const hosted = await resolveServices(ctx, repo, config);
  const batchers = policies.filter((p) => BATCHING_ONLY_POLICIES.includes(p));
  if (batchers.length > 0 && hosted.services.every((s) => s.batching === undefined)) {
    ctx.err(`warning: ${batchers.join(', ')} fuse${batchers.length === 1 ? 's' : ''} queries only for services with dynamic batching, and none has it here: every query runs alone (add --dynamic-batching, or dynamicBatching in the config)\n`);
  }
  const needsPredictor = policies.some((p) => policyNeedsPredictor(basePolicy(p)));
  const file = opts.predictor ?? config.predictor;
  // One load reading before any profiling, for every predictor looked up below (`PredictorRequest.loadBefore`).
  const loadBefore = sampleLoad();
  const runParams = policies.map((policy) => ({ policy: basePolicy(policy), params: policyParams(policy, config, opts) }));
  const threadRules = runThreadRules(runParams);
  const cores = os.availableParallelism();
  const { predictor, source } = needsPredictor
    ? await ensurePredictor(ctx, repo, hosted, {
        ...(file === undefined ? {} : { file, fromConfig: opts.predictor === undefined }),
        ...(opts.allowUnseen ? { allowUnseen: true } : {}),
        ...(opts.profileSamples === undefined ? {} : { samples: opts.profileSamples }),
        ...(opts.threads === undefined ? {} : { threads: opts.threads }),
        threadRules: profileThreadRules(threadRules, cores),
        quiet: opts.json === true,
        loadBefore,
      })
    : { predictor: undefined, source: 'none' };
  const ruleOf = (policy: string): unknown => parseControllerParams(basePolicy(policy), policyParams(policy, config, opts))['threads'];
  const anyDeviceRule = runParams.some((r) => policyNeedsPredictor(r.policy) && ruleOf(r.policy) === 'device');
  warnThreadMismatch(ctx, predictor, source, threadRules, anyDeviceRule);
  // The strong one-at-a-time baseline on a real CPU: the same policy with every core given to the lone query (on a device
  // opened with that many threads); its drop rule predicts its own solo latencies with a solo-only predictor profiled with
  // every core. Not for a policy with a thread rule of its own (`--thread-rule split:C` already gives the lone query C threads).
  const { variants, close } = await openBenchVariants(ctx, repo, hosted, {
    policies,
    threadParamOf: ruleOf,
    predictor,
    predictorFile: file,
    threadRules,
    threads: opts.threads,
    allCores: opts.allCores !== false,
    profileSamples: opts.profileSamples,
    quiet: opts.json === true,
    loadBefore,
    seed: opts.seed,
    virtual: mode.virtual,
  });
  const runs: RunJson[] = [];
  let replayed: { readonly policy: string; readonly records: NonNullable<ExperimentResult['records']> } | undefined;
  try {
    for (const { policy, env: runEnv, label: runLabel, threads: runThreads } of variants) {
      const name = runLabel ?? policy;
      const base = { services: hosted.services, policy: basePolicy(policy), policyParams: policyParams(policy, config, opts), queries: opts.queries, seed: opts.seed, arrivals: arrivals.create, ...(opts.dashboard === true && replayed === undefined ? { keepRecords: true } : {}) };
      const rule = parseControllerParams(base.policy, base.policyParams)['threads'];
      const ruleTag = typeof rule === 'string' && rule !== 'device' ? { threads: rule } : {};
      const tag = (run: RunJson): RunJson => (hosted.isSim ? { ...run, ...ruleTag, ...(runLabel === undefined ? {} : { label: runLabel }) } : { ...run, ...(runLabel === undefined ? {} : { label: runLabel }), threadsPerExecutor: runThreads, ...ruleTag });
      if (!opts.json) ctx.err(`${name}: ${opts.findPeak ? 'searching the peak rate at ≤ 1 % violations' : `${opts.queries} queries at ${opts.rate} queries/s${shape}`} …\n`);
      if (opts.findPeak) {
        const peak = await findPeakRate(runEnv, { ...base, startQps: opts.rate });
        if (!peak.bracketed) {
          ctx.err(`warning: ${name}: no ${peak.peakRateQps > 0 ? 'rate above' : 'rate at or below'} ${peak.tried.at(-1)?.rateQps.toPrecision(4)} queries/s ${peak.peakRateQps > 0 ? 'missed' : 'met'} the 1 % bound within the search's steps: the peak is a bound; start elsewhere with --rate\n`);
        }
        const at = peak.atPeak ?? (await runExperiment(runEnv, { ...base, rateQps: opts.rate }));
        runs.push(tag(runJson(at, { peakGoodputQps: peak.peakGoodputQps, peakRateQps: peak.peakRateQps })));
      } else {
        const result = await runExperiment(runEnv, { ...base, rateQps: opts.rate });
        if (opts.dashboard === true && replayed === undefined && result.records !== undefined) replayed = { policy: name, records: result.records };
        runs.push(tag(runJson(result)));
      }
      const last = runs.at(-1)!;
      const failed = Object.entries(last.rejectedBy).filter(([reason]) => reason !== 'qos_violation' && reason !== 'overloaded');
      if (failed.length > 0) ctx.err(`warning: ${name}: ${failed.map(([reason, n]) => `${n} queries rejected as ${reason}`).join(', ')} — not QoS misses: check the models, batch sizes and sequence lengths\n`);
    }
  } finally {
    await close();
  }
  const json: ExperimentJson = { device: config.device, predictor: source, queries: opts.queries, arrivals: formatArrivalSpec(arrivals.spec), runs };
  if (opts.json) ctx.out(JSON.stringify(json, null, 2) + '\n');
  else printRuns(ctx, `${config.device}, ${hosted.services.map((s) => `${s.name} (QoS ${s.qosTargetMs} ms)`).join(' + ')}, ${opts.queries} queries per run${shape}, predictor ${source}`, hosted.services.map((s) => s.name), runs, opts.findPeak === true);
  if (replayed !== undefined) {
    await serveReplay(ctx, { services: hosted.services.map((s) => ({ name: s.name, qosTargetMs: s.qosTargetMs })), ...replayed, command: mode.virtual ? 'simulate' : 'bench', speed: opts.dashboardSpeed ?? 1, host: opts.dashboardHost ?? '127.0.0.1', port: opts.dashboardPort ?? 8000, toStderr: opts.json === true });
  }
  return json;
}

/**
 * `--dashboard`: serve the replay of one run's records at `/dashboard` (`serve/dashboard/replay.ts`),
 * starting when the first page connects, until SIGINT / SIGTERM.
 */
async function serveReplay(
  ctx: CliContext,
  r: { services: DashboardService[]; policy: string; records: NonNullable<ExperimentResult['records']>; command: string; speed: number; host: string; port: number; toStderr: boolean },
): Promise<void> {
  const replay = new DashboardReplay(r.services, r.records, r.speed);
  const hub = new DashboardHub({ feed: new RecordFeed(), source: replay, mode: 'replay', speed: r.speed, onPage: () => replay.start(hub) });
  const server = await startDashboardServer(hub, { host: r.host, port: r.port });
  const say = (line: string): void => (r.toStderr ? ctx.err(line) : ctx.out(line));
  say(`abacus ${r.command}: dashboard at ${server.url}/dashboard — replays the ${r.policy} run (${r.records.groups.length} groups, ${(replay.spanMs / 1000).toFixed(1)} s of its clock) at ${r.speed}× once the page opens; Ctrl-C to stop\n`);
  const signal = await new Promise<string>((resolve) => {
    process.once('SIGINT', () => resolve('SIGINT'));
    process.once('SIGTERM', () => resolve('SIGTERM'));
  });
  replay.stop();
  hub.close(`abacus ${r.command} stopped (${signal})`);
  await server.close();
  say(`abacus ${r.command}: dashboard stopped\n`);
}

/** The results table of `bench` / `simulate` (stdout). */
function printRuns(ctx: CliContext, title: string, serviceNames: readonly string[], runs: readonly RunJson[], findPeak: boolean): void {
  ctx.out(`${title}\n\n`);
  const header = ['policy', 'rate q/s', ...(findPeak ? ['peak goodput q/s'] : []), 'violations %', 'late / rejected', 'goodput q/s', 'p99 ms (completed)', 'group size', 'batch', 'pred. MAPE %', ...serviceNames.map((s) => `${s} p99 / viol. %`)];
  const rows = runs.map((r) => [
    `${r.label ?? r.policy}${r.threads === undefined ? '' : ` ${r.threads}`}`,
    fmt(r.rateQps),
    ...(findPeak ? [fmt(r.peakGoodputQps ?? 0)] : []),
    fmt(r.violationRatio * 100, 2),
    `${r.late} / ${Object.values(r.rejectedBy).reduce((a, b) => a + b, 0)}`,
    fmt(r.goodputQps),
    fmt(r.p99Ms, 2),
    fmt(r.meanGroupSize, 2),
    r.meanBatch === null ? '–' : fmt(r.meanBatch, 2),
    r.predictorMape === null ? '–' : fmt(r.predictorMape * 100),
    ...r.services.map((s) => `${fmt(s.p99Ms, 2)} / ${fmt(s.violationRatio * 100, 2)}`),
  ]);
  ctx.out(formatTable(header, rows) + '\n');
}

/** Flags that configure the in-process runtime and mean nothing against a running server (its config decides). */
const IN_PROCESS_ONLY_FLAGS: readonly [keyof ExperimentCliOptions, string][] = [
  ['policy', '--policy'],
  ['device', '--device'],
  ['predictor', '--predictor'],
  ['allowUnseen', '--allow-unseen'],
  ['ways', '--ways'],
  ['slackMs', '--slack-ms'],
  ['refine', '--refine'],
  ['findPeak', '--find-peak'],
  ['profileSamples', '--profile-samples'],
  ['threads', '--threads'],
  ['threadRule', '--thread-rule'],
  ['dashboard', '--dashboard (the server serves its own at /dashboard)'],
];

/** How long `bench --target` waits for the server to report ready, ms. */
const READY_WAIT_MS = 10_000;

/** Default per-request timeout of `bench --target`, ms. */
const DEFAULT_REMOTE_TIMEOUT_MS = 60_000;

/** One remote run as `--json` prints it: the in-process shape; group size and MAPE are the server's business (NaN → null / –). */
function remoteRunJson(r: RemoteBenchResult): RunJson {
  return {
    policy: 'server',
    rateQps: r.rateQps,
    violationRatio: r.overall.violationRatio,
    goodputQps: r.overall.goodputQps,
    throughputQps: r.overall.throughputQps,
    p99Ms: r.overall.p99Ms,
    meanGroupSize: Number.NaN,
    meanBatch: null,
    predictorMape: null,
    offered: r.overall.offered,
    late: r.overall.late,
    rejectedBy: r.overall.rejectedBy,
    services: r.services.map((s) => ({ service: s.service, p50Ms: s.p50Ms, p99Ms: s.p99Ms, violationRatio: s.violationRatio, goodputQps: s.goodputQps })),
  };
}

/**
 * `abacus bench --target URL`: open-loop load against a running server (`serve/client/bench.ts`).
 * The services of `--config` / `--models` give only names (= the server's model names), batch
 * sizes, sequence lengths and the QoS targets the statistics use; the server's own config
 * decides policy, device and predictor, so flags for those are usage errors.
 * @throws UsageError for in-process flags or a bad URL; AbacusError when the server is not
 *   ready within 10 s or does not serve a service.
 */
async function runRemoteBenchCommand(ctx: CliContext, opts: ExperimentCliOptions): Promise<ExperimentJson> {
  const target = opts.target!;
  const given = IN_PROCESS_ONLY_FLAGS.filter(([key]) => opts[key] !== undefined).map(([, flag]) => flag);
  if (!opts.drop) given.push('--no-drop');
  if (given.length > 0) throw new UsageError(`${given.join(', ')} cannot be used with --target: the server's config decides policy, device and predictor`);
  let client: InferenceClient;
  try {
    client = createInferenceClient(target, {
      timeoutMs: opts.timeoutMs ?? DEFAULT_REMOTE_TIMEOUT_MS,
      ...(opts.authTokenFile === undefined ? {} : { authToken: readAuthToken(opts.authTokenFile) }),
      ...(opts.tlsCa === undefined ? {} : { tlsCa: readCaFile(opts.tlsCa) }),
    });
  } catch (err) {
    throw new UsageError(`--target: ${(err as Error).message}`);
  }
  try {
    const config = await servingConfigOf(ctx, opts, 'ort');
    const repo = new ModelRepository(ctx.cacheOptions());
    const services: RemoteBenchService[] = [];
    for (const [i, s] of config.services.entries()) {
      let spec: ModelSpec;
      try {
        spec = await resolveModelSpec(repo, s.model);
      } catch (err) {
        if (err instanceof RangeError || err instanceof TypeError) throw new InvalidConfigError(`${config.source}: services[${i}].model: ${err.message}`, { cause: err });
        throw err;
      }
      services.push({
        name: s.name,
        spec,
        qosTargetMs: s.qosTargetMs,
        batchSizes: s.batchSizes,
        ...(spec.dynamicAxes.seq === undefined ? {} : { seqLens: s.seqLens ?? [spec.defaultSeqLen] }),
      });
    }
    const deadline = Date.now() + READY_WAIT_MS;
    while (!(await client.ready())) {
      if (Date.now() >= deadline) throw new AbacusError('device_unavailable', `the server at ${target} is not reachable or not ready (waited ${READY_WAIT_MS / 1000} s)`);
      await sleep(200);
    }
    for (const s of services) {
      try {
        await client.modelMetadata(s.name);
      } catch (err) {
        const reason = err instanceof InferenceClientError && err.code === 'model_not_found' ? 'does not serve it' : `cannot describe it: ${(err as Error).message}`;
        throw new AbacusError('model_not_found', `service ${s.name}: the server at ${target} ${reason}`, { cause: err });
      }
    }
    const arrivals = await arrivalsOf(ctx, opts, config);
    const shape = arrivals.spec.kind === 'poisson' ? '' : ` (${formatArrivalSpec(arrivals.spec)})`;
    if (!opts.json) ctx.err(`${target}: ${opts.queries} queries at ${opts.rate} queries/s${shape} …\n`);
    const result = await runRemoteBench({ client, clock: new WallClock(), services, rateQps: opts.rate, queries: opts.queries, seed: opts.seed, arrivals: arrivals.create, ...(opts.sendQos === true ? { sendQos: true } : {}) });
    const run = remoteRunJson(result);
    const failed = Object.entries(run.rejectedBy).filter(([reason]) => reason !== 'qos_violation' && reason !== 'overloaded');
    if (failed.length > 0) {
      const samples = failed.map(([reason]) => result.failureSamples[reason]?.[0]).filter((m) => m !== undefined);
      ctx.err(`warning: ${failed.map(([reason, n]) => `${n} queries failed as ${reason}`).join(', ')} — not QoS misses${samples.length > 0 ? ` (e.g. ${samples.join('; ')})` : ''}\n`);
    }
    const lateness = result.generator.latenessMs;
    const generator = { sendLatenessMs: { mean: lateness.mean, p99: lateness.p99, max: lateness.max }, offeredQps: result.generator.offeredQps };
    const json: ExperimentJson = { device: target, predictor: 'server', queries: opts.queries, arrivals: formatArrivalSpec(arrivals.spec), runs: [run], generator };
    if (opts.json) ctx.out(JSON.stringify(json, null, 2) + '\n');
    else {
      const server = Number.isFinite(result.server.queueMs) ? `; server means: queue ${fmt(result.server.queueMs, 2)} ms, compute ${fmt(result.server.computeMs, 2)} ms, ${fmt(result.server.operatorGroups, 1)} groups per query` : '';
      printRuns(ctx, `${target}, ${services.map((s) => `${s.name} (QoS ${s.qosTargetMs} ms)`).join(' + ')}, ${opts.queries} queries${shape}, latency measured at the client${server}`, services.map((s) => s.name), [run], false);
      ctx.out(`generator send lateness: mean ${fmt(lateness.mean, 2)} ms, p99 ${fmt(lateness.p99, 2)} ms, max ${fmt(lateness.max, 2)} ms behind the intended send times (offered ${fmt(generator.offeredQps, 1)} queries/s)\n`);
    }
    return json;
  } finally {
    await client.close();
  }
}

export function registerExperimentCommands(program: Command, simulate: Command, ctx: CliContext): void {
  addExperimentFlags(program.command('bench').description('serve co-located models under open-loop load (Poisson, constant, bursty or a trace) in real time and compare policies (p99, violations, goodput)'), { device: 'ort', batchSizes: '1,2,4,8,16' })
    .option('--find-peak', 'per policy, search the highest rate with ≤ 1 % violations (each step is a real-time run of --queries queries: minutes)')
    .option('--target <url>', 'drive a running server (http[s]://HOST:PORT or grpc[s]://HOST:PORT) instead of serving in-process; --config/--models give service names, batch sizes, seq lens and QoS targets')
    .option('--send-qos', 'with --target: send each service\'s QoS target as the request parameter qos_ms')
    .option('--timeout-ms <ms>', `with --target: per-request timeout (default ${DEFAULT_REMOTE_TIMEOUT_MS})`, positiveNumber('--timeout-ms'))
    .option('--auth-token-file <file>', 'with --target: send the bearer token in this file (a server started with --auth-token-file)')
    .option('--tls-ca <file>', 'with --target grpcs://…: CA certificates (PEM) the server\'s certificate must chain to (https://: set NODE_EXTRA_CA_CERTS)')
    .option('--no-all-cores', 'ort: do not also run fcfs, sjf and edf with every core (the strong one-at-a-time baseline; by default they run twice: with --threads and with os.availableParallelism() intra-op threads)')
    .action(async (opts: ExperimentCliOptions) => {
      await runExperimentCommand(ctx, opts, { virtual: false, defaultDevice: 'ort' });
    });
  addExperimentFlags(simulate, { device: 'sim:a100', batchSizes: '1,2,4,8,16' })
    .option('--find-peak', 'per policy, search the highest rate with ≤ 1 % violations (doubling, then bisection)')
    .action(async (opts: ExperimentCliOptions) => {
      await runExperimentCommand(ctx, opts, { virtual: true, defaultDevice: 'sim:a100' });
    });
}

