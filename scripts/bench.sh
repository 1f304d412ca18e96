#!/usr/bin/env bash
# The side-by-side benchmark (docs/benchmarks.md). One command on a fresh Debian 12, as root:
#
#   bash scripts/bench.sh                full run: 3 rounds, 10 s per measurement (~20 min
#                                        on 2 cores); writes docs/benchmarks.md and
#                                        docs/bench-throughput.png
#   bash scripts/bench.sh --quick        smoke run: 1 round, 3 s per measurement, 50k
#                                        locks for the memory figure (~3 min); results go
#                                        to build-bench/bench-results-quick/ only
#   options: --rounds N  --duration S  --clients "8 32 128"  --mem-locks N
#            --body-bytes B  --pg-script FILE  --no-docs  --docs
#            --only "P S"   measure only these scenarios (never writes docs/; e.g. --only L)
#            --stale-store file   S's fencekeepers use a file store instead of Postgres (the
#                           stale-rejection rate of the file store; never writes docs/)
#            --lat-rate R   open-loop latency at R req/s instead of 70% of peak (never writes docs/)
#            --warmup S     seconds of the same open-loop load, not measured, before each
#                           latency run (default 2, 1 with --quick; 0 for none)
#            --tick-us U    the open-loop generator sends on U-µs ticks, like wrk2's 1 ms
#                           timers (default 1000; 0 sends each request at its own due time)
#            --profile      also profile P and F at each client count: one extra fencekeeper
#                           run each with CPU split, batch sizes, WAL flushes, and (when
#                           `perf` can record here) where the CPU time goes by process,
#                           library and system call; installs linux-perf
#            --baseline-rev REV  the build to compare with (default: the previous release,
#                           $previous_release below, or FK_BENCH_PREVIOUS; `none` for no
#                           comparison): REV's fencekeeper (any git revision: main, HEAD~1,
#                           a hash) is built from `git archive` into build-bench/prev-src
#                           (never committed; rebuilt only when REV resolves to another
#                           commit) and run beside this build, in every round, for each of
#                           P, F, S and H chosen and each client count, the two in
#                           alternating order right before the baseline, P's and S's on a
#                           database of their own; the report adds this build's throughput
#                           and CPU-µs per request ÷ REV's (median and range over rounds),
#                           and, when REV is the previous release, the targets on them.
#                           Latency and memory runs stay on this build only.
#
# Installs what is missing (wrk, nginx, Postgres, gnuplot, build deps), builds a Release
# fencekeeper into build-bench/, starts a private Postgres, nginx and fencekeepers on free
# loopback ports in a temp dir, and compares, interleaved A/B per round:
#   P  PUT -> fencekeeper -> Postgres        vs pgbench -M prepared, the same fenced upsert
#   F  PUT -> fencekeeper file store         vs scripts/bench/durable_write_baseline.cpp
#   S  stale PUT (409) -> fencekeeper/pg     vs nginx `return 409`, same wrk script
#   H  GET /healthz                          vs nginx `return 204`
#   T  a 10-op transaction (POST /v1/transactions, 10 puts) vs a single PUT, one client
#      (latency at low load) and 8, on P's and F's fencekeepers, one right after the other
#   I  P's and F's PUTs with an Idempotency-Key on every write (a new key each) vs the same
#      PUTs without one, on the same fencekeepers, one right after the other; and replays
#      (the same keyed PUTs, already applied, sent again) vs those keyed writes
#   L  H and S over TLS (rows H-TLS, S-TLS): two more fencekeepers with --tls-cert/--tls-key
#      vs an nginx `ssl` server with the same certificate (self-signed EC P-256, made with
#      openssl in the temp dir for this run), `wrk https://`, keep-alive
# Reports medians over rounds of per-round ratios, open-loop p50/p99 at 70% of peak (one
# run per round, median and every round shown, with a 10 ms timeline of each run)
# (scripts/bench/openloop.cpp), CPU-µs per request and peak RSS of fencekeeper, and RSS
# after 1M distinct locks, and for P the CPU Postgres spends per write on either side, as a
# reference for P's ratio the database's ceiling for fencekeeper's batches (its batch
# statement alone, scripts/bench/pg_batch_ceiling.cpp, in batches of the size fencekeeper
# formed), and as a reference for P's p99, Postgres alone open loop (pgbench -R at 70% of
# its own peak).
# Everything it starts is stopped on exit. FK_BENCH_PG_EXTRA="-c name=value ..." adds
# Postgres settings for an experiment (the report's Postgres line shows them), and
# FK_BENCH_FK_ARGS="--flag value ..." flags for P's fencekeeper.
set -euo pipefail

cd "$(dirname "$0")/.."
repo="$PWD"
cmdline="bash scripts/bench.sh${*:+ $*}"

rounds=3
duration=10
clients="8 32 128"
mem_locks=1000000
body_bytes=256
quick=0
docs=auto
stale_keys=10000
pg_script=scripts/bench/pg_fenced_upsert.sql
only="P F S H I T L"
lat_rate=""
warmup=""
tick_us=1000
profile=0
# The previous release, which every run compares with by default (--baseline-rev): there
# is no release tag yet, so it is pinned to 32d0e1a, the commit before Idempotency-Keys,
# floors and transactions (issue 46). Move it when a release is cut; FK_BENCH_PREVIOUS
# overrides it for one run.
previous_release=32d0e1a
baseline_rev="${FK_BENCH_PREVIOUS:-$previous_release}"
stale_store=postgres
while (($#)); do
    case "$1" in
        --quick) quick=1 ;;
        --rounds) rounds="$2"; shift ;;
        --duration) duration="$2"; shift ;;
        --clients) clients="$2"; shift ;;
        --mem-locks) mem_locks="$2"; shift ;;
        --body-bytes) body_bytes="$2"; shift ;;
        --pg-script) pg_script="$2"; shift ;;
        --docs) docs=1 ;;
        --only) only="$2"; docs=0; shift ;;
        --lat-rate) lat_rate="$2"; docs=0; shift ;;
        --warmup) warmup="$2"; shift ;;
        --tick-us) tick_us="$2"; shift ;;
        --no-docs) docs=0 ;;
        --profile) profile=1 ;;
        --baseline-rev) baseline_rev="$2"; shift ;;
        --stale-store) stale_store="$2"; docs=0; shift ;;
        -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 0 ;;
        *) echo "bench.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done
if ((quick)); then
    # Explicit flags given after --quick still win for rounds/duration/mem-locks only when
    # they come later on the line; --quick sets the smoke defaults.
    [[ " $cmdline " == *" --rounds "* ]] || rounds=1
    [[ " $cmdline " == *" --duration "* ]] || duration=3
    [[ " $cmdline " == *" --mem-locks "* ]] || mem_locks=50000
    stale_keys=2000
fi
[[ -n $warmup ]] || warmup=$((quick ? 1 : 2))
for scen in $only; do
    [[ $scen == [PFSHITL] ]] || { echo "bench.sh: --only takes scenarios out of P F S H I T L" >&2; exit 2; }
done
want() { [[ " $only " == *" $1 "* ]]; }
[[ $docs == auto ]] && docs=$((quick ? 0 : 1))
[[ "$rounds" =~ ^[1-9][0-9]*$ && "$duration" =~ ^[1-9][0-9]*$ && "$mem_locks" =~ ^[0-9]+$ &&
   "$warmup" =~ ^[0-9]+$ && "$tick_us" =~ ^[0-9]+$ ]] \
    || { echo "bench.sh: --rounds, --duration, --mem-locks, --warmup and --tick-us take integers (the first two positive)" >&2; exit 2; }

t_start=$SECONDS
log() { printf '== [%4ds] %s\n' $((SECONDS - t_start)) "$*" >&2; }

# --- packages ----------------------------------------------------------------------
# The build packages are those of scripts/install-deps.sh build; checked here so that
# `apt-get update` runs at most once for everything.
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'; }
missing=()
for p in build-essential cmake nlohmann-json3-dev libpq-dev libsqlite3-dev libssl-dev openssl python3 wrk postgresql gnuplot-nox procps; do
    installed "$p" || missing+=("$p")
done
if ! installed libboost1.81-dev; then
    v="$(dpkg-query -W -f='${Version}' libboost-dev 2>/dev/null || true)"
    installed libboost-dev && dpkg --compare-versions "${v:-0}" ge 1.81 || missing+=(libboost1.81-dev)
fi
((profile)) && { installed linux-perf || missing+=(linux-perf); }
if ! { installed nginx-light || installed nginx || installed nginx-core || installed nginx-full ||
       installed nginx-extras; }; then
    missing+=(nginx-light)
fi
if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    [[ $EUID -eq 0 ]] || { echo "bench.sh: run as root to install: ${missing[*]}" >&2; exit 1; }
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    # policy-rc.d 101: installing postgresql/nginx must not start their system services.
    policy=/usr/sbin/policy-rc.d created_policy=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"; chmod +x "$policy"; created_policy=1
    fi
    rc=0
    apt-get install -y -q --no-install-recommends "${missing[@]}" || rc=$?
    ((created_policy)) && rm -f "$policy"
    ((rc == 0)) || exit $rc
fi
[[ $EUID -eq 0 ]] || { echo "bench.sh: run as root (Postgres runs as the postgres user via runuser)" >&2; exit 1; }

# --- build -------------------------------------------------------------------------
build=build-bench
tools="$build/bench-tools"
results="$build/bench-results"
((quick)) && results+=-quick
mkdir -p "$tools" "$results"
# One run at a time per tree, cleanup included: removing a finished run's millions of
# files keeps the disk busy for minutes, and a run measured meanwhile is not comparable
# (a file-store baseline round fell to 1,300 writes/s that way).
# Long-lived children (Postgres, fencekeepers, nginx) start with fd 9 closed, so that
# none of them could keep the lock past this script.
exec 9>"$build/.bench.lock"
if ! flock -n 9; then
    log "another bench.sh (or its cleanup) is running in this tree: waiting for it"
    flock 9
fi
# What is built is the work tree as it is now: record it before building, since others
# may commit while the rounds run.
built_from="$(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD -- proxy backends fence config CMakeLists.txt 2>/dev/null || echo ' + uncommitted changes in the work tree'), built $(date -u '+%H:%M UTC')"
log "building $build (Release)"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DFK_BUILD_TESTS=OFF >/dev/null
nice -n 5 cmake --build "$build" -j"$(nproc)" --target fencekeeper >"$results/build.log" 2>&1 \
    || { tail -n 40 "$results/build.log" >&2; echo "bench.sh: build failed" >&2; exit 1; }
