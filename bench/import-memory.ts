/**
 * Peak memory of `abacus models import` (the project's target, docs/import.md "Memory": a 1,000-node, ~45 MB model
 * without shape annotations imports at `--operators 8` below 2 GB RSS).
 *
 * The model (`importMemoryModel`): image [batch, 60, 48, 48] → 333 residual blocks of
 * Conv 3×3 (60 → 60 channels, pad 1, bias) + Relu + Add → GlobalAveragePool: 1,000 nodes,
 * 333 × (60·60·9 + 60) float32 weights = 43.2 MB, every activation [batch, 60, 48, 48]
 * (553 KB per sample), no `value_info`, so the importer runs the shape probe. It is written
 * to a temporary folder and imported by a child `node bin/abacus.js models import FILE
 * --operators 8` under `/usr/bin/time -v` (its "Maximum resident set size"), with
 * `ABACUS_CACHE_DIR` in a temporary folder; the wall time is reported beside it, and the
 * baseline is the peak RSS of `abacus models` (the listing) (the CLI's own footprint) in the same run. The 1-minute
 * load average is recorded (the shared development machine is busy).
 */
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { GraphBuilder } from '../src/model/onnx/builder.ts';
import { onnx } from '../src/model/onnx/proto.ts';
import type { OnnxTypes } from '../src/model/onnx/proto.ts';

const run = promisify(execFile);
const ABACUS_BIN = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'bin', 'abacus.js');

/** Residual blocks (3 nodes each) and the channel count of `importMemoryModel`. */
const BLOCKS = 333;
const CHANNELS = 60;
const SIZE = 48;

/** The bench's model (file header), without value_info. */
export function importMemoryModel(): OnnxTypes.ModelProto {
  const g = new GraphBuilder({ name: 'import-memory', seed: 16 });
  const B = 'batch';
  const shape = [B, CHANNELS, SIZE, SIZE];
  let x = g.input('image', 'float32', shape);
  g.beginOperator('all');
  for (let i = 0; i < BLOCKS; i++) {
    const w = g.initializer(`w${i}`, [CHANNELS, CHANNELS, 3, 3], { kind: 'uniform', bound: 0.02 });
    const b = g.initializer(`b${i}`, [CHANNELS], { kind: 'uniform', bound: 0.01 });
    const [c] = g.node('Conv', [x, w, b], [shape], { attrs: { kernel_shape: { ints: [3, 3] }, pads: { ints: [1, 1, 1, 1] } } });
    const [r] = g.node('Relu', [c!], [shape]);
    x = g.node('Add', [r!, x], [shape])[0]!;
  }
  g.node('GlobalAveragePool', [x], [[B, CHANNELS, 1, 1]], { outputs: ['pooled'] });
  g.output('pooled');
  const { model } = g.build();
  model.graph!.valueInfo = [];
  return model;
}

export interface ImportMemoryResult {
  readonly nodes: number;
  readonly fileMiB: number;
  readonly operators: number;
  readonly maxRssMiB: number;
  /** Peak RSS of `abacus models` (the listing) in the same cache: the CLI's own footprint (the baseline). */
  readonly baselineRssMiB: number;
  readonly wallS: number;
  readonly loadAverage1m: number;
  readonly command: string;
}

/** Peak RSS (MiB) of `node bin/abacus.js ...args` under `/usr/bin/time -v`. */
async function peakRss(args: readonly string[], cacheDir: string): Promise<number> {
  const { stderr } = await run('/usr/bin/time', ['-v', process.execPath, ABACUS_BIN, ...args], { env: { ...process.env, ABACUS_CACHE_DIR: cacheDir }, maxBuffer: 64 * 2 ** 20 });
  const kb = /Maximum resident set size \(kbytes\): (\d+)/.exec(stderr)?.[1];
  if (kb === undefined) throw new Error(`import-memory: /usr/bin/time printed no maximum resident set size for abacus ${args.join(' ')}:\n${stderr}`);
  return Number(kb) / 1024;
}

/** Build the model, import it in a child process under `/usr/bin/time -v`, report its peak RSS. */
export async function benchImportMemory(opts: { log?: (s: string) => void; operators?: number } = {}): Promise<ImportMemoryResult> {
  const log = opts.log ?? ((): void => {});
  const operators = opts.operators ?? 8;
  const dir = await mkdtemp(path.join(os.tmpdir(), 'abacus-import-memory-'));
  try {
    const model = importMemoryModel();
    const bytes = onnx.ModelProto.encode(model).finish();
    const file = path.join(dir, 'import-memory.onnx');
    await writeFile(file, bytes);
    const loadAverage1m = os.loadavg()[0]!;
    log(`import-memory: ${model.graph!.node!.length} nodes, ${(bytes.length / 2 ** 20).toFixed(1)} MiB; importing at --operators ${operators} (load ${loadAverage1m.toFixed(2)})…\n`);
    const cache = path.join(dir, 'cache');
    const baseline = await peakRss(['models'], cache);
    const started = Date.now();
    const maxRssMiB = await peakRss(['models', 'import', file, '--operators', String(operators)], cache);
    const wallS = (Date.now() - started) / 1000;
    const result = {
      nodes: model.graph!.node!.length,
      fileMiB: bytes.length / 2 ** 20,
      operators,
      maxRssMiB,
      baselineRssMiB: baseline,
      wallS,
      loadAverage1m,
      command: `/usr/bin/time -v node bin/abacus.js models import import-memory.onnx --operators ${operators}`,
    };
    log(`import-memory: peak RSS ${result.maxRssMiB.toFixed(0)} MiB (${(maxRssMiB / baseline).toFixed(1)}× the ${baseline.toFixed(0)} MiB of 'abacus models'), ${wallS.toFixed(1)} s\n`);
    return result;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
