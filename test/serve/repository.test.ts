/**
 * End to end: Triton's model repository extension and per-model state on `abacus serve` (the
 * real CLI as a child process).
 *
 * - sim:a100 with `--model-control explicit` (the control plane is the point): the index over
 *   HTTP and gRPC (a grpc-js client built from `grpc_service.proto`), unload then infer (HTTP 404
 *   / gRPC NOT_FOUND), load then infer (200 / OK), a NEW model loaded with its settings in
 *   `parameters.config`, a new model the predictor was not trained on (served with the cost
 *   fallback, READY with a note; with a `flop`-feature predictor file, scored by it), and the
 *   security cases (path-traversal names, `file:` payloads, bytes
 *   parameters, oversized or path-like configs: each a 400 / INVALID_ARGUMENT naming the field,
 *   and the model repository folder byte-for-byte unchanged); gRPC errors echo the request `id`.
 * - the same server without the flag: load/unload 403 / PERMISSION_DENIED, the index answers.
 * - ort with one good and one broken model (an operator file of the imported model corrupted in
 *   the cache): the good one serves, the broken one is UNAVAILABLE with its reason in the index,
 *   the server keeps running and exits 0 on SIGTERM; and a model the predictor was not trained on,
 *   loaded at runtime, served with the cost fallback transferred from the predictor's models.
 */
import fs from 'node:fs/promises';
import http from 'node:http';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { describe, expect, it } from 'vitest';
import { MODEL_FILE } from '../../src/model/artifact.ts';
import { resolveModelSpec } from '../../src/model/catalog.ts';
import { onnx } from '../../src/model/onnx/proto.ts';
import { ModelRepository } from '../../src/model/repository.ts';
import { writePredictorFile } from '../../src/predict/file.ts';
import { trainPredictor } from '../../src/predict/train.ts';
import { loadInferenceService } from '../../src/serve/grpc/proto.ts';
import { simulateProfileRows } from '../../bench/predictor.ts';
import { buildSkipNet } from '../fixtures/tiny-models.ts';
import { cliSandbox } from '../helpers/cli.ts';
import { startChildServer, writeConfig, type ChildServer } from './child-serve.ts';

type RawClient = grpc.Client & Record<string, (req: unknown, metadata: grpc.Metadata, options: grpc.CallOptions, cb: (e: grpc.ServiceError | null, r: unknown) => void) => grpc.ClientUnaryCall>;

function rawCall<T>(client: RawClient, method: string, request: unknown, timeoutMs = 60_000): Promise<T> {
  return new Promise((resolve, reject) => {
    client[method]!(request, new grpc.Metadata(), { deadline: Date.now() + timeoutMs }, (e, r) => (e !== null ? reject(e) : resolve(r as T)));
  });
}

async function failure(promise: Promise<unknown>): Promise<grpc.ServiceError> {
  try {
    const r = await promise;
    throw new Error(`expected the call to fail, got ${JSON.stringify(r).slice(0, 300)}`);
  } catch (e) {
    if (e instanceof Error && e.message.startsWith('expected the call')) throw e;
    return e as grpc.ServiceError;
  }
}

/** POST with the path sent exactly as given (no URL normalization of `..` or `%2F`, unlike fetch). */
function rawPost(url: string, rawPath: string, body: string): Promise<{ status: number; body: string }> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, method: 'POST', path: rawPath, headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) } }, (res) => {
      let text = '';
      res.on('data', (d: Buffer) => (text += d.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.on('error', reject);
    req.end(body);
  });
}

async function post(url: string, body?: unknown): Promise<{ status: number; json: unknown }> {
  const r = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, ...(body === undefined ? {} : { body: JSON.stringify(body) }) });
  return { status: r.status, json: await r.json() };
}

/** Every file under `dir` with its size and mtime (the repository's state, to check nothing was written). */
async function snapshot(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const e of await fs.readdir(dir, { recursive: true, withFileTypes: true })) {
    const p = path.join(e.parentPath, e.name);
    const st = await fs.stat(p);
    out.push(`${path.relative(dir, p)} ${e.isDirectory() ? 'dir' : st.size} ${st.mtimeMs}`);
  }
  return out.sort();
}

const IMAGE = 3 * 64 * 64;
const imageRequest = (id?: string): unknown => ({ ...(id === undefined ? {} : { id }), inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3, 64, 64], data: new Array<number>(IMAGE).fill(0.25) }] });
const grpcImage = (model: string, id = ''): unknown => ({ model_name: model, id, inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3, 64, 64] }], raw_input_contents: [Buffer.alloc(IMAGE * 4)] });