fk="$repo/$build/fencekeeper"
# --baseline-rev: REV's fencekeeper, built the same way from REV's own files. The source
# keeps one path (build-bench/prev-src) so that ccache and CMake reuse earlier builds.
fk_prev=""
prev_desc=""
[[ $baseline_rev == none ]] && baseline_rev=""
# The previous-release targets apply when the comparison is with that release.
prev_is_release=0
if [[ -n $baseline_rev ]]; then
    prev_sha="$(git rev-parse --verify --quiet "$baseline_rev^{commit}")" \
        || { echo "bench.sh: --baseline-rev $baseline_rev is not a commit here" >&2; exit 2; }
    prev_desc="$(git rev-parse --short "$prev_sha")"
    [[ $baseline_rev == "$prev_desc" ]] || prev_desc+=" ($baseline_rev)"
    [[ "$(git rev-parse --verify --quiet "$previous_release^{commit}")" == "$prev_sha" ]] && prev_is_release=1
    prev_src="$build/prev-src"
    if [[ "$(cat "$prev_src/.fk-rev" 2>/dev/null)" != "$prev_sha" ]]; then
        rm -rf "$prev_src"
        mkdir -p "$prev_src"
        git archive "$prev_sha" | tar -x -C "$prev_src"
        echo "$prev_sha" >"$prev_src/.fk-rev"
    fi
    log "building $build/prev-build from $prev_desc (Release)"
    cmake -S "$prev_src" -B "$build/prev-build" -DCMAKE_BUILD_TYPE=Release -DFK_BUILD_TESTS=OFF >/dev/null
    nice -n 5 cmake --build "$build/prev-build" -j"$(nproc)" --target fencekeeper >"$results/build-prev.log" 2>&1 \
        || { tail -n 40 "$results/build-prev.log" >&2; echo "bench.sh: building $prev_desc failed" >&2; exit 1; }
    fk_prev="$repo/$build/prev-build/fencekeeper"
fi
boost_inc=()
[[ -d /usr/include/boost ]] || boost_inc=(-I/usr/include/boost1.81)
for t in openloop durable_write_baseline; do
    if [[ ! -x $tools/$t || scripts/bench/$t.cpp -nt $tools/$t ]]; then
        log "compiling scripts/bench/$t.cpp"
        g++ -O2 -std=c++20 -pthread "${boost_inc[@]}" "scripts/bench/$t.cpp" -o "$tools/$t"
    fi
done
openloop="$repo/$tools/openloop"
baseline="$repo/$tools/durable_write_baseline"
# Links the store's own SQL code from this build, so it is rebuilt with it every run.
g++ -O2 -std=c++20 "${boost_inc[@]}" -I. -I/usr/include/postgresql scripts/bench/pg_batch_ceiling.cpp \
    "$build/libfk_store_pg.a" "$build/libfk_store.a" "$build/libfk_asio.a" "$build/libfk_fence.a" -lpq \
    -o "$tools/pg_batch_ceiling" || { echo "bench.sh: building pg_batch_ceiling failed" >&2; exit 1; }
ceiling="$repo/$tools/pg_batch_ceiling"

[[ -f $pg_script ]] || { echo "bench.sh: $pg_script is missing" >&2; exit 1; }

# --- services ----------------------------------------------------------------------
tmp="$(mktemp -d /tmp/fk-bench.XXXXXX)"
chmod 755 "$tmp"
pids=()
pg_data=""
pg_ctl=""
cleanup() {
    local rc=$?
    set +e
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
    for pid in "${pids[@]}"; do
        for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    if [[ -n "$pg_data" && -f "$pg_data/postmaster.pid" ]]; then
        runuser -u postgres -- "$pg_ctl" -D "$pg_data" -m fast -w stop >/dev/null 2>&1
    fi
    rm -rf "$tmp"
    [[ -n ${shm_dir:-} ]] && rm -rf "$shm_dir"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

read -r pg_port nginx_port nginx_tls_port < <(python3 - <<'EOF'
import socket
socks = []
for _ in range(3):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
)

wait_for() {   # wait_for NAME SECONDS CMD...
    local name=$1 secs=$2; shift 2
    local deadline=$((SECONDS + secs))
    until "$@" >/dev/null 2>&1; do
        if ((SECONDS >= deadline)); then
            echo "bench.sh: $name did not become ready within ${secs}s" >&2
            return 1
        fi
        sleep 0.2
    done
}

pg_bin=/usr/lib/postgresql/15/bin
[[ -x $pg_bin/initdb ]] || pg_bin="$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
pg_ctl="$pg_bin/pg_ctl"
pg_dir="$tmp/pg"
pg_data="$pg_dir/data"
mkdir -p "$pg_dir/sock"
chown -R postgres:postgres "$pg_dir"
# Durable defaults (fsync, synchronous_commit, full_page_writes on); more room than the
# defaults so that neither side waits on a checkpoint or a connection slot.
pg_settings="-c listen_addresses=127.0.0.1 -p $pg_port -k $pg_dir/sock -c max_connections=400"
# max_wal_size is above what a whole run writes (about 5 GB), so no checkpoint starts in
# the middle of a measurement; min_wal_size makes the CHECKPOINT before the latency runs
# recycle the segments written so far (see there).
pg_settings+=" -c shared_buffers=256MB -c max_wal_size=16GB -c min_wal_size=8GB -c checkpoint_timeout=60min"
pg_settings+=" ${FK_BENCH_PG_EXTRA:-}"
log "starting Postgres on 127.0.0.1:$pg_port"
runuser -u postgres -- "$pg_bin/initdb" -D "$pg_data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 \
    >"$pg_dir/initdb.log" 2>&1 || { cat "$pg_dir/initdb.log" >&2; exit 1; }
runuser -u postgres -- "$pg_ctl" -D "$pg_data" -l "$pg_dir/server.log" -w -t 60 -o "$pg_settings" start \
    >/dev/null 9>&- || { cat "$pg_dir/server.log" >&2; exit 1; }
wait_for Postgres 60 "$pg_bin/pg_isready" -h 127.0.0.1 -p "$pg_port" -U postgres
# How fast this disk makes a WAL flush today: pg_test_fsync's one-8kB-write fdatasync
# (Linux's default wal_sync_method), on the file system of Postgres's data directory, 1 s
# per method, before any load. P's ratio to pgbench means little without it: on a disk
# with cheap flushes pgbench is fast and the ratio small, on a slow one the opposite
# (docs/benchmarks.md, "This run"); the ratio to the previous release does not move so.
fsync_line=""
if [[ -x $pg_bin/pg_test_fsync ]]; then
    fsync_out="$(cd "$pg_dir" && timeout 120 "$pg_bin/pg_test_fsync" -s 1 -f "$pg_dir/fsync.test" 2>&1 || true)"
    rm -f "$pg_dir/fsync.test"
    fsync_line="$(awk '/^ *fdatasync / && $2 != "n/a" { printf "%s ops/s, %s us/op", $2, $4; exit }' <<<"$fsync_out")"
    log "disk: fdatasync ${fsync_line:-not measured} (pg_test_fsync)"
fi
psql_() { psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$pg_port" -U postgres "$@"; }
# One database per writer, all fresh, so that no side meets another's rows, dead tuples
# or autovacuum: fkbench for pgbench and the batch ceiling (P's baselines), fkbench_fk for
# this build's P and S fencekeepers, fkbench_prev for the --baseline-rev build's (an older
# build refuses a schema a newer one has migrated: 32d0e1a knows schema version 1 and
# stops with FKV01 on version 4). Each holds the same schema and tables.
psql_ -d postgres -c "CREATE DATABASE fkbench" -c "CREATE DATABASE fkbench_fk" \
    -c "CREATE DATABASE fkbench_prev" -c "CREATE DATABASE fkmem" \
    -c "ALTER DATABASE fkmem SET synchronous_commit = off"
pg_url="postgresql://postgres@127.0.0.1:$pg_port/fkbench"
pg_url_fk="postgresql://postgres@127.0.0.1:$pg_port/fkbench_fk"
pg_url_prev="postgresql://postgres@127.0.0.1:$pg_port/fkbench_prev"

# start_fk NAME ARGS...: starts fencekeeper (the binary $fk_bin, default $fk), sets
# fk_pid_NAME and fk_port_NAME. With fk_tls=1, on HTTPS with L's certificate.
start_fk() {
    local name=$1; shift
    local scheme=http tls=() curl_tls=()
    if [[ ${fk_tls:-0} == 1 ]]; then
        scheme=https tls=(--tls-cert "$tls_cert" --tls-key "$tls_key") curl_tls=(--cacert "$tls_cert")
    fi
    "${fk_bin:-$fk}" --listen 127.0.0.1:0 "${tls[@]}" "$@" >"$tmp/fk-$name.out" 2>"$tmp/fk-$name.log" 9>&- &
    local pid=$!
    pids+=("$pid")
    local deadline=$((SECONDS + 60))
    until grep -q '^listening on ' "$tmp/fk-$name.out" 2>/dev/null; do
        if ! kill -0 "$pid" 2>/dev/null || ((SECONDS >= deadline)); then
            echo "bench.sh: fencekeeper $name did not start" >&2; tail -n 20 "$tmp/fk-$name.log" >&2
            exit 1
        fi
        sleep 0.1
    done
    local port
    port="$(sed -n 's/^listening on .*:\([0-9]*\)$/\1/p' "$tmp/fk-$name.out" | head -n 1)"
    printf -v "fk_pid_$name" '%s' "$pid"
    printf -v "fk_port_$name" '%s' "$port"
    wait_for "fencekeeper $name /readyz" 60 curl -fsS "${curl_tls[@]}" "$scheme://127.0.0.1:$port/readyz"
}

# L's certificate, made for this run only (no key is kept): self-signed EC P-256 for
# 127.0.0.1, served by both L fencekeepers and by nginx's ssl server.
tls_cert="" tls_key=""
if want L; then
    mkdir -p "$tmp/tls"
    tls_cert="$tmp/tls/cert.pem" tls_key="$tmp/tls/key.pem"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
        -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
        -keyout "$tls_key" -out "$tls_cert" >"$tmp/tls/openssl.log" 2>&1 \
        || { cat "$tmp/tls/openssl.log" >&2; echo "bench.sh: making L's certificate failed" >&2; exit 1; }
    chmod 600 "$tls_key"   # fencekeeper and nginx's master read it as root
fi

log "starting fencekeepers"
mkdir -p "$tmp/filestore" "$tmp/healthstore" "$tmp/baseline"
# shellcheck disable=SC2086  # FK_BENCH_FK_ARGS: extra flags for P's fencekeeper (experiments)
start_fk pg --store "$pg_url_fk" ${FK_BENCH_FK_ARGS:-}  # P
# pgbench's and the ceiling's database gets its schema from this build, migrated by a
# fencekeeper that stops once it is ready.
start_fk schema --store "$pg_url"
kill "$fk_pid_schema"
wait "$fk_pid_schema" 2>/dev/null || true
# S (own process: its own RSS and cache), on Postgres or (--stale-store file) a file store
mkdir -p "$tmp/stalestore" "$tmp/stalestore-prev"
stale_url="$pg_url_fk" stale_url_prev="$pg_url_prev"
[[ $stale_store == file ]] && stale_url="file:$tmp/stalestore" stale_url_prev="file:$tmp/stalestore-prev"
start_fk stale --store "$stale_url"
start_fk file --store "file:$tmp/filestore"      # F
start_fk health --store "file:$tmp/healthstore"  # H
# T's second file store, on tmpfs: there a new file costs microseconds, so its row shows
# what the code costs where the file system's inode allocation does not dominate.
shm_dir=""
if want T && [[ "$(stat -f -c %T /dev/shm 2>/dev/null)" == tmpfs ]]; then
    shm_dir="$(mktemp -d /dev/shm/fk-bench.XXXXXX)"
    start_fk filetmpfs --store "file:$shm_dir/store"  # F on tmpfs, T only
fi
if want L; then   # H and S over TLS: their own processes, stores as H's and S's
    mkdir -p "$tmp/healthstore-tls" "$tmp/stalestore-tls"
    stale_url_tls="$pg_url_fk"
    [[ $stale_store == file ]] && stale_url_tls="file:$tmp/stalestore-tls"
    fk_tls=1 start_fk health_tls --store "file:$tmp/healthstore-tls"  # H-TLS
    fk_tls=1 start_fk stale_tls --store "$stale_url_tls"              # S-TLS
fi
if [[ -n $fk_prev ]]; then   # the same, with REV's build (--baseline-rev)
    mkdir -p "$tmp/filestore-prev" "$tmp/healthstore-prev"
    # shellcheck disable=SC2086
    want P && fk_bin=$fk_prev start_fk pg_prev --store "$pg_url_prev" ${FK_BENCH_FK_ARGS:-}
    want S && fk_bin=$fk_prev start_fk stale_prev --store "$stale_url_prev"
    want F && fk_bin=$fk_prev start_fk file_prev --store "file:$tmp/filestore-prev"
    want H && fk_bin=$fk_prev start_fk health_prev --store "file:$tmp/healthstore-prev"
fi
fk_threads="$(nproc)"   # fencekeeper's default --threads: one per core

log "starting nginx on 127.0.0.1:$nginx_port with $fk_threads workers"
mkdir -p "$tmp/nginx/logs"
stale_body='{"error":"stale_token","message":"fencing token is below the fence","lock":"x","token":1,"current_token":1000000000000}'
# L: the same two answers on an ssl server with L's certificate. The protocols are
# fencekeeper's (TLS 1.2 and 1.3: nginx 1.22 leaves 1.3 out by default, and a 1.2
# connection costs more per record); ciphers and curves are OpenSSL's defaults on both
# sides, as fencekeeper has no settings for them. The run checks that both negotiate the
# same (the report shows it).
tls_server=""
if want L; then
    tls_server="server {
        listen 127.0.0.1:$nginx_tls_port ssl;
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_certificate $tls_cert;
        ssl_certificate_key $tls_key;
        location = /healthz { return 204; }
        location / {
            default_type application/json;
            return 409 '$stale_body';
        }
    }"
fi
cat >"$tmp/nginx/nginx.conf" <<EOF
worker_processes $fk_threads;
pid $tmp/nginx/nginx.pid;
error_log $tmp/nginx/logs/error.log warn;
events { worker_connections 8192; }
http {
    access_log off;
    keepalive_requests 100000000;
    keepalive_timeout 300s;
    client_max_body_size 8m;
    server {
        listen 127.0.0.1:$nginx_port;
        location = /healthz { return 204; }
        location / {
            default_type application/json;
            return 409 '$stale_body';
        }
    }
    $tls_server
}
EOF
nginx -p "$tmp/nginx" -e "$tmp/nginx/logs/error.log" -c "$tmp/nginx/nginx.conf" -g 'daemon off;' \
    >"$tmp/nginx/stdout.log" 2>&1 9>&- &
pids+=($!)
wait_for nginx 30 curl -sS -o /dev/null "http://127.0.0.1:$nginx_port/healthz"
if want L; then
    wait_for "nginx (TLS)" 30 curl -sS -o /dev/null --cacert "$tls_cert" "https://127.0.0.1:$nginx_tls_port/healthz"
    # What each side negotiates with an OpenSSL client like wrk's (for the report).
    tls_params() {
        openssl s_client -connect "127.0.0.1:$1" -CAfile "$tls_cert" </dev/null 2>/dev/null \
            | sed -n 's/^New, \(TLSv[0-9.]*\), Cipher is \(.*\)$/\1 \2/p' | head -n 1
    }
    tls_fk="$(tls_params "$fk_port_health_tls")" tls_nginx="$(tls_params "$nginx_tls_port")"
    if [[ $tls_fk == "$tls_nginx" ]]; then
        tls_negotiated="$tls_fk with both sides"
    else
        tls_negotiated="fencekeeper ${tls_fk:-?}, nginx ${tls_nginx:-?}"
    fi
    log "L: negotiated $tls_negotiated"
fi

# --- measurement helpers -----------------------------------------------------------
clk_tck="$(getconf CLK_TCK)"
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
status_kib() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }
wrk_threads() { (($1 < 2)) && echo 1 || echo 2; }
# All of Postgres's CPU so far: its live processes, plus what the postmaster has reaped from
# backends that exited (their CPU moves to its cutime/cstime).
pg_cpu_ticks() {
    local pm
    pm="$(head -n 1 "$pg_data/postmaster.pid")"
    # shellcheck disable=SC2046
    { cat "/proc/$pm/stat" $(pgrep -P "$pm" | sed 's|.*|/proc/&/stat|') 2>/dev/null || true; } \
        | awk -v pm="$pm" '{ t += $14 + $15; if ($1 == pm) t += $16 + $17 } END { print t + 0 }'
}
us_per() { python3 -c "print(f'{($2 - $1) * 1e6 / $clk_tck / max($3, 1):.1f}')"; }   # T0 T1 N

