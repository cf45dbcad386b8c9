/**
 * What shedding a gRPC `ModelInfer` call on its metadata saves the server
 * (`npm run bench -- --only grpc-shed [--json]`; `src/serve/grpc/shed-interceptor.ts`).
 *
 * For each message size, the project's gRPC front end runs in a child process
 * (`grpc-shed-server.ts`) over a backend that sheds every call, once on the call's metadata
 * (`meta`) and once on its model after grpc-js has read the message (`handler`, the baseline);
 * 32 callers in this process send `calls` `ModelInfer` messages back to back. The figure is the
 * server process's CPU time per call (`/proc`, `proc-cpu.ts`), which the machine's load does
 * not inflate the way it does wall time; the two modes alternate `rounds` times and the ratio
 * meta ÷ handler is of their medians.
 */
import { spawn } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as grpc from '@grpc/grpc-js';
import { loadInferenceService } from '../src/serve/grpc/proto.ts';
import { MODEL_INFER_PATH } from '../src/serve/grpc/shed-interceptor.ts';
import { median } from '../src/stats.ts';
import { processCpuMs } from './proc-cpu.ts';

const SERVER = path.join(path.dirname(fileURLToPath(import.meta.url)), 'grpc-shed-server.ts');

export interface GrpcShedRow {
  readonly messageBytes: number;
  /** Server CPU µs per shed call, median over the rounds. */
  readonly handlerCpuUsPerCall: number;
  readonly metaCpuUsPerCall: number;
  /** meta ÷ handler. */
  readonly ratio: number;
}

/** Server CPU ms spent on `calls` shed calls of `messageBytes` each, in `mode`. */
async function serverCpuPerCallUs(mode: 'meta' | 'handler', messageBytes: number, calls: number): Promise<number> {
  const child = spawn(process.execPath, ['--import', 'tsx', SERVER, mode], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise<never>((_, reject) => child.once('exit', (code) => reject(new Error(`grpc-shed server exited ${code}`))));
    exited.catch(() => undefined);
    while (!/port \d+/.test(out)) await Promise.race([exited, new Promise((r) => setTimeout(r, 20))]);
    const port = /port (\d+)/.exec(out)![1];
    const message = loadInferenceService().definition['ModelInfer']!.requestSerialize({ model_name: 'm', inputs: [{ name: 'x', datatype: 'UINT8', shape: [1, messageBytes] }], raw_input_contents: [Buffer.alloc(messageBytes)] });
    const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), { 'grpc.max_send_message_length': 64 << 20 });
    const identity = (b: Buffer): Buffer => b;
    const one = (): Promise<grpc.status> => new Promise((resolve) => client.makeUnaryRequest(MODEL_INFER_PATH, identity, identity, message, new grpc.Metadata(), {}, (e) => resolve(e === null ? grpc.status.OK : e.code)));
    for (let i = 0; i < 100; i++) await one(); // warm-up: connection, JIT
    const cpu0 = await processCpuMs(child.pid ?? -1);
    let sent = 0;
    let unexpected = 0;
    await Promise.all(
      Array.from({ length: 32 }, async () => {
        while (sent < calls) {
          sent++;
          if ((await one()) !== grpc.status.UNAVAILABLE) unexpected++;
        }
      }),
    );
    const cpuMs = (await processCpuMs(child.pid ?? -1)) - cpu0;
    client.close();
    if (unexpected > 0) throw new Error(`grpc-shed: ${unexpected} of ${calls} calls were not answered UNAVAILABLE`);
    return (cpuMs * 1000) / calls;
  } finally {
    child.kill();
  }
}

export async function benchGrpcShed(options: { log?: (s: string) => void; sizes?: readonly number[]; calls?: number; rounds?: number } = {}): Promise<{ rows: GrpcShedRow[]; loadAverage1m: number }> {
  const log = options.log ?? (() => undefined);
  const rows: GrpcShedRow[] = [];
  for (const messageBytes of options.sizes ?? [1024, 196_608, 614_400]) {
    const handler: number[] = [];
    const meta: number[] = [];
    for (let r = 0; r < (options.rounds ?? 3); r++) {
      handler.push(await serverCpuPerCallUs('handler', messageBytes, options.calls ?? 2000));
      meta.push(await serverCpuPerCallUs('meta', messageBytes, options.calls ?? 2000));
    }
    const row = { messageBytes, handlerCpuUsPerCall: median(handler), metaCpuUsPerCall: median(meta), ratio: median(meta) / median(handler) };
    rows.push(row);
    log(`grpc-shed ${(messageBytes / 1024).toFixed(0)} KiB: server CPU per shed call ${row.handlerCpuUsPerCall.toFixed(0)} µs in the handler, ${row.metaCpuUsPerCall.toFixed(0)} µs on the metadata (${row.ratio.toFixed(2)}×; load ${os.loadavg()[0]!.toFixed(2)})\n`);
  }
  return { rows, loadAverage1m: os.loadavg()[0]! };
}
