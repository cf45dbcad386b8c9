/**
 * TLS and bearer tokens in process (`serve/security.ts`, `http/app.ts`, `grpc/auth.ts`), over
 * the fake backend: the token check itself; the TLS and token files' errors naming flag and
 * file; HTTP with a token (401 with `WWW-Authenticate` and a JSON body, health open); HTTPS
 * and gRPC over TLS with node's https and grpc-js clients; mutual TLS. The same through
 * `abacus serve` as a child process: `serve-tls.test.ts`.
 */
import fs from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidConfigError } from '../../src/errors.ts';
import { bearerAuthInterceptor } from '../../src/serve/grpc/auth.ts';
import { loadInferenceService } from '../../src/serve/grpc/proto.ts';
import { createGrpcServer, type GrpcInferenceServer } from '../../src/serve/grpc/server.ts';
import { createInferenceClient } from '../../src/serve/client/index.ts';
import { createHttpApp } from '../../src/serve/http/app.ts';
import { ServeMetrics } from '../../src/serve/metrics.ts';
import { bearerTokenMatches, loadTlsMaterial, readAuthToken, type TlsMaterial } from '../../src/serve/security.ts';
import { FakeBackend } from './fake-backend.ts';
import { grpcCode, rawCall, type RawClient } from './token-calls.ts';
import { hasOpenssl, makeTestCertificates, NO_OPENSSL, type TestCertificates } from './tls-certs.ts';

const TOKEN = 'test-token_0123456789.abc~+/=';
const INFER_BODY = JSON.stringify({ inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 4], data: [1, 2, 3, 4] }] });
const OPENSSL = hasOpenssl();
if (!OPENSSL) process.stderr.write(`${NO_OPENSSL}\n`);

let tmp: string;
let certs: TestCertificates | undefined;

beforeAll(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'abacus-tls-'));
  if (OPENSSL) certs = makeTestCertificates(path.join(tmp, 'certs'));
});
afterAll(() => {
  fs.rmSync(tmp, { recursive: true, force: true });
});

function file(name: string, content: string): string {
  const p = path.join(tmp, name);
  fs.writeFileSync(p, content);
  return p;
}

function caught(work: () => unknown): Error {
  try {
    work();
  } catch (err) {
    return err as Error;
  }
  throw new Error('expected a throw');
}

describe('the bearer token check', () => {
  it('accepts exactly "Bearer <token>" (scheme in any case) and nothing else', () => {
    expect(bearerTokenMatches(`Bearer ${TOKEN}`, TOKEN)).toBe(true);
    expect(bearerTokenMatches(`bearer ${TOKEN}`, TOKEN)).toBe(true);
    expect(bearerTokenMatches(`BEARER  ${TOKEN} `, TOKEN)).toBe(true);
    for (const header of [undefined, '', 'Bearer', 'Bearer ', TOKEN, `Basic ${TOKEN}`, `Bearer ${TOKEN}x`, `Bearer ${TOKEN.slice(0, -1)}`, `Bearer ${TOKEN} extra`, `Bearer x`]) {
      expect(bearerTokenMatches(header, TOKEN), String(header)).toBe(false);
    }
  });

  it('reads the token file trimmed; an empty file or a token a header cannot carry is an error naming the flag and file', () => {
    expect(readAuthToken(file('token', `  ${TOKEN}\n`))).toBe(TOKEN);
    const empty = caught(() => readAuthToken(file('empty', ' \n\t\n')));
    expect(empty).toBeInstanceOf(InvalidConfigError);
    expect(empty.message).toContain(`--auth-token-file ${path.join(tmp, 'empty')}: the file is empty`);
    expect(caught(() => readAuthToken(file('spaced', 'two words\n'))).message).toMatch(/^--auth-token-file .*spaced: the token may hold only/);
    expect(caught(() => readAuthToken(path.join(tmp, 'missing'))).message).toBe(`--auth-token-file ${path.join(tmp, 'missing')}: cannot read the file (ENOENT)`);
  });
});

