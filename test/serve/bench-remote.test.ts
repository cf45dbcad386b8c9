/**
 * `abacus bench --target URL` against stub servers (gRPC front end over a stub backend, and a
 * node:http v2 stub) at a low rate for ~1 s: responses become the in-process bench's table and
 * `--json`; in-process flags are usage errors.
 */
import fs from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runExperimentCommand, type ExperimentCliOptions, type ExperimentJson } from '../../src/cli/experiment.ts';
import type { CliContext } from '../../src/cli/context.ts';
import { UsageError } from '../../src/cli/usage.ts';
import { runAbacus } from '../helpers/cli.ts';
import { createGrpcServer, type GrpcInferenceServer } from '../../src/serve/grpc/server.ts';
import { ServeError, type InferenceBackend, type InferRequest, type InferResponse, type ModelConfig, type ModelMetadata, type ModelStatistics } from '../../src/serve/inference.ts';
import { ModelControlOff } from './model-control-off.ts';

/** Serves any model in `names`; every 4th request (by arrival) is a qos_violation; others answer after 5 ms. */
class StubBackend extends ModelControlOff implements InferenceBackend {
  readonly requests: InferRequest[] = [];
  constructor(private readonly names: readonly string[]) {
    super();
  }
  serverMetadata() {
    return { name: 'stub', version: '0', extensions: [] };
  }
  isLive() {
    return true;
  }
  isReady() {
    return true;
  }
  modelReady(name: string) {
    return this.modelMetadata(name).name === name;
  }
  modelMetadata(name: string): ModelMetadata {
    if (!this.names.includes(name)) throw new ServeError('model_not_found', `model ${name} is not served`);
    return { name, versions: ['1'], platform: 'stub', inputs: [], outputs: [] };
  }
  modelList() {
    return [...this.names];
  }
  modelConfig(name: string): ModelConfig {
    return { name: this.modelMetadata(name).name, platform: 'stub', max_batch_size: 0, input: [], output: [] };
  }
  modelStatistics(): ModelStatistics[] {
    return [];
  }
  repositoryIndex() {
    return [];
  }
  async infer(request: InferRequest): Promise<InferResponse> {
    this.requests.push(request);
    this.modelMetadata(request.modelName);
    if (this.requests.length % 4 === 0) throw new ServeError('qos_violation', `model ${request.modelName}: dropped`);
    await new Promise((resolve) => setTimeout(resolve, 5));
    return { modelName: request.modelName, modelVersion: '1', outputs: {}, outputDatatypes: {}, parameters: { queue_ms: 1, compute_ms: 3, operator_groups: 2, executed_batch_size: 1 } };
  }
}

function context(cacheDir: string): CliContext & { stdout: string[]; stderr: string[] } {
  const stdout: string[] = [];
  const stderr: string[] = [];
  return { stdout, stderr, out: (s) => stdout.push(s), err: (s) => stderr.push(s), cacheOptions: () => ({ cacheDir }) };
}

const base: ExperimentCliOptions = { models: ['resnet50-small', 'bert-small'], qosMs: [200], batchSizes: [1, 2], seqLens: [16], rate: 30, queries: 24, seed: 3, drop: true };

