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
exec "$VENV/bin/python" -m pytest -q "$@"