describe('the TLS files', () => {
  it('certificate and key go together; --tls-ca needs both', () => {
    expect(loadTlsMaterial({})).toBeUndefined();
    expect(caught(() => loadTlsMaterial({ cert: 'a.crt' })).message).toBe('--tls-cert needs --tls-key (give both, or neither for plain text)');
    expect(caught(() => loadTlsMaterial({ key: 'a.key' })).message).toBe('--tls-key needs --tls-cert (give both, or neither for plain text)');
    expect(caught(() => loadTlsMaterial({ ca: 'ca.crt' })).message).toMatch(/^--tls-ca needs --tls-cert and --tls-key/);
  });

  it('an unreadable or invalid PEM file fails naming the flag and the file', () => {
    const junk = file('junk.pem', 'not a certificate\n');
    const broken = file('broken.pem', '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n');
    expect(caught(() => loadTlsMaterial({ cert: path.join(tmp, 'nope.crt'), key: junk })).message).toBe(`--tls-cert ${path.join(tmp, 'nope.crt')}: cannot read the file (ENOENT)`);
    expect(caught(() => loadTlsMaterial({ cert: junk, key: junk })).message).toMatch(new RegExp(`^--tls-cert ${junk}: no PEM certificate in the file`));
    expect(caught(() => loadTlsMaterial({ cert: broken, key: junk })).message).toMatch(new RegExp(`^--tls-cert ${broken}: certificate 1 is not a valid X.509 certificate`));
  });

  it.skipIf(!OPENSSL)('a key that is not PEM, or not the certificate\'s, or a CA file without a certificate, fails naming the flag and file', () => {
    const c = certs!;
    const junk = file('junk.key', 'not a key\n');
    expect(caught(() => loadTlsMaterial({ cert: c.serverCert, key: junk })).message).toMatch(new RegExp(`^--tls-key ${junk}: not a valid PEM private key`));
    expect(caught(() => loadTlsMaterial({ cert: c.serverCert, key: c.clientKey })).message).toBe(`--tls-key ${c.clientKey}: the key does not belong to the certificate of --tls-cert ${c.serverCert}`);
    expect(caught(() => loadTlsMaterial({ cert: c.serverCert, key: c.serverKey, ca: junk })).message).toMatch(new RegExp(`^--tls-ca ${junk}: no PEM certificate`));
    const tls = loadTlsMaterial({ cert: c.serverCert, key: c.serverKey, ca: c.clientCert });
    expect(tls?.ca?.toString()).toContain('BEGIN CERTIFICATE');
  });
});

