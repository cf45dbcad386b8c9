/**
 * Fuzz: over a thousand malformed inference requests from a
 * seeded generator — bad JSON, wrong types, negative / huge / fractional dims, mismatched element
 * counts, unknown datatypes, unknown model / inputs / outputs, truncated binary payloads, wrong
 * `Inference-Header-Content-Length`, bodies over the limit, deep nesting, INT64 strings, NaN
 * literals — plus random mutations of valid requests.
 *
 * Every malformed request must get a 4xx (never 5xx, never a hang) with a JSON `{"error": "..."}`
 * body that names something specific and holds no stack trace; a mutated request may also
 * succeed (200) when the mutation kept it valid. A valid request every `VALID_EVERY` malformed
 * ones must succeed throughout.
 *
 * In-process through `app.inject` (fast: the bulk), then a few hundred over real sockets to
 * `abacus serve` as a child process (including raw HTTP garbage on a TCP socket, a body over the
 * limit sent whole before the answer is read, and headers that never end).
 */
import fs from 'node:fs/promises';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import * as grpc from '@grpc/grpc-js';
import type { FastifyInstance } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RuntimeBackend } from '../../src/serve/backend.ts';
import { createHttpApp } from '../../src/serve/http/app.ts';
import { CONTENTS_FIELD_BY_DATATYPE } from '../../src/serve/grpc/codec.ts';
import { loadInferenceService } from '../../src/serve/grpc/proto.ts';
import { createGrpcServer, type GrpcInferenceServer } from '../../src/serve/grpc/server.ts';
import { resolveModelSpec } from '../../src/model/catalog.ts';
import { ModelRepository } from '../../src/model/repository.ts';
import type { ModelSpec } from '../../src/model/spec.ts';
import type { TensorDataType } from '../../src/tensor.ts';
import { startChildServer, writeConfig, type ChildServer } from './child-serve.ts';
import { rng } from '../helpers/rng.ts';
import { simBackend } from './helpers.ts';

const IMAGE = 3 * 64 * 64;
const MAX_BODY = 1 << 20;
const VALID_EVERY = 25;

/** One HTTP request as the generator makes it. */
interface FuzzRequest {
  readonly kind: string;
  readonly url: string;
  readonly method?: 'POST' | 'GET' | 'PUT';
  readonly headers?: Record<string, string>;
  readonly body?: string | Buffer;
  /** true: a mutation that may still be valid (200 allowed). */
  readonly mayPass?: boolean;
}

type Json = Record<string, unknown>;

const resnetJson = (batch = 1, extra: Json = {}): Json => ({ inputs: [{ name: 'input', datatype: 'FP32', shape: [batch, 3, 64, 64], data: new Array(batch * IMAGE).fill(0.5) }], ...extra });
const bertJson = (batch = 1, seq = 8, extra: Json = {}): Json => ({
  inputs: [
    { name: 'input_ids', datatype: 'INT64', shape: [batch, seq], data: new Array(batch * seq).fill(1) },
    { name: 'attention_mask', datatype: 'INT64', shape: [batch, seq], data: new Array(batch * seq).fill(1) },
  ],
  ...extra,
});

/** A valid request, alternating models and encodings. */
function validRequest(i: number): FuzzRequest {
  if (i % 3 === 0) {
    const header = Buffer.from(JSON.stringify({ inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3, 64, 64], parameters: { binary_data_size: IMAGE * 4 } }] }));
    return { kind: 'valid binary', url: '/v2/models/resnet/infer', headers: { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(header.byteLength) }, body: Buffer.concat([header, Buffer.alloc(IMAGE * 4)]) };
  }
  if (i % 3 === 1) return { kind: 'valid bert', url: '/v2/models/bert/infer', headers: { 'content-type': 'application/json' }, body: JSON.stringify(bertJson(2, 16, { id: `v${i}` })) };
  return { kind: 'valid resnet', url: '/v2/models/resnet/versions/1/infer', headers: { 'content-type': 'application/json' }, body: JSON.stringify(resnetJson(1)) };
}

const WEIRD_VALUES: readonly unknown[] = [null, true, false, 0, -1, 1.5, -0.5, 1e308, -1e308, 2 ** 53 + 2, '', 'x', '1', 'NaN', 'Infinity', [], [[]], {}, { a: 1 }, [1, 'a'], [null], 'FP32', 'INT64'];
const WEIRD_LITERALS: readonly string[] = ['NaN', 'Infinity', '-Infinity', 'undefined', '9223372036854775808', '-9223372036854775809', '1e400', '123456789012345678901234567890', '0x10', '01', '.5', '1.', '+1', '"\\ud800"', '"\\u0000"'];

