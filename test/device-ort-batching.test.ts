/**
 * Fused batches on real execution (docs/batching.md): for every zoo model (small variants) and one
 * imported ONNX model, N single-sample queries fused into ONE device query by the runtime
 * (inputs concatenated on dim 0, outputs split per member) give each member the outputs it gets
 * when it runs alone — whole model in one group, and cut across two groups.
 *
 * Setup: one OrtDevice (CPU, WallClock) with every model loaded once; a ServingRuntime with
 * batching on per phase; the scripted controller of `helpers/fusing-controller.ts` (alone: no
 * followers; fused: held until N samples wait, then the head with every follower).
 *
 * Tolerance: the reference is the member run alone (batch 1) through the same runtime and
 * device. A batch of N is the same arithmetic per sample, but ORT's float32 GEMM / conv kernels
 * may block and vectorize differently at another batch size (MLAS packs M = batch·rows), so the
 * sums can be reassociated: max |fused − alone| / max |alone| ≤ 1e-4 per output (the same bound
 * as the partition check for a partitioned model vs the whole one, docs/models.md). Integer inputs are never perturbed.
 * Measured (ORT 1.30 CPU EP, 1 intra-op thread per session, x86-64, 2 cores; max over the N
 * members, both phases and every output, relative to the output scale; print them with
 * ABACUS_PRINT_BATCH_DIFFS=1): 0 — bit-identical — for resnet50, resnet101, resnet152,
 * inception_v3, vgg16, vgg19, bert (also at two sequence lengths) and the imported skip graph.
 * MLAS computes each sample's rows with the same blocking at batch 1 and 4 here; the bound is
 * kept for other CPUs, thread counts and the CUDA EP (cuDNN may pick another algorithm per
 * batch size). A member handed another member's rows misses it by far: the members' outputs
 * differ from each other by > 1e-3 relative (asserted).
 */
import fs from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WallClock } from '../src/clock/index.ts';
import type { DeviceService } from '../src/device/device.ts';
import { OrtDevice } from '../src/device/ort/index.ts';
import { onnx } from '../src/model/onnx/proto.ts';
import { ModelRepository } from '../src/model/repository.ts';
import type { ModelSpec } from '../src/model/spec.ts';
import { MASK_NAME } from '../src/model/synthetic.ts';
import type { ZooModelName } from '../src/model/zoo/index.ts';
import { ServingRuntime, type QueryOutcome } from '../src/runtime/runtime.ts';
import type { TensorMap } from '../src/tensor.ts';
import { randomInputs } from './device/conformance.ts';
import { buildSkipGraph, roundTrip } from './onnx-fixtures.ts';
import { fusingController, type FusingControllerOptions } from './helpers/fusing-controller.ts';
import { SMALL_VARIANTS } from './helpers/small-variants.ts';

/** Queries fused into one batch. */
const N = 4;
/** max |fused − alone| / max |alone| allowed per output (see the module docs). */
const REL_TOLERANCE = 1e-4;
/** The imported model's service name. */
const IMPORTED = 'skip_import';

const ZOO = Object.keys(SMALL_VARIANTS) as ZooModelName[];

let cleanup: () => Promise<void>;
let device: OrtDevice;
let services: DeviceService[];
beforeAll(async () => {
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-ort-batch-'));
  cleanup = () => fs.rm(dir, { recursive: true, force: true });
  const repo = new ModelRepository({ cacheDir: path.join(dir, 'cache') });
  services = [];
  for (const name of ZOO) services.push({ name, model: (await repo.zooArtifact(name, SMALL_VARIANTS[name])).artifact });
  // The "transformer-ish" DAG of onnx-fixtures (x [batch, seq, 8], y [batch, 8]; outputs early
  // [batch, seq, 8], probs [batch, 8] and the input y itself; attention over seq), imported into
  // the repository as a user's exported file would be: no value_info, 4 operators.
  const model = roundTrip(buildSkipGraph().model);
  model.graph!.valueInfo = [];
  const file = path.join(dir, `${IMPORTED}.onnx`);
  await fs.writeFile(file, onnx.ModelProto.encode(model).finish());
  services.push({ name: IMPORTED, model: (await repo.importModel(file, { operators: 4, defaultSeqLen: 6 })).artifact });
  device = await OrtDevice.create({ warmupRuns: 0 });
  await device.load(services);
}, 300_000);
afterAll(async () => {
  await device?.close();
  await cleanup?.();
});

