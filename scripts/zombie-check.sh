#!/usr/bin/env bash
# zombie-check.sh: is YOUR job safe against zombie writers? (docs/testing.md)
#
#   bash scripts/zombie-check.sh [options] -- WORKER_CMD [ARGS...]
#
# Runs WORKER_CMD as several instances competing for one lock, through the lock recipes
# of scripts/locks/ (a real Redis or etcd), with a real fencekeeper. In each round one
# instance (the zombie) takes the lock and is frozen with SIGSTOP, before its worker
# starts; its TTL runs out; the others take the lock in turn and run to completion; then
# the zombie is resumed and runs to completion with its old token. fencekeeper's write
# counters (/metrics) say what happened while only the zombie ran: anything applied is
# UNSAFE (the zombie wrote); refused or nothing sent is SAFE.
#
# Each instance sees FENCING_TOKEN, FENCING_LOCK, FENCEKEEPER_URL (and ZOMBIE_CHECK_ROUND,
# ZOMBIE_CHECK_INSTANCE). A worker that exits non-zero after a 409 is fine; a worker
# still running after --timeout fails the round, and so does a holder that was not a
# zombie and failed (its lock was valid: the check needs a working job).
#
# Options:
#   --instances N        instances competing for the lock (default 2, at most 26)
#   --rounds N           rounds, each with other timings (default 3)
#   --ttl-ms MS          lock TTL (default 1000; etcd: whole seconds, at least 2)
#   --timeout S          longest run of one instance, in seconds (default 60)
#   --lock-service redis|etcd            (default redis)
#   --redis URL          redis://[:PASSWORD@]HOST:PORT of your Redis (default: a private one)
#   --etcd URL           etcd endpoints, e.g. http://127.0.0.1:2379 (default: a private one)
#   --fencekeeper URL    your fencekeeper (default: a private one, on --store). Nothing else
#                        may write through it during the check: its counters are global.
#   --store STORE        file:DIR (default: a temp dir) or postgresql://... (a fresh schema
#                        there, dropped at the end) for the private fencekeeper
#   --lock NAME          the lock's name (default zombie-check-<random>)
#   --json               print a JSON report on stdout instead of the text
#   --keep               keep the work dir (instance logs) and say where it is
#
# Exit status: 0 SAFE in every round; 1 UNSAFE in a round, or a round failed (a hang, a
# failing holder), or no holder ever wrote through fencekeeper (nothing was checked);
# 2 usage or set-up errors. Everything it started is stopped, and its temp dir removed,
# on any exit. Installs the missing tools with apt-get and builds build/fencekeeper if
# it is missing, like scripts/demo.sh (FENCEKEEPER_BIN=PATH runs that binary instead).
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
locks=$repo/scripts/locks
. "$locks/lock-events.sh"   # lock_json_str

usage() {
  sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'
}
bad_usage() { echo "zombie-check: $*" >&2; echo "usage: bash scripts/zombie-check.sh [options] -- WORKER_CMD [ARGS...] (--help)" >&2; exit 2; }
setup_error() { echo "zombie-check: set-up error: $*" >&2; exit 2; }
posint() { [[ $2 =~ ^[1-9][0-9]{0,8}$ ]] || bad_usage "$1 needs a positive integer, not \"$2\""; }

instances=2 rounds=3 ttl_ms=1000 timeout_s=60 service=redis
redis_url='' etcd_url='' fk_url='' store='' lock='' json=0 keep=0
while (($#)); do
  case $1 in
    --) shift; break ;;
    -h|--help) usage; exit 0 ;;
    --json) json=1; shift; continue ;;
    --keep) keep=1; shift; continue ;;
    --instances|--rounds|--ttl-ms|--timeout|--lock-service|--redis|--etcd|--fencekeeper|--store|--lock)
      (($# >= 2)) || bad_usage "$1 needs a value" ;;
    --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}"; continue ;;
    *) bad_usage "unknown argument \"$1\" (the worker command goes after --)" ;;
  esac
  case $1 in
    --instances) posint "$1" "$2"; instances=$2 ;;
    --rounds) posint "$1" "$2"; rounds=$2 ;;
    --ttl-ms) posint "$1" "$2"; ttl_ms=$2 ;;
    --timeout) posint "$1" "$2"; timeout_s=$2 ;;
    --lock-service) service=$2 ;;
    --redis) redis_url=$2 ;;
    --etcd) etcd_url=$2 ;;
    --fencekeeper) fk_url=${2%/} ;;
    --store) store=$2 ;;
    --lock) lock=$2 ;;
  esac
  shift 2
