/**
 * The `npm start` demo's two models on this CPU as a benchmark environment: resnet50-demo and
 * bert-demo at batch 1–2 (bert: seq 32–64), QoS 43 / 49 ms (the demo's 4 × solo p50 on the
 * development machine), one intra-op thread per executor, with the demo's predictor (800
 * profiled groups; cached by `npm start`, profiled here otherwise).
 */
import type { DeploymentContext } from '../src/deployment/context.ts';
import { ensurePredictor, openEnv, resolveServices, type Hosted } from '../src/deployment/services.ts';
import type { ModelRepository } from '../src/model/repository.ts';
import type { Predictor } from '../src/predict/predictor.ts';
import { parseServingConfig } from '../src/runtime/config.ts';
import type { ExperimentEnv } from '../src/runtime/experiment.ts';

export async function openDemoOrtEnv(ctx: DeploymentContext, repo: ModelRepository, source: string): Promise<{ hosted: Hosted; predictor: Predictor; env: ExperimentEnv & { close(): Promise<void> } }> {
  const config = parseServingConfig(
    {
      device: 'ort',
      services: [
        { name: 'resnet50-demo', model: 'resnet50-demo', qosTargetMs: 43, batchSizes: [1, 2] },
        { name: 'bert-demo', model: 'bert-demo', qosTargetMs: 49, batchSizes: [1, 2], seqLens: [32, 64] },
      ],
    },
    source,
  );
  const hosted = await resolveServices(ctx, repo, config);
  const { predictor } = await ensurePredictor(ctx, repo, hosted, { threads: 1, samples: 800 });
  const env = await openEnv(hosted, predictor, { virtual: false, seed: 5, threads: 1 });
  return { hosted, predictor, env };
}
