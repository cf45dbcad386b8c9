/**
 * The simulated accelerator's event-driven core (docs/design.md#device, docs/devices.md): executors with
 * their own host launch streams sharing one device by processor sharing with capacity.
 * No clock inside: time is a number the caller advances (`step`, `runUntil`, `runToIdle`);
 * `SimDevice` drives it from a `Clock` and calibration drives it directly.
 *
 * ## Model
 * - An **executor** (one per service) runs its segments one after the other, FIFO. A segment
 *   runs operators `[start, end)`; each operator's costs come from `cost-model.ts`.
 * - **Host stream.** The executor's thread issues the kernels of operator k, taking `hostMs_k`,
 *   then goes on with operator k+1 at once (kernel launches are asynchronous), so
 *   hostEnd_k = segment start + Σ_{j ≤ k} hostMs_j. Host streams of different executors are
 *   independent (separate processes and cores).
 * - **Device-side gaps** (graph mode, `OpCost.gapMs`): the GPU launches a replayed graph's kernels
 *   itself, each after the previous one drained; operator k's launch then ends no earlier than
 *   t₀ + gapMs_k + deviceMs_k (t₀: when it starts on the device), and its work is spread over
 *   that window exactly as over a host launch below — alone it takes gapMs + deviceMs, and the
 *   gaps leave the SMs to other executors.
 * - **Device stream.** Operator k runs on the device after operator k−1 finished there (one
 *   CUDA stream per executor) and no faster than its kernels are issued: while its launch is
 *   still in progress (t < hostEnd_k) its kernels are still being issued, so it asks for the
 *   fraction f = min(1, deviceMs_k / (hostEnd_k − t₀)) of full speed, t₀ being when it starts
 *   on the device: its work spread over the launch time left (all of hostMs_k when it starts
 *   as its launch begins; less when the previous operator finished on the device after that);
 *   afterwards f = 1. A
 *   launch-bound operator (deviceMs < hostMs) thus finishes when its last kernel is issued and
 *   occupies the SMs only f of the time — why such models are flat in batch size and overlap
 *   almost for free. The device never starts an operator before its launch began, since the
 *   previous one cannot finish before its own launch ended.
 * - **Processor sharing with capacity.** Running operator i asks for compute s_i·f_i (SM share)
 *   and bandwidth b_i·f_i. With loads Lc = Σ s_i·f_i and Lm = Σ b_i·f_i, each runs at speed
 *   f_i · deviceMs_i / (max(computeMs_i · σc_i, memoryMs_i · σm) + streamMs_i · σm) (work-ms per
 *   ms) with σm = max(1, Lm) and, with fair sharing (`holdWeight` equal for all), σc_i =
 *   max(1, Lc): no slowdown while both loads fit, a proportional slowdown of whichever side
 *   overflows, weighted by how much the operator depends on it (roofline under sharing; the
 *   element-wise streaming of `streamMs` runs in kernels of its own, in series, memory-bound).
 * - **Weighted SM sharing** (`OpCost.holdWeight` unequal, `SimConstants.kernelGrain` > 0): when
 *   Lc > 1 the SMs are granted by water-filling instead — operator i gets g_i = min(d_i,
 *   λ·d_i·w_i) of them (d_i = s_i·f_i, w_i its hold weight, λ such that Σ g_i = 1), and σc_i =
 *   d_i / g_i: operators with long kernels keep the SMs they hold and short-kernel ones wait,
 *   as under a GPU's block scheduler, which hands SMs to kernels in arrival order and lets each
 *   keep them until it drains. With equal weights this is exactly the fair case. Every speed is
 *   recomputed whenever the running set or an f changes; finishing times follow.
 * - **Noise.** Each operator execution draws one multiplicative factor for its device work and
 *   one for its host time (`LogNormalNoise`; none when the coefficient of variation is 0).
 * - **Drift** (`EngineDrift`, optional): a step change of speed. An operator that starts on the
 *   device at engine time t ≥ `atMs` has its device work (compute, memory, streaming, floors)
 *   and its launch time (host `hostMs`, device-side `gapMs`) multiplied by `factor`, on top
 *   of its noise; an operator already running at the step keeps its costs. Demands (SM and
 *   bandwidth shares) are unchanged, so a solo segment started after the step takes exactly
 *   `factor` × as long (every time of its timeline scales), and one straddling the step lies
 *   in between. The one place it applies is `startOp`, shared by the real steps and the
 *   `nextObservableMs` lookahead, so both agree.
 *
 * ## Properties (tested in test/device-sim.test.ts)
 * No operator ever runs faster than alone (every speed ≤ f), so a group never finishes before
 * its slowest segment alone; while loads overflow, the speeds still add up to at least one
 * operator's worth (each s_i, b_i ≤ 1), so it never finishes later than its segments back to
 * back. Adding a segment slows every operator running beside it, but can shift another
 * segment's heavy operators to a later, lighter moment — the anomaly of any processor-sharing
 * model — so a third segment may speed up by a hair (≤ 0.1 % in 9000 random cases).
 *
 * ## Cost
 * An event touches only the running set (at most one operator per executor): O(k) per event
 * for k busy executors, one or two events per operator execution. Only segment arrivals and
 * completions are visible outside; `nextObservableMs` finds the next one by simulating a
 * shadow copy of the running set ahead (exactly the arithmetic the real steps will do), so a
 * clock-driven caller needs one timer per segment rather than one per operator event.
 */
