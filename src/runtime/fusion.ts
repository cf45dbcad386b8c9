/**
 * Dynamic-batching fusion in the runtime (docs/design.md#dynamic-batching,
 * docs/scheduling-runtime.md): several waiting queries of one service made one device query, and
 * a fused batch the device refused split back into its members.
 *
 * Inputs: the units a launch segment names (`checkDecisionOf`, lead first) and the runtime's
 * `QueryBook`. Outputs: the book changed in place — the fused unit takes the lead's queue place
 * and the members' pendings (each with its row offset); an unfused batch's members stand alone
 * at operator 0 in the batch's place. Splitting a fused batch's outputs is the book's
 * (`QueryBook.completeUnit`).
 */
import type { WaitingQuery } from '../schedule/controller.ts';
import { concatBatch, sliceBatch } from '../tensor.ts';
import type { QueryBook } from './query-book.ts';
import { refreshView, type Pending, type Unit } from './units.ts';

/**
 * The unit a launch segment runs, from its `members`: the lead's own, or a new fused batch
 * (inputs concatenated along dim 0, id `<lead>+<others>@<groupIndex>`) replacing the lead in its
 * queue; the other members leave their queues.
 * @param groupIndex the index the group being launched will get (makes the batch's id unique).
 * @throws RangeError when the members' tensors cannot be concatenated (nothing changes then).
 */
export function fuseUnits(book: QueryBook, members: readonly Unit[], groupIndex: number): Unit {
  const lead = members[0]!;
  if (members.length === 1) return lead;
  const state = lead.state;
  const samples = members.reduce((n, u) => n + u.samples, 0);
  const inputs = lead.inputs === undefined ? undefined : concatBatch(members.map((u) => u.inputs!));
  const pendings: Pending[] = [];
  // A client may pick any id, also one that looks like a fused batch's: never take a pending one.
  let id = `${lead.id}+${members.length - 1}@${groupIndex}`;
  while (book.taken(id)) id += "'";
  const unit: Unit = { id, state, members: pendings, samples, seqLen: lead.seqLen, inputs, seed: lead.seed, fused: true, nextOperator: 0, inFlight: false, runEnd: 0, view: lead.view };
  let offset = 0;
  for (const u of members) {
    for (const p of u.members) {
      p.unit = unit;
      p.offset = offset;
      pendings.push(p);
    }
    offset += u.samples;
    book.units.delete(u.id);
    if (u !== lead) book.removeFromQueue(u);
  }
  const i = state.queue.indexOf(lead);
  state.queue[i] = unit;
  book.units.set(id, unit);
  refreshView(unit);
  return unit;
}

/**
 * Split a fused batch whose segment the device refused back into its live members, each a
 * unit alone at operator 0 in the batch's queue place, never fused again (its view has no
 * `batching`), so that only a member whose own inputs the device refuses fails. A member
 * cancelled while the group ran ends `cancelled` now; the batch's kept device state is released.
 */
export function unfuse(book: QueryBook, u: Unit): void {
  for (const p of [...u.members]) if (p.endAfterGroup !== undefined) book.reject(p, p.endAfterGroup.reason, p.endAfterGroup.message);
  if (u.members.length === 0) return; // the last member's leaving ended the unit and released its state
  const state = u.state;
  const at = state.queue.indexOf(u);
  book.units.delete(u.id);
  if (at >= 0) {
    state.queue.splice(at, 1);
    state.views.splice(at, 1);
  }
  if (u.nextOperator > 0) book.release(u);
  const solo: Unit[] = [];
  for (const p of u.members) {
    const { record } = p;
    const view: WaitingQuery = { id: record.id, service: record.service, model: u.view.model, operators: u.view.operators, nextOperator: 0, batch: record.batch, seqLen: record.seqLen, arrivalMs: record.arrivalMs, qosTargetMs: record.qosTargetMs };
    const unit: Unit = { id: record.id, state, members: [p], samples: record.batch, seqLen: record.seqLen, inputs: u.inputs === undefined ? undefined : sliceBatch(u.inputs, p.offset, record.batch), seed: u.seed, fused: false, nextOperator: 0, inFlight: false, runEnd: 0, view };
    p.unit = unit;
    p.offset = 0;
    delete record.runBatch;
    book.units.set(unit.id, unit);
    solo.push(unit);
  }
  const i = at >= 0 ? at : state.queue.length;
  state.queue.splice(i, 0, ...solo);
  state.views.splice(i, 0, ...solo.map((s) => s.view));
}