interface IndexEntry {
  name: string;
  version: string;
  state: string;
  reason: string;
}

const sandbox = cliSandbox('abacus-repository-');

const SIM_CONFIG = ['device: sim:a100', 'policy: { name: fcfs, drop: false }', 'services:', '  - name: resnet', '    model: resnet50-small', '    qosTargetMs: 5000', '    batchSizes: [1, 2]'];

describe('repository extension on abacus serve --model-control explicit (child process, sim:a100)', () => {
  it('index, unload then infer (404 / NOT_FOUND), load then infer (200), a new model from parameters.config, over HTTP and gRPC; hostile loads are 400s that write nothing', async () => {
    const config = await writeConfig(sandbox.tmp, 'sim.yaml', SIM_CONFIG);
    const server: ChildServer = await startChildServer(config, { cacheDir: sandbox.cacheDir, flags: ['--model-control', 'explicit', '--grace-ms', '2000', '--profile-samples', '100'] });
    const { Client } = loadInferenceService();
    const raw = new Client(server.grpcAddress!, grpc.credentials.createInsecure()) as unknown as RawClient;
    const url = server.httpUrl;
    try {
      const meta = (await (await fetch(`${url}/v2`)).json()) as { extensions: string[] };
      expect(meta.extensions).toContain('model_repository');

      // index: HTTP (no body, {"ready": true}) and gRPC
      expect(await post(`${url}/v2/repository/index`)).toEqual({ status: 200, json: [{ name: 'resnet', version: '1', state: 'READY', reason: '' }] });
      expect((await post(`${url}/v2/repository/index`, { ready: true })).json).toHaveLength(1);
      expect(await post(`${url}/v2/repository/index`, { ready: 'yes' })).toMatchObject({ status: 400, json: { error: expect.stringMatching(/^ready must be true or false/) as unknown } });
      expect(await post(`${url}/v2/repository/index`, { ready: true, x: 1 })).toMatchObject({ status: 400, json: { error: expect.stringMatching(/^the repository index request: unknown field\(s\) 'x'/) as unknown } });
      expect((await post(`${url}/v2/repository/index`, { repository_name: '', ready: true })).status).toBe(200);
      expect(await rawCall(raw, 'RepositoryIndex', {})).toEqual({ models: [{ name: 'resnet', version: '1', state: 'READY', reason: '' }] });

      // unload_dependents must be a boolean (HTTP and gRPC); a refused unload leaves the model READY
      expect(await post(`${url}/v2/repository/models/resnet/unload`, { parameters: { unload_dependents: 'yes' } })).toMatchObject({ status: 400, json: { error: "unload 'resnet': parameters.unload_dependents must be true or false, got \"yes\"" } });
      const badUnload = await failure(rawCall(raw, 'RepositoryModelUnload', { model_name: 'resnet', parameters: { unload_dependents: { string_param: 'yes' } } }));
      expect([badUnload.code, badUnload.details]).toEqual([grpc.status.INVALID_ARGUMENT, `unload 'resnet': parameters.unload_dependents must be true or false, got "yes"`]);
      expect((await fetch(`${url}/v2/models/resnet/ready`)).status).toBe(200);
      // the reserved name 'stats' (GET /v2/models/stats): a 400 / INVALID_ARGUMENT, statistics still answer
      const statsCfg = JSON.stringify({ model: 'resnet50-small', qosTargetMs: 4000 });
      expect(await post(`${url}/v2/repository/models/stats/load`, { parameters: { config: statsCfg } })).toMatchObject({ status: 400, json: { error: expect.stringMatching(/^load: model name 'stats' is reserved/) as unknown } });
      expect((await failure(rawCall(raw, 'RepositoryModelLoad', { model_name: 'stats', parameters: { config: { string_param: statsCfg } } }))).code).toBe(grpc.status.INVALID_ARGUMENT);
      expect(await (await fetch(`${url}/v2/models/stats`)).json()).toMatchObject({ model_stats: [{ name: 'resnet' }] });

      // unload over HTTP, then infer: 404 over HTTP, NOT_FOUND over gRPC (with the request id echoed)
      expect(await post(`${url}/v2/repository/models/resnet/unload`)).toEqual({ status: 200, json: {} });
      const gone = await post(`${url}/v2/models/resnet/infer`, imageRequest('req-7'));
      expect(gone.status).toBe(404);
      expect(gone.json).toEqual({ error: "model 'resnet' is unloaded (load it through the repository extension: HTTP POST /v2/repository/models/resnet/load, gRPC RepositoryModelLoad)", id: 'req-7' });
      const goneGrpc = await failure(rawCall(raw, 'ModelInfer', grpcImage('resnet', 'g-1')));
      expect(goneGrpc.code).toBe(grpc.status.NOT_FOUND);
      expect(goneGrpc.details).toBe("model 'resnet' is unloaded (load it through the repository extension: HTTP POST /v2/repository/models/resnet/load, gRPC RepositoryModelLoad) (request id \"g-1\")");
      expect(await rawCall(raw, 'RepositoryIndex', {})).toEqual({ models: [{ name: 'resnet', version: '1', state: 'UNAVAILABLE', reason: 'unloaded' }] });
      expect(await rawCall(raw, 'RepositoryIndex', { ready: true })).toEqual({ models: [] });
      expect((await fetch(`${url}/v2/models/resnet/ready`)).status).toBe(400);
      expect(await (await fetch(`${url}/v2/models`)).json()).toEqual({ models: [] });
      expect(await (await fetch(`${url}/v2/models/resnet`)).json()).toMatchObject({ name: 'resnet', state: 'UNAVAILABLE', reason: 'unloaded' });

      // load over gRPC, then infer over both
      expect(await rawCall(raw, 'RepositoryModelLoad', { model_name: 'resnet' })).toEqual({});
      expect((await fetch(`${url}/v2/models/resnet/ready`)).status).toBe(200);
      expect((await post(`${url}/v2/models/resnet/infer`, imageRequest())).status).toBe(200);
      expect(await rawCall(raw, 'ModelInfer', grpcImage('resnet'))).toMatchObject({ model_name: 'resnet' });

      // a new model: its settings in parameters.config (HTTP), then unload it over gRPC
      const cfg = JSON.stringify({ model: 'resnet50-small', qosTargetMs: 4000, batchSizes: [1] });
      expect(await post(`${url}/v2/repository/models/resnet2/load`, { parameters: { config: cfg } })).toEqual({ status: 200, json: {} });
      expect((await post(`${url}/v2/models/resnet2/infer`, imageRequest())).status).toBe(200);
      expect(await (await fetch(`${url}/v2/models`)).json()).toEqual({ models: ['resnet', 'resnet2'] });
      expect((await (await fetch(`${url}/v2/models/resnet2/config`)).json())).toMatchObject({ name: 'resnet2', max_batch_size: 1 });
      expect(await rawCall(raw, 'RepositoryModelUnload', { model_name: 'resnet2' })).toEqual({});
      expect((await failure(rawCall(raw, 'ModelInfer', grpcImage('resnet2')))).code).toBe(grpc.status.NOT_FOUND);
      // a new model over gRPC (string_param config)
      expect(await rawCall(raw, 'RepositoryModelLoad', { model_name: 'resnet3', parameters: { config: { string_param: cfg } } })).toEqual({});
      expect(await rawCall(raw, 'ModelInfer', grpcImage('resnet3'))).toMatchObject({ model_name: 'resnet3' });
      const stats = (await (await fetch(`${url}/v2/models/resnet3/stats`)).json()) as { model_stats: { inference_count: number }[] };
      expect(stats.model_stats[0]!.inference_count).toBe(1);
      expect(await (await fetch(`${url}/metrics`)).text()).toMatch(/abacus_requests_total\{model="resnet3",outcome="success"\} 1/);

      // a model the predictor was not trained on (profiled on resnet50-small alone, `full` features): admitted with the
      // cost fallback (predict/unseen.ts) fitted to its solo runs on a private sim:a100 (7 segments × 5 batches × 3
      // sequence lengths), READY with a note saying so; it and the co-located model are served
      const bertConfig = JSON.stringify({ model: 'bert-small', qosTargetMs: 5000, batchSizes: [1, 2] });
      expect(await post(`${url}/v2/repository/models/bert/load`, { parameters: { config: bertConfig } })).toEqual({ status: 200, json: {} });
      const fallbackNote = /^predicted by the cost fallback \(FLOPs, bytes and kernels fitted to 105 solo runs of it measured on a private copy of sim:a100 in simulated time, \d+\.\d% MAPE on them\), groups with it as if run after the others, until it is profiled/;
      const entry = ((await post(`${url}/v2/repository/index`)).json as IndexEntry[]).find((m) => m.name === 'bert');
      expect(entry).toMatchObject({ state: 'READY', reason: expect.stringMatching(fallbackNote) as unknown });
      console.log(`bert READY: ${entry?.reason}`);
      expect(((await rawCall<{ models: IndexEntry[] }>(raw, 'RepositoryIndex', { ready: true })).models).find((m) => m.name === 'bert')?.reason).toMatch(fallbackNote);
      expect(await (await fetch(`${url}/v2/models/bert`)).json()).toMatchObject({ name: 'bert', state: 'READY', reason: expect.stringMatching(fallbackNote) as unknown });
      expect((await fetch(`${url}/v2/models/bert/ready`)).status).toBe(200);
      expect(server.stderr()).toMatch(/model loaded at runtime is not in the predictor: served with a fallback prediction/);
      const tokens = (batch: number, seq: number): unknown => ({
        inputs: [
          { name: 'input_ids', datatype: 'INT64', shape: [batch, seq], data: new Array<number>(batch * seq).fill(7) },
          { name: 'attention_mask', datatype: 'INT64', shape: [batch, seq], data: new Array<number>(batch * seq).fill(1) },
        ],
      });
      const mixed = await Promise.all([
        ...Array.from({ length: 8 }, (_, i) => post(`${url}/v2/models/bert/infer`, tokens(1 + (i % 2), 8 + i))),
        ...Array.from({ length: 8 }, () => post(`${url}/v2/models/resnet/infer`, imageRequest())),
      ]);
      expect(mixed.map((r) => r.status)).toEqual(new Array<number>(16).fill(200));
      expect(mixed[0]!.json).toMatchObject({ model_name: 'bert' });
      expect(await (await fetch(`${url}/metrics`)).text()).toMatch(/abacus_requests_total\{model="bert",outcome="success"\} 8/);
      // re-loaded after an unload: admitted as before, the same note
      expect(await post(`${url}/v2/repository/models/bert/unload`)).toEqual({ status: 200, json: {} });
      expect(await post(`${url}/v2/repository/models/bert/load`)).toEqual({ status: 200, json: {} });
      expect(((await post(`${url}/v2/repository/index`)).json as IndexEntry[]).find((m) => m.name === 'bert')).toMatchObject({ state: 'READY', reason: expect.stringMatching(fallbackNote) as unknown });
      expect((await post(`${url}/v2/models/bert/infer`, tokens(1, 16))).status).toBe(200);

      // hostile loads: each a 400 naming the field, nothing written to the model repository
      await fs.mkdir(sandbox.cacheDir, { recursive: true }); // sim built nothing; a write would show in it all the same
      const before = await snapshot(sandbox.cacheDir);
      const names: [string, RegExp][] = [
        ['/v2/repository/models/../x/load', /^load: model name "\.\.\/x" is not a model name/],
        ['/v2/repository/models/%2Fetc%2Fpasswd/load', /^load: model name "\/etc\/passwd" is not a model name/],
        ['/v2/repository/models/..%2fx/load', /^load: model name "\.\.\/x" is not a model name/],
        ['/v2/repository/models//etc/passwd/load', /^load: model name "\/etc\/passwd" is not a model name/],
        ['/v2/repository/models/..%2F..%2Fetc/unload', /^unload: model name "\.\.\/\.\.\/etc" is not a model name/],
      ];
      for (const [p, message] of names) {
        const r = await rawPost(url, p, JSON.stringify({ parameters: { config: cfg } }));
        expect(r.status, `${p}: ${r.body}`).toBe(400);
        expect((JSON.parse(r.body) as { error: string }).error, p).toMatch(message);
      }
      const bodies: [unknown, RegExp][] = [
        [{ parameters: { 'file:1/model.onnx': Buffer.from('not a model').toString('base64') } }, /parameters\.file:1\/model\.onnx: model files are never accepted/],
        [{ parameters: { config: cfg, 'file:../../x.py': 'cHJpbnQoMSk=' } }, /parameters\.file:\.\.\/\.\.\/x\.py: model files are never accepted/],
        [{ parameters: { config: 'x'.repeat(20_000) } }, /parameters\.config is 20000 bytes; at most 16384/],
        [{ parameters: { config: JSON.stringify({ model: '../../etc/passwd', qosTargetMs: 10 }) } }, /parameters\.config\.model: "\.\.\/\.\.\/etc\/passwd" is not a model name/],
        [{ parameters: { config: JSON.stringify({ model: '/tmp/evil.onnx', qosTargetMs: 10 }) } }, /parameters\.config\.model: "\/tmp\/evil\.onnx" is not a model name/],
        [{ parameters: { config: JSON.stringify({ model: 'resnet50-small', qosTargetMs: -1 }) } }, /parameters\.config\.qosTargetMs: /],
        [{ parameters: { config: JSON.stringify({ model: 'resnet50-small', qosTargetMs: 10, onnx: 'AAAA' }) } }, /parameters\.config: unknown field\(s\) 'onnx'/],
        [{ parameters: { config: '{not json' } }, /parameters\.config is not valid JSON/],
        [{ parameters: { config: 5 } }, /parameters\.config must be a string/],
        [{ parameters: { config: cfg }, files: ['x'] }, /unknown field\(s\) 'files'/],
      ];
      for (const [body, message] of bodies) {
        const r = await post(`${url}/v2/repository/models/evil/load`, body);
        expect(r.status, JSON.stringify(r.json)).toBe(400);
        expect((r.json as { error: string }).error).toMatch(message);
      }
      const grpcBad: [unknown, RegExp][] = [
        [{ model_name: '../x' }, /model name "\.\.\/x" is not a model name/],
        [{ model_name: 'evil', parameters: { 'file:1/model.onnx': { bytes_param: Buffer.from('x') } } }, /parameters\.file:1\/model\.onnx: model files are never accepted/],
        [{ model_name: 'evil', parameters: { config: { bytes_param: Buffer.from(cfg) } } }, /parameters\.config: bytes_param is not accepted/],
        [{ model_name: 'evil', parameters: { config: { string_param: 'y'.repeat(17_000) } } }, /parameters\.config is 17000 bytes/],
      ];
      for (const [request, message] of grpcBad) {
        const e = await failure(rawCall(raw, 'RepositoryModelLoad', request));
        expect(e.code, e.details).toBe(grpc.status.INVALID_ARGUMENT);
        expect(e.details).toMatch(message);
      }
      expect(await snapshot(sandbox.cacheDir)).toEqual(before);
      expect((await fetch(`${url}/v2/models/evil`)).status).toBe(404);
      expect((await post(`${url}/v2/repository/models/nope/unload`)).status).toBe(404);
      // the server still serves
      expect((await post(`${url}/v2/models/resnet/infer`, imageRequest())).status).toBe(200);
    } finally {
      raw.close();
      expect(await server.stop()).toBe(0);
    }
  }, 300_000);

  it('a second operator count of a model the server has is refused at load (400 naming parameters.config.model); the same count loads', async () => {
    const fixture = await buildSkipNet(path.join(sandbox.tmp, 'fixture-mynet'), { name: 'mynet' });
    for (const n of ['2', '4']) {
      const r = await sandbox.inProcess('models', 'import', fixture.modelPath, '--operators', n, '--name', 'mynet');
      expect(r.code, r.stderr).toBe(0);
    }
    const config = await writeConfig(sandbox.tmp, 'mynet.yaml', ['device: sim:a100', 'policy: { name: fcfs, drop: false }', 'services:', '  - model: mynet:2', '    name: mynet', '    qosTargetMs: 5000']);
    const server = await startChildServer(config, { cacheDir: sandbox.cacheDir, flags: ['--model-control', 'explicit', '--grace-ms', '2000', '--profile-samples', '50'] });
    try {
      const four = await post(`${server.httpUrl}/v2/repository/models/mynet4/load`, { parameters: { config: JSON.stringify({ model: 'mynet:4', qosTargetMs: 5000 }) } });
      expect(four).toMatchObject({ status: 400, json: { error: expect.stringMatching(/^load 'mynet4': parameters\.config\.model: 'mynet:4' is model mynet with 4 operators, and model 'mynet' of this server has it with 2; a server serves one operator count per model/) as unknown } });
      expect((await fetch(`${server.httpUrl}/v2/models/mynet4`)).status).toBe(404);
      expect(await post(`${server.httpUrl}/v2/repository/models/mynet2/load`, { parameters: { config: JSON.stringify({ model: 'mynet:2', qosTargetMs: 5000 }) } })).toEqual({ status: 200, json: {} });
    } finally {
      expect(await server.stop()).toBe(0);
    }
  }, 300_000);

  it('with a flop-feature predictor (--predictor FILE), a model it was not trained on is scored by the predictor itself', async () => {
    // a linear flop-feature predictor of sim:a100 trained on resnet50-small alone (simulated groups)
    const spec = await resolveModelSpec(new ModelRepository({ cacheDir: sandbox.cacheDir }), 'resnet50-small');
    const rows = await simulateProfileRows({ models: [spec], samples: 300, maxGroupSize: 2, batchSizes: [1, 2, 4], seed: 5 });
    const trained = await trainPredictor(rows, { kind: 'linear', featureSet: 'flop', specs: new Map([[spec.name, spec]]), holdout: 0, folds: 0, files: [] });
    const file = path.join(sandbox.tmp, 'flop-predictor.json');
    await writePredictorFile(file, trained.file);
    const config = await writeConfig(sandbox.tmp, 'sim-flop.yaml', SIM_CONFIG);
    const server = await startChildServer(config, { cacheDir: sandbox.cacheDir, flags: ['--model-control', 'explicit', '--predictor', file, '--grace-ms', '2000'] });
    const url = server.httpUrl;
    try {
      const cfg = JSON.stringify({ model: 'bert-small', qosTargetMs: 5000, batchSizes: [1] });
      expect(await post(`${url}/v2/repository/models/bert/load`, { parameters: { config: cfg } })).toEqual({ status: 200, json: {} });
      const index = (await post(`${url}/v2/repository/index`)).json as IndexEntry[];
      expect(index).toEqual([
        { name: 'resnet', version: '1', state: 'READY', reason: '' },
        { name: 'bert', version: '1', state: 'READY', reason: "predicted by the flop-feature predictor from the model's FLOPs, bytes and kernels (not trained on it)" },
      ]);
      const tokens = { inputs: ['input_ids', 'attention_mask'].map((name) => ({ name, datatype: 'INT64', shape: [1, 8], data: new Array<number>(8).fill(1) })) };
      const both = await Promise.all([post(`${url}/v2/models/bert/infer`, tokens), post(`${url}/v2/models/resnet/infer`, imageRequest()), post(`${url}/v2/models/bert/infer`, tokens)]);
      expect(both.map((r) => r.status)).toEqual([200, 200, 200]);
    } finally {
      expect(await server.stop()).toBe(0);
    }
  }, 300_000);

  it('without --model-control explicit, load and unload are 403 / PERMISSION_DENIED and the index answers', async () => {
    const config = await writeConfig(sandbox.tmp, 'sim-off.yaml', SIM_CONFIG);
    const server = await startChildServer(config, { cacheDir: sandbox.cacheDir, flags: ['--grace-ms', '1000', '--profile-samples', '100'] });
    const { Client } = loadInferenceService();
    const raw = new Client(server.grpcAddress!, grpc.credentials.createInsecure()) as unknown as RawClient;
    try {
      const load = await post(`${server.httpUrl}/v2/repository/models/resnet/load`);
      expect(load.status).toBe(403);
      expect((load.json as { error: string }).error).toMatch(/^load 'resnet': model control is off; start the server with --model-control explicit/);
      expect((await post(`${server.httpUrl}/v2/repository/models/resnet/unload`)).status).toBe(403);
      const e = await failure(rawCall(raw, 'RepositoryModelUnload', { model_name: 'resnet' }));
      expect(e.code).toBe(grpc.status.PERMISSION_DENIED);
      expect(e.details).toMatch(/model control is off/);
      expect((await post(`${server.httpUrl}/v2/repository/index`)).json).toEqual([{ name: 'resnet', version: '1', state: 'READY', reason: '' }]);
      expect((await post(`${server.httpUrl}/v2/models/resnet/infer`, imageRequest())).status).toBe(200);
    } finally {
      raw.close();
      expect(await server.stop()).toBe(0);
    }
  }, 300_000);
});

