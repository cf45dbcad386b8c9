/**
 * `maxQueueLength` counts the queries that wait, not the one whose segment runs (docs/overload.md
 * "Overload and admission"): on a VirtualClock with a device that takes a fixed time per group, a service with
 * maxQueueLength 2 holds one running query plus two waiting ones; the fourth arrival is
 * `overloaded`, and once the running one finished a new arrival fits again.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { driveUntilSettled, VirtualClock } from '../src/clock/index.ts';
import type { Device, DeviceService, GroupResult, Segment } from '../src/device/device.ts';
import { ModelRepository } from '../src/model/repository.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import { createController } from '../src/schedule/index.ts';
import { ServingRuntime } from '../src/runtime/runtime.ts';
import { fixedPredictor } from './helpers/fixed-predictor.ts';

const GROUP_MS = 10;

let spec: ModelSpec;
beforeAll(async () => {
  spec = await new ModelRepository().zooSpec('resnet50');
}, 60_000);

/** Every group takes `GROUP_MS` on the clock. */
class FixedDevice implements Device {
  readonly id = 'fixed';
  constructor(private readonly clock: VirtualClock) {}
  load(_services: readonly DeviceService[]): Promise<void> {
    return Promise.resolve();
  }
  async runGroup(group: readonly Segment[]): Promise<GroupResult> {
    await this.clock.sleep(GROUP_MS);
    return { groupLatencyMs: GROUP_MS, segments: group.map((s) => ({ ok: true as const, queryId: s.queryId, service: s.service, latencyMs: GROUP_MS, outputs: {} })) };
  }
  releaseQuery(): Promise<void> {
    return Promise.resolve();
  }
  close(): Promise<void> {
    return Promise.resolve();
  }
}

describe('maxQueueLength', () => {
  it.each(['fcfs', 'abacus'])('%s: counts waiting queries only, not the running one', async (policy) => {
    const clock = new VirtualClock();
    const predictor = fixedPredictor([spec.name], 1);
    const runtime = new ServingRuntime({ clock, device: new FixedDevice(clock), controller: createController(policy, {}, predictor), services: [{ name: 's', spec, qosTargetMs: 100_000, maxQueueLength: 2 }] });
    const a = runtime.submit({ service: 's', batch: 1, id: 'a' });
    await driveUntilSettled(clock, clock.sleep(1)); // a's first group runs
    expect(runtime.groups.length).toBeGreaterThan(0);
    const b = runtime.submit({ service: 's', batch: 1, id: 'b' });
    const c = runtime.submit({ service: 's', batch: 1, id: 'c' });
    const d = runtime.submit({ service: 's', batch: 1, id: 'd' });
    const dOutcome = await d;
    expect(dOutcome.ok ? 'ok' : [dOutcome.reason, dOutcome.message]).toEqual(['overloaded', "service 's' has 2 queries waiting (maxQueueLength 2)"]);
    const done = await driveUntilSettled(clock, Promise.all([a, b, c]));
    expect(done.map((o) => (o.ok ? 'ok' : o.reason))).toEqual(['ok', 'ok', 'ok']);
    // drained: a new arrival is admitted
    const e = await driveUntilSettled(clock, runtime.submit({ service: 's', batch: 1, id: 'e' }));
    expect(e.ok).toBe(true);
  });
});
