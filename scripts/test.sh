#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh machine, then runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet --disable-pip-version-check -e '.[dev]'

# Redis and PostgreSQL for the cluster tests: installed (apt-get) and started where missing;
# CRDT_STATE_TEST_REDIS / CRDT_STATE_TEST_POSTGRES point the tests at other servers.
services_env=$(bash scripts/test-services.sh)
eval "$services_env"

# A real headless browser for the inspector page test: Debian's chromium and its driver.
if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then
    echo "test.sh: installing chromium and chromium-driver with apt-get" >&2
    sudo_=""; [ "$(id -u)" = 0 ] || sudo_="sudo -n"
    $sudo_ apt-get update -qq >/dev/null
    $sudo_ env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        chromium chromium-driver >/dev/null
fi

# Real Yjs peers for the interop tests (yjs + y-websocket in Node).
if [ -f tests/interop/package-lock.json ]; then
    (cd tests/interop && npm ci --omit=optional --no-audit --no-fund --loglevel=error)
fi

# Interop tests must run, never skip, when this script set them up.
export CRDT_STATE_REQUIRE_INTEROP=1
python3 -m pytest -q "$@"
