/**
 * End to end: `abacus serve --tls-cert --tls-key --tls-ca --auth-token-file` as a child process
 * (sim:a100, policy triton: no predictor to train), with a self-signed certificate made at test
 * time by `openssl` (skipped, saying so, where it is missing), talked to with node's https and
 * a grpc-js client as tritonclient would with `ssl=True`: the announced URL is https; plain text
 * and TLS without a client certificate are not served; health answers without a token;
 * metadata, inference, metrics, the dashboard and the repository index answer 401 /
 * UNAUTHENTICATED with a wrong token and 200 / OK with the right one. And the flag errors, which stop the command before any model is built.
 */
import fs from 'node:fs/promises';
import https from 'node:https';
import net from 'node:net';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadInferenceService } from '../../src/serve/grpc/proto.ts';
import { cliSandbox } from '../helpers/cli.ts';
import { startChildServer, writeConfig, type ChildServer } from './child-serve.ts';
import { grpcCode, rawCall, type RawClient } from './token-calls.ts';
import { hasOpenssl, makeTestCertificates, NO_OPENSSL, type TestCertificates } from './tls-certs.ts';

const OPENSSL = hasOpenssl();
if (!OPENSSL) process.stderr.write(`${NO_OPENSSL}\n`);
const TOKEN = 'e2e-token-4f1c9a';
const sandbox = cliSandbox('abacus-serve-tls-');
const CONFIG = ['device: sim:a100', 'policy: triton', 'services:', '  - name: resnet', '    model: resnet50-small', '    qosTargetMs: 5000', '    batchSizes: [1]'];

describe('abacus serve: TLS and token flag errors', () => {
  it('certificate without key, an invalid PEM file and an empty token file fail at start naming the flag and file', async () => {
    const config = await writeConfig(sandbox.tmp, 'flags.yaml', CONFIG);
    const junk = path.join(sandbox.tmp, 'junk.pem');
    await fs.writeFile(junk, 'not PEM\n');
    const empty = path.join(sandbox.tmp, 'empty-token');
    await fs.writeFile(empty, '\n');
    const serve = (...flags: string[]) => sandbox.abacus('serve', '--config', config, '--http-port', '0', '--grpc-port', '0', ...flags);
    const alone = await serve('--tls-cert', junk);
    expect(alone.code).toBe(1);
    expect(alone.stderr).toBe('error: --tls-cert needs --tls-key (give both, or neither for plain text)\n');
    const invalid = await serve('--tls-cert', junk, '--tls-key', junk);
    expect(invalid.code).toBe(1);
    expect(invalid.stderr).toContain(`error: --tls-cert ${junk}: no PEM certificate in the file`);
    const missing = await serve('--auth-token-file', path.join(sandbox.tmp, 'no-such-file'));
    expect(missing.stderr).toBe(`error: --auth-token-file ${path.join(sandbox.tmp, 'no-such-file')}: cannot read the file (ENOENT)\n`);
    const blank = await serve('--auth-token-file', empty);
    expect(blank.code).toBe(1);
    expect(blank.stderr).toContain(`error: --auth-token-file ${empty}: the file is empty`);
    for (const r of [alone, invalid, missing, blank]) expect(r.stdout).not.toContain('listening');
  });
});

interface HttpAnswer {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: string;
}

