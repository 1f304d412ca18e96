#!/usr/bin/env bash
# fencekeeper-raise-floor.sh --url URL --prefix P [--margin M | --token N] [--at-least T]...
#
# The fencekeeper half of every lock-service repair (docs/locks.md, "After a
# lock-service reset"): raises the fence floor of prefix P so that every lock whose
# name starts with P refuses every token below it, in one O(1) step
# (PUT /v1/floors?prefix=P). A token equal to the floor passes, like a token equal to a
# fence: so N must be above every token to refuse, and the lock service's next tokens
# above N. The lock-service half (moving its counters above the
# floor) is done by redis-raise-floor.sh, or by hand for etcd and Postgres.
#
# The floor N is, unless --token N is given:
#
#   max( the highest fence under P     GET /v1/fences?prefix=P, every page
#        the floors that apply under P GET /v1/floors: P's own, a shorter prefix of P,
#                                      a longer prefix under P
#        every --at-least T            what the lock service knows it has issued )
#   + M (--margin, default 1000000)
#
# The margin covers tokens the lost lock service issued that nobody has shown to
# fencekeeper yet (holders still working): at least the acquisitions per second of
# the busiest lock times the longest time its writes could have gone unreplicated.
# Tokens are signed 64-bit, so a generous margin costs nothing.
#
# --token N sets exactly N. It is refused when N is not above the highest fence or
# --at-least value seen (that floor would not cover tokens already used), unless the
# floor of P is already at N or above (a rerun: nothing to do).
#
# A 409 stale_token whose current_token >= N means the floor is already there (a rerun,
# or a concurrent one): done, not an error. Floors only go up.
#
# Output: what it did on stderr; the floor of P now in force (a number) on stdout.
# Environment: FENCEKEEPER_TOKEN: bearer token when fencekeeper has auth configured.
# Needs curl and python3 (JSON is read with Python's exact integers: jq 1.6 rounds
# numbers above 2^53, and a floor rounded down could be below a token already issued).
# Exit status: 0 done, 2 usage (or a refused --token), 69 fencekeeper failed.
set -u
usage() {
  echo "usage: $0 --url URL --prefix P [--margin M | --token N] [--at-least T]..." >&2
  exit 2
}
say() { echo "$*" >&2; }
die() { echo "$0: $*" >&2; exit 69; }
isnum() { case $1 in '' | *[!0-9]*) return 1 ;; esac; }

url='' prefix='' have_prefix='' margin=1000000 token='' at_least=0
while [ $# -gt 0 ]; do
  case $1 in
    --url) url=${2%/}; shift 2 ;;
    --prefix) prefix=$2; have_prefix=1; shift 2 ;;
    --margin) margin=$2; shift 2 ;;
    --token) token=$2; shift 2 ;;
    --at-least)
      isnum "$2" || { echo "$0: --at-least wants a non-negative integer" >&2; exit 2; }
      [ "$2" -gt "$at_least" ] && at_least=$2
      shift 2 ;;
    *) usage ;;
  esac
done
# The prefix is required, even when empty: a floor on "" covers every lock, including
# those whose tokens come from another lock service (they would all be refused until
# their tokens pass the floor). Say which locks this lock service fences.
[ -n "$url" ] && [ -n "$have_prefix" ] || usage
isnum "$margin" || { echo "$0: --margin wants a non-negative integer" >&2; exit 2; }
[ -z "$token" ] || isnum "$token" || { echo "$0: --token wants a positive integer" >&2; exit 2; }
command -v python3 >/dev/null || die "needs python3"

auth=()
[ -n "${FENCEKEEPER_TOKEN:-}" ] && auth=(-H "Authorization: Bearer $FENCEKEEPER_TOKEN")
enc() { printf '%s' "$1" | od -An -tx1 -v | tr -d ' \n' | sed 's/\(..\)/%\1/g'; }

