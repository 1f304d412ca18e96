#!/usr/bin/env bash
# pg-raise-floor.sh --url FENCEKEEPER_URL --prefix P [--margin M | --token N] [DATABASE_URL]
#
# Repair after the Postgres that holds the fencing_tokens counters (pg-tokens.sql,
# pg-token.sh, pg-lock.sh) lost committed tokens: a failover to an asynchronous
# standby, or a restore from backup (PITR to an earlier point, a base backup without
# the last WAL). Counters went back, so new holders would get tokens old holders
# (zombies) have. For every lock at once:
#
#   1. reads the highest counter (max(token): one scan of fencing_tokens);
#   2. raises fencekeeper's floor for prefix P above it and above every fence under P,
#      plus the margin (fencekeeper-raise-floor.sh; --margin M, default 1000000, or
#      --token N): from then on every lost token is refused;
#   3. raises the floor row '' of fencing_tokens to that floor (never lowers it): the
#      next token of every lock is above it.
#
# The margin must exceed the tokens the lost transactions handed out per lock: the
# acquisitions per second of the busiest lock times the replication lag (or the
# stretch of WAL the restore did not replay).
#
# Order: fencekeeper first (the floor stops the zombies), then the floor row (it lets
# new holders through): stopped in between, every holder is refused until a rerun.
# Not needed after a failover to a synchronous standby (synchronous_commit on or
# remote_apply, the standby in synchronous_standby_names): no committed token is lost.
#
# Sequences (the alternative in pg-tokens.sql) have no floor row: move each one with
# setval, as docs/locks.md shows.
#
# Environment: DATABASE_URL (or the argument, or the usual PG* variables);
#   FENCEKEEPER_TOKEN for fencekeeper's auth. Needs psql, curl, python3.
# Exit status: 0 done, 2 usage, 69 when Postgres or fencekeeper fail.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage() {
  echo "usage: $0 --url FENCEKEEPER_URL --prefix P [--margin M | --token N] [DATABASE_URL]" >&2
  exit 2
}
die() { echo "$0: $*" >&2; exit 69; }
isnum() { case $1 in '' | *[!0-9]*) return 1 ;; esac; }

url='' prefix='' have_prefix='' pass=() db=${DATABASE_URL:-}
while [ $# -gt 0 ]; do
  case $1 in
    --url) url=$2; shift 2 ;;
    --prefix) prefix=$2; have_prefix=1; shift 2 ;;
    --margin | --token) [ $# -ge 2 ] || usage; pass+=("$1" "$2"); shift 2 ;;
    -*) usage ;;
    *) db=$1; shift ;;
  esac
done
[ -n "$url" ] && [ -n "$have_prefix" ] || usage
args=(-X -q -A -t -v ON_ERROR_STOP=1)
[ -n "$db" ] && args+=(-d "$db")
sql() {
  local out
  out=$(psql "${args[@]}" "$@" 2>&1) || die "psql failed: $out"
  printf '%s\n' "$out" | tail -n 1
}

got=$(sql -c "CREATE TABLE IF NOT EXISTS fencing_tokens (lock text PRIMARY KEY, token bigint NOT NULL);" \
  -c "SELECT COALESCE(max(token) FILTER (WHERE lock <> ''), 0) || ' ' || count(*) FILTER (WHERE lock <> '') || ' ' || COALESCE(max(token) FILTER (WHERE lock = ''), 0) FROM fencing_tokens;") || exit 69
read -r max count old_floor <<<"$got"
isnum "$max" && isnum "$old_floor" || die "unexpected answer from psql: $got"
echo "Postgres: $count counters in fencing_tokens, highest $max; floor row $old_floor"

at_least=$max
[ "$old_floor" -gt "$at_least" ] && at_least=$old_floor
floor=$("$here/fencekeeper-raise-floor.sh" --url "$url" --prefix "$prefix" --at-least "$at_least" \
  "${pass[@]}") || exit $?
isnum "$floor" || die "fencekeeper-raise-floor.sh printed '$floor'"

# $floor is digits only (checked above): safe to put into the statement.
now=$(sql -c "INSERT INTO fencing_tokens AS f (lock, token) VALUES ('', $floor)
  ON CONFLICT (lock) DO UPDATE SET token = GREATEST(f.token, EXCLUDED.token) RETURNING token;") ||
  exit 69
isnum "$now" || die "unexpected answer from psql: $now (fencekeeper's floor of '$prefix' is" \
  "$floor: every holder is refused until the floor row is raised; rerun)"
echo "fencekeeper floor of '$prefix': $floor; floor row of fencing_tokens: $now (was $old_floor);" \
  "every lock's next token is above $now"
