/**
 * SegmentExecutor: the part of an executor that lives in the child process — ORT
 * InferenceSessions of the operators of one service, each created once and reused (repeated
 * create/release leaks memory in onnxruntime-node), and the kept state of that service's
 * queries between segments.
 *
 * Sessions per thread count (docs/threads.md): a session's intra-op thread pool is fixed when
 * it is created, so an operator has one session per intra-op thread count it has run with —
 * the default (`SessionConfig.intraOpNumThreads`) and each `preloadIntraOpThreads` count
 * created and warmed up at load, any other count a segment names (`RunMessage.intraOpThreads`)
 * created on first use, before the segment's timed loop (its creation is not in `latencyMs`;
 * its first run is not warmed up and may be slower), and then kept until `close`. The device
 * validates each count against its `maxIntraOpThreads` limit, so an operator holds at most
 * `maxIntraOpThreads` + 1 sessions (each with its own copy of the operator's weights and its
 * own thread pool, idle without spinning unless `spinning` is on).
 *
 * A segment runs operators `[start, end)` back to back. The query state is a Map
 * name → ort.Tensor; after operator k it is outputs(k) ∪ passthrough(k) (ModelSpec docs).
 * Intermediate tensors never leave this process: with `end === N` the model outputs are
 * returned as host tensors and the state is freed, otherwise it is kept under `queryId`.
 *
 * `run` never rejects: an ORT error fails that segment only (its state is dropped) and the
 * executor stays usable. Segments must be run one at a time (the process entry queues them).
 */
import { InferenceSession, Tensor } from 'onnxruntime-node';
import type { TensorSpec } from '../../model/spec.ts';
import type { ModelSpec } from '../../model/spec.ts';
import { toOrtTensor } from '../../ort-tensor.ts';
import type { HostTensor, TensorDataType, TensorMap } from '../../tensor.ts';
import { bytesPerElement, elementCount } from '../../tensor.ts';
import { describeError } from '../../errors.ts';
import { resolvedBoundary, tensorSpecIndex } from '../../model/boundary.ts';
import type { ChildMessage, LoadMessage, RunMessage, SessionConfig, WarmupReport, WireError } from './protocol.ts';
import { syntheticTensors } from '../../model/synthetic.ts';
import { refusesInputs } from './input-errors.ts';

/** A load failure with its stable code (`invalid_model` or `device_unavailable`). */
export class ExecutorLoadError extends Error {
  constructor(readonly wire: WireError) {
    super(wire.message);
    this.name = 'ExecutorLoadError';
  }
}

type QueryState = Map<string, Tensor>;
type ResultMessage = Extract<ChildMessage, { t: 'result' }>;

/** Hooks the process entry passes to `run` (fault injection). */
export interface RunHooks {
  /** Called after each operator finished, with its index. */
  readonly afterOperator?: (index: number) => void;
}

/**
 * ORT session options for a config (shared by load and the EP probe); `intraOpThreads`
 * replaces the config's `intraOpNumThreads` when given.
 */
export function sessionOptions(cfg: SessionConfig, intraOpThreads?: number): InferenceSession.SessionOptions {
  const spin = cfg.spinning ? '1' : '0';
  return {
    executionProviders: cfg.executionProvider === 'cuda' ? [{ name: 'cuda', deviceId: cfg.cudaDeviceId }] : ['cpu'],
    intraOpNumThreads: intraOpThreads ?? cfg.intraOpNumThreads,
    interOpNumThreads: cfg.interOpNumThreads,
    executionMode: 'sequential',
    graphOptimizationLevel: cfg.graphOptimizationLevel,
    enableCpuMemArena: cfg.cpuMemArena,
    enableMemPattern: cfg.memPattern,
    // ORT joins nested keys with '.': session.intra_op.allow_spinning (js/node session_options_helper.cc).
    extra: { session: { intra_op: { allow_spinning: spin }, inter_op: { allow_spinning: spin } } },
    logSeverityLevel: 3,
  };
}

const HOST_TYPES: ReadonlySet<string> = new Set<TensorDataType>(['float32', 'float64', 'float16', 'int64', 'int32', 'uint8', 'int8', 'bool', 'uint16', 'int16', 'uint32', 'uint64', 'string']);

