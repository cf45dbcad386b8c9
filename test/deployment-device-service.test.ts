import { describe, expect, it } from 'vitest';
import { deviceServiceOf, type Hosted } from '../src/deployment/services.ts';
import type { ModelArtifact } from '../src/model/artifact.ts';
import type { ExperimentService } from '../src/runtime/experiment.ts';

// `abacus serve` loads each service alone (containment) through `deviceServiceOf`: the shapes it
// serves must reach the device there too, or ort warms up only at batch 1 (docs/benchmarks.md, warm-up).
describe('deviceServiceOf', () => {
  const artifact = { spec: { name: 'bert-small' } } as unknown as ModelArtifact;
  const hosted = {
    config: { services: [{ name: 'qa', model: 'bert-small' }, { name: 'img', model: 'resnet50-small' }] },
    artifacts: new Map([['bert-small', artifact], ['resnet50-small', { spec: { name: 'resnet50-small' } } as unknown as ModelArtifact]]),
  } as unknown as Hosted;

  it('carries the model of the service and every batch size × sequence length it serves as warm-up shapes', () => {
    const s = { name: 'qa', batchSizes: [1, 4], seqLens: [16, 64] } as unknown as ExperimentService;
    const d = deviceServiceOf(hosted, s);
    expect(d.name).toBe('qa');
    expect(d.model).toBe(artifact);
    expect(d.warmupShapes).toEqual([
      { batchSize: 1, seqLen: 16 },
      { batchSize: 1, seqLen: 64 },
      { batchSize: 4, seqLen: 16 },
      { batchSize: 4, seqLen: 64 },
    ]);
  });

  it('uses sequence length 0 (the model default) for a model without a sequence axis', () => {
    const s = { name: 'img', batchSizes: [1, 2, 8] } as unknown as ExperimentService;
    expect(deviceServiceOf(hosted, s).warmupShapes).toEqual([
      { batchSize: 1, seqLen: 0 },
      { batchSize: 2, seqLen: 0 },
      { batchSize: 8, seqLen: 0 },
    ]);
  });
});
