#!/usr/bin/env bash
# The test command: lint, then every test (unit, integration, end-to-end with real models).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}

for tool in redis-server; do
  command -v "$tool" >/dev/null || { echo "$tool is missing: install it (see README) or run .ci/run" >&2; exit 1; }
done

echo "==> ruff"
"$VENV/bin/ruff" check .
echo "==> pytest"
# Whole files per worker (their module fixtures start once); TEST_WORKERS=0 runs in this process.
workers=${TEST_WORKERS:-3}
if [ "$workers" = 0 ]; then
  exec "$VENV/bin/python" -m pytest -q "$@"
fi
exec "$VENV/bin/python" -m pytest -q -n "$workers" --dist loadfile "$@"