describe('containment on abacus serve (child process, ort)', () => {
  /** Import skipnet as goodnet and badnet, and corrupt an operator file of badnet in the cache (once); its path. */
  let imported: Promise<string> | undefined;
  const goodAndBroken = (): Promise<string> =>
    (imported ??= (async () => {
      for (const name of ['goodnet', 'badnet']) {
        const artifact = await buildSkipNet(path.join(sandbox.tmp, `fixture-${name}`), { name });
        const r = await sandbox.inProcess('models', 'import', artifact.modelPath, '--operators', '2', '--name', name);
        expect(r.code, r.stderr).toBe(0);
      }
      const files = (await fs.readdir(sandbox.cacheDir, { recursive: true })).map((f) => path.join(sandbox.cacheDir, f));
      const operatorFile = files.find((f) => f.includes('badnet') && /op[^/]*\.onnx$/.test(f) && f.endsWith('.onnx'));
      expect(operatorFile, files.join('\n')).toBeDefined();
      await fs.writeFile(operatorFile!, 'this is not an ONNX model');
      return operatorFile!;
    })());

  it('one good and one broken model: the good one serves, the broken one is UNAVAILABLE with its reason, exit 0 on SIGTERM', async () => {
    const operatorFile = await goodAndBroken();

    const config = await writeConfig(sandbox.tmp, 'ort.yaml', ['device: ort', 'policy: triton', 'services:', '  - model: goodnet', '    qosTargetMs: 60000', '  - model: badnet', '    qosTargetMs: 60000']);
    const server = await startChildServer(config, { cacheDir: sandbox.cacheDir, flags: ['--grace-ms', '2000'] });
    try {
      expect(server.stdout()).toMatch(/abacus serve: ready: goodnet \(\d+ ms to load and warm up\); UNAVAILABLE: badnet \(/);
      expect((await fetch(`${server.httpUrl}/v2/health/ready`)).status).toBe(200);
      const index = (await post(`${server.httpUrl}/v2/repository/index`)).json as IndexEntry[];
      expect(index.map((m) => [m.name, m.state])).toEqual([
        ['goodnet', 'READY'],
        ['badnet', 'UNAVAILABLE'],
      ]);
      // the operator file by its place in the model cache, never the server's absolute path (the log has that)
      const shown = `<model cache>${operatorFile.slice(sandbox.cacheDir.length)}`;
      expect(index[1]!.reason).toMatch(new RegExp(`^badnet: operator \\d+ \\(op\\d+\\) at ${shown.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} cannot be loaded: .*Protobuf parsing failed`));
      expect(index[1]!.reason).not.toContain(sandbox.cacheDir);
      // nor the imported model's source file by its absolute path (it sits in the sandbox): by its name only
      expect(index[1]!.reason).not.toContain(sandbox.tmp);
      expect(index[1]!.reason).toContain('abacus models import <…>/');
      // ends with the repair: the command, and the entry's folder by name (not its full path)
      const folder = path.basename(path.dirname(operatorFile));
      expect(index[1]!.reason).toMatch(new RegExp(`Protobuf parsing failed.*; re-import it with \`abacus models import \\S+\\.onnx --name badnet --operators 2 --force\`, or delete the folder ${folder} of the model cache and import it again$`, 's'));
      console.log(`badnet UNAVAILABLE: ${index[1]!.reason}`);
      const x = { inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 4, 8, 8], data: new Array<number>(256).fill(0.5) }] };
      const good = await post(`${server.httpUrl}/v2/models/goodnet/infer`, x);
      expect(good.status).toBe(200);
      expect(good.json).toMatchObject({ model_name: 'goodnet', outputs: [{ name: 'logits', shape: [1, 10] }] });
      const bad = await post(`${server.httpUrl}/v2/models/badnet/infer`, x);
      expect(bad.status).toBe(503);
      expect((bad.json as { error: string }).error).toMatch(/^not_ready: model 'badnet' is UNAVAILABLE: /);
      expect((bad.json as { error: string }).error).not.toContain(sandbox.tmp);
      expect(JSON.stringify(await (await fetch(`${server.httpUrl}/v2/models/badnet`)).json())).not.toContain(sandbox.tmp);
      expect((await fetch(`${server.httpUrl}/v2/models/badnet/ready`)).status).toBe(400);
      expect(await (await fetch(`${server.httpUrl}/v2/models`)).json()).toEqual({ models: ['goodnet'] });
      const { Client } = loadInferenceService();
      const raw = new Client(server.grpcAddress!, grpc.credentials.createInsecure()) as unknown as RawClient;
      try {
        const e = await failure(rawCall(raw, 'ModelInfer', { model_name: 'badnet', inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 4, 8, 8] }], raw_input_contents: [Buffer.alloc(1024)] }));
        expect(e.code).toBe(grpc.status.UNAVAILABLE);
        expect(e.details).toMatch(/^not_ready: model 'badnet' is UNAVAILABLE: /);
      } finally {
        raw.close();
      }
    } finally {
      expect(await server.stop()).toBe(0);
    }
    expect(server.stdout()).toMatch(/abacus serve: stopped\n/);
  }, 300_000);

  it('abacus models import FILE --force of the same file rebuilds the corrupt operator file (without --force: already imported, still corrupt)', async () => {
    const operatorFile = await goodAndBroken();
    const file = path.join(sandbox.tmp, 'fixture-badnet', MODEL_FILE); // what goodAndBroken imported
    // in this process: the exit code and output are the same, without two CLI start-ups (a spawned
    // `models import --force` is in test/onnx-import-constants.test.ts)
    const again = await sandbox.inProcess('models', 'import', file, '--operators', '2', '--name', 'badnet');
    expect([again.code, again.stdout]).toEqual([0, expect.stringContaining('badnet: already imported into') as unknown]);
    expect(await fs.readFile(operatorFile, 'utf8')).toBe('this is not an ONNX model');
    const forced = await sandbox.inProcess('models', 'import', file, '--operators', '2', '--name', 'badnet', '--force');
    expect(forced.code, forced.stderr).toBe(0);
    expect(forced.stdout).toContain('badnet: imported into');
    // whole again: a valid ONNX model with a graph
    const bytes = await fs.readFile(operatorFile);
    expect(onnx.ModelProto.decode(bytes).graph?.node?.length ?? 0).toBeGreaterThan(0);
    await fs.writeFile(operatorFile, 'this is not an ONNX model'); // broken again for the tests after this one
  }, 300_000);

  // One server for two cases (a server start and a first-start profile fewer): its first start
  // profiles with the broken model left out, and model control lets a new model be loaded after.
  it('with a policy that profiles a predictor on first start, the broken model is found alone and left out of the profile; the good one serves; a model the predictor was not trained on, loaded at runtime, is served with the transferred cost fallback', async () => {
    await goodAndBroken();
    const artifact = await buildSkipNet(path.join(sandbox.tmp, 'fixture-othernet'), { name: 'othernet' });
    const imported = await sandbox.inProcess('models', 'import', artifact.modelPath, '--operators', '2', '--name', 'othernet');
    expect(imported.code, imported.stderr).toBe(0);
    const config = await writeConfig(sandbox.tmp, 'ort-fcfs.yaml', ['device: ort', 'policy: { name: fcfs, drop: false }', 'services:', '  - model: goodnet', '    qosTargetMs: 60000', '  - model: badnet', '    qosTargetMs: 60000']);
    const server = await startChildServer(config, { cacheDir: sandbox.cacheDir, flags: ['--grace-ms', '2000', '--profile-samples', '30', '--model-control', 'explicit'], readyTimeoutMs: 240_000 });
    const url = server.httpUrl;
    try {
      expect(server.stdout()).toMatch(/abacus serve: ready: goodnet \(\d+ ms to load and warm up\); UNAVAILABLE: badnet \(badnet: operator \d+ \(op\d+\) at .* cannot be loaded: /);
      const x = { inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 4, 8, 8], data: new Array<number>(256).fill(0.5) }] };
      expect((await post(`${url}/v2/models/goodnet/infer`, x)).status).toBe(200);
      expect((await post(`${url}/v2/models/badnet/infer`, x)).status).toBe(503);
      expect(server.stderr()).toContain('model cannot load: profiling the predictor without it');

      // the predictor knows goodnet alone: othernet, loaded now, is admitted with the cost fallback transferred from it
      const cfg = JSON.stringify({ model: 'othernet', qosTargetMs: 60000 });
      expect(await post(`${url}/v2/repository/models/othernet/load`, { parameters: { config: cfg } })).toEqual({ status: 200, json: {} });
      const entry = ((await post(`${url}/v2/repository/index`)).json as IndexEntry[]).find((m) => m.name === 'othernet');
      expect(entry).toMatchObject({
        state: 'READY',
        reason: expect.stringMatching(/^predicted by the cost fallback \(FLOPs, bytes and kernels transferred from the predictor's models, \d+\.\d% MAPE on them; its error on this model is unknown\), groups with it as if run after the others, until it is profiled/) as unknown,
      });
      const both = await Promise.all([post(`${url}/v2/models/othernet/infer`, x), post(`${url}/v2/models/goodnet/infer`, x), post(`${url}/v2/models/othernet/infer`, x)]);
      expect(both.map((r) => r.status)).toEqual([200, 200, 200]);
      expect(both[0].json).toMatchObject({ model_name: 'othernet', outputs: [{ name: 'logits', shape: [1, 10] }] });
    } finally {
      expect(await server.stop()).toBe(0);
    }
  }, 300_000);
});
