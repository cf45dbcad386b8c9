/**
 * `abacus models …`: list the zoo (with its `-small` and `-demo` variants) and the imported
 * models, show one model's inputs, outputs and operators, export, import. Every name another command takes
 * (`model/catalog.ts`) is listed here and works with `show` and `export`.
 */
import fs from 'node:fs/promises';
import path from 'node:path';
import { InvalidArgumentError, type Command } from 'commander';
import { ModelRepository } from '../model/repository.ts';
import { isZooModelName, ZOO_MODEL_NAMES } from '../model/zoo/index.ts';
import { parseModelRef, resolveModelArtifact, resolveModelSpec, zooCatalog } from '../model/catalog.ts';
import { evalCost } from '../model/cost.ts';
import { boundaryBytes, tensorSpecIndex } from '../model/boundary.ts';
import type { ModelSpec } from '../model/spec.ts';
import type { ProbeInputs } from '../model/onnx/shapes.ts';
import type { ModelArtifact } from '../model/artifact.ts';
import { operatorFileName, SPEC_FILE } from '../model/artifact.ts';
import { ensureDir, isDirectory } from '../fs.ts';
import { formatTable } from './format.ts';
import { interfaceText, modelInterface } from './model-interface.ts';
import type { CliContext } from './context.ts';

/** Zoo option flags shared by every command that builds a zoo model. */
const ZOO_FLAGS: readonly { flag: string; key: string; help: string }[] = [
  { flag: '--resolution <px>', key: 'resolution', help: 'CNN input height = width (default: the model\'s, 224 or 299)' },
  { flag: '--width-multiplier <x>', key: 'widthMultiplier', help: 'CNN channel multiplier (default 1)' },
  { flag: '--num-classes <n>', key: 'numClasses', help: 'CNN classifier outputs (default 1000)' },
  { flag: '--layers <n>', key: 'layers', help: 'BERT encoder layers = operators (default 12)' },
  { flag: '--hidden <n>', key: 'hidden', help: 'BERT hidden size (default 768)' },
  { flag: '--heads <n>', key: 'heads', help: 'BERT attention heads (default 12)' },
  { flag: '--intermediate <n>', key: 'intermediate', help: 'BERT feed-forward size (default 4 × hidden)' },
  { flag: '--vocab-size <n>', key: 'vocabSize', help: 'BERT vocabulary (default 30522)' },
  { flag: '--max-positions <n>', key: 'maxPositions', help: 'BERT position table size (default 512)' },
  { flag: '--default-seq-len <n>', key: 'defaultSeqLen', help: 'BERT sequence length used for metadata (default 128)' },
  { flag: '--seed <n>', key: 'seed', help: 'weight seed (default 0)' },
];

function parseNumber(flag: string): (value: string) => number {
  return (value: string) => {
    if (!/^\s*-?(\d+\.?\d*|\.\d+)\s*$/.test(value)) throw new InvalidArgumentError(`${flag} expects a decimal number, got '${value}'`);
    return Number(value);
  };
}

/** Parser for a flag taking a decimal integer ≥ 1 (no hex, exponents or fractions). */
export function positiveInt(flag: string): (value: string) => number {
  return (value: string) => {
    const x = Number(value);
    if (!/^\s*\d+\s*$/.test(value) || !Number.isSafeInteger(x) || x < 1) throw new InvalidArgumentError(`${flag} expects an integer ≥ 1, got '${value}'`);
    return x;
  };
}

function addZooFlags(cmd: Command): Command {
  for (const f of ZOO_FLAGS) cmd.option(f.flag, f.help, parseNumber(f.flag.split(' ')[0]!));
  return cmd;
}

/**
 * Re-throw a zoo option error with the CLI's flag names (`--width-multiplier`) in place of the
 * option keys (`'widthMultiplier'`), so the message names what the user typed.
 */