# call METHOD PATH [curl args]: sets code and body.
call() {
  local m=$1 p=$2 out
  shift 2
  out=$(curl -sS -X "$m" -w '\n%{http_code}' "${auth[@]}" "$@" "$url$p") ||
    die "cannot reach fencekeeper at $url"
  code=${out##*$'\n'}
  body=${out%$'\n'*}
}

# Floors that apply to some lock under the prefix.
call GET /v1/floors
[ "$code" = 200 ] || die "GET /v1/floors answered $code: $body"
floors=$(printf '%s' "$body" | python3 -c '
import json, sys
p = sys.argv[1]
fs = [f for f in json.load(sys.stdin)["floors"] if p.startswith(f["prefix"]) or f["prefix"].startswith(p)]
print(max([f["token"] for f in fs], default=0))
print(max([f["token"] for f in fs if f["prefix"] == p], default=0))' "$prefix") ||
  die "unexpected GET /v1/floors body: $body"
floor_any=$(sed -n 1p <<<"$floors")
floor_own=$(sed -n 2p <<<"$floors")

# The highest own fence under the prefix, page by page. The cursor stays percent-encoded
# (a lock name may hold any character).
max_fence=0 count=0 after=
while :; do
  q="prefix=$(enc "$prefix")&limit=1000"
  [ -n "$after" ] && q="$q&after=$after"
  call GET "/v1/fences?$q"
  [ "$code" = 200 ] || die "GET /v1/fences?$q answered $code: $body"
  page=$(printf '%s' "$body" | python3 -c '
import json, sys, urllib.parse
d = json.load(sys.stdin)
print(max([f["token"] for f in d["fences"]], default=0))
print(len(d["fences"]))
print(urllib.parse.quote(d["next"], safe="") if d.get("next") is not None else "")') ||
    die "unexpected GET /v1/fences body: $body"
  m=$(sed -n 1p <<<"$page")
  n=$(sed -n 2p <<<"$page")
  after=$(sed -n 3p <<<"$page")
  [ "$m" -gt "$max_fence" ] && max_fence=$m
  count=$((count + n))
  [ -n "$after" ] || break
done
say "fencekeeper $url, prefix '$prefix': $count fenced locks, highest fence $max_fence;" \
  "floors that apply: highest $floor_any (own $floor_own); lock service: at least $at_least issued"

seen=$max_fence
[ "$at_least" -gt "$seen" ] && seen=$at_least
if [ -n "$token" ]; then
  want=$token
  if [ "$floor_own" -ge "$want" ]; then
    say "floor of '$prefix' is already $floor_own >= $want: nothing to do"
    echo "$floor_own"
    exit 0
  fi
  if [ "$want" -le "$seen" ]; then
    echo "$0: --token $want is not above the highest token already seen ($seen): refused" >&2
    exit 2
  fi
else
  base=$seen
  [ "$floor_any" -gt "$base" ] && base=$floor_any
  want=$((base + margin))
  [ "$want" -gt 0 ] || want=1
  say "floor = $base + margin $margin = $want"
fi

call PUT "/v1/floors?prefix=$(enc "$prefix")" -H "Fencing-Token: $want"
case $code in
  200)
    got=$(printf '%s' "$body" | python3 -c 'import json, sys; print(json.load(sys.stdin)["token"])') || die "unexpected body: $body"
    say "raised the floor of '$prefix' to $got (was $floor_own)" ;;
  409)
    got=$(printf '%s' "$body" | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(d["current_token"] if d.get("error") == "stale_token" else "")') ||
      die "PUT /v1/floors answered 409: $body"
    isnum "$got" && [ "$got" -ge "$want" ] || die "PUT /v1/floors answered 409: $body"
    say "the floor of '$prefix' is already $got >= $want (a rerun?): done" ;;
  *) die "PUT /v1/floors?prefix=$prefix answered $code: $body" ;;
esac
isnum "$got" || die "no token in $body"
echo "$got"