/** The generator: `n` malformed requests of every category, deterministic in `seed`. */
function malformedRequests(seed: number, n: number): FuzzRequest[] {
  const r = rng(seed);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const int = (lo: number, hi: number): number => lo + Math.floor(r() * (hi - lo + 1));
  const json = (kind: string, body: unknown, url = '/v2/models/resnet/infer', mayPass = false): FuzzRequest => ({ kind, url, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), mayPass });
  const text = (kind: string, body: string, url = '/v2/models/resnet/infer'): FuzzRequest => ({ kind, url, headers: { 'content-type': 'application/json' }, body });
  const binary = (kind: string, header: string, tail: Buffer, headerLength: string, url = '/v2/models/resnet/infer'): FuzzRequest => ({
    kind,
    url,
    headers: { 'content-type': 'application/octet-stream', 'inference-header-content-length': headerLength },
    body: Buffer.concat([Buffer.from(header), tail]),
  });
  const smallImage = (shape: unknown[], data: unknown): Json => ({ inputs: [{ name: 'input', datatype: 'FP32', shape, data }] });

  const categories: (() => FuzzRequest)[] = [
    // bad JSON
    () => {
      const valid = JSON.stringify(bertJson(1, 4));
      const cut = int(0, valid.length - 1);
      return text('truncated JSON', valid.slice(0, cut), '/v2/models/bert/infer');
    },
    () => text('garbage', pick(['{', '}', '[', 'null', '"inputs"', '{"inputs": [}', "{'inputs': []}", '{"inputs": [1,]}', '\u0000\u0001', '{"inputs"::1}', 'true', '42', '{"inputs": [{"name": "input",}]}', '\ufeff{"inputs": 5}'])),
    () => text('NaN literal', `{"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 3, 64, 64], "data": [${pick(WEIRD_LITERALS)}]}]}`),
    () => text('NaN literal in bert', `{"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [1, 1], "data": [${pick(WEIRD_LITERALS)}]}, {"name": "attention_mask", "datatype": "INT64", "shape": [1, 1], "data": [1]}]}`, '/v2/models/bert/infer'),
    // wrong types at the top and in an input
    () => json('inputs wrong type', { inputs: pick(WEIRD_VALUES.filter((v) => !Array.isArray(v) || v.length === 0)) }),
    () => json('body not an object', pick([[], [1, 2], 'inputs', 5, null])),
    () => {
      const field = pick(['name', 'datatype', 'shape', 'data', 'parameters']);
      const input: Json = { name: 'input', datatype: 'FP32', shape: [1, 3, 64, 64], data: new Array(IMAGE).fill(0) };
      let v = pick(WEIRD_VALUES);
      if (field === 'name' && typeof v === 'string') v = 5;
      if (field === 'datatype' && v === 'FP32') v = 'BOOL';
      if (field === 'parameters' && (v === null || (typeof v === 'object' && !Array.isArray(v)))) v = 'p';
      input[field] = v;
      return json(`input.${field} wrong`, { inputs: [input] });
    },
    () => json('outputs wrong', { ...resnetJson(1), outputs: pick([5, 'logits', [5], [{}], [{ name: 5 }], [{ name: 'probs' }], [{ name: 'logits', parameters: 7 }], [{ name: 'logits', parameters: { binary_data: 'yes' } }], [{ name: 'logits' }, { name: 'logits' }]]) }),
    () => json('parameters wrong', { ...resnetJson(1), parameters: pick([5, 'x', [], { qos_ms: -1 }, { qos_ms: 0 }, { qos_ms: 'fast' }, { qos_ms: 1e12 }, { qos_ms: null }, { binary_data_output: 'true' }, { seq_len: 8 }]) }),
    () => json('id wrong', { ...resnetJson(1), id: pick([5, true, [], {}, null]) }),
    // dims
    () => {
      const shape: unknown[] = [1, 3, 64, 64];
      shape[int(0, 3)] = pick([-1, -2, 0, 1.5, 2 ** 31, 2 ** 53, 1e300, -0.5, '1', null, true, [1], 65, 63]);
      return json('bad dim', smallImage(shape, new Array(IMAGE).fill(0)));
    },
    () => json('bad rank', smallImage(pick([[], [IMAGE], [1, IMAGE], [1, 3, 64, 64, 1], [1, 3, 4096]]), new Array(IMAGE).fill(0))),
    () => json('batch not served', smallImage([pick([3, 4, 8, 16]), 3, 64, 64], [])),
    () => text('huge dim literal', `{"inputs": [{"name": "input", "datatype": "FP32", "shape": [${pick(['9223372036854775807', '18446744073709551616', '1e999', '-9007199254740993', '12345678901234567'])}, 3, 64, 64], "data": []}]}`),
    // element counts
    () => json('count mismatch', smallImage([1, 3, 64, 64], new Array(pick([0, 1, IMAGE - 1, IMAGE + 1, 2 * IMAGE])).fill(0))),
    () => json('nested mismatch', smallImage([1, 3, 64, 64], [[[new Array(64).fill(0)]]])),
    () => {
      const data: unknown[] = new Array(IMAGE).fill(0);
      data[int(0, IMAGE - 1)] = pick(['a', null, true, [], {}, 'NaN!', 'nan', '1', [1]]);
      return json('non-numbers in data', smallImage([1, 3, 64, 64], data));
    },
    () => json('bert seq mismatch', { inputs: [{ name: 'input_ids', datatype: 'INT64', shape: [1, 8], data: new Array(8).fill(1) }, { name: 'attention_mask', datatype: 'INT64', shape: [1, pick([4, 9, 16])], data: new Array(16).fill(1) }] }, '/v2/models/bert/infer'),
    () => json('bert seq too long', bertJson(1, pick([100_000, 4097])), '/v2/models/bert/infer'),
    // datatypes
    () => json('unknown datatype', { inputs: [{ name: 'input', datatype: pick(['FP33', '', 'fp32', 'FLOAT', 'STRING', 'BF16', 'INT128', ' FP32']), shape: [1, 3, 64, 64], data: new Array(IMAGE).fill(0) }] }),
    () => json('wrong datatype', { inputs: [{ name: 'input', datatype: pick(['INT64', 'INT32', 'BOOL', 'BYTES', 'FP16', 'FP64', 'UINT8']), shape: [1, 3, 64, 64], data: new Array(IMAGE).fill(0) }] }),
    // INT64 strings and out of range
    () => {
      const v = pick(['1', 'abc', '9223372036854775808', '-9223372036854775809', '1.5', '', ' 1', '0x1', '1e3']);
      return json('INT64 string', { inputs: [{ name: 'input_ids', datatype: 'INT64', shape: [1, 2], data: [1, v] }, { name: 'attention_mask', datatype: 'INT64', shape: [1, 2], data: [1, 1] }] }, '/v2/models/bert/infer', v === '1');
    },
    () => text('INT64 out of range', `{"inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [1, 2], "data": [1, ${pick(['9223372036854775808', '-9223372036854775809', '99999999999999999999999', '1.5', '1e20'])}]}, {"name": "attention_mask", "datatype": "INT64", "shape": [1, 2], "data": [1, 1]}]}`, '/v2/models/bert/infer'),
    // unknown model, version, inputs, outputs
    () => json('unknown model', resnetJson(1), `/v2/models/${pick(['nope', 'resnet50', 'RESNET', '%2e%2e', 'a'.repeat(300), 'resnet%00', '%zz', '%E0%A4%A', 'résnet'])}/infer`),
    () => json('unknown version', resnetJson(1), `/v2/models/resnet/versions/${pick(['0', '2', 'latest', '-1', '1.0'])}/infer`),
    () => json('unknown input', { inputs: [{ name: pick(['image', 'Input', '', 'input ', 'logits']), datatype: 'FP32', shape: [1, 3, 64, 64], data: new Array(IMAGE).fill(0) }] }),
    () => json('duplicate input', { inputs: [...(resnetJson(1)['inputs'] as unknown[]), ...(resnetJson(1)['inputs'] as unknown[])] }),
    () => json('missing input', { inputs: [{ name: 'input_ids', datatype: 'INT64', shape: [1, 2], data: [1, 1] }] }, '/v2/models/bert/infer'),
    // binary tensor data
    () => {
      const header = JSON.stringify({ inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3, 64, 64], parameters: { binary_data_size: IMAGE * 4 } }] });
      return binary('truncated binary', header, Buffer.alloc(int(0, IMAGE * 4 - 1)), String(Buffer.byteLength(header)));
    },
    () => {
      const header = JSON.stringify({ inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3, 64, 64], parameters: { binary_data_size: pick([-1, 1.5, 'x', IMAGE * 4 + 1, 2 ** 60, null]) } }] });
      return binary('bad binary_data_size', header, Buffer.alloc(IMAGE * 4), String(Buffer.byteLength(header)));
    },
    () => {
      const header = JSON.stringify({ inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3, 64, 64], parameters: { binary_data_size: IMAGE * 4 } }] });
      const len = Buffer.byteLength(header);
      return binary('wrong header length', header, Buffer.alloc(IMAGE * 4), pick([String(len - int(1, 10)), String(len + int(1, 10)), '-1', 'abc', '', '1e3', String(len + IMAGE * 8), '99999999999999999999', `${len}, ${len}`, ' ']));
    },
    () => binary('raw binary wrong size', '', Buffer.alloc(pick([1, 3, IMAGE * 4 - 4, IMAGE * 4 + 4, IMAGE * 8])), '0'),
    () => binary('raw binary on a two-input model', '', Buffer.alloc(64), '0', '/v2/models/bert/infer'),
    () => json('binary_data_size without header', { inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3, 64, 64], parameters: { binary_data_size: IMAGE * 4 } }] }),
    () => {
      const header = JSON.stringify({ inputs: [{ name: 'input', datatype: 'FP32', shape: [1, 3, 64, 64], data: new Array(IMAGE).fill(0) }] });
      return binary('trailing bytes', header, Buffer.alloc(int(1, 100)), String(Buffer.byteLength(header)));
    },
    // body size, nesting, empty
    () => ({ kind: 'huge body', url: '/v2/models/resnet/infer', headers: { 'content-type': 'application/json' }, body: Buffer.alloc(MAX_BODY + int(1, 1000), 0x20) }),
    () => {
      const depth = pick([1000, 10_000, 100_000]);
      return text('deep nesting', `{"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 3, 64, 64], "data": ${'['.repeat(depth)}1${']'.repeat(depth)}}]}`);
    },
    () => {
      const depth = pick([1000, 50_000]);
      return text('deep object nesting', `{"inputs": [], "parameters": ${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}}`);
    },
    () => ({ kind: 'empty body', url: '/v2/models/resnet/infer', headers: pick([{ 'content-type': 'application/json' }, {}, { 'content-type': 'text/plain' }]), body: '' }),
    () => ({ kind: 'wrong method', url: '/v2/models/resnet/infer', method: pick(['GET', 'PUT'] as const), headers: { 'content-type': 'application/json' }, ...(r() < 0.5 ? {} : { body: '{}' }) }),
    () => ({ kind: 'unknown route', url: pick(['/v2/models//infer', '/v2/models/resnet/infer/', '/v1/models/resnet:predict', '/v2/models/resnet/versions/1/infer/x']), headers: { 'content-type': 'application/json' }, body: JSON.stringify(resnetJson(1)) }),
    // odd but valid URLs: a query string is ignored; an empty version segment means no version (as gRPC's empty model_version)
    () => ({ kind: 'odd URL', url: pick(['/v2/models/resnet/infer?x=%zz', '/v2/models/resnet/versions//infer']), headers: { 'content-type': 'application/json' }, body: JSON.stringify(resnetJson(1)), mayPass: true }),
    // random mutation of a valid request: replace one value anywhere (may stay valid)
    () => {
      const isBert = r() < 0.5;
      const extra = { id: 'm', outputs: [{ name: isBert ? 'last_hidden_state' : 'logits' }], parameters: { qos_ms: 100 } };
      const base = isBert ? bertJson(1, 4, extra) : resnetJson(1, extra);
      const url = isBert ? '/v2/models/bert/infer' : '/v2/models/resnet/infer';
      const paths: (string | number)[][] = [];
      const walk = (v: unknown, p: (string | number)[]): void => {
        if (p.length > 4) return;
        paths.push(p);
        if (Array.isArray(v)) v.slice(0, 3).forEach((x, k) => walk(x, [...p, k]));
        else if (typeof v === 'object' && v !== null) for (const [k, x] of Object.entries(v)) walk(x, [...p, k]);
      };
      walk(base, []);
      const p = pick(paths.slice(1));
      let parent: unknown = base;
      for (const k of p.slice(0, -1)) parent = (parent as Record<string | number, unknown>)[k];
      const value = pick(WEIRD_VALUES);
      (parent as Record<string | number, unknown>)[p[p.length - 1]!] = value;
      return { ...json(`mutation ${p.join('.')}`, base, url, true) };
    },
  ];
  return Array.from({ length: n }, () => pick(categories)());
}

