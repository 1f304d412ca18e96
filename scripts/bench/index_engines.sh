#!/usr/bin/env bash
# index_engines.sh: SQLite vs LMDB as the file store's metadata index (issue 31).
# Installs liblmdb-dev/libsqlite3-dev if missing, builds scripts/bench/index_engines.cpp
# into build-bench/, runs it in a temp dir and prints markdown tables. Raw lines go to
# build-bench/index_engines.out, latency samples to build-bench/index_engines-samples/.
# The data is deleted at the end.
#
# The machine is shared, so other jobs' load comes and goes: the engines are measured in
# interleaved rounds on stores that exist side by side, and the tables give the median
# (and range) of the rounds and the percentiles of all their samples pooled.
#
#   sizes: for each of SIZES, grow both stores to that many rows (load phase, fast, not
#          durable), then ROUNDS rounds of MEASURE_SECONDS each of: SQLite with its
#          checkpoints on the writer, SQLite with a checkpointer thread, LMDB (the order
#          rotates each round); then drop the page cache (needs root, else the table
#          says the reopen was warm) and reopen each store cold. The full scan (RSS once
#          every page was read) only at the largest size.
#   churn: delete CHURN keys from each store and write them again (CHURN_TXN per
#          transaction): file size and free pages after each step.
#   names: LONG_ROWS rows with short names and with LONG_LEN-byte names (and SQLite with
#          16 KiB pages), NAME_ROUNDS interleaved rounds each.
#
# Environment: SIZES ("1000000 5000000 10000000"), ROUNDS (3), MEASURE_SECONDS (10),
# BATCH (32), CHURN (250000), CHURN_TXN (1000), LONG_ROWS (200000), LONG_LEN (1024),
# NAME_ROUNDS (2), TMPDIR. About 15 minutes on a 2-core VM; peak disk use about 8 GB.
set -euo pipefail

cd "$(dirname "$0")/../.."
SIZES=${SIZES:-"1000000 5000000 10000000"}
ROUNDS=${ROUNDS:-3}
MEASURE_SECONDS=${MEASURE_SECONDS:-10}
BATCH=${BATCH:-32}
CHURN=${CHURN:-250000}
CHURN_TXN=${CHURN_TXN:-1000}
LONG_ROWS=${LONG_ROWS:-200000}
LONG_LEN=${LONG_LEN:-1024}
NAME_ROUNDS=${NAME_ROUNDS:-2}

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
SAMPLES=build-bench/index_engines-samples
rm -rf "$SAMPLES"
mkdir -p "$SAMPLES"

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

# run TAG ENGINE DIR ARGS...: one phase; its line gets section/target/config/round tags.
run() {
    local tag=$1 engine=$2 dir=$3
    shift 3
    "$BIN" --engine "$engine" --dir "$dir" --batch "$BATCH" "$@" |
        sed "s|\$| section=$section target=$target config=$tag round=${round:-0}|" |
        tee -a "$OUT" >&2
}

# measure TAG ENGINE DIR ARGS...: one round of one configuration.
measure() {
    local tag=$1
    run "$@" --phase measure --seconds "$MEASURE_SECONDS" \
        --samples "$SAMPLES/$section-$target-$tag"
}

loadavg() { cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,; }
: >"$OUT"
echo "env started=$(date -u +%FT%TZ) load=$(loadavg)" \
    "sqlite=$(dpkg-query -W -f '${Version}' libsqlite3-0)" \
    "lmdb=$(dpkg-query -W -f '${Version}' liblmdb0) cpus=$(nproc) kernel=$(uname -r)" \
    "fs=$(df --output=fstype "$WORK" | tail -1) rounds=$ROUNDS seconds=$MEASURE_SECONDS" \
    "batch=$BATCH" >>"$OUT"

section=sizes
sq=$WORK/sqlite
lm=$WORK/lmdb
for target in $SIZES; do
    round=0
    run sqlite sqlite "$sq" --phase load --to "$target"
    run lmdb lmdb "$lm" --phase load --to "$target"
    configs=("sqlite-writer sqlite $sq --ckpt writer" "sqlite-thread sqlite $sq --ckpt thread"
        "lmdb lmdb $lm")
    for ((round = 1; round <= ROUNDS; round++)); do
        for ((i = 0; i < 3; i++)); do
            # shellcheck disable=SC2086 # the config strings are word lists
            measure ${configs[(i + round) % 3]}
        done
    done
    if [[ $target == "${SIZES%% *}" ]]; then
        round=1 # once: background PASSIVE checkpoints alone, to show how far the WAL grows
        measure sqlite-thread0 sqlite "$sq" --ckpt thread --catchup-frames 0
    fi
    round=0
    [[ $target == "${SIZES##* }" ]] && scan=1 || scan=0
    drop_caches
    run sqlite sqlite "$sq" --phase reopen --scan "$scan"
    drop_caches
    run lmdb lmdb "$lm" --phase reopen --scan "$scan"
