/**
 * Triton's `ModelStreamInfer` over the fake backend (`fake-backend.ts`) with a real grpc-js
 * client: many requests on one stream each answered exactly once on it (errors as
 * `error_message` with the request's id; the stream stays open), the stream ended by the
 * server once the client half-closed and every request was answered, and a cancelled stream
 * withdrawing the requests still waiting.
 */
import * as grpc from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createGrpcServer, type GrpcInferenceServer } from '../../src/serve/grpc/server.ts';
import { loadInferenceService, type ModelInferRequestMessage, type ModelStreamInferResponseMessage } from '../../src/serve/grpc/proto.ts';
import { FakeBackend } from './fake-backend.ts';

type Client = grpc.Client & { ModelStreamInfer: (metadata?: grpc.Metadata) => grpc.ClientDuplexStream<ModelInferRequestMessage, ModelStreamInferResponseMessage> };

function f32(values: number[]): Buffer {
  return Buffer.from(Float32Array.from(values).buffer);
}

/** Request `i` of a mixed stream: every third one fails (an unknown input, an unknown model, a backend error). */
function mixed(i: number): ModelInferRequestMessage {
  const good: ModelInferRequestMessage = { model_name: 'm', id: `q${i}`, inputs: [{ name: 'x', datatype: 'FP32', shape: ['1', '4'] }], raw_input_contents: [f32([i, i + 1, i + 2, i + 3])] };
  switch (i % 6) {
    case 1:
      return { ...good, inputs: [{ name: 'nope', datatype: 'FP32', shape: ['1', '4'] }] };
    case 3:
      return { ...good, model_name: 'missing' };
    case 5:
      return { ...good, parameters: { fake_error: { string_param: 'qos_violation' } } };
    default:
      return i % 4 === 0 ? { ...good, parameters: { fake_delay_ms: { double_param: 5 } } } : good;
  }
}

/** Every answer a stream gets, and a promise settled when the server ends it (rejected on a stream error). */
function collect(stream: grpc.ClientDuplexStream<ModelInferRequestMessage, ModelStreamInferResponseMessage>): { answers: ModelStreamInferResponseMessage[]; ended: Promise<void> } {
  const answers: ModelStreamInferResponseMessage[] = [];
  const ended = new Promise<void>((resolve, reject) => {
    stream.on('data', (m: ModelStreamInferResponseMessage) => answers.push(m));
    stream.on('end', resolve);
    stream.on('error', reject);
  });
  return { answers, ended };
}

describe('gRPC ModelStreamInfer over a fake backend', () => {
  const backend = new FakeBackend();
  let server: GrpcInferenceServer;
  let client: Client;

  beforeAll(async () => {
    server = createGrpcServer(backend);
    const port = await server.listen('127.0.0.1', 0);
    const { Client } = loadInferenceService();
    client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure()) as unknown as Client;
  });
  afterAll(async () => {
    client.close();
    await server.close(1000);
  });

  it('answers 50 mixed requests on one stream exactly once each, then ends the stream after the client half-closes', async () => {
    const stream = client.ModelStreamInfer();
    const { answers, ended } = collect(stream);
    for (let i = 0; i < 50; i++) stream.write(mixed(i));
    stream.end();
    await ended;
    expect(answers).toHaveLength(50);
    const byId = new Map(answers.map((a) => [a.infer_response?.id, a]));
    expect(byId.size).toBe(50);
    for (let i = 0; i < 50; i++) {
      const a = byId.get(`q${i}`)!;
      if (i % 2 === 0) {
        expect(a.error_message, `q${i}`).toBe('');
        const y = new Float32Array(new Uint8Array(a.infer_response!.raw_output_contents![0]!).buffer);
        expect(Array.from(y)).toEqual([2 * i, 2 * i + 2, 2 * i + 4, 2 * i + 6]);
      } else {
        expect(a.error_message, `q${i}`).toMatch(i % 6 === 1 ? /nope/ : i % 6 === 3 ? /missing/ : /qos_violation/);
        expect(a.infer_response!.raw_output_contents ?? []).toHaveLength(0);
      }
    }
  });

  it('answers a request whose tensors cannot be decoded on the stream and keeps serving the next ones', async () => {
    // a request whose raw contents do not match its inputs is a decode-time bad_request, not a stream error
    const stream = client.ModelStreamInfer();
    const { answers, ended } = collect(stream);
    stream.write({ model_name: 'm', id: 'bad', inputs: [{ name: 'x', datatype: 'FP32', shape: ['1', '4'] }], raw_input_contents: [f32([1]), f32([2])] });
    stream.write(mixed(0));
    stream.end();
    await ended;
    expect(answers.map((a) => [a.infer_response?.id, a.error_message === ''])).toEqual(expect.arrayContaining([
      ['bad', false],
      ['q0', true],
    ]));
    expect(answers).toHaveLength(2);
  });

  it('withdraws the requests still waiting when the client cancels the stream', async () => {
    const abortedBefore = backend.aborted.length;
    const requestsBefore = backend.requests.length;
    const stream = client.ModelStreamInfer();
    const answers: ModelStreamInferResponseMessage[] = [];
    const closed = new Promise<void>((resolve) => {
      stream.on('data', (m: ModelStreamInferResponseMessage) => answers.push(m));
      stream.on('error', () => resolve());
      stream.on('end', resolve);
    });
    const slow = (i: number): ModelInferRequestMessage => ({ ...mixed(0), id: `slow${i}`, parameters: { fake_delay_ms: { double_param: 60_000 } } });
    for (let i = 0; i < 5; i++) stream.write(slow(i));
    while (backend.requests.length < requestsBefore + 5) await new Promise((r) => setTimeout(r, 10));
    stream.cancel();
    await closed;
    // every request either answered before the cancel or withdrawn: none left running
    while (backend.aborted.length < abortedBefore + 5 - answers.length) await new Promise((r) => setTimeout(r, 10));
    expect(backend.aborted.length - abortedBefore + answers.length).toBe(5);
  });
});