/**
 * Copy an ORT tensor out as a host tensor whose typed array owns exactly its bytes
 * (so structured clone does not drag a larger backing buffer along); a string tensor's array
 * is copied.
 * @throws Error for element types onnxruntime-node may return but `TensorDataType` lacks.
 */
export function toHostTensor(name: string, t: Tensor): HostTensor {
  if (!HOST_TYPES.has(t.type)) throw new Error(`output '${name}' has element type '${t.type}', which is not supported`);
  const data = t.data;
  if (t.type === 'string') {
    if (!Array.isArray(data)) throw new Error(`output '${name}' is a string tensor without a string array`);
    return { dataType: 'string', dims: [...t.dims], data: [...data] };
  }
  if (typeof data === 'string' || Array.isArray(data) || !ArrayBuffer.isView(data)) throw new Error(`output '${name}' is not a dense numeric tensor`);
  const view = data;
  const owned = view.byteOffset === 0 && view.byteLength === view.buffer.byteLength ? view : view.slice();
  return { dataType: t.type as TensorDataType, dims: [...t.dims], data: owned };
}

/** Least-recently-used cache of synthetic boundaries, bounded by bytes. */
class SyntheticCache {
  private readonly entries = new Map<string, { tensors: Map<string, Tensor>; bytes: number }>();
  private bytes = 0;
  constructor(private readonly budgetBytes: number) {}

  get(key: string, make: () => TensorMap): Map<string, Tensor> {
    const hit = this.entries.get(key);
    if (hit) {
      this.entries.delete(key);
      this.entries.set(key, hit);
      return hit.tensors;
    }
    const host = make();
    const tensors = new Map<string, Tensor>();
    let bytes = 0;
    for (const [name, t] of Object.entries(host)) {
      tensors.set(name, toOrtTensor(t));
      bytes += elementCount(t.dims) * bytesPerElement(t.dataType);
    }
    if (bytes <= this.budgetBytes) {
      this.entries.set(key, { tensors, bytes });
      this.bytes += bytes;
      for (const [k, e] of this.entries) {
        if (this.bytes <= this.budgetBytes) break;
        this.entries.delete(k);
        this.bytes -= e.bytes;
      }
    }
    return tensors;
  }
}

export class SegmentExecutor {
  private readonly states = new Map<string, QueryState>();
  private readonly index: Map<string, TensorSpec>;
  private readonly synthetic: SyntheticCache;

  /** Per operator: its sessions by intra-op thread count (the default's key: `SessionConfig.intraOpNumThreads`). */
  private readonly sessions: readonly Map<number, InferenceSession>[];

  private constructor(
    private readonly service: string,
    private readonly spec: ModelSpec,
    private readonly load: LoadMessage,
    defaults: readonly InferenceSession[],
  ) {
    this.index = tensorSpecIndex(spec);
    this.synthetic = new SyntheticCache(load.syntheticCacheBytes);
    this.sessions = defaults.map((s) => new Map([[load.session.intraOpNumThreads, s]]));
  }

  /** Per operator, the intra-op thread counts it has sessions for, ascending (tests and leak checks). */
  sessionThreadCounts(): number[][] {
    return this.sessions.map((byThreads) => [...byThreads.keys()].sort((a, b) => a - b));
  }

  /**
   * Create (once) the sessions of operators `[start, end)` at `threads` intra-op threads.
   * @returns undefined, or the failure's message naming the operator.
   */
  private async ensureSessions(start: number, end: number, threads: number): Promise<{ operator: number; message: string } | undefined> {
    for (let k = start; k < end; k++) {
      const byThreads = this.sessions[k];
      if (byThreads === undefined || byThreads.has(threads)) continue;
      try {
        byThreads.set(threads, await InferenceSession.create(this.load.operatorPaths[k]!, sessionOptions(this.load.session, threads)));
      } catch (err) {
        return { operator: k, message: `creating its session with ${threads} intra-op threads: ${describeError(err)}` };
      }
    }
    return undefined;
  }

