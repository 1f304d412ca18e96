#!/usr/bin/env bash
# A zombie writer, stopped: the three-instance cron story, with real processes.
#
#   bash scripts/demo.sh            (DEMO_FAST=1 skips the pauses meant for reading)
#
# Starts a private Redis and a fencekeeper (file store) on free loopback ports in a
# temp dir, builds build/fencekeeper first if it is missing (installing what is needed
# with apt-get), then runs three instances A, B and C of a nightly job that takes a
# Redis lock (scripts/locks/redis-lock.sh: SET NX PX + INCR for the fencing token) and
# stores the daily report through fencekeeper with curl. A is frozen with SIGSTOP while
# it holds the lock. Everything it started is stopped and removed on exit.
#
# The freeze is a handshake, not a race against A's work: once A has the lock and has
# started working, it waits for a go file; the script stops A's whole process group,
# waits until every process in it is stopped, and only then creates the file. So A's
# write always comes after the freeze, however slow the machine or long the pauses.
# FENCEKEEPER_BIN=PATH runs that binary instead of build/fencekeeper.
set -euo pipefail

cd "$(dirname "$0")/.."
repo=$PWD

LOCK=daily-report
KEY=reports/2026-11-29.csv
TTL_MS=2000

# --- output --------------------------------------------------------------------------
if [[ -t 1 ]]; then
  b=$'\e[1m' dim=$'\e[2m' red=$'\e[31m' grn=$'\e[32m' yel=$'\e[33m' off=$'\e[0m'
else
  b='' dim='' red='' grn='' yel='' off=''
fi
say()   { printf '%s\n' "$*"; }
step()  { printf '\n%s== %s%s\n' "$b" "$*" "$off"; }
note()  { printf '%s   %s%s\n' "$dim" "$*" "$off"; }
beat()  { [[ ${DEMO_FAST:-0} == 1 ]] || sleep "${1:-1.2}"; }
die()   { printf '%sdemo: %s%s\n' "$red" "$*" "$off" >&2; exit 1; }

