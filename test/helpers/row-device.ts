/**
 * The scripted batching fixture of the runtime's dynamic-batching tests (`runtime-batching*.test.ts`):
 * a small resnet50, inputs whose every row is recognizable, a device (`RowDevice`) whose output
 * rows are a known function of its input rows, and a runtime on a VirtualClock with the scripted
 * fusing controller of `fusing-controller.ts`.
 */
import path from 'node:path';
import { afterAll, beforeAll, expect } from 'vitest';
import { driveUntilSettled, VirtualClock } from '../../src/clock/index.ts';
import type { Device, DeviceService, GroupResult, Segment, SegmentResult } from '../../src/device/device.ts';
import { BadRequestError, DeviceFailureError } from '../../src/errors.ts';
import { ModelRepository } from '../../src/model/repository.ts';
import type { ModelSpec } from '../../src/model/spec.ts';
import type { BatchingLimits, QueryController } from '../../src/schedule/controller.ts';
import { ServingRuntime, type QueryOutcome, type RuntimeService } from '../../src/runtime/runtime.ts';
import type { HostTensor, TensorMap } from '../../src/tensor.ts';
import { makeFixtureDir } from '../fixtures/tiny-models.ts';
import { fusingController, type FusingControllerOptions } from './fusing-controller.ts';
import { SMALL_VARIANTS } from './small-variants.ts';
export const LIMITS: BatchingLimits = { maxBatchSize: 8, maxQueueDelayMs: 0, preferredBatchSizes: [] };
/** Clock time one scripted group takes, ms. */
export const GROUP_MS = 5;
/** Elements per sample of the small resnet50 input [batch, 3, 32, 32]. */
export const SAMPLE = 3 * 32 * 32;
/** Classes of the small variant's `logits` [batch, 10]. */
export const CLASSES = 10;

/** The small resnet50 every helper here runs (18 operators, input [batch, 3, 32, 32] float32, logits [batch, 10]); loaded by `useSmallResnet`. */
let loaded: ModelSpec | undefined;

/** The small resnet50 of the calling test file: registers its loading (beforeAll) and cleanup (afterAll). */
export function useSmallResnet(): { readonly spec: ModelSpec; readonly operators: number } {
  let fixture: { dir: string; cleanup: () => Promise<void> } | undefined;
  beforeAll(async () => {
    fixture = await makeFixtureDir('abacus-rt-batch-');
    loaded = await new ModelRepository({ cacheDir: path.join(fixture.dir, 'cache') }).zooSpec('resnet50', SMALL_VARIANTS.resnet50);
  }, 60_000);
  afterAll(async () => fixture?.cleanup());
  return { get spec() { return specOf(); }, get operators() { return specOf().operators.length; } };
}

function specOf(): ModelSpec {
  if (loaded === undefined) throw new Error('useSmallResnet: the model is loaded in beforeAll; use it inside a test');
  return loaded;
}

/**
 * Input of query number `k`, `batch` samples: element j of sample r is `k·100000 + r·10000 + j`
 * (exact in float32 for j < 3072), so every row of every query is distinct and recognizable.
 */
export function inputOf(k: number, batch = 1): TensorMap {
  const data = new Float32Array(batch * SAMPLE);
  for (let r = 0; r < batch; r++) for (let j = 0; j < SAMPLE; j++) data[r * SAMPLE + j] = k * 100_000 + r * 10_000 + j;
  return { input: { dataType: 'float32', dims: [batch, 3, 32, 32], data } };
}

/**
 * `RowDevice`'s model: logits[r, c] = input[r, c] + 0.5·c for each row r — a row's outputs
 * depend on that row only, so a member's outputs are right iff it got its own rows back.
 */
export function logitsOf(x: HostTensor): HostTensor {
  const rows = x.dims[0]!;
  const per = x.data.length / rows;
  const data = new Float32Array(rows * CLASSES);
  for (let r = 0; r < rows; r++) for (let c = 0; c < CLASSES; c++) data[r * CLASSES + c] = (x.data as Float32Array)[r * per + c]! + 0.5 * c;
  return { dataType: 'float32', dims: [rows, CLASSES], data };
}

/**
 * A scripted device: each group takes `GROUP_MS` of clock time; it keeps each query's input
 * rows between segments (resume needs state at exactly `start`, as a real device), answers the
 * last segment with `logitsOf(rows)`, and fails the segments `fail` picks.
 */
