#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh machine, then runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet --disable-pip-version-check -e '.[dev]'

# Real Yjs peers for the interop tests (yjs + y-websocket in Node).
if [ -f tests/interop/package-lock.json ]; then
    (cd tests/interop && npm ci --omit=optional --no-audit --no-fund --loglevel=error)
fi

python3 -m pytest -q "$@"