import { badCostField, type OpCost } from './cost-model.ts';
import type { LogNormalNoise } from '../../rng.ts';

/** One segment submitted to an executor. */
export interface EngineJob {
  /** Index returned by `addExecutor`. */
  readonly executor: number;
  /** Costs of every operator of the model, indexed by operator (only `[start, end)` is used). */
  readonly costs: readonly OpCost[];
  readonly start: number;
  readonly end: number;
  /**
   * Called once, when the segment's last operator finished on the device, with the time it
   * started on its executor and the time it finished (engine ms). Called at the end of the step
   * that finished it, after the engine state is consistent; it may submit more jobs.
   */
  readonly onDone: (startMs: number, endMs: number) => void;
}

/** Per-executor state; `job === undefined` when idle. */
class Executor {
  readonly queue: EngineJob[] = [];
  queueHead = 0;
  job: EngineJob | undefined = undefined;
  segmentStartMs = 0;
  /** Device operator in progress. */
  op = 0;
  /** Host end of the operator in progress (its last kernel issued). */
  hostEndMs = 0;
  launching = false;
  /** Requested fraction of full speed (< 1 only while launch-bound). */
  f = 1;
  /** Device work left, in ms at full speed. */
  remaining = 0;
  computeMs = 0;
  memoryMs = 0;
  streamMs = 0;
  floorMs = 0;
  deviceMs = 0;
  smShare = 0;
  bwShare = 0;
  holdWeight = 1;
  /** Scratch for recomputeRates: SM share granted on an overloaded device (−1: not yet fixed). */
  granted = 0;
  rate = 1;
  finishMs = Infinity;
  eventMs = Infinity;
  /** Position in `active`, −1 when idle. */
  activeIndex = -1;

  constructor(readonly index: number) {}

  /** Copy the running state of `o` (not its queue) into this shadow. */
  copyRunning(o: Executor): void {
    this.job = o.job;
    this.segmentStartMs = o.segmentStartMs;
    this.op = o.op;
    this.hostEndMs = o.hostEndMs;
    this.launching = o.launching;
    this.f = o.f;
    this.remaining = o.remaining;
    this.computeMs = o.computeMs;
    this.memoryMs = o.memoryMs;
    this.streamMs = o.streamMs;
    this.floorMs = o.floorMs;
    this.deviceMs = o.deviceMs;
    this.smShare = o.smShare;
    this.bwShare = o.bwShare;
    this.holdWeight = o.holdWeight;
    this.rate = o.rate;
    this.finishMs = o.finishMs;
    this.eventMs = o.eventMs;
  }
}