describe('abacus bench --target', () => {
  let tmp: string;
  let grpcServer: GrpcInferenceServer;
  let grpcBackend: StubBackend;
  let grpcUrl: string;
  let httpServer: Server;
  let httpUrl: string;
  let httpRequests = 0;

  beforeAll(async () => {
    tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-remote-'));
    grpcBackend = new StubBackend(['resnet50-small', 'bert-small']);
    grpcServer = createGrpcServer(grpcBackend);
    grpcUrl = `grpc://127.0.0.1:${await grpcServer.listen('127.0.0.1', 0)}`;
    httpServer = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        if (req.url === '/v2/health/ready') return void res.writeHead(200).end();
        if (req.url?.startsWith('/v2/models/') === true && req.method === 'GET') return void res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
        httpRequests++;
        if (httpRequests % 3 === 0) return void res.writeHead(503, { 'content-type': 'application/json', 'abacus-error-code': 'overloaded' }).end('{"error":"overloaded: queue full"}');
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"model_name":"m","outputs":[],"parameters":{"queue_ms":0.5,"compute_ms":2,"operator_groups":1}}');
      });
    });
    await new Promise<void>((resolve) => httpServer.listen(0, '127.0.0.1', resolve));
    httpUrl = `http://127.0.0.1:${(httpServer.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    await grpcServer.close(1000);
    await new Promise((resolve) => httpServer.close(resolve));
    await fs.rm(tmp, { recursive: true, force: true });
  });

  it('drives a gRPC server open-loop and reports the bench JSON (every query accounted for)', async () => {
    const ctx = context(tmp);
    const json: ExperimentJson = await runExperimentCommand(ctx, { ...base, target: grpcUrl, json: true, sendQos: true }, { virtual: false, defaultDevice: 'ort' });
    expect(JSON.parse(ctx.stdout.join(''))).toEqual(JSON.parse(JSON.stringify(json)));
    expect(json.device).toBe(grpcUrl);
    expect(json.runs).toHaveLength(1);
    const run = json.runs[0]!;
    expect(run.offered).toBe(24);
    expect(run.rejectedBy).toEqual({ qos_violation: 6 });
    expect(run.violationRatio).toBeCloseTo(6 / 24 + run.late / 24, 10);
    expect(run.services.map((s) => s.service)).toEqual(['resnet50-small', 'bert-small']);
    expect(run.p99Ms).toBeGreaterThanOrEqual(5);
    expect(run.predictorMape).toBeNull();
    // the generator's send lateness is reported (never negative; max ≥ p99 ≥ 0)
    const late = json.generator!.sendLatenessMs;
    expect(late.mean).toBeGreaterThanOrEqual(0);
    expect(late.max).toBeGreaterThanOrEqual(late.p99);
    expect(json.generator!.offeredQps).toBeGreaterThan(0);
    // Inputs synthesized from the model specs at the drawn batch sizes; qos_ms sent; seq_len for bert.
    expect(grpcBackend.requests).toHaveLength(24);
    for (const r of grpcBackend.requests) {
      expect(r.parameters?.['qos_ms']).toBe(200);
      expect(r.inputs.length).toBeGreaterThan(0);
      expect([1, 2]).toContain(r.inputs[0]!.shape[0]);
      expect(r.inputs[0]!.data.kind).toBe('raw');
      if (r.modelName === 'bert-small') expect(r.parameters?.['seq_len']).toBe(16);
    }
  });

  it('drives an HTTP server and prints the same table as the in-process bench', async () => {
    const ctx = context(tmp);
    const json = await runExperimentCommand(ctx, { ...base, models: ['resnet50-small'], queries: 15, target: httpUrl }, { virtual: false, defaultDevice: 'ort' });
    expect(json.runs[0]!.offered).toBe(15);
    expect(json.runs[0]!.rejectedBy).toEqual({ overloaded: 5 });
    const out = ctx.stdout.join('');
    expect(out).toContain(`${httpUrl}, resnet50-small (QoS 200 ms), 15 queries, latency measured at the client; server means: queue 0.50 ms, compute 2.00 ms, 1.0 groups per query`);
    expect(out).toMatch(/policy\s+rate q\/s\s+violations %\s+late \/ rejected/);
    expect(out).toMatch(/server\s+30\.0\s/);
    expect(out).toMatch(/^generator send lateness: mean \d+\.\d\d ms, p99 \d+\.\d\d ms, max \d+\.\d\d ms behind the intended send times \(offered \d+\.\d queries\/s\)$/m);
  });

  it('rejects in-process flags, a bad URL, and a model the server does not serve', async () => {
    const ctx = context(tmp);
    await expect(runExperimentCommand(ctx, { ...base, target: grpcUrl, policy: ['abacus'] }, { virtual: false, defaultDevice: 'ort' })).rejects.toThrow(
      new UsageError("--policy cannot be used with --target: the server's config decides policy, device and predictor"),
    );
    await expect(runExperimentCommand(ctx, { ...base, target: grpcUrl, drop: false, ways: 3 }, { virtual: false, defaultDevice: 'ort' })).rejects.toThrow('--ways, --no-drop cannot be used with --target');
    await expect(runExperimentCommand(ctx, { ...base, target: 'ftp://x:1' }, { virtual: false, defaultDevice: 'ort' })).rejects.toBeInstanceOf(UsageError);
    await expect(runExperimentCommand(ctx, { ...base, sendQos: true }, { virtual: false, defaultDevice: 'ort' })).rejects.toThrow('--send-qos, --timeout-ms, --auth-token-file and --tls-ca go with --target');
    await expect(runExperimentCommand(ctx, { ...base, authTokenFile: 'token' }, { virtual: false, defaultDevice: 'ort' })).rejects.toThrow(/--auth-token-file and --tls-ca go with --target/);
    await expect(runExperimentCommand(ctx, { ...base, models: ['vgg16-small'], target: grpcUrl }, { virtual: false, defaultDevice: 'ort' })).rejects.toThrow(
      `service vgg16-small: the server at ${grpcUrl} does not serve it`,
    );
  });

  it('exits 2 with a usage message from the real CLI when --policy comes with --target', async () => {
    const r = await runAbacus(['bench', '--target', 'grpc://127.0.0.1:1', '--models', 'resnet50-small', '--qos-ms', '50', '--policy', 'abacus'], { cacheDir: tmp });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("error: --policy cannot be used with --target: the server's config decides policy, device and predictor");
  });
});
