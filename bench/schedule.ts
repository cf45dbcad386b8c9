/**
 * Scheduling decision latency (docs/benchmarks.md): wall time of one `QueryController.decide`
 * for 4 co-located services (ResNet-50, Inception-v3, VGG-16, BERT seq 32), abacus with
 * ways 4 (slack 5 ms, drop on), against fcfs on the same inputs as the baseline. Goal for
 * abacus: median ≤ 10 µs, p99 ≤ 50 µs (paper: ~90 µs per predictor call on its GPU runtime).
 *
 * Two predictors:
 * - `cost-table`: a cheap formula (per-operator ms per model × operators × batch; group =
 *   longest slot + half of the others), so the time is the controller's own;
 * - `mlp`: the real serving-time `MlpPredictor` (`predict/mlp`) with the paper's network
 *   (`DEFAULT_MLP_OPTIONS.hidden`, 3 × 32 ReLU) over the `full` features of the 4 zoo specs,
 *   with seeded random (glorot-uniform) weights — a forward pass costs the same whatever the
 *   weights, and no profile or training is needed. Untrained, its surface is nearly flat (every
 *   group ≈ 10 ms), which would never send abacus into its search; so each call runs the MLP
 *   on the groups (its full cost, allocation included) and returns the cost table's values:
 *   the same decisions and groups scored as the `cost-table` row, at the real predictor's price.
 *
 * Inputs are made so that the search runs (`searchScenarios` of `src/reproduce/search.ts`, the
 * same as the §7.7 search experiment's): per scenario the 4 heads get random batches (1, 2, 4,
 * 8), a third of them partly executed, and q0's budget is drawn between the predicted latency
 * of q0 alone and of the largest prefix (computed with the same predictor, outside the timing),
 * the others have ample headroom (none dropped). Each decision is timed alone with
 * `process.hrtime.bigint()`; the timer's own cost is reported (`timerOverheadUs`).
 *
 * Two memo states (`heads.ts` `SoloMemo`: a controller remembers the remaining-solo prediction
 * of each slot it scored): `warm` — one controller takes all decisions over 1024 cycled
 * scenarios, so step 1's drop check is answered from the memo (in serving, a head waits through
 * several decisions and most queries start at operator 0 with a few batch sizes, so the memo
 * hits often, but not always); `cold` — a fresh controller per decision, every solo predicted.
 * Serving sits between the two.
 *
 * Dynamic batching (docs/batching.md; goal for abacus with batching: median ≤ 20 µs): the same 4
 * services, each batching (maxBatchSize 16, one fuseKey per service) with a queue of 10..40
 * single-sample queries (`batchingScenarios`): the head has waited between 0 and 90% of its QoS
 * target (4× its batch-1 latency), the others arrived evenly since, 10% of all queries have
 * half the target; a quarter of the heads are a fused batch in progress (batch 2..16, no
 * batching). The cost table is sublinear in the batch there (batch b costs 1 + (b − 1)/8 times
 * batch 1: batch 16 ≈ 2.9×, within the one to three times batch 1 of docs/batching.md), so batches of every size fit some
 * budget. Rows: fcfs, abacus on the same queues with `batching` stripped (today's decisions:
 * heads only), abacus with batching, and abacus without the group barrier on the same queues
 * with one or two services' segments in flight (`streamScenarios`); `samplesPerSegment` shows
 * the batches it forms.
 */
import { ModelRepository } from '../src/model/repository.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import { FeatureEncoder } from '../src/predict/features.ts';
import { fitScaling } from '../src/predict/encoded.ts';
import { MlpPredictor, type DenseLayer } from '../src/predict/mlp/mlp-predictor.ts';
import { DEFAULT_MLP_OPTIONS } from '../src/predict/mlp/train-mlp.ts';
import type { Group, GroupSlot, Predictor } from '../src/predict/predictor.ts';
import { searchScenarios, type SearchService } from '../src/reproduce/search.ts';
import { RefinedPredictor } from '../src/predict/refine.ts';
import { AbacusController, createController } from '../src/schedule/index.ts';
import type { BatchingLimits, ExecutedSegment, GroupObservation, QueryController, RunningSegment, ScheduleInput, WaitingQuery } from '../src/schedule/controller.ts';
import { Rng } from '../src/rng.ts';