describe('HTTP with a bearer token (inject)', () => {
  const backend = new FakeBackend();
  let app: FastifyInstance;
  beforeAll(() => {
    app = createHttpApp(backend, { authToken: TOKEN, metrics: new ServeMetrics({ models: ['m'], processMetrics: false }) });
  });
  afterAll(async () => {
    await app.close();
  });
  const auth = { authorization: `Bearer ${TOKEN}` };

  it('health probes answer without a token', async () => {
    expect((await app.inject('/v2/health/live')).json()).toEqual({ live: true });
    expect((await app.inject('/v2/health/ready')).statusCode).toBe(200);
    expect((await app.inject({ method: 'HEAD', url: '/v2/health/live' })).statusCode).toBe(200);
  });

  it('everything else is 401 with WWW-Authenticate and a JSON error without the right token, and served with it', async () => {
    const routes: { method: 'GET' | 'POST'; url: string; body?: string }[] = [
      { method: 'GET', url: '/v2' },
      { method: 'GET', url: '/v2/models' },
      { method: 'GET', url: '/v2/models/m' },
      { method: 'GET', url: '/v2/models/m/ready' },
      { method: 'GET', url: '/v2/models/m/config' },
      { method: 'GET', url: '/v2/models/m/stats' },
      { method: 'GET', url: '/v2/models/stats' },
      { method: 'POST', url: '/v2/models/m/infer', body: INFER_BODY },
      { method: 'POST', url: '/v2/models/m/versions/1/infer', body: INFER_BODY },
      { method: 'POST', url: '/v2/repository/index', body: '{}' },
      { method: 'GET', url: '/metrics' },
    ];
    for (const r of routes) {
      const none = await app.inject({ method: r.method, url: r.url, ...(r.body === undefined ? {} : { payload: r.body }) });
      expect(none.statusCode, r.url).toBe(401);
      expect(none.headers['www-authenticate']).toBe('Bearer');
      expect(none.headers['content-type']).toBe('application/json');
      expect(none.json()).toEqual({ error: 'authentication required: send "Authorization: Bearer <token>" (the token of the server\'s --auth-token-file)' });
      const wrong = await app.inject({ method: r.method, url: r.url, headers: { authorization: 'Bearer not-the-token' }, ...(r.body === undefined ? {} : { payload: r.body }) });
      expect(wrong.statusCode, r.url).toBe(401);
      expect(wrong.headers['www-authenticate']).toBe('Bearer error="invalid_token"');
      expect(wrong.json()).toEqual({ error: 'authentication failed: the bearer token is not the server\'s' });
      const right = await app.inject({ method: r.method, url: r.url, headers: auth, ...(r.body === undefined ? {} : { payload: r.body }) });
      expect(right.statusCode, `${r.url}: ${right.body}`).toBe(200);
    }
    // a refused infer request never reached the backend
    expect(backend.requests).toHaveLength(2);
    expect((await app.inject({ url: '/v2/models/m', headers: { authorization: `Basic ${TOKEN}` } })).json()).toEqual({ error: 'authentication required: the Authorization header is not "Bearer <token>"' });
  });

  it('an unknown route is 401 without the token (no route list for strangers), 404 with it', async () => {
    expect((await app.inject('/nowhere')).statusCode).toBe(401);
    expect((await app.inject({ url: '/nowhere', headers: auth })).statusCode).toBe(404);
  });
});

describe('HTTP with a bearer token (listening, plain text)', () => {
  it("the project's HTTP client (abacus bench --target http://…) sends the token on inference and metadata", async () => {
    const app = createHttpApp(new FakeBackend(), { authToken: TOKEN });
    await app.listen({ host: '127.0.0.1', port: 0 });
    const address = app.server.address();
    const url = `http://127.0.0.1:${typeof address === 'object' && address !== null ? address.port : 0}`;
    const x = { dataType: 'float32' as const, dims: [1, 4], data: Float32Array.from([1, 2, 3, 4]) };
    const withToken = createInferenceClient(url, { authToken: TOKEN });
    const without = createInferenceClient(url);
    try {
      expect((await withToken.infer({ model: 'm', inputs: { x } })).ok).toBe(true);
      expect(await withToken.modelMetadata('m')).toMatchObject({ name: 'm' });
      expect(await without.infer({ model: 'm', inputs: { x } })).toMatchObject({ ok: false, status: 401 });
    } finally {
      await withToken.close();
      await without.close();
      await app.close();
    }
  });

  it('a request that asks Expect: 100-continue without the token gets its 401 and no 100 Continue; with the token, 100 and then its answer', async () => {
    const backend = new FakeBackend();
    const app = createHttpApp(backend, { authToken: TOKEN });
    await app.listen({ host: '127.0.0.1', port: 0 });
    const address = app.server.address();
    const port = typeof address === 'object' && address !== null ? address.port : 0;
    /** Send the headers, and the body only after a 100 Continue; resolve with everything received once the answer is complete. */
    const exchange = (authorization: string | undefined): Promise<string> =>
      new Promise((resolve, reject) => {
        const socket = net.connect(port, '127.0.0.1', () => {
          socket.write(`POST /v2/models/m/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${INFER_BODY.length}\r\nExpect: 100-continue\r\nConnection: close\r\n${authorization === undefined ? '' : `Authorization: ${authorization}\r\n`}\r\n`);
        });
        let got = '';
        socket.on('data', (d: Buffer) => {
          const before = got;
          got += d.toString('latin1');
          if (!before.includes('100 Continue') && got.startsWith('HTTP/1.1 100 Continue')) socket.write(INFER_BODY);
        });
        socket.on('error', reject);
        socket.on('close', () => resolve(got));
      });
    try {
      const refused = await exchange(undefined);
      expect(refused).toMatch(/^HTTP\/1\.1 401 /);
      expect(refused).not.toContain('100 Continue');
      expect(refused.toLowerCase()).toContain('www-authenticate: bearer');
      const served = await exchange(`Bearer ${TOKEN}`);
      expect(served).toMatch(/^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 /);
      expect(backend.requests).toHaveLength(1);
    } finally {
      await app.close();
    }
  });
});

