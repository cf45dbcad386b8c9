/**
 * A pool of `worker_threads` for the independent units of `abacus reproduce` (one peak search of
 * one pair on one device under one policy, one predictor to profile and train, …;
 * docs/reproduction.md "Time today"): the simulations are deterministic and share nothing, so
 * running them on every core gives the same numbers in less wall time.
 *
 * - `workers` ≤ 1: every unit runs in this thread, one at a time, in the order submitted (the
 *   serial path; no thread is started).
 * - `workers` ≥ 2: up to that many threads, each running one unit at a time; the rest wait in
 *   order. Threads start on first use. A unit's result comes back by structured clone (NaN and
 *   typed arrays survive; class instances come back as plain objects, so units return plain data).
 * - A unit that throws, or whose thread dies, rejects with an Error whose message starts with the
 *   unit's label (`batching: resnet50+resnet101 on sim:a100 under triton: …`); a dead thread is
 *   replaced for the units after it. `close()` ends every thread and rejects what is still waiting.
 * - A thread holds the process open only while it runs a unit, so a caller that forgets
 *   `close()` still exits; a stopped process (Ctrl-C) takes its threads with it.
 *
 * Threads run the TypeScript sources through tsx's ESM loader, registered inside the thread, as
 * the HTTP codec threads do (`ts-worker.ts`). The entry module calls `serveUnits`
 * (`pool-worker.ts`).
 */
import type { Worker } from 'node:worker_threads';
import { startTsWorker } from '../ts-worker.ts';

/** A unit's outcome as a thread posts it (`pool-worker.ts`). */
export type UnitReply = { readonly seq: number; readonly ok: true; readonly value: unknown } | { readonly seq: number; readonly ok: false; readonly message: string } | { readonly log: string };

export interface UnitPoolOptions<U> {
  /** Threads; ≤ 1 runs every unit in this thread, one at a time (see the file docs). */
  readonly workers: number;
  /** The threads' entry module (a `.ts` file URL whose top level calls `serveUnits`). */
  readonly entry: URL;
  /** Given to every thread's entry as `workerData` (structured clone). */
  readonly workerData?: unknown;
  /** How a unit runs in this thread (`workers` ≤ 1). */
  readonly runHere: (unit: U) => Promise<unknown>;
  /** Lines a thread says while it works (a predictor being profiled), as they come. */
  readonly onLog?: (text: string) => void;
}

interface Pending<U> {
  readonly unit: U;
  readonly label: string;
  readonly resolve: (value: unknown) => void;
  readonly reject: (err: Error) => void;
}

interface Slot<U> {
  readonly worker: Worker;
  busy: (Pending<U> & { readonly seq: number }) | undefined;
}

/**
 * Young generation of a thread's heap, MB: the simulations allocate many short-lived objects,
 * and a larger nursery collects them less often. Measured on the batching slice
 * `--quick --pairs 1 --queries 60 --samples 400` with cached predictors and two threads (load
 * 9.7-10.2): 18.5 s of user CPU with V8's default, 16.6 s with 128 MB, same results.
 */
const YOUNG_GENERATION_MB = 128;

/** The pool (see the file docs). */
export class UnitPool<U> {
  readonly workers: number;
  private readonly options: UnitPoolOptions<U>;
  private readonly slots: Slot<U>[] = [];
  private readonly queue: Pending<U>[] = [];
  private seq = 0;
  private closed = false;
  /** The serial path: the last unit submitted, settled. */
  private tail: Promise<void> = Promise.resolve();

  /** @throws RangeError for a `workers` that is not an integer ≥ 1. */
  constructor(options: UnitPoolOptions<U>) {
    if (!Number.isSafeInteger(options.workers) || options.workers < 1) throw new RangeError(`workers must be an integer ≥ 1, got ${options.workers}`);
    this.workers = options.workers;
    this.options = options;
  }

  /**
   * Run `unit`; `label` names it in errors.
   * @returns what the unit returned (a structured clone of it when a thread ran it).
   * @throws Error `<label>: <what the unit threw>`, or `<label>: …` when its thread died or the pool closed.
   */
  run(unit: U, label: string): Promise<unknown> {
    if (this.closed) return Promise.reject(new Error(`${label}: the pool of reproduce threads is closed`));
    if (this.workers <= 1) {
      const result = this.tail.then(() => {
        if (this.closed) throw new Error('the pool of reproduce threads is closed');
        return this.options.runHere(unit);
      });
      this.tail = result.then(
        () => undefined,
        () => undefined,
      );
      return result.catch((err: unknown) => {
        throw labelled(label, err);
      });
    }
    return new Promise<unknown>((resolve, reject) => {
      this.queue.push({ unit, label, resolve, reject });
      this.dispatch();
    });
  }

  /** End every thread; units still waiting or running reject. Idempotent. */
  async close(): Promise<void> {
    this.closed = true;
    for (const p of this.queue.splice(0)) p.reject(new Error(`${p.label}: the pool of reproduce threads closed before it ran`));
    const slots = this.slots.splice(0);
    for (const s of slots) {
      s.busy?.reject(new Error(`${s.busy.label}: the pool of reproduce threads closed while it ran`));
      s.busy = undefined;
    }
    await Promise.all(slots.map((s) => s.worker.terminate()));
  }

  private dispatch(): void {
    while (this.queue.length > 0) {
      let slot = this.slots.find((s) => s.busy === undefined);
      if (slot === undefined && this.slots.length < this.workers) slot = this.spawn();
      if (slot === undefined) return;
      const pending = this.queue.shift()!;
      const seq = ++this.seq;
      try {
        slot.worker.postMessage({ seq, unit: pending.unit });
        slot.busy = { ...pending, seq };
        slot.worker.ref();
      } catch (err) {
        // a unit that cannot be cloned: its own failure only
        pending.reject(labelled(pending.label, err));
      }
    }
  }

  private spawn(): Slot<U> {
    const worker = startTsWorker(this.options.entry, { data: this.options.workerData, resourceLimits: { maxYoungGenerationSizeMb: YOUNG_GENERATION_MB } });
    worker.unref();
    const slot: Slot<U> = { worker, busy: undefined };
    this.slots.push(slot);
    worker.on('message', (reply: UnitReply) => {
      if ('log' in reply) {
        this.options.onLog?.(reply.log);
        return;
      }
      const pending = slot.busy;
      if (pending === undefined || pending.seq !== reply.seq) return;
      slot.busy = undefined;
      worker.unref();
      if (reply.ok) pending.resolve(reply.value);
      else pending.reject(new Error(`${pending.label}: ${reply.message}`));
      this.dispatch();
    });
    const lost = (why: string): void => {
      const at = this.slots.indexOf(slot);
      if (at < 0) return;
      this.slots.splice(at, 1);
      slot.busy?.reject(new Error(`${slot.busy.label}: its reproduce thread failed (${why})`));
      slot.busy = undefined;
      if (!this.closed) this.dispatch();
    };
    worker.on('error', (err) => lost(err.stack ?? err.message));
    worker.on('exit', (code) => lost(`exited with code ${code}`));
    return slot;
  }
}

/** `err` with `label: ` before its message (the original as `cause`). */
function labelled(label: string, err: unknown): Error {
  const message = err instanceof Error ? err.message : String(err);
  return new Error(`${label}: ${message}`, { cause: err });
}
