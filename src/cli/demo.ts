/**
 * `abacus demo` (what `npm start` runs): real execution of two co-located services on
 * onnxruntime-node (CPU). It shows the two facts Abacus builds on:
 *  1. overlap: one query of each service launched as one operator group vs one after the other;
 *  2. segmental execution: a query run as segments `[0,k)` + `[k,N)` in two different groups
 *     gives the same outputs as the whole query in one segment.
 * Everything printed is measured in this run on this machine.
 */
import os from 'node:os';
import { InvalidArgumentError, type Command } from 'commander';
import * as ort from 'onnxruntime-node';
import { OrtDevice } from '../device/ort/index.ts';
import { measureOverlap, measureSequential, type OverlapMeasurement } from '../device/overlap.ts';
import type { Device, DeviceService, GroupResult } from '../device/device.ts';
import { ModelRepository } from '../model/repository.ts';
import { segmentGflops } from '../model/cost.ts';
import { syntheticTensors } from '../model/synthetic.ts';
import { fixedBatchOf, resolvedBoundary } from '../model/boundary.ts';
import { isZooModelName, ZOO_MODEL_NAMES, type ZooModelName } from '../model/zoo/index.ts';
import type { ModelArtifact } from '../model/artifact.ts';
import { checkSeqLenFlag, positiveInt } from './models.ts';
import type { TensorMap } from '../tensor.ts';
import { compareOutputs } from '../model/onnx/verify.ts';
import { formatTable } from './format.ts';
import { createLogger } from '../log.ts';
import type { CliContext } from './main.ts';

/** Small variants for `--small` (fast on any machine; same operators as the full models). */
const SMALL: Readonly<Record<ZooModelName, Record<string, number>>> = {
  resnet50: { resolution: 64, widthMultiplier: 0.25 },
  resnet101: { resolution: 64, widthMultiplier: 0.25 },
  resnet152: { resolution: 64, widthMultiplier: 0.25 },
  inception_v3: { resolution: 75, widthMultiplier: 0.25 },
  vgg16: { resolution: 64, widthMultiplier: 0.25 },
  vgg19: { resolution: 64, widthMultiplier: 0.25 },
  bert: { layers: 4, hidden: 256, heads: 4, vocabSize: 30522, maxPositions: 128, defaultSeqLen: 32 },
};

interface DemoOptions {
  /** Zoo model names or names given to `abacus models import`. */
  models: string[];
  batch: number;
  seqLen: number;
  repeat: number;
  threads: number;
  small?: boolean;
  json?: boolean;
}

function parseModels(value: string): string[] {
  const names = value.split(',').map((s) => s.trim()).filter((s) => s !== '');
  if (names.length < 2) throw new InvalidArgumentError(`--models needs at least two models, e.g. resnet50,bert (zoo: ${ZOO_MODEL_NAMES.join(', ')}; or imported ones)`);
  return names;
}

export function registerDemoCommand(program: Command, ctx: CliContext): void {
  program
    .command('demo')
    .description('run two co-located services on onnxruntime-node: overlapped group vs one after the other, and a query split into segments')
    .option('--models <a,b>', 'models to co-locate: zoo models or imported ones (NAME:N picks the import with N operators)', parseModels, ['resnet50', 'bert'])
    .option('--batch <n>', 'batch size of each query', positiveInt('--batch'), 1)
    .option('--seq-len <n>', 'sequence length for sequence models (BERT)', positiveInt('--seq-len'), 32)
    .option('--repeat <n>', 'timed repetitions (median reported)', positiveInt('--repeat'), 5)
    .option('--threads <n>', 'ORT intra-op threads per executor', positiveInt('--threads'), 1)
    .option('--small', 'use small model variants (fewer channels, lower resolution)')
    .option('--json', 'print the measurements as JSON')
    .action(async (opts: DemoOptions) => {
      await runDemo(ctx, opts);
    });
}

