/**
 * The manifests under deploy/kubernetes/: core kinds validated with kubernetes-models (the
 * Kubernetes OpenAPI schemas), KServe and KEDA resources against the fields their projects
 * define, and every port, path, flag and metric checked against the server itself: container
 * args parse with the CLI's `serve` command (commander), probe and scrape paths are routes of
 * the HTTP front end, the ConfigMap's config parses with the project's config schema, and the
 * autoscaling queries name metrics `/metrics` exports.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Command } from 'commander';
import { Deployment } from 'kubernetes-models/apps/v1';
import { ConfigMap, Container, Service, Volume } from 'kubernetes-models/v1';
import { describe, expect, it } from 'vitest';
import { parseAllDocuments } from 'yaml';
import { buildProgram } from '../../src/cli/main.ts';
import type { ServeCliOptions } from '../../src/cli/serve.ts';
import { loadServingConfig } from '../../src/runtime/config.ts';
import { createHttpApp } from '../../src/serve/http/app.ts';
import type { InferenceBackend } from '../../src/serve/inference.ts';
import { ServeMetrics } from '../../src/serve/metrics.ts';

const DIR = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'deploy', 'kubernetes');

type Obj = Record<string, unknown> & { apiVersion: string; kind: string; spec?: unknown; data?: unknown; metadata: { name: string; labels?: Record<string, string>; annotations?: Record<string, string> } };

function load(file: string): Obj[] {
  return parseAllDocuments(fs.readFileSync(path.join(DIR, file), 'utf8')).map((d) => {
    expect(d.errors, file).toEqual([]);
    return d.toJS() as Obj;
  });
}
function only(file: string, kind: string): Obj {
  const docs = load(file).filter((d) => d.kind === kind);
  expect(docs, `${file}: one ${kind}`).toHaveLength(1);
  return docs[0]!;
}

/** Parse `abacus serve <args>` with the CLI's own program, capturing the options instead of serving. */
async function parseServe(args: readonly string[]): Promise<ServeCliOptions> {
  const program = buildProgram({ out: () => undefined, err: () => undefined, cacheOptions: () => ({}) });
  let captured: ServeCliOptions | undefined;
  program.commands.find((c: Command) => c.name() === 'serve')!.action((opts: ServeCliOptions) => {
    captured = opts;
  });
  await program.parseAsync(['serve', ...args], { from: 'user' });
  return captured!;
}

const app = createHttpApp({} as InferenceBackend, { metrics: new ServeMetrics({ models: ['m'], processMetrics: false }) });
const isRoute = (p: string): boolean => app.hasRoute({ method: 'GET', url: p });

interface ProbeLike {
  httpGet?: { path?: string; port?: number | string };
  periodSeconds?: number;
  failureThreshold?: number;
}

/** Check a container's probes and ports against the server the args start. */
async function checkContainer(c: { args?: string[]; ports?: { name?: string; containerPort: number }[]; startupProbe?: ProbeLike; readinessProbe?: ProbeLike; livenessProbe?: ProbeLike; volumeMounts?: { name: string; mountPath: string }[] }): Promise<ServeCliOptions> {
  const opts = await parseServe(c.args ?? []);
  expect(opts.host).toBe('0.0.0.0');
  const portOf = (p: number | string | undefined): number | undefined => (typeof p === 'number' ? p : c.ports?.find((x) => x.name === p)?.containerPort);
  expect(c.readinessProbe?.httpGet?.path).toBe('/v2/health/ready');
  expect(c.livenessProbe?.httpGet?.path).toBe('/v2/health/live');
  expect(c.startupProbe?.httpGet?.path).toBe('/v2/health/ready');
  for (const probe of [c.readinessProbe, c.livenessProbe, c.startupProbe]) {
    expect(isRoute(probe!.httpGet!.path!)).toBe(true);
    expect(portOf(probe!.httpGet!.port)).toBe(opts.httpPort);
  }
  // long enough for a first start that profiles (docs/serving.md: 7.7 min on a busy 2-core machine)
  expect((c.startupProbe!.periodSeconds ?? 10) * (c.startupProbe!.failureThreshold ?? 3)).toBeGreaterThanOrEqual(600);
  expect(c.ports?.some((p) => p.containerPort === opts.httpPort)).toBe(true);
  // the --config file is where a volume puts it
  expect(c.volumeMounts?.some((m) => opts.config.startsWith(`${m.mountPath}/`))).toBe(true);
  return opts;
}

