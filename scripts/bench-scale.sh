#!/usr/bin/env bash
# The file store at scale (issue 31): writes N distinct keys through fencekeeper's HTTP API
# and measures, as the store grows, throughput, latency and memory, then a restart with
# a cold page cache. It talks HTTP only, so it measures any fencekeeper build. As root, on
# Debian 12:
#
#   bash scripts/bench-scale.sh                      1,000,000 keys (~5 GB, a few minutes)
#   bash scripts/bench-scale.sh --keys 10000000 --delete 1000000 --plot docs/scale.svg
#                                                    the issue's full run (~45 GB, ~10M
#                                                    inodes; check `df -h -i` first)
#   bash scripts/bench-scale.sh --keys 200000        the small check (~1 GB, ~1 min)
#
#   options: --keys N         keys to write (default 1000000)
#            --body-bytes B   body size (default 256)
#            --clients C      concurrent connections (default 32), over --threads wrk
#                             threads (default 2)
#            --prefixes P     keys are t<i mod P>/k<i>: P directories of N/P entries each
#                             in the file store's objects/ (default 1000)
#            --segments S     rows of the throughput table, each 1/S of the keys (default 20)
#            --delete N2      afterwards delete N2 of the keys (DELETE, token 1 under their
#                             lock) and report the disk use after (default 0: none)
#            --sample K       keys read back after the restart (default 1000)
#            --binary PATH    measure this fencekeeper instead of building one
#            --dir DIR        where the data directory goes (default $TMPDIR or /tmp; it
#                             must be on the disk to measure, not tmpfs)
#            --out DIR        results (default build-bench/scale-results)
#            --plot FILE      also plot writes/s and RSS against keys in store with
#                             gnuplot: FILE.svg or FILE.png (e.g. docs/file-store-scale.svg)
#            --stall S        give up when no answer came for S seconds (default 120)
#            --ready-timeout S  give up when the restarted fencekeeper is not ready after S
#                             seconds (default 600 + 1 s per 1,000 keys: the store of
#                             main at 143490e read every body at start, 70 s for 200k
#                             keys with a cold cache)
#            --load-stop S    then stop twice under load and time each restart: S seconds
#                             of fresh-key writes (--clients) beside one busy core, then
#                             SIGTERM, and again with kill -9 (default 20; 0: skip)
#            --keep           keep the data directory (its path is printed)
#
# What it does:
#  1. Without --binary, builds a Release fencekeeper into build-bench/ exactly as
#     scripts/bench.sh does (and holds bench.sh's lock, build-bench/.bench.lock: one run
#     at a time per tree). Installs wrk, python3, curl and gnuplot-nox when missing.
#  2. Refuses to start unless the file system of --dir has room: 4.5 KiB of blocks
#     (a 4 KiB block for the body plus metadata; main's journal store used 4.35) and 1 inode
#     per key, plus 1 GiB and 10,000 inodes, shown next to `df -h -i`.
#  3. Starts fencekeeper on file:DIR/fk-scale.XXXXXX/data on a free loopback port, and
#     writes the keys with wrk and scripts/bench/scale.lua, each exactly once: key i is
#     t<i mod P>/k<i>, its lock the key, token 1, its body "<key>\n" padded with "x".
#     Every answer must be 201. wrk runs once for all N keys (no pause between
#     segments); scale.lua records every request's latency in a 1-µs histogram per
#     thread and per segment (wrk's own histogram is corrected for coordinated omission
#     and cannot be split into segments), so the percentiles (nearest rank) are exact
#     over the whole run and over each segment. Every second it samples VmRSS and VmHWM
#     (/proc/PID/status), the file system's use and the process's disk I/O; the table's
#     RSS for a segment is the sample nearest its end.
#  4. After writing: RSS, peak RSS, `du` of the data dir (bytes and inodes) and the growth
#     of the file system's use (df; others writing to the same disk show up in it). Then
#     SIGTERM and wait (timed), `sync; echo 3 > /proc/sys/vm/drop_caches` (root only;
#     otherwise the restart is measured with a warm cache and the report says so),
#     restart on the same directory and time it from just before the exec to the first
#     200 of /readyz (polled every 10 ms), with RSS, peak RSS and /proc/PID/io (what
#     the start read) right then. Then a check (scripts/bench/scale.py check): --sample
#     random keys read back (body, ETag "1", Content-Type, Fencing-Token, Fencing-Lock),
#     a never-written key 404, fresh keys written and read back, one key rewritten
#     (ETag "2"); and RSS again.
#  5. With --delete N2: deletes keys 0..N2-1 (every 204), then `du` and RSS again.
#  5b. Restart after a stop under load (issue 54), unless --load-stop 0: twice, wrk
#     writes fresh keys (10,000,000 + ... and 20,000,000 + ..., scale.lua) over --clients
#     connections while a shell loop keeps one core busy; after --load-stop seconds
#     fencekeeper gets SIGTERM (the first time; the stop is timed) or kill -9 (the
#     second), the load stops, the cache is dropped, and the restart is timed to
#     /readyz 200 as in 4, with the redo rows the start found (its `file store opened`
#     line). A SIGTERM that leaves redo rows is a problem.
#  6. Prints the report (also OUT/report.md) and writes OUT/results.json (everything),
#     OUT/put-summary.json, put-curve.tsv (keys and writes/s per second), put-samples.tsv
#     (RSS and disk per second), put-latency.tsv (the whole run's histogram), and the
#     same for delete; meta.tsv; restart.json; check.json; restart-load-{term,kill}.json
#     and load-{term,kill}/ (5b); with --plot the plot.
#  7. Stops fencekeeper and deletes the data directory (unless --keep): with millions of
#     files that takes minutes and keeps the disk busy, so the lock is held until done.
#
# Exits 1 when anything was refused or wrong (a non-201/204 answer, a failed check), 2 on
# bad arguments. The machine is shared: the report records the load average before and
# after, and a run measured while other work loads the cores is not comparable.
set -euo pipefail

