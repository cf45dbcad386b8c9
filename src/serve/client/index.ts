/**
 * Inference clients (`client.ts` for the shared shape). `createInferenceClient` picks the
 * protocol from the target URL: `http://` / `https://` → `HttpInferenceClient`, `grpc://` /
 * `grpcs://` → `GrpcInferenceClient`.
 */
import type { InferenceClient } from './client.ts';
import { GrpcInferenceClient } from './grpc-client.ts';
import { HttpInferenceClient } from './http-client.ts';

export * from './client.ts';
export { GrpcInferenceClient, type GrpcInferenceClientOptions } from './grpc-client.ts';
export { HttpInferenceClient, type HttpInferenceClientOptions } from './http-client.ts';

/**
 * A client for `target` (`http://HOST:PORT`, `https://…`, `grpc://HOST:PORT` or
 * `grpcs://HOST:PORT` for gRPC over TLS); `authToken`: a bearer token sent on every call;
 * `tlsCa`: the CA certificates (PEM) a `grpcs://` server's certificate must chain to (for
 * `https://`, Node reads extra CAs from `NODE_EXTRA_CA_CERTS`).
 * @throws TypeError for another scheme or a malformed URL.
 */
export function createInferenceClient(target: string, options: { timeoutMs?: number; authToken?: string; tlsCa?: Buffer } = {}): InferenceClient {
  let url: URL;
  try {
    url = new URL(target);
  } catch {
    throw new TypeError(`target must be http://HOST:PORT or grpc://HOST:PORT, got '${target}'`);
  }
  const common = { ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}), ...(options.authToken !== undefined ? { authToken: options.authToken } : {}) };
  if (url.protocol === 'http:' || url.protocol === 'https:') return new HttpInferenceClient(target, common);
  if (url.protocol === 'grpc:' || url.protocol === 'grpcs:') {
    if (url.port === '' || url.hostname === '') throw new TypeError(`target ${target} needs a host and a port (${url.protocol}//HOST:PORT)`);
    return new GrpcInferenceClient(target, { ...common, ...(options.tlsCa !== undefined ? { tlsCa: options.tlsCa } : {}) });
  }
  throw new TypeError(`target must be http://HOST:PORT, https://HOST:PORT, grpc://HOST:PORT or grpcs://HOST:PORT, got '${target}'`);
}
