#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz) with clang + ASan + UBSan into build-fuzz/ and
# runs one or all of them for SECONDS each, on a temporary copy of the committed seed
# corpus so that the repository is never written to.
#
#   scripts/fuzz.sh TARGET SECONDS     TARGET: token, names, config, request, txn_body,
#                                      session (or fuzz_NAME)
#   scripts/fuzz.sh all SECONDS        every target that exists, one after the other
#   scripts/fuzz.sh list               the targets this checkout can build
#
# Exits 0 when every run ended without a finding, 1 on a finding (crash, sanitizer
# report, leak, timeout or out-of-memory), printing the reproducer's path; 2 on usage or
# build errors. Environment: FUZZ_JOBS (build parallelism, default 2), FUZZ_KEEP=1 (keep
# the temporary corpus and print where it is), FUZZ_ARGS (extra libFuzzer flags),
# FUZZ_OUT (where reproducers go, default fuzz-out/ in the repository, git-ignored).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build="$repo/build-fuzz"
out="${FUZZ_OUT:-$repo/fuzz-out}"
jobs="${FUZZ_JOBS:-2}"

usage() {
    sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# clang and the libFuzzer runtime (libclang-rt-14-dev holds libclang_rt.fuzzer).
ensure_toolchain() {
    local need=()
    command -v clang++ >/dev/null 2>&1 || need+=(clang)
    if ! compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null &&
        ! compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/*/libclang_rt.fuzzer*.a" >/dev/null; then
        need+=(libclang-rt-14-dev)
    fi
    if ((${#need[@]})); then
        echo "fuzz.sh: installing ${need[*]}" >&2
        local sudo=""
        [[ $(id -u) -eq 0 ]] || sudo="sudo"
        $sudo apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq clang libclang-rt-14-dev >&2
    fi
}

configure() {
    mkdir -p "$build"
    if [[ ! -f "$build/CMakeCache.txt" ]]; then
        CC=clang CXX=clang++ cmake -S "$repo" -B "$build" -DFK_FUZZ=ON \
            -DFK_SANITIZE=address,undefined -DFK_BUILD_TESTS=OFF \
            -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build/configure.log" 2>&1 ||
            { cat "$build/configure.log" >&2; echo "fuzz.sh: configure failed" >&2; exit 2; }
    else
        # Re-run so that targets whose sources appeared since (config, request) are added.
        cmake "$build" >"$build/configure.log" 2>&1 ||
            { cat "$build/configure.log" >&2; echo "fuzz.sh: configure failed" >&2; exit 2; }
    fi
}

# The targets CMake generated for this checkout, as short names.
available() {
    cmake --build "$build" --target help 2>/dev/null |
        sed -n 's/^\.\.\. fuzz_\([a-z_]*\)$/\1/p' | grep -vx all | sort
}

run_one() {
    local name=$1 seconds=$2
    cmake --build "$build" --target "fuzz_$name" -j"$jobs" >"$build/fuzz_$name.build.log" 2>&1 ||
        { cat "$build/fuzz_$name.build.log" >&2; echo "fuzz.sh: build of fuzz_$name failed" >&2; return 2; }

    local work corpus artifacts
    work=$(mktemp -d "${TMPDIR:-/tmp}/fk-fuzz-$name.XXXXXX")
    corpus="$work/corpus"
    artifacts="$out/$name"
    mkdir -p "$corpus" "$artifacts"
    cp -r "$repo/tests/fuzz/corpus/$name/." "$corpus/" 2>/dev/null || true

    # Longer inputs than these only slow the fuzzer down: names stop at 1024 bytes, the
    # request fuzzer's limits are 1 KiB of headers and 4 KiB of body per request; the
    # session fuzzer's 64 KiB bodies need room for two of them pipelined.
    local max_len
    case $name in
    token) max_len=128 ;;
    names) max_len=4096 ;;
    session) max_len=131072 ;;
    *) max_len=16384 ;;
    esac
    # The session fuzzer speaks the request fuzzer's HTTP too: its dictionary adds to that one.
    local dicts=() dict=()
    [[ $name == session ]] && dicts+=("$repo/tests/fuzz/request.dict")
    [[ -f "$repo/tests/fuzz/$name.dict" ]] && dicts+=("$repo/tests/fuzz/$name.dict")
    if ((${#dicts[@]})); then
        cat "${dicts[@]}" >"$work/fuzz.dict"
        dict=(-dict="$work/fuzz.dict")
    fi

    echo "== fuzz_$name for ${seconds}s (corpus copy: $corpus)"
    # UBSan reports must stop the run (the build also makes them fatal); leaks count.
    # TMPDIR: fuzz_config writes its --config file there.
    set +e
    (cd "$work" && exec env TMPDIR="$work" \
        ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:symbolize=1}" \
        UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}" \
        "$build/fuzz/fuzz_$name" "$corpus" "${dict[@]}" \
        -max_total_time="$seconds" -error_exitcode=1 -timeout=10 -rss_limit_mb=2048 \
        -max_len="$max_len" -print_final_stats=1 -artifact_prefix="$artifacts/" \
        ${FUZZ_ARGS:-}) 2>&1 | tee "$work/fuzz.log" | grep -E --line-buffered \
        '^#[0-9]+[[:space:]]+(INITED|DONE)|^(==[0-9]+==|SUMMARY|Test unit written|stat::|Done [0-9]+ runs)|invariant violated|runtime error'
    local rc=${PIPESTATUS[0]}
    set -e
    if [[ $rc != 0 ]] || grep -q 'Test unit written' "$work/fuzz.log"; then
        echo "fuzz.sh: fuzz_$name FOUND A PROBLEM (exit $rc); full log: $work/fuzz.log" >&2
        sed -n 's/.*Test unit written to \(.*\)$/reproducer: \1/p' "$work/fuzz.log" >&2
        echo "replay:  $build/fuzz/fuzz_$name REPRODUCER" >&2
        echo "then add the reproducer to tests/fuzz/corpus/$name/ and a unit test" >&2
        return 1
    fi
    if [[ ${FUZZ_KEEP:-0} == 1 ]]; then
        echo "corpus kept in $corpus ($(ls "$corpus" | wc -l) inputs)"
    else
        rm -rf "$work"
    fi
    return 0
}

[[ $# -ge 1 ]] || usage
target=${1#fuzz_}
ensure_toolchain
configure
if [[ $target == list ]]; then
    available
    exit 0
fi
[[ $# -eq 2 && $2 =~ ^[0-9]+$ && $2 -gt 0 ]] || usage
seconds=$2

if [[ $target == all ]]; then
    mapfile -t targets < <(available)
else
    available | grep -qx "$target" ||
        { echo "fuzz.sh: no target fuzz_$target (have: $(available | tr '\n' ' '))" >&2; exit 2; }
    targets=("$target")
fi

status=0
for t in "${targets[@]}"; do
    run_one "$t" "$seconds" || { r=$?; ((r > status)) && status=$r; }
done
exit "$status"
