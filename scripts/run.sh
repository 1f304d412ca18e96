#!/usr/bin/env bash
# Installs what is missing to build, builds build/fencekeeper and runs it in the
# foreground on the file store ./data, listening on 127.0.0.1:8080. Extra arguments go
# to fencekeeper (e.g. --log-level debug, --store postgresql://..., --config FILE).
set -euo pipefail

cd "$(dirname "$0")/.."

bash scripts/install-deps.sh build
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFK_FAILPOINTS=OFF >/dev/null  # never ship test failpoints
cmake --build build -j"$(nproc)" --target fencekeeper

# Our defaults only where the caller (or a config file) does not choose.
defaults=()
have() { local a; for a in "${@:2}"; do [[ $a == "$1" || $a == "$1="* ]] && return 0; done; return 1; }
if ! have --config "$@"; then
    have --store "$@" || defaults+=(--store file:./data)
    have --listen "$@" || defaults+=(--listen 127.0.0.1:8080)
fi
exec ./build/fencekeeper "${defaults[@]}" "$@"