cd "$(dirname "$0")/.."
repo="$PWD"
cmdline="bash scripts/bench-scale.sh${*:+ $*}"

keys=1000000
body_bytes=256
clients=32
wrk_threads=2
prefixes=1000
segments=20
delete=0
sample=1000
binary=""
dir="${TMPDIR:-/tmp}"
out="build-bench/scale-results"
plot=""
stall=120
ready_timeout=""
load_stop=20
keep=0
while (($#)); do
    case "$1" in
        --keys) keys="$2"; shift ;;
        --body-bytes) body_bytes="$2"; shift ;;
        --clients) clients="$2"; shift ;;
        --threads) wrk_threads="$2"; shift ;;
        --prefixes) prefixes="$2"; shift ;;
        --segments) segments="$2"; shift ;;
        --delete) delete="$2"; shift ;;
        --sample) sample="$2"; shift ;;
        --binary) binary="$2"; shift ;;
        --dir) dir="$2"; shift ;;
        --out) out="$2"; shift ;;
        --plot) plot="$2"; shift ;;
        --stall) stall="$2"; shift ;;
        --ready-timeout) ready_timeout="$2"; shift ;;
        --load-stop) load_stop="$2"; shift ;;
        --keep) keep=1 ;;
        -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 0 ;;
        *) echo "bench-scale.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
    shift
done
for v in keys body_bytes clients wrk_threads prefixes segments sample stall ready_timeout; do
    [[ $v == ready_timeout && -z $ready_timeout ]] && ready_timeout=$((600 + keys / 1000))
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "bench-scale.sh: --${v//_/-} takes a positive integer" >&2; exit 2; }
done
[[ $delete =~ ^[0-9]+$ ]] || { echo "bench-scale.sh: --delete takes an integer" >&2; exit 2; }
[[ $load_stop =~ ^[0-9]+$ ]] || { echo "bench-scale.sh: --load-stop takes an integer" >&2; exit 2; }
((delete <= keys)) || { echo "bench-scale.sh: --delete $delete is more than --keys $keys" >&2; exit 2; }
((keys >= wrk_threads && keys >= segments)) \
    || { echo "bench-scale.sh: --keys must be at least --threads and --segments" >&2; exit 2; }
if [[ -n $plot ]]; then
    case "$plot" in *.svg | *.png) ;; *) echo "bench-scale.sh: --plot takes FILE.svg or FILE.png" >&2; exit 2 ;; esac
    plot="$(realpath -m "$plot")"
fi
[[ -z $binary || -x $binary ]] || { echo "bench-scale.sh: --binary $binary is not an executable" >&2; exit 2; }
[[ -d $dir ]] || { echo "bench-scale.sh: --dir $dir is not a directory" >&2; exit 2; }
[[ -n $binary ]] && binary="$(realpath "$binary")"

t_start=$SECONDS
log() { printf '== [%4ds] %s\n' $((SECONDS - t_start)) "$*" >&2; }

