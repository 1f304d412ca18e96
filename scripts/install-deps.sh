#!/usr/bin/env bash
# Installs the Debian 12 packages fencekeeper needs, only those that are missing.
#   install-deps.sh build   compiler, CMake and libraries (enough for scripts/run.sh)
#   install-deps.sh test    build + Postgres, Redis, etcd, curl, openssl (test_tls.py makes
#                           its certificates), clang, faketime,
#                           python3-prometheus-client and wrk (scripts/test.sh;
#                           test_file_scale.py writes its keys with wrk),
#                           python3-jsonschema and python3-yaml (every answer the
#                           integration tests read is checked against docs/openapi.yaml),
#                           Node.js and npm (scripts/openapi-check.sh; kept when
#                           already on PATH, e.g. a newer Node.js than Debian's)
# Runs `apt-get update` at most once, and only when something has to be installed.
set -euo pipefail

what="${1:-build}"

build_pkgs=(build-essential cmake nlohmann-json3-dev doctest-dev libpq-dev libsqlite3-dev libssl-dev python3)
test_pkgs=(sqlite3 postgresql redis-server redis-tools etcd-server etcd-client curl openssl clang libclang-rt-14-dev faketime
           python3-prometheus-client wrk python3-jsonschema python3-yaml)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'; }

missing=()
for p in "${build_pkgs[@]}"; do installed "$p" || missing+=("$p"); done
# Boost >= 1.81 (Asio coroutines + Beast): Debian 12's libboost-dev is 1.74, so take
# libboost1.81-dev unless a new enough libboost-dev is already there.
boost_ok=0
if installed libboost1.81-dev; then
    boost_ok=1
elif installed libboost-dev; then
    v="$(dpkg-query -W -f='${Version}' libboost-dev 2>/dev/null || true)"
    if dpkg --compare-versions "${v:-0}" ge 1.81; then boost_ok=1; fi
fi
[[ $boost_ok == 1 ]] || missing+=(libboost1.81-dev)
# The command line is parsed with Boost.Program_options, a compiled Boost library: the
# one of the same Boost version.
if installed libboost1.81-dev || [[ $boost_ok == 0 ]]; then
    installed libboost-program-options1.81-dev || missing+=(libboost-program-options1.81-dev)
else
    installed libboost-program-options-dev || missing+=(libboost-program-options-dev)
fi
if [[ "$what" == test ]]; then
    for p in "${test_pkgs[@]}"; do installed "$p" || missing+=("$p"); done
    # Debian's nodejs and npm only where there is no Node.js at all: a machine may have a
    # newer one from elsewhere (whose package bundles npm), which Debian's npm conflicts with.
    command -v node >/dev/null || missing+=(nodejs)
    command -v npm >/dev/null || missing+=(npm)
fi

if ((${#missing[@]} == 0)); then
    exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
sudo=()
if [[ $EUID -ne 0 ]]; then
    command -v sudo >/dev/null || { echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
    sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
# policy-rc.d 101: packages such as postgresql and redis-server must not start their
# system services here; the test script starts private instances of its own.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null
    "${sudo[@]}" chmod +x "$policy"
    created_policy=1
fi
rc=0
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" || rc=$?
if [[ $created_policy == 1 ]]; then "${sudo[@]}" rm -f "$policy"; fi
exit $rc