/** What every answer to a malformed request must satisfy; returns a failure description or undefined. */
function checkAnswer(req: FuzzRequest, status: number, body: string): string | undefined {
  const where = `${req.kind} → ${status} ${body.slice(0, 200)}`;
  if (status === 200 && req.mayPass === true) return undefined;
  if (status < 400 || status >= 500) return `status: ${where}`;
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return `body not JSON: ${where}`;
  }
  const error = (parsed as { error?: unknown }).error;
  if (typeof error !== 'string' || error.length < 12) return `no error message: ${where}`;
  if (/\n\s+at |node:internal|\.ts:\d+/.test(error)) return `stack trace: ${where}`;
  // specific: names a model, input, field, header or route — not a bare "Bad Request"
  if (!/model|input|output|shape|datatype|data|parameters|JSON|body|header|Inference-Header|route|inputs|binary|request|nesting|depth|id\b/i.test(error)) return `unspecific message: ${where}`;
  return undefined;
}

describe('fuzz: malformed inference requests, in-process (app.inject on sim:a100)', () => {
  let backend: RuntimeBackend;
  let app: FastifyInstance;
  beforeAll(async () => {
    const b = await simBackend([
      { name: 'resnet', model: 'resnet50-small', qosTargetMs: 1000, batchSizes: [1, 2] },
      { name: 'bert', model: 'bert-small', qosTargetMs: 1000, batchSizes: [1, 2] },
    ]);
    backend = b.backend;
    app = createHttpApp(backend, { metrics: b.metrics, maxBodyBytes: MAX_BODY });
    await app.ready();
  }, 60_000);
  afterAll(async () => {
    await app.close();
    await backend.shutdown(2000);
  });

  // 1000 requests draw each of the generator's 43 categories about 23 times: the same 47 kinds
  // as 3000 did (the input field category counts as five), for a third of the CPU
  it('1000 malformed requests: each a 4xx with a specific JSON error; valid requests interleaved keep succeeding', async () => {
    const requests = malformedRequests(20_240_601, 1000);
    const failures: string[] = [];
    const statuses: Record<string, number> = {};
    const kinds = new Set<string>();
    let valid = 0;
    const t0 = performance.now();
    for (const [i, req] of requests.entries()) {
      kinds.add(req.kind.replace(/^mutation .*/, 'mutation'));
      const res = await app.inject({ method: req.method ?? 'POST', url: req.url, ...(req.headers === undefined ? {} : { headers: req.headers }), ...(req.body === undefined ? {} : { payload: req.body }) });
      statuses[res.statusCode] = (statuses[res.statusCode] ?? 0) + 1;
      const problem = checkAnswer(req, res.statusCode, res.body);
      if (problem !== undefined) failures.push(problem);
      if (i % VALID_EVERY === VALID_EVERY - 1) {
        const v = validRequest(i);
        const ok = await app.inject({ method: 'POST', url: v.url, headers: v.headers!, payload: v.body! });
        if (ok.statusCode !== 200) failures.push(`valid request failed after #${i}: ${ok.statusCode} ${ok.body.slice(0, 200)}`);
        else valid++;
      }
    }
    console.log(`fuzz in-process: ${requests.length} malformed in ${((performance.now() - t0) / 1000).toFixed(1)} s, ${kinds.size} kinds, statuses ${JSON.stringify(statuses)}; ${valid} valid requests interleaved`);
    expect(failures.slice(0, 20), `${failures.length} failures`).toEqual([]);
    expect(valid).toBe(Math.floor(requests.length / VALID_EVERY));
    expect(kinds.size).toBeGreaterThanOrEqual(35);
    expect(backend.isReady()).toBe(true);
  }, 120_000);
});