# --- packages ----------------------------------------------------------------------
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'; }
missing=()
for p in wrk python3 curl procps; do installed "$p" || missing+=("$p"); done
[[ -n $plot ]] && { installed gnuplot-nox || installed gnuplot-qt || installed gnuplot-x11 || missing+=(gnuplot-nox); }
if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    [[ $EUID -eq 0 ]] || { echo "bench-scale.sh: run as root to install: ${missing[*]}" >&2; exit 1; }
    DEBIAN_FRONTEND=noninteractive apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# --- build -------------------------------------------------------------------------
build="build-bench"
mkdir -p "$build" "$out"
out="$(realpath "$out")"
# bench.sh's lock: one benchmark at a time in this tree, cleanup included.
exec 9>"$build/.bench.lock"
if ! flock -n 9; then
    log "another bench.sh or bench-scale.sh (or its cleanup) is running in this tree: waiting for it"
    flock 9
fi
if [[ -n $binary ]]; then
    fk="$binary"
    built_from="--binary $binary"
else
    bash scripts/install-deps.sh build
    built_from="$(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD -- proxy backends fence config CMakeLists.txt 2>/dev/null || echo ' + uncommitted changes in the work tree'), built $(date -u '+%H:%M UTC')"
    log "building $build (Release)"
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DFK_BUILD_TESTS=OFF >/dev/null
    nice -n 5 cmake --build "$build" -j"$(nproc)" --target fencekeeper >"$out/build.log" 2>&1 \
        || { tail -n 40 "$out/build.log" >&2; echo "bench-scale.sh: build failed" >&2; exit 1; }
    fk="$repo/$build/fencekeeper"
fi
# This run's results only: remove what an earlier run left in OUT (only files of ours).
rm -f "$out"/{put,delete}-* "$out"/{meta.tsv,restart.json,check.json,results.json,report.md,plot-data.tsv}
rm -rf "$out"/load-{term,kill} "$out"/restart-load-{term,kill}.json

# --- disk --------------------------------------------------------------------------
# Per key: a 4 KiB block for the body, its directory entry and its metadata. The store of
# main at 143490e (journal + in-memory index) used 4.35 KiB per key at 200k keys (du).
need_bytes=$((keys * 4608 + (1 << 30)))
need_inodes=$((keys + prefixes + 10000))
read -r avail_bytes avail_inodes fs_type < <(df -B1 --output=avail,iavail,fstype "$dir" | awk 'NR == 2 {print $1, $2, $3}')
log "disk: $keys keys need ~$((need_bytes >> 30)) GiB and ~$need_inodes inodes on $dir ($fs_type):"
df -h -i "$dir" | sed 's/^/   /' >&2
df -h "$dir" | tail -n 1 | sed 's/^/   /' >&2
case "$fs_type" in tmpfs | ramfs) echo "bench-scale.sh: $dir is on $fs_type, not a disk: use --dir" >&2; exit 1 ;; esac
if ((avail_bytes < need_bytes || avail_inodes < need_inodes)); then
    echo "bench-scale.sh: not enough room on $dir: $((avail_bytes >> 30)) GiB and $avail_inodes inodes free, $keys keys need ~$((need_bytes >> 30)) GiB and ~$need_inodes inodes (use --dir elsewhere or fewer --keys)" >&2
    exit 1
fi

# --- fencekeeper ---------------------------------------------------------------------
tmp="$(mktemp -d "$dir/fk-scale.XXXXXX")"
data="$tmp/data"
mkdir -p "$data"
fk_pid=""
busy_pid=""
wrk_pid=""
cleanup() {
    local rc=$?
    set +e
    for pid in $busy_pid $wrk_pid; do kill "$pid" 2>/dev/null; done
    if [[ -n $fk_pid ]] && kill -0 "$fk_pid" 2>/dev/null; then
        kill "$fk_pid"
        for _ in $(seq 300); do kill -0 "$fk_pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$fk_pid" 2>/dev/null
        wait "$fk_pid" 2>/dev/null
    fi
    if ((keep)); then
        log "kept the data directory: $data (fencekeeper's log: $tmp/fk.log)"
    else
        log "removing $tmp"
        rm -rf "$tmp"
        log "removed"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
scale=(python3 "$repo/scripts/bench/scale.py")
status_kib() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }
fs_used() { python3 -c 'import os, sys; s = os.statvfs(sys.argv[1]); print((s.f_blocks - s.f_bfree) * s.f_frsize, s.f_files - s.f_ffree)' "$1"; }
meta="$out/meta.tsv"
: >"$meta"
kv() { printf '%s\t%s\n' "$1" "$2" >>"$meta"; }
problems=()
problem() { problems+=("$*"); log "PROBLEM: $*"; }

