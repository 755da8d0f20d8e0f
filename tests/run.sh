#!/usr/bin/env bash
# Runs every hostpipe test on a fresh machine: installs the pinned MCP peers the
# end-to-end tests talk to (npm: tests/package-lock.json, which also pins the official
# MCP conformance suite and the Node 22 it needs; Python: tests/requirements.txt into
# tests/.venv, and the LangBot plugin's SDK, plugins/langbot/requirements-dev.txt, into
# tests/.venv-langbot), Debian's postgresql and chromium when they are missing (the store
# tests start a private PostgreSQL; the admin page test drives Chromium), builds the
# hostpipe binary and the conformance client, then runs the whole workspace's tests.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v node >/dev/null || { echo "tests/run.sh: Node.js (node, npm) is required for the MCP peers" >&2; exit 1; }
command -v python3 >/dev/null || { echo "tests/run.sh: python3 is required for the MCP peers" >&2; exit 1; }

echo "== npm peers (tests/package-lock.json)"
npm ci --prefix tests --no-audit --no-fund --loglevel=error

echo "== Python peers (tests/requirements.txt)"
if ! tests/.venv/bin/python -c 'import mcp' 2>/dev/null; then
  rm -rf tests/.venv
  python3 -m venv tests/.venv
fi
tests/.venv/bin/pip install --quiet --disable-pip-version-check -r tests/requirements.txt

echo "== the LangBot plugin's SDK (plugins/langbot/requirements-dev.txt)"
if ! tests/.venv-langbot/bin/python -c 'import langbot_plugin' 2>/dev/null; then
  rm -rf tests/.venv-langbot
  python3 -m venv tests/.venv-langbot
fi
tests/.venv-langbot/bin/pip install --quiet --disable-pip-version-check -r plugins/langbot/requirements-dev.txt

echo "== Debian packages: postgresql (the store tests start a private server), chromium (the admin page test)"
packages=()
if [ -z "${HOSTPIPE_TEST_POSTGRES_URL:-}" ] && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  packages+=(postgresql postgresql-client)
fi
if [ -z "${CHROMIUM:-}" ] && ! command -v chromium >/dev/null; then
  packages+=(chromium)
fi
if [ "${#packages[@]}" -gt 0 ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
fi

echo "== build"
# The hostpipe binary, and the client the MCP conformance suite runs
# (tests/e2e/conformance.rs); the tests find both next to their own executable.
cargo build -j2 --locked -p hostpipe -p hostpipe-tests --bin hostpipe --bin conformance-client

echo "== tests"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test -j2 --locked --workspace "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# One closing line for the whole run (cargo's last line is only the last doc-test batch).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
