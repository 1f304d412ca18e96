#!/usr/bin/env bash
# pg-token.sh NAME [DATABASE_URL]
#
# Prints the next fencing token for lock NAME from Postgres: a counter row in the
# table fencing_tokens (created if missing), incremented in its own committed
# transaction (see pg-tokens.sql for the SQL and the sequence alternative).
# DATABASE_URL defaults to $DATABASE_URL; the usual PG* variables apply.
# Exit status: 0 and the token on stdout, 69 when Postgres fails, 2 on usage errors.
set -u
[ $# -ge 1 ] && [ -n "$1" ] || { echo "usage: $0 NAME [DATABASE_URL]" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
url=${2:-${DATABASE_URL:-}}
args=(-X -q -A -t -v ON_ERROR_STOP=1 -v "lock=$1" -f "$here/pg-tokens.sql")
[ -n "$url" ] && args+=(-d "$url")
out=$(psql "${args[@]}" 2>&1) || { echo "$0: psql failed: $out" >&2; exit 69; }
token=$(printf '%s\n' "$out" | tail -n 1)
case $token in ''|*[!0-9]*) echo "$0: unexpected output: $out" >&2; exit 69 ;; esac
echo "$token"