# --- what we need ----------------------------------------------------------------------
need_pkgs=()
command -v redis-server >/dev/null || need_pkgs+=(redis-server)
command -v redis-cli >/dev/null || need_pkgs+=(redis-tools)
command -v curl >/dev/null || need_pkgs+=(curl)
if ((${#need_pkgs[@]})); then
  say "Installing ${need_pkgs[*]} ..."
  sudo=()
  [[ $EUID -eq 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${need_pkgs[@]}" >/dev/null
fi

if [[ -n ${FENCEKEEPER_BIN:-} ]]; then
  bin=$FENCEKEEPER_BIN
  [[ -x $bin ]] || die "FENCEKEEPER_BIN=$bin is not an executable file"
else
  bin=$repo/build/fencekeeper
fi
if [[ ! -x $bin ]]; then
  say "Building fencekeeper (first run only) ..."
  bash scripts/install-deps.sh build
  # An existing build/ keeps its configuration (scripts/test.sh configures it with the
  # file store's failpoints compiled in): reconfiguring it here would flip that option
  # and rebuild everything on the next test run.
  if [[ -f build/CMakeCache.txt ]]; then
    cmake -S . -B build >/dev/null
  else
    cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFK_FAILPOINTS=OFF >/dev/null
  fi
  cmake --build build -j"$(nproc)" --target fencekeeper >/dev/null
fi

# --- start and stop the servers --------------------------------------------------------
tmp=$(mktemp -d /tmp/fencekeeper-demo.XXXXXX)
pids=()     # process groups of the job instances
redis_pid='' fk_pid=''
cleanup() {
  local rc=$?
  set +e
  for p in "${pids[@]}"; do kill -CONT -- "-$p" 2>/dev/null; kill -KILL -- "-$p" 2>/dev/null; done
  [[ -n $fk_pid ]] && kill "$fk_pid" 2>/dev/null && wait "$fk_pid" 2>/dev/null
  [[ -n $redis_pid ]] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
  rm -rf "$tmp"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# shellcheck source=lib/ports.sh
source scripts/lib/ports.sh

# A port nobody answers on can still be taken (by another program's outgoing connection,
# or a listener that starts meanwhile): a Redis that cannot bind exits, and the next
# attempt takes another port.
for attempt in 1 2 3 4 5; do
  redis_port=$(free_port) || die "no free port found"
  redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$tmp" >"$tmp/redis.log" 2>&1 &
  redis_pid=$!
  for _ in $(seq 100); do
    redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
    kill -0 "$redis_pid" 2>/dev/null || break
    sleep 0.05
  done
  redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
  if ((attempt < 5)) && grep -q "Address already in use" "$tmp/redis.log"; then
    wait "$redis_pid" 2>/dev/null || true
    redis_pid=''
    continue
  fi
  die "redis-server did not start: $(tail -5 "$tmp/redis.log")"
done

: >"$tmp/fk.out"   # exists before the background job opens it (we read it right away)
"$bin" --listen 127.0.0.1:0 --store "file:$tmp/data" >>"$tmp/fk.out" 2>"$tmp/fk.err" &
fk_pid=$!
fk=''
for _ in $(seq 200); do
  addr=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' "$tmp/fk.out" 2>/dev/null | head -n 1 || true)
  [[ -n $addr ]] && { fk="http://$addr"; break; }
  kill -0 "$fk_pid" 2>/dev/null || break
  sleep 0.05
done
[[ -n $fk ]] || die "fencekeeper did not start: $(tail -5 "$tmp/fk.err")"
for _ in $(seq 100); do
  [[ $(curl -s -o /dev/null -w '%{http_code}' "$fk/readyz") == 200 ]] && break; sleep 0.05
done

# --- the job every instance runs (under the lock) --------------------------------------
cat >"$tmp/job.sh" <<'EOF'
#!/usr/bin/env bash
# job.sh NAME WORK_SECONDS [GO_FILE]: build today's report and store it through
# fencekeeper. Runs under scripts/locks/redis-lock.sh, which exports FENCING_TOKEN and
# FENCING_LOCK. With GO_FILE, the work waits until that file exists (the freeze handshake).
name=$1 work=$2 go=${3:-}
pre="   [$name]"
echo "$FENCING_TOKEN" >"$DEMO_DIR/$name.token"
echo "$pre I have the lock \"$FENCING_LOCK\", fencing token $FENCING_TOKEN"
code=$(curl -s -o /dev/null -w '%{http_code}' "$FK/v1/resources/$KEY")
if [[ $code == 200 ]]; then
  echo "$pre the report is already there: nothing to do"
  touch "$DEMO_DIR/$name.done"; exit 0
fi
echo "$pre no report yet, building it (${work}s of work) ..."
touch "$DEMO_DIR/$name.working"
if [[ -n $go ]]; then
  for _ in $(seq 1200); do [[ -e $go ]] && break; sleep 0.05; done
  [[ -e $go ]] || { echo "$pre no go signal within 60 s: giving up" >&2; exit 1; }
fi
sleep "$work"
echo "$pre done; storing the report with Fencing-Token: $FENCING_TOKEN"
code=$(curl -s -o "$DEMO_DIR/$name.reply" -w '%{http_code}' -X PUT "$FK/v1/resources/$KEY" \
  -H "Fencing-Token: $FENCING_TOKEN" -H "Fencing-Lock: $FENCING_LOCK" -H 'Content-Type: text/csv' \
  --data-binary "day,revenue,made_by
2026-11-29,1234.56,instance $name (token $FENCING_TOKEN)")
echo "$code" >"$DEMO_DIR/$name.code"
echo "$pre fencekeeper answered $code: $(cat "$DEMO_DIR/$name.reply")"
touch "$DEMO_DIR/$name.done"
EOF
chmod +x "$tmp/job.sh"
export DEMO_DIR=$tmp FK=$fk KEY REDIS_HOST=127.0.0.1 REDIS_PORT=$redis_port

start_instance() {  # start_instance NAME WORK_SECONDS [LOCK_WAIT_MS [GO_FILE]]: own process group
  LOCK_WAIT_MS=${3:-0} setsid "$repo/scripts/locks/redis-lock.sh" "$LOCK" "$TTL_MS" -- \
    "$tmp/job.sh" "$1" "$2" ${4:+"$4"} &
  pids+=($!)
}
group_stopped() {  # group_stopped PGID: true when no process in the group can still run
  local f stat state pgrp
  for f in /proc/[0-9]*/stat; do
    { read -r stat <"$f"; } 2>/dev/null || continue
    # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
    read -r state _ pgrp _ <<<"${stat##*) }"
    [[ $pgrp == "$1" && $state != [TtZX] ]] && return 1
  done
  return 0
}
freeze() {  # freeze PGID: SIGSTOP the group and wait until every process in it has stopped
  kill -STOP -- "-$1" 2>/dev/null || die "process group $1 is gone: nothing to freeze"
  for _ in $(seq 1000); do group_stopped "$1" && return 0; sleep 0.01; done
  die "process group $1 did not stop within 10 s of SIGSTOP"
}
wait_file() {  # wait_file PATH SECONDS
  local n=$(( $2 * 20 ))
  for _ in $(seq "$n"); do [[ -e $1 ]] && return 0; sleep 0.05; done
  die "timed out waiting for $(basename "$1")"
}

# --- the story -------------------------------------------------------------------------
say "${b}fencekeeper demo: three cron instances, one frozen lock holder${off}"
note "Redis on 127.0.0.1:$redis_port (the lock service), fencekeeper on ${fk#http://} (file store in $tmp/data)"
note "Every night three instances A, B and C of the same job wake up. Only one of them should"
note "build the daily report, so each takes the Redis lock \"$LOCK\" first (SET NX PX $TTL_MS ms),"
note "and gets a fencing token from the counter fence:$LOCK in the same Lua script (INCR)."
redis-cli -p "$redis_port" SET "fence:$LOCK" 100 >/dev/null
note "(The counter has been running for a while: it stands at 100.)"
beat

step "00:00:00  A starts first and takes the lock"
start_instance A 1 0 "$tmp/A.go"
wait_file "$tmp/A.working" 10
a_tok=$(cat "$tmp/A.token")
beat

step "00:00:01  A is frozen (SIGSTOP) in the middle of its work"
freeze "${pids[0]}"
touch "$tmp/A.go"   # A, frozen, cannot see it until SIGCONT
note "Think of a stop-the-world GC pause, a VM being migrated, a laptop lid closed."
note "A still believes it holds the lock. The lock's $((TTL_MS / 1000)) s TTL keeps running in Redis."
beat

step "B starts and waits for the lock"
start_instance B 0.5 15000
note "The lock is still A's, so B retries every 50 ms ..."
wait_file "$tmp/B.token" 15
b_tok=$(cat "$tmp/B.token")
say "   ${yel}A's lock expired while A was frozen: B got the lock, with token $b_tok${off}"
wait_file "$tmp/B.done" 10
[[ $(cat "$tmp/B.code" 2>/dev/null) == 201 ]] || die "B's write was not accepted: $(cat "$tmp/B.reply" 2>/dev/null)"
beat

step "C starts a little later"
start_instance C 0.5 15000
wait_file "$tmp/C.done" 15
c_tok=$(cat "$tmp/C.token")
note "C took the lock after B had released it (token $c_tok), found the report and did nothing."
beat

step "A wakes up (SIGCONT) and finishes as if nothing happened"
note "Nobody told A that its lock expired. It writes its report with its old token $a_tok."
kill -CONT -- "-${pids[0]}"
wait_file "$tmp/A.done" 15
a_code=$(cat "$tmp/A.code")
fence=$(curl -s "$fk/v1/fences/$LOCK" | grep -o '"token"[[:space:]]*:[[:space:]]*[0-9]*' | grep -o '[0-9]*$')
if [[ $a_code == 409 ]]; then
  say "   ${grn}fencekeeper rejected A's write: 409 stale_token. A sent token $a_tok, the fence for \"$LOCK\" is $fence.${off}"
else
  say "   ${red}A's write was answered $a_code: fencekeeper did not stop the zombie!${off}"
fi
beat

step "The report in storage"
report=$(curl -s -D "$tmp/get.headers" "$fk/v1/resources/$KEY")
stored_tok=$(sed -n 's/^[Ff]encing-[Tt]oken:[[:space:]]*\([0-9]*\).*/\1/p' "$tmp/get.headers")
printf '%s\n' "$report" | sed 's/^/   | /'
if [[ $a_code == 409 && $stored_tok == "$b_tok" ]]; then
  say "   ${grn}The report is B's (written with token $b_tok). A's late write never reached storage.${off}"
  note "Without the fence, A's write would have replaced B's report with one built from"
  note "stale data, and nobody would have noticed: tests/integration/test_zombie_cron.py"
  note "runs this race 20 times with and without fencekeeper to show both outcomes."
  note "More recipes (etcd, Postgres, ZooKeeper, Redis failover recovery): docs/locks.md"
  exit 0
fi
say "   ${red}Unexpected: the stored report carries token ${stored_tok:-none}, B wrote with $b_tok.${off}"
exit 1
