/**
 * TLS and bearer tokens for the gRPC front end (docs/tls.md).
 *
 * - `grpcServerCredentials`: SSL credentials from the PEM material (client certificates
 *   required and checked against `ca` when it is given), plain text without it.
 * - `bearerAuthInterceptor`: a grpc-js server interceptor (grpc-js ≥ 1.10) that answers every
 *   call whose `authorization` metadata is not `Bearer <token>` with UNAUTHENTICATED before
 *   its handler runs, whatever the method's kind (unary or streaming), except the methods in
 *   `open` (the health probes by default). Installed in the server's options, it covers every
 *   method of every service added to the server, so a new handler needs nothing of its own.
 */
import * as grpc from '@grpc/grpc-js';
import { authFailureMessage, bearerTokenMatches, OPEN_GRPC_METHODS, type TlsMaterial } from '../security.ts';

/** The credentials to bind with: SSL for `tls` (mutual TLS when it has a CA), else insecure. */
export function grpcServerCredentials(tls: TlsMaterial | undefined): grpc.ServerCredentials {
  if (tls === undefined) return grpc.ServerCredentials.createInsecure();
  return grpc.ServerCredentials.createSsl(tls.ca ?? null, [{ private_key: tls.key, cert_chain: tls.cert }], tls.ca !== undefined);
}

/** The method name of a gRPC path (`/inference.GRPCInferenceService/ServerLive` → `ServerLive`). */
function methodName(path: string): string {
  return path.slice(path.lastIndexOf('/') + 1);
}

/**
 * A server interceptor requiring `authorization: Bearer <token>` metadata on every call but the
 * methods named in `open`; the others get UNAUTHENTICATED with the reason in `details`, once,
 * and their handler never runs. The token is compared in constant time (`bearerTokenMatches`).
 * @param open method names (without the service) answered without a token [`OPEN_GRPC_METHODS`].
 */
export function bearerAuthInterceptor(token: string, open: readonly string[] = OPEN_GRPC_METHODS): grpc.ServerInterceptor {
  return (method, call) => {
    if (open.includes(methodName(method.path))) return new grpc.ServerInterceptingCall(call);
    const listener = new grpc.ServerListenerBuilder()
      .withOnReceiveMetadata((metadata, next) => {
        const values = metadata.get('authorization');
        const header = values.length === 1 && typeof values[0] === 'string' ? values[0] : undefined;
        if (bearerTokenMatches(header, token)) {
          next(metadata);
          return;
        }
        call.sendStatus({ code: grpc.status.UNAUTHENTICATED, details: values.length > 1 ? 'authentication failed: more than one authorization value' : authFailureMessage(header), metadata: new grpc.Metadata() });
      })
      .build();
    return new grpc.ServerInterceptingCall(call, { start: (next) => next(listener) });
  };
}
