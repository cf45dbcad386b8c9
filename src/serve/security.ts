/**
 * TLS material and the bearer token of `abacus serve` (`--tls-cert`, `--tls-key`, `--tls-ca`,
 * `--auth-token-file`; docs/tls.md): read and checked once at
 * start, before any model is built, so a wrong file fails the command at once with a message
 * naming the flag and the file. The HTTP front end (`http/app.ts`) serves HTTPS with it, the
 * gRPC front end (`grpc/auth.ts`) SSL credentials and a server interceptor.
 *
 * Which requests are open without a token: the health probes only (`OPEN_HTTP_ROUTES`,
 * `OPEN_GRPC_METHODS`); everything else, `/metrics` and the dashboard included, needs
 * `Authorization: Bearer <token>`.
 */
import { createHash, createPrivateKey, timingSafeEqual, X509Certificate } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { InvalidConfigError } from '../errors.ts';

/** PEM contents for a TLS listener. */
export interface TlsMaterial {
  /** Certificate chain, PEM (the server's certificate first). */
  readonly cert: Buffer;
  /** Private key of the certificate, PEM. */
  readonly key: Buffer;
  /** CA certificates, PEM: when given, clients must present a certificate signed by one of them (mutual TLS). */
  readonly ca?: Buffer;
}

/** The files as given on the command line; every field optional (the flags are). */
export interface TlsFiles {
  readonly cert?: string;
  readonly key?: string;
  readonly ca?: string;
}

/** What `abacus serve` secures; both parts optional and independent. */
export interface ServeSecurity {
  readonly tls?: TlsMaterial;
  /** The bearer token clients must send (`Authorization: Bearer <token>`); absent: no authentication. */
  readonly authToken?: string;
}

/** HTTP routes (fastify route patterns) answered without a token: the health probes of the KServe v2 spec. */
export const OPEN_HTTP_ROUTES: readonly string[] = ['/v2/health/live', '/v2/health/ready'];

/** gRPC methods of `inference.GRPCInferenceService` answered without a token: the health probes. */
export const OPEN_GRPC_METHODS: readonly string[] = ['ServerLive', 'ServerReady'];

/**
 * Characters of a bearer token (RFC 6750 §2.1 `b64token`): what a client can put in an
 * `Authorization` header or gRPC metadata as it is.
 */
const B64TOKEN = /^[A-Za-z0-9\-._~+/]+=*$/;

/** `Bearer <token>` (scheme case-insensitive, RFC 9110 §11.1); group 1 is the token. */
const BEARER = /^Bearer +([^\s]+) *$/i;

function readFlagFile(flag: string, file: string): Buffer {
  try {
    return readFileSync(file);
  } catch (err) {
    const reason = err instanceof Error && 'code' in err && typeof err.code === 'string' ? err.code : err instanceof Error ? err.message : String(err);
    throw new InvalidConfigError(`${flag} ${file}: cannot read the file (${reason})`, { cause: err });
  }
}

/** The PEM certificates in `pem` (one or more `BEGIN CERTIFICATE` blocks). */
function pemCertificates(pem: string): string[] {
  return pem.match(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g) ?? [];
}

/**
 * Parse every certificate of a PEM file.
 * @throws InvalidConfigError naming the flag and file when there is none or one does not parse.
 */
function checkCertificates(flag: string, file: string, pem: Buffer): X509Certificate[] {
  const blocks = pemCertificates(pem.toString('utf8'));
  if (blocks.length === 0) throw new InvalidConfigError(`${flag} ${file}: no PEM certificate in the file (expected a -----BEGIN CERTIFICATE----- block)`);
  return blocks.map((block, i) => {
    try {
      return new X509Certificate(block);
    } catch (err) {
      throw new InvalidConfigError(`${flag} ${file}: certificate ${i + 1} is not a valid X.509 certificate (${err instanceof Error ? err.message : String(err)})`, { cause: err });
    }
  });
}

/**
 * Read and check the TLS files: certificate and key both or neither; each file readable PEM;
 * the key the certificate's. Undefined when no TLS flag is given.
 * @throws InvalidConfigError when only one of `--tls-cert` / `--tls-key` is given, or `--tls-ca`
 *   without them; naming the flag and file for an unreadable file, a file without a
 *   valid PEM certificate or key, or a key that does not belong to the certificate.
 */
