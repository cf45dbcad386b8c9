/**
 * The calibration fallback's options and bookkeeping (`fallback.ts`): the windows its switches read, a
 * bounded map, a shape's measured solo runs, and the order and timing helpers of its
 * one-at-a-time decisions. Not a policy; imports only the contracts.
 */
import type { GroupSlot } from '../predict/predictor.ts';
import type { CpuNeighbours, FallbackStatus, GroupObservation, ScheduleInput, WaitingQuery } from './controller.ts';
import { compareStrings } from './heads.ts';

/** How the fallback runs, and whom it tells of its switches. */
export interface FallbackOptions {
  /**
   * Intra-op threads a lone segment runs with (the thread rule's count for one segment; under
   * `adapt:C` a function, the count `LoneThreadChooser` gives the slot now); absent: the device default.
   */
  readonly threadsAlone?: number | ((slot: GroupSlot) => number);
  /**
   * Intra-op threads every fallback launch carries, on its segment and in the prediction asked
   * for it, in place of `threadsAlone` (abacus's `fallbackThreads`); absent: without the barrier
   * `threadsAlone`, with it the count the thread rule's `ThreadAssigningController` assigns.
   */
  readonly launchThreads?: number;
  /** The policy's `drop` [true]: false, the fallback rejects nothing either. */
  readonly drop?: boolean;
  /**
   * Without the barrier: the stream controller it wraps (`StreamAbacusController`), asked for the
   * exit test's estimate of a launch alone, corrected and learnt from when the launch is observed
   * (`launchAlone`; no refiner corrects `predictor` in that mode), and whether an observed launch
   * was joined by a later one while it ran (`joinedLater`; such a launch is not counted as an
   * overrun or not).
   */
  readonly streams?: StreamHooks;
  /**
   * What the other processes want of the CPU (`device/neighbours.ts`); present: the interference
   * trigger is on (abacus's `interference`; module docs, "Interference").
   */
  readonly neighbours?: CpuNeighbours;
  /** Called on every switch (abacus serve logs it), with the status after it but the window's overrun share that led to it. */
  onSwitch?(active: boolean, status: FallbackStatus): void;
}

/** What the fallback asks of the stream controller it wraps (`FallbackOptions.streams`). */
export interface StreamHooks {
  /** The corrected solo estimate of a launch of `slot` for `service` decided by the fallback, ms; remembered as an alone launch. */
  launchAlone(slot: GroupSlot, service: string): number;
  /** Whether the launch `observation` reports was joined by a later launch while it ran; asked before `observe`. */
  joinedLater(observation: GroupObservation): boolean;
}

/** A fixed-size ring of booleans with a running count of `true`. */
export class Window {
  readonly #bits: Uint8Array;
  #next = 0;
  #size = 0;
  #count = 0;
  /** @param length the booleans kept (the latest `length`). */
  constructor(length: number) {
    this.#bits = new Uint8Array(length);
  }
  push(x: boolean): void {
    if (this.#size === this.#bits.length) this.#count -= this.#bits[this.#next]!;
    else this.#size++;
    this.#bits[this.#next] = x ? 1 : 0;
    this.#count += x ? 1 : 0;
    this.#next = (this.#next + 1) % this.#bits.length;
  }
  clear(): void {
    this.#bits.fill(0);
    this.#next = this.#size = this.#count = 0;
  }
  get size(): number {
    return this.#size;
  }
  get share(): number {
    return this.#size === 0 ? 0 : this.#count / this.#size;
  }
}

/** Most remembered shapes and predictions (bounded memory; the oldest are forgotten). */
const MAX_KEYS = 4096;

/** A Map that forgets its oldest key past `MAX_KEYS`. */
export function remember<K, V>(map: Map<K, V>, key: K, value: V): void {
  map.delete(key);
  map.set(key, value);
  if (map.size > MAX_KEYS) map.delete(map.keys().next().value as K);
}

/** A shape's last `MEASURED_KEPT` (`fallback.ts`) measured solo latencies (ms, a ring), their count, measured drops since the last, and a sorted copy as of `sortedAt` runs. */
export interface MeasuredRecord {
  readonly ms: Float64Array;
  n: number;
  drops: number;
  readonly sorted: Float64Array;
  sortedAt: number;
}

/** A shape's recent measured solo latencies: a fast run (the drop quantile), a slow one (`AT_RISK_QUANTILE`), ms, and the record they came from. */
export interface Measured {
  readonly fastMs: number;
  readonly slowMs: number;
  readonly record: { drops: number };
}

/** The key of a shape's measured runs: model, batch, sequence length, intra-op threads (0: the device default). */
export function shapeKey(model: string, batch: number, seqLen: number, threads: number | undefined): string {
  return `${model}\u0000${batch}\u0000${seqLen}\u0000${threads ?? 0}`;
}

/** Without the barrier: until the last segment in flight ends as decided (launch + decided latency), ms ≥ 0; 0 when none runs or none was decided with a latency. */
export function decidedRemainderMs(input: ScheduleInput): number {
  let ms = 0;
  for (const r of input.running ?? []) if (r.predictedMs !== undefined) ms = Math.max(ms, r.launchMs + r.predictedMs - input.nowMs);
  return ms;
}

/** The instant a head stops being able to make `deadlineMs` even with a fast run; unmeasured: its deadline (headroom 0). */
export function hopelessAt(deadlineMs: number, measured: Measured | undefined): number {
  return measured === undefined ? deadlineMs : deadlineMs - measured.fastMs;
}

/** A query the fallback may launch: its deadline (ms), its shape's measured runs (`judged`: when they may drop it), and whether it is safe ("Choosing a safe query"). */
export interface Choice {
  readonly q: WaitingQuery;
  readonly deadlineMs: number;
  readonly measured: Measured | undefined;
  readonly judged: Measured | undefined;
  readonly safe: boolean;
}

/** The fallback's order: earlier arrival, then earlier deadline, then service, then id. */
export function before(a: WaitingQuery, aDeadlineMs: number, b: WaitingQuery, bDeadlineMs: number): boolean {
  if (a.arrivalMs !== b.arrivalMs) return a.arrivalMs < b.arrivalMs;
  if (aDeadlineMs !== bDeadlineMs) return aDeadlineMs < bDeadlineMs;
  const s = compareStrings(a.service, b.service);
  return s !== 0 ? s < 0 : compareStrings(a.id, b.id) < 0;
}
