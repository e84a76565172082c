#!/usr/bin/env bash
# troupe — a traced 2-rank run and its merge (tests/mpi/test_trace_ranks.c):
#   trace.sh <dir> <trace_check> <troupe> <mpiexec> <args...>
# Runs the program under mpiexec with TROUPE_TRACE=<dir>/t, then checks that both ranks' files
# parse as JSON and hold routine runs, collectives and allreduce phases of their own rank, that
# `troupe trace merge` writes one file holding both ranks, and that its straggler report names
# rank 1 as last, by at least 200 ms, at a collective of the phase test.sleepy (rank 1 slept
# 1000 ms before it: the margin is for a loaded machine, where rank 0 can be held up too).
set -u
dir=$1 check=$2 troupe=$3
shift 3
rm -rf "$dir" && mkdir -p "$dir" || exit 1
fail=0
TROUPE_TRACE="$dir/t" "$@" || { echo "FAIL: the traced run failed"; exit 1; }
for r in 0 1; do
    out=$("$check" "$dir/t.$r.json") || { echo "FAIL: $out"; fail=1; continue; }
    printf '%s\n' "$out"
    for cat in routine collective allreduce wait step; do
        printf '%s\n' "$out" | grep -q "^pid $r $cat [1-9]" ||
            { echo "FAIL: rank $r's trace has no '$cat' event"; fail=1; }
    done
done
report=$("$troupe" trace merge -o "$dir/merged.json" "$dir/t.0.json" "$dir/t.1.json") ||
    { echo "FAIL: troupe trace merge failed"; exit 1; }
printf '%s\n' "$report"
out=$("$check" "$dir/merged.json") || { echo "FAIL: $out"; exit 1; }
for r in 0 1; do
    printf '%s\n' "$out" | grep -q "^pid $r routine [1-9]" ||
        { echo "FAIL: the merged file lacks rank $r's routine runs"; fail=1; }
done
# "  allreduce #N  test.sleepy  <last>  <late by us>" in the per-collective table
late=$(printf '%s\n' "$report" |
    awk '$1 == "allreduce" && $3 == "test.sleepy" && $4 == 1 && $5 >= 200000 { print }')
if [ -z "$late" ]; then
    echo "FAIL: the straggler report does not name rank 1 late by >= 200 ms in test.sleepy"
    fail=1
else
    echo "found: $late"
fi
[ "$fail" -eq 0 ] && echo "PASS: both ranks traced, merged, and rank 1 named as the straggler"
exit "$fail"