/**
 * Dims whose product dwarfs the data (3·10^10 elements for 3 values) or is beyond any buffer,
 * for every served datatype, on a model whose sequence axis is two of its dims (an imported
 * detector with dynamic H/W: `[batch, 3, seq, seq]`, sequence limit 2^20) and on one with fixed
 * dims: each a 400 naming the input, before anything is allocated (it was a 500 from a RangeError
 * allocating the tensor). HTTP JSON (flat and nested), HTTP binary, gRPC typed contents and raw.
 */
describe('fuzz: huge dims for every datatype, both protocols', () => {
  const DATATYPES = [
    ['FP32', 'float32', 4],
    ['FP64', 'float64', 8],
    ['FP16', 'float16', 2],
    ['INT64', 'int64', 8],
    ['INT32', 'int32', 4],
    ['INT8', 'int8', 1],
    ['UINT8', 'uint8', 1],
    ['BOOL', 'bool', 1],
  ] as const;
  const HUGE_SHAPES: readonly (readonly number[])[] = [
    [1, 3, 100_000, 100_000], // 3·10^10 elements: a 100,000² image
    [1, 3, 1_048_576, 1_048_576], // the sequence limit: 3.3·10^12
    [1, 3, 2 ** 31, 2 ** 31], // beyond the sequence limit
    [1, 3, 2 ** 52, 2 ** 52], // a product beyond 2^53
    [2 ** 30, 3, 64, 64], // a batch far beyond any served one
  ];
  let backend: RuntimeBackend;
  let app: FastifyInstance;
  let grpcServer: GrpcInferenceServer;
  let client: grpc.Client & Record<string, (req: unknown, cb: (e: grpc.ServiceError | null) => void) => void>;
  beforeAll(async () => {
    const base = await resolveModelSpec(new ModelRepository(), 'bert-small');
    const variant = (name: string, dataType: TensorDataType, shape: (string | number)[]): ModelSpec => {
      const { maxSeqLen: _dropped, ...rest } = base;
      return { ...rest, name, inputs: [{ name: 'image', dataType, shape }] };
    };
    const models = DATATYPES.flatMap(([v2, host]) => [
      { name: `seq_${v2}`, model: 'bert-small', batchSizes: [1], spec: variant(`seq_${v2}`, host, ['batch', 3, 'seq', 'seq']) },
      { name: `fixed_${v2}`, model: 'bert-small', batchSizes: [1], spec: variant(`fixed_${v2}`, host, ['batch', 3, 64, 64]) },
    ]);
    const b = await simBackend(models);
    backend = b.backend;
    app = createHttpApp(backend, { metrics: b.metrics, maxBodyBytes: MAX_BODY });
    await app.ready();
    grpcServer = createGrpcServer(backend);
    const port = await grpcServer.listen('127.0.0.1', 0);
    const { Client } = loadInferenceService();
    client = new Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure()) as unknown as typeof client;
  }, 120_000);
  afterAll(async () => {
    client.close();
    await grpcServer.close(1000);
    await app.close();
    await backend.shutdown(2000);
  });

  const value = (v2: string): unknown => (v2 === 'BOOL' ? true : 1);

  it('HTTP: JSON (flat and nested) and binary data: a 400 naming the input for every datatype, model and huge shape', async () => {
    let answered = 0;
    for (const [v2, , bytesPerElement] of DATATYPES) {
      for (const kind of ['seq', 'fixed']) {
        const url = `/v2/models/${kind}_${v2}/infer`;
        for (const shape of HUGE_SHAPES) {
          const v = value(v2);
          const bodies: { what: string; headers: Record<string, string>; body: string | Buffer }[] = [
            { what: 'flat JSON', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ inputs: [{ name: 'image', datatype: v2, shape, data: [v, v, v] }] }) },
            { what: 'nested JSON', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ inputs: [{ name: 'image', datatype: v2, shape, data: [[[[v, v, v]]]] }] }) },
          ];
          const header = Buffer.from(JSON.stringify({ inputs: [{ name: 'image', datatype: v2, shape, parameters: { binary_data_size: 3 * bytesPerElement } }] }));
          bodies.push({ what: 'binary', headers: { 'content-type': 'application/octet-stream', 'inference-header-content-length': String(header.byteLength) }, body: Buffer.concat([header, Buffer.alloc(3 * bytesPerElement)]) });
          for (const { what, headers, body } of bodies) {
            const res = await app.inject({ method: 'POST', url, headers, payload: body });
            const where = `${kind}_${v2} ${JSON.stringify(shape)} ${what}`;
            expect([where, res.statusCode], res.body).toEqual([where, 400]);
            expect(res.json<Json>()['error'], where).toMatch(new RegExp(`^model '${kind}_${v2}': (input 'image'|batch size|sequence length)`));
            answered++;
          }
        }
      }
    }
    expect(answered).toBe(DATATYPES.length * 2 * HUGE_SHAPES.length * 3);
    // the server still serves: a valid request of the same model
    const ok = await app.inject({ method: 'POST', url: '/v2/models/seq_FP32/infer', payload: { inputs: [{ name: 'image', datatype: 'FP32', shape: [1, 3, 2, 2], data: new Array(12).fill(0.5) }] } });
    expect(ok.statusCode, ok.body).toBe(200);
  });

  it('gRPC: typed contents and raw_input_contents: INVALID_ARGUMENT naming the input for every datatype, model and huge shape', async () => {
    const infer = (request: unknown): Promise<grpc.ServiceError | null> => new Promise((resolve) => client['ModelInfer']!(request, (e) => resolve(e)));
    let answered = 0;
    for (const [v2, , bytesPerElement] of DATATYPES) {
      const field = CONTENTS_FIELD_BY_DATATYPE[v2];
      for (const kind of ['seq', 'fixed']) {
        for (const shape of HUGE_SHAPES) {
          const requests: { what: string; request: unknown }[] = [
            { what: 'raw', request: { model_name: `${kind}_${v2}`, inputs: [{ name: 'image', datatype: v2, shape }], raw_input_contents: [Buffer.alloc(3 * bytesPerElement)] } },
          ];
          // FP16 has no typed contents field: raw only
          if (field !== undefined) requests.push({ what: 'typed', request: { model_name: `${kind}_${v2}`, inputs: [{ name: 'image', datatype: v2, shape, contents: { [field]: [value(v2), value(v2), value(v2)] } }] } });
          for (const { what, request } of requests) {
            const e = await infer(request);
            const where = `${kind}_${v2} ${JSON.stringify(shape)} ${what}`;
            expect([where, e?.code], e?.details).toEqual([where, grpc.status.INVALID_ARGUMENT]);
            expect(e?.details, where).toMatch(new RegExp(`^model '${kind}_${v2}': (input 'image'|batch size|sequence length)`));
            answered++;
          }
        }
      }
    }
    expect(answered).toBe((2 * DATATYPES.length - 1) * 2 * HUGE_SHAPES.length); // raw for 8 datatypes, typed for 7, on 2 models
  });
});