  /** Warm operators `[0, N)` up `runs` times at batch 1, default seq, on their sessions at `threads`. */
  private async warmUp(runs: number, threads: number): Promise<void> {
    for (let r = 0; r < runs; r++) {
      for (const [k, op] of this.spec.operators.entries()) {
        try {
          const specs = resolvedBoundary(this.spec, k, 1, 0, this.index).filter((t) => op.inputs.some((i) => i.name === t.name));
          const feeds: Record<string, Tensor> = {};
          for (const [name, t] of Object.entries(syntheticTensors(specs, r))) feeds[name] = toOrtTensor(t);
          await this.sessions[k]!.get(threads)!.run(feeds);
        } catch (err) {
          throw new ExecutorLoadError({ code: 'invalid_model', message: `${this.service}: warm-up of operator ${k} (${op.name}) with ${threads} intra-op threads failed: ${describeError(err)}` });
        }
      }
    }
  }

  /**
   * Warm every operator up at each of `warmupShapes` until its latency settles (docs/benchmarks.md,
   * "Serving: event loop, warm-up, executor memory": the first requests after ready within 1.5× the steady median). ORT plans memory
   * and grows its arena per input shape on the first runs at it, so a fixed count at batch 1
   * leaves the other batch sizes cold; here each (operator, shape) runs until its last
   * `window` latencies lie within `tolerance`, at most `maxRuns` times; then a whole query per
   * shape through `run` (serving's code path) the same way; all within `budgetMs`.
   * Default-thread sessions only. `unsettled` / `skipped` count (operator, shape) pairs and
   * whole-query shapes alike.
   * @throws ExecutorLoadError naming the operator and shape when a run fails.
   */
  private async settle(): Promise<WarmupReport> {
    const { warmupShapes: shapes, warmupSettle: cfg } = this.load;
    const t0 = performance.now();
    let runs = 0;
    let unsettled = 0;
    let skipped = 0;
    const threads = this.load.session.intraOpNumThreads;
    for (const [i, shape] of shapes.entries()) {
      const boundaries = new Map<number, Record<string, Tensor>>();
      for (const [k, op] of this.spec.operators.entries()) {
        if (performance.now() - t0 > cfg.budgetMs) {
          skipped += (shapes.length - i) * this.spec.operators.length - k;
          return { shapes: shapes.length, runs, unsettled, skipped, ms: performance.now() - t0 };
        }
        let feeds = boundaries.get(k);
        try {
          if (feeds === undefined) {
            const specs = resolvedBoundary(this.spec, k, shape.batchSize, shape.seqLen, this.index).filter((t) => op.inputs.some((x) => x.name === t.name));
            feeds = {};
            for (const [name, t] of Object.entries(syntheticTensors(specs, k))) feeds[name] = toOrtTensor(t);
            boundaries.set(k, feeds);
          }
          const last: number[] = [];
          let settled = false;
          for (let r = 0; r < cfg.maxRuns && !settled; r++) {
            const s = performance.now();
            await this.sessions[k]!.get(threads)!.run(feeds);
            last.push(performance.now() - s);
            runs++;
            if (last.length > cfg.window) last.shift();
            settled = last.length === cfg.window && Math.max(...last) <= (1 + cfg.tolerance) * Math.min(...last);
          }
          if (!settled) unsettled++;
        } catch (err) {
          throw new ExecutorLoadError({ code: 'invalid_model', message: `${this.service}: warm-up of operator ${k} (${op.name}) at batch ${shape.batchSize}${shape.seqLen > 0 ? `, seq ${shape.seqLen}` : ''} failed: ${describeError(err)}` });
        }
      }
    }
    // then whole queries at each shape through `run`, the code path serving takes (its JS,
    // input conversion, chained operator outputs, output copy), until their latency settles too
    for (const [i, shape] of shapes.entries()) {
      if (performance.now() - t0 > cfg.budgetMs) {
        skipped += shapes.length - i;
        break;
      }
      const last: number[] = [];
      let settled = false;
      for (let r = 0; r < cfg.maxRuns && !settled; r++) {
        const result = await this.run({ t: 'run', reqId: 0, queryId: '\u0000warm-up', start: 0, end: this.spec.operators.length, batchSize: shape.batchSize, seqLen: shape.seqLen, input: { kind: 'synthetic', seed: 0 } }); // one cached input per shape
        if (!result.ok) throw new ExecutorLoadError({ code: 'invalid_model', message: `${this.service}: warm-up query at batch ${shape.batchSize}${shape.seqLen > 0 ? `, seq ${shape.seqLen}` : ''} failed: ${result.error.message}` });
        last.push(result.latencyMs);
        runs++;
        if (last.length > cfg.window) last.shift();
        settled = last.length === cfg.window && Math.max(...last) <= (1 + cfg.tolerance) * Math.min(...last);
      }
      if (!settled) unsettled++;
    }
    return { shapes: shapes.length, runs, unsettled, skipped, ms: performance.now() - t0 };
  }

