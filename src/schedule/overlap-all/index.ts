/**
 * Uncontrolled overlap: what MPS, several CUDA streams or Triton instance groups do — every
 * query is launched the moment it is seen, whole, alongside whatever already runs. The
 * unpredictable baseline: the Abacus paper (SC'21) motivates deterministic overlap with the
 * tail latency of co-located services under such random overlap.
 */
import type { Decision, LaunchSegment, QueryController, ScheduleInput } from '../controller.ts';
import { checkInput, checkQuery } from '../heads.ts';

const NO_STATS = Object.freeze({ predictorCalls: 0, groupsScored: 0, searchRounds: 0, soloMemoHits: 0 });

/**
 * overlap-all. `launchWhileBusy` is true: the runtime calls `decide` on every arrival and
 * launches the group at once, even while other groups run. Each decision launches EVERY query
 * of every queue (queue order, FIFO within a service) from its `nextOperator` to its last
 * operator; it never predicts, never rejects, ignores `runningRemainingMs` and feedback.
 * Several queries of one service in one group run one after the other on the device (the
 * Device contract), so within a service this is FIFO; across services everything overlaps.
 */
export class OverlapAllController implements QueryController {
  readonly policy = 'overlap-all';
  readonly launchWhileBusy = true;

  decide(input: ScheduleInput): Decision {
    checkInput(input);
    const group: LaunchSegment[] = [];
    for (const queue of input.queues) {
      for (const q of queue) {
        checkQuery(q);
        group.push({ queryId: q.id, service: q.service, start: q.nextOperator, end: q.operators });
      }
    }
    return { group, rejected: [], stats: NO_STATS };
  }

  observe(): void {
    // No control, nothing to learn.
  }
}
