/**
 * The client side of `npm run bench -- --only overload`, run as its own process so that the
 * clients never share an event loop with the server: `node --import tsx bench/overload-client.ts
 * '<JSON ClientSpec>'` prints one JSON `ClientResult` on stdout.
 *
 * Requests are encoded once per service (all-ones tensors at batch 1, dynamic dims from
 * `dynamicDim`) and re-sent as the same bytes, so the client's own cost per request is small:
 * - `http-json`: KServe v2 JSON body, JSON outputs;
 * - `http-binary`: binary tensor data extension both ways (`binary_data_output`);
 * - `grpc`: `ModelInfer` with `raw_input_contents`, the message serialized once per service and
 *   sent as those bytes through grpc-js (`makeUnaryRequest` with identity serializers), the
 *   answer's status read and its message left undecoded. The channel's HTTP/2 receive window is
 *   16 MiB (`grpc-node.flow_control_window`): grpc-js keeps node's 64 KiB otherwise, and every
 *   answer on the connection then waits for window updates from this busy event loop (a bert
 *   output is 96 KiB); C-core clients such as tritonclient.grpc size theirs by BDP probing.
 *   With 64 KiB, on `examples/serve-sim4.yaml` at 10× the answers within QoS fell to almost none
 *   while the server had answered them within 20–90 ms.
 *
 * Load: `closed` keeps `inFlight` requests outstanding for `durationMs`; `open` sends Poisson
 * arrivals at `rateQps` for `durationMs` (seeded), each at its intended time. Latency runs from
 * the intended send time (open) or the send (closed) to the answer, so a client that falls
 * behind counts against the server as a real user would see it. After the last send it waits
 * up to `timeoutMs` for the answers; a request without one is counted under status `none`.
 */
import http from 'node:http';
import { performance } from 'node:perf_hooks';
import seedrandom from 'seedrandom';
import * as grpc from '@grpc/grpc-js';
import { nearestRank } from '../src/runtime/stats.ts';
import { loadInferenceService, type ModelInferRequestMessage } from '../src/serve/grpc/proto.ts';
import { MODEL_INFER_PATH } from '../src/serve/grpc/shed-interceptor.ts';

export type OverloadProtocol = 'http-json' | 'http-binary' | 'grpc';

export interface ClientService {
  readonly name: string;
  readonly qosTargetMs: number;
  /** From the model's metadata: `-1` dims are filled with 1 (batch, dim 0) or `dynamicDim`. */
  readonly inputs: readonly { readonly name: string; readonly datatype: string; readonly shape: readonly number[] }[];
}

export interface ClientSpec {
  readonly httpUrl: string;
  readonly grpcAddress: string;
  readonly protocol: OverloadProtocol;
  readonly services: readonly ClientService[];
  readonly load: { readonly kind: 'closed'; readonly inFlight: number } | { readonly kind: 'open'; readonly rateQps: number };
  readonly durationMs: number;
  readonly timeoutMs: number;
  readonly seed: number;
  /** Size of every other dynamic dim (a sequence length) [32]. */
  readonly dynamicDim?: number;
}