  /** What the settle phase of `create` did (undefined before it ran). */
  warmupReport: WarmupReport | undefined;

  /**
   * Create one session per operator (in order), check each session's input/output names
   * against the spec, and warm every operator up `warmupRuns` times at batch 1, default seq;
   * then the same for each count of `preloadIntraOpThreads`; then until steady at each of
   * `warmupShapes` (`settle`).
   * @throws ExecutorLoadError with code `device_unavailable` when the CUDA EP cannot be
   *   created, `invalid_model` for a model that does not load, does not match its spec, or
   *   fails its warm-up run. Sessions created before the failure are released.
   */
  static async create(msg: LoadMessage): Promise<SegmentExecutor> {
    const { spec, service } = msg;
    if (msg.operatorPaths.length !== spec.operators.length) {
      throw new ExecutorLoadError({ code: 'invalid_model', message: `${service}: ${msg.operatorPaths.length} operator files for ${spec.operators.length} operators` });
    }
    const options = sessionOptions(msg.session);
    const sessions: InferenceSession[] = [];
    let executor: SegmentExecutor | undefined;
    const releaseAll = async (): Promise<void> => {
      await Promise.allSettled(sessions.map((s) => s.release()));
    };
    try {
      for (const [k, op] of spec.operators.entries()) {
        const file = msg.operatorPaths[k]!;
        let session: InferenceSession;
        try {
          session = await InferenceSession.create(file, options);
        } catch (err) {
          const text = describeError(err);
          if (msg.session.executionProvider === 'cuda' && /cuda|provider/i.test(text)) {
            throw new ExecutorLoadError({ code: 'device_unavailable', message: `CUDA execution provider is not available here (${text}); use executionProvider 'cpu'` });
          }
          throw new ExecutorLoadError({ code: 'invalid_model', message: `${service}: operator ${k} (${op.name}) at ${file} cannot be loaded: ${text}` });
        }
        sessions.push(session);
        const mismatch = nameMismatch(op.inputs, session.inputNames, 'inputs') ?? nameMismatch(op.outputs, session.outputNames, 'outputs');
        if (mismatch) throw new ExecutorLoadError({ code: 'invalid_model', message: `${service}: operator ${k} (${op.name}) at ${file} does not match its spec: ${mismatch}` });
      }
      executor = new SegmentExecutor(service, spec, msg, sessions);
      await executor.warmUp(msg.warmupRuns, msg.session.intraOpNumThreads);
      for (const threads of msg.preloadIntraOpThreads) {
        const failed = await executor.ensureSessions(0, spec.operators.length, threads);
        if (failed !== undefined) throw new ExecutorLoadError({ code: 'invalid_model', message: `${service}: operator ${failed.operator}: ${failed.message}` });
        await executor.warmUp(msg.warmupRuns, threads);
      }
      executor.warmupReport = await executor.settle();
      return executor;
    } catch (err) {
      if (executor !== undefined) await executor.close();
      else await releaseAll();
      if (err instanceof ExecutorLoadError) throw err;
      throw new ExecutorLoadError({ code: 'invalid_model', message: `${service}: ${describeError(err)}` });
    }
  }

  /** Free a query's kept state. Idempotent. */
  release(queryId: string): void {
    this.states.delete(queryId);
  }

  /** Ids of the queries whose state is kept, sorted (for leak checks). */
  keptQueryIds(): string[] {
    return [...this.states.keys()].sort();
  }

