/**
 * Open-loop load against a running inference server (`abacus bench --target URL`): the same
 * arrival processes and load generator as the in-process bench (`workload/`), queries sent with
 * an `InferenceClient`, and the same statistics (`runtime/stats.ts`), computed from client-side
 * records.
 *
 * - Each query goes to the v2 model named like its service (`service.name`), with seeded
 *   synthetic inputs (`model/synthetic.ts`) shaped from the service's model spec at the drawn
 *   batch size and sequence length (cached per shape; seq models also get parameter `seq_len`).
 * - Arrival = the generator's intended send time; end = when the answer arrived; latency is
 *   therefore end to end as the client sees it (serialization and network included), and
 *   `qosTargetMs` is the bench's service target (sent as `qos_ms` only with `sendQos`).
 * - Outcomes: success → completed; a failure → rejected with the failure's code as the reason
 *   (qos_violation, overloaded, device_failure, bad_request as in-process, and for a server also
 *   not_ready, model_not_found, internal, transport).
 */
import type { Clock } from '../../clock/clock.ts';
import { resolvedBoundary } from '../../model/boundary.ts';
import type { ModelSpec } from '../../model/spec.ts';
import { syntheticTensors } from '../../model/synthetic.ts';
import { StatsCollector, type ServingStats } from '../../runtime/stats.ts';
import { checkLoad, serviceLoads } from '../../runtime/experiment.ts';
import type { QueryRecord, RejectionReason } from '../../runtime/records.ts';
import type { TensorMap } from '../../tensor.ts';
import { poissonArrivals, type ArrivalProcess } from '../../workload/arrivals.ts';
import { LoadGenerator, type GeneratorReport } from '../../workload/generator.ts';
import type { ClientInferResult, InferenceClient } from './client.ts';

/** One service as the load driver sees it. */
export interface RemoteBenchService {
  /** Service name = the model name on the server. */
  readonly name: string;
  /** The model's spec, for input names, types and shapes. */
  readonly spec: ModelSpec;
  /** QoS target the statistics judge against, ms. */
  readonly qosTargetMs: number;
  readonly batchSizes: readonly number[];
  /** Sequence lengths (sequence models only). */
  readonly seqLens?: readonly number[];
  /** Share of the load (default 1). */
  readonly weight?: number;
}

export interface RemoteBenchOptions {
  readonly client: InferenceClient;
  /** Wall clock (the generator's timers and the records' times). */
  readonly clock: Clock;
  readonly services: readonly RemoteBenchService[];
  /** Total offered load over all services, queries/s (> 0). */
  readonly rateQps: number;
  /** Queries to send (integer ≥ 1). */
  readonly queries: number;
  readonly seed: number;
  /** Arrival process for a rate (default Poisson). */
  readonly arrivals?: (rateQps: number) => ArrivalProcess;
  /** Send each service's target as the request's `qos_ms` (default false: the server's targets apply). */
  readonly sendQos?: boolean;
}

export interface RemoteBenchResult {
  readonly rateQps: number;
  readonly overall: ServingStats;
  readonly services: readonly ({ readonly service: string } & ServingStats)[];
  readonly generator: GeneratorReport;
  /** Means over completed queries of the server's `queue_ms`, `compute_ms` (ms) and `operator_groups`; NaN when none reported. */
  readonly server: { readonly queueMs: number; readonly computeMs: number; readonly operatorGroups: number };
  /** Up to 5 distinct failure messages by code, for diagnostics. */
  readonly failureSamples: Readonly<Record<string, readonly string[]>>;
}

/** Running mean of a numeric server parameter. */
class Mean {
  private sum = 0;
  private n = 0;
  add(value: unknown): void {
    if (typeof value === 'number' && Number.isFinite(value)) {
      this.sum += value;
      this.n++;
    }
  }
  get value(): number {
    return this.n === 0 ? Number.NaN : this.sum / this.n;
  }
}

/**
 * Run one open-loop load to completion (every query answered or failed).
 * @throws RangeError for a bad rate, query count or service list.
 */
export async function runRemoteBench(options: RemoteBenchOptions): Promise<RemoteBenchResult> {
  checkLoad(options.rateQps, options.queries);
  const { clock, client } = options;
  const byName = new Map(options.services.map((s) => [s.name, s]));
  const inputsCache = new Map<string, TensorMap>();
  const inputsFor = (service: RemoteBenchService, batch: number, seqLen: number): TensorMap => {
    const key = `${service.name}\u0000${batch}\u0000${seqLen}`;
    let inputs = inputsCache.get(key);
    if (inputs === undefined) {
      inputs = syntheticTensors(resolvedBoundary(service.spec, 0, batch, seqLen), 1);
      inputsCache.set(key, inputs);
    }
    return inputs;
  };
  const overall = new StatsCollector();
  const perService = new Map(options.services.map((s) => [s.name, new StatsCollector()]));
  const queue = new Mean();
  const compute = new Mean();
  const groups = new Mean();
  const failureSamples: Record<string, string[]> = {};
  const generator = new LoadGenerator({ clock, arrivals: (options.arrivals ?? poissonArrivals)(options.rateQps), services: serviceLoads(options.services), seed: options.seed, maxQueries: options.queries });
  const finish = (record: QueryRecord, result: ClientInferResult): void => {
    record.endMs = clock.now();
    if (result.ok) {
      record.outcome = 'completed';
      queue.add(result.serverParameters['queue_ms']);
      compute.add(result.serverParameters['compute_ms']);
      groups.add(result.serverParameters['operator_groups']);
    } else {
      record.outcome = 'rejected';
      // The stats key rejections by this string; a server adds codes the runtime never produces.
      record.reason = result.code as RejectionReason;
      record.detail = result.message;
      const samples = (failureSamples[result.code] ??= []);
      if (samples.length < 5 && !samples.includes(result.message)) samples.push(result.message);
    }
    overall.add(record);
    perService.get(record.service)?.add(record);
  };
  const answered: Promise<void>[] = [];
  const report = await generator.run((q) => {
    const service = byName.get(q.service)!;
    const record: QueryRecord = { id: `q${q.index}`, service: q.service, arrivalMs: q.arrivalMs, batch: q.batch, seqLen: q.seqLen, qosTargetMs: service.qosTargetMs, groups: [], outcome: 'pending' };
    let pending: Promise<ClientInferResult>;
    try {
      pending = client.infer({
        model: service.name,
        inputs: inputsFor(service, q.batch, q.seqLen),
        id: record.id,
        ...(options.sendQos === true ? { qosMs: service.qosTargetMs } : {}),
        ...(q.seqLen > 0 ? { parameters: { seq_len: q.seqLen } } : {}),
      });
    } catch (error) {
      pending = Promise.resolve({ ok: false, status: 0, code: 'bad_request', message: `cannot build the inputs: ${error instanceof Error ? error.message : String(error)}` });
    }
    answered.push(pending.then((result) => finish(record, result)));
  });
  await Promise.all(answered);
  const span = overall.spanMs;
  return {
    rateQps: options.rateQps,
    overall: overall.stats(span),
    services: options.services.map((s) => ({ service: s.name, ...perService.get(s.name)!.stats(span) })),
    generator: report,
    server: { queueMs: queue.value, computeMs: compute.value, operatorGroups: groups.value },
    failureSamples,
  };
}