/** A step change of speed (see the module docs, "Drift"), in engine time. */
export interface EngineDrift {
  /** Engine time of the step, ms: operators starting on the device at or after it are affected. */
  readonly atMs: number;
  /** Multiplier of their device work and launch time (> 0; 1.5 = 50 % slower). */
  readonly factor: number;
}

interface Arrival {
  readonly atMs: number;
  readonly job: EngineJob;
}

/** Relative tolerance for "due now": events closer than this (× max(1, t)) are simultaneous. */
const TIME_EPS = 1e-12;

function dueBy(t: number): number {
  return t + TIME_EPS * (t > 1 ? t : 1);
}

export class SimEngine {
  private nowMs = 0;
  private readonly executors: Executor[] = [];
  private readonly active: Executor[] = [];
  private readonly shadow: Executor[] = [];
  private arrivals: Arrival[] = [];
  private arrivalsHead = 0;
  private readonly done: { job: EngineJob; startMs: number; endMs: number }[] = [];
  private executedOps = 0;

  /**
   * @param noise multiplicative noise per operator execution; none when undefined.
   * @param drift a step change of speed (module docs, "Drift"); none when undefined.
   * @throws RangeError for a drift whose factor is not finite and > 0 or whose time is NaN.
   */
  constructor(
    private readonly noise: LogNormalNoise | undefined = undefined,
    private readonly drift: EngineDrift | undefined = undefined,
  ) {
    if (drift !== undefined && !(Number.isFinite(drift.factor) && drift.factor > 0 && !Number.isNaN(drift.atMs))) {
      throw new RangeError(`engine drift { atMs: ${drift.atMs}, factor: ${drift.factor} }: factor must be a finite number > 0 and atMs a number`);
    }
  }

  /** Engine time, ms (the time of the last step). */
  get now(): number {
    return this.nowMs;
  }

  /** Operator executions finished since creation (a throughput counter for benchmarks). */
  get operatorsExecuted(): number {
    return this.executedOps;
  }

  /** Executors with work (running or queued). */
  get busyExecutors(): number {
    return this.active.length;
  }

  /** Add an executor (one per service); returns its index for `EngineJob.executor`. */
  addExecutor(): number {
    const e = new Executor(this.executors.length);
    this.executors.push(e);
    return e.index;
  }

  /**
   * Queue a segment on its executor at `atMs` (engine ms, ≥ now; earlier values are taken as
   * now). It starts then, or when the executor's earlier segments are done.
   * @throws RangeError for an unknown executor or an empty/out-of-range operator range.
   */
  submit(job: EngineJob, atMs: number): void {
    if (!this.executors[job.executor]) throw new RangeError(`engine executor ${job.executor} does not exist (executors: ${this.executors.length})`);
    if (!(job.start >= 0 && job.end > job.start && job.end <= job.costs.length)) {
      throw new RangeError(`engine job range [${job.start}, ${job.end}) must lie in [0, ${job.costs.length}] and be non-empty`);
    }
    // A cost that is not finite would give a NaN rate and an event that never comes: refuse it.
    for (let k = job.start; k < job.end; k++) {
      const bad = badCostField(job.costs[k]!);
      if (bad !== undefined) throw new RangeError(`engine job: costs[${k}].${bad[0]} is ${bad[1]}, not a finite number ≥ 0`);
    }
    const at = atMs > this.nowMs ? atMs : this.nowMs;
    const list = this.arrivals;
    // Arrivals come in time order in practice; keep the list sorted (stable) otherwise.
    let i = list.length;
    while (i > this.arrivalsHead && list[i - 1]!.atMs > at) i--;
    if (i === list.length) list.push({ atMs: at, job });
    else list.splice(i, 0, { atMs: at, job });
  }