/** GET `url` over HTTPS; resolves with the status and body, rejects on a TLS or socket error. */
function httpsGet(url: string, options: https.RequestOptions): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = https.request(url, { servername: 'localhost', ...options, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** Send a plain-text HTTP request to `port`; resolves with what came back before the connection closed. */
function plainText(port: number): Promise<string> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.write('GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n'));
    let got = '';
    socket.on('data', (d: Buffer) => (got += d.toString('latin1')));
    socket.on('error', () => undefined);
    socket.on('close', () => resolve(got));
  });
}

function grpcClient(port: number, credentials: grpc.ChannelCredentials): RawClient {
  const { Client } = loadInferenceService();
  // the certificate's name, not the IP address, as the TLS server name (RFC 6066 §3 allows host names only)
  return new Client(`127.0.0.1:${port}`, credentials, { 'grpc.ssl_target_name_override': 'localhost' }) as unknown as RawClient;
}

const INFER = { model_name: 'm', inputs: [{ name: 'x', datatype: 'FP32', shape: [1, 4], contents: { fp32_contents: [1, 2, 3, 4] } }] };

describe.skipIf(!OPENSSL)('HTTPS and gRPC over TLS with a token (listening)', () => {
  let tls: TlsMaterial;
  let app: FastifyInstance;
  let grpcServer: GrpcInferenceServer;
  let httpPort: number;
  let grpcPort: number;
  let ca: Buffer;
  beforeAll(async () => {
    tls = loadTlsMaterial({ cert: certs!.serverCert, key: certs!.serverKey })!;
    ca = fs.readFileSync(certs!.serverCert);
    app = createHttpApp(new FakeBackend(), { tls, authToken: TOKEN });
    await app.listen({ host: '127.0.0.1', port: 0 });
    const address = app.server.address();
    httpPort = typeof address === 'object' && address !== null ? address.port : 0;
    grpcServer = createGrpcServer(new FakeBackend(), { tls, authToken: TOKEN });
    grpcPort = await grpcServer.listen('127.0.0.1', 0);
  });
  afterAll(async () => {
    await app.close();
    await grpcServer.close(500);
  });

  it('HTTPS: health open, wrong token 401, right token 200; a client that does not trust the certificate is refused', async () => {
    const base = `https://127.0.0.1:${httpPort}`;
    expect(await httpsGet(`${base}/v2/health/live`, { ca })).toEqual({ status: 200, body: '{"live":true}' });
    expect((await httpsGet(`${base}/v2/models/m`, { ca, headers: { authorization: 'Bearer wrong' } })).status).toBe(401);
    const right = await httpsGet(`${base}/v2/models/m`, { ca, headers: { authorization: `Bearer ${TOKEN}` } });
    expect(right.status).toBe(200);
    expect(JSON.parse(right.body)).toMatchObject({ name: 'm' });
    await expect(httpsGet(`${base}/v2/health/live`, {})).rejects.toThrow(/self[- ]signed/);
  });

  it('HTTPS: a plain-text request to the TLS port gets no HTTP answer', async () => {
    expect(await plainText(httpPort)).not.toMatch(/^HTTP/);
  });

  it('gRPC over TLS: ServerLive open, no or wrong token UNAUTHENTICATED, right token OK; plain text fails', async () => {
    const client = grpcClient(grpcPort, grpc.credentials.createSsl(ca));
    try {
      expect(await rawCall(client, 'ServerLive', {})).toEqual({ live: true });
      expect(await rawCall(client, 'ServerReady', {})).toEqual({ ready: true });
      expect(await grpcCode(rawCall(client, 'ModelMetadata', { name: 'm' }))).toBe(grpc.status.UNAUTHENTICATED);
      expect(await grpcCode(rawCall(client, 'ModelInfer', INFER, 'wrong'))).toBe(grpc.status.UNAUTHENTICATED);
      expect(await grpcCode(rawCall(client, 'ServerMetadata', {}, 'wrong'))).toBe(grpc.status.UNAUTHENTICATED);
      expect(await rawCall(client, 'ModelMetadata', { name: 'm' }, TOKEN)).toMatchObject({ name: 'm' });
      expect(await rawCall(client, 'ModelInfer', INFER, TOKEN)).toMatchObject({ model_name: 'm' });
      const details = await rawCall(client, 'RepositoryIndex', {}).catch((e: grpc.ServiceError) => e.details);
      expect(details).toBe('authentication required: send "Authorization: Bearer <token>" (the token of the server\'s --auth-token-file)');
    } finally {
      client.close();
    }
    const plain = grpcClient(grpcPort, grpc.credentials.createInsecure());
    try {
      expect(await grpcCode(rawCall(plain, 'ServerLive', {}))).toBe(grpc.status.UNAVAILABLE);
    } finally {
      plain.close();
    }
  });

  it("the project's own clients (abacus bench --target): grpcs:// with the CA and a token infers; without the token the answer names it", async () => {
    const x = { dataType: 'float32' as const, dims: [1, 4], data: Float32Array.from([1, 2, 3, 4]) };
    const withToken = createInferenceClient(`grpcs://127.0.0.1:${grpcPort}`, { tlsCa: ca, authToken: TOKEN });
    const without = createInferenceClient(`grpcs://127.0.0.1:${grpcPort}`, { tlsCa: ca });
    try {
      const ok = await withToken.infer({ model: 'm', inputs: { x } });
      expect(ok.ok).toBe(true);
      const refused = await without.infer({ model: 'm', inputs: { x } });
      expect(refused).toMatchObject({ ok: false, status: grpc.status.UNAUTHENTICATED });
      if (!refused.ok) expect(refused.message).toMatch(/authentication required/);
    } finally {
      await withToken.close();
      await without.close();
    }
  });
});

