/**
 * gRPC calls with an optional bearer token, for the TLS and token tests: a raw grpc-js client
 * of `inference.GRPCInferenceService`, a unary call that sends `authorization: Bearer <token>`
 * when a token is given, and the status code a call ended with.
 */
import * as grpc from '@grpc/grpc-js';

export type RawClient = grpc.Client & Record<string, (req: unknown, metadata: grpc.Metadata, options: grpc.CallOptions, cb: (e: grpc.ServiceError | null, r: unknown) => void) => grpc.ClientUnaryCall>;

/** Call `method` with `request`, sending `token` as a bearer token when given; a deadline of `deadlineMs`. */
export function rawCall(client: RawClient, method: string, request: unknown, token?: string, deadlineMs = 20_000): Promise<unknown> {
  const metadata = new grpc.Metadata();
  if (token !== undefined) metadata.set('authorization', `Bearer ${token}`);
  return new Promise((resolve, reject) => {
    client[method]!(request, metadata, { deadline: Date.now() + deadlineMs }, (e, r) => (e !== null ? reject(e) : resolve(r)));
  });
}

/** The status code the call ended with (OK when it succeeded). */
export async function grpcCode(promise: Promise<unknown>): Promise<number> {
  try {
    await promise;
  } catch (e) {
    return (e as grpc.ServiceError).code;
  }
  return grpc.status.OK;
}
