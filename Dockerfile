# syntax=docker/dockerfile:1
# Abacus-TS serving image: `abacus serve` (KServe v2 HTTP on 8000, gRPC on 8001, /metrics).
# docs/deploy.md: build, run, Kubernetes, KServe. test/deploy/dockerfile.test.ts checks the
# entry point, user, ports and health check against the CLI's own flags.
#
#   docker build -t abacus-ts .
#   docker build -t abacus-ts:sim4 --build-arg PREBUILD_CONFIG=examples/serve-sim4.yaml .
#   docker run --rm -p 8000:8000 -p 8001:8001 abacus-ts
#   docker run --rm -p 8000:8000 -v "$PWD/my.yaml:/etc/abacus/serving.yaml:ro" \
#     -v abacus-cache:/var/cache/abacus abacus-ts --config /etc/abacus/serving.yaml --host 0.0.0.0
ARG NODE_IMAGE=node:20-slim

# 1. production dependencies (onnxruntime-node ships its CPU binaries in the package)
FROM ${NODE_IMAGE} AS deps
WORKDIR /app
COPY package.json package-lock.json .npmrc ./
RUN npm ci --omit=dev && npm cache clean --force

# 2. optional: build a config's models and predictor into the image (sim: devices; see prebuild.mjs)
FROM ${NODE_IMAGE} AS prebuild
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY package.json ./
COPY bin ./bin
COPY src ./src
COPY examples ./examples
COPY deploy/docker ./deploy/docker
ARG PREBUILD_CONFIG=""
ENV ABACUS_CACHE_DIR=/app/cache/models
RUN mkdir -p /app/cache/models && if [ -n "$PREBUILD_CONFIG" ]; then node deploy/docker/prebuild.mjs "$PREBUILD_CONFIG"; fi

# 3. runtime: sources run through tsx (no build step), as the unprivileged `node` user
FROM ${NODE_IMAGE} AS runtime
ENV NODE_ENV=production \
    ORT_DISABLE_TELEMETRY=1 \
    ABACUS_CACHE_DIR=/var/cache/abacus/models \
    ABACUS_LOG_LEVEL=info
WORKDIR /app
COPY --from=deps /app/node_modules ./node_modules
COPY package.json ./
COPY bin ./bin
COPY src ./src
COPY examples ./examples
COPY deploy/docker ./deploy/docker
RUN mkdir -p /var/cache/abacus && chown node:node /var/cache/abacus
COPY --from=prebuild --chown=node:node /app/cache /var/cache/abacus
# models and predictors profiled at start are kept here: mount a volume to keep them across restarts
VOLUME ["/var/cache/abacus"]
USER node
EXPOSE 8000 8001
# ready = every service warmed up; the first start may profile for minutes (sim: seconds)
HEALTHCHECK --interval=10s --timeout=5s --start-period=600s --retries=3 CMD ["node", "deploy/docker/healthcheck.mjs"]
# exec form: node is PID 1 and gets SIGTERM itself (graceful shutdown within --grace-ms)
ENTRYPOINT ["node", "bin/abacus.js", "serve"]
CMD ["--config", "examples/serve-sim4.yaml", "--host", "0.0.0.0"]
