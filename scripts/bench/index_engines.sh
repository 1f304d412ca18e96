#!/usr/bin/env bash
# index_engines.sh: SQLite vs LMDB as the file store's metadata index (issue 31).
# Installs liblmdb-dev/libsqlite3-dev if missing, builds scripts/bench/index_engines.cpp
# into build-bench/, runs it in a temp dir and prints markdown tables (raw lines go to
# build-bench/index_engines.out). The data is deleted at the end.
#
# Per engine: grow the store to each of SIZES rows (load phase, not timed as a result),
# then measure MEASURE_SECONDS of batch commits with concurrent point reads, then drop the
# page cache (needs root; otherwise the reopen is warm and the table says so) and time a
# cold reopen; at the end delete CHURN keys and write CHURN new ones. Then the same at
# LONG_ROWS rows with short and with LONG_LEN-byte names.
#
# Environment: SIZES ("1000000 5000000 10000000"), MEASURE_SECONDS (20), BATCH (32),
# LONG_ROWS (200000), LONG_LEN (1024), CHURN (1000000), CHURN_TXN (1000), TMPDIR.
# Takes about 20 minutes on a 2-core VM with the defaults and needs about 8 GB of disk.
set -euo pipefail

cd "$(dirname "$0")/../.."
SIZES=${SIZES:-"1000000 5000000 10000000"}
MEASURE_SECONDS=${MEASURE_SECONDS:-20}
BATCH=${BATCH:-32}
LONG_ROWS=${LONG_ROWS:-200000}
LONG_LEN=${LONG_LEN:-1024}
CHURN=${CHURN:-1000000}
CHURN_TXN=${CHURN_TXN:-1000}

missing=()
for pkg in liblmdb-dev libsqlite3-dev; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
    echo "installing ${missing[*]}" >&2
    apt-get install -y "${missing[@]}" >&2
fi

mkdir -p build-bench
g++ -std=c++20 -O2 -Wall -Wextra -Wpedantic -pthread scripts/bench/index_engines.cpp \
    -o build-bench/index_engines -lsqlite3 -llmdb
BIN=build-bench/index_engines
OUT=build-bench/index_engines.out