done

section=churn
run sqlite sqlite "$sq" --phase churn --churn "$CHURN" --churn-txn "$CHURN_TXN"
run lmdb lmdb "$lm" --phase churn --churn "$CHURN" --churn-txn "$CHURN_TXN"
rm -rf "$sq" "$lm"

section=names
target=$LONG_ROWS
round=0
# tag:engine:name length:SQLite page size (0 = default 4096; set when the file is created)
variants=("sqlite-short:sqlite:0:0" "sqlite-long:sqlite:$LONG_LEN:0"
    "sqlite16k-long:sqlite:$LONG_LEN:16384" "lmdb-short:lmdb:0:0" "lmdb-long:lmdb:$LONG_LEN:0")
for v in "${variants[@]}"; do
    IFS=: read -r tag engine len page <<<"$v"
    run "$tag" "$engine" "$WORK/$tag" --phase load --to "$LONG_ROWS" --name-len "$len" \
        --page-size "$page"
done
for ((round = 1; round <= NAME_ROUNDS; round++)); do
    for v in "${variants[@]}"; do
        IFS=: read -r tag engine len page <<<"$v"
        measure "$tag" "$engine" "$WORK/$tag" --name-len "$len"
    done
done
echo "env ended=$(date -u +%FT%TZ) load=$(loadavg) cold_reopen=$cold" >>"$OUT"

python3 - "$OUT" "$SAMPLES" <<'EOF'
import os, statistics, sys

rows = []
for line in open(sys.argv[1]):
    kv = dict(f.split("=", 1) for f in line.split() if "=" in f)
    kv["kind"] = "env" if line.startswith("env ") else kv["phase"]
    rows.append(kv)

def pct(xs, p):
    return xs[min(len(xs) - 1, int(p * (len(xs) - 1) + 0.5))] if xs else 0.0

def samples(section, target, tag):
    b, r = [], []
    with open(os.path.join(sys.argv[2], f"{section}-{target}-{tag}")) as f:
        for line in f:
            k, v = line.split()
            (b if k == "b" else r).append(float(v))
    return sorted(b), sorted(r)

def table(head, body):
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for b in body:
        print("| " + " | ".join(str(x) for x in b) + " |")
    print()

def mib(v): return f"{int(v) / 1048576:.0f}"
def med(rs, k): return statistics.median(float(r[k]) for r in rs)

for r in rows:
    if r["kind"] == "env":
        print("- " + ", ".join(f"{k} {v}" for k, v in r.items() if k != "kind"))
print()

meas = [r for r in rows if r["kind"] == "measure"]
groups = {}
for r in meas:
    groups.setdefault((r["section"], r["target"], r["config"]), []).append(r)

def commit_rows(section):
    out = []
    for (sec, target, tag), rs in groups.items():
        if sec != section:
            continue
        b, rd = samples(sec, target, tag)
        wps = sorted(int(r["writes_per_s"]) for r in rs)
        out.append((target, tag, rs, b, rd, wps))
    out.sort(key=lambda x: (int(x[0]), x[1]))
    return out

print("Batch commits: writes/s (median of the rounds, range), batch latency from BEGIN to "
      "COMMIT returned in ms (all rounds' batches pooled)\n")
table(["rows", "engine", "rounds", "writes/s", "range", "p50", "p99", "p99.9", "max",
       "batches", "writer CPU µs/write", "process CPU µs/write", "WAL peak MiB"],
      [[t, tag, len(rs), int(statistics.median(w)), f"{w[0]}–{w[-1]}",
        f"{pct(b, .5) / 1000:.1f}", f"{pct(b, .99) / 1000:.1f}", f"{pct(b, .999) / 1000:.1f}",
        f"{b[-1] / 1000:.1f}", len(b), f'{med(rs, "writer_cpu_us_per_write"):.0f}',
        f'{med(rs, "process_cpu_us_per_write"):.0f}',
        f'{max(float(r["wal_peak_mib"]) for r in rs):.0f}']
       for t, tag, rs, b, rd, w in commit_rows("sizes")])

print("Point reads during the writes in µs (pooled), peak memory of the process in MiB "
      "(highest of the rounds)\n")
