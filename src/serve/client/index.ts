/**
 * Inference clients (`client.ts` for the shared shape). `createInferenceClient` picks the
 * protocol from the target URL: `http://` / `https://` → `HttpInferenceClient`, `grpc://` →
 * `GrpcInferenceClient`.
 */
import type { InferenceClient } from './client.ts';
import { GrpcInferenceClient } from './grpc-client.ts';
import { HttpInferenceClient } from './http-client.ts';

export * from './client.ts';
export { GrpcInferenceClient, type GrpcInferenceClientOptions } from './grpc-client.ts';
export { HttpInferenceClient, type HttpInferenceClientOptions } from './http-client.ts';

/**
 * A client for `target` (`http://HOST:PORT`, `https://…` or `grpc://HOST:PORT`).
 * @throws TypeError for another scheme or a malformed URL.
 */
export function createInferenceClient(target: string, options: { timeoutMs?: number } = {}): InferenceClient {
  let url: URL;
  try {
    url = new URL(target);
  } catch {
    throw new TypeError(`target must be http://HOST:PORT or grpc://HOST:PORT, got '${target}'`);
  }
  const timeout = options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {};
  if (url.protocol === 'http:' || url.protocol === 'https:') return new HttpInferenceClient(target, timeout);
  if (url.protocol === 'grpc:') {
    if (url.port === '' || url.hostname === '') throw new TypeError(`target ${target} needs a host and a port (grpc://HOST:PORT)`);
    return new GrpcInferenceClient(target, timeout);
  }
  throw new TypeError(`target must be http://HOST:PORT or grpc://HOST:PORT, got '${target}'`);
}
