#!/usr/bin/env bash
# redis-raise-fence.sh NAME FENCEKEEPER_URL [MARGIN]
#
# Recovery after a Redis failover that lost the last INCRs of fence:NAME (the promoted
# replica had not received them): new holders get tokens at or below what fencekeeper
# already accepted, and every write they send is rejected with 409 stale_token. That
# is fencekeeper choosing safety over liveness; this script restores liveness.
#
# It reads the current fence from fencekeeper (GET /v1/fences/NAME) and raises the
# counter fence:NAME on the (new) primary to fence + MARGIN, never lowering it
# (redis-raise-fence.lua). The next token is then above anything fencekeeper saw; the
# token it prints is the one redis-acquire.lua will return next (above the floor key
# fence-floor when redis-raise-floor.sh has set one above the counter).
#
# MARGIN (default 1000) also skips the tokens the old primary may have handed out
# after its last replicated INCR to holders that have not written yet: without it,
# a new holder could get the very same token as one of those and both would pass.
# Make it larger than the number of acquisitions your lock sees in a replication lag.
#
# Environment: REDIS_HOST (127.0.0.1), REDIS_PORT (6379), REDISCLI_AUTH;
#   FENCEKEEPER_TOKEN: bearer token, when fencekeeper has auth configured.
# Exit status: 0 done (prints what it did), 69 when Redis or fencekeeper fail.
set -u
[ $# -ge 2 ] || { echo "usage: $0 NAME FENCEKEEPER_URL [MARGIN]" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
name=$1 url=${2%/} margin=${3:-1000}
case $margin in ''|*[!0-9]*) echo "$0: MARGIN must be a non-negative integer" >&2; exit 2 ;; esac
host=${REDIS_HOST:-127.0.0.1}
port=${REDIS_PORT:-6379}

# The lock name goes into the URL path percent-encoded.
enc=$(printf '%s' "$name" | od -An -tx1 -v | tr -d ' \n' | sed 's/\(..\)/%\1/g')
auth=()
[ -n "${FENCEKEEPER_TOKEN:-}" ] && auth=(-H "Authorization: Bearer $FENCEKEEPER_TOKEN")
body=$(curl -sS -w '\n%{http_code}' "${auth[@]}" "$url/v1/fences/$enc") || {
  echo "$0: cannot reach fencekeeper at $url" >&2; exit 69; }
code=${body##*$'\n'}
body=${body%$'\n'*}
case $code in
  200) ;;
  404) echo "lock $name has no fence yet: nothing to recover"; exit 0 ;;
  *) echo "$0: GET /v1/fences/$name answered $code: $body" >&2; exit 69 ;;
esac
fence=$(printf '%s' "$body" | grep -o '"token"[[:space:]]*:[[:space:]]*[0-9]*' | grep -o '[0-9]*$')
[ -n "$fence" ] || { echo "$0: no token in $body" >&2; exit 69; }
want=$(( fence + margin ))

out=$(redis-cli -h "$host" -p "$port" --eval "$here/redis-raise-fence.lua" "fence:$name" , "$want" 2>&1)
case $out in
  ''|*[!0-9]*) echo "$0: Redis answered: $out" >&2; exit 69 ;;
esac
# What redis-acquire.lua will return next: one above the counter, or above the floor key
# fence-floor (redis-raise-floor.sh) when the counter is at or below it.
floor=$(redis-cli -h "$host" -p "$port" GET fence-floor 2>&1)
case $floor in
  '') next=$((out + 1)) ;;
  *[!0-9]*) echo "$0: Redis answered: $floor" >&2; exit 69 ;;
  *) if [ "$out" -le "$floor" ]; then next=$((floor + 1)); else next=$((out + 1)); fi ;;
esac
if [ -n "$floor" ] && [ "$out" -le "$floor" ]; then
  echo "fence of $name is $fence; counter fence:$name is now $out, below the floor fence-floor $floor; the next token will be $next"
else
  echo "fence of $name is $fence; counter fence:$name is now $out; the next token will be $next"
fi
