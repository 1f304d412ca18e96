#!/usr/bin/env bash
# redis-lock.sh NAME TTL_MS -- CMD [ARGS...]
#
# Takes the Redis lock NAME (lock:NAME, token counter fence:NAME, honouring the floor
# fence-floor that redis-raise-floor.sh sets after a failover) for TTL_MS
# milliseconds, runs CMD with the fencing token in its environment, and releases the
# lock afterwards (compare-and-delete: only if it is still ours). CMD sees:
#
#   FENCING_TOKEN   the token to send as the Fencing-Token header
#   FENCING_LOCK    NAME, to send as the Fencing-Lock header
#   LOCK_OWNER      this holder's unique owner value
#
# Environment:
#   REDIS_HOST (127.0.0.1), REDIS_PORT (6379), REDISCLI_AUTH (password, optional)
#   LOCK_WAIT_MS    keep retrying this long when the lock is held (default 0: try once)
#   LOCK_RETRY_MS   pause between retries (default 50)
#
# Exit status: CMD's status; 75 (EX_TEMPFAIL) when the lock was not acquired; 2 on
# usage errors; 69 when Redis cannot be reached or answers with an error.
#
# Lock metrics (docs/locks.md): one JSON line on standard error for each of
#   lock_contended        the lock was held when first asked for (acquired: true/false)
#   lock_lost             at release the lock had expired (CMD outlived TTL_MS)
#   lock_release_failed   the release itself failed (Redis unreachable or an error)
#
# The lock's TTL is NOT extended while CMD runs. If CMD outlives TTL_MS, another
# holder gets the lock and a higher token; CMD's writes through fencekeeper then get
# 409 stale_token, which is the point: see docs/locks.md.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/lock-events.sh"

usage() { echo "usage: $0 NAME TTL_MS -- CMD [ARGS...]" >&2; exit 2; }
[ $# -ge 4 ] || usage
name=$1 ttl=$2
[ "$3" = "--" ] || usage
shift 3
case $ttl in ''|*[!0-9]*) echo "$0: TTL_MS must be a positive integer" >&2; exit 2 ;; esac

host=${REDIS_HOST:-127.0.0.1}
port=${REDIS_PORT:-6379}
wait_ms=${LOCK_WAIT_MS:-0}
retry_ms=${LOCK_RETRY_MS:-50}
owner="$(hostname 2>/dev/null || echo host):$$:$(od -An -N8 -tx8 /dev/urandom | tr -d ' \n')"

rcli() { redis-cli -h "$host" -p "$port" "$@"; }

now_ms() { date +%s%3N; }
started=$(now_ms)
deadline=$(( started + wait_ms ))
token=
attempts=0
while :; do
  attempts=$((attempts + 1))
  out=$(rcli --eval "$here/redis-acquire.lua" "lock:$name" "fence:$name" fence-floor , "$owner" "$ttl" 2>&1) || {
    echo "$0: redis-cli failed: $out" >&2; exit 69; }
  case $out in
    '') ;;                                  # nil: somebody else holds the lock
    *[!0-9]*) echo "$0: unexpected reply from Redis: $out" >&2; exit 69 ;;
    *) token=$out; break ;;
  esac
  if [ "$(now_ms)" -ge "$deadline" ]; then
    lock_event lock_contended "$name" redis-lock.sh acquired=false attempts=$attempts \
      waited_ms=$(( $(now_ms) - started ))
    echo "$0: lock $name is held by somebody else" >&2
    exit 75
  fi
  sleep "$(printf '%d.%03d' $((retry_ms / 1000)) $((retry_ms % 1000)))"
done
granted=$(now_ms)
if ((attempts > 1)); then
  lock_event lock_contended "$name" redis-lock.sh acquired=true attempts=$attempts \
    waited_ms=$((granted - started)) token="$token"
fi

release() {  # compare-and-delete; 0 means the lock had expired (and may be another's)
  local out rc
  out=$(rcli --eval "$here/redis-release.lua" "lock:$name" , "$owner" 2>&1)
  rc=$?
  case $rc:$out in
    0:1) ;;
    0:0) lock_event lock_lost "$name" redis-lock.sh token="$token" ttl_ms="$ttl" \
           held_ms=$(( $(now_ms) - granted )) ;;
    *) lock_event lock_release_failed "$name" redis-lock.sh token="$token" error="$out" ;;
  esac
}
# Release on the usual termination signals too (kill -9 cannot be caught: then the
# TTL frees the lock, and the fence stops the zombie if it comes back).
trap 'release; exit 143' TERM
trap 'release; exit 130' INT

FENCING_TOKEN=$token FENCING_LOCK=$name LOCK_OWNER=$owner "$@"
rc=$?
release
exit $rc
