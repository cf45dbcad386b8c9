/**
 * Self-signed certificates made at test time with the `openssl` command (node's crypto makes
 * keys but cannot write X.509 certificates). Tests that need them skip, saying why, on a machine
 * without `openssl`.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/** Whether an `openssl` command runs here. */
export function hasOpenssl(): boolean {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Why TLS tests skip where `openssl` is missing (for `describe.skipIf` titles and a console line). */
export const NO_OPENSSL = 'openssl is not installed: the TLS tests that need a certificate made at test time are skipped';

export interface TestCertificates {
  /** Server certificate (self-signed, CN localhost, SAN IP 127.0.0.1 and DNS localhost), PEM file; clients trust it as their CA. */
  readonly serverCert: string;
  readonly serverKey: string;
  /** A client certificate (self-signed, CN abacus-test-client), PEM file; the server's `--tls-ca` in mutual-TLS tests. */
  readonly clientCert: string;
  readonly clientKey: string;
  /** Another self-signed certificate and key, trusted by nobody. */
  readonly strangerCert: string;
  readonly strangerKey: string;
}

function selfSigned(dir: string, name: string, cn: string, san?: string): void {
  execFileSync(
    'openssl',
    ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2', '-subj', `/CN=${cn}`, ...(san === undefined ? [] : ['-addext', `subjectAltName=${san}`]), '-keyout', path.join(dir, `${name}.key`), '-out', path.join(dir, `${name}.crt`)],
    { stdio: 'ignore' },
  );
}

/**
 * Make the certificates of `TestCertificates` in `dir` (P-256 keys, valid two days).
 * @throws Error when `openssl` fails (check `hasOpenssl` first).
 */
export function makeTestCertificates(dir: string): TestCertificates {
  fs.mkdirSync(dir, { recursive: true });
  selfSigned(dir, 'server', 'localhost', 'IP:127.0.0.1,DNS:localhost');
  selfSigned(dir, 'client', 'abacus-test-client');
  selfSigned(dir, 'stranger', 'abacus-test-stranger');
  const f = (name: string): string => path.join(dir, name);
  return { serverCert: f('server.crt'), serverKey: f('server.key'), clientCert: f('client.crt'), clientKey: f('client.key'), strangerCert: f('stranger.crt'), strangerKey: f('stranger.key') };
}