/**
 * Input of query k (seeded, distinct per k): floats in [−1, 1), token ids in [0, 100) (< every
 * vocabulary here), and for an attention mask the last k positions masked out (0), so members
 * of one batch also differ in which positions they attend to.
 */
function inputsOf(spec: ModelSpec, k: number, seqLen = spec.defaultSeqLen): TensorMap {
  const inputs = randomInputs(spec, 1, seqLen, 1000 + k);
  for (const [name, t] of Object.entries(inputs)) {
    if (!MASK_NAME.test(name) || !(t.data instanceof BigInt64Array)) continue;
    const seq = t.dims[1]!;
    for (let j = Math.max(1, seq - k); j < seq; j++) t.data[j] = 0n;
  }
  return inputs;
}

/** A runtime serving every loaded model with batching on (QoS far beyond any run here). */
function runtimeWith(options: FusingControllerOptions): ServingRuntime {
  return new ServingRuntime({
    clock: new WallClock(),
    device,
    controller: fusingController(options),
    services: services.map((s) => ({ name: s.name, spec: s.model.spec, qosTargetMs: 600_000, maxQueueLength: 100, batching: { maxBatchSize: 8, maxQueueDelayMs: 0, preferredBatchSizes: [] } })),
  });
}

/** A gate that holds everything until `samples` samples wait, then stays open (so the head is fused with every query submitted). */
function holdUntil(samples: number): NonNullable<FusingControllerOptions['gate']> {
  let open = false;
  return ({ nowMs, queues }) => {
    open ||= queues.flat().reduce((n, w) => n + w.batch, 0) >= samples;
    return open ? undefined : nowMs + 600_000;
  };
}

function outputsOf(o: QueryOutcome): TensorMap {
  if (!o.ok) throw new Error(`query ${o.record.id} failed: ${o.reason}: ${o.message}`);
  return o.outputs;
}

/** max |got − want| / max |want| over one output (shapes and types must match). */
function relDiff(got: TensorMap, want: TensorMap, name: string): number {
  const g = got[name]!;
  const w = want[name]!;
  expect(g.dims, name).toEqual(w.dims);
  expect(g.dataType, name).toBe(w.dataType);
  let diff = 0;
  let scale = 0;
  for (let i = 0; i < w.data.length; i++) {
    const a = Number(w.data[i]);
    diff = Math.max(diff, Math.abs(Number(g.data[i]) - a));
    scale = Math.max(scale, Math.abs(a));
  }
  return scale === 0 ? (diff === 0 ? 0 : Infinity) : diff / scale;
}

/** Worst relative difference per model, filled as the tests run (for the comment above). */
const worst = new Map<string, number>();

