#!/usr/bin/env bash
# troupe — builds the libFuzzer targets with clang and runs each for a given time.
#   deploy/fuzz.sh [SECONDS] [TARGET...]
# SECONDS: how long each target runs (default 60). TARGET: text idx config fault ckpt ... (the
# fuzz_<target>.c files of tests/fuzz/; default every one). Targets run one after another.
# The build goes to build-fuzz/ (clang, TROUPE_BUILD_FUZZ=ON, CUDA off as in the sanitizer
# passes of deploy/test.sh, whose stub libcuda.so a machine without a GPU driver cannot load;
# AddressSanitizer +
# UndefinedBehaviorSanitizer, coverage instrumentation of the fuzzed code). Each target starts
# from its seed corpus, tests/data/<target>_corpus (read only), and keeps what it finds in
# build-fuzz/fuzz-work/<target>/ (kept between runs, so a later run goes on from there); a crash
# leaves its input in build-fuzz/fuzz-artifacts/<target>/ (rerun it: build-fuzz/tests/fuzz/
# fuzz_<target> FILE). At the end one line per target: executions, executions per second,
# coverage (edges, features), corpus size, peak memory, and the crashes found.
# Environment: CC (default clang), FUZZ_JOBS (build jobs, default 2), FUZZ_NICE (default 19),
# FUZZ_RSS_MB (libFuzzer's memory limit per target, default 2048), FUZZ_MAX_LEN (default 4096).
# Exit status: 0 when no target found a crash, 1 when one did, 2 on a usage or build error.
set -u -o pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-60}
if ! [[ $secs =~ ^[0-9]+$ ]] || [ "$secs" -lt 1 ]; then
    echo "usage: $0 [SECONDS] [TARGET...]  (SECONDS: a whole number >= 1)" >&2
    exit 2
fi
[ $# -gt 0 ] && shift
all=()
for f in "$root"/tests/fuzz/fuzz_*.c; do
    t=$(basename "$f" .c)
    all+=("${t#fuzz_}")
done
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${all[@]}")
for t in "${targets[@]}"; do
    if [ ! -f "$root/tests/fuzz/fuzz_$t.c" ]; then
        echo "$0: no target '$t' (targets: ${all[*]})" >&2
        exit 2
    fi
done
cc=${CC:-clang}
if ! command -v "$cc" >/dev/null; then
    echo "$0: $cc not found: the fuzzers need clang (libFuzzer)" >&2
    exit 2
fi
build=$root/build-fuzz
nice_n=${FUZZ_NICE:-19}
echo "fuzz: building ${targets[*]} in $build with $cc"
CC=$cc cmake -S "$root" -B "$build" -DTROUPE_BUILD_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DTROUPE_BUILD_BENCH=OFF -DTROUPE_WITH_CUDA=OFF >"$build.configure.log" 2>&1 ||
    { cat "$build.configure.log"; echo "$0: configuring failed" >&2; exit 2; }
for t in "${targets[@]}"; do
    nice -n "$nice_n" cmake --build "$build" -j "${FUZZ_JOBS:-2}" --target "fuzz_$t" 2>&1 |
        tail -n 3 || { echo "$0: building fuzz_$t failed" >&2; exit 2; }
done
summary=()
found=0
for t in "${targets[@]}"; do
    work=$build/fuzz-work/$t
    arts=$build/fuzz-artifacts/$t
    mkdir -p "$work" "$arts"
    seeds=$root/tests/data/${t}_corpus
    dict=()
    [ -f "$root/tests/fuzz/$t.dict" ] && dict=(-dict="$root/tests/fuzz/$t.dict")
    log=$build/fuzz-$t.log
    echo "fuzz: $t for $secs s (log $log)"
    nice -n "$nice_n" "$build/tests/fuzz/fuzz_$t" -max_total_time="$secs" -print_final_stats=1 \
        -rss_limit_mb="${FUZZ_RSS_MB:-2048}" -max_len="${FUZZ_MAX_LEN:-4096}" -timeout=25 \
        -artifact_prefix="$arts/" "${dict[@]}" "$work" "$seeds" >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$log" | tail -n 1)
    last=$(grep -a -E '^#[0-9]+' "$log" | tail -n 1)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p' <<<"$last")
    crashes=$(find "$arts" -type f | wc -l)
    [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ] && found=1
    summary+=("fuzz: target=$t seconds=$secs executions=${execs:-?} exec_per_s=${rate:-?} cov=${cov:-?} ft=${ft:-?} corpus=${corp:-?} peak_rss_mb=${rss:-?} exit=$rc crashes=$crashes")
    if [ "$rc" -ne 0 ]; then
        grep -a -E 'ERROR|SUMMARY|broken|Test unit written' "$log" | head -n 5
    fi
done
printf '%s\n' "${summary[@]}"
exit $found