export class RowDevice implements Device {
  readonly id = 'rows';
  /** Every group it was asked to run (segments as given). */
  readonly groups: Segment[][] = [];
  readonly released: string[] = [];
  readonly kept = new Map<string, { next: number; x: HostTensor | undefined }>();
  fail: ((s: Segment) => boolean) | undefined;
  /** Reject the whole `runGroup` (as a device that is gone) when this picks a segment. */
  throwOn: ((s: Segment) => boolean) | undefined;
  /**
   * Answer a 'tensors' segment `bad_request` when a row's first element is ≥ this (as
   * onnxruntime refuses a token id beyond BERT's vocabulary): a value only the device checks.
   */
  refuseRowsFrom: number | undefined;
  constructor(private readonly clock: VirtualClock) {}
  load(_services: readonly DeviceService[]): Promise<void> {
    return Promise.resolve();
  }
  async runGroup(group: readonly Segment[]): Promise<GroupResult> {
    this.groups.push([...group]);
    if (group.some((s) => this.throwOn?.(s) === true)) throw new DeviceFailureError('scripted: the device is gone');
    await this.clock.sleep(GROUP_MS);
    const segments = group.map((s): SegmentResult => {
      const fail = (error: DeviceFailureError | BadRequestError): SegmentResult => {
        this.kept.delete(s.queryId);
        return { ok: false, queryId: s.queryId, service: s.service, error };
      };
      if (this.fail?.(s) === true) return fail(new DeviceFailureError(`scripted failure of ${s.queryId} [${s.start}, ${s.end})`));
      let x: HostTensor | undefined;
      if (s.input.kind === 'resume') {
        const k = this.kept.get(s.queryId);
        if (k?.next !== s.start) return fail(new BadRequestError(`no state of ${s.queryId} at operator ${s.start}`));
        x = k.x;
      } else if (s.input.kind === 'tensors') {
        x = s.input.tensors['input'];
        if (x?.dims[0] !== s.batchSize) return fail(new BadRequestError(`${s.queryId}: input rows ${String(x?.dims[0])} ≠ batchSize ${s.batchSize}`));
        const from = this.refuseRowsFrom;
        const bad = from === undefined ? -1 : [...Array(s.batchSize).keys()].find((r) => (x!.data as Float32Array)[r * SAMPLE]! >= from) ?? -1;
        if (bad >= 0) return fail(new BadRequestError(`value ${(x.data as Float32Array)[bad * SAMPLE]} out of range`));
      }
      if (s.end < specOf().operators.length) {
        this.kept.set(s.queryId, { next: s.end, x });
        return { ok: true, queryId: s.queryId, service: s.service, latencyMs: GROUP_MS };
      }
      this.kept.delete(s.queryId);
      const logits = x === undefined ? { dataType: 'float32' as const, dims: [s.batchSize, CLASSES], data: new Float32Array(s.batchSize * CLASSES) } : logitsOf(x);
      return { ok: true, queryId: s.queryId, service: s.service, latencyMs: GROUP_MS, outputs: { logits } };
    });
    return { groupLatencyMs: GROUP_MS, segments };
  }
  releaseQuery(_service: string, queryId: string): Promise<void> {
    this.released.push(queryId);
    this.kept.delete(queryId);
    return Promise.resolve();
  }
  close(): Promise<void> {
    return Promise.resolve();
  }
}

/**
 * A runtime serving the small resnet50 as service 'a' (batching `LIMITS`, QoS 1000 ms) and, when
 * asked, 'plain' without batching, on a `RowDevice`, with the scripted fusing controller held
 * until t = 1 ms so that everything submitted at t = 0 is fused in one batch.
 */
export function setup(options: FusingControllerOptions = {}, extra: { qosTargetMs?: number; controller?: QueryController } = {}) {
  const clock = new VirtualClock();
  const device = new RowDevice(clock);
  const controller = fusingController({ gate: ({ nowMs }) => (nowMs < 1 ? 1 : undefined), ...options });
  const services: RuntimeService[] = [
    { name: 'a', spec: specOf(), qosTargetMs: extra.qosTargetMs ?? 1000, maxQueueLength: 100, batching: LIMITS },
    { name: 'plain', spec: specOf(), qosTargetMs: 1000, maxQueueLength: 100 },
  ];
  const runtime = new ServingRuntime({ clock, device, controller: extra.controller ?? controller, services });
  return { clock, device, controller, runtime };
}

/** Submit query `k` of service 'a' with its own input (`inputOf(k)`), id `a<k>`. */
export function submitA(runtime: ServingRuntime, k: number, more: { qosTargetMs?: number; arrivalMs?: number; batch?: number } = {}): Promise<QueryOutcome> {
  return runtime.submit({ service: 'a', batch: more.batch ?? 1, id: `a${k}`, inputs: inputOf(k, more.batch ?? 1), ...more });
}

/** The member's logits must be exactly `logitsOf` its own input (copies and + 0.5·c are exact in float32). */
export function expectOwnRows(o: QueryOutcome, k: number, batch = 1): void {
  expect(o.ok, o.ok ? '' : `${o.reason}: ${o.message}`).toBe(true);
  if (!o.ok) return;
  const got = o.outputs['logits']!;
  const want = logitsOf(inputOf(k, batch)['input']!);
  expect(got.dims).toEqual(want.dims);
  expect([...(got.data as Float32Array)]).toEqual([...(want.data as Float32Array)]);
}

/** Drive the clock to time `ms` (every timer due by then fires). */
export async function advanceTo(clock: VirtualClock, ms: number): Promise<void> {
  await driveUntilSettled(clock, clock.sleep(ms - clock.now()));
}
