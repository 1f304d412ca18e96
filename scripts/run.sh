#!/usr/bin/env bash
# Installs what is missing to build, builds build/fencekeeper and runs it in the
# foreground on the file store ./data, listening on 127.0.0.1:8080. Extra arguments go
# to fencekeeper (e.g. --log-level debug, --store postgresql://..., --config FILE).
set -euo pipefail

cd "$(dirname "$0")/.."

bash scripts/install-deps.sh build
# A new build/ gets no test failpoints. An existing one keeps its configuration:
# scripts/test.sh configures build/ with the file store's failpoints compiled in (they act
# only when FK_FAILPOINT is set), and flipping that option here would rebuild everything
# here and again on the next test run.
if [[ -f build/CMakeCache.txt ]]; then
    cmake -S . -B build >/dev/null
    if grep -q '^FK_FAILPOINTS:BOOL=ON$' build/CMakeCache.txt; then
        echo "run.sh: build/ has the test failpoints compiled in (scripts/test.sh configured it);" \
             "they act only when FK_FAILPOINT is set" >&2
    fi
else
    cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFK_FAILPOINTS=OFF >/dev/null
fi
cmake --build build -j"$(nproc)" --target fencekeeper

# Our defaults only where the caller (or a config file) does not choose.
defaults=()
have() { local a; for a in "${@:2}"; do [[ $a == "$1" || $a == "$1="* ]] && return 0; done; return 1; }
if ! have --config "$@"; then
    have --store "$@" || defaults+=(--store file:./data)
    have --listen "$@" || defaults+=(--listen 127.0.0.1:8080)
fi
exec ./build/fencekeeper "${defaults[@]}" "$@"