export async function withFlagNames<T>(work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    if (!(err instanceof RangeError || err instanceof TypeError)) throw err;
    let message = err.message;
    for (const f of ZOO_FLAGS) {
      const flag = f.flag.split(' ')[0]!;
      message = message.replaceAll(`'${f.key}'`, flag).replaceAll(` ${f.key}`, ` ${flag}`);
    }
    const Ctor = err instanceof RangeError ? RangeError : TypeError;
    throw new Ctor(message, { cause: err });
  }
}

/** Pick the zoo options out of parsed commander options. */
export function zooOptionsFrom(opts: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const f of ZOO_FLAGS) if (opts[f.key] !== undefined) out[f.key] = opts[f.key];
  return out;
}

/**
 * Zoo flags (`--resolution`, …) given with `name`: only a full-size zoo model takes them.
 * @throws RangeError for flags with a `-small` / `-demo` variant (a fixed preset) or an imported model.
 */
function checkZooFlags(name: string, opts: Record<string, unknown>): Record<string, unknown> {
  const flags = zooOptionsFrom(opts);
  if (Object.keys(flags).length === 0) return flags;
  const ref = parseModelRef(name);
  if (ref.kind === 'import') throw new RangeError(`zoo options do not apply to the imported model '${name}'`);
  if (ref.name !== ref.zoo) {
    const preset = Object.entries(ref.options).map(([k, v]) => `${k} ${v}`).join(', ');
    throw new RangeError(`zoo options apply to the full-size zoo models: ${name} is a preset of ${ref.zoo} (${preset}); give them with ${ref.zoo} instead`);
  }
  return flags;
}

const NAME_HELP = `zoo model (${ZOO_MODEL_NAMES.join(', ')}), its -small or -demo variant (see abacus models), or an imported model (NAME: its latest version, NAME@V: version V, either with :N for an operator count)`;

/** One row of `abacus models --json`. */
export interface ModelListing {
  readonly name: string;
  readonly operators: number;
  /** GFLOP of one query at batch 1 and the default input (224², 299², seq 128). */
  readonly gflops: number;
  readonly params: number;
  readonly paramMB: number;
  readonly defaultSeqLen: number;
  /** For an import with several dynamic axes: each axis and its default size (`DynamicAxes.symbols`); absent otherwise. */
  readonly axes?: Readonly<Record<string, number>>;
  readonly cached: boolean;
  /** `zoo` (built by this project) or `import` (from `abacus models import`). */
  readonly source: 'zoo' | 'import';
  /** For a `-small` / `-demo` variant: the zoo model it is a smaller preset of; absent otherwise. */
  readonly variantOf?: string;
}

function listing(spec: ModelSpec, source: 'zoo' | 'import', cached: boolean, name = spec.name, variantOf?: string): ModelListing {
  return {
    name,
    operators: spec.operators.length,
    gflops: round(totalGflops(spec, 1, spec.defaultSeqLen), 3),
    params: spec.params,
    paramMB: round(spec.operators.reduce((sum, op) => sum + op.paramBytes, 0) / 1e6, 1),
    defaultSeqLen: spec.defaultSeqLen,
    ...(spec.dynamicAxes.symbols === undefined ? {} : { axes: spec.dynamicAxes.symbols }),
    cached,
    source,
    ...(variantOf === undefined ? {} : { variantOf }),
  };
}

function totalGflops(spec: ModelSpec, batch: number, seqLen: number): number {
  return spec.operators.reduce((s, op) => s + evalCost(op.gflops, batch, seqLen), 0);
}