export function loadTlsMaterial(files: TlsFiles): TlsMaterial | undefined {
  if (files.cert === undefined && files.key === undefined) {
    if (files.ca !== undefined) throw new InvalidConfigError('--tls-ca needs --tls-cert and --tls-key (client certificates are checked by a TLS server)');
    return undefined;
  }
  if (files.cert === undefined) throw new InvalidConfigError('--tls-key needs --tls-cert (give both, or neither for plain text)');
  if (files.key === undefined) throw new InvalidConfigError('--tls-cert needs --tls-key (give both, or neither for plain text)');
  const cert = readFlagFile('--tls-cert', files.cert);
  const key = readFlagFile('--tls-key', files.key);
  const leaf = checkCertificates('--tls-cert', files.cert, cert)[0]!;
  let privateKey;
  try {
    privateKey = createPrivateKey(key);
  } catch (err) {
    throw new InvalidConfigError(`--tls-key ${files.key}: not a valid PEM private key (${err instanceof Error ? err.message : String(err)})`, { cause: err });
  }
  if (!leaf.checkPrivateKey(privateKey)) throw new InvalidConfigError(`--tls-key ${files.key}: the key does not belong to the certificate of --tls-cert ${files.cert}`);
  if (files.ca === undefined) return { cert, key };
  const ca = readFlagFile('--tls-ca', files.ca);
  checkCertificates('--tls-ca', files.ca, ca);
  return { cert, key, ca };
}

/**
 * CA certificates (PEM) a client checks a server's certificate against (`abacus bench --target
 * grpcs://… --tls-ca FILE`).
 * @throws InvalidConfigError naming the flag and file when it cannot be read or holds no valid certificate.
 */
export function readCaFile(file: string, flag = '--tls-ca'): Buffer {
  const pem = readFlagFile(flag, file);
  checkCertificates(flag, file, pem);
  return pem;
}

/**
 * The token of `--auth-token-file`: the file's content without leading and trailing whitespace.
 * @throws InvalidConfigError naming the flag and file when it cannot be read, is empty, or holds
 *   characters a bearer token cannot carry (RFC 6750 §2.1: letters, digits, `-._~+/`, trailing `=`).
 */
export function readAuthToken(file: string): string {
  const token = readFlagFile('--auth-token-file', file).toString('utf8').trim();
  if (token === '') throw new InvalidConfigError(`--auth-token-file ${file}: the file is empty; it must hold the token clients send as "Authorization: Bearer <token>"`);
  if (!B64TOKEN.test(token)) throw new InvalidConfigError(`--auth-token-file ${file}: the token may hold only letters, digits, '-', '.', '_', '~', '+', '/' and trailing '=' (RFC 6750 bearer token syntax); it has other characters (whitespace inside it, quotes, …)`);
  return token;
}

/**
 * Whether `header` (an `Authorization` header or gRPC `authorization` metadata value) is
 * `Bearer <token>` with this token. The tokens are compared as SHA-256 digests with
 * `crypto.timingSafeEqual`, so the time taken tells nothing about the token (its length included).
 */
export function bearerTokenMatches(header: string | undefined, token: string): boolean {
  const given = header === undefined ? undefined : BEARER.exec(header)?.[1];
  const digest = (s: string): Buffer => createHash('sha256').update(s, 'utf8').digest();
  const same = timingSafeEqual(digest(given ?? ''), digest(token));
  return given !== undefined && same;
}

/**
 * Why a request without the right token is refused: the message of the 401 / UNAUTHENTICATED answer.
 * @param header the request's `Authorization` value, as received.
 */
export function authFailureMessage(header: string | undefined): string {
  if (header === undefined || header === '') return 'authentication required: send "Authorization: Bearer <token>" (the token of the server\'s --auth-token-file)';
  if (!BEARER.test(header)) return 'authentication required: the Authorization header is not "Bearer <token>"';
  return 'authentication failed: the bearer token is not the server\'s';
}

/**
 * The `WWW-Authenticate` value of a 401 (RFC 6750 §3): `Bearer` when no token came,
 * `Bearer error="invalid_token"` when one came and was not the server's (or was malformed).
 */
export function authChallenge(header: string | undefined): string {
  return header === undefined || header === '' ? 'Bearer' : 'Bearer error="invalid_token"';
}
