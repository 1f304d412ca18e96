#!/usr/bin/env bash
# Soak test (not in CI): MINUTES of mixed load with zombie writers, rude clients, and a
# second fencekeeper that is kill -9'ed, SIGTERMed and given fsync faults over and over
# (its whole history checked after every restart). RSS, open fds and latency p50/p99 of
# the never-restarted process are sampled every 10 s into a CSV and plotted with gnuplot.
#
#   bash scripts/soak.sh MINUTES [OUT_DIR]     OUT_DIR defaults to a new /tmp/fk-soak.XXXXXX
#
# Writes OUT_DIR/soak.csv and OUT_DIR/soak.png. Exits non-zero when a history check or a
# zombie check fails, or RSS / open fds are not flat over the last half of the run
# (scripts/soak.py, judge()). Environment: FENCEKEEPER_BIN (default build/fencekeeper,
# built if missing), SOAK_INTERVAL (seconds between samples, default 10).
set -euo pipefail
cd "$(dirname "$0")/.."

minutes=${1:?usage: scripts/soak.sh MINUTES [OUT_DIR]}
out=${2:-$(mktemp -d /tmp/fk-soak.XXXXXX)}
mkdir -p "$out"

bin=${FENCEKEEPER_BIN:-$PWD/build/fencekeeper}
if [[ ! -x $bin || ! -f $(dirname "$bin")/libfk_fsync_fault.so ]]; then
    bash scripts/install-deps.sh test
    cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
    cmake --build build -j"$(nproc)" --target fencekeeper fk_fsync_fault
    bin=$PWD/build/fencekeeper
fi
command -v gnuplot >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gnuplot-nox; }

rc=0
FENCEKEEPER_BIN=$bin python3 scripts/soak.py "$minutes" --csv "$out/soak.csv" \
    --interval "${SOAK_INTERVAL:-10}" || rc=$?

if [[ -s $out/soak.csv ]] && (($(wc -l <"$out/soak.csv") > 2)); then
    gnuplot <<GP
set datafile separator ","
set terminal pngcairo size 1100,700 font ",10"
set output "$out/soak.png"
set multiplot layout 2,1 title "fencekeeper soak: ${minutes} min (steady process; chaos restarts on a second one)"
set key top left
set xlabel "seconds"
set ylabel "RSS (MiB)"
set y2label "open fds"
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
plot "$out/soak.csv" using 1:(\$2/1024) skip 1 with linespoints title "RSS MiB", \
     "" using 1:3 skip 1 axes x1y2 with linespoints title "open fds"
set ylabel "latency (ms)"
unset y2label
unset y2tics
set logscale y
set yrange [*:*]
plot "$out/soak.csv" using 1:4 skip 1 with linespoints title "p50", \
     "" using 1:5 skip 1 with linespoints title "p99"
unset multiplot
GP
    echo "soak: plot $out/soak.png"
fi
echo "soak: csv $out/soak.csv"
exit $rc
