/**
 * The continuous co-run limit: the physical reference of the batching experiments
 * (docs/batching.md "Without the group barrier"). Every service runs batches of its largest
 * feasible size back to back on its own executor (stream), all services at once, overlapped
 * continuously from the first batch to the last, with no scheduling, no queueing and no
 * deadline to meet — what a device does when it is never idle and never waits for a decision.
 * A scheduler serving equal shares of single-sample requests cannot beat it by more than what a
 * better phase alignment of the batches gains (on a device with an interference term a group
 * started together can run faster than two streams at random phases).
 *
 * Measured on a fresh noise-free `SimDevice` (virtual time): K batches per service submitted at
 * once, one segment per group, so each executor runs its K back to back; T_K = the time until
 * the last one ends. With equal shares the device serves n · B · K samples in T_K (the faster
 * service's stream idles once its K are done, as it would for lack of load):
 *
 *     coRunLimitQps = 1000 · n · B · K / T_K        (queries/s, one sample per query)
 *
 * One model alone measures 1.19× its saturation throughput on sim:a100 (resnet50, batch 16):
 * back to back on one executor the next batch's kernels are issued while the last one's drain,
 * which `saturationThroughput` (each batch a fresh group) does not credit.
 *
 * Largest feasible batch B: the largest size ≤ `maxBatch`, the same for every service, at which
 * every service's longest per-batch latency while co-running is ≤ half its QoS target (a query
 * that arrives just after a batch started waits one batch and then runs in the next).
 *
 * Unequal shares (`weights`): service i runs K_i = max(1, round(K · n · w_i / Σw)) batches, and
 * the limit is 1000 · B · Σ K_i / T.
 */
import { driveUntilSettled } from '../clock/drive.ts';
import { VirtualClock } from '../clock/virtual.ts';
import { SimDevice } from '../device/sim/index.ts';
import { artifactAt } from '../model/artifact.ts';
import type { ModelSpec } from '../model/spec.ts';

/** Batches per service in one measurement (K): enough that the start-up and the tail are a small part of T_K. */
export const CO_RUN_BATCHES = 32;

/** The co-run limit of one service mix at one batch size. */
export interface CoRunLimit {
  /** Samples per batch (B). */
  readonly batch: number;
  /** Queries/s (1000 · n · B · K / T_K). */
  readonly qps: number;
  /** The longest per-batch latency (from its start on the executor to its end) of any service while co-running, ms. */
  readonly maxBatchMs: number;
}

/** `batches[i]` batches of `batch` samples of model i, each model on its own executor, all submitted at once. */
async function coRunAt(deviceId: string, specs: readonly ModelSpec[], batch: number, seqLen: number, batches: readonly number[]): Promise<CoRunLimit & { readonly batchMs: readonly number[] }> {
  const clock = new VirtualClock();
  const device = await SimDevice.create({ clock, id: deviceId, noiseCv: 0 });
  try {
    const services = specs.map((spec, i) => ({ name: `${spec.name}#${i}`, model: artifactAt('/nonexistent', spec) }));
    await device.load(services);
    const runs = [];
    const most = Math.max(...batches);
    for (let k = 0; k < most; k++) {
      for (const [i, spec] of specs.entries()) {
        if (k >= batches[i]!) continue;
        const seq = spec.dynamicAxes.seq === undefined ? 0 : seqLen;
        runs.push(device.runGroup([{ service: services[i]!.name, queryId: `co-run-${i}-${k}`, start: 0, end: spec.operators.length, batchSize: batch, seqLen: seq, input: { kind: 'synthetic', seed: k } }]));
      }
    }
    const results = await driveUntilSettled(clock, Promise.all(runs));
    const batchMs = specs.map(() => 0);
    for (const r of results) {
      for (const s of r.segments) {
        if (!s.ok) throw new Error(`coRunLimit: ${specs.map((x) => x.name).join(' + ')} at batch ${batch} failed on ${deviceId}: ${s.error.message}`);
        const i = services.findIndex((x) => x.name === s.service);
        batchMs[i] = Math.max(batchMs[i]!, s.latencyMs);
      }
    }
    const totalMs = clock.now();
    const total = batches.reduce((a, b) => a + b, 0);
    return { batch, qps: (1000 * batch * total) / totalMs, maxBatchMs: Math.max(...batchMs), batchMs };
  } finally {
    await device.close();
  }
}

/**
 * The continuous co-run limit of `specs` with equal shares (module docs) at the largest feasible
 * batch ≤ `maxBatch` (batch 1 when none is feasible).
 * @throws RangeError for no models or a `maxBatch` that is not an integer ≥ 1; Error when the device fails a segment.
 */
export async function coRunLimit(
  deviceId: string,
  specs: readonly ModelSpec[],
  qosMs: number | readonly number[],
  maxBatch: number,
  seqLen: number,
  batches = CO_RUN_BATCHES,
  weights?: readonly number[],
): Promise<CoRunLimit> {
  if (specs.length === 0) throw new RangeError('coRunLimit needs at least one model');
  if (!Number.isInteger(maxBatch) || maxBatch < 1) throw new RangeError(`coRunLimit: maxBatch must be an integer ≥ 1, got ${maxBatch}`);
  const qos = typeof qosMs === 'number' ? specs.map(() => qosMs) : qosMs;
  const w = weights ?? specs.map(() => 1);
  const sum = w.reduce((a, b) => a + b, 0);
  // Batches per service in proportion to its share of the load (K each for equal shares).
  const counts = w.map((x) => Math.max(1, Math.round((batches * specs.length * x) / sum)));
  for (let b = maxBatch; b > 1; b--) {
    const at = await coRunAt(deviceId, specs, b, seqLen, counts);
    if (at.batchMs.every((ms, i) => 2 * ms <= qos[i]!)) return { batch: at.batch, qps: at.qps, maxBatchMs: at.maxBatchMs };
  }
  const one = await coRunAt(deviceId, specs, 1, seqLen, counts);
  return { batch: 1, qps: one.qps, maxBatchMs: one.maxBatchMs };
}