describe.skipIf(!OPENSSL)('mutual TLS (--tls-ca)', () => {
  let app: FastifyInstance;
  let grpcServer: GrpcInferenceServer;
  let httpPort: number;
  let grpcPort: number;
  beforeAll(async () => {
    const tls = loadTlsMaterial({ cert: certs!.serverCert, key: certs!.serverKey, ca: certs!.clientCert })!;
    app = createHttpApp(new FakeBackend(), { tls });
    await app.listen({ host: '127.0.0.1', port: 0 });
    const address = app.server.address();
    httpPort = typeof address === 'object' && address !== null ? address.port : 0;
    grpcServer = createGrpcServer(new FakeBackend(), { tls });
    grpcPort = await grpcServer.listen('127.0.0.1', 0);
  });
  afterAll(async () => {
    await app.close();
    await grpcServer.close(500);
  });

  it('HTTPS serves a client with a certificate the CA signed, and refuses one without or with another', async () => {
    const c = certs!;
    const ca = fs.readFileSync(c.serverCert);
    const url = `https://127.0.0.1:${httpPort}/v2/models/m`;
    expect((await httpsGet(url, { ca, cert: fs.readFileSync(c.clientCert), key: fs.readFileSync(c.clientKey) })).status).toBe(200);
    await expect(httpsGet(url, { ca })).rejects.toThrow();
    await expect(httpsGet(url, { ca, cert: fs.readFileSync(c.strangerCert), key: fs.readFileSync(c.strangerKey) })).rejects.toThrow();
  });

  it('gRPC serves a client with a certificate the CA signed, and refuses one without', async () => {
    const c = certs!;
    const ca = fs.readFileSync(c.serverCert);
    const good = grpcClient(grpcPort, grpc.credentials.createSsl(ca, fs.readFileSync(c.clientKey), fs.readFileSync(c.clientCert)));
    const none = grpcClient(grpcPort, grpc.credentials.createSsl(ca));
    try {
      expect(await rawCall(good, 'ModelMetadata', { name: 'm' })).toMatchObject({ name: 'm' });
      expect(await grpcCode(rawCall(none, 'ServerLive', {}))).toBe(grpc.status.UNAVAILABLE);
    } finally {
      good.close();
      none.close();
    }
  });
});