  /** Time of the next event (an operator finishing or ending its launch, or an arrival); Infinity when idle. */
  nextEventMs(): number {
    let t = this.nextArrivalMs();
    const active = this.active;
    for (let i = 0; i < active.length; i++) {
      const e = active[i]!.eventMs;
      if (e < t) t = e;
    }
    return t;
  }

  /** Time of the next queued arrival; Infinity when none. */
  private nextArrivalMs(): number {
    return this.arrivalsHead < this.arrivals.length ? this.arrivals[this.arrivalsHead]!.atMs : Infinity;
  }

  /**
   * Time of the next event visible outside the engine — a segment finishing or a segment
   * arriving — assuming nothing else is submitted before it; Infinity when idle. Found by
   * simulating a shadow copy of the running set (the noise generator is rewound afterwards), so
   * `runUntil` of that time reproduces it exactly.
   */
  nextObservableMs(): number {
    const limit = this.nextArrivalMs();
    const active = this.active;
    const n = active.length;
    if (n === 0) return limit;
    const shadow = this.shadow;
    while (shadow.length < n) shadow.push(new Executor(-1));
    for (let i = 0; i < n; i++) shadow[i]!.copyRunning(active[i]!);
    const saved = this.noise?.rng.save();
    let now = this.nowMs;
    try {
      for (;;) {
        let t = Infinity;
        for (let i = 0; i < n; i++) {
          const ev = shadow[i]!.eventMs;
          if (ev < t) t = ev;
        }
        if (!(t <= limit) || t === Infinity) return limit;
        if (t < now) t = now;
        const dt = t - now;
        if (dt > 0) {
          for (let i = 0; i < n; i++) {
            const e = shadow[i]!;
            e.remaining -= e.rate * dt;
          }
        }
        now = t;
        const due = dueBy(t);
        for (let i = 0; i < n; i++) {
          const e = shadow[i]!;
          if (e.eventMs <= due && this.handleDue(e, t, due, true)) return t;
        }
        recomputeRates(shadow, n, now);
      }
    } finally {
      if (saved !== undefined) this.noise!.rng.restore(saved);
      for (let i = 0; i < n; i++) shadow[i]!.job = undefined;
    }
  }

  /**
   * Process every event due at or before `tMs` (in time order), leaving the engine at the
   * last event's time. Returns the number of steps taken.
   */
  runUntil(tMs: number): number {
    let steps = 0;
    for (;;) {
      const next = this.nextEventMs();
      if (!(next <= tMs) || next === Infinity) return steps;
      this.step(next);
      steps++;
    }
  }

  /** Process events until nothing is running or queued; returns the final engine time. */
  runToIdle(): number {
    this.runUntil(Infinity);
    return this.nowMs;
  }

  /** Drop every queued and running segment without calling their `onDone` (device close). */
  clear(): void {
    for (const e of this.executors) {
      e.queue.length = 0;
      e.queueHead = 0;
      e.job = undefined;
      e.activeIndex = -1;
    }
    this.active.length = 0;
    this.arrivals = [];
    this.arrivalsHead = 0;
    this.done.length = 0;
  }