WORK=$(mktemp -d "${TMPDIR:-/tmp}/index-engines.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
avail_gb=$(df --output=avail -BG "$WORK" | tail -1 | tr -dc 0-9)
if ((avail_gb < 12)); then
    echo "only ${avail_gb} GB free under $WORK; the run needs about 8 GB" >&2
    exit 1
fi

cold=yes
drop_caches() {
    sync
    if ! { echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; then
        cold=no
    fi
}

run() { # engine dir args...
    local engine=$1 dir=$2
    shift 2
    "$BIN" --engine "$engine" --dir "$dir" --batch "$BATCH" "$@" |
        sed "s/\$/ section=$section/" | tee -a "$OUT" >&2
}

: >"$OUT"
{
    echo "env started=$(date -u +%FT%TZ) load=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)" \
        "sqlite=$(dpkg-query -W -f '${Version}' libsqlite3-0)" \
        "lmdb=$(dpkg-query -W -f '${Version}' liblmdb0)" \
        "cpus=$(nproc) kernel=$(uname -r)" \
        "fs=$(df --output=fstype "$WORK" | tail -1)"
} >>"$OUT"

section=sizes
first=1
for engine in sqlite lmdb; do
    dir=$WORK/$engine
    for n in $SIZES; do
        run "$engine" "$dir" --phase load --to "$n"
        if [[ $engine == sqlite ]]; then
            run sqlite "$dir" --phase measure --seconds "$MEASURE_SECONDS" --ckpt writer
            run sqlite "$dir" --phase measure --seconds "$MEASURE_SECONDS" --ckpt thread
            if ((first)); then # background PASSIVE alone: how far the WAL grows
                run sqlite "$dir" --phase measure --seconds "$MEASURE_SECONDS" --ckpt thread \
                    --catchup-frames 0
                first=0
            fi
        else
            run lmdb "$dir" --phase measure --seconds "$MEASURE_SECONDS"
        fi
        drop_caches
        # The full scan (RSS once every page was read) only at the largest size.
        [[ $n == "${SIZES##* }" ]] && scan=1 || scan=0
        run "$engine" "$dir" --phase reopen --scan "$scan"
    done
    run "$engine" "$dir" --phase churn --churn "$CHURN" --churn-txn "$CHURN_TXN"
    rm -rf "$dir"
done

section=names
# engine:name length:SQLite page size (0 = default 4096; set when the file is created)
for variant in sqlite:0:0 sqlite:$LONG_LEN:0 sqlite:$LONG_LEN:16384 lmdb:0:0 lmdb:$LONG_LEN:0; do
    IFS=: read -r engine len page <<<"$variant"
    dir=$WORK/$engine-names
    run "$engine" "$dir" --phase load --to "$LONG_ROWS" --name-len "$len" --page-size "$page"
    run "$engine" "$dir" --phase measure --seconds "$MEASURE_SECONDS" --name-len "$len"
    rm -rf "$dir"
done
echo "env ended=$(date -u +%FT%TZ) load=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)" \
    "cold_reopen=$cold" >>"$OUT"

python3 - "$OUT" <<'EOF'
import sys

rows = []
for line in open(sys.argv[1]):
    kv = dict(f.split("=", 1) for f in line.split() if "=" in f)
    kv["kind"] = "env" if line.startswith("env ") else kv["phase"]
    rows.append(kv)

def ms(v): return f"{float(v) / 1000:.1f}"
def mib(v): return f"{int(v) / 1048576:.0f}"
def who(r): return r["engine"] + (" " + r["ckpt"] if "ckpt" in r else "")
def table(head, body):
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for b in body:
        print("| " + " | ".join(str(x) for x in b) + " |")
    print()

for r in rows:
    if r["kind"] == "env":
        print("- " + ", ".join(f"{k} {v}" for k, v in r.items() if k != "kind"))
print()
meas = [r for r in rows if r["kind"] == "measure"]
short = [r for r in meas if r["section"] == "sizes"]
print("Batch commits (writes/s; batch latency = BEGIN to COMMIT returned, ms)\n")
table(["engine", "rows", "writes/s", "worst 1 s", "p50", "p99", "p99.9", "max", "batches",
       "writer CPU µs/write", "process CPU µs/write", "WAL peak MiB"],
      [[who(r), r["rows"], r["writes_per_s"], r["worst_1s_writes"], ms(r["batch_p50_us"]),
        ms(r["batch_p99_us"]), ms(r["batch_p999_us"]), ms(r["batch_max_us"]), r["batch_n"],
        r["writer_cpu_us_per_write"], r["process_cpu_us_per_write"], r["wal_peak_mib"]]
       for r in short])
print("Point reads during the writes (µs) and memory of the measuring process (MiB)\n")
table(["engine", "rows", "reads", "p50", "p99", "p99.9", "max", "peak VmRSS", "peak RssAnon",
       "peak RssFile"],
      [[who(r), r["rows"], r["read_n"], r["read_p50_us"], r["read_p99_us"], r["read_p999_us"],
        r["read_max_us"], r["peak_rss_mib"], r["peak_anon_mib"], r["peak_file_mib"]]
       for r in short])
print("Checkpoints of `sqlite thread-*` (background PASSIVE; writer catch-up PASSIVE)\n")
table(["rows", "mode", "bg ckpts", "bg p50 ms", "bg max ms", "catch-ups", "catch-up p50 ms",
       "catch-up max ms", "catch-up busy"],
      [[r["rows"], r["ckpt"], r["bg_ckpts"], r["bg_ckpt_p50_ms"], r["bg_ckpt_max_ms"],
        r["catchup_ckpts"], r["catchup_ckpt_p50_ms"], r["catchup_ckpt_max_ms"],
        r["catchup_busy"]] for r in short if "bg_ckpts" in r])
reo = [r for r in rows if r["kind"] == "reopen"]
print("Reopen after dropping the page cache (ms), 1,000 random cold reads (µs), full scan\n")
table(["engine", "rows", "open", "first fence", "first key", "cold p50", "cold p99",
       "cold max", "RSS after reads (anon/file)", "scan s", "RSS after scan (anon/file)",
       "file MiB", "free pages"],
      [[r["engine"], r["rows"], r["open_ms"], r["first_fence_ms"], r["first_key_ms"],
        r["cold_p50_us"], r["cold_p99_us"], r["cold_max_us"],
        f'{r["after_reads_rss_mib"]} ({r["after_reads_anon_mib"]}/{r["after_reads_file_mib"]})',
        r.get("scan_s", "-"),
        f'{r["after_scan_rss_mib"]} ({r["after_scan_anon_mib"]}/{r["after_scan_file_mib"]})'
        if "scan_s" in r else "-",
        mib(r["db_bytes"]), f'{r["free_pages"]} of {r["page_count"]}'] for r in reo])
print("Deletes: file size (MiB) and free pages before, after deleting, after re-inserting\n")
table(["engine", "rows", "deleted", "txn", "before", "after delete", "after re-insert",
       "free pages after delete", "free after re-insert", "delete s", "re-insert s"],
      [[r["engine"], r["rows"], r["deleted"], r["txn"],
        mib(int(r["before_db_bytes"]) + int(r.get("before_wal_bytes", 0))),
        mib(int(r["deleted_db_bytes"]) + int(r.get("deleted_wal_bytes", 0))),
        mib(int(r["reinserted_db_bytes"]) + int(r.get("reinserted_wal_bytes", 0))),
        r["deleted_free_pages"], r["reinserted_free_pages"], r["delete_s"], r["reinsert_s"]]
       for r in rows if r["kind"] == "churn"])
print("Name length (SQLite: --ckpt writer)\n")
table(["engine", "page", "name bytes", "rows", "writes/s", "batch p50", "p99", "p99.9", "max",
       "read p50 µs", "read p99 µs", "file MiB", "WAL MiB", "collisions"],
      [[r["engine"], r.get("page_size", "4096"), r["name_len"] or "~14", r["rows"], r["writes_per_s"], ms(r["batch_p50_us"]),
        ms(r["batch_p99_us"]), ms(r["batch_p999_us"]), ms(r["batch_max_us"]), r["read_p50_us"],
        r["read_p99_us"], mib(r["db_bytes"]), mib(r.get("wal_bytes", 0)), r["collisions"]]
       for r in meas if r["section"] == "names"])
print("Loads (durability off, 100,000 writes per transaction)\n")
table(["engine", "name bytes", "rows", "added", "s", "rows/s"],
      [[r["engine"], r["name_len"], r["rows"], r["added"], r["seconds"], r["rows_per_s"]]
       for r in rows if r["kind"] == "load"])
EOF
