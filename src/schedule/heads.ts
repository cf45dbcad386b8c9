/**
 * Shared by the head policies (abacus, fcfs/sjf/edf, clockwork): input validation, headroom,
 * the urgency order, and step 1 of the abacus controller (docs/scheduling-runtime.md) — collect the head of every queue,
 * rejecting hopeless ones (and replacing each rejected head by the next query of its queue).
 * Not a policy; imports only the contracts.
 */
import { nextInstantAfter } from '../clock/instant.ts';
import type { GroupSlot, Predictor } from '../predict/predictor.ts';
import type { Decision, Rejection, ScheduleInput, WaitingQuery } from './controller.ts';

/** Mutable counters behind `DecisionStats`. */
export interface StatsCounter {
  predictorCalls: number;
  groupsScored: number;
  searchRounds: number;
  soloMemoHits: number;
}

export function newStats(): StatsCounter {
  return { predictorCalls: 0, groupsScored: 0, searchRounds: 0, soloMemoHits: 0 };
}

/** Slots the memo can key exactly: start, end and batch below 2^10, seqLen below 2^16, ≤ 64 models. */
const MEMO_FIELD = 1024;
const MEMO_SEQ = 65536;
const MEMO_MODELS = 64;
/** A key divided by this (floored) is its model's index: MEMO_FIELD³ × MEMO_SEQ = 2^46. */
const MEMO_MODEL_RADIX = MEMO_FIELD * MEMO_FIELD * MEMO_FIELD * MEMO_SEQ;

/**
 * What an online-refined predictor (`RefiningPredictor`) tells the memo: its one-slot prediction
 * of `model` now for a base prediction, and the inverse. With it the memo keeps BASE predictions
 * (`baseSoloMs` of the value when set) and refines them when read (`soloMs`), so a remembered
 * prediction follows the refinement without being forgotten (equal to the predictor's answer up
 * to rounding).
 */
export interface SoloScale {
  soloMs(model: string, baseMs: number): number;
  baseSoloMs(model: string, ms: number): number;
}

/**
 * Remembered remaining-solo-latency predictions of queries. A predictor is a pure function of
 * the group, and a query waits at the head of its queue through several decisions at the same
 * `nextOperator` (and most queries of a service share a few batch sizes), so step 1's drop
 * check would ask the same single-slot question again and again. The memo answers it from a
 * map keyed exactly by (model, start, end, batch, seqLen) — the value is the one the predictor
 * returned, so decisions are identical with and without it. Bounded: when `capacity` keys are
 * held it is cleared. One per controller instance (it belongs to that controller's predictor).
 */
export class SoloMemo {
  readonly #capacity: number;
  readonly #models = new Map<string, number>();
  /** Model names by index (`#models` reversed), for `#scale`. */
  readonly #names: string[] = [];
  readonly #values = new Map<number, number>();
  readonly #scale: SoloScale | undefined;
  #revision: number | undefined;

  /**
   * @param scale the refinement of the predictor the memo answers for (see `SoloScale`); absent:
   *   values are kept and returned as given.
   * @throws RangeError unless capacity is an integer ≥ 1.
   */
  constructor(capacity = 4096, scale?: SoloScale) {
    if (!Number.isInteger(capacity) || capacity < 1) throw new RangeError(`SoloMemo capacity must be an integer ≥ 1, got ${capacity}`);
    this.#capacity = capacity;
    this.#scale = scale;
  }