function round(x: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

export function registerModelsCommand(program: Command, ctx: CliContext): void {
  const models = program
    .command('models')
    .enablePositionalOptions()
    .description('list the model zoo (with its -small and -demo variants) and imported models: operators, GFLOP at batch 1, parameters, cache state')
    .option('--json', 'print a JSON array, one object per model')
    .action(async (opts: { json?: boolean }) => {
      const repo = new ModelRepository(ctx.cacheOptions());
      const rows: ModelListing[] = [];
      for (const ref of zooCatalog()) {
        rows.push(listing(await repo.zooSpec(ref.zoo, ref.options), 'zoo', await repo.isZooCached(ref.zoo, ref.options), ref.name, ref.name === ref.zoo ? undefined : ref.zoo));
      }
      for (const artifact of await repo.listImported()) rows.push(listing(artifact.spec, 'import', true));
      if (opts.json) {
        ctx.out(JSON.stringify(rows, null, 2) + '\n');
        return;
      }
      ctx.out(
        formatTable(
          ['model', 'source', 'operators', 'GFLOP (batch 1)', 'params', 'weights MB', 'input', 'cached'],
          rows.map((r) => [r.name, r.source, r.operators, r.gflops, r.params, r.paramMB, r.axes !== undefined ? Object.entries(r.axes).map(([n, v]) => `${n} ${v}`).join(' · ') : r.defaultSeqLen > 0 ? `seq ${r.defaultSeqLen}` : r.source === 'zoo' ? 'image' : '-', r.cached ? 'yes' : 'no']),
        ),
      );
      ctx.out(`cache: ${repo.cacheDir}\n`);
    });

  addZooFlags(
    models
      .command('show')
      .description('what one model takes and gives (inputs and outputs: datatypes, shapes with their dynamic axes and sizes, valid values) and its operators: GFLOP, parameters, boundary bytes, ONNX nodes')
      .argument('<name>', NAME_HELP)
      .option('--batch <n>', 'batch size for GFLOP and bytes', positiveInt('--batch'), 1)
      .option('--seq-len <n>', 'sequence length (BERT)', positiveInt('--seq-len'))
      .option('--operators <n>', 'for an imported model imported with several operator counts: which one', positiveInt('--operators'))
      .option('--json', 'print the ModelSpec as JSON, with the inputs, outputs and axes as a client sees them under "interface"'),
  ).action(async (name: string, opts: Record<string, unknown> & { batch: number; seqLen?: number; operators?: number; json?: boolean }) => {
    const repo = new ModelRepository(ctx.cacheOptions());
    const flags = checkZooFlags(name, opts);
    if (opts.operators !== undefined && parseModelRef(name).kind !== 'import') throw new RangeError(`--operators picks among the imports of an imported model; ${name} is a zoo model`);
    const spec = isZooModelName(name)
      ? await withFlagNames(() => repo.zooSpec(name, flags))
      : opts.operators !== undefined
        ? await (async () => {
            const ref = parseModelRef(name);
            return (await repo.findImported(ref.name, opts.operators, ref.kind === 'import' ? ref.version : undefined)).spec;
          })()
        : await resolveModelSpec(repo, name);
    const seqLen = checkSeqLenFlag(spec, opts.seqLen);
    const counts = spec.source.kind === 'import' ? (await repo.listImported()).filter((a) => a.spec.name === spec.name).map((a) => a.spec.operators.length) : undefined;
    printSpec(ctx, spec, opts.batch, seqLen, opts.json === true, counts);
  });

  addZooFlags(
    models
      .command('export')
      .description('write the whole model to FILE and its operators (op-NNN.onnx + spec.json) to FILE without .onnx + ".operators/"')
      .argument('<name>', NAME_HELP)
      .requiredOption('--out <file>', 'output .onnx file for the whole model')
      .option('--json', 'print what was written as JSON'),
  ).action(async (name: string, opts: Record<string, unknown> & { out: string; json?: boolean }) => {
    if (opts.out.trim() === '') throw new RangeError('--out must name a file');
    const flags = checkZooFlags(name, opts);
    const out = path.resolve(opts.out);
    if (await isDirectory(out)) throw new RangeError(`--out ${out} is a directory; give a file name such as ${path.join(out, `${name}.onnx`)}`);
    const opsDir = out.replace(/\.onnx$/i, '') + '.operators';
    await ensureDir(path.dirname(out));
    const repo = new ModelRepository(ctx.cacheOptions());
    const { artifact, built } = isZooModelName(name) ? await withFlagNames(() => repo.zooArtifact(name, flags)) : await resolveModelArtifact(repo, name);
    await exportArtifact(artifact, out, opsDir);
    if (opts.json) {
      ctx.out(JSON.stringify({ name, built, model: out, operatorsDir: opsDir, operators: artifact.operatorPaths.length }, null, 2) + '\n');
      return;
    }
    ctx.out(`${name}: ${built ? 'built' : 'from cache'}; wrote ${out} and ${artifact.operatorPaths.length} operators to ${opsDir}\n`);
  });

  models
    .command('import')
    .description('partition any ONNX model into N operators balanced by FLOPs and add it to the cache')
    .argument('<file>', 'an .onnx file (external data files next to it are read)')
    .requiredOption('--operators <n>', 'number of operators N (1 ≤ N ≤ node count)', positiveInt('--operators'))
    .option('--default-seq-len <n>', 'sequence length for metadata when the model has a sequence axis (default 128)', positiveInt('--default-seq-len'))
    .option('--name <name>', 'model name (default: file name without .onnx)')
    .option('--force', 'replace the model already imported under this name (every version and operator count of it) instead of adding the file as its next version; for the same file, rebuild its cache entry (repairs corrupt operator files)')
    .option('--probe-shape <name=DxD>', 'shape of an input for the shape probe, e.g. audio=1x16000 (repeatable; a sequence-axis size is also the default sequence length; a range LO-HI of it, e.g. audio=1x256-640, is sampled at LO, the middle and HI)', collectProbe('--probe-shape'), [])
    .option('--probe-value <name=V>', 'value every element of an input holds in the shape probe, e.g. sr=16000 (repeatable; default 0)', collectProbe('--probe-value'), [])
    .option('--axis <name.d=axis>', "the axis dim D of input NAME is, e.g. state.1=batch or input.1=samples (repeatable; 'batch' = the batch axis, another name = the axis of that name)", collectProbe('--axis'), [])
    .option('--json', 'print the ModelSpec as JSON')
    .action(async (file: string, opts: { operators: number; name?: string; defaultSeqLen?: number; force?: boolean; probeShape: [string, string][]; probeValue: [string, string][]; axis: [string, string][]; json?: boolean }) => {
      const probe = probeInputsOf(opts.probeShape, opts.probeValue, opts.axis);
      const repo = new ModelRepository(ctx.cacheOptions());
      const { artifact, built } = await repo.importModel(file, {
        operators: opts.operators,
        ...(opts.name === undefined ? {} : { name: opts.name }),
        ...(opts.defaultSeqLen === undefined ? {} : { defaultSeqLen: opts.defaultSeqLen }),
        ...(opts.force === true ? { force: true } : {}),
        ...(probe === undefined ? {} : { probe }),
      });
      if (!opts.json) ctx.out(`${artifact.spec.name}: ${built ? 'imported' : 'already imported'} into ${artifact.dir}\n`);
      printSpec(ctx, artifact.spec, 1, artifact.spec.defaultSeqLen, opts.json === true);
    });

}

/** Commander collector of repeated `NAME=VALUE` flags. */
function collectProbe(flag: string): (value: string, previous: [string, string][]) => [string, string][] {
  return (value, previous) => {
    const eq = value.indexOf('=');
    const example = flag === '--probe-shape' ? 'audio=1x16000' : flag === '--axis' ? 'state.1=batch' : 'sr=16000';
    if (eq <= 0 || eq === value.length - 1) throw new InvalidArgumentError(`${flag} expects ${flag === '--axis' ? 'NAME.D=AXIS' : 'NAME=VALUE'} (e.g. ${example}), got '${value}'`);
    return [...previous, [value.slice(0, eq), value.slice(eq + 1)]];
  };
}

/**
 * Probe inputs from `--probe-shape NAME=DxD…`, `--probe-value NAME=V` and `--axis NAME.D=AXIS`
 * pairs (for `--axis` the pair is [`NAME.D`, `AXIS`]; NAME may itself hold dots: D follows the
 * last one); undefined when none.
 * @throws InvalidArgumentError naming the flag for a malformed shape, value or dim, or a name
 *   (an input's dim, for `--axis`) given twice.
 */
export function probeInputsOf(shapes: readonly [string, string][], values: readonly [string, string][], axes: readonly [string, string][] = []): ProbeInputs | undefined {
  if (shapes.length === 0 && values.length === 0 && axes.length === 0) return undefined;
  const shapeOf: Record<string, number[]> = {};
  const rangeOf: Record<string, Record<number, [number, number]>> = {};
  for (const [name, text] of shapes) {
    if (name in shapeOf) throw new InvalidArgumentError(`--probe-shape gives '${name}' twice`);
    const parts = text.split('x').map((d) => d.trim());
    const dims: number[] = [];
    parts.forEach((d, i) => {
      const range = /^(\d+)-(\d+)$/.exec(d);
      if (range) {
        const lo = Number(range[1]);
        const hi = Number(range[2]);
        if (!(lo >= 1 && hi >= lo)) throw new InvalidArgumentError(`--probe-shape ${name}=${text}: the range ${d} must be LO-HI with 1 ≤ LO ≤ HI`);
        (rangeOf[name] ??= {})[i] = [lo, hi];
        dims.push(hi);
      } else dims.push(/^\d+$/.test(d) ? Number(d) : Number.NaN);
    });
    if (dims.some((d) => !Number.isSafeInteger(d) || d < 1)) throw new InvalidArgumentError(`--probe-shape ${name}=${text}: dims must be integers ≥ 1 (or a range LO-HI of the sequence axis) joined by 'x' (e.g. 1x16000, 1x256-640)`);
    shapeOf[name] = dims;
  }
  const valueOf: Record<string, number> = {};
  for (const [name, text] of values) {
    if (name in valueOf) throw new InvalidArgumentError(`--probe-value gives '${name}' twice`);
    const v = Number(text);
    if (text.trim() === '' || !Number.isFinite(v)) throw new InvalidArgumentError(`--probe-value ${name}=${text}: the value must be a finite number`);
    valueOf[name] = v;
  }
  const axisOf: Record<string, Record<number, string>> = {};
  for (const [key, axis] of axes) {
    const dot = key.lastIndexOf('.');
    const name = key.slice(0, Math.max(0, dot));
    const dimText = key.slice(dot + 1);
    if (dot <= 0 || !/^\d+$/.test(dimText)) throw new InvalidArgumentError(`--axis ${key}=${axis}: expects NAME.D=AXIS with D a dim index (e.g. state.1=batch)`);
    const dims = (axisOf[name] ??= {});
    if (Number(dimText) in dims) throw new InvalidArgumentError(`--axis gives dim ${dimText} of '${name}' twice`);
    dims[Number(dimText)] = axis;
  }
  return { shapes: shapeOf, values: valueOf, ...(axes.length === 0 ? {} : { axes: axisOf }), ...(Object.keys(rangeOf).length === 0 ? {} : { ranges: rangeOf }) };
}

/**
 * Copy an artifact to `out` (whole model) and `opsDir` (operators + spec.json). Both are
 * written under temporary names in the same directory and renamed into place, replacing an
 * earlier export, so a failure never leaves a half export or stale operator files.
 */
async function exportArtifact(artifact: ModelArtifact, out: string, opsDir: string): Promise<void> {
  const suffix = `.abacus-tmp-${process.pid}`;
  const tmpOut = out + suffix;
  const tmpOps = opsDir + suffix;
  try {
    await fs.copyFile(artifact.modelPath, tmpOut);
    await fs.mkdir(tmpOps);
    for (let k = 0; k < artifact.operatorPaths.length; k++) await fs.copyFile(artifact.operatorPaths[k]!, path.join(tmpOps, operatorFileName(k)));
    // The spec as resolved (a `-small` variant carries its own name), in the cache's format.
    await fs.writeFile(path.join(tmpOps, SPEC_FILE), JSON.stringify(artifact.spec, null, 2));
    await fs.rm(opsDir, { recursive: true, force: true });
    await fs.rename(tmpOps, opsDir);
    await fs.rename(tmpOut, out);
  } finally {
    await fs.rm(tmpOut, { force: true });
    await fs.rm(tmpOps, { recursive: true, force: true });
  }
}

/**
 * The sequence length to use for `spec`: the flag, else the model's default.
 * @throws RangeError when the flag is given for a model without a sequence axis or exceeds
 *   the model's maximum.
 */
export function checkSeqLenFlag(spec: ModelSpec, seqLen: number | undefined): number {
  if (seqLen === undefined) return spec.defaultSeqLen;
  if (spec.dynamicAxes.seq === undefined) throw new RangeError(`--seq-len does not apply to ${spec.name}: it has no sequence axis`);
  if (spec.maxSeqLen !== undefined && seqLen > spec.maxSeqLen) throw new RangeError(`--seq-len ${seqLen} exceeds ${spec.name}'s maximum sequence length ${spec.maxSeqLen}`);
  return seqLen;
}

/**
 * Print a model: its interface (`model-interface.ts`: inputs, outputs, dynamic axes) and its
 * operators at `batch` and `seqLen`; `--json`: the `ModelSpec` plus `interface` (a
 * `ModelInterface`, with `importedOperatorCounts` for an import).
 */
function printSpec(ctx: CliContext, spec: ModelSpec, batch: number, seqLen: number, json: boolean, importedOperatorCounts?: readonly number[]): void {
  const io = modelInterface(spec);
  if (json) {
    ctx.out(JSON.stringify({ ...spec, interface: { ...io, ...(importedOperatorCounts === undefined ? {} : { importedOperatorCounts }) } }, null, 2) + '\n');
    return;
  }
  const index = tensorSpecIndex(spec);
  const rows = spec.operators.map((op) => {
    // Boundary op.index + 1 (what crosses after this operator); none after the last one.
    const crossing = op.index + 1 < spec.operators.length ? boundaryBytes(spec, op.index + 1, batch, seqLen, index) : undefined;
    return [
      op.index,
      op.name,
      round(evalCost(op.gflops, batch, seqLen), 4),
      op.params,
      round(evalCost(op.inputBytes, batch, seqLen) / 1e6, 3),
      round(evalCost(op.outputBytes, batch, seqLen) / 1e6, 3),
      crossing === undefined ? '-' : round(crossing.activationBytes / 1e6, 3),
      crossing === undefined ? '-' : round(crossing.constantBytes / 1e6, 3),
      op.nodeCount,
    ];
  });
  const symbols = spec.dynamicAxes.symbols;
  const sizeText = symbols !== undefined ? `, size ${seqLen} (${Object.entries(symbols).map(([n, v]) => `${n} ${v}`).join(' · ')})` : spec.defaultSeqLen > 0 ? `, seq ${seqLen}` : '';
  ctx.out(`${spec.name}: ${spec.operators.length} operators, ${spec.params.toLocaleString('en-US')} parameters; batch ${batch}${sizeText}\n`);
  ctx.out(interfaceText(spec, io, importedOperatorCounts));
  ctx.out(`operators (at batch ${batch}${sizeText}):\n`);
  ctx.out(formatTable(['#', 'operator', 'GFLOP', 'params', 'in MB', 'out MB', 'cross act MB', 'cross const MB', 'ONNX nodes'], rows));
  ctx.out('cross: bytes carried to the next operator (its inputs and passthrough), activations and constants\n');
  ctx.out(`total GFLOP ${round(totalGflops(spec, batch, seqLen), 3)}\n`);
}