  /**
   * Advance to `tMs` (≥ now; the time of the next event, see `nextEventMs`) and process what is
   * due then: arrivals, launch ends, operator and segment completions; then recompute speeds
   * and call the `onDone` of the segments that finished.
   */
  step(tMs: number): void {
    const t = tMs > this.nowMs ? tMs : this.nowMs;
    const dt = t - this.nowMs;
    const active = this.active;
    if (dt > 0) {
      for (let i = 0; i < active.length; i++) {
        const e = active[i]!;
        e.remaining -= e.rate * dt;
      }
    }
    this.nowMs = t;
    const due = dueBy(t);

    // Launch ends and completions of the running operators.
    for (let i = 0; i < active.length; ) {
      const e = active[i]!;
      if (e.eventMs <= due) {
        this.handleDue(e, t, due, false);
        // `e` may have left `active` (swap-remove put another executor at i): revisit i then.
        if (active[i] !== e) continue;
      }
      i++;
    }

    // Arrivals (after the running set, so a segment queued behind one finishing now starts now).
    const arrivals = this.arrivals;
    while (this.arrivalsHead < arrivals.length && arrivals[this.arrivalsHead]!.atMs <= due) {
      const { job } = arrivals[this.arrivalsHead++]!;
      const e = this.executors[job.executor]!;
      e.queue.push(job);
      if (e.job === undefined) this.startNextJob(e, t);
    }
    if (this.arrivalsHead > 1024 && this.arrivalsHead * 2 > arrivals.length) {
      this.arrivals = arrivals.slice(this.arrivalsHead);
      this.arrivalsHead = 0;
    }

    recomputeRates(active, active.length, t);
    const done = this.done;
    if (done.length > 0) {
      for (let i = 0; i < done.length; i++) {
        const d = done[i]!;
        d.job.onDone(d.startMs, d.endMs);
      }
      done.length = 0;
    }
  }

  /**
   * Handle the due events of one executor at `t`, repeatedly if the next ones are due too.
   * `dry` (a shadow in `nextObservableMs`): stop and return true at a segment completion,
   * without touching queues, counters or `onDone`; otherwise the return value is not used.
   */
  private handleDue(e: Executor, t: number, due: number, dry: boolean): boolean {
    for (;;) {
      let changed = false;
      if (e.launching && e.hostEndMs <= due) {
        e.launching = false;
        e.f = 1;
        changed = true;
      }
      if (e.finishMs <= due) {
        const job = e.job!;
        if (e.op + 1 < job.end) {
          if (!dry) this.executedOps++;
          e.op++;
          this.startOp(e, t);
        } else {
          if (dry) return true;
          this.executedOps++;
          this.done.push({ job, startMs: e.segmentStartMs, endMs: t });
          this.startNextJob(e, t);
          if (e.job === undefined) return true;
        }
        changed = true;
      }
      if (!changed) return false;
      // The operator just started has not run yet: its events lie ahead (recomputeRates sets them).
      e.finishMs = Infinity;
      if (!(e.launching && e.hostEndMs <= due)) return false;
    }
  }

  /** Start the executor's next queued job at `t`, or mark it idle. */
  private startNextJob(e: Executor, t: number): void {
    if (e.queueHead < e.queue.length) {
      const job = e.queue[e.queueHead++]!;
      if (e.queueHead === e.queue.length) {
        e.queue.length = 0;
        e.queueHead = 0;
      }
      e.job = job;
      e.segmentStartMs = t;
      e.hostEndMs = t;
      e.op = job.start;
      this.startOp(e, t);
      if (e.activeIndex < 0) {
        e.activeIndex = this.active.length;
        this.active.push(e);
      }
      return;
    }
    e.job = undefined;
    if (e.activeIndex >= 0) {
      const active = this.active;
      const last = active.pop()!;
      if (last !== e) {
        active[e.activeIndex] = last;
        last.activeIndex = e.activeIndex;
      }
      e.activeIndex = -1;
    }
  }