table(["rows", "engine", "reads", "p50", "p99", "p99.9", "max", "VmRSS", "RssAnon", "RssFile"],
      [[t, tag, len(rd), f"{pct(rd, .5):.1f}", f"{pct(rd, .99):.1f}", f"{pct(rd, .999):.0f}",
        f"{rd[-1]:.0f}", f'{max(float(r["peak_rss_mib"]) for r in rs):.0f}',
        f'{max(float(r["peak_anon_mib"]) for r in rs):.0f}',
        f'{max(float(r["peak_file_mib"]) for r in rs):.0f}']
       for t, tag, rs, b, rd, w in commit_rows("sizes")])

print("SQLite checkpointer thread: background PASSIVE checkpoints, and the writer's "
      "catch-up checkpoints (ms; per round)\n")
table(["rows", "engine", "round", "bg ckpts", "bg p50", "bg max", "catch-ups", "catch-up p50",
       "catch-up max", "catch-up busy", "WAL peak MiB"],
      [[r["target"], r["config"], r["round"], r["bg_ckpts"], r["bg_ckpt_p50_ms"],
        r["bg_ckpt_max_ms"], r["catchup_ckpts"], r["catchup_ckpt_p50_ms"],
        r["catchup_ckpt_max_ms"], r["catchup_busy"], r["wal_peak_mib"]]
       for r in meas if "bg_ckpts" in r and r["section"] == "sizes"])

reo = [r for r in rows if r["kind"] == "reopen"]
print("Reopen after dropping the page cache: open, first fence read, first key read (ms); "
      "1,000 random reads (µs); RSS (anon/file) in MiB\n")
table(["rows", "engine", "open", "first fence", "first key", "reads p50", "p99", "max",
       "RSS after reads", "full scan s", "RSS after scan", "file MiB", "free pages"],
      [[r["rows"], r["engine"], r["open_ms"], r["first_fence_ms"], r["first_key_ms"],
        r["cold_p50_us"], r["cold_p99_us"], r["cold_max_us"],
        f'{r["after_reads_rss_mib"]} ({r["after_reads_anon_mib"]}/{r["after_reads_file_mib"]})',
        r.get("scan_s", "-"),
        f'{r["after_scan_rss_mib"]} ({r["after_scan_anon_mib"]}/{r["after_scan_file_mib"]})'
        if "scan_s" in r else "-",
        mib(r["db_bytes"]), f'{r["free_pages"]} of {r["page_count"]}'] for r in reo])

print("Deletes, then the same keys written again (SQLite sizes after a TRUNCATE checkpoint): "
      "file MiB and free pages\n")
table(["rows", "engine", "deleted", "per txn", "before", "after delete", "after re-write",
       "free pages before", "after delete", "after re-write", "delete s", "re-write s"],
      [[r["rows"], r["engine"], r["deleted"], r["txn"], mib(r["before_db_bytes"]),
        mib(r["deleted_db_bytes"]), mib(r["reinserted_db_bytes"]), r["before_free_pages"],
        r["deleted_free_pages"], r["reinserted_free_pages"], r["delete_s"], r["reinsert_s"]]
       for r in rows if r["kind"] == "churn"])

print("Name length: writes/s (median of the rounds), batch ms and read µs pooled\n")
table(["rows", "config", "name bytes", "page", "writes/s", "range", "p50", "p99", "p99.9",
       "max", "read p50", "read p99", "writer CPU µs/write", "file MiB", "collisions"],
      [[t, tag, rs[0]["name_len"], rs[-1].get("page_size", "4096"), int(statistics.median(w)),
        f"{w[0]}–{w[-1]}", f"{pct(b, .5) / 1000:.1f}", f"{pct(b, .99) / 1000:.1f}",
        f"{pct(b, .999) / 1000:.1f}", f"{b[-1] / 1000:.1f}", f"{pct(rd, .5):.1f}",
        f"{pct(rd, .99):.1f}", f'{med(rs, "writer_cpu_us_per_write"):.0f}',
        mib(rs[-1]["db_bytes"]), rs[-1]["collisions"]]
       for t, tag, rs, b, rd, w in commit_rows("names")])

print("Loads (not durable; 100,000 sorted-then-shuffled names per transaction)\n")
table(["section", "engine", "name bytes", "rows", "added", "s", "rows/s"],
      [[r["section"], r["config"], r["name_len"], r["rows"], r["added"], r["seconds"],
        r["rows_per_s"]] for r in rows if r["kind"] == "load"])
EOF