  /**
   * Forget every value when `predictor`'s `revision` moved since the last call (a predictor
   * without one never clears the memo here). Call before reading the memo in a decision.
   */
  sync(predictor: Predictor): void {
    const r = predictor.revision;
    if (r === this.#revision) return;
    this.#revision = r;
    this.#values.clear();
  }

  /** Keys held now. */
  get size(): number {
    return this.#values.size;
  }

  /** The exact numeric key of `q`'s remaining operators, or -1 when a field is out of the keyable range. */
  key(q: WaitingQuery): number {
    return this.slotKey(q.model, q.nextOperator, q.operators, q.batch, q.seqLen);
  }

  /** The exact numeric key of operators `[start, end)` of `model` at `batch` and `seqLen` (`key(q)`: `end` = the model's operators), or -1 when a field is out of the keyable range. */
  slotKey(model: string, start: number, end: number, batch: number, seqLen: number): number {
    let m = this.#models.get(model);
    if (m === undefined) {
      if (this.#models.size >= MEMO_MODELS) return -1;
      m = this.#models.size;
      this.#models.set(model, m);
      this.#names.push(model);
    }
    if (end >= MEMO_FIELD || batch >= MEMO_FIELD || seqLen >= MEMO_SEQ) return -1;
    return (((m * MEMO_FIELD + start) * MEMO_FIELD + end) * MEMO_FIELD + batch) * MEMO_SEQ + seqLen;
  }

  /** The remembered prediction for `key`, or undefined. */
  get(key: number): number | undefined {
    if (key < 0) return undefined;
    const v = this.#values.get(key);
    return v === undefined || this.#scale === undefined ? v : this.#scale.soloMs(this.#names[Math.floor(key / MEMO_MODEL_RADIX)]!, v);
  }

  set(key: number, ms: number): void {
    if (key < 0) return;
    if (this.#values.size >= this.#capacity) this.#values.clear();
    this.#values.set(key, this.#scale === undefined ? ms : this.#scale.baseSoloMs(this.#names[Math.floor(key / MEMO_MODEL_RADIX)]!, ms));
  }
}

/** A head under consideration. */
export interface Candidate {
  readonly query: WaitingQuery;
  /** qosTargetMs − (nowMs − arrivalMs), ms. */
  readonly headroomMs: number;
  /** arrivalMs + qosTargetMs, ms: orders like headroom but ties exactly (no `nowMs` rounding). */
  readonly deadlineMs: number;
  /**
   * Estimated latency (ms) of the query's remaining operators run alone: the predictor's
   * (`GroupSlot` from `nextOperator` to the end), or the policy's own estimate; NaN when not
   * needed (no drop and the policy does not order by it).
   */
  soloMs: number;
}

/** The slot of a query's remaining operators `[nextOperator, end)`. */
export function slotOf(q: WaitingQuery, end: number): GroupSlot {
  return { model: q.model, start: q.nextOperator, end, batch: q.batch, seqLen: q.seqLen };
}

const isInt = (x: number, min: number): boolean => Number.isInteger(x) && x >= min;

/** @throws RangeError naming the query and the field (message built only on failure). */
export function checkQuery(q: WaitingQuery): void {
  if (!isInt(q.operators, 1)) throw new RangeError(`query '${q.id}': operators must be an integer ≥ 1, got ${q.operators}`);
  if (!isInt(q.nextOperator, 0) || q.nextOperator >= q.operators) {
    throw new RangeError(`query '${q.id}': nextOperator must be an integer in [0, ${q.operators - 1}], got ${q.nextOperator}`);
  }
  if (!isInt(q.batch, 1)) throw new RangeError(`query '${q.id}': batch must be an integer ≥ 1, got ${q.batch}`);
  if (!isInt(q.seqLen, 0)) throw new RangeError(`query '${q.id}': seqLen must be an integer ≥ 0, got ${q.seqLen}`);
  if (!Number.isFinite(q.arrivalMs)) throw new RangeError(`query '${q.id}': arrivalMs must be finite, got ${q.arrivalMs}`);
  if (!Number.isFinite(q.qosTargetMs)) throw new RangeError(`query '${q.id}': qosTargetMs must be finite, got ${q.qosTargetMs}`);
}

/** @throws RangeError for a non-finite `nowMs` or a negative / non-finite `runningRemainingMs`. */
export function checkInput(input: ScheduleInput): void {
  if (!Number.isFinite(input.nowMs)) throw new RangeError(`nowMs must be finite, got ${input.nowMs}`);
  if (!(input.runningRemainingMs >= 0) || !Number.isFinite(input.runningRemainingMs)) {
    throw new RangeError(`runningRemainingMs must be a finite number ≥ 0, got ${input.runningRemainingMs}`);
  }
}

/** Code-unit order of strings (locale-independent, so decisions do not depend on the host). */
export function compareStrings(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Ties after the policy's key: earlier arrival, then service name, then query id. */
export function compareTies(a: Candidate, b: Candidate): number {
  return a.query.arrivalMs - b.query.arrivalMs || compareStrings(a.query.service, b.query.service) || compareStrings(a.query.id, b.query.id);
}

/** Most urgent first: smallest headroom (= earliest deadline), then `compareTies`. */
export function compareUrgency(a: Candidate, b: Candidate): number {
  return a.deadlineMs - b.deadlineMs || compareTies(a, b);
}

/** How `collectHeads` estimates and drops. */
export interface HeadRule {
  /** Reject hopeless heads (and look at the next query of their queue). */
  readonly drop: boolean;
  /** Predict `soloMs` of every head (else only when `drop` needs it; NaN otherwise). */
  readonly score: boolean;
  /**
   * Time until the device can take a query, ms ≥ 0: `ScheduleInput.runningRemainingMs` (the
   * running group's predicted remainder when the runtime decides ahead). A head is judged as if
   * it started then.
   */
  readonly extraMs: number;
  /** A policy's own estimate of a query's remaining latency (ms), or undefined to ask the predictor. */
  readonly known?: (q: WaitingQuery) => number | undefined;
  /** Remembered predictions of remaining solo latencies (consulted before the predictor, filled after). */
  readonly memo: SoloMemo;
  /**
   * The drop test judges `dropScale × estimate` instead of the estimate, in (0, 1] (default 1):
   * abacus with its calibration fallback drops only a query that a run as fast as the fast
   * recent ones would not finish (`RefiningPredictor.optimisticFactor`, `schedule/fallback.ts`).
   * `Candidate.soloMs` stays the estimate.
   */
  readonly dropScale?: number;
}

/**
 * A query that needs `soloMs` more to finish by `deadlineMs` must start by its latest start,
 * `deadlineMs − soloMs` (clock ms). `collectHeads` rejects a head when the earliest time the
 * device can take it (`nowMs + rule.extraMs`) is past this instant (starting exactly then still
 * meets the deadline, so it is kept).
 */
export function latestStartMs(deadlineMs: number, soloMs: number): number {
  return deadlineMs - soloMs;
}

/**
 * `Decision.wakeAtMs` of a dropping head policy (rejection on time): the first instant at which
 * one of the kept heads becomes hopeless if it still waits then and nothing else happens before
 * — `nextInstantAfter(latestStartMs)`, the earliest over the heads — or undefined when none has
 * an estimate. The runtime decides again then (a decision made while a group runs only plans
 * its group, so a planned head may still be waiting), and the head is rejected at exactly that
 * instant on a virtual clock. Queries behind the heads are judged when they reach a head.
 */
export function hopelessAtMs(heads: readonly Candidate[], dropScale = 1): number | undefined {
  let at = Infinity;
  for (const c of heads) if (!Number.isNaN(c.soloMs)) at = Math.min(at, latestStartMs(c.deadlineMs, dropScale * c.soloMs));
  return Number.isFinite(at) ? nextInstantAfter(at) : undefined;
}

/** `decision` with `wakeAtMs` = `hopelessAtMs(heads)` when the policy drops (and one exists). */
export function withWake(decision: Decision, drop: boolean, heads: readonly Candidate[]): Decision {
  const wakeAtMs = drop ? hopelessAtMs(heads) : undefined;
  return wakeAtMs === undefined ? decision : { ...decision, wakeAtMs };
}

/**
 * Step 1: the first query of each queue that is not hopeless. A query is hopeless when its
 * headroom is ≤ 0, or when the device cannot take it by its latest start:
 * `nowMs + rule.extraMs > latestStartMs(deadline, estimate)` (⇔ `estimate + extraMs >
 * headroom`; estimate: `rule.known`, else the predictor's remaining solo latency). Heads still unresolved after a round are scored in
 * ONE batched predictor call (heads whose prediction `rule.memo` remembers are not asked again);
 * a rejected head is replaced by the next query of its queue and
 * the replacements are scored in the next round (so a decision only comes back empty when
 * every visible query was rejected). Without drop: the first query of each queue, scored
 * (one call) when `rule.score`.
 *
 * Appends rejections to `rejected` in the order they happen (rounds, then queue order).
 * @returns the surviving heads, in the order found (deterministic; policies sort them).
 */
export function collectHeads(
  input: ScheduleInput,
  predictor: Predictor,
  rule: HeadRule,
  stats: StatsCounter,
  rejected: Rejection[],
): Candidate[] {
  rule.memo.sync(predictor);
  const { nowMs, queues } = input;
  const heads: Candidate[] = [];
  const pos: number[] = [];
  let pending: number[] = [];
  const { memo } = rule;
  const scale = rule.dropScale ?? 1;
  for (let i = 0; i < queues.length; i++) {
    pos.push(0);
    if ((queues[i]?.length ?? 0) > 0) pending.push(i);
  }
  while (pending.length > 0) {
    const toScore: { c: Candidate; qi: number; key: number; remembered: boolean }[] = [];
    for (const qi of pending) {
      const queue = queues[qi]!;
      while (pos[qi]! < queue.length) {
        const q = queue[pos[qi]!]!;
        checkQuery(q);
        const deadlineMs = q.arrivalMs + q.qosTargetMs;
        const headroomMs = q.qosTargetMs - (nowMs - q.arrivalMs);
        if (rule.drop && headroomMs <= 0) {
          rejected.push({ queryId: q.id, service: q.service, reason: 'qos_violation', headroomMs });
          pos[qi]!++;
          continue;
        }
        const c: Candidate = { query: q, headroomMs, deadlineMs, soloMs: NaN };
        const known = rule.known?.(q);
        if (known !== undefined) {
          c.soloMs = known;
          if (rule.drop && latestStartMs(deadlineMs, scale * known) < nowMs + rule.extraMs) {
            rejected.push({ queryId: q.id, service: q.service, reason: 'qos_violation', headroomMs, predictedMs: scale * known + rule.extraMs });
            pos[qi]!++;
            continue;
          }
          heads.push(c);
        } else if (rule.drop || rule.score) {
          toScore.push({ c, qi, key: memo.key(q), remembered: false });
        } else {
          heads.push(c);
        }
        break;
      }
    }
    if (toScore.length === 0) break;
    // The round's heads in order; those the memo remembers are not sent to the predictor, and
    // every head is then resolved in the same order as if all had been scored in this call.
    let groups: GroupSlot[][] | undefined;
    for (const t of toScore) {
      const ms = memo.get(t.key);
      if (ms !== undefined) {
        t.c.soloMs = ms;
        t.remembered = true;
        stats.soloMemoHits++;
      } else {
        (groups ??= []).push([slotOf(t.c.query, t.c.query.operators)]);
      }
    }
    if (groups !== undefined) {
      const out = predictor.predict(groups);
      stats.predictorCalls++;
      stats.groupsScored += groups.length;
      let o = 0;
      for (const t of toScore) {
        if (t.remembered) continue;
        t.c.soloMs = out[o++]!;
        memo.set(t.key, t.c.soloMs);
      }
    }
    const next: number[] = [];
    for (let j = 0; j < toScore.length; j++) {
      const { c, qi } = toScore[j]!;
      if (rule.drop && latestStartMs(c.deadlineMs, scale * c.soloMs) < nowMs + rule.extraMs) {
        rejected.push({ queryId: c.query.id, service: c.query.service, reason: 'qos_violation', headroomMs: c.headroomMs, predictedMs: scale * c.soloMs + rule.extraMs });
        pos[qi]!++;
        next.push(qi);
      } else {
        heads.push(c);
      }
    }
    pending = next;
  }
  return heads;
}

/** Predicted remaining solo latency of one query (one call unless `memo` remembers it), for a head whose `soloMs` was not needed before. */
export function predictSolo(predictor: Predictor, q: WaitingQuery, stats: StatsCounter, memo: SoloMemo): number {
  memo.sync(predictor);
  const key = memo.key(q);
  const remembered = memo.get(key);
  if (remembered !== undefined) {
    stats.soloMemoHits++;
    return remembered;
  }
  const out = predictor.predict([[slotOf(q, q.operators)]]);
  stats.predictorCalls++;
  stats.groupsScored++;
  memo.set(key, out[0]!);
  return out[0]!;
}

/**
 * Queue positions scanned past a head for queries to fuse, per sample of `maxBatchSize`: bounds
 * a decision's work on a long queue (a follower with another `fuseKey` is skipped, not fused).
 */
const FUSION_SCAN_PER_SAMPLE = 8;

/** The queries that may be fused behind a head, and what each prefix of them gives. */
export interface FusionPlan {
  /** Queries that may join the head, in queue order; fusing is by prefix of this list. */
  readonly followers: readonly WaitingQuery[];
  /** `samples[m]` = samples of the head plus the first m followers (`samples[0]` = head.batch), each ≤ maxBatchSize but for a lone head that exceeds it. */
  readonly samples: readonly number[];
  /** `deadlineMs[m]` = the earliest deadline (`arrivalMs + qosTargetMs`, ms) among the head and the first m followers. */
  readonly deadlineMs: readonly number[];
}

/**
 * What may be fused behind `queue[headIndex]` (docs/batching.md): the
 * following queries of the queue, in order, that have run no operator, carry `batching` and the
 * head's `fuseKey`; the scan stops at the first whose batch would take the samples past the
 * head's `batching.maxBatchSize`, and after `8 × maxBatchSize` positions. A head without
 * `batching` (a fused batch, a query already started, a service that does not batch) has no
 * followers. Followers are checked (`checkQuery`).
 */
export function fusionPlan(queue: readonly WaitingQuery[], headIndex: number): FusionPlan {
  const head = queue[headIndex]!;
  const samples = [head.batch];
  const deadlineMs = [head.arrivalMs + head.qosTargetMs];
  const followers: WaitingQuery[] = [];
  const limits = head.batching;
  if (limits === undefined || head.nextOperator !== 0) return { followers, samples, deadlineMs };
  let total = head.batch;
  let deadline = deadlineMs[0]!;
  const last = Math.min(queue.length, headIndex + 1 + FUSION_SCAN_PER_SAMPLE * limits.maxBatchSize);
  for (let i = headIndex + 1; i < last && total < limits.maxBatchSize; i++) {
    const q = queue[i]!;
    if (q.batching === undefined || q.nextOperator !== 0 || q.fuseKey !== head.fuseKey) continue;
    checkQuery(q);
    if (total + q.batch > limits.maxBatchSize) break;
    total += q.batch;
    deadline = Math.min(deadline, q.arrivalMs + q.qosTargetMs);
    followers.push(q);
    samples.push(total);
    deadlineMs.push(deadline);
  }
  return { followers, samples, deadlineMs };
}

/** The slot of a head fused with `samples` samples running operators `[nextOperator, end)`. */
export function fusedSlotOf(q: WaitingQuery, samples: number, end: number): GroupSlot {
  return { model: q.model, start: q.nextOperator, end, batch: samples, seqLen: q.seqLen };
}

// ---- Where a head waits (batching baselines: fcfs-batch, edf-batch, clockwork) ----

/**
 * The queue holding `q` (by identity) and `q`'s position in it, for a head found by
 * `collectHeads` (its position is the number of queries rejected before it). Only queues whose
 * first query is of `q`'s service are searched (one queue per service).
 * @returns undefined when no queue holds `q`.
 */
export function positionOf(queues: ScheduleInput['queues'], q: WaitingQuery): { readonly queue: readonly WaitingQuery[]; readonly index: number } | undefined {
  for (const queue of queues) {
    if (queue[0]?.service !== q.service) continue;
    const index = queue.indexOf(q);
    if (index >= 0) return { queue, index };
  }
  return undefined;
}