describe('deploy/kubernetes', () => {
  const cm = only('configmap.yaml', 'ConfigMap');
  const deployment = only('deployment.yaml', 'Deployment');
  const service = only('service.yaml', 'Service');
  const scaled = only('keda-scaledobject.yaml', 'ScaledObject');

  it('validates against the Kubernetes schemas (kubernetes-models)', () => {
    expect(() => new ConfigMap(cm as never).validate()).not.toThrow();
    expect(() => new Deployment(deployment as never).validate()).not.toThrow();
    expect(() => new Service(service as never).validate()).not.toThrow();
    // and the validation can fail
    expect(() => new Deployment({ ...deployment, spec: { ...(deployment['spec'] as object), replicas: 'two' } } as never).validate()).toThrow(/replicas/);
  });

  it('the ConfigMap holds a serving config the server accepts, mounted where --config points', async () => {
    const data = (cm as { data: Record<string, string> }).data;
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'abacus-k8s-'));
    try {
      const file = path.join(tmp, 'serving.yaml');
      fs.writeFileSync(file, data['serving.yaml']!);
      const config = await loadServingConfig(file);
      expect(config.services.length).toBeGreaterThan(0);
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
    const pod = (deployment as { spec: { template: { spec: { containers: { args: string[]; volumeMounts: { name: string; mountPath: string }[] }[]; volumes: { name: string; configMap?: { name: string } }[] } } } }).spec.template.spec;
    const opts = await parseServe(pod.containers[0]!.args);
    const mount = pod.containers[0]!.volumeMounts.find((m) => opts.config.startsWith(`${m.mountPath}/`))!;
    expect(pod.volumes.find((v) => v.name === mount.name)?.configMap?.name).toBe(cm.metadata.name);
    expect(Object.keys(data)).toContain(path.basename(opts.config));
  });

  it('Deployment: args parse with `abacus serve`; probes, ports and scrape annotations exist in the server', async () => {
    const spec = (deployment as { spec: { selector: { matchLabels: Record<string, string> }; template: { metadata: { labels: Record<string, string>; annotations: Record<string, string> }; spec: { containers: Parameters<typeof checkContainer>[0][]; terminationGracePeriodSeconds: number } } } }).spec;
    const c = spec.template.spec.containers[0]!;
    const opts = await checkContainer(c);
    expect(c.ports?.find((p) => p.name === 'grpc')?.containerPort).toBe(opts.grpcPort);
    expect(opts.grpc).toBe(true);
    expect(spec.template.spec.terminationGracePeriodSeconds * 1000).toBeGreaterThan(opts.graceMs);
    const ann = spec.template.metadata.annotations;
    expect(ann['prometheus.io/scrape']).toBe('true');
    expect(Number(ann['prometheus.io/port'])).toBe(opts.httpPort);
    expect(isRoute(ann['prometheus.io/path']!)).toBe(true);
    expect(spec.template.metadata.labels).toMatchObject(spec.selector.matchLabels);
    const resources = (c as { resources?: { requests?: Record<string, string> } }).resources;
    expect(Object.keys(resources?.requests ?? {})).toEqual(expect.arrayContaining(['cpu', 'memory']));
  });

  it('Service: HTTP and gRPC to the named container ports, selecting the pods', () => {
    const spec = (service as { spec: { selector: Record<string, string>; ports: { name: string; targetPort: string; appProtocol?: string }[] } }).spec;
    const pod = (deployment as { spec: { template: { metadata: { labels: Record<string, string> }; spec: { containers: { ports: { name: string }[] }[] } } } }).spec.template;
    expect(pod.metadata.labels).toMatchObject(spec.selector);
    const named = pod.spec.containers[0]!.ports.map((p) => p.name);
    expect(spec.ports.map((p) => p.targetPort).sort()).toEqual(['grpc', 'http']);
    for (const p of spec.ports) expect(named).toContain(p.targetPort);
    expect(spec.ports.find((p) => p.name === 'grpc')?.appProtocol).toBe('kubernetes.io/h2c');
  });

  it('KEDA ScaledObject: KEDA\'s fields, scales the Deployment on metrics /metrics exports', async () => {
    expect(scaled.apiVersion).toBe('keda.sh/v1alpha1');
    // fields of the ScaledObject spec (keda.sh/docs/latest/reference/scaledobject-spec)
    const SPEC_FIELDS = ['scaleTargetRef', 'pollingInterval', 'cooldownPeriod', 'initialCooldownPeriod', 'idleReplicaCount', 'minReplicaCount', 'maxReplicaCount', 'fallback', 'advanced', 'triggers'];
    const spec = scaled['spec'] as { scaleTargetRef: { kind: string; name: string }; minReplicaCount: number; maxReplicaCount: number; triggers: { type: string; metricType?: string; metadata: Record<string, string> }[] };
    for (const k of Object.keys(spec)) expect(SPEC_FIELDS, k).toContain(k);
    expect(spec.scaleTargetRef).toMatchObject({ kind: 'Deployment', name: deployment.metadata.name });
    expect(spec.minReplicaCount).toBeLessThanOrEqual(spec.maxReplicaCount);
    const exported = await new ServeMetrics({ models: ['m'], processMetrics: false }).text();
    expect(spec.triggers.length).toBeGreaterThanOrEqual(1);
    for (const t of spec.triggers) {
      expect(t.type).toBe('prometheus');
      expect(['AverageValue', 'Value', undefined]).toContain(t.metricType);
      expect(Object.keys(t.metadata).sort()).toEqual(['query', 'serverAddress', 'threshold']);
      expect(Number.isFinite(Number(t.metadata['threshold']))).toBe(true);
      const names = [...t.metadata['query']!.matchAll(/\b(abacus_[a-z_]+)\b/g)].map((m) => m[1]!);
      expect(names.length).toBeGreaterThan(0);
      for (const n of names) expect(exported, n).toContain(`# TYPE ${n} gauge`);
    }
  });

  it('kustomization.yaml lists exactly the manifests of the folder', () => {
    const k = load('kustomization.yaml')[0] as unknown as { resources: string[] };
    const files = fs.readdirSync(DIR).filter((f) => f.endsWith('.yaml') && f !== 'kustomization.yaml');
    expect([...k.resources].sort()).toEqual(files.sort());
  });
});

