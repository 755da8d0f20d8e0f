# syntax=docker/dockerfile:1
#
# hostpipe's container image (docs/deploy.md).
#
#   docker build -t hostpipe .                                  # the binary alone
#   docker build --target runtime-stdio -t hostpipe:stdio .     # + Node.js and Python,
#                                                               #   for stdio MCP servers
#   docker run -p 8787:8787 -e HOSTPIPE_TOKEN=$(openssl rand -hex 32) hostpipe
#
# The base images are build arguments so that a deployment can pin them by digest
# (`--build-arg RUNTIME_IMAGE=debian:bookworm-slim@sha256:…`). The builder and the
# runtime are both Debian 12 (bookworm), so the binary links against the glibc it was
# built with; it needs nothing else but libgcc_s (TLS is rustls, SQLite is bundled, the
# tokenizer's vocabularies are compiled in: nothing is downloaded at run time).

ARG RUST_IMAGE=rust:1.95.0-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim
ARG NODE_IMAGE=node:24.22.3-bookworm-slim

# ---- build: the release binary (Cargo.toml [profile.release]) -----------------------
# `strip` drops the symbols the release profile keeps: 60 MB instead of 73, and panic
# backtraces without function names (README, "A smaller binary").
FROM ${RUST_IMAGE} AS build
WORKDIR /src
COPY . .
# The registry and target directories are cache mounts: a rebuild after a source change
# compiles hostpipe's own crates only. The binary is copied out of the cache in the same
# step (a cache mount is not part of the image).
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked -p hostpipe --bin hostpipe \
    && cp target/release/hostpipe /usr/local/bin/hostpipe \
    && strip /usr/local/bin/hostpipe

# ---- base: the binary on Debian, everything both runtime images share -----------------
FROM ${RUNTIME_IMAGE} AS base
# ca-certificates: the roots rustls trusts (remote MCP servers, model APIs, PostgreSQL
# over TLS). tini: PID 1 that forwards SIGTERM to hostpipe (which then drains its turns
# and stops its stdio servers) and reaps what they leave behind.
# Debian's versions are not pinned: bookworm's archive keeps only the newest of each, so
# a pin would break the build at the next security update.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates tini \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 hostpipe \
    && useradd --system --uid 10001 --gid hostpipe --home-dir /data --shell /usr/sbin/nologin hostpipe \
    && mkdir -p /data /etc/hostpipe \
    && chown hostpipe:hostpipe /data
COPY --from=build /usr/local/bin/hostpipe /usr/local/bin/hostpipe
# The data directory holds the default SQLite store (hostpipe.db: pins, read and tool
# call history, servers added over the API, sealed OAuth credentials). HOME is there too,
# for npm's and uv's caches in the stdio image.
ENV HOSTPIPE_DATA_DIR=/data \
    HOME=/data
VOLUME ["/data"]
WORKDIR /data
# Numeric, so that Kubernetes' runAsNonRoot can check it.
USER 10001:10001
EXPOSE 8787
# /healthz answers while the process does; `hostpipe healthcheck` GETs it without curl.
# A service on another port overrides this (`hostpipe healthcheck http://127.0.0.1:PORT/healthz`).
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["hostpipe", "healthcheck", "--timeout", "4s"]
ENTRYPOINT ["/usr/bin/tini", "--", "hostpipe"]
# A config file goes to /etc/hostpipe/hostpipe.toml: add `--config /etc/hostpipe/hostpipe.toml`.
CMD ["serve", "--listen", "0.0.0.0:8787"]

# ---- node: where runtime-stdio takes Node.js from ------------------------------------
FROM ${NODE_IMAGE} AS node

# ---- runtime-stdio: + Node.js (npx) and Python (uvx), for stdio MCP servers ------------
FROM base AS runtime-stdio
USER 0
# Node.js from the official image (Debian 12's nodejs is 18, past its end of life).
COPY --from=node /usr/local/bin/node /usr/local/bin/node
COPY --from=node /usr/local/lib/node_modules /usr/local/lib/node_modules
# Python 3.11 from Debian, and uv (PyPI, pinned) for `uvx SERVER`, the way Python MCP
# servers are usually started; uv's own Python downloads are off (offline-safe).
# hadolint ignore=DL3008
RUN ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm \
    && ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx \
    && apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/uv \
    && /opt/uv/bin/pip install --no-cache-dir uv==0.13.9 \
    && ln -s /opt/uv/bin/uv /opt/uv/bin/uvx /usr/local/bin/ \
    && node --version \
    && uv --version
ENV UV_PYTHON_DOWNLOADS=never \
    NPM_CONFIG_UPDATE_NOTIFIER=false
USER 10001:10001

# ---- runtime: the binary alone; the last stage, so the default target ------------------
FROM base AS runtime