export interface ClientResult {
  readonly sent: number;
  /** Answered with 200 within its service's QoS target. */
  readonly withinQos: number;
  /** Answers by HTTP status (gRPC: `OK` or the status name), plus `none` (no answer in time) and `error` (socket error). */
  readonly byStatus: Readonly<Record<string, number>>;
  /** Latency of the 200 answers, ms: median and p99 (nearest rank; NaN when none). */
  readonly okLatencyMs: Quantiles;
  /** Latency of every answer, whatever its status (a shed request's too), ms. */
  readonly answeredLatencyMs: Quantiles;
  /** The same latencies ÷ their service's QoS target (≤ 1: within it). */
  readonly okLatencyOverQos: Quantiles;
  /**
   * HTTP, the 200 answers: intended send time → the request's last byte handed to the kernel
   * (`transmitMs`: the client's own lag and the transport's backpressure) and from there → the
   * answer (`answerMs`), ms.
   */
  readonly transmitMs: Quantiles;
  readonly answerMs: Quantiles;
  /** The first error message seen for each non-OK gRPC status (what the client library said). */
  readonly detailsByStatus: Readonly<Record<string, string>>;
  /** How late the client sent behind the intended times (open loop), ms: max. */
  readonly maxSendLagMs: number;
  /** Seconds the load ran (first send to last send). */
  readonly elapsedS: number;
  /** CPU time of this client process from its first send to its last answer, ms (user + system, `process.cpuUsage`). */
  readonly cpuMs: number;
  /** The latencies behind the quantiles, ms, to merge the results of several client processes (`mergeResults`). */
  readonly samples: { readonly okMs: readonly number[]; readonly okOverQos: readonly number[]; readonly answeredMs: readonly number[]; readonly transmitMs: readonly number[]; readonly answerMs: readonly number[] };
}

/** One result of client processes that ran side by side over the same period (counts summed, quantiles of all their samples). */
export function mergeResults(rs: readonly ClientResult[]): ClientResult {
  if (rs.length === 1) return rs[0]!;
  const byStatus: Record<string, number> = {};
  const detailsByStatus: Record<string, string> = {};
  for (const r of rs) {
    for (const [k, n] of Object.entries(r.byStatus)) byStatus[k] = (byStatus[k] ?? 0) + n;
    for (const [k, d] of Object.entries(r.detailsByStatus)) detailsByStatus[k] ??= d;
  }
  const all = (k: keyof ClientResult['samples']): number[] => rs.flatMap((r) => r.samples[k]);
  const samples = { okMs: all('okMs'), okOverQos: all('okOverQos'), answeredMs: all('answeredMs'), transmitMs: all('transmitMs'), answerMs: all('answerMs') };
  const sum = (f: (r: ClientResult) => number): number => rs.reduce((a, r) => a + f(r), 0);
  return {
    sent: sum((r) => r.sent),
    withinQos: sum((r) => r.withinQos),
    byStatus,
    okLatencyMs: quantiles(samples.okMs),
    answeredLatencyMs: quantiles(samples.answeredMs),
    okLatencyOverQos: quantiles(samples.okOverQos),
    transmitMs: quantiles(samples.transmitMs),
    answerMs: quantiles(samples.answerMs),
    detailsByStatus,
    maxSendLagMs: Math.max(...rs.map((r) => r.maxSendLagMs)),
    elapsedS: Math.max(...rs.map((r) => r.elapsedS)),
    cpuMs: sum((r) => r.cpuMs),
    samples,
  };
}

export interface Quantiles {
  readonly p50: number;
  readonly p99: number;
  readonly n: number;
}

function quantiles(xs: readonly number[]): Quantiles {
  const sorted = Float64Array.from(xs).sort();
  return sorted.length === 0 ? { p50: NaN, p99: NaN, n: 0 } : { p50: nearestRank(sorted, 50), p99: nearestRank(sorted, 99), n: sorted.length };
}

const BYTES: Readonly<Record<string, number>> = { FP32: 4, INT64: 8, INT32: 4, FP16: 2, UINT8: 1, INT8: 1, BOOL: 1, FP64: 8, INT16: 2 };

interface Prepared {
  readonly service: ClientService;
  readonly path: string;
  readonly jsonBody: Buffer;
  readonly binaryBody: Buffer;
  readonly binaryHeaderLength: number;
  /** The serialized `ModelInferRequest` message. */
  readonly grpcMessage: Buffer;
}