describe('the gRPC interceptor alone', () => {
  it('covers every method added to the server, including one it was not written for', async () => {
    const server = new grpc.Server({ interceptors: [bearerAuthInterceptor(TOKEN)] });
    const { definition, Client } = loadInferenceService();
    let handled = 0;
    const unimplemented: grpc.handleUnaryCall<unknown, unknown> = (_call, callback) => {
      handled++;
      callback(null, {});
    };
    server.addService(definition, Object.fromEntries(Object.keys(definition).map((k) => [k, unimplemented])));
    const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e === null ? resolve(p) : reject(e))));
    const client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure()) as unknown as RawClient;
    try {
      expect(await grpcCode(rawCall(client, 'RepositoryModelLoad', { model_name: 'x' }))).toBe(grpc.status.UNAUTHENTICATED);
      expect(handled).toBe(0);
      expect(await grpcCode(rawCall(client, 'RepositoryModelLoad', { model_name: 'x' }, TOKEN))).toBe(grpc.status.OK);
      expect(await grpcCode(rawCall(client, 'ServerLive', {}))).toBe(grpc.status.OK);
      expect(handled).toBe(2);
    } finally {
      client.close();
      server.forceShutdown();
    }
  });

  it('covers a bidirectional stream: without the token one UNAUTHENTICATED and the handler never runs; with it the stream works', async () => {
    const json = { serialize: (v: unknown): Buffer => Buffer.from(JSON.stringify(v)), deserialize: (b: Buffer): unknown => JSON.parse(b.toString('utf8')) as unknown };
    const definition: grpc.ServiceDefinition = {
      Chat: { path: '/test.Echo/Chat', requestStream: true, responseStream: true, requestSerialize: json.serialize, requestDeserialize: json.deserialize, responseSerialize: json.serialize, responseDeserialize: json.deserialize },
    };
    const server = new grpc.Server({ interceptors: [bearerAuthInterceptor(TOKEN)] });
    let streams = 0;
    server.addService(definition, {
      Chat: (call: grpc.ServerDuplexStream<unknown, unknown>) => {
        streams++;
        call.on('data', (m: unknown) => call.write(m));
        call.on('end', () => call.end());
      },
    });
    const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (e, p) => (e === null ? resolve(p) : reject(e))));
    const Client = grpc.makeGenericClientConstructor(definition, 'Echo');
    const client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure()) as unknown as grpc.Client & { Chat: (metadata: grpc.Metadata) => grpc.ClientDuplexStream<unknown, unknown> };
    /** Send three messages on one stream; resolve with the replies and the errors seen. */
    const chat = (token: string | undefined): Promise<{ replies: unknown[]; errors: number[] }> =>
      new Promise((resolve) => {
        const metadata = new grpc.Metadata();
        if (token !== undefined) metadata.set('authorization', `Bearer ${token}`);
        const stream = client.Chat(metadata);
        const replies: unknown[] = [];
        const errors: number[] = [];
        stream.on('data', (m: unknown) => replies.push(m));
        stream.on('error', (e: grpc.ServiceError) => errors.push(e.code));
        stream.on('status', () => setImmediate(() => resolve({ replies, errors })));
        for (const n of [1, 2, 3]) stream.write({ n });
        stream.end();
      });
    try {
      expect(await chat(undefined)).toEqual({ replies: [], errors: [grpc.status.UNAUTHENTICATED] });
      expect(await chat('wrong')).toEqual({ replies: [], errors: [grpc.status.UNAUTHENTICATED] });
      expect(streams).toBe(0);
      expect(await chat(TOKEN)).toEqual({ replies: [{ n: 1 }, { n: 2 }, { n: 3 }], errors: [] });
      expect(streams).toBe(1);
    } finally {
      client.close();
      server.forceShutdown();
    }
  });
});
