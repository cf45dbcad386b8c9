/**
 * Shedding a `ModelInfer` call on its metadata, before its message is read
 * (`src/serve/grpc/shed-interceptor.ts`), over a fake backend: while `shedUnread` sheds, a call
 * is answered UNAVAILABLE `overloaded` and never reaches the backend, even with a message far
 * past what would be read; other methods and streams are not shed; a call without the token is
 * UNAUTHENTICATED first; a bug in `shedUnread` lets the call through. Against a raw HTTP/2 client:
 * hostile frames are answered once and leave no ticket open, a call answered before its message
 * came takes none when the message follows; on sim:a100, stalled calls stop keeping everyone shed.
 */
import http2 from 'node:http2';
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createGrpcServer, type GrpcInferenceServer } from '../../src/serve/grpc/server.ts';
import { loadInferenceService } from '../../src/serve/grpc/proto.ts';
import { MAX_DETAILS_CHARS } from '../../src/serve/grpc/codec.ts';
import { modelNameAtStart } from '../../src/serve/grpc/shed-interceptor.ts';
import { ServeError, type AdmissionTicket } from '../../src/serve/inference.ts';
import { FakeBackend } from './fake-backend.ts';
import { simBackend } from './helpers.ts';
import { FRONT_END_AHEAD_MS } from '../../src/serve/admission.ts';

type Client = grpc.Client & Record<string, (req: unknown, ...rest: unknown[]) => grpc.ClientUnaryCall>;