# run_wrk URL CLIENTS [LUA ARGS...] -> "rps requests non2xx errors"
run_wrk() {
    local url=$1 c=$2; shift 2
    local script=()
    (($#)) && script=(-s scripts/bench/fk.lua "$url" --) || script=("$url")
    local out
    out="$(wrk -t"$(wrk_threads "$c")" -c"$c" -d"${duration}s" --timeout 10s "${script[@]}" "$@" 2>&1)"
    echo "$out" >>"$results/wrk.log"
    local rps req non2xx errs
    rps="$(awk '/^Requests\/sec:/ {print $2}' <<<"$out")"
    req="$(awk '/requests in/ {print $1}' <<<"$out")"
    non2xx="$(awk -F': *' '/Non-2xx or 3xx responses/ {print $2}' <<<"$out")"
    errs="$(awk '/Socket errors/ {gsub(",", ""); print $4 + $6 + $8 + $10}' <<<"$out")"
    echo "${rps:-0} ${req:-0} ${non2xx:-0} ${errs:-0}"
}

tsv="$results/results.tsv"
printf 'scenario\tclients\tround\tside\trate\tcpu_us_per_req\tdb_cpu_us_per_req\n' >"$tsv"
ceiling_tsv="$results/ceiling.tsv"
printf 'clients\tround\tfk_batch_mean\tbatch\trate\tdb_cpu_us_per_write\n' >"$ceiling_tsv"
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$6" "${7:-}" >>"$tsv"; }
problems="$results/problems.txt"
: >"$problems"
problem() { echo "$*" >>"$problems"; log "WARNING: $*"; }
if want L && [[ -z $tls_fk || $tls_fk != "$tls_nginx" ]]; then
    problem "L: fencekeeper and nginx did not negotiate the same TLS ($tls_negotiated): H-TLS and S-TLS compare different work"
fi

# fk_side SCEN PIDVAR PORT CLIENTS ROUND EXPECT(2xx|409|any) [LUA ARGS...]
# Recorded as side $fk_side_name: "fencekeeper" (default) or "previous" (--baseline-rev).
fk_side() {
    local scen=$1 pid=$2 port=$3 c=$4 r=$5 expect=$6; shift 6
    local t0 t1 rps req non2xx errs side=${fk_side_name:-fencekeeper} who=fencekeeper
    [[ $side == previous ]] && who="fencekeeper $prev_desc"
    local path=/ scheme=http
    [[ $scen == H* ]] && path=/healthz
    [[ $scen == *-TLS ]] && scheme=https
    local d0=0 d1=0
    [[ $scen == P ]] && d0="$(pg_cpu_ticks)"
    t0="$(cpu_ticks "$pid")"
    read -r rps req non2xx errs < <(run_wrk "$scheme://127.0.0.1:$port$path" "$c" "$@")
    t1="$(cpu_ticks "$pid")"
    [[ $scen == P ]] && d1="$(pg_cpu_ticks)"
    case $expect in
        2xx) ((non2xx == 0)) || problem "$scen c=$c round $r: $non2xx of $req $who answers were not 2xx" ;;
        409) ((non2xx == req)) || problem "$scen c=$c round $r: only $non2xx of $req $who answers were non-2xx (expected all 409)" ;;
    esac
    ((errs == 0)) || problem "$scen c=$c round $r: $errs socket errors against $who"
    local cpu db="" dbtxt=""
    cpu="$(us_per "$t0" "$t1" "$req")"
    if [[ $scen == P ]]; then
        db="$(us_per "$d0" "$d1" "$req")"
        dbtxt=", Postgres $db CPU-us/write"
    fi
    record "$scen" "$c" "$r" "$side" "$rps" "$cpu" "$db"
    printf '   %s c=%-3s round %s  %-11s %10.1f/s  (%s CPU-us/req%s)\n' "$scen" "$c" "$r" \
        "$([[ $side == previous ]] && echo "$baseline_rev" || echo fencekeeper)" "$rps" "$cpu" "$dbtxt" >&2
}

