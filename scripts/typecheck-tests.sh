#!/usr/bin/env bash
# Type-checks the tests with `mypy --strict`, as pyproject.toml does the library; exits non-zero
# when any group fails (every group is checked).
# Why groups: pytest imports test modules by file name, and each conftest.py dir has a "conftest".
set -euo pipefail
cd "$(dirname "$0")/.."

ROOTS=(tests tests/sync/server tests/cluster tests/interop)

files() {  # ROOT: its Python files, less Node's and those of the other roots
    local skip=() root
    for root in "${ROOTS[@]}"; do [ "$root" = "$1" ] || skip+=(-path "$root" -prune -o); done
    find "$1" -name node_modules -prune -o "${skip[@]}" -name '*.py' -print | sort
}

check() {  # ROOT [EXTRA_MYPYPATH]: one group, each module found by file name, as pytest does
    local sources dirs
    mapfile -t sources < <(files "$1")
    dirs=$(printf '%s\n' "${sources[@]}" | xargs -n1 dirname | sort -u | paste -sd: -)
    echo "typecheck-tests: $1 (${#sources[@]} files)" >&2
    # a cache of its own per group: the module "conftest" is another file in each
    MYPYPATH="tests:$dirs${2:+:$2}" mypy --strict --explicit-package-bases \
        --cache-dir ".mypy_cache/${1//\//-}" "${sources[@]}"
}

status=0
check tests || status=1
check tests/sync/server || status=1
check tests/cluster tests/interop || status=1  # the cluster tests import interop's yjs_node
check tests/interop || status=1
exit "$status"
