#!/usr/bin/env bash
# A nightly report job done right, for scripts/zombie-check.sh (docs/testing.md). It runs
# under a lock recipe (scripts/locks/), which gives it FENCING_TOKEN and FENCING_LOCK, and
# stores its report through fencekeeper (FENCEKEEPER_URL):
#   - every write carries the token and the lock of the lock it holds;
#   - it stops at the first refusal: a 409 means a newer holder has taken over.
# The key names the lock, so that runs of the check with fresh lock names never share a
# key (a key belongs to the lock it was first written under: docs/api.md).
set -euo pipefail
key="reports/$FENCING_LOCK/daily.csv"
reply=$(mktemp)
trap 'rm -f "$reply"' EXIT

put() {  # put KEY BODY: store BODY under KEY with our token; exit 1 when refused
  local code
  code=$(curl -sS -o "$reply" -w '%{http_code}' -X PUT "$FENCEKEEPER_URL/v1/resources/$1" \
    -H "Fencing-Token: $FENCING_TOKEN" -H "Fencing-Lock: $FENCING_LOCK" --data-binary "$2")
  case $code in
    2??) ;;
    409) echo "report-worker: $1 refused, a newer holder has the lock: $(cat "$reply")" >&2; exit 1 ;;
    *) echo "report-worker: $1: HTTP $code: $(cat "$reply")" >&2; exit 1 ;;
  esac
}

sleep 0.1   # "building the report"
put "$key" "day,revenue,made_by
2026-11-29,1234.56,pid $$ with token $FENCING_TOKEN"
put "reports/$FENCING_LOCK/last-run" "token $FENCING_TOKEN"