baseline_side() {   # SCEN CLIENTS ROUND NAME RATE [POSTGRES-CPU-US-PER-TX]
    record "$1" "$2" "$3" baseline "$5" "" "${6:-}"
    printf '   %s c=%-3s round %s  %-11s %10.1f/s%s\n' "$1" "$2" "$3" "$4" "$5" \
        "${6:+  (Postgres $6 CPU-us/tx)}" >&2
}

# pgbench_ CLIENTS [ARGS...]: pgbench on the fenced upsert against the bench's database,
# with CLIENTS clients and the bench's body size.
pgbench_() {
    local c=$1
    shift
    PGHOST=127.0.0.1 PGPORT=$pg_port PGUSER=postgres "$pg_bin/pgbench" -n -M prepared \
        -c "$c" -j "$(wrk_threads "$c")" \
        -D body="$(printf 'x%.0s' $(seq "$body_bytes"))" -D content_type=application/octet-stream \
        -f "$pg_script" "$@" fkbench
}

pgbench_side() {   # CLIENTS ROUND
    local c=$1 r=$2 out tps n d0 d1
    d0="$(pg_cpu_ticks)"
    out="$(pgbench_ "$c" -T "$duration" 2>&1)" \
        || { echo "$out" >&2; problem "P c=$c round $r: pgbench failed"; }
    d1="$(pg_cpu_ticks)"
    echo "$out" >>"$results/pgbench.log"
    tps="$(awk '/^tps = / {print $3; exit}' <<<"$out")"
    n="$(awk -F': *' '/number of transactions actually processed/ {print $2 + 0; exit}' <<<"$out")"
    grep -q 'number of failed transactions: [1-9]' <<<"$out" && problem "P c=$c round $r: pgbench had failed transactions"
    baseline_side P "$c" "$r" pgbench "${tps:-0}" "$(us_per "$d0" "$d1" "${n:-0}")"
}

# batch_counts PORT -> "SUM COUNT" of fencekeeper's fencekeeper_store_batch_size histogram
batch_counts() {
    curl -fsS "http://127.0.0.1:$1/metrics" | awk '
        /^fencekeeper_store_batch_size_sum/ { s = $NF } /^fencekeeper_store_batch_size_count/ { n = $NF }
        END { printf "%d %d\n", s, n }'
}

# wal_syncs -> "WAL_FSYNCS FSYNC_MS" of P's Postgres (pg_stat_wal; the time only with
# track_wal_io_timing, which the profile turns on)
wal_syncs() { psql_ -d postgres -tA -F' ' -c "SELECT wal_sync, wal_sync_time FROM pg_stat_wal"; }

# ceiling_side CLIENTS ROUND "SUM0 COUNT0" "SUM1 COUNT1": P's database ceiling. The batch
# statement alone (scripts/bench/pg_batch_ceiling.cpp), one batch at a time over one
# connection, in batches of the mean size fencekeeper formed in this round's P run at
# this client count; kept in ceiling.tsv beside that run's batch size.
ceiling_side() {
    local c=$1 r=$2 s0 n0 s1 n1 mean b out rate d0 d1 w
    read -r s0 n0 <<<"$3"
    read -r s1 n1 <<<"$4"
    mean="$(python3 -c "print(f'{($s1 - $s0) / max($n1 - $n0, 1):.2f}')")"
    b="$(python3 -c "print(round($mean))")"
    # Batches of one go out as the single-row statement, which is pgbench's side.
    ((b >= 2)) || return 0
    d0="$(pg_cpu_ticks)"
    out="$("$ceiling" "$pg_url" fencekeeper "$b" "$duration" "$body_bytes" "pc$c-r$r-")" \
        || problem "P c=$c round $r: pg_batch_ceiling failed"
    d1="$(pg_cpu_ticks)"
    rate="$(sed -n 's/.*writes_per_s=\([0-9.]*\).*/\1/p' <<<"$out")"
    w="$(sed -n 's/.*writes=\([0-9]*\).*/\1/p' <<<"$out")"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$c" "$r" "$mean" "$b" "${rate:-0}" \
        "$(us_per "$d0" "$d1" "${w:-0}")" >>"$ceiling_tsv"
    printf '   P c=%-3s round %s  %-11s %10.1f/s  (batches of %s, fencekeeper'"'"'s mean %s)\n' \
        "$c" "$r" ceiling "${rate:-0}" "$b" "$mean" >&2
}

durable_side() {   # CLIENTS ROUND
    # One directory for every run, as fencekeeper's F store is one directory that keeps
    # every round's keys: both sides create their files among the files of all their
    # earlier runs. Each run's names are distinct (the TAG argument), so no rename
    # replaces an earlier file. (Until 2026-11-30 the baseline got a fresh directory per
    # run; an A/B on this VM, 3 runs of 32 threads each way, gave 10.3-10.7k writes/s
    # fresh and 9.8-10.1k shared.)
    # The files stay until the end (unlinking them between measurements took seconds of
    # disk time on a busy machine).
    local c=$1 r=$2 dir="$tmp/baseline/files" out
    mkdir -p "$dir"
    out="$("$baseline" "$dir" "$c" "$duration" "$body_bytes" "f$c-r$r-")" || problem "F c=$c round $r: baseline failed"
    baseline_side F "$c" "$r" durable_write "$(sed -n 's/.*writes_per_s=\([0-9.]*\).*/\1/p' <<<"$out")"
}

nginx_side() {   # SCEN CLIENTS ROUND [LUA ARGS...]
    local scen=$1 c=$2 r=$3; shift 3
    local rps req non2xx errs
    local url="http://127.0.0.1:$nginx_port"
    [[ $scen == *-TLS ]] && url="https://127.0.0.1:$nginx_tls_port"
    local path=/
    [[ $scen == H* ]] && path=/healthz
    read -r rps req non2xx errs < <(run_wrk "$url$path" "$c" "$@")
    ((errs == 0)) || problem "$scen c=$c round $r: $errs socket errors against nginx"
    baseline_side "$scen" "$c" "$r" nginx "$rps"
}

# --- I: Idempotency-Key ---------------------------------------------------------------
idem_tsv="$results/idem.tsv"
printf 'store\tclients\tround\tmode\trate\tcpu_us_per_req\trequests\tnon2xx\tapplied\treplayed\n' >"$idem_tsv"
# Keys per wrk thread. A key comes round again after that many of its thread's requests: a
# request stalled that long (a few hundred ms at these rates) would still be in flight and
# its key's next request would get 409 idempotency_in_progress (measured: 512 keys gave up
# to 0.6% of 409s at 128 clients on a loaded machine).
replay_keys=4096
# writes_counts PORT -> "APPLIED REPLAYED" of fencekeeper_writes_total
writes_counts() {
    curl -fsS "http://127.0.0.1:$1/metrics" | awk '
        $1 == "fencekeeper_writes_total{result=\"applied\"}" { a = $2 }
        $1 == "fencekeeper_writes_total{result=\"replayed\"}" { r = $2 }
        END { printf "%d %d\n", a, r }'
}
# settled_writes_counts PORT -> writes_counts once they stop moving (at most ~5 s): the
# previous wrk run stopped with up to CLIENTS requests in flight, which the server still
# finishes; counted in this run's window, they would look like this run's writes.
settled_writes_counts() {
    local prev cur i
    prev="$(writes_counts "$1")"
    for ((i = 0; i < 50; i++)); do
        sleep 0.1
        cur="$(writes_counts "$1")"
        [[ $cur == "$prev" ]] && break
        prev=$cur
    done
    echo "$prev"
}
# idem_side STORE(P|F) PID PORT CLIENTS ROUND MODE(plain|keyed|replay) LUA ARGS...: one wrk
# run, recorded in idem.tsv with fencekeeper's CPU and how many writes it applied and
# replayed meanwhile (from /metrics), which must be what MODE sends.
idem_side() {
    local st=$1 pid=$2 port=$3 c=$4 r=$5 mode=$6; shift 6
    local t0 t1 w0 w1 rps req non2xx errs a0 r0 a1 r1 applied replays cpu
    w0="$(settled_writes_counts "$port")"
    t0="$(cpu_ticks "$pid")"
    read -r rps req non2xx errs < <(run_wrk "http://127.0.0.1:$port/" "$c" "$@")
    t1="$(cpu_ticks "$pid")"
    w1="$(writes_counts "$port")"
    read -r a0 r0 <<<"$w0"
    read -r a1 r1 <<<"$w1"
    applied=$((a1 - a0)) replays=$((r1 - r0))
    cpu="$(us_per "$t0" "$t1" "$req")"
    ((non2xx == 0)) || problem "I $st $mode c=$c round $r: $non2xx of $req answers were not 2xx"
    ((errs == 0)) || problem "I $st $mode c=$c round $r: $errs socket errors"
    # wrk stops counting with requests still in flight: the server may finish a few more.
    if [[ $mode == replay ]]; then
        ((applied == 0 && replays + non2xx >= req)) \
            || problem "I $st replay c=$c round $r: $replays replays and $applied writes applied for $req answers (every 2xx should be a replay)"
    else
        ((replays == 0 && applied >= req)) \
            || problem "I $st $mode c=$c round $r: $applied writes applied and $replays replays for $req answers"
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$st" "$c" "$r" "$mode" "$rps" "$cpu" \
        "$req" "$non2xx" "$applied" "$replays" >>"$idem_tsv"
    printf '   I %s c=%-3s round %s  %-11s %10.1f/s  (%s CPU-us/req)\n' "$st" "$c" "$r" "$mode" \
        "$rps" "$cpu" >&2
}
# idem_prime PORT TAG: applies every request that fk.lua's replay mode sends with TAG (both
# wrk threads' keys), so that the replay runs measure replays only.
idem_prime() {
    python3 - "$1" "$2" "$body_bytes" "$replay_keys" <<'EOF' || { echo "bench.sh: priming replays failed" >&2; exit 1; }
import concurrent.futures, http.client, sys
port, tag, size, keys = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
body = b"x" * size
def prime(job):
    tid, part = job
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    for i in range(part, keys, 8):
        name = "%s-%d-%d" % (tag, tid, i)
        c.request("PUT", "/v1/resources/" + name, body=body,
                  headers={"Fencing-Lock": name, "Fencing-Token": "1", "Idempotency-Key": name,
                           "Content-Type": "application/octet-stream"})
        r = c.getresponse()
        r.read()
        if r.status not in (200, 201):
            raise SystemExit("priming %s: %d %r" % (name, r.status, r.read()))
    return len(range(part, keys, 8))
with concurrent.futures.ThreadPoolExecutor(16) as ex:
    print(sum(ex.map(prime, [(tid, part) for tid in range(2) for part in range(8)])))
EOF
}
# idem_runs STORE PID PORT CLIENTS ROUND: without keys and with a key per write (the two in
# alternating order by round), then replays.
idem_runs() {
    local st=$1 pid=$2 port=$3 c=$4 r=$5 lc=${1,,}
    if ((r % 2)); then
        idem_side "$st" "$pid" "$port" "$c" "$r" plain put "i${lc}p$c-r$r" "$body_bytes"
        idem_side "$st" "$pid" "$port" "$c" "$r" keyed putk "i${lc}k$c-r$r" "$body_bytes"
    else
        idem_side "$st" "$pid" "$port" "$c" "$r" keyed putk "i${lc}k$c-r$r" "$body_bytes"
        idem_side "$st" "$pid" "$port" "$c" "$r" plain put "i${lc}p$c-r$r" "$body_bytes"
    fi
    idem_side "$st" "$pid" "$port" "$c" "$r" replay replay "i${lc}r" "$body_bytes" "$replay_keys"
}

