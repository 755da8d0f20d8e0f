#!/usr/bin/env bash
# Load on `hostpipe serve`: wrk (Debian's package) POSTs preview turns of the embedded
# default pipeline (the demo server; 4 attachments, 4000-token budget) over loopback at
# 1, 16 and 64 connections, DURATION seconds each (default 10), and prints requests/s
# and p50/p99 latency for each.
#
#   bash tests/bench/serve-load.sh [target/release/hostpipe] [STORE]
#
# STORE is the attachment store (default `memory`; e.g. sqlite:/tmp/load.db to include
# the history writes). Build with `cargo build --release` first.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-target/release/hostpipe}
store=${2:-memory}
duration=${DURATION:-10}
command -v wrk >/dev/null || { echo "serve-load.sh: needs wrk (apt-get install wrk)" >&2; exit 1; }
export HOSTPIPE_TOKEN=${HOSTPIPE_TOKEN:-bench-admin-token-0123456789}
export HOSTPIPE_DATA_DIR=$(mktemp -d)
out=$(mktemp)
HOSTPIPE_LOG=warn "$bin" serve --listen 127.0.0.1:0 --store "$store" >"$out" 2>"$HOSTPIPE_DATA_DIR/serve.log" &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$HOSTPIPE_DATA_DIR" "$out"' EXIT
for _ in $(seq 100); do grep -q listening "$out" && break; sleep 0.1; done
base=$(sed -n 's/^hostpipe: listening on //p' "$out")
until curl -sf "$base/readyz" >/dev/null; do sleep 0.1; done
# Warm the caches (content, splits, token counts) as a running service has them.
wrk -t1 -c1 -d2s -s tests/bench/turn.lua "$base/v1/turns" >/dev/null
echo "connections requests_per_s p50_ms p99_ms non_2xx"
for c in 1 16 64; do
  t=$(( c < 2 ? 1 : 2 ))
  report=$(wrk -t$t -c$c -d${duration}s --timeout 10s -s tests/bench/turn.lua "$base/v1/turns")
  rps=$(sed -n 's/^Requests\/sec: *//p' <<<"$report")
  p50=$(sed -n 's/^p50_ms=\([^ ]*\).*/\1/p' <<<"$report")
  p99=$(sed -n 's/.*p99_ms=\([^ ]*\)$/\1/p' <<<"$report")
  non2xx=$(sed -n 's/^ *Non-2xx or 3xx responses: *//p' <<<"$report")
  echo "$c $rps $p50 $p99 ${non2xx:-0}"
done