describe.skipIf(!OPENSSL)('abacus serve over TLS with client certificates and a token (child process, sim:a100)', () => {
  let certs: TestCertificates;
  let server: ChildServer;
  let clientTls: { ca: Buffer; cert: Buffer; key: Buffer };

  beforeAll(async () => {
    certs = makeTestCertificates(path.join(sandbox.tmp, 'certs'));
    clientTls = { ca: await fs.readFile(certs.serverCert), cert: await fs.readFile(certs.clientCert), key: await fs.readFile(certs.clientKey) };
    const tokenFile = path.join(sandbox.tmp, 'token');
    await fs.writeFile(tokenFile, `${TOKEN}\n`);
    const config = await writeConfig(sandbox.tmp, 'tls.yaml', CONFIG);
    server = await startChildServer(config, { cacheDir: sandbox.cacheDir, flags: ['--grace-ms', '1000', '--tls-cert', certs.serverCert, '--tls-key', certs.serverKey, '--tls-ca', certs.clientCert, '--auth-token-file', tokenFile] });
  }, 180_000);
  afterAll(async () => {
    await server?.stop(2000);
  });

  /** A request over HTTPS with the client certificate (unless `tls` says otherwise). */
  function request(method: string, url: string, options: { token?: string; body?: string; tls?: https.RequestOptions } = {}): Promise<HttpAnswer> {
    return new Promise((resolve, reject) => {
      const headers: Record<string, string> = { ...(options.token === undefined ? {} : { authorization: `Bearer ${options.token}` }), ...(options.body === undefined ? {} : { 'content-type': 'application/json' }) };
      const req = https.request(`${server.httpUrl}${url}`, { method, headers, servername: 'localhost', agent: false, ...(options.tls ?? clientTls) }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (d: string) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      });
      req.on('error', reject);
      req.end(options.body);
    });
  }

  function grpcClient(credentials: grpc.ChannelCredentials): RawClient {
    const { Client } = loadInferenceService();
    return new Client(server.grpcAddress!, credentials, { 'grpc.ssl_target_name_override': 'localhost' }) as unknown as RawClient;
  }

  it('announces https and TLS; plain text and TLS without a client certificate are not served', async () => {
    expect(server.httpUrl).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    expect(server.stdout()).toMatch(/gRPC listening on 127\.0\.0\.1:\d+ \(TLS, client certificates required\)/);
    expect(server.stdout()).toContain('a bearer token is required on every request but the health probes');
    const port = Number(new URL(server.httpUrl).port);
    const plain = await new Promise<string>((resolve) => {
      const socket = net.connect(port, '127.0.0.1', () => socket.write('GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n'));
      let got = '';
      socket.on('data', (d: Buffer) => (got += d.toString('latin1')));
      socket.on('error', () => undefined);
      socket.on('close', () => resolve(got));
    });
    expect(plain).not.toMatch(/^HTTP/);
    await expect(request('GET', '/v2/health/live', { tls: { ca: clientTls.ca } })).rejects.toThrow();
  });

  it('HTTPS: health open; metadata and inference 401 with a wrong token, 200 with the right one', async () => {
    expect((await request('GET', '/v2/health/live')).status).toBe(200);
    expect((await request('GET', '/v2/health/ready')).status).toBe(200);
    const none = await request('GET', '/v2/models/resnet');
    expect(none.status).toBe(401);
    expect(none.headers['www-authenticate']).toBe('Bearer');
    expect(JSON.parse(none.body)).toHaveProperty('error');
    const meta = await request('GET', '/v2/models/resnet', { token: TOKEN });
    expect(meta.status, meta.body).toBe(200);
    const input = (JSON.parse(meta.body) as { inputs: { name: string; shape: number[] }[] }).inputs[0]!;
    const shape = input.shape.map((d) => (d < 0 ? 1 : d));
    const body = JSON.stringify({ inputs: [{ name: input.name, datatype: 'FP32', shape, data: new Array<number>(shape.reduce((a, b) => a * b, 1)).fill(0.5) }] });
    const wrong = await request('POST', '/v2/models/resnet/infer', { token: 'not-it', body });
    expect(wrong.status).toBe(401);
    expect(wrong.headers['www-authenticate']).toBe('Bearer error="invalid_token"');
    const right = await request('POST', '/v2/models/resnet/infer', { token: TOKEN, body });
    expect(right.status, right.body).toBe(200);
    expect(JSON.parse(right.body)).toMatchObject({ model_name: 'resnet' });
    expect((await request('GET', '/metrics')).status).toBe(401);
    expect((await request('GET', '/metrics', { token: TOKEN })).status).toBe(200);
    expect((await request('GET', '/dashboard')).status).toBe(401);
    expect((await request('GET', '/dashboard/events')).status).toBe(401);
    expect((await request('GET', '/dashboard', { token: TOKEN })).status).toBe(200);
  });

  it('gRPC over TLS: ServerReady open; ModelInfer UNAUTHENTICATED with a wrong token, OK with the right one; no client certificate: UNAVAILABLE', async () => {
    const client = grpcClient(grpc.credentials.createSsl(clientTls.ca, clientTls.key, clientTls.cert));
    const noCert = grpcClient(grpc.credentials.createSsl(clientTls.ca));
    try {
      expect(await rawCall(client, 'ServerReady', {})).toEqual({ ready: true });
      const meta = (await rawCall(client, 'ModelMetadata', { name: 'resnet' }, TOKEN)) as { inputs: { name: string; shape: string[] }[] };
      const shape = meta.inputs[0]!.shape.map((d) => (Number(d) < 0 ? 1 : Number(d)));
      const infer = { model_name: 'resnet', inputs: [{ name: meta.inputs[0]!.name, datatype: 'FP32', shape }], raw_input_contents: [Buffer.alloc(4 * shape.reduce((a, b) => a * b, 1))] };
      expect(await grpcCode(rawCall(client, 'ModelInfer', infer, 'not-it'))).toBe(grpc.status.UNAUTHENTICATED);
      expect(await grpcCode(rawCall(client, 'ModelInfer', infer))).toBe(grpc.status.UNAUTHENTICATED);
      expect(await rawCall(client, 'ModelInfer', infer, TOKEN)).toMatchObject({ model_name: 'resnet' });
      expect(await grpcCode(rawCall(noCert, 'ServerReady', {}))).toBe(grpc.status.UNAVAILABLE);
      expect(await grpcCode(rawCall(client, 'RepositoryIndex', {}, 'not-it'))).toBe(grpc.status.UNAUTHENTICATED);
      expect(await rawCall(client, 'RepositoryIndex', {}, TOKEN)).toMatchObject({ models: [{ name: 'resnet', state: 'READY' }] });
    } finally {
      client.close();
      noCert.close();
    }
  });
});