describe('deploy/kubernetes/kserve', () => {
  const runtime = only('kserve/servingruntime.yaml', 'ServingRuntime');
  const isvc = only('kserve/inferenceservice.yaml', 'InferenceService');

  it('ServingRuntime: KServe\'s fields, a valid container running `abacus serve` on the v2 protocol', async () => {
    expect(runtime.apiVersion).toBe('serving.kserve.io/v1alpha1');
    // JSON fields of ServingRuntimeSpec + ServingRuntimePodSpec (kserve/kserve pkg/apis/serving/v1alpha1/servingruntime_types.go)
    const FIELDS = ['supportedModelFormats', 'multiModel', 'disabled', 'protocolVersions', 'workerSpec', 'containers', 'volumes', 'nodeSelector', 'affinity', 'tolerations', 'labels', 'annotations', 'imagePullSecrets', 'hostIPC', 'grpcEndpoint', 'grpcDataEndpoint', 'httpDataEndpoint', 'replicas', 'storageHelper', 'builtInAdapter'];
    const spec = runtime['spec'] as { supportedModelFormats: { name: string; version?: string }[]; protocolVersions: string[]; annotations: Record<string, string>; containers: Record<string, unknown>[]; volumes: Record<string, unknown>[] };
    for (const k of Object.keys(spec)) expect(FIELDS, k).toContain(k);
    // InferenceServiceProtocol values (kserve pkg/constants): v1, v2, grpc-v1, grpc-v2
    for (const p of spec.protocolVersions) expect(['v1', 'v2', 'grpc-v1', 'grpc-v2']).toContain(p);
    expect(spec.protocolVersions).toContain('v2');
    for (const f of spec.supportedModelFormats) for (const k of Object.keys(f)) expect(['name', 'version', 'autoSelect', 'priority']).toContain(k);
    for (const c of spec.containers) expect(() => new Container(c as never).validate()).not.toThrow();
    for (const v of spec.volumes) expect(() => new Volume(v as never).validate()).not.toThrow();
    const c = spec.containers[0] as Parameters<typeof checkContainer>[0] & { name: string };
    // KServe's single-model runtimes serve REST on the container's port 8080 (its own runtimes pass --http-port=8080)
    expect(c.name).toBe('kserve-container');
    const opts = await checkContainer(c);
    expect(opts.httpPort).toBe(8080);
    expect(Number(spec.annotations['prometheus.io/port'])).toBe(opts.httpPort);
    expect(isRoute(spec.annotations['prometheus.io/path']!)).toBe(true);
    const configVolume = spec.volumes.find((v) => v['name'] === c.volumeMounts!.find((m) => opts.config.startsWith(`${m.mountPath}/`))!.name) as { configMap?: { name: string } };
    expect(configVolume.configMap?.name).toBe(only('configmap.yaml', 'ConfigMap').metadata.name);
  });

  it('InferenceService: selects this runtime by name and model format, with a protocol it lists', () => {
    expect(isvc.apiVersion).toBe('serving.kserve.io/v1beta1');
    const predictor = (isvc['spec'] as { predictor: { model: { modelFormat: { name: string; version?: string }; runtime: string; protocolVersion?: string }; minReplicas?: number; maxReplicas?: number } }).predictor;
    const spec = runtime['spec'] as { supportedModelFormats: { name: string; version?: string }[]; protocolVersions: string[] };
    expect(predictor.model.runtime).toBe(runtime.metadata.name);
    // KServe matches "mt:<name>[:<version>]" labels (predictor_model.go RuntimeSupportsModel)
    expect(spec.supportedModelFormats.some((f) => f.name === predictor.model.modelFormat.name && (predictor.model.modelFormat.version === undefined || f.version === predictor.model.modelFormat.version))).toBe(true);
    // an unset protocolVersion is v1 (ModelSpec.GetProtocol), which this runtime does not serve
    expect(spec.protocolVersions).toContain(predictor.model.protocolVersion);
    for (const k of Object.keys(predictor.model)) expect(['modelFormat', 'runtime', 'protocolVersion', 'storageUri', 'runtimeVersion', 'args', 'env', 'resources', 'volumeMounts', 'ports']).toContain(k);
    expect(predictor.minReplicas!).toBeLessThanOrEqual(predictor.maxReplicas!);
  });
});
