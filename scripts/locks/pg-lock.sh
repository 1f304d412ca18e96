#!/usr/bin/env bash
# pg-lock.sh NAME -- CMD [ARGS...]
#
# Holds a Postgres session-level advisory lock for NAME while CMD runs, with a fencing
# token from the fencing_tokens counter (see pg-tokens.sql). CMD sees FENCING_TOKEN and
# FENCING_LOCK. The psql session that holds the lock stays open until CMD exits.
#
# Environment: DATABASE_URL (or the usual PG* variables);
#   LOCK_WAIT_MS (default 0: try once), LOCK_RETRY_MS (default 100).
# Exit status: CMD's; 75 when the lock is held by another session; 69 on errors.
#
# Lock metrics (docs/locks.md): one JSON line on standard error for each of
#   lock_contended        the lock was held when first asked for (acquired: true/false)
#   lock_lost             at release the session was gone (and the lock with it), or
#                         pg_advisory_unlock found the lock not held
#   lock_release_failed   the unlock got an error or no answer from a live session
#
# An advisory lock lives as long as its session. A frozen holder keeps its TCP
# connection and therefore its lock (nobody else gets in), but a holder whose session
# was cut (network, idle_session_timeout, pg_terminate_backend, a failover) loses the
# lock without noticing while it keeps working: its later writes carry an old token,
# and fencekeeper rejects them.
set -u
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lock-events.sh"
usage() { echo "usage: $0 NAME -- CMD [ARGS...]" >&2; exit 2; }
[ $# -ge 3 ] || usage
name=$1
[ -n "$name" ] || usage   # the empty name is the floor row (pg-tokens.sql)
[ "$2" = "--" ] || usage
shift 2
wait_ms=${LOCK_WAIT_MS:-0}
retry_ms=${LOCK_RETRY_MS:-100}
args=(-X -q -A -t -v ON_ERROR_STOP=1 -v "lock=$name")
[ -n "${DATABASE_URL:-}" ] && args+=(-d "$DATABASE_URL")

export PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning"
coproc PSQL { exec psql "${args[@]}" 2>&1; }
in=${PSQL[1]} out=${PSQL[0]} psql_pid=$PSQL_PID
ask() {  # ask SQL -> one line of output (psql flushes after each result)
  printf '%s\n' "$1" >&"$in"
  local line
  IFS= read -r -t 30 line <&"$out" || { echo "$0: no answer from psql" >&2; return 1; }
  printf '%s\n' "$line"
}
finish() { printf '\\q\n' >&"$in" 2>/dev/null; wait "$psql_pid" 2>/dev/null; }

started=$(date +%s%3N)
deadline=$(( started + wait_ms ))
attempts=0
while :; do
  attempts=$((attempts + 1))
  got=$(ask "SELECT pg_try_advisory_lock(hashtextextended(:'lock', 0));") || { finish; exit 69; }
  case $got in
    t) break ;;
    f) ;;
    *) echo "$0: unexpected answer from psql: $got" >&2; finish; exit 69 ;;
  esac
  if [ "$(date +%s%3N)" -ge "$deadline" ]; then
    lock_event lock_contended "$name" pg-lock.sh acquired=false attempts=$attempts \
      waited_ms=$(( $(date +%s%3N) - started ))
    echo "$0: lock $name is held by another session" >&2; finish; exit 75
  fi
  sleep "$(printf '%d.%03d' $((retry_ms / 1000)) $((retry_ms % 1000)))"
done
granted=$(date +%s%3N)

# One line, one answer: CREATE TABLE prints nothing under -q (notices are off).
# The counter honours the floor row '' as pg-tokens.sql explains.
token=$(ask "CREATE TABLE IF NOT EXISTS fencing_tokens (lock text PRIMARY KEY, token bigint NOT NULL); INSERT INTO fencing_tokens AS f (lock, token) VALUES (:'lock', COALESCE((SELECT token FROM fencing_tokens WHERE lock = ''), 0) + 1) ON CONFLICT (lock) DO UPDATE SET token = GREATEST(f.token, COALESCE((SELECT token FROM fencing_tokens WHERE lock = ''), 0)) + 1 RETURNING token;") || { finish; exit 69; }
case $token in ''|*[!0-9]*) echo "$0: unexpected token from psql: $token" >&2; finish; exit 69 ;; esac

if ((attempts > 1)); then
  lock_event lock_contended "$name" pg-lock.sh acquired=true attempts=$attempts \
    waited_ms=$((granted - started)) token="$token"
fi

FENCING_TOKEN=$token FENCING_LOCK=$name "$@"
rc=$?
# From here on a psql that died must not kill this script with SIGPIPE (CMD has run,
# so it does not inherit the ignored signal).
trap '' PIPE
got=$(ask "SELECT pg_advisory_unlock(hashtextextended(:'lock', 0));" 2>/dev/null)
case $got in
  t) finish ;;
  f|WARNING:*)
    finish
    lock_event lock_lost "$name" pg-lock.sh token="$token" held_ms=$(( $(date +%s%3N) - granted )) ;;
  *)
    # psql exits 2 when its connection is lost (non-interactive), and an advisory lock
    # ends with its session: lost. Any other failure (3: an SQL error) is a failed release.
    finish
    st=$?
    if ((st == 2)); then
      lock_event lock_lost "$name" pg-lock.sh token="$token" held_ms=$(( $(date +%s%3N) - granted ))
    else
      lock_event lock_release_failed "$name" pg-lock.sh token="$token" error="${got:-no answer from psql}"
    fi ;;
esac
exit $rc