# --- T: transactions ---------------------------------------------------------------------
txn_tsv="$results/txn.tsv"
printf 'store\tclients\tround\tmode\trate\tcpu_us_per_req\trequests\tnon2xx\n' >"$txn_tsv"
txn_ops=10
txn_clients="1 8"
# create_probe DIR STORE ROUND: what creating a new file with a body costs on DIR's file
# system now (scripts/bench/create_probe.py). A transaction of 10 new keys creates 10
# files where a single PUT creates one; the report shows PUT + 9 × this beside the ratio,
# as an indication of the file system's state, not a bound: the probe's own directory
# can cost far more per file than the store's (docs/benchmarks.md, "Transactions").
create_tsv="$results/create.tsv"
printf 'store\tround\tus_per_file\n' >"$create_tsv"
create_probe() {
    local us
    us="$(python3 scripts/bench/create_probe.py "$1/create-probe-r$3" "$body_bytes")"
    printf '%s\t%s\t%s\n' "$2" "$3" "$us" >>"$create_tsv"
    printf '   T %s round %s  a new file: %s us\n' "$2" "$3" "$us" >&2
}
# txn_side STORE PID PORT CLIENTS ROUND MODE(put|txn) LUA ARGS...: one wrk run, in txn.tsv.
txn_side() {
    local st=$1 pid=$2 port=$3 c=$4 r=$5 mode=$6; shift 6
    local t0 t1 rps req non2xx errs cpu
    t0="$(cpu_ticks "$pid")"
    read -r rps req non2xx errs < <(run_wrk "http://127.0.0.1:$port/" "$c" "$@")
    t1="$(cpu_ticks "$pid")"
    cpu="$(us_per "$t0" "$t1" "$req")"
    ((non2xx == 0)) || problem "T $st $mode c=$c round $r: $non2xx of $req answers were not 2xx"
    ((errs == 0)) || problem "T $st $mode c=$c round $r: $errs socket errors"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$st" "$c" "$r" "$mode" "$rps" "$cpu" "$req" \
        "$non2xx" >>"$txn_tsv"
    printf '   T %s c=%-3s round %s  %-4s %10.1f/s  (%s CPU-us/req)\n' "$st" "$c" "$r" "$mode" \
        "$rps" "$cpu" >&2
}
# txn_runs STORE PID PORT CLIENTS ROUND: single PUTs and 10-op transactions, in alternating
# order by round.
txn_runs() {
    local st=$1 pid=$2 port=$3 c=$4 r=$5 lc=${1,,}
    if ((r % 2)); then
        txn_side "$st" "$pid" "$port" "$c" "$r" put put "t${lc}p$c-r$r" "$body_bytes"
        txn_side "$st" "$pid" "$port" "$c" "$r" txn txn "t${lc}t$c-r$r" "$body_bytes" "$txn_ops"
    else
        txn_side "$st" "$pid" "$port" "$c" "$r" txn txn "t${lc}t$c-r$r" "$body_bytes" "$txn_ops"
        txn_side "$st" "$pid" "$port" "$c" "$r" put put "t${lc}p$c-r$r" "$body_bytes"
    fi
}

# txn_mix ROUND: do P's transactions share WAL flushes with its group-commit batches? Two
# runs, in alternating order: single PUTs at 8 clients alone ("puts"), and the same with
# one client sending 10-op transactions beside them ("mix"). Each records the batches
# fencekeeper committed (its batch histogram counts single writes: a batch of
# transactions only is not one), the transactions, and Postgres' WAL fsyncs (pg_stat_wal)
# into mix.tsv; report.py derives the WAL fsyncs per transaction beyond what the batches
# needed (docs/benchmarks.md). Every request writes fresh keys, and rows committed in one
# database transaction share xmin, so the mix also counts directly how many transactions
# committed together with PUTs ("SHARED TOTAL" in txns_with_puts).
mix_tsv="$results/mix.tsv"
printf 'round\tside\tput_rate\ttxn_rate\tbatches\ttxns\twal_syncs\tnon2xx\ttxns_with_puts\n' >"$mix_tsv"
txn_mix() {
    local r=$1 side sides=(puts mix)
    ((r % 2)) || sides=(mix puts)
    for side in "${sides[@]}"; do
        local b0 w0 b1 w1 wp=""
        local prps preq pnon perr trps=0 treq=0 tnon=0 terr=0
        read -r _ b0 < <(batch_counts "$fk_port_pg")
        read -r w0 _ < <(wal_syncs)
        if [[ $side == mix ]]; then
            run_wrk "http://127.0.0.1:$fk_port_pg/" 1 txn "tmt$r" "$body_bytes" "$txn_ops" \
                >"$tmp/mix-txn.out" &
            wp=$!
        fi
        read -r prps preq pnon perr < <(run_wrk "http://127.0.0.1:$fk_port_pg/" 8 put \
            "tm${side:0:1}$r" "$body_bytes")
        if [[ -n $wp ]]; then
            wait "$wp"
            read -r trps treq tnon terr <"$tmp/mix-txn.out"
        fi
        read -r _ b1 < <(batch_counts "$fk_port_pg")
        read -r w1 _ < <(wal_syncs)
        ((pnon + tnon == 0 && perr + terr == 0)) ||
            problem "T mix $side round $r: $((pnon + tnon)) non-2xx answers, $((perr + terr)) socket errors"
        local shared=""
        [[ $side == mix ]] && shared="$(psql_ -d fkbench_fk -tA -F' ' -c "
            WITH p AS (SELECT DISTINCT xmin::text AS x FROM fencekeeper.resources
                       WHERE key LIKE 'tmm$r-%'),
                 t AS (SELECT DISTINCT xmin::text AS x FROM fencekeeper.resources
                       WHERE key LIKE 'tmt$r-%')
            SELECT count(*) FILTER (WHERE x IN (SELECT x FROM p)), count(*) FROM t")"
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$side" "$prps" "$trps" "$((b1 - b0))" \
            "$treq" "$((w1 - w0))" "$((pnon + tnon))" "$shared" >>"$mix_tsv"
        printf '   T mix round %s  %-4s %8.1f PUTs/s %6.1f txn/s  %s batches %s WAL fsyncs %s\n' \
            "$r" "$side" "$prps" "$trps" "$((b1 - b0))" "$((w1 - w0))" \
            "${shared:+(transactions with PUTs, of all: $shared)}" >&2
    done
}

# --- S: prime the fences ------------------------------------------------------------
# Every stale key/lock gets one accepted write with a high token, so that the stale run's
# token 1 is below the fence and the key is known to belong to its lock.
log "S: priming $stale_keys keys/locks with token 1000000000000"
prime="$("$openloop" --port "$fk_port_stale" --mode cycle --tag s --keys "$stale_keys" \
    --token 1000000000000 --count "$stale_keys" --connections 32 --body-bytes "$body_bytes")"
grep -q "status_2xx=$stale_keys " <<<"$prime" || { echo "bench.sh: priming failed: $prime" >&2; exit 1; }
if [[ -n $fk_prev ]] && want S; then
    # REV's process primes the same keys with the same token (accepted: not below the
    # fence), so that its fence cache starts as warm as this build's.
    prime="$("$openloop" --port "$fk_port_stale_prev" --mode cycle --tag s --keys "$stale_keys" \
        --token 1000000000000 --count "$stale_keys" --connections 32 --body-bytes "$body_bytes")"
    grep -q "status_2xx=$stale_keys " <<<"$prime" || { echo "bench.sh: priming $prev_desc failed: $prime" >&2; exit 1; }
fi

if want L; then
    # S-TLS's process primes the same keys with the same token over HTTPS (openloop speaks
    # plain HTTP only): on Postgres the fences are there already and the writes are
    # accepted (not below them); either way its caches start as warm as S's.
    log "S-TLS: priming $stale_keys keys/locks with token 1000000000000 over TLS"
    python3 - "$fk_port_stale_tls" "$tls_cert" "$stale_keys" "$body_bytes" <<'EOF' \
        || { echo "bench.sh: priming S-TLS failed" >&2; exit 1; }
import concurrent.futures, http.client, ssl, sys
port, cert, keys, size = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ctx = ssl.create_default_context(cafile=cert)
body = b"x" * size
def prime(part):
    c = http.client.HTTPSConnection("127.0.0.1", port, timeout=30, context=ctx)
    for i in range(part, keys, 16):
        name = "s-%d" % i
        c.request("PUT", "/v1/resources/" + name, body=body,
                  headers={"Fencing-Lock": name, "Fencing-Token": "1000000000000",
                           "Content-Type": "application/octet-stream"})
        r = c.getresponse()
        r.read()
        if r.status not in (200, 201):
            raise SystemExit("priming %s: %d" % (name, r.status))
with concurrent.futures.ThreadPoolExecutor(16) as ex:
    list(ex.map(prime, range(16)))
EOF
fi