  /**
   * Run one segment. `latencyMs` covers the operator runs only (performance.now around the
   * loop), not input decoding, synthetic generation or output copying. Never rejects.
   */
  async run(msg: RunMessage, hooks: RunHooks = {}): Promise<ResultMessage> {
    const { reqId, queryId, start, end } = msg;
    const fail = (operator: number, detail: string): ResultMessage => {
      this.states.delete(queryId);
      const op = this.spec.operators[operator];
      return {
        t: 'result',
        reqId,
        ok: false,
        error: {
          // onnxruntime refusing the inputs' values or dims (input-errors.ts) is the request's
          // fault, not the device's: a bad_request, so clients do not retry it.
          code: refusesInputs(detail) ? 'bad_request' : 'device_failure',
          message: `service ${this.service}, query ${queryId}: operator ${operator} (${op?.name ?? '?'}) of segment [${start}, ${end}) failed: ${detail}`,
        },
      };
    };

    let state: QueryState;
    try {
      state = this.initialState(msg);
    } catch (err) {
      return fail(start, `preparing inputs: ${describeError(err)}`);
    }
    this.states.delete(queryId);
    const threads = msg.intraOpThreads ?? this.load.session.intraOpNumThreads;
    const missing = await this.ensureSessions(start, end, threads);
    if (missing !== undefined) return fail(missing.operator, missing.message);

    const t0 = performance.now();
    for (let k = start; k < end; k++) {
      const op = this.spec.operators[k];
      const session = this.sessions[k]?.get(threads);
      if (!op || !session) return fail(k, 'no such operator');
      const feeds: Record<string, Tensor> = {};
      for (const input of op.inputs) {
        const t = state.get(input.name);
        if (!t) return fail(k, `boundary tensor '${input.name}' is missing from the query state`);
        feeds[input.name] = t;
      }
      let results: InferenceSession.OnnxValueMapType;
      try {
        results = await session.run(feeds);
      } catch (err) {
        return fail(k, describeError(err));
      }
      const next: QueryState = new Map();
      for (const output of op.outputs) {
        const t = results[output.name];
        if (!(t instanceof Tensor)) return fail(k, `output '${output.name}' was not produced`);
        next.set(output.name, t);
      }
      for (const name of op.passthrough) {
        const t = state.get(name);
        if (!t) return fail(k, `passthrough tensor '${name}' is missing from the query state`);
        next.set(name, t);
      }
      state = next;
      hooks.afterOperator?.(k);
    }
    const latencyMs = performance.now() - t0;

    if (end < this.spec.operators.length) {
      this.states.set(queryId, state);
      return { t: 'result', reqId, ok: true, latencyMs };
    }
    try {
      const outputs: TensorMap = {};
      for (const o of this.spec.outputs) {
        const t = state.get(o.name);
        if (!t) return fail(end - 1, `model output '${o.name}' is missing from the final state`);
        outputs[o.name] = toHostTensor(o.name, t);
      }
      return { t: 'result', reqId, ok: true, latencyMs, outputs };
    } catch (err) {
      return fail(end - 1, describeError(err));
    }
  }

  /** Release every session (of every thread count). */
  async close(): Promise<void> {
    this.states.clear();
    await Promise.allSettled(this.sessions.flatMap((byThreads) => [...byThreads.values()].map((s) => s.release())));
  }

  private initialState(msg: RunMessage): QueryState {
    const input = msg.input;
    switch (input.kind) {
      case 'resume': {
        const kept = this.states.get(msg.queryId);
        if (!kept) throw new Error(`no kept state for query ${msg.queryId} (never started, already finished, released or lost)`);
        return kept;
      }
      case 'tensors': {
        const state: QueryState = new Map();
        for (const [name, t] of Object.entries(input.tensors)) state.set(name, toOrtTensor(t));
        return state;
      }
      case 'synthetic': {
        const key = `${msg.start}|${msg.batchSize}|${msg.seqLen}|${input.seed}`;
        const cached = this.synthetic.get(key, () => syntheticTensors(resolvedBoundary(this.spec, msg.start, msg.batchSize, msg.seqLen, this.index), input.seed));
        return new Map(cached);
      }
    }
  }
}

function nameMismatch(expected: readonly TensorSpec[], actual: readonly string[], what: string): string | undefined {
  const want = expected.map((t) => t.name).sort();
  const got = [...actual].sort();
  if (want.length === got.length && want.every((n, i) => n === got[i])) return undefined;
  return `${what} are [${got.join(', ')}], spec says [${want.join(', ')}]`;
}