  /** Start operator `e.op` of the executor's job on the device at `t` (its launch began at the previous op's host end). */
  private startOp(e: Executor, t: number): void {
    const c = e.job!.costs[e.op]!;
    let deviceFactor = 1;
    let hostFactor = 1;
    if (this.noise !== undefined) {
      deviceFactor = this.noise.next();
      hostFactor = this.noise.next();
    }
    const drift = this.drift;
    if (drift !== undefined && t >= drift.atMs) {
      deviceFactor *= drift.factor;
      hostFactor *= drift.factor;
    }
    const hostMs = c.hostMs * hostFactor;
    e.computeMs = c.computeMs * deviceFactor;
    e.memoryMs = c.memoryMs * deviceFactor;
    e.streamMs = c.streamMs * deviceFactor;
    e.floorMs = c.floorMs * deviceFactor;
    e.deviceMs = c.deviceMs * deviceFactor;
    e.smShare = c.smShare;
    e.bwShare = c.bwShare;
    e.holdWeight = c.holdWeight;
    e.remaining = e.deviceMs;
    e.hostEndMs += hostMs;
    if (c.gapMs > 0) {
      // Device-side launch gaps (graph mode): the work is released over gaps + work from now.
      const windowEnd = t + c.gapMs * hostFactor + e.deviceMs;
      if (windowEnd > e.hostEndMs) e.hostEndMs = windowEnd;
    }
    e.launching = e.hostEndMs > t;
    // Work left to release over the host time left: when the operator starts on the device
    // after its launch began (the previous operator finished late), only hostEnd − t remains.
    const hostLeft = e.hostEndMs - t;
    e.f = e.launching && hostLeft > e.deviceMs ? e.deviceMs / hostLeft : 1;
    e.finishMs = Infinity;
    e.eventMs = Infinity;
  }
}

/** Speeds and next events of the first `n` executors of `list` from their loads (see the module docs). */
function recomputeRates(list: readonly Executor[], n: number, now: number): void {
  let lc = 0;
  let lm = 0;
  let uniform = true;
  const w0 = n > 0 ? list[0]!.holdWeight : 1;
  for (let i = 0; i < n; i++) {
    const e = list[i]!;
    lc += e.smShare * e.f;
    lm += e.bwShare * e.f;
    if (e.holdWeight !== w0) uniform = false;
  }
  const weighted = lc > 1 && !uniform;
  if (weighted) grantByWeight(list, n);
  const oc = lc > 1 ? lc : 1;
  const om = lm > 1 ? lm : 1;
  for (let i = 0; i < n; i++) {
    const e = list[i]!;
    // Compute slowdown: demand ÷ granted share (= the overload Lc when sharing is fair).
    const sc = weighted ? (e.smShare * e.f) / e.granted : oc;
    const c = e.computeMs * sc;
    const m = e.memoryMs * om;
    // Roofline of the operator's main kernels, plus its element-wise streaming and its kernel
    // floors in series.
    const rate = (e.f * e.deviceMs) / ((c > m ? c : m) + e.streamMs * om + e.floorMs * sc);
    e.rate = rate;
    const finish = e.remaining > 0 ? now + e.remaining / rate : now;
    e.finishMs = finish;
    e.eventMs = e.launching && e.hostEndMs < finish ? e.hostEndMs : finish;
  }
}

/**
 * SM shares granted on an overloaded device (Σ demand > 1) when claims are weighted: water-filling
 * of a capacity of 1 over demands d_i = s_i·f_i with claims d_i·w_i (w_i = holdWeight) — each
 * operator gets λ·d_i·w_i, at most d_i, λ chosen so the grants add up to 1. Operators whose
 * claim would exceed their demand get their demand and leave the rest to the others. O(k²) for
 * k running operators (k is the number of busy executors: a handful).
 */
function grantByWeight(list: readonly Executor[], n: number): void {
  for (let i = 0; i < n; i++) list[i]!.granted = -1;
  let capacity = 1;
  for (;;) {
    let claims = 0;
    for (let i = 0; i < n; i++) {
      const e = list[i]!;
      if (e.granted < 0) claims += e.smShare * e.f * e.holdWeight;
    }
    const lambda = capacity / claims;
    let saturated = false;
    for (let i = 0; i < n; i++) {
      const e = list[i]!;
      if (e.granted >= 0) continue;
      const d = e.smShare * e.f;
      if (lambda * e.holdWeight >= 1) {
        e.granted = d;
        capacity -= d;
        saturated = true;
      }
    }
    if (!saturated) {
      for (let i = 0; i < n; i++) {
        const e = list[i]!;
        if (e.granted < 0) e.granted = lambda * e.smShare * e.f * e.holdWeight;
      }
      return;
    }
  }
}
