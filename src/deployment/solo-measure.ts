/**
 * Solo latencies of a model measured on a PRIVATE simulated device: a fresh `SimDevice` of the
 * same id and seed on its own virtual clock, holding only this model. What the cost fallback of
 * a model loaded at runtime is fitted to on `sim:` devices (`predict/unseen.ts`, docs/health.md
 * "Model state and model control"). It runs in simulated time (host CPU only, a few ms per group), so the serving device never
 * sees these groups and no served query waits for them. On a real device there is no such copy:
 * measuring there would overlap with the served groups, so the caller does not measure.
 */
import { VirtualClock } from '../clock/index.ts';
import type { Segment } from '../device/device.ts';
import { SimDevice } from '../device/sim/index.ts';
import type { ModelArtifact } from '../model/artifact.ts';
import type { GroupSlot } from '../predict/predictor.ts';
import type { SoloMeasurement } from '../predict/unseen.ts';
import { median } from '../stats.ts';

/** Timed runs per slot (the median is kept), after one warm-up run. */
const RUNS = 3;

/**
 * Run each of `slots` (of `model`) alone `RUNS` times on a private `SimDevice` `deviceId` seeded
 * with `seed`, after one warm-up run; the median `groupLatencyMs` of each (ms), in slot order.
 * @throws what `SimDevice.create` and `load` throw (an unknown device id, a model that does not
 *   fit the simulated memory); Error naming the segment when a run fails.
 */
export async function measureSoloOnSim(deviceId: string, seed: number, model: ModelArtifact, slots: readonly GroupSlot[]): Promise<SoloMeasurement[]> {
  const clock = new VirtualClock();
  const device = await SimDevice.create({ clock, id: deviceId, seed });
  const service = 'solo';
  const operators = model.spec.operators.length;
  const out: SoloMeasurement[] = [];
  let query = 0;
  try {
    await device.load([{ name: service, model }]);
    for (const slot of slots) {
      const runs: number[] = [];
      for (let r = 0; r <= RUNS; r++) {
        const segment: Segment = { service, queryId: `m${query++}`, start: slot.start, end: slot.end, batchSize: slot.batch, seqLen: slot.seqLen, input: { kind: 'synthetic', seed: query } };
        const pending = device.runGroup([segment]);
        await clock.run();
        const result = await pending;
        const failed = result.segments.find((x) => !x.ok);
        if (failed !== undefined && !failed.ok) throw new Error(`measuring ${model.spec.name} [${slot.start}, ${slot.end}) at batch ${slot.batch} on a private ${deviceId} failed: ${failed.error.message}`);
        if (slot.end < operators) await device.releaseQuery(service, segment.queryId);
        if (r > 0) runs.push(result.groupLatencyMs);
      }
      out.push({ start: slot.start, end: slot.end, batch: slot.batch, seqLen: slot.seqLen, latencyMs: median(runs) });
    }
  } finally {
    await device.close();
  }
  return out;
}