export interface ScheduleBenchRow {
  readonly predictor: string;
  readonly policy: string;
  readonly decisions: number;
  readonly medianUs: number;
  readonly p99Us: number;
  readonly meanUs: number;
  /** Per decision, averaged. */
  readonly predictorCalls: number;
  readonly groupsScored: number;
  readonly searchRounds: number;
  /** Heads answered from the controller's solo memo instead of the predictor, per decision. */
  readonly soloMemoHits: number;
  /** `warm`: one controller for every decision (its memo of solo predictions fills up, as in serving); `cold`: a fresh controller per decision (no memo hits). */
  readonly memo: 'warm' | 'cold';
  /** Median ÷ fcfs median with the same predictor and memo state (the `abacus ways 4 refine` rows: online refinement on, after 20 observations of every solo and pair shape measured as predicted). */
  readonly ratioToFcfs: number;
  /** Mean samples per launched segment (a fused segment counts the samples of all its members). */
  readonly samplesPerSegment: number;
}

export interface ScheduleBenchResult {
  readonly services: readonly string[];
  readonly ways: number;
  readonly slackMs: number;
  /** Median cost of the timer pair around each decision, µs (included in the figures). */
  readonly timerOverheadUs: number;
  readonly rows: readonly ScheduleBenchRow[];
  /** The dynamic-batching scenario (see the file comment); policy `abacus ways 4 (batching off)` decides on the same queues without `batching`. */
  readonly batching: { readonly maxBatchSize: number; readonly rows: readonly ScheduleBenchRow[] };
}

const SERVICES: readonly { readonly model: 'resnet50' | 'inception_v3' | 'vgg16' | 'bert'; readonly seqLen: number }[] = [
  { model: 'resnet50', seqLen: 0 },
  { model: 'inception_v3', seqLen: 0 },
  { model: 'vgg16', seqLen: 0 },
  { model: 'bert', seqLen: 32 },
];
const BATCHES = [1, 2, 4, 8] as const;
const WAYS = 4;
const SLACK_MS = 5;

/**
 * The cheap predictor: ms per operator at batch 1 per model, × (1 + batchSlope × (batch − 1))
 * (batchSlope 1, the default: × batch); group = max + 0.5 × (Σ − max). Allocation-free with `out`.
 */
export class CostTablePredictor implements Predictor {
  readonly kind = 'cost-table';
  readonly deviceId = 'bench:cost-table';
  readonly models: readonly string[];
  readonly maxSlots = 4;
  readonly #msPerOp: ReadonlyMap<string, number>;
  readonly #batchSlope: number;

  constructor(msPerOp: Readonly<Record<string, number>>, opts: { batchSlope?: number } = {}) {
    this.#msPerOp = new Map(Object.entries(msPerOp));
    this.models = Object.keys(msPerOp).sort();
    this.#batchSlope = opts.batchSlope ?? 1;
  }

  predict(groups: readonly Group[], out?: Float64Array): Float64Array {
    const res = out ?? new Float64Array(groups.length);
    for (let g = 0; g < groups.length; g++) {
      const group = groups[g]!;
      let sum = 0;
      let max = 0;
      for (const s of group) {
        const per = this.#msPerOp.get(s.model);
        if (per === undefined) throw new RangeError(`group ${g}: unknown model '${s.model}'`);
        const c = per * (s.end - s.start) * (1 + this.#batchSlope * (s.batch - 1));
        sum += c;
        if (c > max) max = c;
      }
      res[g] = max + 0.5 * (sum - max);
    }
    return res;
  }
}

/** Pays `mlp`'s inference on every call, answers with `table`'s latencies (see the file comment). */
class MlpPricedPredictor implements Predictor {
  readonly kind = 'mlp';
  readonly deviceId = 'bench:mlp-priced';
  readonly models: readonly string[];
  readonly maxSlots: number;
  /** Sum of the MLP outputs, so the forward passes cannot be optimized away. */
  sink = 0;

  constructor(
    readonly mlp: Predictor,
    readonly table: Predictor,
  ) {
    this.models = table.models;
    this.maxSlots = Math.min(mlp.maxSlots, table.maxSlots);
  }