# --- warm-up (not recorded) ----------------------------------------------------------
# Dirty data that other work left behind (a previous run's deleted files, say) would be
# written back during the first measurements: flush it first.
log "sync (flushing other work's dirty data before measuring)"
sync
log "warming up (2 s per side)"
saved_duration=$duration
duration=2
run_wrk "http://127.0.0.1:$fk_port_pg/" 32 put warm 256 >/dev/null
pgbench_ 32 -T 2 >/dev/null 2>&1 || true
run_wrk "http://127.0.0.1:$fk_port_file/" 32 put warm 256 >/dev/null
run_wrk "http://127.0.0.1:$fk_port_stale/" 32 cycle s "$body_bytes" "$stale_keys" 1 >/dev/null
run_wrk "http://127.0.0.1:$nginx_port/" 32 cycle s "$body_bytes" "$stale_keys" 1 >/dev/null
if want L; then
    run_wrk "https://127.0.0.1:$fk_port_health_tls/healthz" 32 >/dev/null
    run_wrk "https://127.0.0.1:$nginx_tls_port/healthz" 32 >/dev/null
    run_wrk "https://127.0.0.1:$fk_port_stale_tls/" 32 cycle s "$body_bytes" "$stale_keys" 1 >/dev/null
    run_wrk "https://127.0.0.1:$nginx_tls_port/" 32 cycle s "$body_bytes" "$stale_keys" 1 >/dev/null
fi
if [[ -n $fk_prev ]]; then
    want P && run_wrk "http://127.0.0.1:$fk_port_pg_prev/" 32 put warmprev 256 >/dev/null
    want F && run_wrk "http://127.0.0.1:$fk_port_file_prev/" 32 put warmprev 256 >/dev/null
    want S && run_wrk "http://127.0.0.1:$fk_port_stale_prev/" 32 cycle s "$body_bytes" "$stale_keys" 1 >/dev/null
    want H && run_wrk "http://127.0.0.1:$fk_port_health_prev/healthz" 32 >/dev/null
fi
duration=$saved_duration
if want I; then
    log "I: priming $((2 * replay_keys)) keyed writes per store for the replay runs"
    idem_prime "$fk_port_pg" ipr >/dev/null
    idem_prime "$fk_port_file" ifr >/dev/null
fi

# --- the rounds ------------------------------------------------------------------------
# prev_side SCEN CLIENTS ROUND NEW|PREV ARGS...: with --baseline-rev, runs fk_side ARGS for
# REV's build when its turn has come: before this build's run in even rounds, after it in
# odd ones, so that neither build always runs first. P and F write their own fresh keys.
prev_side() {
    local scen=$1 c=$2 r=$3 turn=$4; shift 4
    [[ -n $fk_prev ]] || return 0
    # Who goes first turns with the round and the client count: the first of the two runs
    # right after the previous count's baseline (for P, pgbench's upserts and their
    # autovacuum), and with the round alone this build went first in rounds 1 and 3 of 3
    # at every count.
    local ci=0 x
    for x in $clients; do
        [[ $x == "$c" ]] && break
        ci=$((ci + 1))
    done
    local new_first=$(((r + ci) % 2))
    [[ $turn == NEW && $new_first == 1 || $turn == PREV && $new_first == 0 ]] || return 0
    local pid port
    case $scen in
        P) pid=$fk_pid_pg_prev port=$fk_port_pg_prev ;;
        F) pid=$fk_pid_file_prev port=$fk_port_file_prev ;;
        S) pid=$fk_pid_stale_prev port=$fk_port_stale_prev ;;
        H) pid=$fk_pid_health_prev port=$fk_port_health_prev ;;
    esac
    fk_side_name=previous fk_side "$scen" "$pid" "$port" "$c" "$r" "$@"
}
load_start="$(cut -d' ' -f1-3 /proc/loadavg)"
log "measuring: $rounds round(s) x clients {$clients} x $only, ${duration}s per side"
for r in $(seq "$rounds"); do
    log "round $r of $rounds"
    want P && for c in $clients; do
        prev_side P "$c" "$r" PREV 2xx put "q$c-r$r" "$body_bytes"
        b0="$(batch_counts "$fk_port_pg")"
        fk_side P "$fk_pid_pg" "$fk_port_pg" "$c" "$r" 2xx put "p$c-r$r" "$body_bytes"
        b1="$(batch_counts "$fk_port_pg")"
        prev_side P "$c" "$r" NEW 2xx put "q$c-r$r" "$body_bytes"
        pgbench_side "$c" "$r"
        ceiling_side "$c" "$r" "$b0" "$b1"
    done
    want F && for c in $clients; do
        prev_side F "$c" "$r" PREV 2xx put "g$c-r$r" "$body_bytes"
        fk_side F "$fk_pid_file" "$fk_port_file" "$c" "$r" 2xx put "f$c-r$r" "$body_bytes"
        prev_side F "$c" "$r" NEW 2xx put "g$c-r$r" "$body_bytes"
        durable_side "$c" "$r"
    done
    want S && for c in $clients; do
        prev_side S "$c" "$r" PREV 409 cycle s "$body_bytes" "$stale_keys" 1
        fk_side S "$fk_pid_stale" "$fk_port_stale" "$c" "$r" 409 cycle s "$body_bytes" "$stale_keys" 1
        prev_side S "$c" "$r" NEW 409 cycle s "$body_bytes" "$stale_keys" 1
        nginx_side S "$c" "$r" cycle s "$body_bytes" "$stale_keys" 1
    done
    want I && for c in $clients; do
        idem_runs P "$fk_pid_pg" "$fk_port_pg" "$c" "$r"
        idem_runs F "$fk_pid_file" "$fk_port_file" "$c" "$r"
    done
    want T && for c in $txn_clients; do
        txn_runs P "$fk_pid_pg" "$fk_port_pg" "$c" "$r"
        txn_runs F "$fk_pid_file" "$fk_port_file" "$c" "$r"
        if [[ -n $shm_dir ]]; then
            txn_runs F-tmpfs "$fk_pid_filetmpfs" "$fk_port_filetmpfs" "$c" "$r"
        fi
    done
    if want T; then
        txn_mix "$r"
        create_probe "$tmp" F "$r"
        if [[ -n $shm_dir ]]; then
            create_probe "$shm_dir" F-tmpfs "$r"
        fi
    fi
    want H && for c in $clients; do
        prev_side H "$c" "$r" PREV 2xx
        fk_side H "$fk_pid_health" "$fk_port_health" "$c" "$r" 2xx
        prev_side H "$c" "$r" NEW 2xx
        nginx_side H "$c" "$r"
    done
    # L: H and S again, each over TLS against its own fencekeeper and nginx's ssl server,
    # in the same order as H and S (wrk opens its connections once: keep-alive throughout).
    want L && for c in $clients; do
        fk_side H-TLS "$fk_pid_health_tls" "$fk_port_health_tls" "$c" "$r" 2xx
        nginx_side H-TLS "$c" "$r"
        fk_side S-TLS "$fk_pid_stale_tls" "$fk_port_stale_tls" "$c" "$r" 409 cycle s "$body_bytes" "$stale_keys" 1
        nginx_side S-TLS "$c" "$r" cycle s "$body_bytes" "$stale_keys" 1
    done
done

# --- latency at 70% of peak (open loop) -------------------------------------------------
lat="$results/latency.tsv"
printf 'scenario\tround\ttarget_rps\tline\n' >"$lat"
peak() {   # highest median fencekeeper rate of a scenario over the client counts
    python3 - "$tsv" "$1" <<'EOF'
import csv, statistics, sys
rows = [r for r in csv.DictReader(open(sys.argv[1]), delimiter="\t")
        if r["scenario"] == sys.argv[2] and r["side"] == "fencekeeper"]
by = {}
for r in rows:
    by.setdefault(r["clients"], []).append(float(r["rate"]))
print(max(statistics.median(v) for v in by.values()))
EOF
}
# One open-loop run per round and scenario: a single run's p99 mostly counts how many disk
# stalls happened to fall into its few seconds, so the report gives the median over rounds
# and every round's figure. Each run also writes a timeline (10 ms windows of the schedule:
# requests due, median and worst latency), and its line counts the windows whose worst
# request took over 10 ms, so a reader can tell a few long stalls from a slow service.

# fk_slow_counts PORT -> "over_5ms over_10ms over_25ms total": fencekeeper's own count of
# requests (every route but /metrics) by time from request head to response, from its
# fencekeeper_request_duration_seconds histogram. Taken before and after each open-loop
# run, it tells the time fencekeeper spent on a request from the time the request waited
# before fencekeeper read it (socket queues, the generator, the CPU held by others).
fk_slow_counts() {
    curl -fsS "http://127.0.0.1:$1/metrics" | awk '
        /^fencekeeper_request_duration_seconds_bucket/ && !/route="metrics"/ {
            le = $0; sub(/.*le="/, "", le); sub(/".*/, "", le); v[le] += $NF
        }
        END { printf "%d %d %d %d\n", v["+Inf"] - v["0.005"], v["+Inf"] - v["0.01"],
                                       v["+Inf"] - v["0.025"], v["+Inf"] }'
}

# Postgres alone on the same schedule discipline: pgbench -R, the same fenced upsert, at 70%
# of pgbench's own peak (its best median over the client counts, with that many clients),
# after the same warm-up. It says what p99 the store itself holds at that share of its
# peak on this machine at this moment, beside P's. pgbench -R draws its send times from a
# Poisson process (burstier than openloop's fixed schedule); each pgbench thread's next
# slot goes to its next free client, and, like openloop, it times each transaction from
# its scheduled start (time + schedule lag in its log).
pg_peak() {   # -> "CLIENTS RATE": pgbench's best median rate and its client count
    python3 - "$tsv" <<'EOF'
import csv, statistics, sys
by = {}
for r in csv.DictReader(open(sys.argv[1]), delimiter="\t"):
    if r["scenario"] == "P" and r["side"] == "baseline":
        by.setdefault(int(r["clients"]), []).append(float(r["rate"]))
c, v = max(((c, statistics.median(v)) for c, v in by.items()), key=lambda cv: cv[1])
print(c, v)
EOF
}
# pg_open_loop ROUND RATE CLIENTS: prints the key=value line latency.tsv keeps for "Pdb".
pg_open_loop() {
    local r=$1 rate=$2 c=$3 d0 d1 out
    if ((warmup > 0)); then
        pgbench_ "$c" -R "$rate" -T "$warmup" >/dev/null 2>&1 || problem "P: pgbench -R warm-up failed"
    fi
    rm -rf "$tmp/pgrl" && mkdir -p "$tmp/pgrl"
    d0="$(pg_cpu_ticks)"
    out="$( { TIMEFORMAT='%U %S'; time pgbench_ "$c" -R "$rate" -T "$duration" -l \
        --log-prefix "$tmp/pgrl/log"; } 2>"$tmp/pgrl/time")" \
        || { echo "$out" >&2; problem "P: pgbench -R round $r failed"; }
    d1="$(pg_cpu_ticks)"
    echo "$out" >>"$results/pgbench.log"
    grep -q 'number of failed transactions: [1-9]' <<<"$out" \
        && problem "P: pgbench -R round $r had failed transactions"
    python3 - "$tmp/pgrl" "$rate" "$duration" "$c" "$(tail -n 1 "$tmp/pgrl/time")" \
        "$(us_per "$d0" "$d1" 1)" <<'EOF'
import glob, os, sys
d, rate, secs, clients = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
u, s = (float(x) for x in sys.argv[5].split())
db_us = float(sys.argv[6])
lat, sched = [], []
for f in glob.glob(os.path.join(d, "log*")):
    for line in open(f):
        x = line.split()   # client tx time_us script epoch_s epoch_us schedule_lag_us
        if len(x) < 7:
            continue
        ms = (int(x[2]) + int(x[6])) / 1000
        lat.append(ms)
        sched.append(int(x[4]) + int(x[5]) / 1e6 - ms / 1000)
n = len(lat)
lat_sorted = sorted(lat)
def pct(p):   # as openloop's pct()
    return lat_sorted[min(int(p / 100 * (n - 1) + 0.5), n - 1)] if n else 0
worst = {}
t0 = min(sched) if sched else 0
for t, ms in zip(sched, lat):
    w = int((t - t0) / 0.010)
    worst[w] = max(worst.get(w, 0), ms)
print(f"clients={clients} requests={n} achieved_rps={n / secs:.1f} target_rps={rate:.1f} "
      f"p50_ms={pct(50):.3f} p90_ms={pct(90):.3f} p99_ms={pct(99):.3f} p999_ms={pct(99.9):.3f} "
      f"max_ms={pct(100):.3f} "
      f"gen_cpu_us_per_req={(u + s) * 1e6 / max(n, 1):.1f} "
      f"db_cpu_us_per_req={db_us / max(n, 1):.1f} "
      f"windows_over_10ms={sum(1 for v in worst.values() if v > 10)}")
EOF
}