/** A fake backend whose `shedUnread` sheds while `mode` is 'shed' and throws a bug while 'bug'. */
class SheddingBackend extends FakeBackend {
  mode: 'admit' | 'shed' | 'bug' | 'shed-on-model' = 'admit';
  asked = 0;
  /** Tickets handed out on metadata: arrival time (the count of calls) and whether settled. */
  readonly tickets: { receivedMs: number; settled: number }[] = [];
  /** The arrival ticket each `admit` got. */
  readonly admitted: (AdmissionTicket | undefined)[] = [];
  /** What each `admit` was told was not read yet. */
  readonly unread: (string | undefined)[] = [];
  shedUnread(): AdmissionTicket {
    this.asked++;
    if (this.mode === 'shed') throw new ServeError('overloaded', 'overloaded: every model: 9 queries ahead; shed before its message was read (retry later or on another replica)');
    if (this.mode === 'bug') throw new TypeError('a bug in admission');
    const t = { receivedMs: this.asked, settled: 0 };
    this.tickets.push(t);
    return { receivedMs: t.receivedMs, settle: () => void t.settled++ };
  }
  admit(modelName: string, arrival?: AdmissionTicket, unread?: string): AdmissionTicket | undefined {
    this.admitted.push(arrival);
    this.unread.push(unread);
    if (this.mode === 'shed-on-model') throw new ServeError('overloaded', `overloaded: model '${modelName}': shed before its tensors were decoded`);
    return arrival;
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

describe('the model name at the start of a gRPC-framed ModelInferRequest', () => {
  const serialize = loadInferenceService().definition['ModelInfer']!.requestSerialize as (m: unknown) => Buffer;
  const framed = (message: unknown): Buffer => {
    const body = serialize(message);
    const head = Buffer.alloc(5);
    head.writeUInt32BE(body.length, 1);
    return Buffer.concat([head, body]);
  };

  it('reads it from the first bytes, asks for more until they hold it, and gives up on a compressed or reordered message', () => {
    const bytes = framed({ model_name: 'résnet-50', model_version: '1', inputs: [{ name: 'x', datatype: 'FP32', shape: [1] }], raw_input_contents: [Buffer.alloc(4096)] });
    expect(modelNameAtStart(bytes)).toEqual({ model: 'résnet-50' });
    for (const cut of [0, 3, 6, 7, 10]) expect(modelNameAtStart(bytes.subarray(0, cut))).toBe('more');
    expect(modelNameAtStart(bytes.subarray(0, 7 + Buffer.byteLength('résnet-50')))).toEqual({ model: 'résnet-50' });
    const compressed = Buffer.from(bytes);
    compressed[0] = 1;
    expect(modelNameAtStart(compressed)).toBeUndefined();
    // a message without model_name starts with another field
    expect(modelNameAtStart(framed({ id: 'q', inputs: [{ name: 'x', datatype: 'FP32', shape: [1] }] }))).toBeUndefined();
  });
});

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

  it('a call that goes on carries its ticket from the metadata to admission, settled once it ends, whichever way', async () => {
    const settledAfter = async (mode: SheddingBackend['mode'], request: unknown): Promise<{ error: grpc.ServiceError | null; ticket: { receivedMs: number; settled: number } | undefined }> => {
      backend.mode = mode;
      const n = backend.tickets.length;
      // the interceptor settles the ticket before it lets the status out
      const { error } = await call(client, 'ModelInfer', request, withToken());
      expect(backend.tickets.length).toBe(n + 1);
      return { error, ticket: backend.tickets[n] };
    };
    const ok = await settledAfter('admit', inferRequest());
    expect(ok.error).toBeNull();
    expect(backend.admitted.at(-1)?.receivedMs).toBe(ok.ticket?.receivedMs);
    expect(ok.ticket?.settled).toBeGreaterThanOrEqual(1);
    const shed = await settledAfter('shed-on-model', inferRequest());
    expect(shed.error?.code).toBe(grpc.status.UNAVAILABLE);
    expect(shed.error?.details).toMatch(/shed before its tensors were decoded/);
    expect(shed.ticket?.settled).toBeGreaterThanOrEqual(1);
    // a message the handler refuses before admission (malformed) settles it too
    const bad = await settledAfter('admit', { model_name: 'm', inputs: [{ name: 'x', datatype: 'FP32', shape: [2, 4] }], raw_input_contents: [Buffer.alloc(3)] });
    expect(bad.error).not.toBeNull();
    expect(bad.ticket?.settled).toBeGreaterThanOrEqual(1);
    backend.mode = 'admit';
  });

  it('shed on its model from the first bytes of its message: even an 8 MB request never reaches the handler', async () => {
    backend.mode = 'shed-on-model';
    const before = backend.requests.length;
    // 8 MB: refused before the rest arrives; 32 bytes: the whole message came in its first frame, and still
    for (const bytes of [8 << 20, 32]) {
      const asked = backend.unread.length;
      const { error } = await call(client, 'ModelInfer', inferRequest(bytes), withToken());
      expect(error?.code).toBe(grpc.status.UNAVAILABLE);
      // one admission, on the model named at the message's start: the handler never runs for a call answered already
      await new Promise((r) => setTimeout(r, 50)); // a handler that ran would have asked by now
      expect(backend.unread.slice(asked)).toEqual(['message']);
    }
    expect(backend.requests.length).toBe(before);
    backend.mode = 'admit';
    expect((await call(client, 'ModelInfer', inferRequest(), withToken())).error).toBeNull();
    // admitted: asked on the first bytes, then again once the message was read
    expect(backend.unread.slice(-2)).toEqual(['message', undefined]);
  });

  it('an error quoting a 100 KB model name is cut to MAX_DETAILS_CHARS, and the connection goes on serving', async () => {
    backend.mode = 'admit';
    const { error } = await call(client, 'ModelInfer', { ...(inferRequest() as object), model_name: 'x'.repeat(100_000) }, withToken());
    expect(error?.code).toBe(grpc.status.NOT_FOUND);
    expect(error?.details.length).toBeLessThanOrEqual(MAX_DETAILS_CHARS + 1);
    expect((await call(client, 'ModelInfer', inferRequest(), withToken())).error).toBeNull();
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

/** A fake backend whose tickets are all tracked: `admit` settles the arrival and hands out a fresh ticket, as `RuntimeBackend` does. */
class TicketBackend extends FakeBackend {
  private next = 0;
  /** Tickets not settled yet, by what took them. */
  readonly open = new Map<number, string>();
  private take(what: string): AdmissionTicket {
    const id = this.next++;
    this.open.set(id, what);
    return { receivedMs: id, settle: () => void this.open.delete(id) };
  }
  shedUnread(): AdmissionTicket {
    return this.take('metadata');
  }
  admit(modelName: string, arrival?: AdmissionTicket, unread?: string): AdmissionTicket | undefined {
    if (modelName !== 'm') return undefined;
    arrival?.settle();
    return this.take(unread ?? 'handler');
  }
}

/** A raw HTTP/2 ModelInfer call: its stream and its grpc-status once answered (headers or trailers). */
function rawInfer(session: http2.ClientHttp2Session, headers: Record<string, string> = {}): { stream: http2.ClientHttp2Stream; status: Promise<string> } {
  const stream = session.request({ ':method': 'POST', ':path': '/inference.GRPCInferenceService/ModelInfer', 'content-type': 'application/grpc', te: 'trailers', ...headers }, { endStream: false });
  const status = new Promise<string>((resolve) => {
    stream.on('response', (h) => {
      if (h['grpc-status'] !== undefined) resolve(String(h['grpc-status']));
    });
    stream.on('trailers', (t) => resolve(String(t['grpc-status'])));
    stream.on('data', () => undefined);
    stream.on('error', () => undefined);
  });
  return { stream, status };
}

describe('gRPC ModelInfer tickets against a hostile client (raw HTTP/2)', () => {
  const backend = new TicketBackend();
  let server: GrpcInferenceServer;
  let port: number;
  let session: http2.ClientHttp2Session;

  beforeAll(async () => {
    server = createGrpcServer(backend);
    port = await server.listen('127.0.0.1', 0);
    session = http2.connect(`http://127.0.0.1:${port}`);
  });
  afterAll(async () => {
    session.close();
    await server.close(1000);
  });

  /** Every frame sent so far on `session` was handled by the server: a ping, then a call, round trip. */
  const settled = async (): Promise<void> => {
    await new Promise((resolve) => session.ping(resolve));
    const { Client } = loadInferenceService();
    const c = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure()) as unknown as Client;
    await call(c, 'ServerLive', {});
    c.close();
  };

  it('a call answered before its message came (deadline passed) takes no ticket when its client sends the message on', async () => {
    const { stream, status } = rawInfer(session, { 'grpc-timeout': '1m' });
    expect(await status).toBe(String(grpc.status.DEADLINE_EXCEEDED));
    const body = loadInferenceService().definition['ModelInfer']!.requestSerialize({ model_name: 'm', inputs: [{ name: 'x', datatype: 'FP32', shape: [2, 4] }], raw_input_contents: [Buffer.alloc(32)] });
    const head = Buffer.alloc(5);
    head.writeUInt32BE(body.length, 1);
    stream.write(Buffer.concat([head, body]));
    await settled();
    expect([...backend.open.values()]).toEqual([]);
    stream.close(http2.constants.NGHTTP2_CANCEL);
  });

  it('hostile frames: every call answered once, no ticket left open, the server serves on', async () => {
    backend.open.clear();
    const frames: Buffer[] = [
      Buffer.from([0, 0xff, 0xff, 0xff, 0xff, 0x0a, 1, 0x6d]), // a header claiming 4 GB, then model 'm'
      Buffer.from([0, 0, 0, 0, 8, 0x0a, 1, 0x6d, 0xff, 0xff, 0xff, 0xff, 0xff]), // garbage protobuf after model 'm'
      Buffer.from([0, 0, 0, 0, 4, 0x0a, 0xb8, 0x17, 0x6d]), // a model name longer than the message
      Buffer.from([0, 0, 0, 0, 2, 0x0a, 0]), // an empty model name
      Buffer.from([0, 0, 0, 0, 40, 0x0a]), // truncated, then END_STREAM
      Buffer.alloc(0), // metadata, then END_STREAM
    ];
    const answers = await Promise.all(
      frames.map(async (bytes) => {
        const { stream, status } = rawInfer(session);
        stream.end(bytes);
        const code = await status;
        stream.close(http2.constants.NGHTTP2_CANCEL);
        return code;
      }),
    );
    expect(answers.every((code) => code !== String(grpc.status.OK))).toBe(true);
    await settled();
    expect([...backend.open.values()]).toEqual([]);
  });

  it('a client cancelling mid-message, or stalled calls it then cancels, leave no ticket open', async () => {
    backend.open.clear();
    const stalled = Array.from({ length: 200 }, () => rawInfer(session).stream);
    const { stream } = rawInfer(session);
    stream.write(Buffer.from([0, 0, 1, 0, 0, 0x0a, 1, 0x6d, 0x12]));
    await settled();
    expect(backend.open.size).toBe(201);
    for (const s of [...stalled, stream]) s.close(http2.constants.NGHTTP2_CANCEL);
    await settled();
    expect([...backend.open.values()]).toEqual([]);
  });
});

describe('gRPC ModelInfer request timeout (fake backend without admission)', () => {
  it('a call whose message does not come within requestTimeoutMs is answered DEADLINE_EXCEEDED naming the timeout; whole calls are not', async () => {
    const server = createGrpcServer(new FakeBackend(), { requestTimeoutMs: 300 });
    const port = await server.listen('127.0.0.1', 0);
    const session = http2.connect(`http://127.0.0.1:${port}`);
    const { Client } = loadInferenceService();
    const client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure()) as unknown as Client;
    try {
      const silent = rawInfer(session);
      const partial = rawInfer(session);
      partial.stream.write(Buffer.from([0, 0, 0, 1, 0, 0x0a, 1, 0x6d])); // a frame header claiming 64 KiB, then 'm'
      expect(await silent.status).toBe(String(grpc.status.DEADLINE_EXCEEDED));
      expect(await partial.status).toBe(String(grpc.status.DEADLINE_EXCEEDED));
      expect((await call(client, 'ModelInfer', inferRequest())).error).toBeNull();
    } finally {
      session.close();
      client.close();
      await server.close(1000);
    }
  });
});

describe('gRPC ModelInfer admission on sim:a100: stalled calls do not keep everyone shed', () => {
  it(`calls that send metadata and no message hold no place ahead; calls stalled mid-message stop counting ${FRONT_END_AHEAD_MS} ms after they arrived`, { timeout: 60_000 }, async () => {
    const { backend } = await simBackend([{ name: 'resnet', model: 'resnet50-small', qosTargetMs: 100, batchSizes: [1] }]);
    const server = createGrpcServer(backend);
    const port = await server.listen('127.0.0.1', 0);
    const { Client } = loadInferenceService();
    const client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure()) as unknown as Client;
    const session = http2.connect(`http://127.0.0.1:${port}`);
    const serialize = loadInferenceService().definition['ModelInfer']!.requestSerialize as (m: unknown) => Buffer;
    try {
      const request = { model_name: 'resnet', inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3, 64, 64] }], raw_input_contents: [Buffer.alloc(3 * 64 * 64 * 4)] };
      // what is asserted is admission: a call is not shed (UNAVAILABLE overloaded); on a busy
      // machine the controller may still drop one as late (DEADLINE_EXCEEDED), which is not the gate's
      const notShed = async (): Promise<void> => expect((await call(client, 'ModelInfer', request)).error?.code).not.toBe(grpc.status.UNAVAILABLE);
      // completions for the gate to judge
      for (let i = 0; i < 10; i++) await notShed();
      // metadata, never a message: nothing counts ahead, the next call is admitted at once
      const silent = Array.from({ length: 50 }, () => rawInfer(session).stream);
      await new Promise((resolve) => session.ping(resolve));
      await notShed();
      // the first bytes of a message (they name the model), never the rest: admitted on the model,
      // they count ahead, until FRONT_END_AHEAD_MS after they arrived, even while every call is shed
      const body = serialize(request);
      const head = Buffer.alloc(5);
      head.writeUInt32BE(body.length, 1);
      const partial = Array.from({ length: 20 }, () => {
        const { stream } = rawInfer(session);
        stream.write(Buffer.concat([head, body.subarray(0, 64)]));
        return stream;
      });
      await new Promise((resolve) => session.ping(resolve));
      await new Promise((resolve) => setTimeout(resolve, FRONT_END_AHEAD_MS + 200));
      // the device is idle: once the stalled calls no longer count, a call is admitted
      await notShed();
      for (const s of [...silent, ...partial]) s.close(http2.constants.NGHTTP2_CANCEL);
    } finally {
      session.close();
      client.close();
      await server.close(1000);
      await backend.shutdown(1000);
    }
  });
});