async function runDemo(ctx: CliContext, opts: DemoOptions): Promise<void> {
  const say = (s: string): void => {
    if (!opts.json) ctx.out(s);
  };
  const repo = new ModelRepository(ctx.cacheOptions());
  say(`Abacus-TS demo on onnxruntime-node ${ort.env.versions.node} (CPU, ${os.cpus().length} cores, ${opts.threads} intra-op thread(s) per executor)\n`);
  const services: DeviceService[] = [];
  for (const name of opts.models) {
    let artifact: ModelArtifact;
    if (isZooModelName(name)) {
      const options = opts.small ? SMALL[name] : {};
      const t0 = performance.now();
      if (!(await repo.isZooCached(name, options))) say(`building ${name} (first run only; cached in ${repo.cacheDir}) ... `);
      const result = await repo.zooArtifact(name, options);
      if (result.built) say(`done in ${((performance.now() - t0) / 1000).toFixed(1)} s\n`);
      artifact = result.artifact;
    } else {
      // `name:N` picks an import made with N operators when there are several
      const [importName, count] = name.split(':') as [string, string | undefined];
      artifact = await repo.findImported(importName, count === undefined ? undefined : positiveInt('--models NAME:N')(count));
      if (opts.small) say(`(--small does not apply to the imported model ${importName}: used as imported)\n`);
    }
    if (artifact.spec.dynamicAxes.seq !== undefined) checkSeqLenFlag(artifact.spec, opts.seqLen);
    const serviceName = services.some((s) => s.name === name) ? `${name}#${services.length}` : name;
    services.push({ name: serviceName, model: artifact });
  }
  const queries = services.map((service) => ({ service, batchSize: batchOf(service, opts), seqLen: service.model.spec.dynamicAxes.seq === undefined ? 0 : opts.seqLen }));
  const device = await OrtDevice.create({ intraOpNumThreads: opts.threads, logger: createLogger({ defaultLevel: 'warn' }) });
  let overlap: OverlapMeasurement;
  let segmental: SegmentalDemo;
  try {
    say(`starting ${services.length} executors (one process per service, one ORT session per operator) ... `);
    const t0 = performance.now();
    await device.load(services);
    say(`ready in ${((performance.now() - t0) / 1000).toFixed(1)} s\n\n`);
    overlap = await measureOverlap(device, queries, { repeat: opts.repeat, warmup: 1 });
    segmental = await demoSegments(device, services, opts);
  } finally {
    await device.close();
  }
  // The fair baseline runs after the first executors are gone: never two copies of the weights.
  const fair = await measureAllCores(services, queries, opts);
  if (opts.json) {
    ctx.out(JSON.stringify({ deviceId: device.id, batch: opts.batch, seqLen: opts.seqLen, threads: opts.threads, services: services.map((s) => s.name), overlap, allCores: fair, segmental }, null, 2) + '\n');
    return;
  }
  printOverlap(ctx, services, queries.map((q) => q.seqLen), opts, overlap);
  ctx.out(
    `one after the other, each query with all ${fair.threads} cores: ${fair.sequentialMs.toFixed(2)} ms → group / that = ${(overlap.groupMs / fair.sequentialMs).toFixed(3)}\n` +
      `(overlap pays off on this CPU when this ratio is below 1: small operators that cannot use every core leave room for another query's)\n`,
  );
  ctx.out(
    `\nSegmental execution: ${segmental.service} as [0,${segmental.cut}) in group 1 (with ${segmental.partner} [0,${segmental.partnerEnd})) and [${segmental.cut},${segmental.operators}) in group 2:\n` +
      `  group 1 ${segmental.group1Ms.toFixed(2)} ms, group 2 ${segmental.group2Ms.toFixed(2)} ms; outputs vs the whole query in one segment: max abs difference ${segmental.maxAbsDiff.toExponential(2)}\n`,
  );
}

function printOverlap(ctx: CliContext, services: readonly DeviceService[], seqLens: readonly number[], opts: DemoOptions, m: OverlapMeasurement): void {
  const rows = services.map((s, i) => {
    const spec = s.model.spec;
    const seq = seqLens[i] ?? 0;
    return [
      `${s.name} batch ${batchOf(s, opts)}${seq > 0 ? ` seq ${seq}` : ''}`,
      spec.operators.length,
      segmentGflops(spec, 0, spec.operators.length, batchOf(s, opts), seq),
      m.soloMs[i] ?? NaN,
    ];
  });
  ctx.out(formatTable(['query', 'operators', 'GFLOP', 'alone ms (median)'], rows));
  ctx.out(`\none after the other: ${m.sequentialMs.toFixed(2)} ms\nas one operator group: ${m.groupMs.toFixed(2)} ms\n`);
  const perfect = 1 / Math.min(services.length, os.cpus().length);
  ctx.out(
    `group / sequential = ${m.ratio.toFixed(3)} (median of ${m.repeat} round${m.repeat === 1 ? '' : 's'}, range ${m.ratioMin.toFixed(2)}–${m.ratioMax.toFixed(2)}; ` +
      `1.0 = no overlap, ${perfect.toFixed(2)} = perfect on ${os.cpus().length} cores)\n`,
  );
}