  predict(groups: readonly Group[], out?: Float64Array): Float64Array {
    const paid = this.mlp.predict(groups);
    this.sink += paid[0] ?? 0;
    return this.table.predict(groups, out);
  }
}

/** A random dense layer (glorot-uniform kernel, zero bias), tfjs layout `[inputs, units]`. */
function randomLayer(rng: Rng, inputs: number, units: number, activation: DenseLayer['activation']): DenseLayer {
  const limit = Math.sqrt(6 / (inputs + units));
  const kernel = Array.from({ length: inputs * units }, () => (rng.nextUnit() * 2 - 1) * limit);
  return { inputs, units, activation, kernel, bias: new Array<number>(units).fill(0) };
}

/** The serving MLP with the paper's shape and seeded random weights, features standardized over random groups. */
function randomMlp(specs: ReadonlyMap<string, ModelSpec>, seed: number): MlpPredictor {
  const encoder = new FeatureEncoder({ featureSet: 'full', maxSlots: 4, trainedModels: [...specs.keys()], specs });
  const rng = new Rng(seed);
  const rows = 2000;
  const x = new Float64Array(rows * encoder.width);
  for (let r = 0; r < rows; r++) {
    const n = 1 + Math.floor(rng.nextUnit() * 4);
    const group: GroupSlot[] = [];
    for (let i = 0; i < n; i++) group.push(randomSlot(rng, specs, SERVICES[(r + i) % SERVICES.length]!));
    encoder.encode(group, x, r * encoder.width, r);
  }
  const layers: DenseLayer[] = [];
  let width = encoder.width;
  for (const units of DEFAULT_MLP_OPTIONS.hidden) {
    layers.push(randomLayer(rng, width, units, 'relu'));
    width = units;
  }
  layers.push(randomLayer(rng, width, 1, 'linear'));
  return new MlpPredictor(encoder, fitScaling(x, encoder.width), { transform: 'log', mean: Math.log(10), std: 0.5 }, layers, 'bench:random-mlp');
}

function randomSlot(rng: Rng, specs: ReadonlyMap<string, ModelSpec>, s: (typeof SERVICES)[number]): GroupSlot {
  const n = specs.get(s.model)!.operators.length;
  const start = rng.nextUnit() < 0.33 ? Math.floor(rng.nextUnit() * (n - 1)) : 0;
  const end = start + 1 + Math.floor(rng.nextUnit() * (n - start));
  return { model: s.model, start, end: Math.min(end, n), batch: BATCHES[Math.floor(rng.nextUnit() * BATCHES.length)]!, seqLen: s.seqLen };
}

function quantile(sorted: Float64Array, p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
}

/**
 * Time `decisions` decisions over `inputs` (cycled). `make` gives the controller: with `memo`
 * `warm` one controller takes every decision; `cold` each decision gets a fresh one (made
 * outside the timed region), so no prediction is remembered from an earlier decision.
 */
function timeDecisions(
  make: () => QueryController,
  memo: 'warm' | 'cold',
  inputs: readonly ScheduleInput[],
  decisions: number,
  warmup: number,
): { us: Float64Array; calls: number; scored: number; rounds: number; hits: number; samplesPerSegment: number } {
  const shared = make();
  for (let i = 0; i < warmup; i++) (memo === 'warm' ? shared : make()).decide(inputs[i % inputs.length]!);
  const fresh = memo === 'cold' ? Array.from({ length: decisions }, make) : [];
  const us = new Float64Array(decisions);
  let calls = 0;
  let scored = 0;
  let rounds = 0;
  let hits = 0;
  let segments = 0;
  let samples = 0;
  for (let i = 0; i < decisions; i++) {
    const inp = inputs[i % inputs.length]!;
    const controller = memo === 'warm' ? shared : fresh[i]!;
    const t0 = process.hrtime.bigint();
    const d = controller.decide(inp);
    const t1 = process.hrtime.bigint();
    us[i] = Number(t1 - t0) / 1000;
    calls += d.stats.predictorCalls;
    scored += d.stats.groupsScored;
    rounds += d.stats.searchRounds;
    hits += d.stats.soloMemoHits;
    segments += d.group.length;
    for (const s of d.group) samples += batchOf(inp, s.queryId) + (s.fused ?? []).reduce((n, id) => n + batchOf(inp, id), 0);
  }
  us.sort();
  return { us, calls: calls / decisions, scored: scored / decisions, rounds: rounds / decisions, hits: hits / decisions, samplesPerSegment: segments === 0 ? 0 : samples / segments };
}

/**
 * What a refining controller has seen before it is timed (`abacus refine` rows): every service
 * alone and every pair, whole at batch 1, measured exactly as predicted, 20 times each — so the
 * refiner holds a key per group shape and does every lookup of serving, while its factors stay
 * exactly 1 (ln 1 = 0): the same decisions as `abacus ways 4`, so the ratio is the refinement's
 * own cost.
 */
function refineObservations(services: readonly SearchService[], predictor: Predictor): GroupObservation[] {
  const seg = (s: SearchService): ExecutedSegment => {
    const n = s.spec.operators.length;
    return { queryId: 'bench', service: s.spec.name, model: s.spec.name, start: 0, end: n, operators: n, batch: 1, seqLen: s.seqLens[0] ?? 0, latencyMs: 0 };
  };
  const groups: ExecutedSegment[][] = services.map((s) => [seg(s)]);
  for (let i = 0; i < services.length; i++) for (let j = i + 1; j < services.length; j++) groups.push([seg(services[i]!), seg(services[j]!)]);
  const out: GroupObservation[] = [];
  for (let k = 0; k < 20; k++) {
    for (const g of groups) out.push({ segments: g, groupLatencyMs: predictor.predict([g])[0]! });
  }
  return out;
}

/** `batch` of the waiting query `id` of `inp` (outside the timed region). */
function batchOf(inp: ScheduleInput, id: string): number {
  for (const queue of inp.queues) for (const w of queue) if (w.id === id) return w.batch;
  throw new Error(`bench: no query '${id}'`);
}

const MAX_BATCH_SIZE = 16;
/** Batch b costs 1 + (b − 1)/8 times batch 1 in the batching scenario's table. */
const BATCH_SLOPE = 1 / 8;

/** The dynamic-batching scenario's inputs (see the file comment). */
/**
 * The batching scenarios as abacus without the group barrier sees them (`schedule/abacus/stream.ts`):
 * in each, the first one or two services (alternating) have a segment in flight — their head,
 * fused with up to 15 followers, launched a random 0–100 % of its solo latency ago — so their
 * queues are `held` and their segments `running`; the others' queues may be launched.
 */
export function streamScenarios(inputs: readonly ScheduleInput[], predictor: Predictor): ScheduleInput[] {
  return inputs.map((input, k) => {
    const busy = 1 + (k % 2);
    const running: RunningSegment[] = [];
    const held: WaitingQuery[][] = [];
    const queues: WaitingQuery[][] = [];
    input.queues.forEach((queue, i) => {
      if (i >= busy || queue.length === 0) {
        queues.push([...queue]);
        return;
      }
      const head = queue[0]!;
      const batch = Math.min(MAX_BATCH_SIZE, head.batch + (head.nextOperator === 0 ? 15 : 0));
      const soloMs = predictor.predict([[{ model: head.model, start: head.nextOperator, end: head.operators, batch, seqLen: head.seqLen }]])[0]!;
      const launchMs = input.nowMs - ((k * 37) % 100) / 100 * soloMs;
      running.push({ queryId: `${head.id}+run`, service: head.service, model: head.model, operators: head.operators, start: head.nextOperator, end: head.operators, batch, seqLen: head.seqLen, launchMs, predictedMs: soloMs, deadlineMs: head.arrivalMs + head.qosTargetMs });
      held.push(queue.slice(head.nextOperator === 0 ? 16 : 1));
    });
    return { nowMs: input.nowMs, queues, runningRemainingMs: 0, running, held };
  });
}

export function batchingScenarios(services: readonly SearchService[], predictor: Predictor, count: number, seed: number): ScheduleInput[] {
  const rng = new Rng(seed);
  const nowMs = 10_000;
  const limits: BatchingLimits = Object.freeze({ maxBatchSize: MAX_BATCH_SIZE, maxQueueDelayMs: 0, preferredBatchSizes: Object.freeze([]) });
  const wholeMs = predictor.predict(services.map((s) => [{ model: s.spec.name, start: 0, end: s.spec.operators.length, batch: 1, seqLen: s.seqLens[0] ?? 0 }]));
  const out: ScheduleInput[] = [];
  let id = 0;
  for (let k = 0; k < count; k++) {
    const queues: WaitingQuery[][] = services.map((s, i) => {
      const n = s.spec.operators.length;
      const seqLen = s.spec.dynamicAxes.seq === undefined ? 0 : (s.seqLens[0] ?? 0);
      const qosTargetMs = 4 * wholeMs[i]!;
      const length = 10 + Math.floor(rng.nextUnit() * 31);
      const headWaitedMs = rng.nextUnit() * 0.9 * qosTargetMs;
      const queue: WaitingQuery[] = [];
      const service = `s${i}-${s.spec.name}`;
      const fuseKey = `${s.spec.name}:${seqLen}`;
      for (let j = 0; j < length; j++) {
        const arrivalMs = nowMs - headWaitedMs + (j * headWaitedMs) / length;
        const qos = rng.nextUnit() < 0.1 ? qosTargetMs / 2 : qosTargetMs;
        // a quarter of the heads: a fused batch in progress (one query, no batching)
        const inProgress = j === 0 && rng.nextUnit() < 0.25;
        const batch = inProgress ? 2 + Math.floor(rng.nextUnit() * (MAX_BATCH_SIZE - 1)) : 1;
        const nextOperator = inProgress ? 1 + Math.floor(rng.nextUnit() * (n - 1)) : 0;
        // Plain literals, the runtime's shape (runtime.ts): building them by spreading a fresh
        // object gives every query its own hidden class, and every read in decide a megamorphic one.
        queue.push({
          id: `q${id++}`,
          service,
          model: s.spec.name,
          operators: n,
          nextOperator,
          batch,
          seqLen,
          arrivalMs,
          qosTargetMs: qos,
          ...(inProgress ? {} : { batching: limits, fuseKey }),
        });
      }
      return queue;
    });
    out.push({ nowMs, queues, runningRemainingMs: rng.nextUnit() < 0.5 ? 0 : rng.nextUnit() * 5 });
  }
  return out;
}

/** `inputs` with every query's `batching` and `fuseKey` removed (today's decisions on the same queues). */
function withoutBatching(inputs: readonly ScheduleInput[]): ScheduleInput[] {
  return inputs.map((inp) => ({
    ...inp,
    queues: inp.queues.map((queue) => queue.map(({ batching: _b, fuseKey: _k, ...w }) => w)),
  }));
}

/** One row of the table from `timeDecisions`' result; `fcfsMedianUs` is the same table's fcfs median. */
function benchRow(predictor: string, policy: string, memo: 'warm' | 'cold', r: ReturnType<typeof timeDecisions>, fcfsMedianUs: number): ScheduleBenchRow {
  const medianUs = quantile(r.us, 0.5);
  return {
    predictor,
    policy,
    memo,
    decisions: r.us.length,
    medianUs,
    p99Us: quantile(r.us, 0.99),
    meanUs: r.us.reduce((a, b) => a + b, 0) / r.us.length,
    predictorCalls: r.calls,
    groupsScored: r.scored,
    searchRounds: r.rounds,
    soloMemoHits: r.hits,
    ratioToFcfs: medianUs / fcfsMedianUs,
    samplesPerSegment: r.samplesPerSegment,
  };
}

function timerOverheadUs(n: number): number {
  const us = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const t0 = process.hrtime.bigint();
    const t1 = process.hrtime.bigint();
    us[i] = Number(t1 - t0) / 1000;
  }
  return quantile(us.sort(), 0.5);
}