# start_fk: starts fencekeeper on $data and $port (fk_pid, t0_start: the time just before
# the exec); fencekeeper's own output goes to $tmp/fk.{out,log}.
start_fk() {
    t0_start=$EPOCHREALTIME
    "$fk" --listen "127.0.0.1:$port" --store "file:$data" >>"$tmp/fk.out" 2>>"$tmp/fk.log" 9>&- &
    fk_pid=$!
}

kv command "$cmdline"
kv date "$(date -u '+%Y-%m-%d %H:%M UTC')"
kv binary "$fk ($("$fk" --version 2>/dev/null | head -n 1))"
kv commit "$built_from"
kv machine "$(lscpu | sed -n 's/^Model name: *//p' | head -n 1), $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB RAM, kernel $(uname -r)"
kv disk "$(df -T "$dir" | awk 'NR == 2 {print $1 " (" $2 "), " $5 " free"}')"
kv params "keys $keys, body $body_bytes bytes, $clients clients over $wrk_threads wrk threads, $prefixes prefixes, $segments segments, delete $delete"
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"

log "starting fencekeeper on 127.0.0.1:$port, store file:$data"
start_fk
"${scale[@]}" ready --port "$port" --pid "$fk_pid" --t0 "$t0_start" --timeout 60 >"$tmp/first-start.json" \
    || { tail -n 20 "$tmp/fk.log" >&2; exit 1; }
read -r fs0_bytes fs0_inodes < <(fs_used "$data")

# --- write ---------------------------------------------------------------------------
log "writing $keys keys, $clients clients, $body_bytes-byte bodies"
"${scale[@]}" load --url "http://127.0.0.1:$port" --mode put --count "$keys" --out "$out" \
    --pid "$fk_pid" --data "$data" --body-bytes "$body_bytes" --prefixes "$prefixes" \
    --clients "$clients" --threads "$wrk_threads" --segments "$segments" --stall "$stall" >&2 \
    || problem "writing: not every key was written with 201 (see above)"
kill -0 "$fk_pid" 2>/dev/null || { tail -n 20 "$tmp/fk.log" >&2; echo "bench-scale.sh: fencekeeper died" >&2; exit 1; }
kv after_write_rss_kib "$(status_kib "$fk_pid" VmRSS)"
kv after_write_hwm_kib "$(status_kib "$fk_pid" VmHWM)"
read -r fs1_bytes fs1_inodes < <(fs_used "$data")
kv after_write_df_bytes $((fs1_bytes - fs0_bytes))
kv after_write_df_inodes $((fs1_inodes - fs0_inodes))
log "measuring the data directory (du)"
kv after_write_du_bytes "$(du -s -B1 "$data" | cut -f1)"
kv after_write_du_inodes "$(du -s --inodes "$data" | cut -f1)"

# --- restart -------------------------------------------------------------------------
log "stopping fencekeeper (SIGTERM)"
t=$EPOCHREALTIME
kill -TERM "$fk_pid"
wait "$fk_pid" || problem "fencekeeper exited with $? on SIGTERM"
kv stop_seconds "$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f}')" "$t" "$EPOCHREALTIME")"
fk_pid=""
sync
if [[ $EUID -eq 0 ]] && echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then
    kv page_cache cold
else
    kv page_cache "warm (not root: drop_caches not possible)"
    problem "the page cache could not be dropped (not root): the restart was measured warm"
fi
log "restarting on the same directory ($(awk '$1 == "page_cache" {print $2}' "$meta") page cache)"
start_fk
"${scale[@]}" ready --port "$port" --pid "$fk_pid" --t0 "$t0_start" --timeout "$ready_timeout" >"$out/restart.json" \
    || { tail -n 20 "$tmp/fk.log" >&2; exit 1; }
log "ready: $(cat "$out/restart.json")"
log "checking $sample keys after the restart"
"${scale[@]}" check --port "$port" --keys "$keys" --prefixes "$prefixes" --body-bytes "$body_bytes" \
    --sample "$sample" >"$out/check.json" || problem "the check after the restart found problems"
kv after_check_rss_kib "$(status_kib "$fk_pid" VmRSS)"
kv after_check_hwm_kib "$(status_kib "$fk_pid" VmHWM)"

