/**
 * Internal to `clock/`: the pending timers of one clock, ordered by due time and, among equal
 * due times, by the order they were set (the Clock contract's FIFO rule). Shared by
 * `WallClock` and `VirtualClock`; not exported from `clock/index.ts`.
 */
import type { TimerHandle } from './clock.ts';

/** One pending timer. */
export interface TimerEntry {
  /** Absolute due time on the owning clock, ms. */
  readonly dueMs: number;
  /** Order of setting (1, 2, …); breaks ties between equal `dueMs`. */
  readonly seq: number;
  readonly callback: () => void;
  readonly handle: TimerHandle;
}

interface HeapEntry extends TimerEntry {
  cancelled: boolean;
}

/** Compact the heap once this many cancelled entries linger in it (and they outnumber live ones). */
const COMPACT_MIN_CANCELLED = 1024;

/**
 * Binary min-heap on `(dueMs, seq)` with lazy cancellation: O(log n) add and take, O(1)
 * amortized cancel. Handles are frozen `{ id }` objects; one from another queue is unknown.
 */
export class TimerQueue {
  private readonly heap: HeapEntry[] = [];
  private readonly live = new Map<TimerHandle, HeapEntry>();
  private cancelledInHeap = 0;
  private nextSeq = 1;

  /** Number of pending (neither taken nor cancelled) timers. */
  get size(): number {
    return this.live.size;
  }

  /** Add a timer due at `dueMs` (absolute); returns its handle (`id` = its `seq`). */
  add(dueMs: number, callback: () => void): TimerHandle {
    const seq = this.nextSeq++;
    const handle: TimerHandle = Object.freeze({ id: seq });
    const entry: HeapEntry = { dueMs, seq, callback, handle, cancelled: false };
    this.live.set(handle, entry);
    this.push(entry);
    return handle;
  }

  /** Cancel a pending timer; returns false (and does nothing) when it is not pending here. */
  cancel(handle: TimerHandle): boolean {
    const entry = this.live.get(handle);
    if (entry === undefined) return false;
    this.live.delete(handle);
    entry.cancelled = true;
    this.cancelledInHeap++;
    if (this.cancelledInHeap >= COMPACT_MIN_CANCELLED && this.cancelledInHeap > this.live.size) this.compact();
    return true;
  }

  /** The earliest pending timer (ties: first set), left in place; undefined when none. */
  peek(): TimerEntry | undefined {
    let top = this.heap[0];
    while (top !== undefined && top.cancelled) {
      this.removeTop();
      this.cancelledInHeap--;
      top = this.heap[0];
    }
    return top;
  }

  /** Remove and return the earliest pending timer; undefined when none. */
  take(): TimerEntry | undefined {
    const top = this.peek();
    if (top === undefined) return undefined;
    this.removeTop();
    this.live.delete(top.handle);
    return top;
  }

  private push(entry: HeapEntry): void {
    const heap = this.heap;
    let i = heap.length;
    heap.push(entry);
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const p = heap[parent]!;
      if (!before(entry, p)) break;
      heap[i] = p;
      i = parent;
    }
    heap[i] = entry;
  }

  private removeTop(): void {
    const heap = this.heap;
    const last = heap.pop();
    if (last === undefined || heap.length === 0) return;
    const n = heap.length;
    let i = 0;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= n) break;
      const r = l + 1;
      const c = r < n && before(heap[r]!, heap[l]!) ? r : l;
      const child = heap[c]!;
      if (!before(child, last)) break;
      heap[i] = child;
      i = c;
    }
    heap[i] = last;
  }

  private compact(): void {
    const keep = this.heap.filter((e) => !e.cancelled);
    this.heap.length = 0;
    this.cancelledInHeap = 0;
    for (const e of keep) this.push(e);
  }
}

function before(a: TimerEntry, b: TimerEntry): boolean {
  return a.dueMs < b.dueMs || (a.dueMs === b.dueMs && a.seq < b.seq);
}

/**
 * The Clock contract's delay check.
 * @throws RangeError naming `where` for a non-number, negative, NaN or infinite `delayMs`.
 */
export function checkDelayMs(where: string, delayMs: number): void {
  if (typeof delayMs !== 'number' || !Number.isFinite(delayMs) || delayMs < 0) {
    throw new RangeError(`${where}: delayMs must be a finite number ≥ 0 (ms), got ${String(delayMs)}`);
  }
}

/** @throws TypeError naming `where` when `callback` is not a function. */
export function checkCallback(where: string, callback: unknown): void {
  if (typeof callback !== 'function') throw new TypeError(`${where}: callback must be a function, got ${typeof callback}`);
}
