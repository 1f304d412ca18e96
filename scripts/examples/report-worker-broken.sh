#!/usr/bin/env bash
# The same report job with a fencing bug, for scripts/zombie-check.sh (docs/testing.md):
# it sends a constant token ("1", written when the lock was added and never wired to the
# lock service) instead of FENCING_TOKEN. fencekeeper cannot tell its holders apart: a
# holder frozen past its lock's TTL wakes up and overwrites the newer holder's report.
# zombie-check reports it UNSAFE; the test suite checks that it does.
set -euo pipefail
key="reports/$FENCING_LOCK/daily.csv"
reply=$(mktemp)
trap 'rm -f "$reply"' EXIT

put() {
  local code
  code=$(curl -sS -o "$reply" -w '%{http_code}' -X PUT "$FENCEKEEPER_URL/v1/resources/$1" \
    -H "Fencing-Token: 1" -H "Fencing-Lock: $FENCING_LOCK" --data-binary "$2")   # the bug
  case $code in
    2??) ;;
    409) echo "report-worker-broken: $1 refused: $(cat "$reply")" >&2; exit 1 ;;
    *) echo "report-worker-broken: $1: HTTP $code: $(cat "$reply")" >&2; exit 1 ;;
  esac
}

sleep 0.1
put "$key" "day,revenue,made_by
2026-11-29,1234.56,pid $$ with token $FENCING_TOKEN"
put "reports/$FENCING_LOCK/last-run" "token $FENCING_TOKEN"
