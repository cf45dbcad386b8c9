/**
 * Group launch and completion in the runtime (docs/design.md#runtime, docs/design.md#the-launched-group):
 * what a decided operator group becomes on the device, and what its result does to the queries it ran.
 *
 * Inputs: a decision's launch segments with the units each names (`checkDecisionOf`), the
 * runtime's `QueryBook`, and the device's `GroupResult` (or the error it threw). Outputs: the
 * device `Segment`s and the `GroupRecord` of a launch, the units marked in flight; at the end,
 * each unit advanced to its segment's end, completed, unfused, or rejected in the book, and the
 * segments that ran (`ExecutedSegment`, what the controller observes). When to launch, the plan
 * made ahead and the controller's observation stay with the loop (`runtime.ts`).
 */
import type { GroupResult, Segment, SegmentInput } from '../device/device.ts';
import { BadRequestError, describeError } from '../errors.ts';
import type { ExecutedSegment, LaunchSegment } from '../schedule/controller.ts';
import { fuseUnits, unfuse } from './fusion.ts';
import type { QueryBook } from './query-book.ts';
import type { GroupRecord, RejectionReason } from './records.ts';
import { refreshView, type Unit } from './units.ts';

/**
 * The units a decided group runs (fused where its segments fuse queries) and their device
 * segments, in the same order. A segment whose members cannot be fused is left out and its
 * members are rejected `bad_request` (cannot happen for inputs checked at submit).
 * @param groupIndex the index the group will get (a fused batch's id names it).
 */
export function segmentsOf(book: QueryBook, group: readonly LaunchSegment[], members: readonly (readonly Unit[])[], groupIndex: number): { units: Unit[]; segments: Segment[] } {
  const units: Unit[] = [];
  const segments: Segment[] = [];
  for (const [i, s] of group.entries()) {
    let u: Unit;
    try {
      u = fuseUnits(book, members[i]!, groupIndex);
    } catch (err) {
      if (!(err instanceof RangeError)) throw err;
      for (const m of members[i]!) book.rejectUnit(m, 'bad_request', `could not fuse the batch: ${err.message}`);
      continue;
    }
    const input: SegmentInput = u.nextOperator > 0 ? { kind: 'resume' } : u.inputs !== undefined ? { kind: 'tensors', tensors: u.inputs } : { kind: 'synthetic', seed: u.seed };
    segments.push({ service: u.state.service.name, queryId: u.id, start: s.start, end: s.end, batchSize: u.samples, seqLen: u.seqLen, input, ...(s.intraOpThreads === undefined ? {} : { intraOpThreads: s.intraOpThreads }) });
    units.push(u);
  }
  return { units, segments };
}

/** What a launch records beside its segments. */
export interface LaunchFacts {
  readonly index: number;
  /** Clock time of the launch, ms. */
  readonly launchMs: number;
  readonly predictedMs: number | undefined;
  readonly decidedAhead: boolean;
  readonly fallback: boolean;
  /** How long the device sat idle with queries waiting before this launch, ms; undefined: it did not. */
  readonly idleBeforeMs: number | undefined;
}

/** The record of a group launching `segments` for `units` (same order); `measuredMs` NaN until it ends. */
export function groupRecordOf(facts: LaunchFacts, segments: readonly Segment[], units: readonly Unit[]): GroupRecord {
  return {
    index: facts.index,
    launchMs: facts.launchMs,
    predictedMs: facts.predictedMs,
    measuredMs: Number.NaN,
    decidedAhead: facts.decidedAhead,
    ...(facts.fallback ? { fallback: true } : {}),
    ...(facts.idleBeforeMs === undefined ? {} : { idleBeforeMs: facts.idleBeforeMs }),
    segments: segments.map((s, i) => ({
      queryId: s.queryId,
      service: s.service,
      start: s.start,
      end: s.end,
      batch: s.batchSize,
      seqLen: s.seqLen,
      ...(s.intraOpThreads === undefined ? {} : { intraOpThreads: s.intraOpThreads }),
      ...(units[i]!.fused ? { members: units[i]!.members.map((p) => p.record.id) } : {}),
    })),
  };
}