function prepare(s: ClientService, dynamicDim: number, serializeInfer: (message: ModelInferRequestMessage) => Buffer): Prepared {
  const shaped = s.inputs.map((i) => ({ ...i, shape: i.shape.map((d, k) => (d >= 0 ? d : k === 0 ? 1 : dynamicDim)) }));
  const count = (shape: readonly number[]): number => shape.reduce((a, b) => a * b, 1);
  const jsonBody = Buffer.from(JSON.stringify({ inputs: shaped.map((i) => ({ name: i.name, datatype: i.datatype, shape: i.shape, data: new Array<number>(count(i.shape)).fill(1) })) }));
  const raws = shaped.map((i) => rawOnes(i.datatype, count(i.shape)));
  const header = Buffer.from(JSON.stringify({ inputs: shaped.map((i, k) => ({ name: i.name, datatype: i.datatype, shape: i.shape, parameters: { binary_data_size: raws[k]!.byteLength } })), parameters: { binary_data_output: true } }));
  const message: ModelInferRequestMessage = { model_name: s.name, inputs: shaped.map((i) => ({ name: i.name, datatype: i.datatype, shape: i.shape })), raw_input_contents: raws };
  const grpcMessage = serializeInfer(message);
  return { service: s, path: `/v2/models/${encodeURIComponent(s.name)}/infer`, jsonBody, binaryBody: Buffer.concat([header, ...raws]), binaryHeaderLength: header.byteLength, grpcMessage };
}

function rawOnes(datatype: string, n: number): Buffer {
  const size = BYTES[datatype];
  if (size === undefined) throw new Error(`overload client: datatype ${datatype} is not supported`);
  const b = Buffer.alloc(n * size);
  for (let i = 0; i < n; i++) {
    if (datatype === 'FP32') b.writeFloatLE(1, i * 4);
    else if (datatype === 'INT64') b.writeBigInt64LE(1n, i * 8);
    else if (datatype === 'INT32') b.writeInt32LE(1, i * 4);
    else if (datatype === 'FP64') b.writeDoubleLE(1, i * 8);
    else if (datatype === 'FP16') b.writeUInt16LE(0x3c00, i * 2);
    else b.writeUInt8(1, i * size);
  }
  return b;
}