/**
 * The fair one-query-at-a-time baseline: executors with intra-op threads = cores, so a query
 * alone can use the whole CPU. Returns the median sum of the solo latencies (ms).
 */
async function measureAllCores(services: readonly DeviceService[], queries: Parameters<typeof measureSequential>[1], opts: DemoOptions): Promise<{ threads: number; soloMs: number[]; sequentialMs: number }> {
  const threads = os.cpus().length;
  const wide = await OrtDevice.create({ intraOpNumThreads: threads, logger: createLogger({ defaultLevel: 'warn' }) });
  try {
    await wide.load(services);
    const m = await measureSequential(wide, queries, { repeat: opts.repeat, warmup: 1 });
    return { threads, ...m };
  } finally {
    await wide.close();
  }
}

/** `--batch`, except for an imported model with a fixed batch, which only runs at that batch. */
function batchOf(service: DeviceService, opts: DemoOptions): number {
  return fixedBatchOf(service.model.spec) ?? opts.batch;
}

interface SegmentalDemo {
  service: string;
  partner: string;
  operators: number;
  cut: number;
  partnerEnd: number;
  group1Ms: number;
  group2Ms: number;
  maxAbsDiff: number;
}

function failOn(result: GroupResult): GroupResult {
  for (const s of result.segments) if (!s.ok) throw s.error;
  return result;
}

/** Run service 0's query whole, then split across two groups shared with service 1; compare outputs. */
async function demoSegments(device: Device, services: readonly DeviceService[], opts: DemoOptions): Promise<SegmentalDemo> {
  const [a, b] = services as [DeviceService, DeviceService];
  const specA = a.model.spec;
  const seqA = specA.dynamicAxes.seq === undefined ? 0 : opts.seqLen;
  const seqB = b.model.spec.dynamicAxes.seq === undefined ? 0 : opts.seqLen;
  const n = specA.operators.length;
  const cut = Math.max(1, Math.floor(n / 2));
  const batchA = batchOf(a, opts);
  const inputs: TensorMap = syntheticTensors(resolvedBoundary(specA, 0, batchA, seqA), 7);
  const whole = failOn(await device.runGroup([{ service: a.name, queryId: 'demo-whole', start: 0, end: n, batchSize: batchA, seqLen: seqA, input: { kind: 'tensors', tensors: inputs } }]));
  const nb = b.model.spec.operators.length;
  const g1 = failOn(
    await device.runGroup([
      { service: a.name, queryId: 'demo-split', start: 0, end: cut, batchSize: batchA, seqLen: seqA, input: { kind: 'tensors', tensors: inputs } },
      { service: b.name, queryId: 'demo-partner', start: 0, end: nb, batchSize: batchOf(b, opts), seqLen: seqB, input: { kind: 'synthetic', seed: 3 } },
    ]),
  );
  const g2 = failOn(await device.runGroup([{ service: a.name, queryId: 'demo-split', start: cut, end: n, batchSize: batchA, seqLen: seqA, input: { kind: 'resume' } }]));
  const outWhole = whole.segments[0];
  const outSplit = g2.segments[0];
  let maxAbsDiff = Infinity;
  if (outWhole?.ok && outSplit?.ok && outWhole.outputs && outSplit.outputs) {
    maxAbsDiff = Math.max(...compareOutputs(outWhole.outputs, outSplit.outputs).map((c) => c.maxAbsError));
  }
  return { service: a.name, partner: b.name, operators: n, cut, partnerEnd: nb, group1Ms: g1.groupLatencyMs, group2Ms: g2.groupLatencyMs, maxAbsDiff };
}
