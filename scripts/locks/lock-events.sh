# shellcheck shell=bash
# lock-events.sh: sourced by the lock wrappers (redis-lock.sh, etcd-lock.sh, pg-lock.sh).
#
#   lock_event EVENT LOCK RECIPE [KEY=VALUE ...]
#
# prints one JSON object on one line on standard error, for the three numbers every lock
# user should watch (docs/locks.md, "Lock metrics"):
#
#   lock_contended        the lock was held by somebody else when this holder asked
#   lock_lost             the hold outlived the lock: at release it was gone or another's
#   lock_release_failed   the release could not be done (lock service unreachable, error)
#
# VALUE is written as a JSON number when it is one, true/false as booleans, anything
# else as a string. One printf of one short line: a single write(2), so lines from
# concurrent holders sharing a log do not interleave.

lock_json_str() {  # lock_json_str STRING: STRING as a JSON string literal
  local s=$1 out='' c i
  s=${s//\\/\\\\}
  s=${s//\"/\\\"}
  s=${s//$'\n'/\\n}
  s=${s//$'\r'/\\r}
  s=${s//$'\t'/\\t}
  if [[ $s == *[$'\x01'-$'\x1f\x7f']* ]]; then
    for ((i = 0; i < ${#s}; i++)); do
      c=${s:i:1}
      case $c in
        [$'\x01'-$'\x1f\x7f']) printf -v c '\\u%04x' "'$c" ;;
      esac
      out+=$c
    done
    s=$out
  fi
  printf '"%s"' "$s"
}

lock_event() {  # lock_event EVENT LOCK RECIPE [KEY=VALUE ...]
  local line kv k v
  line="{\"event\":$(lock_json_str "$1"),\"lock\":$(lock_json_str "$2"),\"recipe\":$(lock_json_str "$3")"
  shift 3
  for kv in "$@"; do
    k=${kv%%=*} v=${kv#*=}
    case $v in
      true|false) ;;
      0|[1-9]|[1-9]*[0-9]) [[ $v == *[!0-9]* ]] && v=$(lock_json_str "$v") ;;
      *) v=$(lock_json_str "$v") ;;
    esac
    line+=",\"$k\":$v"
  done
  line+=",\"pid\":$$,\"time_ms\":$(date +%s%3N)}"
  printf '%s\n' "$line" >&2
}
