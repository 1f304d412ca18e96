#!/usr/bin/env bash
# redis-raise-floor.sh --url FENCEKEEPER_URL --prefix P [--margin M | --token N]
#
# Repair after a Redis failover (or restart) that lost writes: the promoted replica's
# counters fence:NAME are behind what the old primary handed out, so new holders get
# tokens that holders of the old primary (zombies) already have. For every lock at
# once, in O(1) in the number of locks, it:
#
#   1. finds the highest token this Redis still knows: every counter fence:* (SCAN,
#      1000 keys per step, never blocking Redis for long) and the floor key fence-floor;
#   2. raises fencekeeper's floor for prefix P above it and above every fence under P,
#      plus the margin (fencekeeper-raise-floor.sh; --margin M, default 1000000, or
#      --token N for an exact value): from then on every zombie token is refused;
#   3. raises the Redis key fence-floor to that floor (never lowers it): the next
#      redis-acquire.lua of any lock returns a token above it (the counter jumps to
#      the floor at its next acquisition), so new holders can write again.
#
# Why in this order: the fencekeeper floor is what stops the zombies, the Redis key only
# lets new holders through. Stopped between the two (or with step 3 failing), every
# holder is refused (409, safe) until a rerun finishes the job. The other way round, new
# holders would work with fresh tokens while zombie tokens were still accepted on every
# lock a new holder had not written yet: a repair that looks done and is not.
#
# The margin: tokens the old primary issued after its last replicated INCR are known to
# nobody (their holders may still be working). Make it larger than the acquisitions per
# second of your busiest lock times the longest replication lag the old primary allowed
# (bounded only with min-replicas-max-lag; otherwise the time the replica was
# disconnected). The default, 10^6, is 1000 acquisitions a second for 1000 seconds.
#
# P is the prefix of the locks whose tokens come from this Redis ('' = every lock;
# only if no lock in fencekeeper gets its tokens elsewhere). Counters of locks outside
# P are moved above the floor too, but fencekeeper does not fence those: the script
# warns about them.
#
# Idempotent: a rerun raises nothing that is already high enough (with --token N: the
# same N is "already done"; without: a rerun raises the floor by another margin, which
# is harmless). Keeps redis-raise-fence.sh (one lock) working: both only raise.
#
# Environment: REDIS_HOST (127.0.0.1), REDIS_PORT (6379), REDISCLI_AUTH;
#   FENCEKEEPER_TOKEN: bearer token, when fencekeeper has auth configured.
# Needs redis-cli, curl, python3.
# Exit status: 0 done (prints what it did), 2 usage, 69 when Redis or fencekeeper fail.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage() { echo "usage: $0 --url FENCEKEEPER_URL --prefix P [--margin M | --token N]" >&2; exit 2; }
die() { echo "$0: $*" >&2; exit 69; }
isnum() { case $1 in '' | *[!0-9]*) return 1 ;; esac; }

url='' prefix='' have_prefix='' pass=()
while [ $# -gt 0 ]; do
  case $1 in
    --url) url=$2; shift 2 ;;
    --prefix) prefix=$2; have_prefix=1; shift 2 ;;
    --margin | --token) [ $# -ge 2 ] || usage; pass+=("$1" "$2"); shift 2 ;;
    *) usage ;;
  esac
done
[ -n "$url" ] && [ -n "$have_prefix" ] || usage
host=${REDIS_HOST:-127.0.0.1}
port=${REDIS_PORT:-6379}
floor_key=fence-floor
rcli() { redis-cli -h "$host" -p "$port" "$@"; }

# One SCAN step in Redis: the highest numeric fence:* value among the keys it returns,
# how many there were, and how many are outside the prefix (with one example name).
# Runs as a script so key names with any bytes are handled in Redis, not in the shell.
scan_lua='
local r = redis.call("SCAN", ARGV[1], "MATCH", "fence:*", "COUNT", 1000)
-- Compared as digit strings (longer is larger): Lua numbers are doubles, exact only
-- up to 2^53, and a maximum rounded down could leave a token above the floor.
local max, n, outside, example, odd = "0", 0, 0, "", 0
for _, k in ipairs(r[2]) do
  local v = redis.call("GET", k)
  if v and string.match(v, "^%d+$") then
    n = n + 1
    v = (string.gsub(v, "^0+(%d)", "%1"))
    if #v > #max or (#v == #max and v > max) then max = v end
    if string.sub(k, 7, 6 + #ARGV[2]) ~= ARGV[2] then
      outside = outside + 1
      example = string.sub(k, 7)
    end
  else
    odd = odd + 1
  end
end
return {r[1], max, n, outside, example, odd}'

cursor=0 max=0 n=0 outside=0 example='' odd=0
while :; do
  out=$(rcli EVAL "$scan_lua" 0 "$cursor" "$prefix" 2>&1) || die "redis-cli failed: $out"
  mapfile -t f <<<"$out"
  [ "${#f[@]}" -ge 6 ] && isnum "${f[0]}" && isnum "${f[1]}" || die "Redis answered: $out"
  cursor=${f[0]}
  [ "${f[1]}" -gt "$max" ] && max=${f[1]}
  n=$((n + f[2])) outside=$((outside + f[3])) odd=$((odd + f[5]))
  [ -n "${f[4]}" ] && example=${f[4]}
  [ "$cursor" = 0 ] && break
done
old_floor=$(rcli GET "$floor_key" 2>&1) || die "redis-cli failed: $old_floor"
[ -z "$old_floor" ] && old_floor=0
isnum "$old_floor" || die "$floor_key holds '$old_floor', not a number"
echo "Redis $host:$port: $n counters fence:*, highest $max; $floor_key is $old_floor"
[ "$odd" -gt 0 ] && echo "warning: $odd keys fence:* hold no number; left alone" >&2
if [ "$outside" -gt 0 ]; then
  echo "warning: $outside counters belong to locks outside the prefix '$prefix' (e.g. '$example');" \
    "their tokens move above the floor, but fencekeeper does not fence them: rerun with a" \
    "prefix that covers them" >&2
fi

at_least=$max
[ "$old_floor" -gt "$at_least" ] && at_least=$old_floor
floor=$("$here/fencekeeper-raise-floor.sh" --url "$url" --prefix "$prefix" --at-least "$at_least" \
  "${pass[@]}") || exit $?
isnum "$floor" || die "fencekeeper-raise-floor.sh printed '$floor'"

got=$(rcli --eval "$here/redis-raise-fence.lua" "$floor_key" , "$floor" 2>&1)
isnum "$got" || die "Redis answered: $got (fencekeeper's floor of '$prefix' is $floor:" \
  "every holder is refused until $floor_key is raised; rerun)"
echo "fencekeeper floor of '$prefix': $floor; Redis $floor_key: $got (was $old_floor);" \
  "every lock's next token is above $got"