# --- delete --------------------------------------------------------------------------
if ((delete > 0)); then
    log "deleting $delete keys"
    "${scale[@]}" load --url "http://127.0.0.1:$port" --mode delete --count "$delete" --out "$out" \
        --pid "$fk_pid" --data "$data" --prefixes "$prefixes" --clients "$clients" \
        --threads "$wrk_threads" --segments 1 --stall "$stall" >&2 \
        || problem "deleting: not every key was deleted with 204 (see above)"
    kv after_delete_rss_kib "$(status_kib "$fk_pid" VmRSS)"
    kv after_delete_hwm_kib "$(status_kib "$fk_pid" VmHWM)"
    log "measuring the data directory (du)"
    kv after_delete_du_bytes "$(du -s -B1 "$data" | cut -f1)"
    kv after_delete_du_inodes "$(du -s --inodes "$data" | cut -f1)"
fi

# --- restart after a stop under load --------------------------------------------------
# opened_redo_rows: the redo rows of the latest start's `file store opened` line.
opened_redo_rows() {
    python3 -c 'import json, sys
rows = None
for line in open(sys.argv[1], errors="replace"):
    try:
        o = json.loads(line)
    except ValueError:
        continue
    if isinstance(o, dict) and o.get("msg") == "file store opened":
        rows = o.get("redo_rows")
print("?" if rows is None else rows)' "$tmp/fk.log"
}
if ((load_stop > 0)); then
    n=0
    for how in term kill; do
        n=$((n + 1))
        mkdir -p "$out/load-$how"
        log "restart after load ($how): ${load_stop} s of fresh-key writes, $clients clients, one busy core"
        (while :; do :; done) &
        busy_pid=$!
        wrk -t"$wrk_threads" -c"$clients" -d$((load_stop + 120))s --timeout 30s -s "$repo/scripts/bench/scale.lua" \
            "http://127.0.0.1:$port" -- put $((n * 10000000)) 100000000 "$body_bytes" "$prefixes" \
            "$wrk_threads" "$out/load-$how" 0 >"$out/load-$how/wrk.log" 2>&1 &
        wrk_pid=$!
        sleep "$load_stop"
        t=$EPOCHREALTIME
        if [[ $how == term ]]; then
            kill -TERM "$fk_pid"
            wait "$fk_pid" || problem "fencekeeper exited with $? on SIGTERM under load"
        else
            kill -KILL "$fk_pid"
            wait "$fk_pid" 2>/dev/null || true # 137: killed, as asked
        fi
        kv "load_${how}_stop_seconds" "$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f}')" "$t" "$EPOCHREALTIME")"
        fk_pid=""
        kill "$wrk_pid" "$busy_pid" 2>/dev/null
        wait "$wrk_pid" "$busy_pid" 2>/dev/null || true # 143: they were stopped
        wrk_pid="" busy_pid=""
        kv "load_${how}_writes" "$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import scale
print(sum(r[-1][1] if r else 0 for r in scale.read_progress(sys.argv[2], "put", int(sys.argv[3]))))' \
            "$repo/scripts/bench" "$out/load-$how" "$wrk_threads")"
        sync
        if [[ $EUID -eq 0 ]] && echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then
            kv "load_${how}_page_cache" cold
        else
            kv "load_${how}_page_cache" warm
        fi
        start_fk
        "${scale[@]}" ready --port "$port" --pid "$fk_pid" --t0 "$t0_start" --timeout "$ready_timeout" \
            >"$out/restart-load-$how.json" || { tail -n 20 "$tmp/fk.log" >&2; exit 1; }
        rows="$(opened_redo_rows)"
        kv "load_${how}_redo_rows" "$rows"
        log "ready: $(cat "$out/restart-load-$how.json"); redo rows at start: $rows"
        [[ $how == term && $rows != 0 ]] && problem "a SIGTERM under load left $rows redo rows for the next start"
    done
fi

log "stopping fencekeeper"
kill -TERM "$fk_pid"
wait "$fk_pid" || problem "fencekeeper exited with $? on SIGTERM"
fk_pid=""
kv load "1/5/15-min load average $load_before before, $(cut -d' ' -f1-3 /proc/loadavg) after"
kv elapsed "$((SECONDS - t_start)) s"
joined=""
for p in "${problems[@]}"; do joined+="${joined:+ | }$p"; done
kv problems "$joined"
rc=0
plot_arg=()
[[ -n $plot ]] && plot_arg=(--plot "$plot")
"${scale[@]}" report --out "$out" "${plot_arg[@]}" || rc=1
((${#problems[@]} == 0)) || rc=1
log "results in $out${plot:+, plot in $plot}"
exit $rc
