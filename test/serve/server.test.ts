/**
 * `startServer` (serve/server.ts) in-process: listens before it is ready, wires the gRPC front
 * end through its factory (a fake here), reports ready after warm-up, and shuts everything down.
 */
import { describe, expect, it } from 'vitest';
import { createLogger } from '../../src/log.ts';
import type { InferenceBackend } from '../../src/serve/inference.ts';
import { formatHostPort, startServer, type GrpcInferenceServer } from '../../src/serve/server.ts';
import { simBackend } from './helpers.ts';

describe('startServer', () => {
  it('listens at once (live, not ready), starts gRPC through the factory, is ready after warm-up, shuts down both', async () => {
    const b = await simBackend([{ name: 'r', model: 'resnet50-small' }], { start: false });
    const lines: string[] = [];
    const calls: string[] = [];
    let gate: () => void = () => undefined;
    const engineOpened = new Promise<void>((resolve) => (gate = resolve));
    let grpcBackend: InferenceBackend | undefined;
    const server = await startServer({
      backend: b.backend,
      openEngine: async () => {
        await engineOpened;
        return b.engine;
      },
      logger: createLogger({ defaultLevel: 'silent' }),
      metrics: b.metrics,
      host: '127.0.0.1',
      httpPort: 0,
      maxBodyBytes: 1234,
      grpc: {
        port: 0,
        factory: (backend, options): GrpcInferenceServer => {
          grpcBackend = backend;
          calls.push(`create ${options.maxReceiveMessageBytes}/${options.maxSendMessageBytes}`);
          return {
            listen: (host, port) => {
              calls.push(`listen ${host}:${port}`);
              return Promise.resolve(50051);
            },
            close: (graceMs) => {
              calls.push(`close ${graceMs}`);
              return Promise.resolve();
            },
          };
        },
      },
      announce: (line) => lines.push(line),
    });
    try {
      expect(server.httpUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      expect(server.grpcPort).toBe(50051);
      expect(grpcBackend).toBe(b.backend);
      expect(lines).toEqual([`HTTP listening on ${server.httpUrl}`, 'gRPC listening on 127.0.0.1:50051']);
      const notYet = await fetch(`${server.httpUrl}/v2/health/ready`);
      expect([notYet.status, await notYet.json()]).toEqual([400, { ready: false }]);
      expect((await fetch(`${server.httpUrl}/v2/health/live`)).status).toBe(200);
      gate();
      await server.ready;
      expect(lines[2]).toMatch(/^ready: r \(\d+ ms to load and warm up\)$/);
      expect((await fetch(`${server.httpUrl}/v2/health/ready`)).status).toBe(200);
    } finally {
      await server.shutdown(1000);
    }
    expect(calls).toEqual(['create 1234/1234', 'listen 127.0.0.1:0', 'close 900']);
    expect(b.backend.isLive()).toBe(false);
    await expect(fetch(`${server.httpUrl}/v2/health/live`)).rejects.toThrow();
    expect(await server.shutdown(1000)).toBeUndefined();
  }, 60_000);

  it('a failed start-up rejects ready and shuts the server down', async () => {
    const b = await simBackend([{ name: 'r', model: 'resnet50-small' }], { start: false });
    const server = await startServer({ backend: b.backend, openEngine: () => Promise.reject(new Error('no device here')), logger: createLogger({ defaultLevel: 'silent' }), host: '127.0.0.1', httpPort: 0 });
    await expect(server.ready).rejects.toThrow(/no device here/);
    expect(b.backend.isLive()).toBe(false);
    await b.device.close();
  });

  it('formats IPv6 hosts with brackets', () => {
    expect(formatHostPort('::1', 80)).toBe('[::1]:80');
    expect(formatHostPort('127.0.0.1', 80)).toBe('127.0.0.1:80');
  });

  it('a shutdown while the engine opens (profiling) aborts its signal, waits for it to stop and close what it opened; ready resolves without serving', async () => {
    const b = await simBackend([{ name: 'r', model: 'resnet50-small' }], { start: false });
    const events: string[] = [];
    const server = await startServer({
      backend: b.backend,
      openEngine: (signal) =>
        new Promise((_resolve, reject) => {
          events.push('opening');
          signal.addEventListener('abort', () => {
            // like profiling: stop after the sample in progress, close the profiling device, then fail
            setTimeout(() => {
              events.push('profiling device closed');
              reject(new Error('profiling stopped'));
            }, 50);
          });
        }),
      logger: createLogger({ defaultLevel: 'silent' }),
      host: '127.0.0.1',
      httpPort: 0,
    });
    await server.shutdown(5000);
    events.push('shutdown done');
    await server.ready; // resolves: a stop during start-up is not a failed start-up
    expect(events).toEqual(['opening', 'profiling device closed', 'shutdown done']);
  });
});