lat_conns=128
for scen in $only; do
    [[ $scen == [ITL] ]] && continue   # I, T and L have throughput rows only
    case $scen in
        P) port=$fk_port_pg; lat_pid=$fk_pid_pg; args=(--mode put) ;;
        F) port=$fk_port_file; lat_pid=$fk_pid_file; args=(--mode put) ;;
        S) port=$fk_port_stale; lat_pid=$fk_pid_stale; args=(--mode cycle --tag s --keys "$stale_keys" --token 1) ;;
        H) port=$fk_port_health; lat_pid=$fk_pid_health; args=(--mode health) ;;
    esac
    p="$(peak "$scen")"
    rate="$(python3 -c "print(round(0.7 * $p, 1))")"
    [[ -n $lat_rate ]] && rate=$lat_rate
    if [[ $scen == P ]]; then   # the reference run's rate and clients, the same every round
        read -r pg_c pg_p < <(pg_peak)
        pg_rate="$(python3 -c "print(round(0.7 * $pg_p, 1))")"
    fi
    for r in $(seq "$rounds"); do
        # P and F write fresh locks and keys: a tag per round keeps them fresh.
        case $scen in P | F) tag=(--tag "l${scen,,}$r") ;; *) tag=() ;; esac
        if [[ $scen == P ]]; then
            # A freshly initdb'd cluster has no spare WAL segments: every 16 MiB of WAL, the
            # commit that crosses into a new segment first has it zero-filled and fsynced
            # while holding the WAL write lock, and every commit waits 50-100 ms behind it
            # (on this VM). A database that has run for a while recycles old segments at
            # each checkpoint instead; this checkpoint gives the latency run that steady
            # state.
            log "P: CHECKPOINT (recycles the WAL segments written so far)"
            psql_ -d postgres -c CHECKPOINT
        fi
        # The first writes after a checkpoint log a full-page image of every page they
        # touch: for P the first 100-300 ms after the CHECKPOINT above are a burst of WAL
        # that a running database pays once per checkpoint_timeout, not once per 10 s.
        # The same load, not measured, runs first, for every scenario alike.
        load=(--port "$port" "${args[@]}" --rate "$rate" --connections "$lat_conns"
              --body-bytes "$body_bytes" --tick-us "$tick_us")
        if ((warmup > 0)); then
            case $scen in P | F) wtag=(--tag "l${scen,,}${r}w") ;; *) wtag=() ;; esac
            log "$scen: ${warmup}s warm-up at $rate/s (not measured)"
            "$openloop" "${load[@]}" "${wtag[@]}" --duration "$warmup" >/dev/null \
                || problem "$scen: warm-up openloop failed"
        fi
        log "$scen: open loop at $rate/s (peak $p/s), $lat_conns connections, ${duration}s, round $r of $rounds"
        timeline="$results/timeline-$scen-$r.tsv"
        d0="$(pg_cpu_ticks)"
        t0="$(cpu_ticks "$lat_pid")"
        read -r s5a s10a s25a sna < <(fk_slow_counts "$port") || true
        # The generator's own CPU (bash's `time`, user + sys): it shares the two cores.
        line="$( { TIMEFORMAT='%U %S'; time "$openloop" "${load[@]}" "${tag[@]}" \
            --duration "$duration" --timeline "$timeline"; } 2>"$tmp/openloop.time")" \
            || problem "$scen: openloop failed"
        t1="$(cpu_ticks "$lat_pid")"
        d1="$(pg_cpu_ticks)"
        read -r s5b s10b s25b snb < <(fk_slow_counts "$port") || true
        n="$(sed -n 's/.*requests=\([0-9]*\).*/\1/p' <<<"$line")"
        line+=" fk_cpu_us_per_req=$(us_per "$t0" "$t1" "${n:-0}")"
        line+=" $(python3 - "$(tail -n 1 "$tmp/openloop.time")" "${n:-0}" \
            "$((s5b - s5a)) $((s10b - s10a)) $((s25b - s25a)) $((snb - sna))" <<'EOF'
import sys
u, s = (float(x) for x in sys.argv[1].split())
n = max(int(sys.argv[2]), 1)
o5, o10, o25, total = (int(x) for x in sys.argv[3].split())
pct = lambda k: f"{100 * k / total:.2f}" if total else ""
print(f"gen_cpu_us_per_req={(u + s) * 1e6 / n:.1f} fk_over_5ms_pct={pct(o5)} "
      f"fk_over_10ms_pct={pct(o10)} fk_over_25ms_pct={pct(o25)}")
EOF
)"
        [[ $scen == [PS] ]] && line+=" db_cpu_us_per_req=$(us_per "$d0" "$d1" "${n:-0}")"
        line+=" windows_over_10ms=$(awk -F'\t' 'NR > 1 && $4 > 10' "$timeline" 2>/dev/null | wc -l)"
        echo "   $line" >&2
        printf '%s\t%s\t%s\t%s\n' "$scen" "$r" "$rate" "$line" >>"$lat"
        if [[ $scen == P ]]; then
            log "P: Postgres alone, pgbench -R $pg_rate/s (70% of pgbench's peak $pg_p/s), $pg_c clients, ${duration}s, round $r of $rounds"
            line="$(pg_open_loop "$r" "$pg_rate" "$pg_c")"
            echo "   $line" >&2
            printf '%s\t%s\t%s\t%s\n' Pdb "$r" "$pg_rate" "$line" >>"$lat"
        fi
    done
done

# --- peak RSS of the measured processes ------------------------------------------------
mem="$results/memory.tsv"
printf 'what\tkib\n' >"$mem"
for n in pg file stale health; do
    pidvar="fk_pid_$n"
    printf 'hwm_%s\t%s\n' "$n" "$(status_kib "${!pidvar}" VmHWM)" >>"$mem"
done

# --- RSS with many distinct locks ---------------------------------------------------------
if ((mem_locks > 0)); then
    cache=$((mem_locks > 100000 ? mem_locks : 100000))
    printf '{"postgres": {"fence_cache_size": %d}}\n' "$cache" >"$tmp/mem.json"
    start_fk mem --config "$tmp/mem.json" --store "postgresql://postgres@127.0.0.1:$pg_port/fkmem"
    rss0="$(status_kib "$fk_pid_mem" VmRSS)"
    log "memory: $mem_locks fresh PUTs to distinct locks (fence_cache_size $cache; database fkmem has synchronous_commit=off)"
    m0=$SECONDS
    line="$("$openloop" --port "$fk_port_mem" --mode put --tag m --count "$mem_locks" \
        --connections 64 --body-bytes 16)" || problem "memory: openloop failed"
    echo "   $line ($((SECONDS - m0)) s)" >&2
    grep -q "status_2xx=$mem_locks " <<<"$line" || problem "memory: not every write was accepted: $line"
    {
        printf 'mem_locks\t%s\n' "$mem_locks"
        printf 'mem_cache_size\t%s\n' "$cache"
        printf 'mem_rss_start\t%s\n' "$rss0"
        printf 'mem_rss_after\t%s\n' "$(status_kib "$fk_pid_mem" VmRSS)"
        printf 'mem_hwm_after\t%s\n' "$(status_kib "$fk_pid_mem" VmHWM)"
        printf 'mem_seconds\t%s\n' "$((SECONDS - m0))"
    } >>"$mem"
fi

