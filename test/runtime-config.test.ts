import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { ModelSpec, TensorSpec } from '../src/model/spec.ts';
import { DEFAULT_BATCHING, loadServingConfig, MAX_SHAPE_LIST_LENGTH, maxQosMsOf, parseServiceConfig, parseServingConfig, resolveBatching } from '../src/runtime/config.ts';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'abacus-config-'));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
const write = (name: string, text: string): string => {
  const f = path.join(dir, name);
  fs.writeFileSync(f, text);
  return f;
};

describe('serving config', () => {
  it('reads YAML with defaults; relative predictor paths resolve against the file', async () => {
    const f = write(
      'ok.yaml',
      ['device: sim:a100', 'predictor: p.json', 'policy: { name: abacus, ways: 4 }', 'services:', '  - model: resnet50', '    qosTargetMs: 50', '  - name: b', '    model: bert', '    qosTargetMs: 75', '    batchSizes: [1, 4]', '    seqLens: [16]'].join('\n'),
    );
    const c = await loadServingConfig(f);
    expect(c).toEqual({
      source: f,
      device: 'sim:a100',
      predictor: path.join(dir, 'p.json'),
      policy: { name: 'abacus', params: { ways: 4 } },
      services: [
        { name: 'resnet50', model: 'resnet50', qosTargetMs: 50, batchSizes: [1], maxQueueLength: 10_000 },
        { name: 'b', model: 'bert', qosTargetMs: 75, batchSizes: [1, 4], seqLens: [16], maxQueueLength: 10_000 },
      ],
      warnings: [],
    });
  });

  it('reads JSON and a plain policy name', async () => {
    const c = await loadServingConfig(write('ok.json', JSON.stringify({ device: 'ort', policy: 'fcfs', services: [{ model: 'resnet50-small', qosTargetMs: 20 }] })));
    expect(c.policy).toEqual({ name: 'fcfs', params: {} });
    expect(c.predictor).toBeUndefined();
  });

  it('maxQosMs: optional, default 10 × the QoS target', () => {
    const c = parseServingConfig({ device: 'sim:a100', services: [{ model: 'resnet50', qosTargetMs: 20 }, { name: 'b', model: 'resnet50', qosTargetMs: 20, maxQosMs: 30 }] }, 'flags');
    expect(c.services.map((s) => [s.maxQosMs, maxQosMsOf(s)])).toEqual([[undefined, 200], [30, 30]]);
  });

  it('policy parameters are camelCase; the old snake_case spelling still works, with a warning naming the new one', () => {
    const camel = parseServingConfig({ device: 'sim:a100', policy: { name: 'abacus', slackMs: 3, ways: 4 }, services: [{ model: 'resnet50', qosTargetMs: 20 }] }, 'c.yaml');
    expect(camel.policy).toEqual({ name: 'abacus', params: { slackMs: 3, ways: 4 } });
    expect(camel.warnings).toEqual([]);
    const old = parseServingConfig({ device: 'sim:a100', policy: { name: 'abacus', slack_ms: 3, ways: 4 }, services: [{ model: 'resnet50', qosTargetMs: 20 }] }, 'c.yaml');
    expect(old.policy).toEqual(camel.policy);
    expect(old.warnings).toEqual(['c.yaml: policy.slack_ms is the old spelling of policy.slackMs (config keys are camelCase); it still works, but write slackMs']);
    expect(() => parseServingConfig({ device: 'sim:a100', policy: { name: 'abacus', slack_ms: 3, slackMs: 4 }, services: [{ model: 'resnet50', qosTargetMs: 20 }] }, 'c.yaml')).toThrow(
      "c.yaml: policy.slack_ms: 'slack_ms' and 'slackMs' are the same parameter; give only 'slackMs'",
    );
  });

  it('a snake_case service field is an unknown field (with the camelCase name), not a missing camelCase one', () => {
    expect(() => parseServingConfig({ device: 'sim:a100', services: [{ model: 'resnet50', qos_target_ms: 20 }] }, 'c.yaml')).toThrow(
      "c.yaml: services[0]: unknown field(s) 'qos_target_ms' (config keys are camelCase: 'qosTargetMs'?)",
    );
    expect(() => parseServingConfig({ device: 'sim:a100', max_queue: 3, services: [{ model: 'resnet50', qosTargetMs: 20 }] }, 'c.yaml')).toThrow(/c\.yaml: \(top level\): unknown field\(s\) 'max_queue'/);
  });

  it('arrivals: the text form or an object; a relative trace file resolves against the config; bad values name the field', () => {
    const base = { device: 'sim:a100', services: [{ model: 'resnet50', qosTargetMs: 20 }] };
    expect(parseServingConfig(base, 'c.yaml').arrivals).toBeUndefined();
    expect(parseServingConfig({ ...base, arrivals: 'constant' }, 'c.yaml').arrivals).toEqual({ kind: 'constant' });
    expect(parseServingConfig({ ...base, arrivals: 'bursty:onMs=100' }, 'c.yaml').arrivals).toEqual({ kind: 'bursty', onMs: 100, offMs: 1500, offRatio: 0 });
    expect(parseServingConfig({ ...base, arrivals: { kind: 'bursty', offRatio: 0.5 } }, 'c.yaml').arrivals).toEqual({ kind: 'bursty', onMs: 500, offMs: 1500, offRatio: 0.5 });
    expect(parseServingConfig({ ...base, arrivals: 'trace:load.csv,minuteMs=1000' }, 'c.yaml', dir).arrivals).toEqual({ kind: 'trace', file: path.join(dir, 'load.csv'), minuteMs: 1000 });
    expect(parseServingConfig({ ...base, arrivals: { kind: 'trace', file: 'load.csv' } }, 'c.yaml', dir).arrivals).toEqual({ kind: 'trace', file: path.join(dir, 'load.csv'), minuteMs: 60_000 });
    const bad: [unknown, string][] = [
      ['lifo', "c.yaml: arrivals: unknown arrival process 'lifo'"],
      ['bursty:onMs=fast', "c.yaml: arrivals: bursty parameter 'onMs' must be a number, got 'fast'"],
      [{ kind: 'bursty', on_ms: 3 }, "c.yaml: arrivals: unknown field 'on_ms' for bursty"],
      [{ kind: 'trace' }, 'c.yaml: arrivals.file: trace needs a file name'],
      [{ kind: 'lifo' }, 'c.yaml: arrivals.kind: must be one of poisson, constant, bursty, trace'],
      [3, 'c.yaml: arrivals: must be poisson, constant, bursty'],
    ];
    for (const [arrivals, message] of bad) expect(() => parseServingConfig({ ...base, arrivals }, 'c.yaml'), JSON.stringify(arrivals)).toThrow(message);
  });

  it('names the file and the field of every error', async () => {
    const cases: [string, RegExp][] = [
      ['', /empty/],
      ['device: [', /not valid YAML/],
      ['device: sim:a100\nservices: []', /services: .*(>=1|at least|too small)/i],
      ['device: sim:a100\nservices:\n  - model: resnet50\n    qosTargetMs: -1', /services\[0\]\.qosTargetMs/],
      ['device: sim:a100\nservices:\n  - model: resnet50\n    qosTargetMs: "fast"', /services\[0\]\.qosTargetMs/],
      ['device: sim:a100\nservices:\n  - model: resnet50\n    qosTargetMs: 5\n    batchSizes: [1, 0]', /services\[0\]\.batchSizes\[1\]/],
      ['device: sim:a100\nservices:\n  - model: resnet50\n    qosTargetMs: 5\n    qos: 3', /services\[0\]: unknown field\(s\) 'qos'/],
      ['device: sim:a100\nservices:\n  - model: resnet50\n    qosTargetMs: 5\n    batchSizes: [1, 2, 1]', /services\[0\]\.batchSizes\[2\]: 1 is listed twice \(also at \[0\]\)/],
      ['device: sim:a100\nservices:\n  - model: bert\n    qosTargetMs: 5\n    seqLens: [16, 32, 32]', /services\[0\]\.seqLens\[2\]: 32 is listed twice \(also at \[1\]\)/],
      [`device: sim:a100\nservices:\n  - model: resnet50\n    qosTargetMs: 5\n    batchSizes: [${Array.from({ length: 65 }, (_, i) => i + 1).join(', ')}]`, /services\[0\]\.batchSizes: at most 64 entries/],
      ['device: sim:a100\nservices:\n  - model: resnet50\n    qosTargetMs: 5\n  - model: resnet50\n    qosTargetMs: 5', /services\[1\]\.name: 'resnet50' is used twice/],
      ['services:\n  - model: resnet50\n    qosTargetMs: 5', /device/],
      ['device: sim:a100\nservices:\n  - name: stats\n    model: resnet50\n    qosTargetMs: 5', /services\[0\]\.name: 'stats' is reserved \(GET \/v2\/models\/stats is the statistics of every model\); give the service another name/],
      ['device: sim:a100\nservices:\n  - model: resnet50\n    qosTargetMs: 50\n    maxQosMs: 20', /services\[0\]\.maxQosMs: 20 is below the service's qosTargetMs 50/],
    ];
    for (const [i, [text, re]] of cases.entries()) {
      const f = write(`bad${i}.yaml`, text);
      await expect(loadServingConfig(f), text).rejects.toThrow(re);
      await expect(loadServingConfig(f)).rejects.toThrow(f);
    }
    await expect(loadServingConfig(path.join(dir, 'missing.yaml'))).rejects.toThrow(/missing\.yaml: cannot read/);
    expect(() => parseServingConfig({ device: 'x', services: [{ model: 'a', qosTargetMs: 1 }], extra: 1 }, 'flags')).toThrow(/flags: \(top level\): unknown field\(s\) 'extra'/);
  });
});

/** A minimal spec with these inputs and outputs (only the interface matters to batching). */
function specOf(name: string, inputs: TensorSpec[], outputs: TensorSpec[]): ModelSpec {
  return { name, source: { kind: 'zoo', options: {} }, inputs, outputs, dynamicAxes: { batch: 'batch' }, defaultSeqLen: 0, operators: [], params: 0, opset: 17 };
}
const dynamicSpec = specOf('dyn', [{ name: 'x', dataType: 'float32', shape: ['batch', 3, 8, 8] }], [{ name: 'y', dataType: 'float32', shape: ['batch', 10] }]);
const fixedSpec = specOf('fixed4', [{ name: 'x', dataType: 'float32', shape: [4, 16] }], [{ name: 'y', dataType: 'float32', shape: [4, 8] }]);
const flatSpec = specOf('flat', [{ name: 'x', dataType: 'float32', shape: ['batch', 16] }], [{ name: 'y', dataType: 'float32', shape: ['batch*16'] }]);

describe('serving config: batchSizes and seqLens', () => {
  it('each value once, at most MAX_SHAPE_LIST_LENGTH (64) entries, in a file and in a load request (parameters.config)', () => {
    expect(MAX_SHAPE_LIST_LENGTH).toBe(64);
    const ok = Array.from({ length: 64 }, (_, i) => i + 1);
    expect(parseServiceConfig({ model: 'resnet50', qosTargetMs: 5, batchSizes: ok }, 'parameters.config').batchSizes).toEqual(ok);
    // the reviewer's case: 5,000 × [1] warmed a load up for 45 s
    expect(() => parseServiceConfig({ model: 'resnet50', qosTargetMs: 5, batchSizes: Array(5_000).fill(1) }, 'parameters.config')).toThrow(/^parameters\.config\.batchSizes: at most 64 entries/);
    expect(() => parseServiceConfig({ model: 'resnet50', qosTargetMs: 5, batchSizes: [1, 1] }, 'parameters.config')).toThrow('parameters.config.batchSizes[1]: 1 is listed twice (also at [0]); list each value once');
    expect(() => parseServiceConfig({ model: 'bert', qosTargetMs: 5, seqLens: [8, 16, 8] }, 'parameters.config')).toThrow('parameters.config.seqLens[2]: 8 is listed twice (also at [0])');
    expect(() => parseServiceConfig({ model: 'bert', qosTargetMs: 5, seqLens: Array.from({ length: 65 }, (_, i) => i + 1) }, 'parameters.config')).toThrow(/parameters\.config\.seqLens: at most 64 entries/);
    expect(() => parseServiceConfig({ model: 'resnet50', qosTargetMs: 5, batchSizes: [65_537] }, 'parameters.config')).toThrow(/parameters\.config\.batchSizes\[0\]/);
  });
});

describe('serving config: dynamicBatching', () => {
  const service = (dynamicBatching?: unknown): Record<string, unknown> => ({ model: 'resnet50', qosTargetMs: 20, ...(dynamicBatching === undefined ? {} : { dynamicBatching }) });
  const parse = (...services: Record<string, unknown>[]) => parseServingConfig({ device: 'sim:a100', services: services.map((s, i) => ({ name: `s${i}`, ...s })) }, 'flags');

  it("Triton's fields in camelCase, defaults maxBatchSize 16 (Clockwork's max_batch), maxQueueDelayMs 0, preferredBatchSizes []; true = the defaults; false = off; absent stays absent", () => {
    expect(DEFAULT_BATCHING).toEqual({ maxBatchSize: 16, maxQueueDelayMs: 0, preferredBatchSizes: [] });
    const c = parse(service(), service(false), service(true), service({}), service({ maxBatchSize: 8 }), service({ maxBatchSize: 32, maxQueueDelayMs: 2.5, preferredBatchSizes: [4, 8, 32] }));
    expect(c.services.map((s) => s.dynamicBatching)).toEqual([
      undefined,
      false,
      { maxBatchSize: 16, maxQueueDelayMs: 0, preferredBatchSizes: [] },
      { maxBatchSize: 16, maxQueueDelayMs: 0, preferredBatchSizes: [] },
      { maxBatchSize: 8, maxQueueDelayMs: 0, preferredBatchSizes: [] },
      { maxBatchSize: 32, maxQueueDelayMs: 2.5, preferredBatchSizes: [4, 8, 32] },
    ]);
    expect('dynamicBatching' in c.services[0]!).toBe(false);
  });

  it('bad values name the file and the field', async () => {
    const head = 'device: sim:a100\nservices:\n  - model: resnet50\n    qosTargetMs: 5\n  - name: b\n    model: resnet50\n    qosTargetMs: 5\n    dynamicBatching: ';
    const cases: [string, RegExp][] = [
      ['{ maxBatchSize: 0 }', /services\[1\]\.dynamicBatching\.maxBatchSize: .*>=1/],
      ['{ maxBatchSize: 2.5 }', /services\[1\]\.dynamicBatching\.maxBatchSize: .*int/i],
      ['{ maxBatchSize: 100000 }', /services\[1\]\.dynamicBatching\.maxBatchSize: .*65536/],
      ['{ maxQueueDelayMs: -1 }', /services\[1\]\.dynamicBatching\.maxQueueDelayMs: .*>=0/],
      ['{ maxQueueDelayMs: .inf }', /services\[1\]\.dynamicBatching\.maxQueueDelayMs/],
      ['{ preferredBatchSizes: [4, 0] }', /services\[1\]\.dynamicBatching\.preferredBatchSizes\[1\]: .*>=1/],
      ['{ preferredBatchSizes: [8, 4] }', /services\[1\]\.dynamicBatching\.preferredBatchSizes\[1\]: 4 is not above 8 \(list the sizes ascending, each once\)/],
      ['{ preferredBatchSizes: [4, 4] }', /services\[1\]\.dynamicBatching\.preferredBatchSizes\[1\]: 4 is not above 4/],
      ['{ preferredBatchSizes: [4, 32] }', /services\[1\]\.dynamicBatching\.preferredBatchSizes\[1\]: 32 exceeds maxBatchSize 16/],
      ['{ maxBatchSize: 8, preferredBatchSizes: [16] }', /services\[1\]\.dynamicBatching\.preferredBatchSizes\[0\]: 16 exceeds maxBatchSize 8/],
      ['{ maxBatch: 8 }', /services\[1\]\.dynamicBatching: unknown field\(s\) 'maxBatch'/],
      ['{ max_batch_size: 8 }', /services\[1\]\.dynamicBatching: unknown field\(s\) 'max_batch_size' \(config keys are camelCase: 'maxBatchSize'\?\)/],
      ['yes', /services\[1\]\.dynamicBatching: must be false \(off\), true \(on with the defaults\), or \{ maxBatchSize, maxQueueDelayMs, preferredBatchSizes \}/],
      ['16', /services\[1\]\.dynamicBatching: must be false/],
    ];
    for (const [i, [value, re]] of cases.entries()) {
      const f = write(`batching${i}.yaml`, head + value);
      await expect(loadServingConfig(f), value).rejects.toThrow(re);
      await expect(loadServingConfig(f)).rejects.toThrow(`${f}: services[1].dynamicBatching`);
    }
  });

  it('resolveBatching: on by default where the model can fuse; explicit on a model that cannot is an error naming the field; only defaulted, it is off with the reason', () => {
    const c = parse(service(), service(false), service({ maxBatchSize: 4 }), service(true));
    expect(resolveBatching(c, 0, dynamicSpec, true)).toEqual({ kind: 'on', limits: DEFAULT_BATCHING });
    expect(resolveBatching(c, 0, dynamicSpec, false)).toEqual({ kind: 'off', by: 'default' });
    expect(resolveBatching(c, 1, dynamicSpec, true)).toEqual({ kind: 'off', by: 'config' });
    expect(resolveBatching(c, 2, dynamicSpec, false)).toEqual({ kind: 'on', limits: { maxBatchSize: 4, maxQueueDelayMs: 0, preferredBatchSizes: [] } });
    // a fixed batch (dim 0 a number) and a batch axis folded into another dim cannot fuse
    expect(resolveBatching(c, 0, fixedSpec, true)).toEqual({ kind: 'off', by: 'model', blocker: 'fixed4 has a fixed batch of 4 (dim 0 of its inputs), so its queries cannot be fused' });
    expect(resolveBatching(c, 0, flatSpec, true)).toMatchObject({ kind: 'off', by: 'model', blocker: expect.stringMatching(/output 'y' of flat has dim 0 batch\*16, not the batch axis 'batch', so its queries cannot be fused/) as string });
    expect(resolveBatching(c, 1, fixedSpec, true)).toEqual({ kind: 'off', by: 'config' });
    expect(() => resolveBatching(c, 2, fixedSpec, true)).toThrow(/^flags: services\[2\]\.dynamicBatching: model resnet50: fixed4 has a fixed batch of 4 \(dim 0 of its inputs\), so its queries cannot be fused \(leave dynamicBatching out or set it to false\)$/);
    expect(() => resolveBatching(c, 3, flatSpec, false)).toThrow(/^flags: services\[3\]\.dynamicBatching: model resnet50: output 'y' of flat/);
    expect(() => resolveBatching(c, 4, dynamicSpec, true)).toThrow(RangeError);
  });
});