/**
 * Mark `units` in flight in `record` (their services' running counts, each query's groups and
 * run batch). `leaveQueues` (a `launchWhileBusy` policy): they leave their queues now.
 */
export function markLaunched(book: QueryBook, record: GroupRecord, units: readonly Unit[], leaveQueues: boolean): void {
  for (const [i, u] of units.entries()) {
    u.inFlight = true;
    u.runEnd = record.segments[i]!.end;
    u.state.running++;
    u.state.runningQueries += u.members.length;
    for (const p of u.members) {
      p.record.groups.push(record.index);
      p.record.runBatch ??= u.samples;
    }
    if (leaveQueues) book.removeFromQueue(u);
  }
}

/**
 * A group ended with `result` (one result per unit, launch order): each unit leaves flight and
 * is completed (its last operator ran), advanced to its segment's end (members cancelled or
 * rejected ahead meanwhile end now), unfused (a fused batch the device refused `bad_request`:
 * each member reruns alone), or rejected (`bad_request` / `device_failure`).
 * @returns the segments that ran, for the controller's `observe`.
 */
export function settleGroup(book: QueryBook, record: GroupRecord, units: readonly Unit[], result: GroupResult): ExecutedSegment[] {
  const executed: ExecutedSegment[] = [];
  result.segments.forEach((r, i) => {
    const u = units[i]!;
    const seg = record.segments[i]!;
    const spec = u.state.service.spec;
    u.inFlight = false;
    u.state.running--;
    u.state.runningQueries -= u.members.length;
    if (!r.ok) {
      // A fused batch the device refused (a value only it checks, e.g. a token id beyond the
      // vocabulary) may be one member's fault: each member reruns alone from operator 0.
      if (u.fused && r.error.code === 'bad_request') unfuse(book, u);
      else book.rejectUnit(u, r.error.code === 'bad_request' ? 'bad_request' : 'device_failure', r.error.message);
      return;
    }
    executed.push({
      queryId: u.id,
      service: u.state.service.name,
      model: spec.name,
      start: seg.start,
      end: seg.end,
      operators: spec.operators.length,
      batch: u.samples,
      seqLen: u.seqLen,
      latencyMs: r.latencyMs,
      ...(seg.intraOpThreads === undefined ? {} : { intraOpThreads: seg.intraOpThreads }),
    });
    u.nextOperator = seg.end;
    if (seg.end === spec.operators.length) {
      book.completeUnit(u, r.outputs ?? {});
      return;
    }
    for (const p of [...u.members]) if (p.endAfterGroup !== undefined) book.reject(p, p.endAfterGroup.reason, p.endAfterGroup.message);
    if (u.members.length > 0) {
      if (u.fused) refreshView(u);
      else {
        // A query that ran a segment can no longer be fused: its view drops `batching`.
        const { batching: _batching, fuseKey: _fuseKey, ...rest } = u.view;
        u.view = { ...rest, nextOperator: seg.end };
        const j = u.state.queue.indexOf(u);
        if (j >= 0) u.state.views[j] = u.view;
      }
    }
  });
  return executed;
}

/**
 * A group the device refused as a whole (`runGroup` threw or rejected with `err`): every unit
 * leaves flight and is rejected — `bad_request` for a BadRequestError, RangeError or TypeError,
 * else `device_failure`.
 */
export function failGroup(book: QueryBook, units: readonly Unit[], err: unknown): void {
  const reason: RejectionReason = err instanceof BadRequestError || err instanceof RangeError || err instanceof TypeError ? 'bad_request' : 'device_failure';
  for (const u of units) {
    u.inFlight = false;
    u.state.running--;
    u.state.runningQueries -= u.members.length;
    book.rejectUnit(u, reason, `the device refused the group: ${describeError(err)}`);
  }
}
