/**
 * Shedding a `ModelInfer` call on its metadata, before its message is read
 * (`src/serve/grpc/shed-interceptor.ts`), over a fake backend: while `shedUnread` sheds, a call
 * is answered UNAVAILABLE `overloaded` and never reaches the backend, even with a message far
 * past what would be read; other methods and streams are not shed; a call without the token is
 * UNAUTHENTICATED first; a bug in `shedUnread` lets the call through.
 */
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createGrpcServer, type GrpcInferenceServer } from '../../src/serve/grpc/server.ts';
import { loadInferenceService } from '../../src/serve/grpc/proto.ts';
import { ServeError } from '../../src/serve/inference.ts';
import { FakeBackend } from './fake-backend.ts';

type Client = grpc.Client & Record<string, (req: unknown, ...rest: unknown[]) => grpc.ClientUnaryCall>;

/** A fake backend whose `shedUnread` sheds while `mode` is 'shed' and throws a bug while 'bug'. */
class SheddingBackend extends FakeBackend {
  mode: 'admit' | 'shed' | 'bug' = 'admit';
  asked = 0;
  shedUnread(): void {
    this.asked++;
    if (this.mode === 'shed') throw new ServeError('overloaded', 'overloaded: every model: 9 queries ahead; shed before its message was read (retry later or on another replica)');
    if (this.mode === 'bug') throw new TypeError('a bug in admission');
  }
}

const TOKEN = 'shed-test-token';

function call(client: Client, method: string, request: unknown, metadata = new grpc.Metadata()): Promise<{ error: grpc.ServiceError | null; response: unknown }> {
  return new Promise((resolve) => {
    client[method]!(request, metadata, (error: grpc.ServiceError | null, response: unknown) => resolve({ error, response }));
  });
}

const withToken = (): grpc.Metadata => {
  const m = new grpc.Metadata();
  m.set('authorization', `Bearer ${TOKEN}`);
  return m;
};

/** A ModelInfer request for the fake model 'm' carrying `bytes` of raw input (the fake reads only x[2, 4]). */
const inferRequest = (bytes = 32): unknown => ({ model_name: 'm', inputs: [{ name: 'x', datatype: 'FP32', shape: [2, 4] }], raw_input_contents: [Buffer.alloc(bytes)] });

describe('gRPC ModelInfer shed on its metadata (fake backend, token required)', () => {
  const backend = new SheddingBackend();
  let server: GrpcInferenceServer;
  let client: Client;

  beforeAll(async () => {
    server = createGrpcServer(backend, { authToken: TOKEN });
    const port = await server.listen('127.0.0.1', 0);
    const { Client } = loadInferenceService();
    client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure(), { 'grpc.max_send_message_length': 64 << 20 }) as unknown as Client;
  });
  afterAll(async () => {
    client.close();
    await server.close(1000);
  });

  it('admitted: the call reaches the backend', async () => {
    backend.mode = 'admit';
    const before = backend.requests.length;
    const { error } = await call(client, 'ModelInfer', inferRequest(), withToken());
    expect(error).toBeNull();
    expect(backend.requests.length).toBe(before + 1);
  });

  it('shed: UNAVAILABLE overloaded with the reason, the backend never sees the request, even an 8 MB one', async () => {
    backend.mode = 'shed';
    const before = backend.requests.length;
    for (const bytes of [32, 8 << 20]) {
      const { error } = await call(client, 'ModelInfer', inferRequest(bytes), withToken());
      expect(error?.code).toBe(grpc.status.UNAVAILABLE);
      expect(error?.details).toMatch(/^overloaded: every model: 9 queries ahead; shed before its message was read/);
      expect(error?.metadata.get('abacus-error-code')).toEqual(['overloaded']);
    }
    expect(backend.requests.length).toBe(before);
    // the connection still serves: health, metadata and (admitted again) inference
    expect((await call(client, 'ServerLive', {})).error).toBeNull();
    expect((await call(client, 'ModelMetadata', { name: 'm' }, withToken())).error).toBeNull();
    backend.mode = 'admit';
    expect((await call(client, 'ModelInfer', inferRequest(), withToken())).error).toBeNull();
  });

  it('the token check comes first: without it UNAUTHENTICATED, and admission is not asked', async () => {
    backend.mode = 'shed';
    const asked = backend.asked;
    const { error } = await call(client, 'ModelInfer', inferRequest());
    expect(error?.code).toBe(grpc.status.UNAUTHENTICATED);
    expect(backend.asked).toBe(asked);
    backend.mode = 'admit';
  });

  it('a bug in shedUnread does not fail the call', async () => {
    backend.mode = 'bug';
    const before = backend.requests.length;
    const { error } = await call(client, 'ModelInfer', inferRequest(), withToken());
    expect(error).toBeNull();
    expect(backend.requests.length).toBe(before + 1);
    backend.mode = 'admit';
  });
});
