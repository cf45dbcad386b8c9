/**
 * The assembly of `abacus serve` from a serving config: the services (with dynamic batching on
 * by default where the model can fuse, logged per service), the runtime backend the HTTP and
 * gRPC front ends call, its Prometheus metrics, and `openEngine` — which finds or makes the
 * predictor (`ensurePredictor`; profiling may take minutes, so the server listens and reports
 * not ready meanwhile), creates the controller and opens the device. Listening is the caller's
 * (`serve/server.ts` `startServer`).
 */
import { InvalidConfigError } from '../errors.ts';
import type { Logger } from '../log.ts';
import { ModelRepository } from '../model/repository.ts';
import { maxQosMsOf, type ServingConfig } from '../runtime/config.ts';
import { createController, isPolicyName, parseControllerParams, POLICY_NAMES, policyNeedsPredictor } from '../schedule/index.ts';
import { RuntimeBackend, type BackendEngine, type ServedModel } from '../serve/backend.ts';
import { ServeMetrics } from '../serve/metrics.ts';
import { formatArrivalSpec } from '../workload/arrival-spec.ts';
import type { DeploymentContext } from './context.ts';
import { ensurePredictor, openEnv, resolveServices, type Hosted } from './services.ts';

/** Options of `assembleServing`. */
export interface ServingOptions {
  readonly logger: Logger;
  /** `ServerMetadata.version`. */
  readonly serverVersion: string;
  /** Seed of the simulated device's noise (sim devices only). */
  readonly seed: number;
  /** A predictor file (else the config's, else one profiled and cached). */
  readonly predictorFile?: string;
  /** Serve models the predictor file was not trained on (scored by their features). */
  readonly allowUnseen?: boolean;
  /** Groups profiled when no predictor is cached. */
  readonly profileSamples?: number;
  /** onnxruntime intra-op threads per executor (ort). */
  readonly threads?: number;
}

/** What `startServer` needs: the backend, its metrics and the engine opener; and the resolved services. */
export interface ServingAssembly {
  readonly hosted: Hosted;
  readonly backend: RuntimeBackend;
  readonly metrics: ServeMetrics;
  readonly openEngine: () => Promise<BackendEngine>;
}

/**
 * Check the config's policy, resolve its services (building zoo models on first use) and
 * prepare the backend; the predictor and the device are opened by `openEngine`.
 * @throws InvalidConfigError naming the file and field for an unknown policy, bad policy
 *   parameters, or a bad service (model, batch sizes, sequence lengths, dynamic batching).
 */
export async function assembleServing(ctx: DeploymentContext, config: ServingConfig, options: ServingOptions): Promise<ServingAssembly> {
  if (!isPolicyName(config.policy.name)) throw new InvalidConfigError(`${config.source}: policy: unknown policy '${config.policy.name}' (valid: ${POLICY_NAMES.join(', ')})`);
  try {
    parseControllerParams(config.policy.name, config.policy.params);
  } catch (err) {
    if (err instanceof RangeError || err instanceof TypeError) throw new InvalidConfigError(`${config.source}: policy: ${err.message}`, { cause: err });
    throw err;
  }
  const { logger } = options;
  for (const w of config.warnings) logger.warn(w);
  if (config.device.startsWith('sim') && config.executorMemoryLimitMb !== undefined) logger.warn({ executorMemoryLimitMb: config.executorMemoryLimitMb }, 'executorMemoryLimitMb applies to ort executors; a simulated device has none, so it is ignored');
  if (config.arrivals !== undefined) logger.info({ arrivals: formatArrivalSpec(config.arrivals) }, 'arrivals is read by bench and simulate; serve answers the load its clients send');
  const repo = new ModelRepository(ctx.cacheOptions());
  const hosted = await resolveServices(ctx, repo, config, { batchingByDefault: true });
  for (const [service, b] of hosted.batching ?? []) {
    if (b.kind === 'on') {
      logger.info({ service, ...b.limits }, 'dynamic batching on');
      const qosTargetMs = hosted.services.find((s) => s.name === service)?.qosTargetMs ?? Infinity;
      if (config.policy.name === 'triton' && b.limits.maxQueueDelayMs >= qosTargetMs) {
        logger.warn({ service, maxQueueDelayMs: b.limits.maxQueueDelayMs, qosTargetMs }, 'maxQueueDelayMs is not below the QoS target: a batch that does not fill waits past every deadline in it');
      }
    } else if (b.by === 'model') logger.info({ service, reason: b.blocker }, 'dynamic batching off: the model cannot batch');
    else logger.info({ service }, b.by === 'config' ? 'dynamic batching off (dynamicBatching: false)' : 'dynamic batching off');
  }
  const models: ServedModel[] = hosted.services.map((s) => {
    const c = config.services.find((x) => x.name === s.name)!;
    return { name: s.name, spec: s.spec, qosTargetMs: s.qosTargetMs, maxQosMs: maxQosMsOf(c), batchSizes: s.batchSizes, maxQueueLength: s.maxQueueLength, ...(s.batching === undefined ? {} : { batching: s.batching }) };
  });
  const metrics = new ServeMetrics({ models: models.map((m) => m.name), qosTargetsMs: models.map((m) => m.qosTargetMs) });
  const backend = new RuntimeBackend({ models, platform: hosted.isSim ? 'abacus_sim' : 'onnxruntime_onnx', logger, metrics, serverVersion: options.serverVersion });
  const openEngine = async (): Promise<BackendEngine> => {
    const file = options.predictorFile ?? config.predictor;
    const predictor = policyNeedsPredictor(config.policy.name)
      ? (
          await ensurePredictor(ctx, repo, hosted, {
            ...(file === undefined ? {} : { file, fromConfig: options.predictorFile === undefined }),
            ...(options.allowUnseen === true ? { allowUnseen: true } : {}),
            ...(options.profileSamples === undefined ? {} : { samples: options.profileSamples }),
            ...(options.threads === undefined ? {} : { threads: options.threads }),
          })
        ).predictor
      : undefined;
    const controller = createController(config.policy.name, config.policy.params, predictor, { logger });
    const env = await openEnv(hosted, predictor, { virtual: false, seed: options.seed, ...(options.threads === undefined ? {} : { threads: options.threads }) });
    const opened = await env.open();
    return {
      clock: opened.clock,
      device: opened.device,
      controller,
      close: async () => {
        await opened.release();
        await env.close();
      },
    };
  };
  return { hosted, backend, metrics, openEngine };
}