# --- profile (--profile): where the time goes in P and F ------------------------------------
# One more fencekeeper run per scenario and client count, last (after every measurement
# above, so that its extra data and perf cannot touch them), with the rounds' load. It records the machine's CPU split (/proc/stat), the
# CPU per write of fencekeeper, of Postgres and of everything else (the load generator
# and kernel threads), the group-commit batches fencekeeper formed (its
# fencekeeper_store_batch_size metric), for P the WAL flushes (pg_stat_wal), and with
# `perf` a system-wide sample of where the CPU time went.
cpu_jiffies() {   # user sys iowait idle total, summed over all CPUs
    awk '$1 == "cpu" { print $2 + $3, $4 + $7 + $8, $6, $5, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9 }' /proc/stat
}
batch_metrics() {   # PORT -> "batches writes"
    curl -fsS "http://127.0.0.1:$1/metrics" | awk '
        $1 == "fencekeeper_store_batch_size_count" { c = $2 }
        $1 == "fencekeeper_store_batch_size_sum" { s = $2 }
        END { printf "%d %d\n", c, s }'
}
# perf_split FILE [COMM] -> "name pct, name pct, ..." (the largest shares: without COMM, of
# all samples by process; with COMM, of that command's samples by library). perf's own
# --comm filter is not used: it drops kernel samples from a by-library view.
perf_split() {
    local file=$1 comm=${2:-}
    perf report -i "$file" --stdio --no-children --sort comm,dso -g none 2>/dev/null \
        | awk -v want="$comm" '
            /^ *[0-9.]+%/ {
                pct = $1 + 0; c = $2; d = $3
                if (want == "") {
                    name = c
                    if (name ~ /^swapper/) name = "idle"
                    else if (name ~ /^(kworker|jbd2|ksoftirqd|rcu|migration|kthreadd|khugepaged|kcompactd|kdamond)/) name = "kernel threads"
                } else {
                    if (c != want) next
                    name = d
                    if (name ~ /kernel/) name = "kernel"
                    else if (name ~ /^libc[.-]/) name = "libc"
                    else if (name ~ /^libstdc/) name = "libstdc++"
                    else if (name ~ /^libpq/) name = "libpq"
                }
                sum[name] += pct; total += pct
            }
            END {
                n = 0
                for (k in sum) {
                    sum[k] = want == "" ? sum[k] : 100 * sum[k] / total
                    if (sum[k] >= 0.5) keys[++n] = k
                }
                for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
                    if (sum[keys[j]] > sum[keys[i]]) { t = keys[i]; keys[i] = keys[j]; keys[j] = t }
                out = ""
                for (i = 1; i <= n && i <= 8; i++)
                    out = out (i > 1 ? ", " : "") sprintf("%s %.1f%%", keys[i], sum[keys[i]])
                print out
            }'
}
# perf_syscalls FILE COMM -> "renameat 20.1%, openat 17.0%, ..." (share of COMM's samples
# spent inside each system call, what it calls included; the kernel's entry points are
# __x64_sys_NAME or, for some calls, only __sys_NAME)
perf_syscalls() {
    perf report -i "$1" --stdio --children --sort comm,sym -g none 2>/dev/null \
        | awk -v want="$2" '
            /^ *[0-9.]+%/ && $3 == want {
                self += $2
                if ($4 == "[k]" && match($5, /^(__x64_sys_|__ia32_sys_|__sys_|__do_sys_)/)) {
                    name = substr($5, RLENGTH + 1)
                    if ($1 + 0 > v[name]) v[name] = $1 + 0
                }
            }
            END {
                n = 0
                for (k in v) keys[++n] = k
                for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
                    if (v[keys[j]] > v[keys[i]]) { t = keys[i]; keys[i] = keys[j]; keys[j] = t }
                out = ""
                for (i = 1; i <= n && i <= 8 && self > 0; i++)
                    if (100 * v[keys[i]] / self >= 0.5)
                        out = out (i > 1 ? ", " : "") sprintf("%s %.1f%%", keys[i], 100 * v[keys[i]] / self)
                print out
            }'
}
prof="$results/profile.tsv"
printf 'scenario\tclients\tname\tvalue\n' >"$prof"
perf_ok=0
if ((profile)); then
    if perf record -q -a -o "$tmp/perf-probe.data" -- sleep 0.2 >"$tmp/perf-probe.log" 2>&1; then
        perf_ok=1
    else
        problem "profile: perf cannot record system-wide here ($(tail -n 1 "$tmp/perf-probe.log")); the profile has no perf part"
    fi
fi
profile_run() {   # SCEN PID PORT CLIENTS
    local scen=$1 pid=$2 port=$3 c=$4
    local data="$tmp/perf-$scen-$c.data" perf_pid="" t0 t1 d0=0 d1=0 w0="0 0" w1="0 0" b0 b1
    local s0 s1 rps req non2xx errs
    log "$scen: profile at $c clients (${duration}s)"
    s0="$(cpu_jiffies)"
    t0="$(cpu_ticks "$pid")"
    [[ $scen == P ]] && { d0="$(pg_cpu_ticks)"; w0="$(wal_syncs)"; }
    b0="$(batch_metrics "$port")"
    if ((perf_ok)); then
        # From 1 s in to 1 s before the end: the load's steady part.
        (sleep 1; exec perf record -q -a -g -F 499 -o "$data" -- sleep $((duration > 3 ? duration - 2 : 1))) \
            >"$tmp/perf-$scen-$c.log" 2>&1 &
        perf_pid=$!
    fi
    read -r rps req non2xx errs < <(run_wrk "http://127.0.0.1:$port/" "$c" put "prof${scen,,}$c" "$body_bytes")
    s1="$(cpu_jiffies)"
    t1="$(cpu_ticks "$pid")"
    [[ $scen == P ]] && { d1="$(pg_cpu_ticks)"; w1="$(wal_syncs)"; }
    b1="$(batch_metrics "$port")"
    [[ -n $perf_pid ]] && { wait "$perf_pid" || problem "$scen c=$c: perf record failed"; }
    ((non2xx == 0 && errs == 0)) || problem "$scen c=$c profile: $non2xx non-2xx answers, $errs socket errors"
    python3 - "$prof" "$scen" "$c" "$clk_tck" "$duration" "$rps" "$req" "$t0" "$t1" "$d0" "$d1" \
        "$s0" "$s1" "$b0" "$b1" "$w0" "$w1" <<'PY'
import sys
(out, scen, c, hz, dur, rps, req, t0, t1, d0, d1, s0, s1, b0, b1, w0, w1) = sys.argv[1:]
hz, dur, rps, req = float(hz), float(dur), float(rps), max(int(req), 1)
user, sys_, iowait, idle, total = (float(b) - float(a) for a, b in zip(s0.split(), s1.split()))
total = max(total, 1)
fk = (float(t1) - float(t0)) / hz * 1e6 / req
pg = (float(d1) - float(d0)) / hz * 1e6 / req
busy = (user + sys_) / hz * 1e6 / req
batches, writes = (int(b) - int(a) for a, b in zip(b0.split(), b1.split()))
rows = {
    "rate": f"{rps:.0f}",
    "cpu_user_pct": f"{100 * user / total:.0f}",
    "cpu_sys_pct": f"{100 * sys_ / total:.0f}",
    "cpu_iowait_pct": f"{100 * iowait / total:.0f}",
    "cpu_idle_pct": f"{100 * idle / total:.0f}",
    "fk_us": f"{fk:.1f}",
    "pg_us": f"{pg:.1f}" if scen == "P" else "",
    "other_us": f"{busy - fk - pg:.1f}",
    "batch_mean": f"{writes / batches:.1f}" if batches else "",
    "batches_per_s": f"{batches / dur:.0f}",
}
if scen == "P":
    (n0, ms0), (n1, ms1) = (tuple(float(x) for x in w.split()) for w in (w0, w1))
    syncs, ms = n1 - n0, ms1 - ms0
    rows["wal_syncs_per_s"] = f"{syncs / dur:.0f}"
    rows["wal_sync_ms"] = f"{ms / syncs:.3f}" if syncs else ""
    rows["wal_sync_busy_pct"] = f"{100 * ms / 1000 / dur:.0f}"
with open(out, "a") as f:
    for k, v in rows.items():
        f.write(f"{scen}\t{c}\t{k}\t{v}\n")
PY
    if [[ -n $perf_pid && -s $data ]]; then
        {
            printf '%s\t%s\tperf_by_process\t%s\n' "$scen" "$c" "$(perf_split "$data")"
            printf '%s\t%s\tperf_fk_by_library\t%s\n' "$scen" "$c" "$(perf_split "$data" fencekeeper)"
            printf '%s\t%s\tperf_fk_syscalls\t%s\n' "$scen" "$c" "$(perf_syscalls "$data" fencekeeper)"
            if [[ $scen == P ]]; then
                printf '%s\t%s\tperf_pg_by_library\t%s\n' "$scen" "$c" "$(perf_split "$data" postgres)"
                printf '%s\t%s\tperf_pg_syscalls\t%s\n' "$scen" "$c" "$(perf_syscalls "$data" postgres)"
            fi
        } >>"$prof"
        rm -f "$data"
    fi
    awk -F'\t' -v s="$scen" -v c="$c" '$1 == s && $2 == c { printf "   %s=%s\n", $3, $4 }' "$prof" >&2
}
if ((profile)); then
    # pg_stat_wal.wal_sync_time needs track_wal_io_timing, on for the profile only.
    want P && psql_ -d postgres -c "ALTER SYSTEM SET track_wal_io_timing = on" -c "SELECT pg_reload_conf()" >/dev/null
    want P && for c in $clients; do profile_run P "$fk_pid_pg" "$fk_port_pg" "$c"; done
    want F && for c in $clients; do profile_run F "$fk_pid_file" "$fk_port_file" "$c"; done
fi

# --- report --------------------------------------------------------------------------
{
    echo "command	$cmdline"
    echo "date	$(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "commit	$built_from"
    [[ -n $prev_desc ]] && echo "previous	$prev_desc"
    ((prev_is_release)) && echo "previous_release	$previous_release"
    [[ -n $fsync_line ]] && echo "fsync	$fsync_line"
    echo "cpu	$(lscpu | sed -n 's/^Model name: *//p' | head -n 1), $(nproc) cores"
    echo "memory	$(free -g | awk '/^Mem:/ {print $2}') GiB"
    echo "kernel	$(uname -r)"
    echo "disk	$(df -T /tmp | awk 'NR==2 {print $1 " (" $2 ")"}')"
    echo "load	1/5/15-min load average $load_start before the rounds, $(cut -d' ' -f1-3 /proc/loadavg) at the end"
    echo "versions	$("$pg_bin/postgres" --version | sed 's/.*) //') Postgres, $(nginx -v 2>&1 | sed 's|.*/||') nginx, wrk $(wrk --version 2>&1 | awk 'NR==1{print $2}')"
    echo "rounds	$rounds"
    echo "duration	$duration"
    echo "warmup	$warmup"
    echo "tick_us	$tick_us"
    echo "clients	$clients"
    echo "body	$body_bytes"
    echo "threads	$fk_threads"
    echo "stale_keys	$stale_keys"
    echo "stale_store	$stale_store"
    want L && echo "tls_cert	self-signed, EC $(openssl x509 -in "$tls_cert" -noout -text | sed -n 's/^ *NIST CURVE: *//p')"
    want L && echo "tls_negotiated	$tls_negotiated"
    echo "elapsed	$((SECONDS - t_start)) s for the whole run, build included"
    echo "pg_settings	$(sed 's/-c //g; s/ -p [0-9]*//; s/ -k [^ ]*//; s/listen_addresses=[^ ]* //' <<<"$pg_settings")"
} >"$results/meta.tsv"
python3 scripts/bench/report.py "$results" "$docs"
log "done in $((SECONDS - t_start)) s"
