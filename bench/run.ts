/**
 * `npm run bench [-- --json] [-- --repeat N] [-- --only split|overlap|sim]`: the foundation
 * benchmarks, full-size models, every ratio against a baseline measured in the same process;
 * `--only sim` runs the simulator speed benchmark (issue 3) alone.
 */
import os from 'node:os';
import { Command } from 'commander';
import * as ort from 'onnxruntime-node';
import { benchSplitOverhead } from './split-overhead.ts';
import { benchOverlap } from './overlap.ts';
import { benchSimSpeed } from './sim-speed.ts';
import { formatTable } from '../src/cli/format.ts';

const program = new Command('bench')
  .option('--json', 'print results as JSON')
  .option('--repeat <n>', 'timed repetitions per measurement', (v) => Number(v), 10)
  .option('--threads <n>', 'ORT intra-op threads per executor', (v) => Number(v), 1)
  .option('--only <which>', 'split | overlap | sim');
program.parse(process.argv);
const opts = program.opts<{ json?: boolean; repeat: number; threads: number; only?: string }>();
if (opts.only !== undefined && !['split', 'overlap', 'sim'].includes(opts.only)) program.error(`--only must be split, overlap or sim, got '${opts.only}'`);
const log = (s: string): void => {
  process.stderr.write(s);
};

const machine = `${os.cpus()[0]?.model ?? 'cpu'} × ${os.cpus().length}, onnxruntime-node ${ort.env.versions.node}, node ${process.version}`;
const out: Record<string, unknown> = { machine };
if (opts.only === undefined || opts.only === 'split') out['splitOverhead'] = await benchSplitOverhead({ repeat: opts.repeat, threads: opts.threads, log });
if (opts.only === 'sim') out['simSpeed'] = await benchSimSpeed({ log });
if (opts.only === undefined || opts.only === 'overlap') {
  out['overlap'] = await benchOverlap({
    pairs: [
      ['resnet50', 'bert'],
      ['vgg16', 'resnet50'],
      ['resnet50', 'resnet50'],
    ],
    batches: [1, 4],
    seqLen: 32,
    threads: opts.threads,
    repeat: opts.repeat,
    log,
  });
}
if (opts.json) {
  process.stdout.write(JSON.stringify(out, null, 2) + '\n');
} else {
  process.stdout.write(`machine: ${machine}\n\n`);
  const so = out['splitOverhead'] as Awaited<ReturnType<typeof benchSplitOverhead>> | undefined;
  if (so) {
    process.stdout.write(`Split overhead, ${so.model} 224² batch ${so.batch}, ${so.threads} intra-op thread(s), median of ${so.repeat}:\n`);
    process.stdout.write(
      formatTable(
        ['path', 'whole model ms', '18 operators ms', 'ratio operators/whole'],
        [
          ['in-process ORT sessions', so.inProcess.wholeMs, so.inProcess.operatorsMs, so.inProcess.ratio],
          ['through executor (OrtDevice)', so.executor.wholeMs, so.executor.operatorsMs, so.executor.ratio],
        ],
      ) + '\n',
    );
  }
  const sim = out['simSpeed'] as Awaited<ReturnType<typeof benchSimSpeed>> | undefined;
  if (sim) {
    process.stdout.write(
      `Simulator speed, ${sim.device}, 4-way uncontrolled overlap (${sim.services.join(', ')}), one core: ` +
        `${Math.round(sim.operators).toLocaleString('en-US')} operator executions in ${(sim.wallMs / 1000).toFixed(2)} s of wall time for ${(sim.simulatedMs / 1000).toFixed(0)} s simulated (${sim.queries.toLocaleString('en-US')} queries)\n` +
        `  ${Math.round(sim.operatorsPerSecond).toLocaleString('en-US')} operator executions per second = ${Math.round(sim.operatorsPer10s).toLocaleString('en-US')} per 10 s (goal ≥ 1,000,000); simulated/wall time ${sim.speedup.toFixed(1)}×\n`,
    );
  }
  const ov = out['overlap'] as Awaited<ReturnType<typeof benchOverlap>> | undefined;
  if (ov) {
    process.stdout.write(
      `Overlap opportunity, OrtDevice, no spinning, BERT seq 32, median of ${opts.repeat}. Group: ${opts.threads} intra-op thread(s) per executor; ` +
        `sequential: the same executors one query at a time; sequential (all cores): executors with ${os.cpus().length} threads, one query at a time:\n`,
    );
    process.stdout.write(
      formatTable(
        ['pair', 'batch', 'A alone ms', 'B alone ms', 'sequential ms', 'sequential (all cores) ms', 'group ms', 'group/sequential', 'group/sequential (all cores)'],
        ov.map((r) => [r.pair, r.batch, r.soloMs[0]!, r.soloMs[1]!, r.sequentialMs, r.sequentialAllCoresMs, r.groupMs, r.ratio, r.ratioVsAllCores]),
      ),
    );
  }
}