done
worker=("$@")
((${#worker[@]})) || bad_usage "no worker command (give it after --)"
((instances >= 2 && instances <= 26)) || bad_usage "--instances must be 2 to 26"
case $service in redis|etcd) ;; *) bad_usage "--lock-service must be redis or etcd" ;; esac
[[ $service == etcd && -n $redis_url ]] && bad_usage "--redis with --lock-service etcd"
[[ $service == redis && -n $etcd_url ]] && bad_usage "--etcd needs --lock-service etcd"
[[ -n $fk_url && -n $store ]] && bad_usage "--store is for the private fencekeeper: not with --fencekeeper"
[[ -z $fk_url || $fk_url == http://* || $fk_url == https://* ]] || bad_usage "--fencekeeper needs an http(s):// URL"
case $store in
  ''|file:?*|postgresql://*|postgres://*) ;;
  *) bad_usage "--store must be file:DIR or postgresql://..." ;;
esac
[[ -n $lock ]] || lock="zombie-check-$(od -An -N4 -tx4 /dev/urandom | tr -d ' \n')"
if [[ $service == etcd ]]; then
  etcd_ttl=$(( (ttl_ms + 999) / 1000 )); ((etcd_ttl >= 2)) || etcd_ttl=2
  eff_ttl_ms=$((etcd_ttl * 1000))
else
  eff_ttl_ms=$ttl_ms
fi

say() { ((json)) || printf '%s\n' "$*"; }
note() { printf 'zombie-check: %s\n' "$*" >&2; }

# --- what we need ----------------------------------------------------------------------
need_pkgs=()
command -v curl >/dev/null || need_pkgs+=(curl)
if [[ $service == redis ]]; then
  command -v redis-cli >/dev/null || need_pkgs+=(redis-tools)
  [[ -n $redis_url ]] || command -v redis-server >/dev/null || need_pkgs+=(redis-server)
else
  command -v etcdctl >/dev/null || need_pkgs+=(etcd-client)
  [[ -n $etcd_url ]] || command -v etcd >/dev/null || need_pkgs+=(etcd-server)
fi
[[ $store == postgres* ]] && { command -v psql >/dev/null || need_pkgs+=(postgresql-client); }
if ((${#need_pkgs[@]})); then
  note "installing ${need_pkgs[*]} ..."
  sudo=()
  [[ $EUID -eq 0 ]] || sudo=(sudo)
  { "${sudo[@]}" apt-get update -qq &&
    DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${need_pkgs[@]}"; } >&2 ||
    setup_error "could not install ${need_pkgs[*]}"
fi

if [[ -z $fk_url ]]; then
  bin=${FENCEKEEPER_BIN:-$repo/build/fencekeeper}
  [[ -z ${FENCEKEEPER_BIN:-} || -x $bin ]] || setup_error "FENCEKEEPER_BIN=$bin is not an executable file"
  if [[ ! -x $bin ]]; then
    note "building fencekeeper (first run only) ..."
    # As scripts/demo.sh: an existing build/ keeps its configuration.
    (
      cd "$repo" && bash scripts/install-deps.sh build &&
      if [[ -f build/CMakeCache.txt ]]; then cmake -S . -B build >/dev/null
      else cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFK_FAILPOINTS=OFF >/dev/null; fi &&
      cmake --build build -j"$(nproc)" --target fencekeeper >/dev/null
    ) >&2 || setup_error "could not build fencekeeper"
  fi
fi

# --- start and stop the servers --------------------------------------------------------
tmp=$(mktemp -d /tmp/zombie-check.XXXXXX) || setup_error "mktemp failed"
groups=()   # process groups of the instances
redis_pid='' etcd_pid='' fk_pid='' pg_schema=''
cleanup() {
  local rc=$?
  set +e
  trap '' INT TERM
  for g in "${groups[@]}"; do kill -CONT -- "-$g" 2>/dev/null; kill -KILL -- "-$g" 2>/dev/null; done
  for p in $fk_pid $redis_pid $etcd_pid; do kill "$p" 2>/dev/null; done
  for p in $fk_pid $redis_pid $etcd_pid; do
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
  [[ -n $pg_schema ]] && psql -X -q -d "$store" -c "DROP SCHEMA IF EXISTS $pg_schema CASCADE" >/dev/null 2>&1
  if ((keep)); then note "work dir (instance logs) kept: $tmp"; else rm -rf "$tmp"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# shellcheck source=lib/ports.sh
source "$repo/scripts/lib/ports.sh"

# A port nobody answers on can still be taken meanwhile: a server that cannot bind exits,
# and the next attempt takes another port.
if [[ $service == redis && -z $redis_url ]]; then
  for attempt in 1 2 3 4 5; do
    port=$(free_port) || setup_error "no free port found"
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
      --dir "$tmp" >"$tmp/redis.log" 2>&1 &
    redis_pid=$!
    for _ in $(seq 100); do
      redis-cli -p "$port" ping >/dev/null 2>&1 && break
      kill -0 "$redis_pid" 2>/dev/null || break
      sleep 0.05
    done
    redis-cli -p "$port" ping >/dev/null 2>&1 && break
    if ((attempt < 5)) && grep -q "Address already in use" "$tmp/redis.log"; then
      wait "$redis_pid" 2>/dev/null; redis_pid=''; continue
    fi
    setup_error "redis-server did not start: $(tail -5 "$tmp/redis.log")"
  done
  export REDIS_HOST=127.0.0.1 REDIS_PORT=$port
  unset REDISCLI_AUTH
  redis_desc="a private Redis on 127.0.0.1:$port"
elif [[ $service == redis ]]; then
  u=${redis_url#redis://}
  if [[ $u == *@* ]]; then
    auth=${u%%@*} u=${u#*@}
    auth=${auth#*:}
    [[ -n $auth ]] && export REDISCLI_AUTH=$auth
  fi
  u=${u%%/*}
  export REDIS_HOST=${u%%:*}
  [[ $u == *:* ]] && export REDIS_PORT=${u##*:} || export REDIS_PORT=6379
  redis-cli -h "$REDIS_HOST" -p "$REDIS_PORT" ping 2>&1 | grep -q PONG ||
    setup_error "Redis at $REDIS_HOST:$REDIS_PORT does not answer PING"
  redis_desc="Redis at $REDIS_HOST:$REDIS_PORT"
fi

if [[ $service == etcd && -z $etcd_url ]]; then
  for attempt in 1 2 3 4 5; do
    cport=$(free_port) || setup_error "no free port found"
    pport=$(free_port) || setup_error "no free port found"
    [[ $cport == "$pport" ]] && continue
    rm -rf "$tmp/etcd"
    etcd --name zc --data-dir "$tmp/etcd" \
      --listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
      --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
      --initial-cluster "zc=http://127.0.0.1:$pport" >"$tmp/etcd.log" 2>&1 &
    etcd_pid=$!
    ok=0
    for _ in $(seq 300); do
      ETCDCTL_API=3 etcdctl --endpoints "http://127.0.0.1:$cport" endpoint health >/dev/null 2>&1 && { ok=1; break; }
      kill -0 "$etcd_pid" 2>/dev/null || break
      sleep 0.1
    done
    ((ok)) && break
    kill "$etcd_pid" 2>/dev/null; wait "$etcd_pid" 2>/dev/null; etcd_pid=''
    if ((attempt < 5)) && grep -q "address already in use" "$tmp/etcd.log"; then continue; fi
    setup_error "etcd did not start: $(tail -5 "$tmp/etcd.log")"
  done
  etcd_url="http://127.0.0.1:$cport"
  etcd_desc="a private etcd on 127.0.0.1:$cport"
elif [[ $service == etcd ]]; then
  ETCDCTL_API=3 etcdctl --endpoints "$etcd_url" endpoint health >/dev/null 2>&1 ||
    setup_error "etcd at $etcd_url is not healthy"
  etcd_desc="etcd at $etcd_url"
fi
[[ $service == etcd ]] && export ETCDCTL_API=3 ETCDCTL_ENDPOINTS=$etcd_url

auth=()
[[ -n ${FENCEKEEPER_AUTH_TOKEN:-} ]] && auth=(-H "Authorization: Bearer $FENCEKEEPER_AUTH_TOKEN")
if [[ -z $fk_url ]]; then
  args=(--listen 127.0.0.1:0)
  if [[ $store == postgres* ]]; then
    pg_schema="zc_$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
    printf '{"postgres": {"schema": "%s"}}\n' "$pg_schema" >"$tmp/fk.json"
    args+=(--store "$store" --config "$tmp/fk.json")
    store_desc="Postgres (schema $pg_schema, dropped at the end)"
    store_json="{\"kind\":\"postgres\",\"schema\":\"$pg_schema\"}"
  else
    [[ -n $store ]] || store="file:$tmp/data"
    args+=(--store "$store")
    store_desc="the file store in ${store#file:}"
    store_json="{\"kind\":\"file\",\"dir\":$(lock_json_str "${store#file:}")}"
  fi
  : >"$tmp/fk.out"
  "$bin" "${args[@]}" >>"$tmp/fk.out" 2>"$tmp/fk.err" &
  fk_pid=$!
  for _ in $(seq 200); do
    addr=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$tmp/fk.out" 2>/dev/null | head -n 1)
    [[ -n $addr ]] && { fk_url="http://$addr"; break; }
    kill -0 "$fk_pid" 2>/dev/null || break
    sleep 0.05
  done
  [[ -n $fk_url ]] || setup_error "fencekeeper did not start: $(tail -5 "$tmp/fk.err")"
  fk_desc="a private fencekeeper on ${fk_url#http://}, $store_desc"
else
  fk_desc="fencekeeper at $fk_url"
  store_json=null
fi
ready=0
# Our own may still be connecting to Postgres: up to 30 s. Yours should be up: 3 s.
for _ in $(seq "$([[ -n $fk_pid ]] && echo 600 || echo 60)"); do
  [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$fk_url/readyz") == 200 ]] && { ready=1; break; }
  [[ -n $fk_pid ]] && ! kill -0 "$fk_pid" 2>/dev/null && break
  sleep 0.05
done
((ready)) || setup_error "fencekeeper at $fk_url is not ready${fk_pid:+: $(tail -5 "$tmp/fk.err")}"

# writes_total by result: "applied stale other" (other: every other result).
metrics() {
  curl -fsS --max-time 10 "${auth[@]}" "$fk_url/metrics" | awk '
    /^fencekeeper_writes_total\{/ {
      r = $1; sub(/.*result="/, "", r); sub(/".*/, "", r)
      if (r == "applied") a += $2; else if (r == "stale") s += $2; else o += $2; seen = 1 }
    END { if (!seen) exit 1; printf "%d %d %d\n", a, s, o }'
}
metrics >/dev/null || setup_error "cannot read fencekeeper_writes_total from $fk_url/metrics"

# --- instances -------------------------------------------------------------------------
# The handshake: the lock recipe runs this shim with the token; it says "granted" (a
# file), and an instance to be frozen then waits for its go file before it starts the
# worker. zombie-check stops the instance's whole process group, checks in /proc that
# every process in it has stopped, and only then creates the go file: the worker cannot
# send anything before the freeze, however loaded the machine.
cat >"$tmp/shim.sh" <<'EOF'
#!/usr/bin/env bash
# shim.sh DIR NAME HOLD CHECKER_PID -- WORKER...
dir=$1 name=$2 hold=$3 checker=$4; shift 5
printf '%s\n' "$FENCING_TOKEN" >"$dir/$name.granted.tmp" && mv -f "$dir/$name.granted.tmp" "$dir/$name.granted"
if [[ $hold == 1 ]]; then
  until [[ -e $dir/$name.go ]]; do
    kill -0 "$checker" 2>/dev/null || exit 70   # zombie-check is gone: do not run
    sleep 0.01
  done
fi
exec "$@"
EOF
chmod +x "$tmp/shim.sh"
export FENCEKEEPER_URL=$fk_url

declare -A pid rc token
start_instance() {  # start_instance DIR NAME HOLD WAIT_MS: its own process group
  local dir=$1 name=$2 hold=$3 wait_ms=$4 recipe
  if [[ $service == redis ]]; then
    recipe=("$locks/redis-lock.sh" "$lock" "$ttl_ms")
  else
    recipe=("$locks/etcd-lock.sh" "$lock")
  fi
  LOCK_WAIT_MS=$wait_ms ETCD_LOCK_TTL=${etcd_ttl:-} ZOMBIE_CHECK_INSTANCE=$name ZOMBIE_CHECK_ROUND=$round \
    setsid "${recipe[@]}" -- "$tmp/shim.sh" "$dir" "$name" "$hold" "$$" -- "${worker[@]}" \
    </dev/null >"$dir/$name.out" 2>"$dir/$name.err" &
  pid[$name]=$!
  groups+=($!)
}
running() {  # running PID: not exited (a zombie process counts as exited)
  local stat
  { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
  stat=${stat##*) }
  [[ ${stat:0:1} != [ZX] ]]
}
group_stopped() {  # group_stopped PGID: true when no process in the group can still run
  local f stat state pgrp
  for f in /proc/[0-9]*/stat; do
    { read -r stat <"$f"; } 2>/dev/null || continue
    read -r state _ pgrp _ <<<"${stat##*) }"
    [[ $pgrp == "$1" && $state != [TtZX] ]] && return 1
  done
  return 0
}
wait_granted() {  # wait_granted DIR NAME: 0 when it has the lock, 1 when it exited or timed out
  local deadline=$((SECONDS + timeout_s))
  while ((SECONDS < deadline)); do
    [[ -e $1/$2.granted ]] && return 0
    running "${pid[$2]}" || { [[ -e $1/$2.granted ]]; return; }
    sleep 0.01
  done
  return 1
}
finish_instance() {  # finish_instance NAME: waits up to --timeout; rc[NAME] (or "timeout")
  local p=${pid[$1]} deadline=$((SECONDS + timeout_s))
  while running "$p" && ((SECONDS < deadline)); do sleep 0.02; done
  if running "$p"; then
    kill -CONT -- "-$p" 2>/dev/null; kill -KILL -- "-$p" 2>/dev/null
    wait "$p" 2>/dev/null
    rc[$1]=timeout
  else
    wait "$p" 2>/dev/null
    rc[$1]=$?
  fi
  kill -KILL -- "-$p" 2>/dev/null   # anything the worker left running in its group
}
tail_log() { tail -n "${2:-5}" "$1" | sed -e 's/^/      | /' >&2; }

names=(A B C D E F G H I J K L M N O P Q R S T U V W X Y Z)
names=("${names[@]:0:instances}")
timing_desc=("holders waiting from the start"
             "holders started after the zombie's TTL"
             "holders waiting, zombie kept frozen longer")

say "zombie-check: ${#names[@]} instances of: ${worker[*]}"
say "  lock \"$lock\" from ${redis_desc:-$etcd_desc} (TTL $eff_ttl_ms ms), $fk_desc"

verdicts=() round_json=() holders_applied_total=0
for ((round = 1; round <= rounds; round++)); do
  dir=$tmp/round-$round
  mkdir -p "$dir"
  variant=$(( (round - 1) % 3 ))
  zi=$(( (round - 1) % instances ))
  z=${names[zi]}
  others=("${names[@]:zi+1}" "${names[@]:0:zi}")
  pid=() rc=() token=()
  problem=''

  read -r a0 s0 o0 < <(metrics) || setup_error "cannot read $fk_url/metrics"
  start_instance "$dir" "$z" 1 0
  if ! wait_granted "$dir" "$z"; then
    finish_instance "$z"
    tail_log "$dir/$z.err"
    setup_error "round $round: instance $z did not get the lock \"$lock\" (exit ${rc[$z]}); is it held by someone else?"
  fi
  token[$z]=$(<"$dir/$z.granted")
  kill -STOP -- "-${pid[$z]}" 2>/dev/null || setup_error "instance $z is gone: nothing to freeze"
  stopped=0
  for _ in $(seq 1000); do group_stopped "${pid[$z]}" && { stopped=1; break; }; sleep 0.01; done
  ((stopped)) || setup_error "instance $z did not stop within 10 s of SIGSTOP"
  touch "$dir/$z.go"   # seen only after SIGCONT

  if ((variant == 1)); then
    sleep "$(( (eff_ttl_ms + 300) / 1000 )).$(printf '%03d' $(( (eff_ttl_ms + 300) % 1000 )))"
  fi
  for n in "${others[@]}"; do start_instance "$dir" "$n" 0 $((timeout_s * 1000)); done
  for n in "${others[@]}"; do
    finish_instance "$n"
    [[ -e $dir/$n.granted ]] && token[$n]=$(<"$dir/$n.granted")
  done
  read -r a1 s1 o1 < <(metrics) || setup_error "cannot read $fk_url/metrics"
  if ((variant == 2)); then
    hold=$(( eff_ttl_ms / 2 > 200 ? eff_ttl_ms / 2 : 200 ))
    sleep "$((hold / 1000)).$(printf '%03d' $((hold % 1000)))"
  fi
  kill -CONT -- "-${pid[$z]}"
  finish_instance "$z"
  read -r a2 s2 o2 < <(metrics) || setup_error "cannot read $fk_url/metrics"

  h_applied=$((a1 - a0)) h_stale=$((s1 - s0)) h_other=$((o1 - o0))
  z_applied=$((a2 - a1)) z_stale=$((s2 - s1)) z_other=$((o2 - o1))
  z_sent=$((z_applied + z_stale + z_other))
  holders_applied_total=$((holders_applied_total + h_applied))
  for n in "${others[@]}"; do
    if [[ -z ${token[$n]:-} ]]; then problem+="$n never got the lock (exit ${rc[$n]}); "
    elif [[ ${rc[$n]} == timeout ]]; then problem+="$n still ran after ${timeout_s} s; "
    elif [[ ${rc[$n]} != 0 ]]; then problem+="$n, a valid holder, exited ${rc[$n]}; "
    fi
  done
  [[ ${rc[$z]} == timeout ]] && problem+="the zombie $z still ran after ${timeout_s} s; "
  if ((z_applied > 0)); then verdict=UNSAFE
  elif [[ -n $problem ]]; then verdict=FAIL
  else verdict=SAFE
  fi
  verdicts+=("$verdict")

  holders_txt='' holders_js=''
  for n in "${others[@]}"; do
    holders_txt+="$n (token ${token[$n]:-none}, exit ${rc[$n]}), "
    holders_js+="${holders_js:+,}{\"instance\":\"$n\",\"token\":${token[$n]:-null},\"exit\":$(
      [[ ${rc[$n]} == timeout ]] && echo '"timeout"' || echo "${rc[$n]}")}"
  done
  if ((z_sent == 0)); then zombie_txt="sent no write"
  else
    zombie_txt="sent $z_sent write(s), fencekeeper applied $z_applied, refused $z_stale as stale"
    ((z_other)) && zombie_txt+=", answered $z_other otherwise"
  fi
  # One line per round.
  say "round $round/$rounds [${timing_desc[variant]}]: $z frozen with token ${token[$z]}; ${holders_txt%, } took over, $h_applied write(s) applied; $z resumed: $zombie_txt; $z exited ${rc[$z]} -> $verdict${problem:+ (${problem%; })}"
  if [[ -n $problem ]]; then   # what the worker said, without the lock events
    for n in "$z" "${others[@]}"; do
      grep -v '^{"event":"lock_' "$dir/$n.err" >"$dir/$n.said" 2>/dev/null
      [[ -s $dir/$n.said ]] && { echo "    $n's standard error (last lines):" >&2; tail_log "$dir/$n.said"; }
    done
  fi
  round_json+=("{\"round\":$round,\"timing\":$(lock_json_str "${timing_desc[variant]}"),\"zombie\":{\"instance\":\"$z\",\"token\":${token[$z]},\"exit\":$(
    [[ ${rc[$z]} == timeout ]] && echo '"timeout"' || echo "${rc[$z]}"),\"writes_sent\":$z_sent,\"applied\":$z_applied,\"stale\":$z_stale,\"other\":$z_other},\"holders\":[${holders_js}],\"holders_writes\":{\"applied\":$h_applied,\"stale\":$h_stale,\"other\":$h_other},\"verdict\":\"$verdict\",\"problem\":$(
    [[ -n $problem ]] && lock_json_str "${problem%; }" || echo null)}")
done

# --- the verdict -----------------------------------------------------------------------
# The three lock metrics, from the JSON lines the recipes printed on standard error.
declare -A ev=([lock_contended]=0 [lock_lost]=0 [lock_release_failed]=0)
while read -r e; do
  [[ -n $e ]] && ev[$e]=$((${ev[$e]:-0} + 1))
done < <(cat "$tmp"/round-*/*.err 2>/dev/null | sed -n 's/^{"event":"\(lock_[a-z_]*\)".*/\1/p')

unsafe=() failed=()
for i in "${!verdicts[@]}"; do
  [[ ${verdicts[i]} == UNSAFE ]] && unsafe+=($((i + 1)))
  [[ ${verdicts[i]} == FAIL ]] && failed+=($((i + 1)))
done
if ((${#unsafe[@]})); then
  verdict=UNSAFE
  why="in round(s) ${unsafe[*]} fencekeeper applied writes the zombie sent after its lock had passed to another holder: every write must carry \$FENCING_TOKEN and \$FENCING_LOCK (docs/testing.md)"
elif ((${#failed[@]})); then
  verdict=FAIL
  why="round(s) ${failed[*]} failed (above): the check could not run to the end"
elif ((holders_applied_total == 0)); then
  verdict=FAIL
  why="no holder ever had a write applied through fencekeeper ($fk_url): nothing was checked (does the worker use \$FENCEKEEPER_URL?)"
else
  verdict=SAFE
  why="in all $rounds rounds fencekeeper applied nothing the zombie sent after its lock expired"
fi
status=1
[[ $verdict == SAFE ]] && status=0

if ((json)); then
  printf '{"verdict":"%s","exit":%d,"reason":%s,"worker":[' "$verdict" "$status" "$(lock_json_str "$why")"
  sep=''
  for w in "${worker[@]}"; do printf '%s%s' "$sep" "$(lock_json_str "$w")"; sep=,; done
  printf '],"lock":%s,"lock_service":"%s","ttl_ms":%d,"instances":%d,"fencekeeper":%s,"store":%s,' \
    "$(lock_json_str "$lock")" "$service" "$eff_ttl_ms" "$instances" "$(lock_json_str "$fk_url")" "$store_json"
  printf '"lock_metrics":{"lock_contended":%d,"lock_lost":%d,"lock_release_failed":%d},"rounds":[' \
    "${ev[lock_contended]}" "${ev[lock_lost]}" "${ev[lock_release_failed]}"
  sep=''
  for r in "${round_json[@]}"; do printf '%s%s' "$sep" "$r"; sep=,; done
  printf ']}\n'
else
  say "lock metrics: ${ev[lock_contended]} contended acquisition(s), ${ev[lock_lost]} hold(s) outlived the lock, ${ev[lock_release_failed]} failed release(s)"
  say "$verdict: $why"
fi
exit $status