describe.each([...ZOO, IMPORTED])('%s on ort:cpu: a fused batch equals its members run alone', (name) => {
  let spec: ModelSpec;
  let inputs: TensorMap[];
  let alone: TensorMap[];
  beforeAll(async () => {
    spec = services.find((s) => s.name === name)!.model.spec;
    inputs = Array.from({ length: N }, (_, k) => inputsOf(spec, k));
    const runtime = runtimeWith({ maxFollowers: 0 });
    alone = [];
    for (let k = 0; k < N; k++) alone.push(outputsOf(await runtime.submit({ service: name, batch: 1, id: `alone${k}`, inputs: inputs[k]! })));
    runtime.close();
    // each query alone ran as its own batch-1 device query
    expect(runtime.groups.map((g) => g.segments.map((s) => [s.queryId, s.batch]))).toEqual(inputs.map((_, k) => [[`alone${k}`, 1]]));
    // the members' outputs differ from each other (far beyond the tolerance), so a member given
    // another member's rows cannot pass
    for (let a = 0; a < N; a++) {
      for (let b = a + 1; b < N; b++) expect(Math.max(...spec.outputs.map((t) => relDiff(alone[a]!, alone[b]!, t.name))), `alone ${a} vs ${b}`).toBeGreaterThan(1e-3);
    }
  }, 120_000);

  it.each([
    ['whole model in one group', (_n: number) => [] as number[]],
    ['cut across two groups', (n: number) => [Math.floor(n / 2)]],
  ])('%s', async (_phase, cutsOf) => {
    const n = spec.operators.length;
    const cuts = cutsOf(n);
    const runtime = runtimeWith({ gate: holdUntil(N), cuts });
    const outcomes = await Promise.all(inputs.map((t, k) => runtime.submit({ service: name, batch: 1, id: `m${k}`, inputs: t })));
    runtime.close();
    // one fused device query of N samples, in as many groups as segments
    const bounds = [0, ...cuts, n];
    expect(runtime.groups.map((g) => g.segments.map((s) => [s.start, s.end, s.batch, s.members]))).toEqual(
      bounds.slice(1).map((end, i) => [[bounds[i], end, N, inputs.map((_, k) => `m${k}`)]]),
    );
    expect(new Set(runtime.groups.map((g) => g.segments[0]!.queryId)).size).toBe(1);
    outcomes.forEach((o, k) => {
      expect(o.record.runBatch).toBe(N);
      const got = outputsOf(o);
      expect(Object.keys(got).sort()).toEqual(spec.outputs.map((t) => t.name).sort());
      for (const out of spec.outputs) {
        const rel = relDiff(got, alone[k]!, out.name);
        worst.set(name, Math.max(worst.get(name) ?? 0, rel));
        expect(rel, `${name} member ${k} output ${out.name}`).toBeLessThanOrEqual(REL_TOLERANCE);
      }
    });
  });
});

describe('bert on ort:cpu: sequence lengths', () => {
  it('queries of two sequence lengths are never fused together (fuseKey); each length fuses with its own and equals its members alone', async () => {
    const spec = services.find((s) => s.name === 'bert')!.model.spec;
    const lens = [16, 9, 16, 9];
    const inputs = lens.map((len, k) => inputsOf(spec, 10 + k, len));
    const alone: TensorMap[] = [];
    const single = runtimeWith({ maxFollowers: 0 });
    for (const [k, t] of inputs.entries()) alone.push(outputsOf(await single.submit({ service: 'bert', batch: 1, seqLen: lens[k]!, inputs: t })));
    single.close();
    const runtime = runtimeWith({ gate: holdUntil(lens.length) });
    const outcomes = await Promise.all(inputs.map((t, k) => runtime.submit({ service: 'bert', batch: 1, seqLen: lens[k]!, id: `m${k}`, inputs: t })));
    runtime.close();
    expect(runtime.groups.map((g) => g.segments.map((s) => [s.seqLen, s.batch, s.members]))).toEqual([[[16, 2, ['m0', 'm2']]], [[9, 2, ['m1', 'm3']]]]);
    outcomes.forEach((o, k) => {
      const got = outputsOf(o);
      expect(got['last_hidden_state']!.dims).toEqual([1, lens[k], SMALL_VARIANTS.bert['hidden']]);
      const rel = relDiff(got, alone[k]!, 'last_hidden_state');
      worst.set('bert', Math.max(worst.get('bert') ?? 0, rel));
      expect(rel, `member ${k}`).toBeLessThanOrEqual(REL_TOLERANCE);
    });
  });
});

afterAll(() => {
  if (process.env['ABACUS_PRINT_BATCH_DIFFS'] === '1') process.stdout.write(`fused vs alone, max relative difference: ${JSON.stringify(Object.fromEntries(worst))}\n`);
});
