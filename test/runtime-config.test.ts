import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadServingConfig, maxQosMsOf, parseServingConfig } from '../src/runtime/config.ts';

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

  it("maps DESIGN.md's snake-case policy parameters to the controllers' names", () => {
    const c = parseServingConfig({ device: 'sim:a100', policy: { name: 'abacus', slack_ms: 3, ways: 4 }, services: [{ model: 'resnet50', qosTargetMs: 20 }] }, 'flags');
    expect(c.policy).toEqual({ name: 'abacus', params: { slackMs: 3, ways: 4 } });
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
      ['device: sim:a100\nservices:\n  - model: resnet50\n    qosTargetMs: 5\n  - model: resnet50\n    qosTargetMs: 5', /services\[1\]\.name: 'resnet50' is used twice/],
      ['services:\n  - model: resnet50\n    qosTargetMs: 5', /device/],
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
