/**
 * Simulator speed (docs/devices.md "Speed"): simulated operator executions per second of wall time,
 * on one core (Node runs the whole simulation on its main thread), for a 4-way co-location
 * with uncontrolled overlap: four services (ResNet-50, Inception-v3, VGG-16, BERT seq 32) on
 * `sim:a100` with noise, each driven by its own closed-loop client that sends whole queries
 * (one segment of all operators, batch drawn from 1/2/4/8) after an exponential think time,
 * so queries of different services start at arbitrary times and overlap at random. Everything
 * goes through the public path: `SimDevice.runGroup` on a `VirtualClock`.
 *
 * Goal: ≥ 1,000,000 operator executions per 10 s of wall time.
 */
import { VirtualClock } from '../src/clock/index.ts';
import { artifactAt } from '../src/model/artifact.ts';
import { ModelRepository } from '../src/model/repository.ts';
import type { ZooModelName } from '../src/model/zoo/index.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import { Rng, SimDevice } from '../src/device/sim/index.ts';
import type { Segment } from '../src/device/device.ts';

export interface SimSpeedResult {
  readonly device: string;
  readonly services: readonly string[];
  /** Simulated time covered, ms. */
  readonly simulatedMs: number;
  /** Wall time of the simulation (after setup), ms. */
  readonly wallMs: number;
  readonly queries: number;
  /** Operator executions simulated. */
  readonly operators: number;
  /** Operator executions per second of wall time. */
  readonly operatorsPerSecond: number;
  /** The same per 10 s (the unit of the target in docs/devices.md "Speed": ≥ 1,000,000). */
  readonly operatorsPer10s: number;
  /** Simulated time ÷ wall time. */
  readonly speedup: number;
}

const SERVICES: readonly { readonly model: ZooModelName; readonly seqLen: number }[] = [
  { model: 'resnet50', seqLen: 0 },
  { model: 'inception_v3', seqLen: 0 },
  { model: 'vgg16', seqLen: 0 },
  { model: 'bert', seqLen: 32 },
];
const BATCHES = [1, 2, 4, 8] as const;

export async function benchSimSpeed(opts: { simulatedMs?: number; thinkMs?: number; seed?: number; cacheDir?: string; log?: (s: string) => void } = {}): Promise<SimSpeedResult> {
  const simulatedMs = opts.simulatedMs ?? 60_000;
  const thinkMs = opts.thinkMs ?? 2;
  const seed = opts.seed ?? 1;
  const repo = new ModelRepository(opts.cacheDir === undefined ? {} : { cacheDir: opts.cacheDir });
  const clock = new VirtualClock();
  const device = await SimDevice.create({ clock, id: 'sim:a100', seed });
  const services: { model: ZooModelName; seqLen: number; spec: ModelSpec }[] = [];
  for (const s of SERVICES) services.push({ ...s, spec: await repo.zooSpec(s.model) });
  await device.load(services.map((s) => ({ name: s.model, model: artifactAt('/nonexistent', s.spec) })));
  const rng = new Rng(seed + 1);
  let queries = 0;
  const client = async (i: number): Promise<void> => {
    const s = services[i]!;
    const n = s.spec.operators.length;
    let q = 0;
    while (clock.now() < simulatedMs) {
      await clock.sleep(-Math.log(rng.nextUnit()) * thinkMs);
      const seg: Segment = { service: s.model, queryId: `${s.model}-${q++}`, start: 0, end: n, batchSize: BATCHES[rng.nextUint32() % BATCHES.length]!, seqLen: s.seqLen, input: { kind: 'synthetic', seed: q } };
      await device.runGroup([seg]);
      queries++;
    }
  };
  opts.log?.(`simulating ${simulatedMs / 1000} s of 4-way uncontrolled overlap on ${device.id} …\n`);
  const t0 = performance.now();
  const clients = services.map((_, i) => client(i));
  await clock.run();
  await Promise.all(clients);
  const wallMs = performance.now() - t0;
  await device.close();
  const operators = device.operatorsExecuted;
  const operatorsPerSecond = operators / (wallMs / 1000);
  return {
    device: device.id,
    services: services.map((s) => s.model),
    simulatedMs: clock.now(),
    wallMs,
    queries,
    operators,
    operatorsPerSecond,
    operatorsPer10s: operatorsPerSecond * 10,
    speedup: clock.now() / wallMs,
  };
}