export async function benchSchedule(
  opts: { decisions?: number; warmup?: number; scenarios?: number; seed?: number; mlp?: boolean; cacheDir?: string; log?: (s: string) => void } = {},
): Promise<ScheduleBenchResult> {
  const decisions = opts.decisions ?? 50_000;
  const warmup = opts.warmup ?? 5_000;
  const seed = opts.seed ?? 1;
  const log = opts.log ?? (() => undefined);
  const repo = new ModelRepository(opts.cacheDir === undefined ? {} : { cacheDir: opts.cacheDir });
  const specs = new Map<string, ModelSpec>();
  for (const s of SERVICES) specs.set(s.model, await repo.zooSpec(s.model));
  // Cheap table: a whole query at batch 1 takes 8..20 ms, spread evenly over its operators.
  const wholeMs: Record<string, number> = { resnet50: 8, inception_v3: 12, vgg16: 20, bert: 10 };
  const services: SearchService[] = SERVICES.map((s) => ({ spec: specs.get(s.model)!, batchSizes: BATCHES, seqLens: [s.seqLen] }));
  const table = new CostTablePredictor(Object.fromEntries(SERVICES.map((s) => [s.model, wholeMs[s.model]! / specs.get(s.model)!.operators.length])));
  const mlp = opts.mlp === false ? undefined : randomMlp(specs, seed);
  const predictors: Predictor[] = [table];
  if (mlp !== undefined) predictors.push(new MlpPricedPredictor(mlp, table));
  const rows: ScheduleBenchRow[] = [];
  for (const predictor of predictors) {
    const inputs = searchScenarios(services, predictor, opts.scenarios ?? 1024, seed + 1);
    for (const memo of ['warm', 'cold'] as const) {
      let fcfsMedian = NaN;
      const observations = refineObservations(services, predictor);
      for (const [policy, params] of [
        ['fcfs', {}],
        ['abacus', { ways: WAYS, slackMs: SLACK_MS }],
        ['abacus refine', { ways: WAYS, slackMs: SLACK_MS, refine: true }],
      ] as const) {
        log(`schedule: ${policy} with ${predictor.kind}, memo ${memo}, ${decisions} decisions…\n`);
        // refine: one refiner fed once, shared by the controllers (memo cold = a fresh controller, not a fresh refiner)
        const refiner = 'refine' in params ? new RefinedPredictor(predictor) : undefined;
        if (refiner !== undefined) {
          const feeder = new AbacusController(predictor, { ways: WAYS, slackMs: SLACK_MS, drop: true }, refiner);
          for (const o of observations) feeder.observe(o);
        }
        const make = (): QueryController =>
          refiner === undefined ? createController(policy, params, predictor) : new AbacusController(predictor, { ways: WAYS, slackMs: SLACK_MS, drop: true }, refiner);
        const r = timeDecisions(make, memo, inputs, decisions, warmup);
        if (policy === 'fcfs') fcfsMedian = quantile(r.us, 0.5);
        rows.push(benchRow(predictor.kind, policy === 'fcfs' ? policy : policy.replace('abacus', `abacus ways ${WAYS}`), memo, r, fcfsMedian));
      }
    }
  }
  // Dynamic batching: a table sublinear in the batch (same per-operator costs at batch 1).
  const batchTable = new CostTablePredictor(Object.fromEntries(SERVICES.map((s) => [s.model, wholeMs[s.model]! / specs.get(s.model)!.operators.length])), { batchSlope: BATCH_SLOPE });
  const batchPredictors: Predictor[] = [batchTable];
  if (mlp !== undefined) batchPredictors.push(new MlpPricedPredictor(mlp, batchTable));
  const batchingRows: ScheduleBenchRow[] = [];
  for (const predictor of batchPredictors) {
    const batched = batchingScenarios(services, predictor, opts.scenarios ?? 1024, seed + 2);
    const plain = withoutBatching(batched);
    for (const memo of ['warm', 'cold'] as const) {
      let fcfsMedian = NaN;
      for (const [policy, params, inputs] of [
        ['fcfs', {}, batched],
        [`abacus ways ${WAYS} (batching off)`, { ways: WAYS, slackMs: SLACK_MS }, plain],
        [`abacus ways ${WAYS}`, { ways: WAYS, slackMs: SLACK_MS }, batched],
        [`abacus ways ${WAYS} (no barrier)`, { ways: WAYS, slackMs: SLACK_MS, barrier: false }, streamScenarios(batched, predictor)],
      ] as const) {
        log(`schedule, batching: ${policy} with ${predictor.kind}, memo ${memo}, ${decisions} decisions…\n`);
        const r = timeDecisions(() => createController(policy === 'fcfs' ? 'fcfs' : 'abacus', params, predictor), memo, inputs, decisions, warmup);
        if (policy === 'fcfs') fcfsMedian = quantile(r.us, 0.5);
        batchingRows.push(benchRow(predictor.kind, policy, memo, r, fcfsMedian));
      }
    }
  }
  return {
    services: SERVICES.map((s) => s.model),
    ways: WAYS,
    slackMs: SLACK_MS,
    timerOverheadUs: timerOverheadUs(10_000),
    rows,
    batching: { maxBatchSize: MAX_BATCH_SIZE, rows: batchingRows },
  };
}