describe('fuzz: malformed requests over real sockets (abacus serve child process)', () => {
  let tmp: string;
  let server: ChildServer;
  beforeAll(async () => {
    tmp = await fs.mkdtemp(path.join(os.tmpdir(), 'abacus-fuzz-'));
    const config = await writeConfig(tmp, 'fuzz.yaml', [
      'device: sim:a100',
      'policy: { name: overlap-all }',
      'services:',
      '  - name: resnet',
      '    model: resnet50-small',
      '    qosTargetMs: 1000',
      '    batchSizes: [1, 2]',
      '  - name: bert',
      '    model: bert-small',
      '    qosTargetMs: 1000',
      '    batchSizes: [1, 2]',
      '    seqLens: [4, 16]',
    ]);
    server = await startChildServer(config, { cacheDir: path.join(tmp, 'models'), flags: ['--no-grpc', '--max-body-bytes', String(MAX_BODY), '--headers-timeout-ms', '1000'] });
  }, 120_000);
  afterAll(async () => {
    const code = await server?.stop(5000);
    expect(code).toBe(0);
    await fs.rm(tmp, { recursive: true, force: true });
  });

  it('400 malformed requests over HTTP (fetch, keep-alive): 4xx with a specific JSON error each; valid requests keep succeeding', async () => {
    const requests = malformedRequests(7, 400);
    const failures: string[] = [];
    const statuses: Record<string, number> = {};
    const send = async (req: FuzzRequest): Promise<{ status: number; body: string }> => {
      try {
        const res = await fetch(`${server.httpUrl}${req.url}`, { method: req.method ?? 'POST', headers: req.headers ?? {}, ...(req.body === undefined || req.method === 'GET' ? {} : { body: req.body }), signal: AbortSignal.timeout(20_000) });
        return { status: res.status, body: await res.text() };
      } catch (e) {
        return { status: -1, body: `${String(e)}: ${String((e as { cause?: unknown }).cause)}` };
      }
    };
    // 8 at a time, as concurrent clients would
    for (let i = 0; i < requests.length; i += 8) {
      const batch = requests.slice(i, i + 8);
      const answers = await Promise.all(batch.map(send));
      answers.forEach((a, k) => {
        statuses[a.status] = (statuses[a.status] ?? 0) + 1;
        const problem = checkAnswer(batch[k]!, a.status, a.body);
        if (problem !== undefined) failures.push(problem);
      });
      const v = await send(validRequest(i));
      if (v.status !== 200) failures.push(`valid request failed after #${i}: ${v.status} ${v.body.slice(0, 200)}`);
    }
    console.log(`fuzz over HTTP: ${requests.length} malformed, statuses ${JSON.stringify(statuses)}`);
    expect(failures.slice(0, 20), `${failures.length} failures`).toEqual([]);
  }, 120_000);

  it('raw HTTP garbage on TCP sockets gets a 4xx or a closed connection, never a hang; the server keeps serving', async () => {
    const { port } = new URL(server.httpUrl);
    const header = '{"inputs":[{"name":"input","datatype":"FP32","shape":[1,3,64,64],"parameters":{"binary_data_size":49152}}]}';
    const raws: [string, Buffer][] = [
      ['not HTTP', Buffer.from('hello\r\n\r\n')],
      ['bad request line', Buffer.from('POST  HTTP/1.1\r\n\r\n')],
      ['bad header', Buffer.from('POST /v2/models/resnet/infer HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n')],
      ['content-length short then close', Buffer.from(`POST /v2/models/resnet/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"inputs":`)],
      ['bad chunked', Buffer.from('POST /v2/models/resnet/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n')],
      ['content-length and chunked', Buffer.from('POST /v2/models/resnet/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n')],
      ['negative content-length', Buffer.from('POST /v2/models/resnet/infer HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n')],
      ['huge header', Buffer.from(`GET /v2 HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(100_000)}\r\n\r\n`)],
      ['binary truncated then close', Buffer.concat([Buffer.from(`POST /v2/models/resnet/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nInference-Header-Content-Length: ${header.length}\r\nContent-Length: ${header.length + 49152}\r\n\r\n${header}`), Buffer.alloc(1000)])],
      ['pipelined valid + garbage', Buffer.from(`GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\nGARBAGE\r\n\r\n`)],
    ];
    for (const [what, bytes] of raws) {
      const answer = await new Promise<string>((resolve) => {
        const socket = net.connect(Number(port), '127.0.0.1');
        let data = '';
        const timer = setTimeout(() => {
          socket.destroy();
          resolve(`HANG ${data}`);
        }, 10_000);
        socket.on('data', (d: Buffer) => (data += d.toString()));
        socket.on('error', () => undefined);
        socket.on('close', () => {
          clearTimeout(timer);
          resolve(data);
        });
        socket.write(bytes, () => {
          // a request that declares more body than it sends: the client gives up (half-close); the server must not wait forever
          socket.end();
        });
      });
      expect(answer.startsWith('HANG'), `${what}: ${answer.slice(0, 200)}`).toBe(false);
      const statuses = [...answer.matchAll(/^HTTP\/1\.1 (\d{3})/gm)].map((m) => Number(m[1]));
      // a 4xx with our error shape, or nothing (the connection closed)
      if (what === 'pipelined valid + garbage') expect(statuses[0]).toBe(200);
      const last = statuses.at(-1);
      if (last === undefined || last === 200) continue;
      expect(last >= 400 && last < 500, `${what}: ${answer.slice(0, 300)}`).toBe(true);
      const body = answer.slice(answer.lastIndexOf('\r\n\r\n') + 4);
      expect(checkAnswer({ kind: `raw ${what}`, url: '' }, last, body)).toBeUndefined();
      expect(body, what).toMatch(/HTTP\/1\.1 request|headers are larger/);
    }
    const v = validRequest(0);
    const res = await fetch(`${server.httpUrl}${v.url}`, { method: 'POST', headers: v.headers!, body: v.body! });
    expect(res.status).toBe(200);
  }, 120_000);

  it('a body over the limit gets a 413 a client that sends it all before reading can read; a connection that never ends its headers gets a 408 and is closed', async () => {
    const port = Number(new URL(server.httpUrl).port);
    const big = Buffer.alloc(MAX_BODY + MAX_BODY / 2, 0x20);
    const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const req = http.request({ host: '127.0.0.1', port, path: '/v2/models/resnet/infer', method: 'POST', agent: false, headers: { 'content-type': 'application/json', 'content-length': String(big.byteLength) } }, (r) => {
        let body = '';
        r.setEncoding('utf8');
        r.on('data', (c: string) => (body += c));
        r.on('end', () => resolve({ status: r.statusCode ?? 0, body }));
      });
      req.on('error', reject);
      req.end(big);
    });
    expect(answer.status).toBe(413);
    expect(JSON.parse(answer.body)).toEqual({ error: expect.stringMatching(/larger than the limit of 1048576 bytes for JSON bodies \(abacus serve --max-json-body-bytes\)/) });
    const received = await new Promise<string>((resolve) => {
      const socket = net.connect(port, '127.0.0.1', () => socket.write('GET /v2 HTTP/1.1\r\nHost: x\r\nX-Slow: '));
      const drip = setInterval(() => socket.write('a'), 200);
      let data = '';
      socket.on('data', (d: Buffer) => (data += d.toString('latin1')));
      socket.on('error', () => undefined);
      socket.on('close', () => {
        clearInterval(drip);
        resolve(data);
      });
    });
    expect(received).toMatch(/^HTTP\/1\.1 408 /);
    const v = validRequest(1);
    const res = await fetch(`${server.httpUrl}${v.url}`, { method: 'POST', headers: v.headers!, body: v.body! });
    expect(res.status).toBe(200);
  }, 120_000);
});
