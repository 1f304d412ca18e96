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
# NAME_ROUNDS (2), SECTIONS ("sizes churn names"; churn needs sizes), TMPDIR. 11 minutes on the 2-core benchmark VM; peak disk use about 5 GB.
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
SECTIONS=${SECTIONS:-"sizes churn names"}
want() { [[ " $SECTIONS " == *" $1 "* ]]; }

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
    echo "only ${avail_gb} GB free under $WORK; the run needs about 5 GB" >&2
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
want sizes || SIZES=""
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
if want sizes && want churn; then
    run sqlite sqlite "$sq" --phase churn --churn "$CHURN" --churn-txn "$CHURN_TXN"
    run lmdb lmdb "$lm" --phase churn --churn "$CHURN" --churn-txn "$CHURN_TXN"
fi
rm -rf "$sq" "$lm"

section=names
target=$LONG_ROWS
round=0
# tag:engine:name length:SQLite page size (0 = default 4096; set when the file is created)
variants=("sqlite-short:sqlite:0:0" "sqlite-long:sqlite:$LONG_LEN:0"
    "sqlite16k-long:sqlite:$LONG_LEN:16384" "lmdb-short:lmdb:0:0" "lmdb-long:lmdb:$LONG_LEN:0")
want names || variants=()
for v in "${variants[@]}"; do
    IFS=: read -r tag engine len page <<<"$v"
    run "$tag" "$engine" "$WORK/$tag" --phase load --to "$LONG_ROWS" --name-len "$len" \
        --page-size "$page"
done
for ((round = 1; round <= NAME_ROUNDS && ${#variants[@]}; round++)); do
    for v in "${variants[@]}"; do
        IFS=: read -r tag engine len page <<<"$v"
        measure "$tag" "$engine" "$WORK/$tag" --name-len "$len"
    done
done
echo "env ended=$(date -u +%FT%TZ) load=$(loadavg) cold_reopen=$cold" >>"$OUT"

python3 scripts/bench/index_engines_report.py "$OUT" "$SAMPLES"
