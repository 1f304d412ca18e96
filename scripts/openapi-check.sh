#!/usr/bin/env bash
# Checks docs/openapi.yaml, the machine-readable twin of docs/api.md:
#   1. tests/openapi/check_spec.py: the spec agrees with docs/api.md (routes, error codes
#      and their statuses) and with the code (fence/error.cpp, proxy/router.cpp);
#   2. Redocly CLI lints it (tests/openapi/redocly.yaml: every recommended rule, as errors);
#   3. openapi-typescript generates a TypeScript client from it, and tsc --strict
#      type-checks tests/openapi/client.ts against that client.
# The npm tools are pinned in tests/openapi/package.json and package-lock.json and
# installed with `npm ci` into a cache outside the repo (FK_OPENAPI_TOOLS, default
# ~/.cache/fencekeeper/openapi-tools), once per lockfile. Node.js and npm come from
# scripts/install-deps.sh test. scripts/test.sh runs this as the ctest test `openapi`.
set -euo pipefail

cd "$(dirname "$0")/.."
for tool in node npm; do
    command -v "$tool" >/dev/null || { echo "openapi-check: $tool is not installed (bash scripts/install-deps.sh test)" >&2; exit 1; }
done

echo "== spec against docs/api.md and the code"
# Debian's python3, which has python3-yaml from scripts/install-deps.sh test.
py=/usr/bin/python3
[[ -x $py ]] || py=python3
"$py" tests/openapi/check_spec.py

tools="${FK_OPENAPI_TOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/fencekeeper/openapi-tools}"
stamp="$(cat tests/openapi/package.json tests/openapi/package-lock.json | sha256sum | cut -c1-16)"
if [[ ! -f "$tools/.installed-$stamp" ]]; then
    echo "== installing the pinned tools into $tools"
    rm -rf "$tools"
    mkdir -p "$tools"
    cp tests/openapi/package.json tests/openapi/package-lock.json "$tools/"
    (cd "$tools" && npm ci --no-audit --no-fund --loglevel=error)
    touch "$tools/.installed-$stamp"
fi
bin="$tools/node_modules/.bin"

echo "== redocly lint"
"$bin/redocly" lint --config tests/openapi/redocly.yaml docs/openapi.yaml 2>&1 |
    grep -v '[║╔╚]'   # drops Redocly's boxed banner about Node.js versions (pipefail keeps its status)

echo "== openapi-typescript, then tsc --strict"
work="$(mktemp -d /tmp/fk-openapi.XXXXXX)"
trap 'rm -rf "$work"' EXIT
"$bin/openapi-typescript" docs/openapi.yaml -o "$work/fencekeeper-api.d.ts"
cp tests/openapi/client.ts tests/openapi/tsconfig.json "$work/"
"$bin/tsc" -p "$work/tsconfig.json"
echo "openapi-check: ok (docs/openapi.yaml lints, matches docs/api.md and the code, and its TypeScript client type-checks)"
