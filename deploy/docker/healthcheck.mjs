// HEALTHCHECK of the abacus-ts image (Dockerfile; docs/deploy.md): exit 0 when
// GET $ABACUS_HEALTH_URL answers 200 within 3 s, else 1. The default is `abacus serve`'s
// readiness route on its default --http-port; set ABACUS_HEALTH_URL when you change the port.
// Node's own fetch: the slim base image has no curl or wget.
const url = process.env.ABACUS_HEALTH_URL ?? 'http://127.0.0.1:8000/v2/health/ready';
try {
  const response = await fetch(url, { signal: AbortSignal.timeout(3000) });
  process.exit(response.status === 200 ? 0 : 1);
} catch {
  process.exit(1);
}