export async function runClient(spec: ClientSpec): Promise<ClientResult> {
  const serializeInfer = loadInferenceService().definition['ModelInfer']!.requestSerialize as (message: ModelInferRequestMessage) => Buffer;
  const prepared = spec.services.map((s) => prepare(s, spec.dynamicDim ?? 32, serializeInfer));
  const url = new URL(spec.httpUrl);
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
  const channel = spec.protocol === 'grpc' ? new grpc.Client(spec.grpcAddress, grpc.credentials.createInsecure(), { 'grpc.max_receive_message_length': 64 << 20, 'grpc.max_send_message_length': 64 << 20, 'grpc-node.flow_control_window': 16 << 20 }) : undefined;
  const byStatus: Record<string, number> = {};
  const ok: number[] = [];
  const answered: number[] = [];
  const okOverQos: number[] = [];
  const transmitMs: number[] = [];
  const answerMs: number[] = [];
  const detailsByStatus: Record<string, string> = {};
  let withinQos = 0;
  let sent = 0;
  const count = (status: string): void => {
    byStatus[status] = (byStatus[status] ?? 0) + 1;
  };
  /** Send one request; resolves when it is answered (or given up). */
  const send = (p: Prepared, startMs: number): Promise<void> => {
    sent++;
    const done = (status: string): void => {
      count(status);
      if (status !== 'none') answered.push(performance.now() - startMs);
      if (status === '200' || status === 'OK') {
        const latencyMs = performance.now() - startMs;
        ok.push(latencyMs);
        okOverQos.push(latencyMs / p.service.qosTargetMs);
        if (latencyMs <= p.service.qosTargetMs) withinQos++;
      }
    };
    if (channel !== undefined) {
      return new Promise<void>((resolve) => {
        const identity = (b: Buffer): Buffer => b;
        channel.makeUnaryRequest(MODEL_INFER_PATH, identity, identity, p.grpcMessage, new grpc.Metadata(), { deadline: Date.now() + spec.timeoutMs }, (error) => {
          // the client's own deadline ("Deadline exceeded after …") is no answer; the server's qos_violation is DEADLINE_EXCEEDED with its reason
          const status = error === null ? 'OK' : error.code === grpc.status.DEADLINE_EXCEEDED && /^Deadline exceeded/.test(error.details) ? 'none' : `grpc ${error.code}`;
          if (error !== null) detailsByStatus[status] ??= error.details;
          done(status);
          resolve();
        });
      });
    }
    const binary = spec.protocol === 'http-binary';
    const body = binary ? p.binaryBody : p.jsonBody;
    const headers: http.OutgoingHttpHeaders = { 'content-type': binary ? 'application/octet-stream' : 'application/json', 'content-length': body.byteLength };
    if (binary) headers['inference-header-content-length'] = p.binaryHeaderLength;
    return new Promise<void>((resolve) => {
      let settled = false;
      let flushedMs: number | undefined;
      const settle = (status: string): void => {
        if (settled) return;
        settled = true;
        done(status);
        if (status === '200' && flushedMs !== undefined) {
          transmitMs.push(flushedMs - startMs);
          answerMs.push(performance.now() - flushedMs);
        }
        resolve();
      };
      const req = http.request({ host: url.hostname, port: url.port, path: p.path, method: 'POST', agent, headers, timeout: spec.timeoutMs }, (res) => {
        res.resume();
        res.on('end', () => settle(String(res.statusCode)));
        res.on('error', () => settle('error'));
      });
      req.on('timeout', () => {
        req.destroy();
        settle('none');
      });
      req.on('error', () => settle('error'));
      req.on('finish', () => (flushedMs = performance.now()));
      req.end(body);
    });
  };
  const rng = seedrandom(String(spec.seed));
  const pick = (): Prepared => prepared[Math.floor(rng() * prepared.length)]!;
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const endMs = t0 + spec.durationMs;
  const pending = new Set<Promise<void>>();
  let maxSendLagMs = 0;
  let lastSendMs = t0;
  if (spec.load.kind === 'closed') {
    const worker = async (): Promise<void> => {
      while (performance.now() < endMs) {
        lastSendMs = performance.now();
        await send(pick(), lastSendMs);
      }
    };
    await Promise.all(Array.from({ length: spec.load.inFlight }, () => worker()));
  } else {
    const meanGapMs = 1000 / spec.load.rateQps;
    let nextMs = t0;
    while (nextMs < endMs) {
      const now = performance.now();
      while (nextMs <= now && nextMs < endMs) {
        maxSendLagMs = Math.max(maxSendLagMs, now - nextMs);
        const p = send(pick(), nextMs);
        pending.add(p);
        void p.then(() => pending.delete(p));
        lastSendMs = nextMs;
        nextMs += -Math.log(1 - rng()) * meanGapMs;
      }
      await new Promise((r) => setTimeout(r, Math.max(0, Math.min(5, nextMs - performance.now()))));
    }
    await Promise.all([...pending]);
  }
  const cpu = process.cpuUsage(cpu0);
  agent.destroy();
  channel?.close();
  return { sent, withinQos, byStatus, okLatencyMs: quantiles(ok), answeredLatencyMs: quantiles(answered), okLatencyOverQos: quantiles(okOverQos), transmitMs: quantiles(transmitMs), answerMs: quantiles(answerMs), detailsByStatus, maxSendLagMs, elapsedS: Math.max(1e-3, (lastSendMs - t0) / 1000), cpuMs: (cpu.user + cpu.system) / 1000, samples: { okMs: ok, okOverQos, answeredMs: answered, transmitMs, answerMs } };
}

if (process.argv[1] !== undefined && import.meta.url.endsWith(process.argv[1].split('/').pop() ?? '')) {
  const spec = JSON.parse(process.argv[2] ?? '{}') as ClientSpec;
  const result = await runClient(spec);
  // exit only once the line is out: stdout to a pipe is written asynchronously
  process.stdout.write(JSON.stringify(result) + '\n', () => process.exit(0));
}
